"""The packer_build manifest's values, once a regex_replace and a Jinja loop, now filters over artifact.py."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.goldenimage.pipeline.plugins.filter.artifact import FilterModule

FILTERS = FilterModule().filters()


def test_the_filters_are_registered_under_their_documented_names():
    assert sorted(FILTERS) == ["manifest_name", "pg_manifest"]


def test_manifest_name():
    assert FILTERS["manifest_name"]("ubuntu-2204-postgres-v20261201.qcow2") == (
        "ubuntu-2204-postgres-v20261201.manifest.json"
    )
    with pytest.raises(AnsibleFilterError, match=r"^manifest_name: artifact '': it names no file"):
        FILTERS["manifest_name"]("")


def test_pg_manifest_refuses_a_build_without_a_requested_major_as_a_filter_error():
    build = {"postgresql": {"16": {"minor": "16.6", "package_version": "16.6-1.pgdg24.04+1"}}}
    assert FILTERS["pg_manifest"](["16"], build) == [
        {"major": "16", "minor": "16.6", "package_version": "16.6-1.pgdg24.04+1"}
    ]
    with pytest.raises(AnsibleFilterError, match=r"\['16', '18'\] were requested"):
        FILTERS["pg_manifest"](["16", "18"], {"postgresql": {"15": {}}})
