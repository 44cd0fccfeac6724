# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""qemu-img on the controller, and the files around an artifact: info, the zstd probe, convert, digests.

I/O only, decides nothing. Commands run through the module's ``run_command`` (argv, never a shell).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import shutil
import tempfile

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError

CHUNK = 4 * 1024 * 1024


class QemuImg(object):
    def __init__(self, module, binary="qemu-img"):
        self.module = module
        self.binary = binary

    def _run(self, argv, what):
        rc, out, err = self.module.run_command([self.binary] + argv)
        if rc != 0:
            raise PipelineError("qemu-img %s failed (rc %d): %s" % (what, rc, (err or out).strip()), rc=rc)
        return out

    def info(self, path):
        return json.loads(self._run(["info", "--output=json", path], "info of %s" % path))

    def writes_zstd(self):
        """``(True, "")`` when this qemu-img writes zstd qcow2 (only creating a tiny image tells)."""
        folder = tempfile.mkdtemp(prefix="zstd-probe-")
        try:
            probe = os.path.join(folder, "probe.qcow2")
            rc, _out, err = self.module.run_command(
                [self.binary, "create", "-q", "-f", "qcow2", "-o", "compression_type=zstd", probe, "1M"]
            )
            return rc == 0, err
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def convert(self, source, dest, options):
        """Write ``dest`` whole or not at all: converted beside it, then renamed."""
        folder = os.path.dirname(os.path.abspath(dest))
        handle, partial = tempfile.mkstemp(prefix=".%s." % os.path.basename(dest), dir=folder)
        os.close(handle)
        try:
            self._run(["convert"] + list(options) + [source, partial], "convert of %s" % source)
            os.chmod(partial, 0o644)
            os.rename(partial, dest)
        finally:
            if os.path.exists(partial):
                os.unlink(partial)


def digests(path, algorithms):
    """``{algorithm: hex}`` of a file, read once in chunks."""
    hashes = {name: hashlib.new(name) for name in algorithms}
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            for digest in hashes.values():
                digest.update(chunk)
    return {name: digest.hexdigest() for name, digest in hashes.items()}


def read_text(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def write_text(path, text):
    folder = os.path.dirname(os.path.abspath(path))
    handle, partial = tempfile.mkstemp(prefix=".checksum-", dir=folder)
    with os.fdopen(handle, "w") as out:
        out.write(text)
    os.chmod(partial, 0o644)
    os.rename(partial, path)
