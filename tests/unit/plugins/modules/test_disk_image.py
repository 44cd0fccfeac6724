"""The disk_image runner called with parameters, files on disk and a stand-in for qemu-img (its adapter):
it returns the result or raises a Refusal, and never exits."""

import hashlib

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.modules import disk_image

from tests.unit.plugins.modules import support


class QemuImg:
    """What the adapter answers: ``info`` figures per file, zstd support, and a convert that writes the
    artifact (the source's bytes behind a header, as a compressed qcow2 stands for them)."""

    def __init__(self, zstd=True):
        self.zstd = zstd
        self.converted = []

    def info(self, path):
        with open(path, "rb") as handle:
            size = len(handle.read())
        data = {"compression-type": "zstd"} if path.endswith(".qcow2") and self.zstd else {}
        return {"virtual-size": 10 * 2**20, "actual-size": size, "format-specific": {"data": data}}

    def writes_zstd(self):
        return (True, "") if self.zstd else (False, "Invalid parameter 'compression_type'")

    def convert(self, src, dest, options):
        self.converted.append(list(options))
        with open(src, "rb") as source, open(dest, "wb") as out:
            out.write(b"QFI\xfb" + source.read()[: 1024 * 64])


def params(tmp_path, **given):
    src = tmp_path / "disk.raw"
    if not src.exists():
        src.write_bytes(b"\x01" * 1024 * 1024)
    return support.validated(
        disk_image.argument_spec(), dict({"src": str(src), "dest": str(tmp_path / "disk.qcow2")}, **given)
    )


def test_converts_writes_checksum_files_and_a_second_run_keeps_the_artifact(tmp_path):
    qemu = QemuImg()
    result = disk_image.DiskImage(params(tmp_path), qemu).run()
    assert result["changed"] is True and result["compression"] == "zstd"
    assert qemu.converted == [["-O", "qcow2", "-c", "-o", "compression_type=zstd"]]
    data = (tmp_path / "disk.qcow2").read_bytes()
    sha256 = hashlib.sha256(data).hexdigest()
    assert result["checksums"]["sha256"] == sha256
    assert (tmp_path / "disk.qcow2.sha256").read_text() == "%s  disk.qcow2\n" % sha256
    assert result["sizes"]["saved_bytes"] == 1024 * 1024 - len(data)
    again = disk_image.DiskImage(params(tmp_path), qemu).run()
    assert again["changed"] is False and len(qemu.converted) == 1
    assert again["checksums"] == result["checksums"]


def test_a_checksum_file_that_does_not_match_makes_it_convert_again(tmp_path):
    qemu = QemuImg()
    disk_image.DiskImage(params(tmp_path), qemu).run()
    (tmp_path / "disk.qcow2.sha512").write_text("%s  disk.qcow2\n" % ("0" * 128))
    assert disk_image.DiskImage(params(tmp_path), qemu).run()["changed"] is True
    assert len(qemu.converted) == 2


def test_auto_falls_back_to_zlib_where_qemu_img_cannot_write_zstd(tmp_path):
    qemu = QemuImg(zstd=False)
    result = disk_image.DiskImage(params(tmp_path), qemu).run()
    assert result["compression"] == "zlib" and qemu.converted == [["-O", "qcow2", "-c"]]
    with pytest.raises(Refusal, match="this qemu-img cannot write zstd qcow2"):
        disk_image.DiskImage(params(tmp_path, compression="zstd", force=True), qemu).run()


def test_check_mode_predicts_and_writes_nothing(tmp_path):
    qemu = QemuImg()
    result = disk_image.DiskImage(params(tmp_path), qemu, check_mode=True).run()
    assert result == {"dest": str(tmp_path / "disk.qcow2"), "changed": True, "compression": "zstd"}
    assert qemu.converted == [] and not (tmp_path / "disk.qcow2").exists()


def test_a_missing_image_or_folder_is_refused_before_qemu_img_runs(tmp_path):
    qemu = QemuImg()
    with pytest.raises(Refusal) as caught:
        disk_image.DiskImage(params(tmp_path, src=str(tmp_path / "none.raw")), qemu).run()
    assert caught.value.msg == "image %s: it does not exist or is not a file; build it first" % (
        tmp_path / "none.raw"
    )
    with pytest.raises(Refusal, match=r"its directory .*/nowhere does not exist; create it first"):
        disk_image.DiskImage(params(tmp_path, dest=str(tmp_path / "nowhere" / "d.qcow2")), qemu).run()
    assert qemu.converted == []
