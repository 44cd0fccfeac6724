"""Console classification on screens drawn here with Pillow, at the resolutions firmware and Windows use,
through the module's own PNG decoding: each class, the dark screens that are not console text,
references, and the stuck signal."""

import io
import sys

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.windows import console
from ansible_collections.goldenimage.pipeline.plugins.modules import console_screenshot as module
from PIL import Image, ImageDraw, ImageFont

WHITE, GREY, BLACK = (255, 255, 255), (170, 170, 170), (0, 0, 0)


def font(size):
    return ImageFont.load_default(size=size)


def png(image):
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def judge(image, references=None, distance=console.DEFAULT_MATCH_DISTANCE):
    frame, _size = module.frame_from_png(png(image))
    prints = {
        name: console.average_hash(module.frame_from_png(png(ref))[0])
        for name, ref in (references or {}).items()
    }
    return console.judge(frame, prints, distance)


def screen(size, colour=BLACK):
    image = Image.new("RGB", size, colour)
    return image, ImageDraw.Draw(image)


# Screens -------------------------------------------------------------------------------------------


def black(size=(1024, 768), cursor=False):
    image, draw = screen(size)
    if cursor:  # the firmware's blinking cursor, top left
        draw.rectangle((0, 14, 7, 15), fill=GREY)
    return image


def firmware_text(size, lines, colour=GREY, pitch=19, size_px=15):
    image, draw = screen(size)
    for row, line in enumerate(lines):
        draw.text((0, row * pitch), line, fill=colour, font=font(size_px))
    return image


PROMPT = ["Press any key to boot from CD or DVD...."]
BDS = [
    'BdsDxe: loading Boot0001 "UEFI QEMU HARDDISK QM00001 " from PciRoot(0x0)/Pci(0x1F,0x2)',
    'BdsDxe: starting Boot0001 "UEFI QEMU HARDDISK QM00001 " from PciRoot(0x0)/Pci(0x1F,0x2)',
    "",
    "Boot Failed. EFI Hard Drive",
    "Press any key to boot from CD or DVD....",
]


def boot_manager(size, selected=1, pitch=19, size_px=15):
    """edk2's Boot Manager menu: a title, the boot options, the selected one as a light-grey bar with
    black text across the screen, and the key help at the bottom."""
    image, draw = screen(size)
    width, height = size
    draw.text((0, 0), "Boot Manager Menu", fill=WHITE, font=font(size_px))
    entries = ["UEFI QEMU DVD-ROM QM00005", "UEFI QEMU HARDDISK QM00001", "EFI Internal Shell"]
    for row, entry in enumerate(entries):
        top = (3 + row) * pitch
        if row == selected:
            draw.rectangle((0, top, int(width * 0.7), top + pitch - 2), fill=GREY)
            draw.text((8, top), entry, fill=BLACK, font=font(size_px))
        else:
            draw.text((8, top), entry, fill=GREY, font=font(size_px))
    keys = "^v=Move Highlight  <Enter>=Select Entry  Esc=Exit"
    draw.text((0, height - 2 * pitch), keys, fill=GREY, font=font(size_px))
    return image


def setup_browser(size):
    """edk2's setup browser (the front page): a light-grey body with blue text, a black help bar."""
    image, draw = screen(size, GREY)
    width, height = size
    draw.rectangle((0, 0, width, height // 12), fill=BLACK)
    draw.text((width // 3, 8), "Standard PC (Q35 + ICH9, 2009)", fill=WHITE, font=font(15))
    menu = ("Device Manager", "Boot Manager", "Boot Maintenance Manager", "Continue", "Reset")
    for row, line in enumerate(menu):
        draw.text((40, height // 6 + row * 24), line, fill=(0, 0, 170), font=font(15))
    draw.rectangle((0, height - height // 10, width, height), fill=BLACK)
    return image


def stop_error(size, blue, text=WHITE, progress="0% complete"):
    image, draw = screen(size, blue)
    width, height = size
    x = width // 8
    draw.text((x, height // 8), ":(", fill=text, font=font(height // 6))
    lines = ("Your device ran into a problem and needs to restart.", "", progress)
    for row, line in enumerate(lines):
        draw.text((x, height * 4 // 10 + row * height // 20), line, fill=text, font=font(height // 28))
    draw.rectangle((x, height * 7 // 10, x + height // 8, height * 7 // 10 + height // 8), fill=text)
    return image


def black_stop(size, progress="0% complete", left=8):
    """Windows 11 24H2's stop screen: no sad face, no QR code, light text on black, set in from the left
    and starting about a third of the way down."""
    image, draw = screen(size)
    width, height = size
    x = width // left
    lines = (
        ("Your device ran into a problem and needs to restart.", height // 22),
        (progress, height // 30),
        ("", 0),
        ("Stop code: CRITICAL_PROCESS_DIED", height // 40),
        ("What failed: ntoskrnl.exe", height // 40),
    )
    y = height * 3 // 10
    for line, size_px in lines:
        if line:
            draw.text((x, y), line, fill=WHITE, font=font(size_px))
        y += max(size_px, height // 40) * 2
    return image


def classic_stop(size):
    image, draw = screen(size, (0, 0, 170))
    lines = [
        "A problem has been detected and Windows has been shut down to prevent damage",
        "to your computer.",
        "",
        "INACCESSIBLE_BOOT_DEVICE",
        "",
        "Technical information:",
        "*** STOP: 0x0000007B (0xFFFFF880009A97E8,0xFFFFFFFFC0000034,0x0000000000000000)",
    ]
    for row, line in enumerate(lines):
        draw.text((8, 8 + row * 16), line, fill=GREY, font=font(13))
    return image


def setup_window(size, progress=42):
    image, draw = screen(size)
    width, height = size
    for y in range(height):
        draw.line(
            (0, y, width, y), fill=(30 + 40 * y // height, 30 + 50 * y // height, 100 + 90 * y // height)
        )
    left, top = width // 5, height // 4
    draw.rectangle((left, top, width - left, height - top), fill=(240, 240, 240))
    draw.text((left + 20, top + 20), "Windows Setup", fill=(10, 10, 10), font=font(18))
    draw.text((left + 20, top + 60), "Installing Windows %d%%" % progress, fill=(10, 10, 10), font=font(16))
    draw.rectangle((left + 20, top + 120, left + 20 + 3 * progress, top + 135), fill=(0, 120, 215))
    return image


def desktop(size):
    image, draw = screen(size)
    width, height = size
    for x in range(width):
        draw.line((x, 0, x, height), fill=(0, 60 + 100 * x // width, 140 + 80 * x // width))
    draw.rectangle((0, height - 48, width, height), fill=(32, 32, 32))
    for index in range(6):
        draw.rectangle(
            (width // 2 - 150 + index * 50, height - 40, width // 2 - 118 + index * 50, height - 8),
            fill=WHITE,
        )
    draw.rectangle((40, 40, 420, 300), fill=WHITE)
    draw.text((60, 60), "Administrator: Windows PowerShell", fill=BLACK, font=font(14))
    return image


def boot_logo(size):
    """Windows' own dark boot screen: a centred blue logo and white spinner dots."""
    image, draw = screen(size)
    width, height = size
    cx, cy, side = width // 2, height * 2 // 5, height // 12
    for dx in (-side - 4, 4):
        for dy in (-side - 4, 4):
            draw.rectangle((cx + dx, cy + dy, cx + dx + side, cy + dy + side), fill=(0, 120, 215))
    for index in range(5):
        x = cx - 30 + index * 14
        draw.ellipse((x, height * 3 // 4, x + 5, height * 3 // 4 + 5), fill=WHITE)
    return image


def getting_ready(size):
    """Specialize/OOBE's dark screen: centred white text and a spinner."""
    image, draw = screen(size)
    width, height = size
    text = "Getting ready"
    draw.text((width // 2 - 60, height * 3 // 5), text, fill=WHITE, font=font(22))
    for index in range(5):
        draw.ellipse(
            (width // 2 - 20 + index * 9, height // 2, width // 2 - 16 + index * 9, height // 2 + 4),
            fill=WHITE,
        )
    return image


CASES = {
    "black": (black(), console.BLANK),
    "black 800x600 with cursor": (black((800, 600), cursor=True), console.BLANK),
    "prompt 800x600": (firmware_text((800, 600), PROMPT), console.BOOTPROMPT),
    "prompt 1024x768 white": (firmware_text((1024, 768), PROMPT, WHITE), console.BOOTPROMPT),
    "firmware 1280x800": (firmware_text((1280, 800), BDS), console.BOOTPROMPT),
    "firmware 640x480": (firmware_text((640, 480), BDS, pitch=16, size_px=12), console.BOOTPROMPT),
    "boot manager 1024x768": (boot_manager((1024, 768)), console.FIRMWARE),
    "boot manager 800x600 first entry": (boot_manager((800, 600), 0, pitch=16, size_px=13), console.FIRMWARE),
    "boot manager 1280x800": (boot_manager((1280, 800), 2), console.FIRMWARE),
    "setup browser 1024x768": (setup_browser((1024, 768)), console.FIRMWARE),
    "setup browser 800x600": (setup_browser((800, 600)), console.FIRMWARE),
    "stop error 1024x768": (stop_error((1024, 768), (0, 120, 215)), console.STOP_ERROR),
    "stop error 1280x800 darker": (
        stop_error((1280, 800), (16, 113, 170), progress="100% complete"),
        console.STOP_ERROR,
    ),
    "classic stop 640x480": (classic_stop((640, 480)), console.STOP_ERROR),
    "24H2 black stop 1024x768": (black_stop((1024, 768)), console.STOP_ERROR),
    "24H2 black stop 1280x800": (black_stop((1280, 800), "100% complete", left=10), console.STOP_ERROR),
    "24H2 black stop 800x600": (black_stop((800, 600), "20% complete", left=12), console.STOP_ERROR),
    "setup 1024x768": (setup_window((1024, 768)), console.SETUP),
    "setup 800x600": (setup_window((800, 600), 80), console.SETUP),
    "desktop 1280x800": (desktop((1280, 800)), console.SETUP),
    "boot logo": (boot_logo((1024, 768)), console.SETUP),
    "getting ready": (getting_ready((1024, 768)), console.SETUP),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_class(name):
    image, expected = CASES[name]
    verdict = judge(image)
    assert verdict["class"] == expected == verdict["base_class"], (name, verdict["features"])
    assert 0.5 <= verdict["confidence"] <= 1.0
    assert verdict["match"] == "" and verdict["distance"] is None


def test_the_classes_are_the_guides_and_the_old_names_map_to_them():
    assert set(console.CLASSES) == {"setup", "firmware", "bootprompt", "stop-error", "blank"}
    assert {name for _image, name in CASES.values()} == set(console.CLASSES)
    assert console.canonical("graphical") == "setup" and console.canonical("text-console") == "bootprompt"
    assert console.canonical("firmware") == "firmware" and console.canonical("match:x") == "match:x"


def test_installing_is_told_from_wedged_in_the_boot_manager():
    """The same firmware text, with and without the menu's selection bar; Setup's window is neither."""
    assert judge(firmware_text((1024, 768), BDS))["class"] == console.BOOTPROMPT
    assert judge(boot_manager((1024, 768)))["class"] == console.FIRMWARE
    assert judge(setup_window((1024, 768)))["class"] == console.SETUP


def test_text_far_from_the_left_margin_is_not_console_text():
    image, draw = screen((1024, 768))
    draw.text((400, 300), "Press any key to boot from CD or DVD....", fill=GREY, font=font(15))
    assert judge(image)["class"] == console.SETUP


def test_a_blue_backdrop_with_a_window_is_not_a_stop_error():
    image, draw = screen((1024, 768), (0, 120, 215))
    draw.rectangle((150, 120, 874, 648), fill=(240, 240, 240))
    assert judge(image)["class"] == console.SETUP


def test_sure_cases_are_surer_than_borderline_ones():
    assert judge(black())["confidence"] == 1.0
    assert judge(stop_error((1024, 768), (0, 120, 215)))["confidence"] >= 0.9
    assert judge(boot_logo((1024, 768)))["confidence"] < judge(desktop((1280, 800)))["confidence"]


# Fingerprints and references -----------------------------------------------------------------------


def test_fingerprint_ignores_a_progress_counter_and_tells_screens_apart():
    first, later = judge(setup_window((1024, 768), 41)), judge(setup_window((1024, 768), 42))
    assert console.hamming(first["fingerprint"], later["fingerprint"]) <= 2
    prints = {judge(image)["fingerprint"] for image, _class in CASES.values()}
    assert len(prints) >= 10
    assert judge(black())["fingerprint"] == "0000000000000000"


def test_references_name_the_nearest_match_within_reach():
    refs = {"setup": setup_window((1024, 768), 10), "stop": stop_error((1024, 768), (0, 120, 215))}
    near = judge(setup_window((1024, 768), 55), refs)
    assert near["class"] == "match:setup" and near["base_class"] == console.SETUP
    assert near["match"] == "setup" and near["distance"] <= 2
    assert near["confidence"] == round(1 - near["distance"] / 64.0, 3)
    # A different resolution of the same layout still matches: the hash is taken on 8x8 cells.
    assert judge(stop_error((800, 600), (0, 120, 215)), refs)["class"] == "match:stop"
    far = judge(desktop((1280, 800)), refs)
    assert far["class"] == console.SETUP and far["match"] == ""
    # Every fingerprint is within 64 bits of every other.
    assert judge(desktop((1280, 800)), refs, distance=64)["class"].startswith("match:")


def test_best_match_prefers_the_nearest_then_the_name():
    prints = {"b": "00000000000000ff", "a": "00000000000000ff", "c": "0000000000000000"}
    assert console.best_match("00000000000000ff", prints) == ("a", 0)
    assert console.best_match("ffffffffffffffff", prints) == (None, None)
    assert console.best_match("000000000000000f", prints, max_distance=4) == ("a", 4)
    assert console.best_match("0000000000000000", {}) == (None, None)
    assert console.hamming("ff", "0f") == 4


# Stuck -------------------------------------------------------------------------------------------


def test_unchanged_counts_from_when_the_fingerprint_was_first_seen():
    held = console.unchanged("abcd", "abcd", 1000.0, 1900.0, stuck_after=900)
    assert held == {"unchanged_for": 900, "since": 1000.0, "stuck": True}
    assert console.unchanged("abcd", "abcd", 1000.0, 1899.0, 900)["stuck"] is False
    moved = console.unchanged("abce", "abcd", 1000.0, 1900.0, 900)
    assert moved == {"unchanged_for": 0, "since": 1900.0, "stuck": False}
    assert console.unchanged("abcd", None, None, 1900.0, 900)["since"] == 1900.0
    assert console.unchanged("abcd", "abcd", 0.0, 99999.0, 0)["stuck"] is False


def test_a_static_screen_is_stuck_and_a_new_one_is_not():
    first = judge(firmware_text((1024, 768), BDS))
    again = judge(firmware_text((1024, 768), BDS))
    held = console.unchanged(again["fingerprint"], first["fingerprint"], 100.0, 100.0 + 1800, 1800)
    assert held["stuck"] is True and held["unchanged_for"] == 1800
    other = judge(setup_window((1024, 768)))
    assert (
        console.unchanged(other["fingerprint"], first["fingerprint"], 100.0, 1900.0, 1800)["stuck"] is False
    )


# Decoding ---------------------------------------------------------------------------------------


def test_frames_are_reduced_and_checked():
    frame, size = module.frame_from_png(png(black((1280, 800))))
    assert size == (1280, 800) and (frame.width, frame.height) == (256, 160)
    frame, size = module.frame_from_png(png(black((200, 100))))
    assert (frame.width, frame.height) == (200, 100)
    with pytest.raises(PipelineError, match="holds 12 bytes, got 3"):
        console.Frame(2, 2, b"\0\0\0")
    with pytest.raises(PipelineError, match="at least one pixel"):
        console.Frame(0, 1, b"")


def test_what_is_not_a_png_is_refused():
    jpeg = io.BytesIO()
    black((64, 48)).save(jpeg, format="JPEG")
    with pytest.raises(module.NotAnImage, match="a JPEG image, not a PNG"):
        module.frame_from_png(jpeg.getvalue())
    with pytest.raises(module.NotAnImage):
        module.frame_from_png(b'{"kind":"Status"}')


def test_without_pillow_the_message_says_install_it(monkeypatch):
    data = png(black((8, 8)))
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(module.MissingPillow):
        module.frame_from_png(data)
    assert "install Pillow" in module.PILLOW_REASON


@pytest.mark.parametrize(
    "options, option",
    [
        ((-1, 30, 1800), "match_distance"),
        ((True, 30, 1800), "match_distance"),
        ((6, 0, 1800), "timeout"),
        ((6, -5, 1800), "timeout"),
        ((6, 30, -1), "stuck_after"),
    ],
)
def test_options_that_cannot_describe_a_screenshot_are_refused(options, option):
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal

    with pytest.raises(Refusal) as err:
        console.check_options(*options)
    assert err.value.msg.startswith("option %s: " % option)
    assert err.value.move


def test_good_options_pass():
    console.check_options(0, 1, 0)
    console.check_options(6, 30, None)


def test_only_a_running_instance_has_a_console():
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal

    with pytest.raises(Refusal) as err:
        console.running_phase("VirtualMachineInstance", "ns/vm", None)
    assert err.value.msg.startswith("VirtualMachineInstance ns/vm: does not exist: the VM is not running")
    assert err.value.fields["vmi_phase"] == ""
    with pytest.raises(Refusal) as err:
        console.running_phase("VirtualMachineInstance", "ns/vm", {"status": {"phase": "Scheduling"}})
    assert "is Scheduling, not Running: there is no console to read" in err.value.msg
    assert err.value.fields["vmi_phase"] == "Scheduling"
    with pytest.raises(Refusal, match="is pending, not Running"):
        console.running_phase("VirtualMachineInstance", "ns/vm", {"status": {}})
    assert (
        console.running_phase("VirtualMachineInstance", "ns/vm", {"status": {"phase": "Running"}})
        == "Running"
    )


def test_two_24h2_black_stop_screens_in_a_row_are_a_stop_error_not_a_reinstall():
    """The black stop screen looks like console text; read as a boot prompt, two in a row after Windows
    had drawn would say "the CD boots before the disk" when Windows crashed."""
    memory = console.bake_memory(True)
    memory = console.remember(memory, judge(setup_window((1024, 768))), True)
    first = judge(black_stop((1024, 768), "0% complete"))
    memory = console.remember(memory, first, True)
    second = judge(black_stop((1024, 768), "10% complete"))
    assert console.shot_fatal(memory, second) == "stop-error", (first["features"], second["features"])
    # Firmware lines after a reboot still read as the CD booting first.
    lines = judge(firmware_text((1024, 768), BDS))
    memory = console.remember(
        console.remember(console.bake_memory(True), judge(setup_window((1024, 768))), True), lines, True
    )
    assert console.shot_fatal(memory, lines) == "reinstall"
