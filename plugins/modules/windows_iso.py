#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: windows_iso
short_description: Remaster a Windows installer ISO to boot into Setup without a keypress
version_added: 0.1.0
description:
  - Extracts the installer ISO without mounting it, reading its UDF side, and rebuilds it with
    C(xorriso -as mkisofs), the EFI El Torito entry using the no-prompt boot image and the BIOS entry kept.
  - Windows ISOs are UDF/ISO9660 hybrids whose ISO9660 side holds a stub where UDF holds the real files, so
    C(xorriso -extract) silently yields a tree without an install image. The module refuses any extraction
    whose C(sources/install.wim) or C(sources/install.esd) is smaller than O(min_image_size), naming the file
    and its size.
  - Records the sha256 of the source and of the result in C(<dest>.remaster.json); a run with the same source
    checksum and settings whose O(dest) still has the recorded checksum changes nothing.
author:
  - goldenimage.pipeline maintainers (@goldenimage)
requirements:
  - xorriso
  - pycdlib (Python, on the controller) or 7z (Debian p7zip-full) to read UDF
options:
  src:
    description: The installer ISO.
    type: path
    required: true
  dest:
    description: The remastered ISO to write. Written to a temporary name first, then renamed.
    type: path
    required: true
  workdir:
    description:
      - Directory for the extracted tree (as large as the ISO). A temporary directory next to O(dest) when
        omitted. The tree is deleted afterwards.
    type: path
  reader:
    description: The UDF reader. V(auto) uses pycdlib when importable, else 7z.
    type: str
    choices: [auto, pycdlib, 7z]
    default: auto
  min_image_size:
    description: Smallest plausible size in bytes of C(sources/install.wim) or C(sources/install.esd).
    type: int
    default: 104857600
  efi_boot_image:
    description: Path in the ISO of the EFI boot image; the default one has no "Press any key" prompt.
    type: str
    default: efi/microsoft/boot/efisys_noprompt.bin
  bios_boot_image:
    description: Path in the ISO of the BIOS boot sector image.
    type: str
    default: boot/etfsboot.com
  volume_id:
    description: Volume label of the result. The source's label when omitted.
    type: str
extends_documentation_fragment:
  - goldenimage.pipeline.attributes
attributes:
  check_mode:
    support: full
    details: Reads the source checksum and the record and reports whether a rebuild would happen.
  diff_mode:
    support: none
  idempotent:
    support: full
notes:
  - With a no-prompt ISO the CD boots unconditionally, so the VM that installs from it must boot from its
    disk first (C(bootOrder) 1) or Setup starts again after every reboot.
"""

EXAMPLES = r"""
- name: Remaster the Windows 11 ISO once per ISO revision
  goldenimage.pipeline.windows_iso:
    src: /srv/iso/Win11_24H2_English_x64.iso
    dest: /srv/iso/Win11_24H2_English_x64-noprompt.iso
  register: remastered
"""

RETURN = r"""
dest:
  description: The remastered ISO.
  returned: always
  type: str
sha256:
  description: sha256 of the remastered ISO (the one it would keep, in check mode when up to date).
  returned: when the ISO exists after the run
  type: str
source_sha256:
  description: sha256 of the source ISO.
  returned: always
  type: str
install_image:
  description: The install image found in the UDF tree, C(path) and C(size).
  returned: when the ISO was rebuilt
  type: dict
el_torito:
  description: El Torito entries of the result (C(index), C(platform), C(bootable), C(emulation), C(path)).
  returned: when the ISO exists after the run
  type: list
  elements: dict
"""

import os
import shutil
import tempfile
import traceback

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import inputs
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import (
    PipelineError,
    run_module,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.windows import _iso, iso


def argument_spec():
    return {
        "src": {"type": "path", "required": True},
        "dest": {"type": "path", "required": True},
        "workdir": {"type": "path"},
        "reader": {"type": "str", "choices": ["auto", "pycdlib", "7z"], "default": "auto"},
        "min_image_size": {"type": "int", "default": iso.DEFAULT_MIN_IMAGE_SIZE},
        "efi_boot_image": {"type": "str", "default": iso.EFI_NOPROMPT_IMAGE},
        "bios_boot_image": {"type": "str", "default": iso.BIOS_BOOT_IMAGE},
        "volume_id": {"type": "str"},
    }


def build_module():
    return AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)


def settings_of(params):
    return {
        "efi_boot_image": params["efi_boot_image"],
        "bios_boot_image": params["bios_boot_image"],
        "min_image_size": params["min_image_size"],
        "volume_id": params["volume_id"],
    }


def rebuild(params, source_sha256):
    """Extract (``_iso``), check the tree (``iso`` rules), rebuild, check the El Torito entries, rename."""
    dest = params["dest"]
    parent = params["workdir"] or os.path.dirname(os.path.abspath(dest))
    work = tempfile.mkdtemp(prefix=".windows-iso-", dir=parent)
    try:
        tree = os.path.join(work, "tree")
        os.mkdir(tree)
        label = _iso.extract(params["src"], tree, params["reader"])
        files = _iso.tree_sizes(tree)
        image = iso.install_image(files, params["min_image_size"])
        boot = iso.boot_images(files, params["efi_boot_image"], params["bios_boot_image"])
        partial = os.path.join(work, "out.iso")
        _iso.run_xorriso(iso.xorriso_command(tree, partial, params["volume_id"] or label, boot))
        entries = iso.el_torito_entries(_iso.el_torito_report(partial))
        iso.check_boot_entries(entries)
        os.replace(partial, dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    digest = _iso.sha256_file(dest)
    _iso.write_record(
        dest, {"source_sha256": source_sha256, "settings": settings_of(params), "sha256": digest}
    )
    return {"sha256": digest, "install_image": image, "el_torito": entries}


def run(module):
    """Skip when the record proves ``dest`` current, predict in check mode, else rebuild."""
    params = module.params
    src = params["src"]
    inputs.require_file(src, os.path.isfile(src), "source ISO %s" % src, "give the installer ISO's path")
    xorriso = module.get_bin_path("xorriso")
    iso.require_xorriso(params["dest"], xorriso, module.check_mode)
    source_sha256 = _iso.sha256_file(params["src"])
    dest = params["dest"]
    current = _iso.sha256_file(dest) if os.path.isfile(dest) else None
    result = {"dest": dest, "source_sha256": source_sha256}
    if iso.up_to_date(_iso.read_record(dest), source_sha256, settings_of(params), current):
        entries = iso.el_torito_entries(_iso.el_torito_report(dest)) if xorriso else []
        return dict(result, changed=False, sha256=current, el_torito=entries)
    if module.check_mode:
        return dict(
            result, changed=True, msg="check mode: %s would be rebuilt from %s" % (dest, params["src"])
        )
    try:
        result.update(rebuild(params, source_sha256))
    except iso.IsoError as exc:
        raise PipelineError("%s: %s" % (params["src"], exc), **result) from exc
    except OSError as exc:
        raise PipelineError(
            "remastering %s: %s" % (params["src"], exc), exception=traceback.format_exc(), **result
        ) from exc
    return dict(result, changed=True)


def main():
    module = build_module()
    run_module(module, lambda: run(module))


if __name__ == "__main__":
    main()
