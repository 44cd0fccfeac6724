"""microvm_image on ext4 roots that a kernel never writes or that are not in a state to read: each refused
before anything is written, naming the partition and the damage. Made with mkfs.ext4 -d and debugfs (and one
name edited in the image's bytes, as an altered disk would hold it)."""

from __future__ import annotations

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal

from tests.integration.modules.test_microvm_image import run
from tests.integration.support import disks
from tests.integration.support import microvm_parts as parts

MIB = disks.MIB


def ext4(tmp_path, *features, changes=None):
    tree = parts.root_tree(tmp_path / "tree", changes=changes)
    image = tmp_path / "root.ext4"
    options = ["-O", ",".join(features)] if features else []
    disks.run("mkfs.ext4", "-q", "-F", *options, "-d", tree, image, "48M")
    return image


def refused(tmp_path, image, error, match):
    with pytest.raises(error, match=match):
        run(src=str(image), dest=str(tmp_path / "oci"))
    assert not (tmp_path / "oci").exists(), "refused before anything is written"


def test_a_name_holding_a_slash_is_refused_not_unpacked_outside_the_root(tmp_path):
    image = ext4(tmp_path, "^metadata_csum", changes={"QQQQQQQQQQQQ": "evil\n"})
    data = image.read_bytes()
    assert data.count(b"QQQQQQQQQQQQ") == 1
    image.write_bytes(data.replace(b"QQQQQQQQQQQQ", b"../../tmp/pw"))
    refused(tmp_path, image, Refusal, r"directory / holds an entry named '\.\./\.\./tmp/pw'")


def test_a_hard_linked_directory_loop_is_refused(tmp_path):
    image = ext4(tmp_path, changes={"srv/a/b/keep": "x\n"})
    disks.run("debugfs", "-w", "-R", "link /srv/a /srv/a/b/loop", image)
    refused(tmp_path, image, Refusal, r"directory /srv/a/b/loop is directory /srv/a again")


def test_inline_data_is_refused_by_name(tmp_path):
    refused(
        tmp_path, ext4(tmp_path, "inline_data"), PipelineError, r"inline_data.*mkfs\.ext4 -O \^inline_data"
    )


def test_a_journal_not_replayed_is_refused(tmp_path):
    image = ext4(tmp_path)
    disks.run("debugfs", "-w", "-R", "feature needs_recovery", image)
    refused(tmp_path, image, PipelineError, r"not cleanly unmounted.*needs_recovery.*e2fsck -fy")
