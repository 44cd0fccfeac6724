"""windows_iso's runner: refusals and check mode, without SystemExit (the rebuild itself is in
tests/integration/roles/test_windows_bake.py, with real xorriso and a real UDF ISO)."""

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.errors import Refusal
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
