# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Decompression of a bzImage's payload into the ELF vmlinux: the standard library for gzip, xz, lzma
and bzip2, ``compression.zstd`` (Python 3.14) or ``backports.zstd`` for zstd, and ``dissect.util``'s LZ4
block decoder (already required by ``dissect.extfs``) for the kernel's legacy LZ4 frame.

Which bytes are a candidate and what counts as a kernel are ``microvm``'s rules; this file only
decompresses. A format whose library is missing is reported as not read.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import bz2
import lzma
import struct
import zlib

from ansible_collections.goldenimage.pipeline.plugins.module_utils.microvm import microvm


def _zstd_module():
    try:
        from compression import zstd  # Python 3.14
    except ImportError:
        try:
            from backports import zstd
        except ImportError:
            return None
    return zstd


class NotCompressed(ValueError):
    """What starts at an offset is not a stream of the format tried there (one of ``ERRORS``)."""


ZSTD = _zstd_module()
ERRORS = (zlib.error, lzma.LZMAError, OSError, ValueError, EOFError, RuntimeError) + (
    (ZSTD.ZstdError,) if ZSTD else ()
)


class Truncated(EOFError):
    """A compressed stream whose data ends before its end marker."""


class _Lz4Legacy:
    """The legacy LZ4 frame (``lz4 -l``, what the kernel's build writes): the magic, then blocks, each
    a little-endian compressed size and an LZ4 block of at most 8 MiB output; the kernel's build
    appends the uncompressed size, which reads as a block that does not fit and ends the stream."""

    BLOCK = 8 * 1024 * 1024

    def __init__(self, lz4):
        self.lz4 = lz4

    def blocks(self, data):
        """Each block's output in turn (at most ``BLOCK`` bytes each, so memory stays bounded)."""
        offset = 4
        while offset + 4 <= len(data):
            (size,) = struct.unpack_from("<I", data, offset)
            if size == 0x184C2102:
                offset += 4
                continue
            if not size or offset + 4 + size > len(data):
                return
            try:
                block = self.lz4.decompress(bytes(data[offset + 4 : offset + 4 + size]), self.BLOCK)
            except Exception:  # the decoder's CorruptDataError: no LZ4 stream starts here
                raise NotCompressed("not an LZ4 block") from None
            yield block
            offset += 4 + size


def _lz4():
    try:
        from dissect.util.compression import lz4
    except ImportError:
        return None
    return _Lz4Legacy(lz4)


def _decompressor(name):
    if name == "gzip":
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if name == "xz":
        return lzma.LZMADecompressor(lzma.FORMAT_XZ)
    if name == "lzma":
        return lzma.LZMADecompressor(lzma.FORMAT_ALONE)
    if name == "bzip2":
        return bz2.BZ2Decompressor()
    if name == "lz4":
        return _lz4()
    if name == "zstd" and ZSTD is not None:
        return ZSTD.ZstdDecompressor()
    return None


def readable(name):
    """Whether this host has a reader for payload format ``name``."""
    return _decompressor(name) is not None


# Compressed bytes fed per step and the most output one step returns: memory stays a few MiB whatever
# the payload's ratio.
FEED = 1024 * 1024
STEP = 4 * 1024 * 1024


def chunks(name, data):
    """The decompressed stream of format ``name`` at the start of ``data`` (bytes after it ignored), in
    pieces of at most ``STEP`` bytes (an LZ4 block at most 8 MiB). Raises one of ``ERRORS`` when the
    data does not decompress, ``Truncated`` (one of them) when the data ends before the stream's end
    marker (a legacy LZ4 frame has none, so its stream cut short simply ends)."""
    engine = _decompressor(name)
    if name == "lz4":
        yield from engine.blocks(data)
        return
    view = memoryview(data)
    pos = 0
    if name == "gzip":
        pending = b""
        while not engine.eof:
            if not pending:
                if pos >= len(view):
                    raise Truncated("the gzip stream ends before its end marker")
                pending, pos = view[pos : pos + FEED], pos + FEED
            out = engine.decompress(pending, STEP)
            pending = engine.unconsumed_tail
            if out:
                yield out
        return
    while not engine.eof:
        feed = b""
        if engine.needs_input:
            if pos >= len(view):
                raise Truncated("the %s stream ends before its end marker" % name)
            feed, pos = view[pos : pos + FEED], pos + FEED
        out = engine.decompress(feed, STEP)
        if out:
            yield out


def decompress(name, data, limit=microvm.MAX_VMLINUX):
    """At most ``limit`` bytes of the stream of format ``name`` at the start of ``data``, or None when it
    does not decompress. ``name`` must be a format ``readable`` answers for."""
    found = []
    total = 0
    try:
        for piece in chunks(name, data):
            found.append(piece)
            total += len(piece)
            if total >= limit:
                break
    except ERRORS:
        return None
    return b"".join(found)[:limit]


# A compressed module's bytes are read in pieces this large until its ELF header is out, at most
# ``MODULE_HEAD_READ`` of them: only the header's bytes are decompressed.
MODULE_HEAD_PIECE = 4096
MODULE_HEAD_READ = 256 * 1024
ELF_HEAD = 64


def elf_head(fh, path):
    """The first 64 bytes of the file at ``path`` as it is loaded: a compressed module decompressed
    (empty when this host has no reader for its format or it does not decompress). Only the header's
    bytes are decompressed, from the first few KiB of the file."""
    name = microvm.module_compression(path)
    if name is None:
        return fh.read(ELF_HEAD)
    engine = _decompressor(name)
    if engine is None:
        return b""
    head = b""
    read = 0
    try:
        while len(head) < ELF_HEAD and read < MODULE_HEAD_READ and not engine.eof:
            if name == "gzip" and engine.unconsumed_tail:
                piece = engine.unconsumed_tail
            elif name == "gzip" or engine.needs_input:
                piece = fh.read(MODULE_HEAD_PIECE)
                if not piece:
                    break
                read += len(piece)
            else:
                piece = b""
            head += engine.decompress(piece, ELF_HEAD - len(head))
    except ERRORS:
        return b""
    return head


def _extract_one(name, data, out, path, limit):
    """Stream candidate ``name`` at the start of ``data`` into ``out``: ``(size, banner)`` when it
    decompresses to a bootable kernel, None when it is no kernel (given up after its first bytes). More
    than ``limit`` bytes is refused, naming the bound: a kernel is never that large."""
    out.seek(0)
    out.truncate()
    head = b""
    total = 0
    scan = microvm.BannerScan()
    try:
        for piece in chunks(name, data):
            if len(head) < 64:
                head += piece[: 64 - len(head)]
                if len(head) >= 64 and not microvm.bootable(head):
                    return None
            total += len(piece)
            microvm.check_vmlinux_size(path, name, total, limit)
            out.write(piece)
            scan.feed(piece)
    except Truncated:
        if len(head) >= 64 and microvm.bootable(head):  # a kernel, cut short: never shipped as one
            microvm.refuse_truncated_payload(path, name, total)
        return None
    except ERRORS:
        return None
    if not microvm.bootable(head):
        return None
    return total, scan.version


def extract_vmlinux(data, path, out, limit=microvm.MAX_VMLINUX):
    """Stream the ELF vmlinux inside bzImage ``data`` (or the ELF or arm64 Image a wholly compressed file
    holds) into the binary file ``out``; ``(format, size, banner version)``. A ``Refusal`` naming what
    was tried when there is none, or when a payload decompresses past ``limit``."""
    tried = []
    unsupported = []
    view = memoryview(data)
    for name, offset in microvm.payload_offsets(data):
        if not readable(name):
            unsupported.append(name)
            continue
        found = _extract_one(name, view[offset:], out, path, limit)
        if name not in tried:
            tried.append(name)
        if found:
            out.flush()
            return (name,) + found
    microvm.refuse_payload(path, tried, unsupported, microvm.kernel_kind(bytes(data[:4096])))
