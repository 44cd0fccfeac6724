"""The artifact's rules: the compression picked, the qcow2 options, sizes and checksum lines."""

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import artifact
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal


def test_auto_is_zstd_where_qemu_img_writes_it_else_zlib():
    assert artifact.pick_compression("auto", True) == "zstd"
    assert artifact.pick_compression("auto", False, "Invalid parameter") == "zlib"
    assert artifact.pick_compression("zlib", True) == "zlib"
    assert artifact.pick_compression("none", False) == "none"


def test_zstd_is_refused_where_qemu_img_cannot_write_it():
    with pytest.raises(Refusal) as caught:
        artifact.pick_compression("zstd", False, "Invalid parameter 'compression_type'\n")
    assert caught.value.msg == (
        "option compression: it is zstd but this qemu-img cannot write zstd qcow2 "
        "(Invalid parameter 'compression_type'); use auto or zlib"
    )


def test_convert_options():
    assert artifact.convert_options("zstd") == ["-O", "qcow2", "-c", "-o", "compression_type=zstd"]
    assert artifact.convert_options("zlib") == ["-O", "qcow2", "-c"]
    assert artifact.convert_options("none") == ["-O", "qcow2"]


def test_sizes_and_checksum_files():
    size = artifact.sizes({"actual-size": 1000}, {"actual-size": 300, "virtual-size": 4096})
    assert size == {
        "virtual_bytes": 4096,
        "allocated_bytes": 300,
        "uncompressed_allocated_bytes": 1000,
        "saved_bytes": 700,
    }
    line = artifact.checksum_line("ab" * 32, "x.qcow2")
    assert line == "%s  x.qcow2\n" % ("ab" * 32)
    assert artifact.recorded_digest(line, "x.qcow2") == "ab" * 32
    assert artifact.recorded_digest(line, "y.qcow2") is None
    assert "after zstd compression (saved 700 bytes, 70.0%)" in artifact.report("x.qcow2", size, "zstd")


def test_the_manifest_is_named_after_the_artifact():
    assert artifact.manifest_name("ubuntu-2404-postgres-v20261201-2404.qcow2") == (
        "ubuntu-2404-postgres-v20261201-2404.manifest.json"
    )
    assert artifact.manifest_name("disk") == "disk.manifest.json"
    # Only the suffix goes: a name that holds "qcow2" elsewhere keeps it.
    assert artifact.manifest_name("a.qcow2.qcow2") == "a.qcow2.manifest.json"
    with pytest.raises(Refusal, match="it names no file"):
        artifact.manifest_name(".qcow2")


def test_the_manifest_lists_each_requested_major_with_what_the_build_installed():
    build = {"postgresql": {"16": {"minor": "16.6", "package_version": "16.6-1"}, "17": {"minor": "17.2"}}}
    assert artifact.pg_manifest(["17", "16"], build) == [
        {"major": "17", "minor": "17.2", "package_version": None},
        {"major": "16", "minor": "16.6", "package_version": "16.6-1"},
    ]
    # Without a build manifest the majors are listed without minors.
    assert artifact.pg_manifest(["16"], {}) == [{"major": "16", "minor": None, "package_version": None}]
    assert artifact.pg_manifest([16], None) == [{"major": "16", "minor": None, "package_version": None}]


@pytest.mark.parametrize(
    "build, words",
    [
        (
            {"postgresql": {"15": {"minor": "15.10"}}},
            "it lists PostgreSQL ['15'] but ['16', '17'] were requested",
        ),
        ({"kernel": "6.1"}, "it lists PostgreSQL [] but ['16', '17'] were requested"),
    ],
)
def test_a_build_that_lacks_a_requested_major_is_refused(build, words):
    with pytest.raises(Refusal) as refused:
        artifact.pg_manifest(["16", "17"], build)
    assert refused.value.msg.startswith("the build manifest: " + words)


def test_the_artifact_goes_into_an_existing_directory():
    artifact.check_dest_folder("/out/disk.qcow2", "/out", True)
    with pytest.raises(Refusal) as caught:
        artifact.check_dest_folder("/out/disk.qcow2", "/out", False)
    assert caught.value.msg == "artifact /out/disk.qcow2: its directory /out does not exist; create it first"
