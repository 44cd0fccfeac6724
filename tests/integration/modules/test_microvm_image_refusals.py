"""microvm_image refusals on real disks (``mkfs.ext4 -d``): each fires before anything is written, so
a refused run leaves no blob, manifest, tag or layout file behind."""

from __future__ import annotations

import lzma
import os
import pathlib
import re
import shutil
import struct
import zlib

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal
from ansible_collections.goldenimage.pipeline.plugins.modules import microvm_image
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.support import disks
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


@pytest.fixture(scope="module")
def good_disks(tmp_path_factory):
    work = tmp_path_factory.mktemp("malformed")
    tree = parts.root_tree(work / "tree", V)
    root = parts.ext4_root(tree, work / "root.ext4")
    gpt = parts.gpt_disk(work / "gpt.raw", root)["path"]
    return {"work": work, "gpt": gpt, "qcow2": disks.qcow2(gpt, work / "gpt.qcow2")}


def survives(src, dest):
    """A run on ``src`` ends in a result or a refusal (never another exception); a refusal leaves
    ``dest`` and its folder as they were."""
    folder = sorted(dest.parent.iterdir())
    try:
        run(src=str(src), dest=str(dest))
    except PipelineError:
        assert not dest.exists()
        assert sorted(dest.parent.iterdir()) == folder
        return False
    shutil.rmtree(dest)
    return True


# Header fields of a qcow2 (version 3): their offsets and sizes, the ones a crafted file lies in.
QCOW2_FIELDS = {
    "backing_file_offset": (8, 8),
    "backing_file_size": (16, 4),
    "cluster_bits": (20, 4),
    "size": (24, 8),
    "l1_size": (36, 4),
    "l1_table_offset": (40, 8),
    "refcount_table_offset": (48, 8),
    "refcount_table_clusters": (56, 4),
    "nb_snapshots": (60, 4),
    "snapshots_offset": (64, 8),
    "incompatible_features": (72, 8),
    "header_length": (100, 4),
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    field=st.sampled_from(sorted(QCOW2_FIELDS)),
    value=st.one_of(
        st.integers(min_value=0, max_value=64),
        st.sampled_from([2**31 - 1, 2**32 - 1, 2**63 - 1, 2**64 - 1]),
        st.integers(min_value=0, max_value=2**64 - 1),
    ),
)
def test_a_qcow2_whose_header_lies_is_refused_never_a_traceback(good_disks, field, value):
    offset, size = QCOW2_FIELDS[field]
    data = bytearray(good_disks["qcow2"].read_bytes())
    data[offset : offset + size] = (value % (1 << (8 * size))).to_bytes(size, "big")
    folder = good_disks["work"] / ("case-%s" % os.urandom(4).hex())
    folder.mkdir()
    src = folder / "crafted.qcow2"
    src.write_bytes(bytes(data))
    survives(src, folder / "oci")
    shutil.rmtree(folder)


@pytest.mark.parametrize("cut", [0.001, 0.3, 0.6])
def test_a_truncated_raw_or_qcow2_is_refused(good_disks, tmp_path, cut):
    for name in ("gpt", "qcow2"):
        data = good_disks[name].read_bytes()
        src = tmp_path / ("cut-" + name)
        src.write_bytes(data[: int(len(data) * cut)])
        assert survives(src, tmp_path / "oci") is False


def test_a_gpt_entry_past_the_end_is_refused(good_disks, tmp_path):
    data = bytearray(good_disks["gpt"].read_bytes())
    # The first entry's last LBA (entries start at LBA 2; the last LBA at byte 40 of an entry), then the
    # entries' and the header's CRC32 recomputed so that the primary table reads as valid.
    data[1024 + 40 : 1024 + 48] = (len(data) // 512 * 4).to_bytes(8, "little")
    count, size = struct.unpack_from("<II", data, 512 + 80)
    struct.pack_into("<I", data, 512 + 88, zlib.crc32(bytes(data[1024 : 1024 + count * size])))
    struct.pack_into("<I", data, 512 + 16, 0)
    struct.pack_into("<I", data, 512 + 16, zlib.crc32(bytes(data[512 : 512 + 92])))
    src = tmp_path / "past.raw"
    src.write_bytes(bytes(data))
    with pytest.raises(Refusal, match=r"past.raw .*the image ends at byte \d+, before the partition"):
        run(src=str(src), dest=str(tmp_path / "oci"))
    assert not (tmp_path / "oci").exists()


@pytest.mark.parametrize(
    "index, why",
    [
        (b'{"schemaVersion": 2, "manifests": [', r"is not an OCI image index \(Expecting value"),
        (b'{"schemaVersion": 2, "manifests": {"a": 1}}', r"no list of manifest descriptors"),
        (b"[]", r"no list of manifest descriptors"),
    ],
)
def test_a_corrupt_layout_index_is_refused_before_any_blob(good_disks, tmp_path, index, why):
    dest = tmp_path / "oci"
    dest.mkdir()
    (dest / "oci-layout").write_bytes(b'{"imageLayoutVersion":"1.0.0"}')
    (dest / "index.json").write_bytes(index)
    refused(r"dest %s/index.json: .*%s" % (re.escape(str(dest)), why), dest, src=str(good_disks["gpt"]))
    assert (dest / "index.json").read_bytes() == index
    assert not (dest / "blobs").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["oci"]


def test_an_unreachable_registry_is_found_before_any_write(good_disks, tmp_path):
    port = parts.free_port()
    with pytest.raises(PipelineError, match=r"registry 127.0.0.1:%d: GET /v2/: .*(refused|Errno)" % port):
        run(
            src=str(good_disks["gpt"]),
            dest=str(tmp_path / "oci"),
            registry="http://127.0.0.1:%d" % port,
            repository="flintlock/ubuntu",
        )
    assert sorted(tmp_path.iterdir()) == []


def test_a_filesystem_larger_than_its_partition_is_refused_before_a_write(tmp_path):
    """An ext4 whose superblock says 48 MiB in a 40 MiB partition: its last blocks would be read from
    whatever follows the partition, so the disk is refused before anything is read or written."""
    root = disk(tmp_path)
    os.truncate(root, 40 * parts.MIB)
    made = parts.gpt_disk(tmp_path / "short.raw", root)
    match = r"partition 2: its ext4 filesystem says it spans 50331648 bytes, more than the partition's"
    with pytest.raises(PipelineError, match=match + r" 41943040; grow the partition"):
        run(src=str(made["path"]), dest=str(tmp_path / "oci"))
    assert not (tmp_path / "oci").exists()


def test_the_fit_rule_holds_for_every_size():
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import seal

    assert seal.filesystem_fits(2, "ext4", 4096, 4096) is None
    assert seal.filesystem_fits(2, "ext4", 4095, 4096) is None
    assert "more than the partition's 4096" in seal.filesystem_fits(2, "XFS", 4097, 4096)


def test_a_qcow2_overlay_is_refused_before_a_write(tmp_path):
    """The provenance records src's digest: an overlay's backing file is outside it, so it is refused."""
    root = disk(tmp_path)
    base = parts.gpt_disk(tmp_path / "base.raw", root)["path"]
    overlay = tmp_path / "overlay.qcow2"
    disks.run("qemu-img", "create", "-q", "-f", "qcow2", "-b", base, "-F", "raw", overlay)
    with pytest.raises(Refusal, match=r"has a backing file.*qemu-img convert -O qcow2"):
        run(src=str(overlay), dest=str(tmp_path / "oci"))
    assert not (tmp_path / "oci").exists()
    # Flattened, the same disk is read.
    flat = tmp_path / "flat.qcow2"
    disks.run("qemu-img", "convert", "-O", "qcow2", overlay, flat)
    assert run(src=str(flat), dest=str(tmp_path / "oci"))["changed"] is True
