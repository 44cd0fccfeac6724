# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Partition tables read from the disk's own bytes: GPT (header and entry CRCs checked) and MBR
(primary and logical partitions), never from ``fdisk`` output.

``read(offset, length)`` is the disk's virtual byte stream (``_disk.Image.read`` reads raw and
qcow2 alike). Every partition comes back as a plain dict: ``number``, ``offset``, ``size`` (bytes),
``type`` (a lower-case GUID, or ``0xNN`` for MBR), ``name`` (GPT name), ``label`` (ext volume
label) and ``filesystem`` (``ext`` or None). A disk that is one ext filesystem is partition 0.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import struct
import uuid
import zlib

from ansible_collections.goldenimage.pipeline.plugins.module_utils.errors import PipelineError

EXT_MAGIC_OFFSET = 1024 + 56
EXT_LABEL_OFFSET = 1024 + 120
EXTENDED_MBR = (0x05, 0x0F, 0x85)


class PartitionTableError(PipelineError):
    """The table is there but damaged: the message names the disk and what is wrong."""


def ext_label(read, offset):
    """``(is_ext, volume label)`` of the filesystem that starts at ``offset``."""
    head = read(offset, 2048)
    if head[EXT_MAGIC_OFFSET : EXT_MAGIC_OFFSET + 2] != b"\x53\xef":
        return False, ""
    label = head[EXT_LABEL_OFFSET : EXT_LABEL_OFFSET + 16].split(b"\x00", 1)[0]
    return True, label.decode("utf-8", "replace")


def _entry(read, number, offset, size, kind, name=""):
    is_ext, label = ext_label(read, offset)
    return {
        "number": number,
        "offset": offset,
        "size": size,
        "type": kind,
        "name": name,
        "label": label,
        "filesystem": "ext" if is_ext else None,
    }


def _gpt(read, source, sector):
    header = read(sector, 512)
    if header[:8] != b"EFI PART":
        return None
    header_size = struct.unpack_from("<I", header, 12)[0]
    crc = struct.unpack_from("<I", header, 16)[0]
    check = bytearray(header[:header_size])
    check[16:20] = b"\x00\x00\x00\x00"
    if zlib.crc32(bytes(check)) & 0xFFFFFFFF != crc:
        raise PartitionTableError("%s: the GPT header checksum does not match" % source)
    entries_lba, count, entry_size, entries_crc = struct.unpack_from("<QIII", header, 72)
    table = read(entries_lba * sector, count * entry_size)
    if zlib.crc32(table) & 0xFFFFFFFF != entries_crc:
        raise PartitionTableError("%s: the GPT partition entries checksum does not match" % source)
    found = []
    for index in range(count):
        raw = table[index * entry_size : (index + 1) * entry_size]
        kind = uuid.UUID(bytes_le=raw[:16])
        if kind.int == 0:
            continue
        first, last = struct.unpack_from("<QQ", raw, 32)
        name = raw[56:128].decode("utf-16-le", "replace").split("\x00", 1)[0]
        found.append(_entry(read, index + 1, first * sector, (last - first + 1) * sector, str(kind), name))
    return found


def _mbr(read, source, boot):
    found = []
    extended = None
    for index in range(4):
        raw = boot[446 + index * 16 : 446 + (index + 1) * 16]
        kind = raw[4]
        start, count = struct.unpack_from("<II", raw, 8)
        if not kind or not count:
            continue
        if kind in EXTENDED_MBR:
            extended = start
            continue
        found.append(_entry(read, index + 1, start * 512, count * 512, "0x%02x" % kind))
    number = 5
    ebr = extended
    seen = set()
    while ebr is not None:
        if ebr in seen or len(seen) > 128:
            raise PartitionTableError("%s: the logical partition chain loops" % source)
        seen.add(ebr)
        block = read(ebr * 512, 512)
        if block[510:512] != b"\x55\xaa":
            raise PartitionTableError(
                "%s: the extended boot record at sector %d is not valid" % (source, ebr)
            )
        kind = block[446 + 4]
        start, count = struct.unpack_from("<II", block, 446 + 8)
        if kind and count:
            found.append(_entry(read, number, (ebr + start) * 512, count * 512, "0x%02x" % kind))
            number += 1
        next_start = struct.unpack_from("<I", block, 446 + 16 + 8)[0]
        ebr = extended + next_start if next_start else None
    return found


def read_partitions(read, source):
    """The partitions of the disk (sorted by number), or partition 0 for a bare filesystem."""
    is_ext, label = ext_label(read, 0)
    if is_ext:
        entry = _entry(read, 0, 0, None, "none")
        entry["label"] = label
        return [entry]
    boot = read(0, 512)
    if boot[510:512] != b"\x55\xaa":
        return []
    protective = any(boot[446 + i * 16 + 4] == 0xEE for i in range(4))
    if protective:
        for sector in (512, 4096):
            found = _gpt(read, source, sector)
            if found is not None:
                return sorted(found, key=lambda p: p["number"])
        raise PartitionTableError("%s: a protective MBR but no GPT header at LBA 1" % source)
    return sorted(_mbr(read, source, boot), key=lambda p: p["number"])
