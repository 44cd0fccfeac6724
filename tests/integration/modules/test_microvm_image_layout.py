"""microvm_image's OCI layout on a real disk (``mkfs.ext4 -d``): what a rerun finds missing is written
again and reported as a change."""

from __future__ import annotations

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal

from tests.integration.modules.test_microvm_image_refusals import disk, run


@pytest.mark.parametrize("which", ["layer_digest", "config_digest", "digest"])
def test_a_deleted_blob_is_written_again_and_reported_as_a_change(tmp_path, which):
    src = disk(tmp_path)
    dest = tmp_path / "oci"
    first = run(src=str(src), dest=str(dest))
    assert first["changed"] is True
    blob = dest / "blobs" / "sha256" / first["rootfs"][which].split(":", 1)[1]
    blob.unlink()
    again = run(src=str(src), dest=str(dest))
    assert again["changed"] is True and again["layout"]["changed"] is True
    assert blob.is_file()
    third = run(src=str(src), dest=str(dest))
    assert third["changed"] is False


def test_a_dangling_kernel_symlink_is_refused_naming_its_target(tmp_path):
    src = disk(
        tmp_path,
        {"boot/vmlinux": None},
        tree_hook=lambda tree: (tree / "boot/vmlinux").symlink_to("vmlinux-gone"),
    )
    with pytest.raises(
        Refusal,
        match=r"kernel /boot/vmlinux: is a symlink to vmlinux-gone, which the filesystem does not have",
    ):
        run(src=str(src), dest=str(tmp_path / "oci"))
    assert not (tmp_path / "oci").exists()


@pytest.mark.parametrize("where", ["oci", "oci/layout"])
def test_a_dest_that_is_a_file_or_under_one_is_refused_before_the_disk_is_read(tmp_path, where):
    """A regular file at dest (or above it) is named before the disk is opened: the src here is no disk
    at all, so reaching it would be refused for another reason."""
    (tmp_path / "oci").write_text("someone's file")
    src = tmp_path / "not-a-disk.raw"
    src.write_bytes(b"\x00" * 4096)
    with pytest.raises(Refusal) as refused:
        run(src=str(src), dest=str(tmp_path / where))
    assert refused.value.msg.startswith("dest %s: is " % (tmp_path / where)), refused.value.msg
    assert "not a directory" in refused.value.msg and "point dest at" in refused.value.msg
    assert (tmp_path / "oci").read_text() == "someone's file"
