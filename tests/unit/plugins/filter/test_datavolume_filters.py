"""The failed_import filter: kube_object_info's read of one DataVolume to the refusal of a rerun."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.goldenimage.pipeline.plugins.filter import datavolume as filters

FAILED = {
    "metadata": {"name": "g-import", "namespace": "golden-images-block"},
    "status": {
        "phase": "Failed",
        "restartCount": 3,
        "conditions": [{"type": "Running", "status": "False", "message": "checksum mismatch"}],
    },
}


def test_the_filter_is_registered():
    assert sorted(filters.FilterModule().filters()) == ["failed_import"]


def test_a_failed_read_gives_the_refusal():
    msg = filters.failed_import([FAILED], "linux_golden_replace_failed")
    assert msg.startswith("DataVolume golden-images-block/g-import is Failed from an earlier import")
    assert "checksum mismatch" in msg
    assert "delete the Failed DataVolume golden-images-block/g-import first" in msg
    assert "or set linux_golden_replace_failed: true" in msg
    assert filters.failed_import(FAILED, "x") == filters.failed_import([FAILED], "x")


def test_nothing_or_a_live_import_gives_nothing():
    assert filters.failed_import([], "x") == ""
    assert filters.failed_import([dict(FAILED, status={"phase": "ImportInProgress"})], "x") == ""


def test_a_list_of_several_is_refused():
    with pytest.raises(AnsibleFilterError, match="one DataVolume"):
        filters.failed_import([FAILED, FAILED], "x")
