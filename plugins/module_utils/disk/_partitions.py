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
``bitlocker``, ``ext`` or None), in disk order. A disk that is one filesystem is partition 0; a disk
with neither a table nor a filesystem at its start has no partitions (the callers' rules say what
that means for them).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import struct
import uuid
import zlib

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk.seal import BITLOCKER_OEM, NTFS_OEM

EXT_MAGIC_OFFSET = 1024 + 56
EXT_MAGIC = b"\x53\xef"
EXT_LABEL_OFFSET = 1024 + 120
BOOT_SIGNATURE = b"\x55\xaa"
MBR_SECTOR = 512
PROTECTIVE_MBR = 0xEE
EXTENDED_MBR = (0x05, 0x0F, 0x85)
MAX_LOGICAL = 128

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


def signature(read, offset):
    """``(filesystem, ext volume label)`` of what starts at ``offset``: ``ntfs``, ``bitlocker``, ``ext``
    or None, and the label ("" unless ext)."""
    head = read(offset, 2048)
    if head[3:11] == NTFS_OEM:
        return "ntfs", ""
    if head[3:11] == BITLOCKER_OEM:
        return "bitlocker", ""
    if head[EXT_MAGIC_OFFSET : EXT_MAGIC_OFFSET + 2] == EXT_MAGIC:
        label = head[EXT_LABEL_OFFSET : EXT_LABEL_OFFSET + 16].split(b"\x00", 1)[0]
        return "ext", label.decode("utf-8", "replace")
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


def _gpt(read, source, sector):
    """The GPT partitions with a header at LBA 1 of ``sector``-byte sectors, or None without one."""
    header = read(sector, 512)
    if header[:8] != b"EFI PART":
        return None
    header_size, crc = struct.unpack_from("<II", header, 12)
    check = bytearray(header[:header_size])
    check[16:20] = bytes(4)
    if not _crc_matches(bytes(check), crc):
        raise PartitionTableError("%s: the GPT header checksum does not match" % source)
    entries_lba, count, entry_size, entries_crc = struct.unpack_from("<QIII", header, 72)
    table = read(entries_lba * sector, count * entry_size)
    if not _crc_matches(table, entries_crc):
        raise PartitionTableError("%s: the GPT partition entries checksum does not match" % source)
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


def read_partitions(disk):
    """The partitions of ``disk`` in disk order, partition 0 for a whole-disk filesystem, [] for a disk
    with neither; ``PartitionTableError`` for a table that is there but damaged."""
    read, source = disk.read, disk.path
    if signature(read, 0)[0] is not None:
        return [_entry(read, 0, 0, disk.virtual_size, "none")]
    boot = read(0, MBR_SECTOR)
    if boot[510:512] != BOOT_SIGNATURE:
        return []
    if any(_mbr_slot(boot, i)[0] == PROTECTIVE_MBR for i in range(4)):
        for sector in (512, 4096):
            found = _gpt(read, source, sector)
            if found is not None:
                return sorted(found, key=lambda p: (p["offset"], p["number"]))
        raise PartitionTableError("%s: a protective MBR but no GPT header at LBA 1" % source)
    return sorted(_mbr(read, source, boot), key=lambda p: (p["offset"], p["number"]))
