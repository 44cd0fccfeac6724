"""The lab guest's filesystems: the OS volume grows into a larger disk only when it is the last partition."""

from __future__ import annotations

from tests.lab.controllers.guestagent import BOOT_NOTE, DISK_NOTE, GPT_TAIL, VOLUME_NOTE, filesystems

MIB = 2**20


def vmi(boot="windows: NTFS system volume at byte 123", volume="123,64,1", disk=None):
    notes = {BOOT_NOTE: boot}
    if volume is not None:
        notes[VOLUME_NOTE] = volume.replace("123", str(100 * MIB)).replace(",64,", f",{64 * MIB},")
        notes[DISK_NOTE] = str(disk if disk is not None else 1024 * MIB)
    return {"metadata": {"name": "g", "annotations": notes}}


def test_the_last_volume_is_extended_to_the_end_of_the_grown_disk():
    (c,) = filesystems(vmi())
    assert c["mountPoint"] == "C:\\" and c["fileSystemType"] == "NTFS"
    assert c["totalBytes"] == 1024 * MIB - 100 * MIB - GPT_TAIL


def test_a_volume_with_a_partition_behind_it_keeps_its_size():
    (c,) = filesystems(vmi(volume="123,64,0"))
    assert c["totalBytes"] == 64 * MIB


def test_a_disk_that_did_not_grow_leaves_the_volume_as_it_was():
    (c,) = filesystems(vmi(disk=100 * MIB + 64 * MIB + GPT_TAIL))
    assert c["totalBytes"] == 64 * MIB


def test_linux_reports_its_root_and_a_guest_that_did_not_boot_reports_nothing():
    (root,) = filesystems(vmi(boot="linux: ext4 root at byte 1"))
    assert root["mountPoint"] == "/" and root["fileSystemType"] == "ext4"
    assert filesystems(vmi(boot="no bootable device: zeros", volume=None)) == []
