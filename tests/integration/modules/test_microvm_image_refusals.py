"""microvm_image refusals on real disks (``mkfs.ext4 -d``): each fires before anything is written, so
a refused run leaves no blob, manifest, tag or layout file behind."""

from __future__ import annotations

import lzma
import pathlib
import re

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.modules import microvm_image

from tests.integration.support import microvm_parts as parts

V = parts.VERSION


class Module:
    check_mode = False
    _diff = True

    def __init__(self, **params):
        self.params = {name: spec.get("default") for name, spec in microvm_image.argument_spec().items()}
        self.params.update(params)

    def log(self, line):
        pass


def run(**params):
    return microvm_image.Runner(Module(**params)).run()


def disk(tmp_path, changes=None, tree_hook=None):
    tree = parts.root_tree(tmp_path / "tree", V, changes)
    if tree_hook:
        tree_hook(tree)
    return parts.ext4_root(tree, tmp_path / "root.ext4")


def refused(match, dest, **params):
    """The run is refused with ``match`` and ``dest`` holds nothing new."""
    before = sorted(p.relative_to(dest) for p in dest.rglob("*")) if dest.exists() else None
    with pytest.raises(Refusal, match=match):
        run(dest=str(dest), **params)
    after = sorted(p.relative_to(dest) for p in dest.rglob("*")) if dest.exists() else None
    assert before == after


def test_an_elf_that_is_no_linux_kernel_is_refused_before_a_write(tmp_path):
    src = disk(tmp_path, {"boot/vmlinux": pathlib.Path("/usr/bin/env").read_bytes()})
    refused(
        r"kernel /boot/vmlinux: is an ELF without the 'Linux version ' banner every Linux kernel carries",
        tmp_path / "oci",
        src=str(src),
    )


def test_a_kernel_path_with_dotdot_is_refused_and_one_outside_boot_is_taken(tmp_path):
    src = disk(tmp_path, {"usr/lib/modules/%s/vmlinuz" % V: parts.kernel_bytes(V)})
    refused(
        r"kernel_path /boot/../etc/hostname: has a '\.\.' component",
        tmp_path / "oci",
        src=str(src),
        kernel_path="/boot/../etc/hostname",
    )
    refused(
        r"kernel /etc/hostname: is not an ELF kernel|not a Linux kernel",
        tmp_path / "oci",
        src=str(src),
        kernel_path="/etc/hostname",
    )
    result = run(src=str(src), dest=str(tmp_path / "oci"), kernel_path="/usr/lib/modules/%s/vmlinuz" % V)
    assert result["kernel_source"]["path"] == "/usr/lib/modules/%s/vmlinuz" % V


def i386_module() -> bytes:
    # A 32-bit little-endian relocatable ELF for EM_386.
    return (
        b"\x7fELF\x01\x01\x01"
        + bytes(9)
        + (1).to_bytes(2, "little")
        + (3).to_bytes(2, "little")
        + bytes(4096)
    )


@pytest.mark.parametrize("name", ["zz/late.ko", "zz/late.ko.xz"])
def test_every_module_is_checked_for_machine_and_class(tmp_path, name):
    base = "usr/lib/modules/%s/kernel/" % V
    body = i386_module()
    if name.endswith(".xz"):
        body = lzma.compress(body, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC32)
    # Many good modules sort before the bad one: a sample of the first few misses it.
    changes = dict((base + "a/m%02d.ko" % n, parts.module_bytes(256)) for n in range(12))
    changes[base + name] = body
    src = disk(tmp_path, changes)
    refused(
        r"kernel modules %s: are not for architecture amd64: /%s%s is i386 \(32-bit\)"
        % (re.escape(V), re.escape(base), re.escape(name)),
        tmp_path / "oci",
        src=str(src),
    )
