# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""An ext2/3/4 filesystem inside a disk image, read with ``dissect.extfs``: no mount, no root.

``Ext4Tree(image, partition)`` walks every inode once into ``microvm.Entry`` objects keyed by path
(metadata only; symlinks are not followed), and ``open(inum)`` streams one file's data when a
layer is written. ``view`` is the read-only view the seal rules take (``_disk.ExtView``).
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
        self.view = self.VIEW(image, dict(part, size=size))
        self.skipped_xattrs = []

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
        elif kind in ("char", "block"):
            entry.rdev = self._rdev(node)
        self._attributes(path, node, entry)
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
        try:
            while pending:
                base, node = pending.pop()
                for name, child in self._children(node):
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


# What microvm_image opens a partition of this filesystem with (microvm.READ_FILESYSTEMS names the file).
Tree = Ext4Tree
