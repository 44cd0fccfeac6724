# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""What a VM's console shows, judged from its pixels alone: no OCR, no I/O.

The console_screenshot module decodes the PNG and hands a small RGB frame (a few hundred pixels wide,
box-averaged) to ``judge``. The classes are the operator guide's, the ones a bake or a gate can honestly
tell apart by colour and layout, so "installing" is told from "wedged in the firmware":

``setup``
    Windows' own screens: Setup, OOBE, a desktop, and also its dark screens (the boot logo, "Getting
    ready"), which draw their content centred or in colour. The machine is installing or running.
``firmware``
    the edk2 (OVMF) firmware's own user interface: the Boot Manager menu (text on black with the
    selected entry drawn as a lit bar across the screen) or the setup browser (a flat light-grey body).
    The machine is wedged in the boot manager, not booting anything.
``bootprompt``
    mostly black with a little grey or white text that starts at the left margin and no menu bar:
    firmware boot lines and "Press any key to boot from CD or DVD". The machine is on its way to a
    boot loader, or waiting for a key the installer CD asks for.
``stop-error``
    one flat blue covering most of the screen: a Windows stop error. Also Windows 11 24H2's black stop
    screen: light text on black, like console text, but set in from the left margin and starting well
    below the top of the screen, where firmware and boot-prompt lines start at the very top-left.
``blank``
    almost every pixel black: no signal, powered off, or the gap between two boots.
``match:<name>``
    the caller's reference image ``name`` has an average hash within a Hamming distance.

Earlier releases named ``setup`` ``graphical`` and ``bootprompt`` (and the firmware menu)
``text-console``; ``ALIASES`` maps those names to today's, and ``canonical`` reads either.

The fingerprint is a 64-bit average hash (8x8 cells, each bit "brighter than the mean"): it tells
layouts apart and ignores small changes, so a progress counter does not change it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import inputs
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import InvalidValue, Refusal

BLANK = "blank"
SETUP = "setup"
FIRMWARE = "firmware"
BOOTPROMPT = "bootprompt"
STOP_ERROR = "stop-error"
CLASSES = (SETUP, FIRMWARE, BOOTPROMPT, STOP_ERROR, BLANK)
# The classes a machine shows before an operating system draws anything: firmware or a boot prompt.
TEXT_CLASSES = (FIRMWARE, BOOTPROMPT)
# The old names (documented until this release), for references and callers that still use them.
ALIASES = {"graphical": SETUP, "text-console": BOOTPROMPT}
MATCH_PREFIX = "match:"

HASH_SIDE = 8
DEFAULT_MATCH_DISTANCE = 6

# Luma thresholds, for box-averaged frames: a 1-pixel text stroke averaged into a 4x4 box still
# reaches LIT, while the noise of a black screen stays under DARK.
DARK = 40
LIT = 56
# Share of the screen that may be lit for it to count as black (a blinking cursor, a stray pixel).
BLANK_LIT_SHARE = 0.0005
# A text console is at least this dark, its lit pixels mostly grey or white, and they start this
# close to the left edge.
TEXT_DARK_SHARE = 0.85
TEXT_GREY_SHARE = 0.7
TEXT_LEFT_MARGIN = 0.15
GREY_SPREAD = 60
# The firmware's Boot Manager menu: the selected entry is a lit bar at least this share of the width.
MENU_BAR_SHARE = 0.3
# The firmware's setup browser: one flat light grey (luma in this range, channels this close) over this share.
BROWSER_GREY = (120, 210)
BROWSER_FLAT_SHARE = 0.45
# A stop error: this share of blue pixels, and one flat colour (the blue) covering this share.
STOP_BLUE_SHARE = 0.6
STOP_FLAT_SHARE = 0.5
# Windows 11 24H2's black stop screen: its text starts at least this far down the screen and this far
# in from the left edge. Firmware and boot-prompt lines start on the first rows at the left edge.
BLACK_STOP_TOP = 0.2
BLACK_STOP_LEFT = 0.04


class Frame(object):
    """``width`` x ``height`` pixels as packed RGB bytes, row by row."""

    def __init__(self, width, height, rgb):
        width, height = int(width), int(height)
        if width < 1 or height < 1:
            raise InvalidValue("a frame needs at least one pixel, got %dx%d" % (width, height))
        if len(rgb) != width * height * 3:
            raise InvalidValue(
                "a %dx%d RGB frame holds %d bytes, got %d" % (width, height, width * height * 3, len(rgb))
            )
        self.width, self.height, self.rgb = width, height, bytes(rgb)

    def _triples(self):
        data = self.rgb
        return (data[index : index + 3] for index in range(0, len(data), 3))

    def colours(self):
        """``{rgb: count}`` of the frame's pixels, each colour as 3 bytes."""
        counts = {}
        for colour in self._triples():
            counts[colour] = counts.get(colour, 0) + 1
        return counts

    def luma_plane(self, colours=None):
        """One luma byte per pixel, row by row (computed once per distinct colour)."""
        table = {c: luma(*c) for c in (colours or self.colours())}
        return bytes(table[c] for c in self._triples())


def _light_grey(r, g, b):
    """The light grey of the firmware's setup browser body (EFI_LIGHTGRAY, about 170/170/170)."""
    return max(r, g, b) - min(r, g, b) <= 24 and BROWSER_GREY[0] <= luma(r, g, b) <= BROWSER_GREY[1]


def luma(r, g, b):
    return (299 * r + 587 * g + 114 * b) // 1000


def is_blue(r, g, b):
    """Saturated blue, from a stop error's light blue (0, 120, 215) to the classic (0, 0, 170)."""
    high, low = max(r, g, b), min(r, g, b)
    if high != b or high < 80 or (high - low) < 0.5 * high:
        return False
    # Hue in degrees of a pixel whose largest channel is blue: 180 (cyan) to 300 (magenta).
    hue = 240 + 60 * (r - g) / float(high - low)
    return 195 <= hue <= 250


_LIT_MASK = bytes(1 if value >= LIT else 0 for value in range(256))


def _lit_top(frame, plane):
    """The first row holding a lit pixel, or None."""
    mask = plane.translate(_LIT_MASK)
    first = mask.find(1)
    return None if first < 0 else first // frame.width


def _lit_span(frame, plane):
    """Leftmost and rightmost column holding a lit pixel, or None."""
    mask = plane.translate(_LIT_MASK)
    left, right = frame.width, -1
    for row in range(0, len(mask), frame.width):
        line = mask[row : row + frame.width]
        first = line.find(1)
        if first >= 0:
            left, right = min(left, first), max(right, line.rfind(1))
    return (left, right) if right >= 0 else None


def _longest_run(frame, plane):
    """The longest horizontal run of lit pixels in any row, in pixels."""
    mask = plane.translate(_LIT_MASK)
    longest = 0
    for row in range(0, len(mask), frame.width):
        line = mask[row : row + frame.width]
        longest = max([longest] + [len(run) for run in line.split(b"\x00")])
    return longest


def measure(frame, colours=None, plane=None):
    """The shares and positions the classes are decided on."""
    colours = colours or frame.colours()
    plane = plane or frame.luma_plane(colours)
    total = float(frame.width * frame.height)
    dark = lit = grey = blue = 0
    flat = {}
    for (r, g, b), count in colours.items():
        value = luma(r, g, b)
        if value < DARK:
            dark += count
        elif value >= LIT:
            lit += count
            if max(r, g, b) - min(r, g, b) <= GREY_SPREAD:
                grey += count
        if is_blue(r, g, b):
            blue += count
        key = (r >> 4, g >> 4, b >> 4)
        flat[key] = flat.get(key, 0) + count
    common = max(flat.items(), key=lambda item: (item[1], item[0]))
    span = _lit_span(frame, plane)
    left, right = span if span else (frame.width, frame.width)
    top = _lit_top(frame, plane)
    return {
        "dark": round(dark / total, 4),
        "lit": round(lit / total, 4),
        "lit_grey": round(grey / float(lit), 4) if lit else 0.0,
        "lit_left": round(left / float(frame.width), 4),
        "lit_centre": round((left + right) / 2.0 / frame.width, 4) if span else 0.5,
        "blue": round(blue / total, 4),
        "flat": round(common[1] / total, 4),
        "flat_is_blue": is_blue(*[c * 16 + 8 for c in common[0]]),
        "flat_is_grey": _light_grey(*[c * 16 + 8 for c in common[0]]),
        "lit_top": round(top / float(frame.height), 4) if top is not None else 1.0,
        "lit_run": round(_longest_run(frame, plane) / float(frame.width), 4),
        "lit_pixels": lit,
    }


def _sure(value, threshold, span):
    """0.5 at the threshold, 1.0 ``span`` beyond it: how clearly a measure passed its test."""
    return round(0.5 + 0.5 * max(0.0, min(1.0, abs(value - threshold) / float(span))), 3)


def classify(features):
    """``(class, confidence)`` from ``measure``'s features."""
    f = features
    if f["flat_is_blue"] and f["flat"] >= STOP_FLAT_SHARE and f["blue"] >= STOP_BLUE_SHARE:
        return STOP_ERROR, _sure(f["blue"], STOP_BLUE_SHARE, 0.3)
    if f["lit"] < BLANK_LIT_SHARE and f["dark"] >= 0.99:
        return BLANK, _sure(f["lit"], BLANK_LIT_SHARE, BLANK_LIT_SHARE)
    if f.get("flat_is_grey") and f["flat"] >= BROWSER_FLAT_SHARE:
        return FIRMWARE, _sure(f["flat"], BROWSER_FLAT_SHARE, 0.3)
    if (
        f["dark"] >= TEXT_DARK_SHARE
        and f["lit_grey"] >= TEXT_GREY_SHARE
        and f["lit_left"] <= TEXT_LEFT_MARGIN
    ):
        text = min(
            _sure(f["dark"], TEXT_DARK_SHARE, 0.1),
            _sure(f["lit_left"], TEXT_LEFT_MARGIN, TEXT_LEFT_MARGIN),
        )
        run = f.get("lit_run", 0.0)
        if (
            f.get("lit_top", 0.0) >= BLACK_STOP_TOP
            and f["lit_left"] >= BLACK_STOP_LEFT
            and run < MENU_BAR_SHARE
        ):
            # Text set in and low on a black screen: Windows 11 24H2's stop screen, not firmware lines.
            return STOP_ERROR, min(text, _sure(f["lit_top"], BLACK_STOP_TOP, BLACK_STOP_TOP))
        if run >= MENU_BAR_SHARE:
            return FIRMWARE, min(text, _sure(run, MENU_BAR_SHARE, 0.3))
        return BOOTPROMPT, min(text, _sure(run, MENU_BAR_SHARE, MENU_BAR_SHARE))
    # Rich content is clear; a dark screen with centred or coloured content is Windows', less surely.
    return SETUP, _sure(f["dark"], TEXT_DARK_SHARE, 0.5) if f["dark"] < TEXT_DARK_SHARE else 0.6


def canonical(name):
    """Today's name of a console class given by its current or its old name (``match:`` names kept)."""
    return ALIASES.get(name, name)


def average_hash(frame, plane=None):
    """64-bit average hash as 16 hex digits: each of 8x8 cells brighter than the cells' mean or not."""
    plane = plane or frame.luma_plane()
    width, height = frame.width, frame.height
    cols = [x * width // HASH_SIDE for x in range(HASH_SIDE + 1)]
    sums = [0] * (HASH_SIDE * HASH_SIDE)
    counts = [0] * (HASH_SIDE * HASH_SIDE)
    for y in range(height):
        base = (y * HASH_SIDE // height) * HASH_SIDE
        row = plane[y * width : (y + 1) * width]
        for cell in range(HASH_SIDE):
            sums[base + cell] += sum(row[cols[cell] : cols[cell + 1]])
            counts[base + cell] += cols[cell + 1] - cols[cell]
    means = [sums[i] / float(counts[i]) if counts[i] else 0.0 for i in range(len(sums))]
    average = sum(means) / len(means)
    bits = 0
    for value in means:
        bits = (bits << 1) | (1 if value > average else 0)
    return "%016x" % bits


def hamming(first, second):
    """Bits that differ between two fingerprints."""
    return bin(int(first, 16) ^ int(second, 16)).count("1")


def best_match(fingerprint, references, max_distance=DEFAULT_MATCH_DISTANCE):
    """``(name, distance)`` of the nearest reference within ``max_distance``, else ``(None, None)``."""
    found = sorted((hamming(fingerprint, print_), name) for name, print_ in (references or {}).items())
    if found and found[0][0] <= max_distance:
        return found[0][1], found[0][0]
    return None, None


def unchanged(fingerprint, previous, previous_time, now, stuck_after):
    """How long the console has shown the same fingerprint.

    ``previous_time`` is when ``previous`` was first seen. Returns ``unchanged_for`` (seconds),
    ``since`` (when the current fingerprint was first seen) and ``stuck`` (``stuck_after`` > 0 and
    reached).
    """
    if previous and fingerprint == previous and previous_time is not None:
        since = float(previous_time)
    else:
        since = float(now)
    held = max(0.0, float(now) - since)
    return {
        "unchanged_for": int(held),
        "since": since,
        "stuck": bool(stuck_after and stuck_after > 0 and held >= stuck_after),
    }


def judge(frame, references=None, max_distance=DEFAULT_MATCH_DISTANCE):
    """Class, confidence and fingerprint of a frame; a reference within reach names the class."""
    colours = frame.colours()
    plane = frame.luma_plane(colours)
    features = measure(frame, colours, plane)
    base, confidence = classify(features)
    fingerprint = average_hash(frame, plane)
    name, distance = best_match(fingerprint, references, max_distance)
    verdict = {
        "class": base,
        "base_class": base,
        "confidence": confidence,
        "fingerprint": fingerprint,
        "features": features,
        "match": name or "",
        "distance": distance,
    }
    if name is not None:
        verdict["class"] = MATCH_PREFIX + name
        verdict["confidence"] = round(1.0 - distance / float(HASH_SIDE * HASH_SIDE), 3)
    return verdict


# A VNC screenshot is a few hundred KiB; anything far larger is not one.
MAX_SCREENSHOT_BYTES = 64 * 1024 * 1024


def check_options(match_distance, timeout, stuck_after):
    """Refuse options that cannot describe a screenshot request, before anything is read."""
    if isinstance(match_distance, bool) or not isinstance(match_distance, int) or match_distance < 0:
        raise Refusal(
            "option match_distance",
            "%r is not a Hamming distance: it counts differing bits, 0 to %d"
            % (match_distance, HASH_SIDE * HASH_SIDE),
            "give 0 for an exact match, or the default %d" % DEFAULT_MATCH_DISTANCE,
        )
    inputs.positive(timeout, "timeout")
    if stuck_after is not None and (isinstance(stuck_after, bool) or stuck_after < 0):
        raise Refusal(
            "option stuck_after",
            "%r is not a number of seconds" % (stuck_after,),
            "give 0 to never report stuck, or the seconds after which an unchanged screen is",
        )


def running_phase(kind, where, instance):
    """The phase of an instance whose console can be read; refuses one that is absent or not Running."""
    if instance is None:
        raise Refusal(
            "%s %s" % (kind, where),
            "does not exist: the VM is not running, so there is no console to read",
            "start the VM (runStrategy Always) and ask again",
            vmi_phase="",
        )
    phase = (instance.get("status") or {}).get("phase") or ""
    if phase != "Running":
        raise Refusal(
            "%s %s" % (kind, where),
            "is %s, not Running: there is no console to read" % (phase or "pending"),
            "wait until it runs",
            vmi_phase=phase,
        )
    return phase


# The bake's console rules -----------------------------------------------------------------------------
# While a bake's VM runs, the bake wait follows its console in rounds: screenshots (one every poll) until
# there is news, then one line of progress. What follows decides news, what is fatal and what is kept.

# Failed screenshots in a row, and console rounds, after which the wait goes on without screenshots.
MAX_SCREEN_ERRORS = 3
MAX_SCREEN_ROUNDS = 100


def bake_memory(enabled):
    """What the bake wait remembers of the console between rounds."""
    return {
        "enabled": bool(enabled),
        "class": "",
        "base": "",
        "print": "",
        "since": 0.0,
        "stuck": False,
        "drawn": False,
        "errors": 0,
        "rounds": 0,
        "round_started": None,
        "round_dest": None,
    }


def shot_fatal(memory, shot):
    """``stop-error``, ``reinstall`` or None.

    Firmware or a boot prompt in two screenshots in a row, after Windows had drawn its own screens,
    means the machine went back to its firmware: the CD booting before the disk (Setup starts over for
    ever), or a disk that does not boot. One screenshot of text is not enough: the firmware prints a
    line on every boot.
    """
    base = shot.get("base_class") or ""
    if base == STOP_ERROR:
        return "stop-error"
    if base in TEXT_CLASSES and memory["base"] in TEXT_CLASSES and memory["drawn"]:
        return "reinstall"
    return None


def shot_news(memory, shot, now, stuck_after, deadline):
    """Whether this screenshot ends the console round.

    News: a screenshot that failed, a new class, a fatal screen, a first "unchanged" notice, or a new
    picture once half of ``stuck_after`` has passed in the round (the screenshot compares with the picture
    the round started from, so a picture that changes and then freezes needs a new round), or the deadline.
    """
    if not shot.get("fingerprint"):
        return True
    if (shot.get("class") or "") != memory["class"] or shot_fatal(memory, shot):
        return True
    if shot.get("stuck") and not memory["stuck"]:
        return True
    started = memory["round_started"] if memory["round_started"] is not None else now
    moved = shot["fingerprint"] != memory["print"]
    if stuck_after and stuck_after > 0 and moved and now - started >= stuck_after / 2.0:
        return True
    return now >= deadline


def remember(memory, shot, running):
    """The memory after a round that ended with ``shot`` (``running``: the VM's status is Running)."""
    kept = dict(memory)
    base = shot.get("base_class") or ""
    kept["class"] = shot.get("class") or memory["class"]
    kept["base"] = base or memory["base"]
    if shot.get("fingerprint"):
        kept["print"] = shot["fingerprint"]
        kept["since"] = shot.get("since", memory["since"])
        kept["stuck"] = bool(shot.get("stuck", memory["stuck"]))
    kept["drawn"] = memory["drawn"] or base in (SETUP, STOP_ERROR)
    kept["errors"] = 0 if shot.get("fingerprint") or not running else memory["errors"] + 1
    kept["rounds"] = memory["rounds"] + 1
    return kept


def give_up(memory):
    """Why the wait stops reading the console, or None."""
    if memory["errors"] >= MAX_SCREEN_ERRORS:
        return "the last %d failed" % MAX_SCREEN_ERRORS
    if memory["rounds"] >= MAX_SCREEN_ROUNDS:
        return "the console changed %d times" % memory["rounds"]
    return None


def note(shot, memory, running):
    """What the progress line says of the console after a round."""
    if shot.get("fingerprint"):
        words = "console %s (%s)" % (shot.get("class"), shot.get("confidence"))
        if shot.get("stuck"):
            words += ", unchanged for %ss" % shot.get("unchanged_for")
        return words
    if running:
        return "console unreadable (%d of %d): %s" % (
            memory["errors"] + 1,
            MAX_SCREEN_ERRORS,
            shot.get("msg") or "no answer",
        )
    return ""


def stop_error_message(vm, elapsed, console_dir=""):
    saved = (", saved in %s" % console_dir) if console_dir else ""
    return (
        "VM %s shows a Windows stop error on its console after %ds: Windows crashed during the install "
        "(a driver, the disk controller, memory) and the bake will not finish; the stop code is on the "
        "screen%s." % (vm, elapsed, saved)
    )


def reinstall_message(vm, elapsed):
    return (
        'VM %s shows console text again after a reboot (%ds in; firmware lines or "Press any key to boot '
        'from CD or DVD"), in two screenshots in a row: the installer CD is booting before the disk, so '
        "Setup starts over instead of continuing from the disk (it reinstalls for ever), or the disk does "
        "not boot. The disk must have bootOrder 1 and the CD bootOrder 2." % (vm, elapsed)
    )
