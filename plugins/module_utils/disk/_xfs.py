# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""An XFS filesystem inside a disk image (RHEL, Rocky, Alma, Amazon Linux roots), read with
``dissect.xfs``: no mount, no root.

``XfsTree(image, partition)`` gives what ``_ext4.Ext4Tree`` gives, from XFS inodes: every inode once as
a ``microvm.Entry`` keyed by path, ``open(inum)`` for one file's data, and ``view``, the read-only
view the seal rules take (``XfsView``). Extended attributes are read from an inode's short-form
attribute fork (where small ones live); a larger attribute fork, and XFS's own ACL attributes, are
reported in ``skipped_xattrs``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import struct

from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import _disk, _ext4

# The attribute fork formats of an inode (di_aformat) and the namespaces of a short-form attribute.
ATTR_FORK_LOCAL = 1
ATTR_NAMESPACES = {0: "user.", 2: "trusted.", 4: "security."}
ATTR_NAMESPACE_MASK = 0x06
# XFS keeps POSIX ACLs as these trusted-namespace attributes, in its own binary format.
XFS_ACL_NAMES = ("SGI_ACL_FILE", "SGI_ACL_DEFAULT")


# Data forks that map extents (XFS_DINODE_FMT_EXTENTS, XFS_DINODE_FMT_BTREE); local and device forks differ.
MAPPED_FORMATS = (2, 3)


class XfsError(_disk.DiskError):
    """The filesystem cannot be read; the message names the partition and the cause."""


def _device_numbers(raw):
    """(major, minor) of XFS's on-disk device number: the major above bit 18 (the kernel keeps its low
    9 bits), the minor below."""
    dev = struct.unpack_from(">I", raw, 0)[0]
    return (dev >> 18) & 0x1FF, dev & 0x3FFFF


def _short_form_attributes(raw):
    """``[(name with its namespace prefix, value)]`` of a short-form attribute fork."""
    total, count = struct.unpack_from(">HB", raw, 0)
    found = []
    at = 4
    end = min(total, len(raw))
    while len(found) < count and at + 3 <= end:
        name_length, value_length, flags = raw[at], raw[at + 1], raw[at + 2]
        name = raw[at + 3 : at + 3 + name_length].decode("utf-8", "surrogateescape")
        value = bytes(raw[at + 3 + name_length : at + 3 + name_length + value_length])
        found.append((ATTR_NAMESPACES.get(flags & ATTR_NAMESPACE_MASK, "unknown.") + name, value))
        at += 3 + name_length + value_length
    return found


class XfsView(_disk.ExtView):
    """The seal rules' view over XFS (names case-sensitive; symlinks are not followed)."""

    FILESYSTEM = "XFS"
    READER = ("dissect.xfs", "XFS")
    ERROR = XfsError

    def _inode(self, path):
        from dissect.xfs.exceptions import Error

        try:
            return self.fs.get(_disk._norm(path))
        except (Error, OSError):
            return None


class XfsTree(_ext4.Ext4Tree):
    ERROR = XfsError
    VIEW = XfsView

    def filesystem_bytes(self):
        return self.fs.sb.sb_dblocks * self.fs.block_size

    def _stat(self, node):
        raw = node.inode
        nlink = raw.di_nlink if raw.di_version > 1 else raw.di_onlink
        return raw.di_mode, raw.di_uid, raw.di_gid, node.mtime_ns // 1000000000, nlink

    def _rdev(self, node):
        return _device_numbers(node.datafork().read(4))

    def _holes_of(self, path, node, size):
        """Holes and unwritten extents from the data fork's extent map; a local (inline) fork has none."""
        if node.inode.di_format not in MAPPED_FORMATS:
            return 0
        try:
            runs = _written_runs(node)
        except Exception:  # an unreadable map is measured another way, below
            # Blocks the inode says it holds (data and map blocks) against its size: a lower bound.
            return max(0, size - node.inode.di_nblocks * self.fs.block_size)
        return min(size, sum(count for block, count in runs if block is None) * self.fs.block_size)

    def _attributes(self, path, node, entry):
        raw = node.inode
        if not raw.di_forkoff:
            return
        if raw.di_aformat != ATTR_FORK_LOCAL:
            # Attributes too large for the inode live in blocks of their own, not read here.
            self.skipped_xattrs.append("/%s (attributes outside the inode)" % path)
            return
        for name, value in _short_form_attributes(node.attrfork().read()):
            if name.startswith("trusted.") and name[len("trusted.") :] in XFS_ACL_NAMES:
                self.skipped_xattrs.append("/%s %s" % (path, name))
            elif name.startswith(_ext4.PORTABLE_XATTR_PREFIXES):
                entry.xattrs[name] = value
            else:
                self.skipped_xattrs.append("/%s %s" % (path, name))

    def open(self, inum):
        """The file's data with its unwritten (preallocated) extents read as zeros, as the kernel reads them:
        their blocks still hold what the disk held before (dissect.xfs's runs read them)."""
        from dissect.util.stream import RunlistStream

        node = self.fs.get_inode(inum)
        if node.inode.di_format not in MAPPED_FORMATS:
            return node.open()
        return RunlistStream(self.fs.fh, _written_runs(node), node.size, self.fs.block_size)


def _written_runs(node):
    """``[(filesystem block or None, blocks)]`` of a file whose data fork maps extents: None for a hole or
    an unwritten extent."""
    block_size = node.xfs.block_size
    agblklog, agblocks = node.ag.sb.sb_agblklog, node.xfs.sb.sb_agblocks
    runs = []
    at = 0
    for offset, block, count, unwritten in node._iter_blocks():  # pylint: disable=protected-access
        if offset > at:
            runs.append((None, offset - at))
        if unwritten:
            runs.append((None, count))
        else:
            group, in_group = block >> agblklog, block & ((1 << agblklog) - 1)
            runs.append((group * agblocks + in_group, count))
        at = offset + count
    wanted = -(-node.size // block_size)
    if at < wanted:
        runs.append((None, wanted - at))
    return runs


# What microvm_image opens a partition of this filesystem with (microvm.READ_FILESYSTEMS names the file).
Tree = XfsTree
