# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The rules of a published disk artifact: its compression, its size figures, its checksum files.

Pure: no I/O. qemu-img's answers (``info`` as JSON, whether it can write zstd) come in as data.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.module_utils.errors import Refusal

COMPRESSIONS = ("auto", "zstd", "zlib", "none")
CHECKSUMS = ("sha256", "sha512")


def pick_compression(requested, zstd_ok, zstd_error=""):
    """The compression written: ``auto`` is zstd where qemu-img can write it, else zlib."""
    if requested not in COMPRESSIONS:
        raise Refusal(
            "option compression", "%r is not one of %s" % (requested, ", ".join(COMPRESSIONS)), "pick one"
        )
    if requested in ("zlib", "none"):
        return requested
    if zstd_ok:
        return "zstd"
    if requested == "auto":
        return "zlib"
    raise Refusal(
        "option compression",
        "it is zstd but this qemu-img cannot write zstd qcow2 (%s)"
        % ((zstd_error or "").strip() or "no reason given"),
        "use auto or zlib",
    )


def convert_options(compression):
    """qemu-img convert's options for a qcow2 output with ``compression``."""
    argv = ["-O", "qcow2"]
    if compression != "none":
        argv.append("-c")
    if compression == "zstd":
        argv += ["-o", "compression_type=zstd"]
    return argv


def sizes(before, after):
    """The manifest's size figures from qemu-img info of the source and of the artifact."""
    uncompressed, allocated = int(before["actual-size"]), int(after["actual-size"])
    return {
        "virtual_bytes": int(after["virtual-size"]),
        "allocated_bytes": allocated,
        "uncompressed_allocated_bytes": uncompressed,
        "saved_bytes": uncompressed - allocated,
    }


def bare_digest(value, algorithm):
    """A digest as checksum files and ``stat`` give it: lower case, without its ``<algorithm>:`` prefix.

    ``SHA256:AB…`` and ``ab…`` are the same sha256; ``""`` (none given) stays ``""``.
    """
    if algorithm not in CHECKSUMS:
        raise Refusal(
            "checksum algorithm %r" % (algorithm,), "it is not one of %s" % ", ".join(CHECKSUMS), "pick one"
        )
    text = str(value or "").strip().lower()
    prefix = algorithm + ":"
    return text[len(prefix) :] if text.startswith(prefix) else text


def checksum_line(digest, filename):
    """One line in sha256sum/sha512sum format."""
    return "%s  %s\n" % (digest, filename)


def recorded_digest(text, filename):
    """The digest a checksum file records for ``filename``, or None."""
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("*") == filename:
            return parts[0]
    return None


def compression_of(info):
    """The compression qemu-img info reports for a qcow2 (zlib when it names none)."""
    data = (info.get("format-specific") or {}).get("data") or {}
    return data.get("compression-type") or "zlib"


def report(name, size, compression):
    return (
        "%s: %d bytes allocated before, %d after %s compression (saved %d bytes, %.1f%%); virtual size %d"
        % (
            name,
            size["uncompressed_allocated_bytes"],
            size["allocated_bytes"],
            compression,
            size["saved_bytes"],
            (1 - size["allocated_bytes"] / float(max(size["uncompressed_allocated_bytes"], 1))) * 100,
            size["virtual_bytes"],
        )
    )
