# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""An ext2/3/4 filesystem inside a disk image, read with ``dissect.extfs``: no mount, no root.

``Ext4Tree(image, partition)`` walks every inode once into ``microvm.Entry`` objects keyed by path
(metadata only; symlinks are not followed), and ``open(inum)`` streams one file's data when a
layer is written. ``view`` is the read-only view the seal rules take (``_disk.ExtView``).

``Tree`` (``Ext4Reader``) is what microvm_image opens ext2/3/4 with: it reads inodes, directory entries
and extents with ``struct`` rather than through ``dissect``'s structures, and finds each file's holes from
its extent tree: the walk records how many bytes of each file are holes (no extent) or unwritten extents
(allocated, read as zeros), and ``open`` returns those ranges as zeros without reading a byte of them.
The XFS and btrfs trees build on ``Ext4Tree``'s generic walk.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import stat
import struct

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import _disk, seal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.microvm import microvm
from ansible_collections.goldenimage.pipeline.plugins.module_utils.microvm.microvm import NO_XATTRS, Entry

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
# The first 128 bytes of an inode: mode, uid, size, mtime, gid, links, blocks, flags, i_block, file ACL
# block, size (high), file ACL block (high), uid (high), gid (high).
INODE = struct.Struct("<HHI4x4xI4xHHII4x60s4xII4x2xHHH4x")
# A directory entry: inode, record length, name length (8 bits and a file type byte with the filetype
# feature, else 16 bits).
DIRENT_FT = struct.Struct("<IHB1x")
DIRENT = struct.Struct("<IHH")
ROOT_INODE = 2
FILETYPE_FEATURE = 0x2
# Incompatible features the reader refuses: what each means and the move.
REFUSED_FEATURES = (
    (
        0x4,
        "was not cleanly unmounted: its journal holds writes not yet replayed (needs_recovery)",
        "replay the journal (e2fsck -fy on a copy) or build from a disk shut down cleanly",
    ),
    (
        0x8000,
        "keeps small files and directories inside their inodes (inline_data), which is not read here",
        "make the filesystem without it (mkfs.ext4 -O ^inline_data)",
    ),
)


class Ext4Error(_disk.DiskError):
    """The filesystem cannot be read; the message names the partition and the cause."""


def _device_numbers(block):
    old, new = struct.unpack_from("<II", block, 0)
    if old:
        return (old >> 8) & 0xFF, old & 0xFF
    return (new & 0xFFF00) >> 8, (new & 0xFF) | ((new >> 12) & 0xFFF00)


class Ext4Tree:
    # The view names the filesystem and its reader; the XFS and btrfs trees (``_xfs``, ``_btrfs``)
    # walk the same way with their own.
    ERROR = Ext4Error
    VIEW = _disk.ExtView

    def __init__(self, image, part):
        from dissect.util.stream import RangeStream

        self.image = image
        self.part = part
        size = part["size"] or image.virtual_size - part["offset"]
        stream = RangeStream(image.stream, part["offset"], size)
        self.fs = _disk.open_filesystem(self.VIEW, stream, part, self.ERROR)
        problem = seal.filesystem_fits(part["number"], self.filesystem, self.filesystem_bytes(), size)
        if problem:
            raise self.ERROR(problem)
        self.view = self.VIEW(image, dict(part, size=size))
        self.skipped_xattrs = []

    def filesystem_bytes(self):
        """The size the filesystem's superblock gives itself."""
        return self.fs.block_count * self.fs.block_size

    @property
    def filesystem(self):
        """The filesystem as messages name it."""
        return self.VIEW.FILESYSTEM

    def _entry(self, path, node):
        full_mode, uid, gid, mtime, nlink = self._stat(node)
        kind = KINDS.get(stat.S_IFMT(full_mode), "unknown")
        entry = Entry(
            path,
            kind,
            mode=stat.S_IMODE(full_mode),
            uid=uid,
            gid=gid,
            mtime=mtime,
            size=node.size if kind in ("file", "symlink") else 0,
            inum=self._inum(node),
            nlink=nlink,
        )
        if kind == "symlink":
            entry.link = node.link
        elif kind == "file" and entry.size:
            entry.holes = self._holes_of(path, node, entry.size)
        elif kind in ("char", "block"):
            entry.rdev = self._rdev(node)
        entry.xattrs = {}
        self._attributes(path, node, entry)
        if not entry.xattrs:
            entry.xattrs = NO_XATTRS  # one shared empty mapping for the many entries without any
        return entry

    def _stat(self, node):
        """``(mode with the type bits, uid, gid, mtime in seconds, link count)`` of ``node``."""
        raw = node.inode
        return (
            raw.i_mode,
            raw.i_uid | (raw.i_uid_high << 16),
            raw.i_gid | (raw.i_gid_high << 16),
            raw.i_mtime,
            raw.i_links_count,
        )

    def _inum(self, node):
        return node.inum

    def _holes_of(self, path, node, size):
        """Bytes of the file that are holes or unwritten extents, from its extent map (the XFS and btrfs
        trees measure them; none is read)."""
        return 0

    def _rdev(self, node):
        return _device_numbers(node.inode.i_block)

    def _attributes(self, path, node, entry):
        raw = node.inode
        if raw.i_file_acl_lo or raw.i_file_acl_high or raw.i_extra.strip(b"\x00"):
            for attr in node.xattr:
                if attr.name.startswith(PORTABLE_XATTR_PREFIXES):
                    entry.xattrs[attr.name] = bytes(attr.value)
                elif attr.name != "system.data":
                    self.skipped_xattrs.append("/%s %s" % (path, attr.name))

    def walk(self, progress=None):
        """``{path: Entry}`` for every inode under the root (the root itself is not an entry)."""
        tree = {}
        pending = [("", self.fs.root)]
        number = self.part["number"]
        seen = {}
        try:
            while pending:
                base, node = pending.pop()
                for name, child in self._children(node):
                    if name in (".", "..") or (not base and name == "lost+found"):
                        continue
                    microvm.check_entry_name(number, base, name)
                    path = base + "/" + name if base else name
                    entry = self._entry(path, child)
                    tree[path] = entry
                    if entry.kind == "dir":
                        microvm.check_directory_once(number, path, entry.inum, seen)
                        pending.append((path, child))
                    if progress is not None and len(tree) % 20000 == 0:
                        progress(len(tree))
        except PipelineError:
            raise
        except Exception as exc:
            raise self.ERROR(
                "partition %s: cannot walk %s at /%s: %s" % (self.part["number"], self.filesystem, base, exc)
            ) from exc
        return tree

    def _children(self, node):
        """``(name, node)`` of each entry of the directory ``node``."""
        return ((child.filename, child) for child in node.iterdir())

    def open(self, inum):
        return self.fs.get_inode(inum).open()

    def read(self, inum, length=-1):
        fh = self.open(inum)
        return fh.read(length)


class Ext4Reader(Ext4Tree):
    """ext2/3/4 read with ``struct``: the same entries as ``Ext4Tree``, with each file's holes, and file
    data read from its extents (holes and unwritten extents given as zeros, never read)."""

    def __init__(self, image, part):
        super(Ext4Reader, self).__init__(image, part)
        self.block_size = self.fs.block_size
        self.inodes_per_group = self.fs.sb.s_inodes_per_group
        self.inode_size = self.fs.sb.s_inode_size or 128
        self.tables = {}  # block group -> first block of its inode table
        incompat = self.fs.sb.s_feature_incompat
        self.filetype_dirents = bool(incompat & FILETYPE_FEATURE)
        for flag, what, move in REFUSED_FEATURES:
            if incompat & flag:
                raise Ext4Error("partition %s: the ext4 filesystem %s; %s" % (part["number"], what, move))

    def _inode(self, inum):
        """The fields of inode ``inum`` the walk needs, unpacked from its bytes (``INODE``), and the
        in-inode extended attribute area."""
        group, index = divmod(inum - 1, self.inodes_per_group)
        table = self.tables.get(group)
        if table is None:
            desc = self.fs._read_group_desc(group)
            table = desc.bg_inode_table_lo | (getattr(desc, "bg_inode_table_hi", 0) << 32)
            self.tables[group] = table
        data = self.image.read(
            self.part["offset"] + table * self.block_size + index * self.inode_size, self.inode_size
        )
        if len(data) < 128:
            raise Ext4Error("partition %s: inode %d is beyond the image" % (self.part["number"], inum))
        extra = b""
        if self.inode_size > 128:
            (extra_isize,) = struct.unpack_from("<H", data, 128)
            extra = data[128 + extra_isize :]
        return INODE.unpack_from(data, 0), extra

    def _entry_of(self, path, inum):
        fields, extra = self._inode(inum)
        (
            mode,
            uid,
            size,
            mtime,
            gid,
            links,
            blocks,
            flags,
            i_block,
            acl,
            size_high,
            acl_high,
            uid_high,
            gid_high,
        ) = fields
        kind = KINDS.get(stat.S_IFMT(mode), "unknown")
        entry = Entry(
            path,
            kind,
            mode=stat.S_IMODE(mode),
            uid=uid | (uid_high << 16),
            gid=gid | (gid_high << 16),
            mtime=mtime,
            size=(size | (size_high << 32)) if kind in ("file", "symlink") else 0,
            inum=inum,
            nlink=links,
        )
        if kind == "file":
            entry.holes = self._holes(inum, flags, blocks, i_block, entry.size)
        elif kind == "symlink":
            # A target shorter than 60 bytes lives in i_block (as the kernel and dissect read it).
            target = (
                i_block[: entry.size]
                if entry.size < 60
                else self._open(inum, flags, i_block, entry.size).read()
            )
            entry.link = target.decode("utf-8", "surrogateescape")
        elif kind in ("char", "block"):
            entry.rdev = _device_numbers(i_block)
        if acl or acl_high or extra.strip(b"\x00"):
            kept = {}
            for attr in self.fs.get_inode(inum).xattr:
                if attr.name.startswith(PORTABLE_XATTR_PREFIXES):
                    kept[attr.name] = bytes(attr.value)
                elif attr.name != "system.data":
                    self.skipped_xattrs.append("/%s %s" % (path, attr.name))
            if kept:
                entry.xattrs = kept
        return entry, (flags, i_block, size | (size_high << 32))

    def _listing(self, inum, flags, i_block, size):
        """``(inode number, name)`` of each entry of a directory, read block by block."""
        if flags & INLINE_DATA_FL or not flags & EXTENTS_FL:
            for child in self.fs.get_inode(inum).iterdir():
                yield child.inum, child.filename
            return
        data = self._open(inum, flags, i_block, size)
        bs = self.block_size
        dirent = DIRENT_FT if self.filetype_dirents else DIRENT
        for _block in range(-(-size // bs)):
            block = data.read(bs)
            at = 0
            while at + 8 <= len(block):
                child, rec_len, name_len = dirent.unpack_from(block, at)
                if rec_len in (0, 65535) and bs == 65536:
                    rec_len = bs
                if rec_len < 8 or at + rec_len > len(block):
                    raise Ext4Error(
                        "partition %s: directory inode %d has a damaged entry" % (self.part["number"], inum)
                    )
                if child:
                    yield child, block[at + 8 : at + 8 + name_len].decode("utf-8", "surrogateescape")
                at += rec_len

    def walk(self, progress=None):
        """``{path: Entry}`` for every inode under the root (the root itself is not an entry)."""
        tree = {}
        root, _extra = self._inode(ROOT_INODE)
        pending = [("", ROOT_INODE, (root[7], root[8], root[2] | (root[10] << 32)))]
        base = ""
        number = self.part["number"]
        seen = {}
        try:
            while pending:
                base, inum, data = pending.pop()
                for child, name in self._listing(inum, *data):
                    if name in (".", "..") or (not base and name == "lost+found"):
                        continue
                    microvm.check_entry_name(number, base, name)
                    path = base + "/" + name if base else name
                    entry, child_data = self._entry_of(path, child)
                    tree[path] = entry
                    if entry.kind == "dir":
                        microvm.check_directory_once(number, path, child, seen)
                        pending.append((path, child, child_data))
                    if progress is not None and len(tree) % 20000 == 0:
                        progress(len(tree))
        except PipelineError:
            raise
        except Exception as exc:
            raise Ext4Error(
                "partition %s: cannot walk ext4 at /%s: %s" % (self.part["number"], base, exc)
            ) from exc
        return tree

    # file data ------------------------------------------------------------------------------------

    def _holes(self, inum, flags, blocks, i_block, size):
        """Bytes of the file's blocks that are holes or unwritten extents (none are read)."""
        if flags & INLINE_DATA_FL or not size:
            return 0
        bs = self.block_size
        if flags & EXTENTS_FL:
            runs = self.runs(i_block, size)
        else:
            # ext2/3 block maps: a hole is a zero block number. i_blocks (512-byte units) covering every
            # block means there is none, without reading the indirect blocks.
            if blocks * 512 >= -(-size // bs) * bs:
                return 0
            runs = self.fs.get_inode(inum).dataruns()
        return min(size, sum(count for start, count in runs if start is None) * bs)

    def runs(self, i_block, size):
        """``[(physical block or None, blocks)]`` covering the file's ``size``: None is a hole or an
        unwritten extent, both read as zeros."""
        needed = -(-size // self.block_size)
        found = []
        at = 0
        for logical, length, start, unwritten in self._extents(i_block, 0):
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
        fields = self._inode(inum)[0]
        return self._open(inum, fields[7], fields[8], fields[2] | (fields[10] << 32))

    def _open(self, inum, flags, i_block, size):
        if flags & EXTENTS_FL and not flags & INLINE_DATA_FL:
            return FileData(self.image, self.part["offset"], self.runs(i_block, size), size, self.block_size)
        return self.fs.get_inode(inum).open()


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


# What microvm_image opens a partition of this filesystem with (microvm.READ_FILESYSTEMS names the file).
Tree = Ext4Reader
