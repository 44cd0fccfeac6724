# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""A btrfs filesystem inside a disk image, read with ``dissect.btrfs``: no mount, no root.

``BtrfsTree(image, partition)`` gives what ``_ext4.Ext4Tree`` gives, from the filesystem's default
subvolume (the one a mount without ``subvol=`` shows): every inode once as a ``microvm.Entry`` keyed
by path, nested subvolumes included as the directories they appear as, ``open(inum)`` for one file's
data (inline, extents, compressed), and ``view`` for the seal rules (``BtrfsView``). Inode numbers
restart in every subvolume, so an entry's ``inum`` carries its subvolume's id in the high bits.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import stat

from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import _disk, _ext4

SUBVOLUME_SHIFT = 40
XATTR_ITEM_KEY = 24
# As the kernel's limit on symlinks followed in one lookup.
MAX_LINK_HOPS = 40


class BtrfsError(_disk.DiskError):
    """The filesystem cannot be read; the message names the partition and the cause."""


def _device_numbers(rdev):
    """(major, minor) of btrfs's on-disk device number (the kernel's 12-bit major, 20-bit minor)."""
    return (rdev >> 20) & 0xFFF, rdev & 0xFFFFF


class BtrfsView(_disk.ExtView):
    """The seal rules' view over btrfs's default subvolume (case-sensitive; symlinks not followed)."""

    FILESYSTEM = "btrfs"
    READER = ("dissect.btrfs", "Btrfs")
    ERROR = BtrfsError

    def _kind(self, node):
        return node.type

    def _inode(self, path):
        """The node at ``path``, following symlinks on the way (not the last one), as ``ExtView`` does.

        Looked up by directory listing: ``dissect.btrfs``'s own path lookup cannot pass a symlink."""
        from dissect.btrfs import exceptions

        # Only absence answers None (a name missing, a file where a directory was looked for): a
        # damaged tree or an extent the reader cannot decode raises, so no check passes on an unread file.
        try:
            return _lookup(self.fs.root, [p for p in path.split("/") if p])
        except (exceptions.FileNotFoundError, exceptions.NotADirectoryError):
            return None


def _lookup(root, names):
    node, above, hops, index = root, [], 0, 0
    while index < len(names):
        name = names[index]
        if name in (".", ".."):
            node = (above.pop() if above else root) if name == ".." else node
            index += 1
            continue
        child = node.listdir().get(name)
        if child is None:
            return None
        if child.type == stat.S_IFLNK and index < len(names) - 1:
            hops += 1
            if hops > MAX_LINK_HOPS:
                return None
            target = child.link
            if target.startswith("/"):
                node, above = root, []
            names = [p for p in target.split("/") if p] + names[index + 1 :]
            index = 0
            continue
        above.append(node)
        node = child
        index += 1
    return node


class BtrfsTree(_ext4.Ext4Tree):
    ERROR = BtrfsError
    VIEW = BtrfsView

    def filesystem_bytes(self):
        # This device's share of the filesystem (the one device a partition holds).
        return self.fs.sb.dev_item.total_bytes

    def _children(self, node):
        return node.iterdir()

    def _stat(self, node):
        raw = node.inode
        return raw.mode, raw.uid, raw.gid, node.mtime_ns // 1000000000, raw.nlink

    def _inum(self, node):
        return (node.subvolume.objectid << SUBVOLUME_SHIFT) | node.inum

    def _rdev(self, node):
        return _device_numbers(node.inode.rdev)

    def _holes_of(self, path, node, size):
        """Holes (gaps and hole extents, disk_bytenr 0) and preallocated extents (the reader gives them as
        gaps) from the file's extent items; an inline file has none."""
        try:
            extents = node.extents()
        except Exception:  # an unreadable map is measured another way, below
            # The bytes the inode says it holds against its size: a lower bound.
            return max(0, size - node.inode.nbytes)
        if extents is None:
            return 0
        return min(size, sum(e.length for e in extents if not e.disk_offset))

    def _attributes(self, path, node, entry):
        from dissect.btrfs.c_btrfs import c_btrfs

        cursor = node.subvolume.tree.cursor()
        for _item, data in cursor.iter(node.inum, XATTR_ITEM_KEY, 0, ignore_offset=True):
            item = c_btrfs.btrfs_dir_item(data)
            name = item.name.decode("utf-8", "surrogateescape")
            if name.startswith(_ext4.PORTABLE_XATTR_PREFIXES):
                entry.xattrs[name] = bytes(item.data)
            else:
                self.skipped_xattrs.append("/%s %s" % (path, name))

    def open(self, inum):
        subvolume = self.fs.open_subvolume(inum >> SUBVOLUME_SHIFT)
        return subvolume.inode(inum & ((1 << SUBVOLUME_SHIFT) - 1)).open()


# What microvm_image opens a partition of this filesystem with (microvm.READ_FILESYSTEMS names the file).
Tree = BtrfsTree
