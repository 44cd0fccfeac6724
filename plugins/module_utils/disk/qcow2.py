# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The qcow2 header rules checked before a reader trusts the header: the limits qemu's own driver
applies when it opens an image (block/qcow2.c), and that every table the header names lies inside the
file. A header that lies (a table past the end, an L1 table of 32 GiB) is refused here, naming the
field, instead of sending the reader to allocate or seek what the file does not hold.

Pure: no I/O. The caller reads the header bytes and the file size.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import struct

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal

MAGIC = b"QFI\xfb"
# The bytes read of a header: version 3's 104-byte header.
HEADER_BYTES = 104
# qemu's bounds (QCOW_MAX_L1_SIZE, QCOW_MAX_REFTABLE_SIZE, QCOW_MAX_SNAPSHOTS, the cluster_bits range).
MAX_L1_BYTES = 32 * 1024 * 1024
MAX_REFTABLE_BYTES = 8 * 1024 * 1024
MAX_SNAPSHOTS = 65536
MIN_CLUSTER_BITS = 9
MAX_CLUSTER_BITS = 21
MAX_BACKING_NAME = 1023
# The incompatible feature bits qemu knows: dirty, corrupt, external data file, compression type,
# extended L2 entries. Any other bit means a reader that does not know it must not open the image.
KNOWN_INCOMPATIBLE = 0x1F
MOVE = (
    "check it with qemu-img check; rebuild or download the image again, "
    "or convert a good copy with qemu-img convert"
)


def _fields(header):
    (magic, version, backing_offset, backing_size, cluster_bits, size, crypt, l1_size, l1_offset) = (
        struct.unpack_from(">4sIQIIQIIQ", header, 0)
    )
    (reftable_offset, reftable_clusters, nb_snapshots, snapshots_offset) = struct.unpack_from(
        ">QIIQ", header, 48
    )
    found = dict(
        magic=magic,
        version=version,
        backing_file_offset=backing_offset,
        backing_file_size=backing_size,
        cluster_bits=cluster_bits,
        size=size,
        crypt_method=crypt,
        l1_size=l1_size,
        l1_table_offset=l1_offset,
        refcount_table_offset=reftable_offset,
        refcount_table_clusters=reftable_clusters,
        nb_snapshots=nb_snapshots,
        snapshots_offset=snapshots_offset,
        incompatible_features=0,
        header_length=72,
    )
    if version >= 3 and len(header) >= HEADER_BYTES:
        found["incompatible_features"] = struct.unpack_from(">Q", header, 72)[0]
        found["header_length"] = struct.unpack_from(">I", header, 100)[0]
    return found


def check_header(path, header, file_size):
    """Refuse the qcow2 at ``path`` (first ``HEADER_BYTES`` bytes ``header``, ``file_size`` bytes long)
    when a header field breaks qemu's limits or names a table outside the file."""

    def refuse(field, rule):
        raise Refusal("qcow2 %s" % path, "its header field %s %s" % (field, rule), MOVE)

    if len(header) < 72:
        refuse("header", "is cut short: the file holds %d bytes" % len(header))
    f = _fields(header)
    if f["version"] not in (2, 3):
        refuse("version", "is %d; qcow2 versions are 2 and 3" % f["version"])
    bits = f["cluster_bits"]
    if not MIN_CLUSTER_BITS <= bits <= MAX_CLUSTER_BITS:
        refuse("cluster_bits", "is %d, outside %d to %d" % (bits, MIN_CLUSTER_BITS, MAX_CLUSTER_BITS))
    cluster = 1 << bits
    if f["version"] == 3 and not HEADER_BYTES <= f["header_length"] <= cluster:
        refuse(
            "header_length",
            "is %d, outside %d to the cluster size %d" % (f["header_length"], HEADER_BYTES, cluster),
        )
    unknown = f["incompatible_features"] & ~KNOWN_INCOMPATIBLE
    if unknown:
        refuse("incompatible_features", "sets unknown bits 0x%x" % unknown)
    if f["crypt_method"]:
        refuse("crypt_method", "is %d: the image is encrypted" % f["crypt_method"])
    if f["backing_file_offset"]:
        end = f["backing_file_offset"] + f["backing_file_size"]
        if f["backing_file_size"] > MAX_BACKING_NAME or end > cluster:
            refuse(
                "backing_file_offset",
                "names a backing file name outside the header cluster (bytes %d to %d)"
                % (f["backing_file_offset"], end),
            )
    per_l1 = cluster * (cluster // 8)  # bytes of disk one L1 entry maps
    needed = -(-f["size"] // per_l1)
    if f["l1_size"] * 8 > MAX_L1_BYTES:
        refuse(
            "l1_size", "is %d entries, more than qemu's %d MiB L1 table" % (f["l1_size"], MAX_L1_BYTES >> 20)
        )
    if f["l1_size"] < needed:
        refuse("l1_size", "is %d entries; the virtual size %d needs %d" % (f["l1_size"], f["size"], needed))
    _inside("l1_table_offset", f["l1_table_offset"], f["l1_size"] * 8, cluster, file_size, refuse)
    reftable = f["refcount_table_clusters"] * cluster
    if reftable > MAX_REFTABLE_BYTES:
        refuse(
            "refcount_table_clusters",
            "is %d, more than qemu's %d MiB" % (f["refcount_table_clusters"], MAX_REFTABLE_BYTES >> 20),
        )
    _inside("refcount_table_offset", f["refcount_table_offset"], reftable, cluster, file_size, refuse)
    if f["nb_snapshots"] > MAX_SNAPSHOTS:
        refuse("nb_snapshots", "is %d, more than %d" % (f["nb_snapshots"], MAX_SNAPSHOTS))
    if f["nb_snapshots"]:
        _inside("snapshots_offset", f["snapshots_offset"], 1, 8, file_size, refuse)
    return f


def _inside(field, offset, length, align, file_size, refuse):
    if offset % align:
        refuse(field, "is %d, not a multiple of %d" % (offset, align))
    if length and offset + length > file_size:
        refuse(
            field, "names bytes %d to %d, past the file's end at %d" % (offset, offset + length, file_size)
        )
