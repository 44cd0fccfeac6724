"""The remaster rules: install image plausibility, boot images, the xorriso command, El Torito parsing."""

from __future__ import annotations

import re

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.windows import iso

MIB = iso.MIB
TREE = {
    "boot/etfsboot.com": 4096,
    "efi/microsoft/boot/efisys.bin": 1474560,
    "efi/microsoft/boot/efisys_noprompt.bin": 1474560,
    "sources/install.wim": 5 * 1024 * MIB,
    "setup.exe": 100000,
}

REPORT = """El Torito catalog  : 38  1
El Torito images   :   N  Pltf  B   Emul  Ld_seg  Hdpt  Ldsiz         LBA
El Torito boot img :   1  BIOS  y   none  0x0000  0x00      8          39
El Torito boot img :   2  UEFI  y   none  0x0000  0x00   2880          41
El Torito img path :   1  /boot/etfsboot.com
El Torito img path :   2  /efi/microsoft/boot/efisys_noprompt.bin
"""


def test_real_install_image_is_found():
    assert iso.install_image(TREE) == {"path": "sources/install.wim", "size": 5 * 1024 * MIB}


def test_letter_case_and_esd_are_accepted():
    tree = {"SOURCES/INSTALL.ESD": 3 * 1024 * MIB}
    assert iso.install_image(tree) == {"path": "SOURCES/INSTALL.ESD", "size": 3 * 1024 * MIB}


def test_stub_is_refused_naming_file_size_and_cause():
    tree = dict(TREE, **{"sources/install.wim": 135})
    with pytest.raises(iso.IsoError) as caught:
        iso.install_image(tree)
    message = str(caught.value)
    assert "sources/install.wim is 135 bytes" in message
    assert str(iso.DEFAULT_MIN_IMAGE_SIZE) in message
    assert "ISO9660 side of a UDF/ISO9660 hybrid" in message


def test_threshold_is_an_option():
    tree = {"sources/install.wim": 2 * MIB}
    assert iso.install_image(tree, min_size=MIB)["size"] == 2 * MIB
    with pytest.raises(iso.IsoError):
        iso.install_image(tree)


def test_missing_install_image_is_refused():
    with pytest.raises(iso.IsoError, match=re.escape("neither sources/install.wim nor sources/install.esd")):
        iso.install_image({"README.TXT": 135})


def test_boot_images_keep_their_case_and_must_exist():
    tree = dict(TREE)
    tree["BOOT/ETFSBOOT.COM"] = tree.pop("boot/etfsboot.com")
    assert iso.boot_images(tree) == {
        "efi": "efi/microsoft/boot/efisys_noprompt.bin",
        "bios": "BOOT/ETFSBOOT.COM",
    }
    del tree["efi/microsoft/boot/efisys_noprompt.bin"]
    with pytest.raises(
        iso.IsoError, match=re.escape("EFI boot image efi/microsoft/boot/efisys_noprompt.bin")
    ):
        iso.boot_images(tree)


def test_empty_boot_image_is_refused():
    with pytest.raises(iso.IsoError, match=re.escape("BIOS boot image boot/etfsboot.com is empty")):
        iso.boot_images(dict(TREE, **{"boot/etfsboot.com": 0}))


def test_xorriso_command_has_both_entries_in_order():
    command = iso.xorriso_command("/t", "/o.iso", "CCCOMA_X64FRE_EN-US_DV9", iso.boot_images(TREE))
    assert command[:3] == ["xorriso", "-as", "mkisofs"]
    bios, efi = command.index("-b"), command.index("-e")
    assert command[bios + 1] == "boot/etfsboot.com" and command[efi + 1].endswith("efisys_noprompt.bin")
    assert bios < command.index("-eltorito-alt-boot") < efi
    assert command[command.index("-boot-load-size") + 1] == "8"
    assert command[command.index("-iso-level") + 1] == "3"
    assert command[command.index("-volid") + 1] == "CCCOMA_X64FRE_EN_US_DV9"
    assert command[-3:] == ["-o", "/o.iso", "/t"]


def test_volume_id_is_sanitised_and_bounded():
    assert iso.volume_id("") == "WINDOWS_INSTALL"
    assert iso.volume_id("a" * 40) == "A" * 32


def test_el_torito_report_is_parsed():
    entries = iso.el_torito_entries(REPORT)
    assert [(e["platform"], e["bootable"], e["path"]) for e in entries] == [
        ("BIOS", True, "/boot/etfsboot.com"),
        ("UEFI", True, "/efi/microsoft/boot/efisys_noprompt.bin"),
    ]
    iso.check_boot_entries(entries)


def test_missing_entry_is_refused():
    only_uefi = iso.el_torito_entries("El Torito boot img :   1  UEFI  y   none  0x0000  0x00   2880  41\n")
    with pytest.raises(iso.IsoError, match="no bootable BIOS El Torito entry"):
        iso.check_boot_entries(only_uefi)
    with pytest.raises(iso.IsoError, match="BIOS or UEFI"):
        iso.check_boot_entries([])


def test_up_to_date_needs_same_source_settings_and_result():
    record = {"source_sha256": "a", "settings": {"x": 1}, "sha256": "r"}
    assert iso.up_to_date(record, "a", {"x": 1}, "r")
    assert not iso.up_to_date(record, "b", {"x": 1}, "r")
    assert not iso.up_to_date(record, "a", {"x": 2}, "r")
    assert not iso.up_to_date(record, "a", {"x": 1}, "changed")
    assert not iso.up_to_date(record, "a", {"x": 1}, None)
    assert not iso.up_to_date(None, "a", {"x": 1}, "r")


def test_a_rebuild_needs_xorriso_but_check_mode_does_not():
    iso.require_xorriso("/out/win.iso", "/usr/bin/xorriso", False)
    iso.require_xorriso("/out/win.iso", None, True)
    with pytest.raises(Refusal) as caught:
        iso.require_xorriso("/out/win.iso", None, False)
    assert caught.value.msg == (
        "rebuilding /out/win.iso: xorriso is required to rebuild the ISO; install xorriso"
    )
