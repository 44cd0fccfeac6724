"""windows_iso's runner: refusals and check mode, without SystemExit (the rebuild itself is in
tests/integration/roles/test_windows_bake.py, with real xorriso and a real UDF ISO)."""

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.modules import windows_iso as module_file

from tests.unit.plugins.modules._bucket_lab import build


def test_a_missing_source_is_refused(tmp_path):
    module = build(module_file, src=str(tmp_path / "absent.iso"), dest=str(tmp_path / "out.iso"))
    with pytest.raises(Refusal, match=r"absent\.iso: it does not exist"):
        module_file.run(module)


def test_check_mode_predicts_a_rebuild_and_writes_nothing(tmp_path):
    source = tmp_path / "win.iso"
    source.write_bytes(b"\0" * 4096)
    dest = tmp_path / "out.iso"
    result = module_file.run(build(module_file, check=True, src=str(source), dest=str(dest)))
    assert result["changed"] is True and "would be rebuilt" in result["msg"]
    assert len(result["source_sha256"]) == 64
    assert sorted(p.name for p in tmp_path.iterdir()) == ["win.iso"]


def udf_installer_iso(path):
    """A UDF installer ISO laid out as Windows media are: the El Torito boot catalog is also a UDF file
    (/boot.cat), an entry pycdlib reads back without an inode."""
    import io

    import pycdlib

    iso = pycdlib.PyCdlib()
    iso.new(interchange_level=3, joliet=3, udf="2.60", vol_ident="CCCOMA_X64FRE")
    boot = b"\xeb" + b"\0" * 2047
    iso.add_fp(io.BytesIO(boot), len(boot), "/ETFSBOOT.COM;1", udf_path="/etfsboot.com")
    iso.add_directory("/SOURCES", udf_path="/sources")
    iso.add_fp(io.BytesIO(b"wim"), 3, "/SOURCES/BOOT.WIM;1", udf_path="/sources/boot.wim")
    iso.add_eltorito("/ETFSBOOT.COM;1", bootcatfile="/BOOT.CAT;1", udf_bootcatfile="/boot.cat")
    iso.write(str(path))
    iso.close()


@pytest.mark.parametrize("reader", ["pycdlib", "7z"])
def test_both_readers_extract_a_udf_tree_whose_boot_catalog_has_no_inode(tmp_path, reader):
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.windows import _iso

    source = tmp_path / "win.iso"
    udf_installer_iso(source)
    dest = tmp_path / "tree"
    dest.mkdir()
    label = _iso.extract(str(source), str(dest), reader)
    # pycdlib's writer puts the label in the primary descriptor only; 7z reads UDF's own.
    assert label == ("CCCOMA_X64FRE" if reader == "pycdlib" else "")
    names = sorted(str(p.relative_to(dest)) for p in dest.rglob("*"))
    assert names == ["boot.cat", "etfsboot.com", "sources", "sources/boot.wim"]
    assert (dest / "sources" / "boot.wim").read_bytes() == b"wim"
