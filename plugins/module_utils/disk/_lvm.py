# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Adapter: the LVM2 metadata of a physical volume in a disk image's partition, read with dissect.volume
and handed back as plain data (``volume_group``); which logical volume can be read as a filesystem is
decided by ``microvm.volume_partitions``.

Nothing is activated and no device-mapper is needed: a linear logical volume is a run of extents of its
physical volume, so its filesystem is read at that run's offset in the image like any partition's.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import _disk

SECTOR = 512


class LvmError(_disk.DiskError):
    """A physical volume whose metadata cannot be read."""


def volume_group(image, part):
    """The volume group on the physical volume in ``part`` of ``image``: ``{"name", "extent_bytes",
    "pv" (this physical volume's name in the metadata), "pe_start_bytes" (where its extents begin, from the
    partition's start), "pv_count", "lvs": [{"name", "visible", "segments": [{"type", "start_extent",
    "extent_count", "stripes": [(pv name, first extent)]}]}]}``."""
    try:
        from dissect.util.stream import RangeStream
        from dissect.volume.lvm import LVM2
    except ImportError as exc:
        raise _disk.MissingLibrary("dissect.volume", exc) from exc
    stream = RangeStream(image.stream, part["offset"], part["size"])
    try:
        group = LVM2(stream).vg
    except Exception as exc:
        raise LvmError(str(exc) or type(exc).__name__) from exc
    mine = [pv for pv in group.physical_volumes.values() if pv.dev is not None]
    if len(mine) != 1:
        raise LvmError("its label names no physical volume of its metadata")
    return {
        "name": group.name,
        "extent_bytes": group.extent_size * SECTOR,
        "pv": mine[0].name,
        "pe_start_bytes": mine[0].pe_start * SECTOR,
        "pv_count": len(group.physical_volumes),
        "lvs": [
            {
                "name": lv.name,
                "visible": lv.is_visible,
                "segments": [
                    {
                        "type": seg.type,
                        "start_extent": seg.start_extent,
                        "extent_count": seg.extent_count,
                        "stripes": [tuple(s) for s in getattr(seg, "stripes", None) or []],
                    }
                    for seg in lv.segments
                ],
            }
            for lv in group.logical_volumes.values()
        ],
    }
