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


ZSTD = _zstd_module()
ERRORS = (zlib.error, lzma.LZMAError, OSError, ValueError, EOFError, RuntimeError) + (
    (ZSTD.ZstdError,) if ZSTD else ()
)


class _Lz4Legacy:
    """The legacy LZ4 frame (``lz4 -l``, what the kernel's build writes): the magic, then blocks, each
    a little-endian compressed size and an LZ4 block of at most 8 MiB output; the kernel's build
    appends the uncompressed size, which reads as a block that does not fit and ends the stream."""

    BLOCK = 8 * 1024 * 1024

    def __init__(self, lz4):
        self.lz4 = lz4

    def decompress(self, data, limit):
        offset = 4
        out = []
        total = 0
        while offset + 4 <= len(data) and total < limit:
            (size,) = struct.unpack_from("<I", data, offset)
            if size == 0x184C2102:
                offset += 4
                continue
            if not size or offset + 4 + size > len(data):
                break
            try:
                block = self.lz4.decompress(bytes(data[offset + 4 : offset + 4 + size]), self.BLOCK)
            except Exception:  # the decoder's CorruptDataError: no LZ4 stream starts here
                return None
            out.append(block)
            total += len(block)
            offset += 4 + size
        return b"".join(out)


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


def decompress(name, data, limit=microvm.MAX_VMLINUX):
    """The stream of format ``name`` at the start of ``data`` (bytes after it ignored), or None when it
    does not decompress. ``name`` must be a format ``readable`` answers for."""
    engine = _decompressor(name)
    try:
        return engine.decompress(data, limit)
    except ERRORS:
        return None


# Enough of a compressed module to decompress its ELF header.
MODULE_HEAD_READ = 256 * 1024


def elf_head(fh, path):
    """The first 64 bytes of the file at ``path`` as it is loaded: a compressed module decompressed
    (empty when this host has no reader for its format or it does not decompress)."""
    name = microvm.module_compression(path)
    if name is None:
        return fh.read(64)
    if not readable(name):
        return b""
    return decompress(name, fh.read(MODULE_HEAD_READ), 64) or b""


def extract_vmlinux(data, path):
    """``(format, kernel)``: the ELF vmlinux inside bzImage ``data`` (or the ELF or arm64 Image a wholly
    compressed file holds); a ``Refusal`` naming what was tried when there is none."""
    view = memoryview(data)
    tried = []
    unsupported = []
    for name, offset in microvm.payload_offsets(data):
        if not readable(name):
            unsupported.append(name)
            continue
        found = decompress(name, view[offset:])
        if name not in tried:
            tried.append(name)
        if found and microvm.bootable(found):
            return name, found
    microvm.refuse_payload(path, tried, unsupported, microvm.kernel_kind(data[:4096]))
