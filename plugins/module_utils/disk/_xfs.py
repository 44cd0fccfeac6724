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

import stat
import struct

from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import _disk, _ext4
from ansible_collections.goldenimage.pipeline.plugins.module_utils.microvm.microvm import Entry

# The attribute fork formats of an inode (di_aformat) and the namespaces of a short-form attribute.
ATTR_FORK_LOCAL = 1
ATTR_NAMESPACES = {0: "user.", 2: "trusted.", 4: "security."}
ATTR_NAMESPACE_MASK = 0x06
# XFS keeps POSIX ACLs as these trusted-namespace attributes, in its own binary format.
XFS_ACL_NAMES = ("SGI_ACL_FILE", "SGI_ACL_DEFAULT")
INODE_V3_CORE = 0xB0
INODE_V2_CORE = 0x64


class XfsError(_disk.DiskError):
    """The filesystem cannot be read; the message names the partition and the cause."""


def _device_numbers(raw):
    """(major, minor) of XFS's on-disk device number (14-bit major, 18-bit minor)."""
    dev = struct.unpack_from(">I", raw, 0)[0]
    return (dev >> 18) & 0x1FF, dev & 0x3FFFF


def _short_form_attributes(raw):
    """``[(name with its namespace prefix, value)]`` of a short-form attribute fork."""
    total, count = struct.unpack_from(">HB", raw, 0)
    found = []
    at = 4
    for _index in range(count):
        if at + 3 > min(total, len(raw)):
            break
        name_length, value_length, flags = raw[at], raw[at + 1], raw[at + 2]
        name = raw[at + 3 : at + 3 + name_length].decode("utf-8", "surrogateescape")
        value = bytes(raw[at + 3 + name_length : at + 3 + name_length + value_length])
        found.append((ATTR_NAMESPACES.get(flags & ATTR_NAMESPACE_MASK, "unknown.") + name, value))
        at += 3 + name_length + value_length
    return found


class XfsView(_disk.ExtView):
    """The seal rules' view over XFS (names case-sensitive; symlinks are not followed)."""

    def __init__(self, image, part):
        _disk._require("dissect.xfs")
        from dissect.xfs import XFS

        try:
            self.fs = XFS(_disk._RangeFile(image, part["offset"], part["size"]))
        except Exception as exc:
            raise XfsError("partition %s: cannot read XFS: %s" % (part["number"], exc)) from exc

    def _inode(self, path):
        from dissect.xfs.exceptions import Error

        try:
            return self.fs.get(_disk._norm(path))
        except (Error, OSError):
            return None


class XfsTree(_ext4.Ext4Tree):
    FILESYSTEM = "XFS"

    LIBRARY = "dissect.xfs"
    ERROR = XfsError

    def _reader(self, stream):
        from dissect.xfs import XFS

        return XFS(stream)

    def _view(self, image, part):
        return XfsView(image, part)

    def _entry(self, path, node):
        raw = node.inode
        kind = _ext4.KINDS.get(stat.S_IFMT(raw.di_mode), "unknown")
        entry = Entry(
            path,
            kind,
            mode=stat.S_IMODE(raw.di_mode),
            uid=raw.di_uid,
            gid=raw.di_gid,
            mtime=node.mtime_ns // 1000000000,
            size=node.size if kind in ("file", "symlink") else 0,
            inum=node.inum,
            nlink=raw.di_nlink if raw.di_version > 1 else raw.di_onlink,
        )
        if kind == "symlink":
            entry.link = node.link
        elif kind in ("char", "block"):
            entry.rdev = _device_numbers(node.datafork().read(4))
        if raw.di_forkoff:
            self._attributes(path, node, entry)
        return entry

    def _attributes(self, path, node, entry):
        raw = node.inode
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
