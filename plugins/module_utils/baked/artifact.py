# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The rules of a published disk artifact: its compression, its size figures, its checksum files.

Pure: no I/O. qemu-img's answers (``info`` as JSON, whether it can write zstd) come in as data.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal

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


def check_dest_folder(dest, folder, exists, is_dir=False):
    """The artifact is written into an existing directory (``exists``: the caller looked); none is made.
    ``dest`` itself must not be a directory (``is_dir``): writing there fails half-way otherwise."""
    if not exists:
        raise Refusal("artifact %s" % dest, "its directory %s does not exist" % folder, "create it first")
    if is_dir:
        raise Refusal(
            "artifact %s" % dest, "it is a directory, not a file", "name a file path; nothing was written"
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


def manifest_name(artifact):
    """The manifest file written beside an artifact: ``<name>.qcow2`` -> ``<name>.manifest.json``."""
    name = str(artifact or "")
    if name.endswith(".qcow2"):
        name = name[: -len(".qcow2")]
    if not name:
        raise Refusal("artifact %r" % (artifact,), "it names no file", "give the artifact's file name")
    return name + ".manifest.json"


def pg_manifest(requested, build=None):
    """The manifest's ``pg_versions``: each requested major with the minor and package version the build
    installed (``build``: the build manifest written inside the VM, ``{"postgresql": {major: {minor,
    package_version}}}``; empty when there is none, and the majors are then listed without minors).

    A build manifest that lacks a requested major is refused: the artifact does not carry it.
    """
    majors = [str(m) for m in requested or ()]
    found = {}
    if build:
        found = build.get("postgresql") or {}
        missing = [m for m in majors if m not in found]
        if missing:
            raise Refusal(
                "the build manifest",
                "it lists PostgreSQL %s but %s were requested" % (sorted(found), missing),
                "build again with every requested major, or request only the majors the build installs",
            )
    return [
        {
            "major": major,
            "minor": (found.get(major) or {}).get("minor"),
            "package_version": (found.get(major) or {}).get("package_version"),
        }
        for major in majors
    ]
