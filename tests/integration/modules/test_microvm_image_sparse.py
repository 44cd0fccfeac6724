"""microvm_image and sparse files, on ext4 roots made with ``mkfs.ext4 -d`` from trees holding a
``truncate -s 4G`` file, and with unwritten extents ``debugfs fallocate`` leaves over blocks that hold
garbage: each sparse file is reported with its apparent and allocated size, refused by default before
anything is written, left out or shipped at its full size on request, and its holes are never read.
"""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import tarfile

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import (
    _btrfs,
    _disk,
    _ext4,
    _partitions,
    _xfs,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.microvm import _kernel, _oci
from ansible_collections.goldenimage.pipeline.plugins.modules import microvm_image

from tests.integration.support import disks
from tests.integration.support import microvm_parts as parts

GIB = 1024 * disks.MIB
BIG = "var/lib/images/big.img"


class Module:
    def __init__(self, **params):
        self.params = {name: spec.get("default") for name, spec in microvm_image.argument_spec().items()}
        self.params.update(params)
        self.check_mode = False
        self._diff = False


class Counted:
    """The disk adapter, keeping each Image it opens so a test reads how many bytes came from the file."""

    def __init__(self):
        self.images = []

    def Image(self, path):
        image = _disk.Image(path)
        self.images.append(image)
        return image


def run(**params):
    disk = Counted()
    adapters = {
        "disk": disk,
        "ext4": _ext4,
        "xfs": _xfs,
        "btrfs": _btrfs,
        "kernel": _kernel,
        "oci": _oci,
        "partitions": _partitions,
    }
    result = microvm_image.Runner(Module(**params), adapters).run()
    return result, sum(image.bytes_read for image in disk.images)


def members(layout, digest):
    """``{name: bytes or None}`` of the layer ``digest`` in the OCI layout."""
    path = _oci.Layout(str(layout)).blob_path(digest)
    with open(path, "rb") as fh, tarfile.open(fileobj=io.BytesIO(gzip.decompress(fh.read()))) as tar:
        return {m.name: (tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()}


def with_middle(tree):
    """64 KiB of data in the middle of a 64 MiB file: two holes around one extent."""
    middle = tree / "var/lib/images/middle.img"
    subprocess.run(["truncate", "-s", str(64 * disks.MIB), str(middle)], check=True)
    with open(middle, "r+b") as fh:
        fh.seek(32 * disks.MIB)
        fh.write(b"\x5a" * 65536)


@pytest.fixture(scope="module")
def sparse_root(tmp_path_factory):
    work = tmp_path_factory.mktemp("sparse")
    tree = parts.root_tree(work / "tree", changes={"var/lib/images/": b""})
    subprocess.run(["truncate", "-s", "4G", str(tree / BIG)], check=True)
    with_middle(tree)
    return parts.ext4_root(tree, work / "root.ext4")


@pytest.fixture(scope="module")
def middle_root(tmp_path_factory):
    work = tmp_path_factory.mktemp("middle")
    tree = parts.root_tree(work / "tree", changes={"var/lib/images/": b""})
    with_middle(tree)
    return parts.ext4_root(tree, work / "root.ext4")


def test_a_4g_sparse_file_is_refused_by_default_naming_its_sizes_before_anything_is_written(
    sparse_root, tmp_path
):
    dest = tmp_path / "oci"
    with pytest.raises(Refusal) as refused:
        run(src=str(sparse_root), dest=str(dest))
    message = str(refused.value)
    assert "/%s (rootfs image, %d bytes, 0 allocated)" % (BIG, 4 * GIB) in message
    assert (
        "/var/lib/images/middle.img (rootfs image, %d bytes, 65536 allocated)" % (64 * disks.MIB) in message
    )
    assert "sparse_files" in message and "containerd" in message
    listed = {f["path"]: f for f in refused.value.result["sparse_files"]}
    assert listed["/" + BIG] == {
        "image": "rootfs",
        "path": "/" + BIG,
        "apparent_size": 4 * GIB,
        "allocated_size": 0,
    }
    assert not dest.exists()


def test_exclude_leaves_the_sparse_files_out_reads_none_of_their_holes_and_says_so(sparse_root, tmp_path):
    result, read = run(src=str(sparse_root), dest=str(tmp_path / "oci"), sparse_files="exclude")
    assert "%s (sparse, rootfs image)" % BIG in result["left_out"]["entries"]
    report = result["sparse"]
    assert report["policy"] == "exclude" and report["threshold"] == 16 * disks.MIB
    assert [(f["path"], f["apparent_size"], f["allocated_size"]) for f in report["files"]] == [
        ("/" + BIG, 4 * GIB, 0),
        ("/var/lib/images/middle.img", 64 * disks.MIB, 65536),
    ]
    names = members(tmp_path / "oci", result["rootfs"]["layer_digest"])
    assert BIG not in names and "var/lib/images/middle.img" not in names and "etc/hostname" in names
    assert read < 16 * disks.MIB


def test_write_ships_the_file_at_its_full_size_with_zeros_for_holes_it_never_read(middle_root, tmp_path):
    result, read = run(src=str(middle_root), dest=str(tmp_path / "oci"), sparse_files="write")
    assert [f["path"] for f in result["sparse"]["files"]] == ["/var/lib/images/middle.img"]
    assert result["sparse"]["policy"] == "write"
    assert not [e for e in result["left_out"]["entries"] if "sparse" in e]
    data = members(tmp_path / "oci", result["rootfs"]["layer_digest"])["var/lib/images/middle.img"]
    assert len(data) == 64 * disks.MIB
    assert data[32 * disks.MIB : 32 * disks.MIB + 65536] == b"\x5a" * 65536
    assert data.count(0) == 64 * disks.MIB - 65536
    assert read < 16 * disks.MIB  # the 64 MiB file cost its 64 KiB of data, not its holes


def test_unwritten_extents_read_as_zeros_not_the_garbage_under_them(tmp_path):
    """``debugfs fallocate`` gives a file unwritten extents over blocks that hold 0xAA (the image is
    filled with it before mkfs, which keeps it with nodiscard): the guest reads zeros there, and so
    must the layer; the extents are holes for the report too."""
    tree = parts.root_tree(tmp_path / "tree", changes={"var/lib/prealloc": b"\x11" * 4096})
    image = tmp_path / "root.ext4"
    with open(image, "wb") as fh:
        for _mib in range(48):
            fh.write(b"\xaa" * disks.MIB)
    disks.run("mkfs.ext4", "-q", "-F", "-E", "nodiscard", "-d", tree, image)
    # Blocks 1-4095 of the file: unwritten (16 MiB minus a block), after its one written block.
    script = tmp_path / "fallocate.debugfs"
    script.write_text("fallocate /var/lib/prealloc 1 4095\nsif /var/lib/prealloc size %d\n" % (4096 * 4096))
    disks.run("debugfs", "-w", "-f", script, image)
    extents = disks.run("debugfs", "-R", "ex /var/lib/prealloc", image)
    assert "Uninit" in extents
    result, _read = run(src=str(image), dest=str(tmp_path / "oci"), sparse_files="write", sparse_threshold=0)
    assert [f for f in result["sparse"]["files"] if f["path"] == "/var/lib/prealloc"] == [
        {"image": "rootfs", "path": "/var/lib/prealloc", "apparent_size": 4096 * 4096, "allocated_size": 4096}
    ]
    data = members(tmp_path / "oci", result["rootfs"]["layer_digest"])["var/lib/prealloc"]
    assert data[:4096] == b"\x11" * 4096
    assert data[4096:] == bytes(4096 * 4095)


def test_fewer_holes_than_the_threshold_are_written_and_counted(middle_root, tmp_path):
    result, _read = run(src=str(middle_root), dest=str(tmp_path / "oci"), sparse_threshold=128 * disks.MIB)
    assert result["sparse"]["files"] == []
    below = result["sparse"]["below_threshold"]
    assert below["files"] >= 1 and below["hole_bytes"] >= 64 * disks.MIB - 65536
    data = members(tmp_path / "oci", result["rootfs"]["layer_digest"])["var/lib/images/middle.img"]
    assert len(data) == 64 * disks.MIB


def test_a_negative_threshold_is_refused_before_the_disk_is_opened(tmp_path):
    with pytest.raises(Refusal, match="sparse_threshold -1: is negative"):
        run(src=str(tmp_path / "missing.raw"), dest=str(tmp_path / "oci"), sparse_threshold=-1)


@pytest.mark.parametrize("kind", ["xfs", "btrfs"])
def test_a_sparse_file_on_xfs_or_btrfs_is_measured_from_its_extents_and_refused_by_default(tmp_path, kind):
    """The holes of an XFS or btrfs file come from its extent map, as an ext4 file's do: a 2 GiB file
    holding 4 KiB is refused by default, not shipped as 2 GiB of zeros."""
    if os.geteuid() != 0:
        pytest.skip("a sparse file is made on XFS and btrfs through a loop mount, which needs root")
    tree = parts.root_tree(tmp_path / "tree", changes={"var/lib/images/": b""})
    image = getattr(parts, kind + "_root")(tree, tmp_path / ("root." + kind))
    with parts._mounted(image) as mount, open(mount / BIG, "wb") as fh:
        fh.truncate(2 * GIB)
        fh.seek(GIB)
        fh.write(b"x" * 4096)
    dest = tmp_path / "oci"
    with pytest.raises(Refusal) as refused:
        run(src=str(image), dest=str(dest))
    listed = {f["path"]: f for f in refused.value.result["sparse_files"]}
    assert listed["/" + BIG]["apparent_size"] == 2 * GIB
    assert listed["/" + BIG]["allocated_size"] <= 64 * 1024, listed
    assert not dest.exists()
    result, _read = run(src=str(image), dest=str(dest), sparse_files="exclude")
    assert "%s (sparse, rootfs image)" % BIG in result["left_out"]["entries"]
