# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The collection's one partition-table reader: GPT (header and entry CRCs checked) and MBR (primary and
logical partitions), read from the disk's own bytes, never from ``fdisk`` output.

Standard library only, so it runs as it is on the controller and in both Job images (the seal
verifier's and the export's), and costs no import of a disk library where only the table is needed
(see bench/README.md). ``disk`` is a ``_disk.Image`` or anything with ``read(offset, length)`` over
the virtual disk, ``path`` and ``virtual_size``.

Every partition is a plain dict: ``number``, ``offset`` and ``size`` (bytes), ``type`` (a lower-case
GUID, ``0xNN`` for MBR, ``none`` for a whole-disk filesystem), ``type_name`` (None for a type not in
``TYPE_NAMES``), ``name`` (GPT), ``label`` (ext volume label) and ``filesystem`` (``ntfs``,
``bitlocker``, ``ext``, ``vfat``, a name of ``SIGNATURES`` or None), in disk order. A disk that is one
filesystem is partition 0; a disk with neither a table nor a filesystem at its start has no partitions
(the callers' rules say what that means for them).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import struct
import uuid
import zlib

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import seal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk.seal import BITLOCKER_OEM, NTFS_OEM

EXT_MAGIC_OFFSET = 1024 + 56
EXT_MAGIC = b"\x53\xef"
EXT_LABEL_OFFSET = 1024 + 120
BOOT_SIGNATURE = b"\x55\xaa"
MBR_SECTOR = 512
PROTECTIVE_MBR = 0xEE
EXTENDED_MBR = (0x05, 0x0F, 0x85)
MAX_LOGICAL = 128
# The largest GPT entry array read (sgdisk allows up to 1024 entries of 128 bytes; some tools more).
MAX_GPT_ENTRIES_BYTES = 16 * 1024 * 1024

# The types this collection's images carry, named for messages and results.
TYPE_NAMES = {
    "c12a7328-f81f-11d2-ba4b-00a0c93ec93b": "EFI system partition",
    "21686148-6449-6e6f-744e-656564454649": "BIOS boot partition",
    "e3c9e316-0b5c-4db8-817d-f92df00215ae": "Microsoft reserved partition",
    "ebd0a0a2-b9e5-4433-87c0-68b6b72699c7": "Windows basic data partition",
    "de94bba4-06d1-4d40-a16a-bfd50179d6ac": "Windows recovery partition",
    "0fc63daf-8483-4772-8e79-3d69d8477de4": "Linux filesystem partition",
    "4f68bce3-e8cd-4db1-96e7-fbcaf984b709": "Linux root partition (x86-64)",
    "b921b045-1df0-41c3-af44-4c6f280d3fae": "Linux root partition (ARM64)",
    "bc13c2ff-59e6-4262-a352-b275fd6f7172": "Linux extended boot partition",
    "0657fd6d-a4ab-43c4-84e5-0933c84b4f4f": "Linux swap partition",
    "e6d6d379-f507-44c2-a23c-238f2a3df928": "Linux LVM partition",
    "a19d880f-05fc-4d3b-a006-743f0f84911e": "Linux RAID partition",
    "0x07": "NTFS or exFAT",
    "0x0b": "FAT32",
    "0x0c": "FAT32 (LBA)",
    "0x0e": "FAT16 (LBA)",
    "0x27": "Windows recovery (hidden NTFS)",
    "0x82": "Linux swap",
    "0x83": "Linux",
    "0x8e": "Linux LVM",
    "0xef": "EFI system partition",
    "0xfd": "Linux RAID",
    "none": "whole disk",
}


class PartitionTableError(PipelineError):
    """The table is there but damaged: the message names the disk and what is wrong."""


# What else a partition can start with, told by its superblock magic: (name, offset, magic), the
# offset from the partition's first byte. The first match names the partition.
SIGNATURES = (
    ("xfs", 0, b"XFSB"),
    ("luks", 0, b"LUKS\xba\xbe"),
    ("squashfs", 0, b"hsqs"),
    ("lvm2", 512 + 24, b"LVM2 001"),
    ("f2fs", 1024, b"\x10\x20\xf5\xf2"),
    ("swap", 4096 - 10, b"SWAPSPACE2"),
    ("swap", 65536 - 10, b"SWAPSPACE2"),  # made on a host with 64 KiB pages (arm64, ppc64le)
    ("bcachefs", 4096 + 24, bytes.fromhex("c68573f64e1a45ca8265f57f48ba6d81")),
    ("btrfs", 65536 + 64, b"_BHRfS_M"),
    ("zfs", 128 * 1024, b"\x0c\xb1\xba\x00"),
    ("zfs", 128 * 1024, b"\x00\xba\xb1\x0c"),
)
# FAT names itself in its boot sector (FAT12/16 at 0x36, FAT32 at 0x52); only inside a partition, since
# a whole disk's MBR code could carry those bytes.
FAT_NAMES = ((0x36, b"FAT1"), (0x52, b"FAT32"))


def signature(read, offset, whole_disk=False):
    """``(filesystem, ext volume label)`` of what starts at ``offset``: ``ntfs``, ``bitlocker``, ``ext``,
    a name of ``SIGNATURES``, ``vfat`` (not for ``whole_disk``) or None, and the label ("" unless ext)."""
    head = read(offset, 2048)
    if head[3:11] == NTFS_OEM:
        return "ntfs", ""
    if head[3:11] == BITLOCKER_OEM:
        return "bitlocker", ""
    if head[EXT_MAGIC_OFFSET : EXT_MAGIC_OFFSET + 2] == EXT_MAGIC:
        label = head[EXT_LABEL_OFFSET : EXT_LABEL_OFFSET + 16].split(b"\x00", 1)[0]
        return "ext", label.decode("utf-8", "replace")
    for name, at, magic in SIGNATURES:
        found = head[at : at + len(magic)] if at + len(magic) <= len(head) else read(offset + at, len(magic))
        if found == magic:
            return name, ""
    fat = any(head[at : at + len(magic)] == magic for at, magic in FAT_NAMES)
    if fat and not whole_disk and head[510:512] == BOOT_SIGNATURE:
        return "vfat", ""
    return None, ""


def _entry(read, number, offset, size, kind, name=""):
    filesystem, label = signature(read, offset)
    return {
        "number": number,
        "offset": offset,
        "size": size,
        "type": kind,
        "type_name": TYPE_NAMES.get(kind),
        "name": name,
        "label": label,
        "filesystem": filesystem,
    }


def _crc_matches(data, expected):
    return zlib.crc32(data) & 0xFFFFFFFF == expected


def _gpt_header(read, at, sector):
    """``(entries, problem)`` of the GPT header at byte ``at``: ``entries`` is ``(table bytes, count,
    entry size)`` when the header and its entries check out, else None and ``problem`` says why."""
    header = read(at, 512)
    if header[:8] != b"EFI PART":
        return None, seal.GPT_MISSING
    header_size, crc = struct.unpack_from("<II", header, 12)
    if not 92 <= header_size <= len(header):
        return None, "its header size %d is not valid" % header_size
    check = bytearray(header[:header_size])
    check[16:20] = bytes(4)
    if not _crc_matches(bytes(check), crc):
        return None, "its header checksum does not match"
    entries_lba, count, entry_size, entries_crc = struct.unpack_from("<QIII", header, 72)
    if entry_size < 128 or count * entry_size > MAX_GPT_ENTRIES_BYTES:
        return None, "its entry array (%d entries of %d bytes) is not valid" % (count, entry_size)
    table = read(entries_lba * sector, count * entry_size)
    if not _crc_matches(table, entries_crc):
        return None, "its partition entries checksum does not match"
    return (table, count, entry_size), None


def _gpt_entries(read, sector, table, count, entry_size):
    found = []
    for index in range(count):
        raw = table[index * entry_size : (index + 1) * entry_size]
        kind = uuid.UUID(bytes_le=raw[:16])
        first, last = struct.unpack_from("<QQ", raw, 32)
        if kind.int == 0 or last < first:
            continue
        name = raw[56:128].decode("utf-16-le", "replace").split("\x00", 1)[0]
        # The last LBA is inclusive.
        found.append(_entry(read, index + 1, first * sector, (last - first + 1) * sector, str(kind), name))
    return found


def _gpt(read, source, disk_size, notes):
    """The GPT partitions of a disk with a protective MBR: the primary header at LBA 1, or the backup
    at the last LBA when ``seal.gpt_header_choice`` says so (512- then 4096-byte sectors)."""
    for sector in (512, 4096):
        primary, primary_problem = _gpt_header(read, sector, sector)
        backup, backup_problem = None, None
        if primary_problem:
            backup, backup_problem = _gpt_header(read, disk_size - sector, sector)
        if primary_problem == seal.GPT_MISSING and backup_problem == seal.GPT_MISSING:
            continue
        which, message = seal.gpt_header_choice(
            source, primary_problem, backup_problem, disk_size // sector - 1, notes is not None
        )
        if which is None:
            raise PartitionTableError(message)
        if message:
            notes.append(message)
        if which == "primary" and notes is not None:
            backup = _gpt_header(read, disk_size - sector, sector)[0]
            if backup is not None and _gpt_entries(read, sector, *backup) != _gpt_entries(
                read, sector, *primary
            ):
                notes.append(seal.gpt_backup_differs(source, disk_size // sector - 1))
        return _gpt_entries(read, sector, *(primary if which == "primary" else backup))
    raise PartitionTableError("%s: a protective MBR but no GPT header at LBA 1 or at the last LBA" % source)


def _mbr_slot(block, index):
    raw = block[446 + index * 16 : 446 + (index + 1) * 16]
    start, count = struct.unpack_from("<II", raw, 8)
    return raw[4], start, count


def _mbr(read, source, boot):
    found = []
    extended = None
    for index in range(4):
        kind, start, count = _mbr_slot(boot, index)
        if not kind or not count:
            continue
        if kind in EXTENDED_MBR:
            extended = start
            continue
        found.append(_entry(read, index + 1, start * MBR_SECTOR, count * MBR_SECTOR, "0x%02x" % kind))
    number = 5
    ebr = extended
    seen = set()
    while ebr is not None:
        if ebr in seen or len(seen) > MAX_LOGICAL:
            raise PartitionTableError("%s: the logical partition chain loops" % source)
        seen.add(ebr)
        block = read(ebr * MBR_SECTOR, MBR_SECTOR)
        if block[510:512] != BOOT_SIGNATURE:
            raise PartitionTableError(
                "%s: the extended boot record at sector %d is not valid" % (source, ebr)
            )
        kind, start, count = _mbr_slot(block, 0)
        if kind and count:
            found.append(
                _entry(read, number, (ebr + start) * MBR_SECTOR, count * MBR_SECTOR, "0x%02x" % kind)
            )
            number += 1
        next_start = _mbr_slot(block, 1)[1]
        ebr = extended + next_start if next_start else None
    return found


def read_partitions(disk, notes=None):
    """The partitions of ``disk`` in disk order, partition 0 for a whole-disk filesystem, [] for a disk
    with neither; ``PartitionTableError`` for a table that is there but damaged. ``notes`` (a list)
    gets what was read around, such as a damaged primary GPT header replaced by the backup; without
    ``notes`` a damaged primary header is refused, since the caller could not say it read around it."""
    read, source = disk.read, disk.path
    if signature(read, 0, whole_disk=True)[0] is not None:
        return [_entry(read, 0, 0, disk.virtual_size, "none")]
    boot = read(0, MBR_SECTOR)
    if boot[510:512] != BOOT_SIGNATURE:
        return []
    if any(_mbr_slot(boot, i)[0] == PROTECTIVE_MBR for i in range(4)):
        found = _gpt(read, source, disk.virtual_size, notes)
    else:
        found = _mbr(read, source, boot)
    # A partition reaching past the image's end is a truncated image first, which its reader names
    # (microvm.check_within); overlaps are judged on a table that fits the image.
    problem = None
    if all(p["offset"] + p["size"] <= disk.virtual_size for p in found):
        problem = seal.overlap_problem(source, found)
    if problem:
        raise PartitionTableError(problem)
    return sorted(found, key=lambda p: (p["offset"], p["number"]))
