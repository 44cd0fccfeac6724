#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: disk_image
short_description: Write a compressed qcow2 artifact of a disk image, with its checksum files and size figures
version_added: 0.1.0
description:
  - Converts the image O(src) into the qcow2 O(dest) with C(qemu-img convert), compressed as O(compression)
    asks, and writes C(<dest>.sha256) and C(<dest>.sha512) (the format of C(sha256sum) and C(sha512sum)).
  - V(auto) compression is zstd where this qemu-img can write it (a tiny probe image decides, in a temporary
    directory), else zlib; V(zstd) is refused where qemu-img cannot write it, before anything is written.
  - O(dest) is written whole or not at all (converted beside it, then renamed).
  - An O(dest) whose checksum files record its content is left alone (C(changed=false)) unless O(force).
  - Returns the size figures a manifest records (virtual, allocated, allocated before compression, saved).
  - Runs on the controller (or wherever the task is delegated) and needs C(qemu-img) there.
author:
  - goldenimage.pipeline maintainers (@goldenimage)
requirements:
  - qemu-img
options:
  src:
    description: The image to convert (any format qemu-img reads, for example Packer's raw or qcow2 output).
    type: path
    required: true
  dest:
    description: The qcow2 artifact to write; its directory must exist.
    type: path
    required: true
  compression:
    description: V(auto) (zstd where possible, else zlib), V(zstd), V(zlib) or V(none).
    type: str
    choices: [auto, zstd, zlib, none]
    default: auto
  checksums:
    description: The checksum files written beside O(dest), one per algorithm.
    type: list
    elements: str
    choices: [sha256, sha512]
    default: [sha256, sha512]
  force:
    description: Convert again even when O(dest) and its checksum files agree.
    type: bool
    default: false
extends_documentation_fragment:
  - goldenimage.pipeline.attributes
attributes:
  check_mode:
    support: full
    details: In check mode the images are read and the compression decided; nothing is written.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: An artifact whose checksum files record its content is not written again.
"""

EXAMPLES = r"""
- name: Write the compressed artifact
  goldenimage.pipeline.disk_image:
    src: /srv/build/output/ubuntu-2404-postgres.raw
    dest: /srv/baked-images/ubuntu-2404-postgres-v20261201-2404.qcow2
    compression: auto
  register: artifact

- name: Report what compression saved
  ansible.builtin.debug:
    msg: "{{ artifact.report }}"
"""

RETURN = r"""
dest:
  description: The artifact.
  returned: always
  type: str
compression:
  description: The compression of the artifact.
  returned: always
  type: str
  sample: zstd
sizes:
  description: C(virtual_bytes), C(allocated_bytes), C(uncompressed_allocated_bytes) and C(saved_bytes).
  returned: unless a conversion was only predicted in check mode
  type: dict
  sample:
    virtual_bytes: 4194304
    allocated_bytes: 200704
    uncompressed_allocated_bytes: 4390912
    saved_bytes: 4190208
checksums:
  description: The artifact's digests, one per O(checksums) entry.
  returned: unless a conversion was only predicted in check mode
  type: dict
  sample: {sha256: 9f86d0..., sha512: ee26b0...}
report:
  description: One line saying what compression saved.
  returned: unless a conversion was only predicted in check mode
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import artifact
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import inputs
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import run_module
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk._qemu_img import (
    QemuImg,
    digests,
    read_text,
    write_text,
)


def argument_spec():
    return dict(
        src=dict(type="path", required=True),
        dest=dict(type="path", required=True),
        compression=dict(type="str", choices=list(artifact.COMPRESSIONS), default="auto"),
        checksums=dict(
            type="list", elements="str", choices=list(artifact.CHECKSUMS), default=list(artifact.CHECKSUMS)
        ),
        force=dict(type="bool", default=False),
    )


class DiskImage(object):
    def __init__(self, params, qemu, check_mode=False):
        self.p = params
        self.qemu = qemu
        self.check_mode = check_mode

    def current(self, name):
        """The artifact's digests when its checksum files record exactly its content, else None."""
        p = self.p
        if not os.path.isfile(p["dest"]):
            return None
        found = digests(p["dest"], p["checksums"])
        for algorithm, digest in found.items():
            if artifact.recorded_digest(read_text("%s.%s" % (p["dest"], algorithm)), name) != digest:
                return None
        return found

    def run(self):
        p = self.p
        inputs.require_file(p["src"], os.path.isfile(p["src"]), "image %s" % p["src"], "build it first")
        folder = os.path.dirname(os.path.abspath(p["dest"]))
        artifact.check_dest_folder(p["dest"], folder, os.path.isdir(folder))
        name = os.path.basename(p["dest"])
        before = self.qemu.info(p["src"])
        kept = None if p["force"] else self.current(name)
        result = {"dest": p["dest"], "changed": kept is None}
        if kept is None:
            zstd_ok, zstd_error = (False, "")
            if p["compression"] in ("auto", "zstd"):
                zstd_ok, zstd_error = self.qemu.writes_zstd()
            compression = artifact.pick_compression(p["compression"], zstd_ok, zstd_error)
            result["compression"] = compression
            if self.check_mode:
                return result
            self.qemu.convert(p["src"], p["dest"], artifact.convert_options(compression))
            sums = digests(p["dest"], p["checksums"])
            for algorithm, digest in sums.items():
                write_text("%s.%s" % (p["dest"], algorithm), artifact.checksum_line(digest, name))
        else:
            sums = kept
        after = self.qemu.info(p["dest"])
        result.setdefault("compression", artifact.compression_of(after))
        size = artifact.sizes(before, after)
        result.update(sizes=size, checksums=sums, report=artifact.report(name, size, result["compression"]))
        return result


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(module, lambda: DiskImage(module.params, QemuImg(module), module.check_mode).run())


if __name__ == "__main__":
    main()
