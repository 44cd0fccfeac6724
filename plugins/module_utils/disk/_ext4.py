# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""An ext2/3/4 filesystem inside a disk image, read with ``dissect.extfs``: no mount, no root.

``Ext4Tree(image, partition)`` walks every inode once into ``microvm.Entry`` objects keyed by path
(metadata only; symlinks are not followed), and ``open(inum)`` streams one file's data when a
layer is written. ``view`` is the read-only view the seal rules take (``_disk.ExtView``).

A file's data is found from its extent tree (read here with ``struct``): the walk records how many
bytes of each file are holes (no extent) or unwritten extents (allocated, read as zeros), and
``open`` returns those ranges as zeros without reading a byte of them from the disk.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import stat
import struct

from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import _disk
from ansible_collections.goldenimage.pipeline.plugins.module_utils.microvm.microvm import Entry

KINDS = {
    stat.S_IFREG: "file",
    stat.S_IFDIR: "dir",
    stat.S_IFLNK: "symlink",
    stat.S_IFCHR: "char",
    stat.S_IFBLK: "block",
    stat.S_IFIFO: "fifo",
    stat.S_IFSOCK: "socket",
}
# ext4 stores ACLs in its own binary format and system.data marks inline data: neither is a
# portable xattr value, so they are not copied (reported in ``skipped_xattrs``).
PORTABLE_XATTR_PREFIXES = ("user.", "security.", "trusted.")
EXTENTS_FL = 0x80000
INLINE_DATA_FL = 0x10000000
EXTENT_MAGIC = 0xF30A
UNWRITTEN_LEN = 0x8000  # an extent longer than this is unwritten, of (length - 0x8000) blocks
HEADER = struct.Struct("<HHHH4x")
LEAF = struct.Struct("<IHHI")
INDEX = struct.Struct("<IIH2x")
MAX_DEPTH = 5


class Ext4Error(_disk.DiskError):
    """The filesystem cannot be read; the message names the partition and the cause."""


def _device_numbers(block):
    old, new = struct.unpack_from("<II", block, 0)
    if old:
        return (old >> 8) & 0xFF, old & 0xFF
    return (new & 0xFFF00) >> 8, (new & 0xFF) | ((new >> 12) & 0xFFF00)


class Ext4Tree:
    def __init__(self, image, part):
        try:
            from dissect.extfs import ExtFS
            from dissect.util.stream import RangeStream
        except ImportError as exc:
            raise _disk.MissingLibrary("dissect.extfs", exc) from exc
        self.image = image
        self.part = part
        size = part["size"] or image.virtual_size - part["offset"]
        try:
            self.fs = ExtFS(RangeStream(image.stream, part["offset"], size))
        except Exception as exc:
            raise Ext4Error("partition %s: cannot read ext4: %s" % (part["number"], exc)) from exc
        self.view = _disk.ExtView(image, dict(part, size=size))
        self.skipped_xattrs = []
        self.block_size = self.fs.block_size
        self.size = size

    def _entry(self, path, node):
        raw = node.inode
        kind = KINDS.get(stat.S_IFMT(raw.i_mode), "unknown")
        entry = Entry(
            path,
            kind,
            mode=stat.S_IMODE(raw.i_mode),
            uid=raw.i_uid | (raw.i_uid_high << 16),
            gid=raw.i_gid | (raw.i_gid_high << 16),
            mtime=raw.i_mtime,
            size=node.size if kind in ("file", "symlink") else 0,
            inum=node.inum,
            nlink=raw.i_links_count,
        )
        if kind == "file":
            entry.holes = self._holes(node, raw, entry.size)
        elif kind == "symlink":
            entry.link = node.link
        elif kind in ("char", "block"):
            entry.rdev = _device_numbers(raw.i_block)
        if raw.i_file_acl_lo or raw.i_file_acl_high or raw.i_extra.strip(b"\x00"):
            for attr in node.xattr:
                if attr.name.startswith(PORTABLE_XATTR_PREFIXES):
                    entry.xattrs[attr.name] = bytes(attr.value)
                elif attr.name != "system.data":
                    self.skipped_xattrs.append("/%s %s" % (path, attr.name))
        return entry

    def walk(self, progress=None):
        """``{path: Entry}`` for every inode under the root (the root itself is not an entry)."""
        tree = {}
        pending = [("", self.fs.root)]
        try:
            while pending:
                base, node = pending.pop()
                for child in node.iterdir():
                    name = child.filename
                    if name in (".", "..") or (not base and name == "lost+found"):
                        continue
                    path = base + "/" + name if base else name
                    entry = self._entry(path, child)
                    tree[path] = entry
                    if entry.kind == "dir":
                        pending.append((path, child))
                    if progress is not None and len(tree) % 20000 == 0:
                        progress(len(tree))
        except Exception as exc:
            raise Ext4Error(
                "partition %s: cannot walk ext4 at /%s: %s" % (self.part["number"], base, exc)
            ) from exc
        return tree

    # file data ------------------------------------------------------------------------------------

    def _holes(self, node, raw, size):
        """Bytes of the file's blocks that are holes or unwritten extents (none are read)."""
        if raw.i_flags & INLINE_DATA_FL or not size:
            return 0
        bs = self.block_size
        if raw.i_flags & EXTENTS_FL:
            runs = self.runs(raw.i_block, size)
        else:
            # ext2/3 block maps: a hole is a zero block number. i_blocks (512-byte units) covering every
            # block means there is none, without reading the indirect blocks.
            if raw.i_blocks_lo * 512 >= -(-size // bs) * bs:
                return 0
            runs = node.dataruns()
        return min(size, sum(count for start, count in runs if start is None) * bs)

    def runs(self, i_block, size):
        """``[(physical block or None, blocks)]`` covering the file's ``size``: None is a hole or an
        unwritten extent, both read as zeros."""
        needed = -(-size // self.block_size)
        found = []
        at = 0
        for logical, length, start, unwritten in self._extents(bytes(i_block), 0):
            if logical >= needed:
                break
            if logical > at:
                found.append((None, logical - at))
            elif logical < at:
                raise Ext4Error(
                    "partition %s: overlapping extents at block %d" % (self.part["number"], logical)
                )
            length = min(length, needed - logical)
            found.append((None if unwritten else start, length))
            at = logical + length
        if at < needed:
            found.append((None, needed - at))
        return found

    def _extents(self, node_bytes, depth):
        magic, entries, _max, tree_depth = HEADER.unpack_from(node_bytes, 0)
        if magic != EXTENT_MAGIC or depth > MAX_DEPTH:
            raise Ext4Error("partition %s: a damaged extent tree" % self.part["number"])
        if tree_depth == 0:
            for i in range(entries):
                logical, length, start_hi, start_lo = LEAF.unpack_from(node_bytes, 12 + 12 * i)
                unwritten = length > UNWRITTEN_LEN
                yield (
                    logical,
                    length - UNWRITTEN_LEN if unwritten else length,
                    (start_hi << 32) | start_lo,
                    unwritten,
                )
            return
        for i in range(entries):
            _first, leaf_lo, leaf_hi = INDEX.unpack_from(node_bytes, 12 + 12 * i)
            child = self._block((leaf_hi << 32) | leaf_lo)
            yield from self._extents(child, depth + 1)

    def _block(self, number):
        return self.image.read(self.part["offset"] + number * self.block_size, self.block_size)

    def open(self, inum):
        node = self.fs.get_inode(inum)
        raw = node.inode
        if raw.i_flags & EXTENTS_FL and not raw.i_flags & INLINE_DATA_FL:
            size = node.size
            return FileData(
                self.image, self.part["offset"], self.runs(raw.i_block, size), size, self.block_size
            )
        return node.open()

    def read(self, inum, length=-1):
        fh = self.open(inum)
        return fh.read(length)


class FileData:
    """One file's data read front to back from its runs: a hole gives zeros and reads nothing."""

    def __init__(self, image, base, runs, size, block_size):
        self.image = image
        self.base = base
        self.runs = runs
        self.left = size
        self.block_size = block_size
        self.index = 0
        self.within = 0  # bytes already given of runs[index]

    def read(self, size=-1):
        size = self.left if size is None or size < 0 else min(size, self.left)
        pieces = []
        wanted = size
        while wanted > 0 and self.index < len(self.runs):
            start, count = self.runs[self.index]
            take = min(wanted, count * self.block_size - self.within)
            if start is None:
                pieces.append(bytes(take))
            else:
                pieces.append(self.image.read(self.base + start * self.block_size + self.within, take))
            wanted -= take
            self.within += take
            if self.within == count * self.block_size:
                self.index += 1
                self.within = 0
        data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        self.left -= len(data)
        return data
