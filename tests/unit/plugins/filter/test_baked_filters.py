import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.goldenimage.pipeline.plugins.filter import engine_version as engine
from ansible_collections.goldenimage.pipeline.plugins.filter import revision as names

CATALOG = {
    "version": 1,
    "default_stream": "22.04",
    "streams": {"22.04": {"tip": "v20260615", "validated": True}},
    "images": {"v20260615": {"os_version": "22.04", "pg_versions": ["16", "17"], "imported": True}},
}


def test_engine_version_states_its_error_once_and_chains_nothing():
    with pytest.raises(AnsibleFilterError) as exc:
        engine.engine_version(CATALOG, "18x", today="2026-12-01")
    text = str(exc.value)
    assert text.startswith("engine_version: engineVersion '18x' is set but is not a major version number")
    assert text.count("18x") == 1 and text.count("supported") == 1
    assert exc.value.__cause__ is None and exc.value.__suppress_context__


def test_engine_version_refuses_a_yaml_float():
    for value in (17.0, "17.0"):
        with pytest.raises(AnsibleFilterError, match='whole number, so write engineVersion: "17"'):
            engine.engine_version(CATALOG, value, today="2026-12-01")
    assert engine.engine_version(CATALOG, 17, today="2026-12-01") == "17"
    assert engine.engine_version(CATALOG, "", today="2026-12-01") == "17"


def test_revision_filters_refuse_a_float_stream_with_quote_it():
    filters = names.FilterModule().filters()
    with pytest.raises(AnsibleFilterError, match=r'quote it: os_stream: "24\.1"'):
        filters["revision_name"]("20261201", 24.1)
    with pytest.raises(AnsibleFilterError, match="quote it"):
        filters["artifact_name"]("v20261201-2404", 24.04)
    assert filters["revision_name"]("20261201", "24.04") == "v20261201-2404"
    assert filters["artifact_name"]("v20261201-2404") == "ubuntu-2404-postgres-v20261201-2404.qcow2"
    assert filters["parse_revision"]("v20260615")["os_stream"] == "22.04"


def test_revision_filter_errors_name_the_filter_once():
    with pytest.raises(AnsibleFilterError) as exc:
        names.FilterModule().filters()["parse_revision"]("nightly")
    assert str(exc.value).startswith("parse_revision: revision 'nightly'")
    assert exc.value.__cause__ is None


def test_revision_filters_name_and_parse_a_same_day_rebuild():
    filters = names.FilterModule().filters()
    assert names.revision_name("20261201", "24.04", build=2) == "v20261201-2404-r02"
    assert names.parse_revision("v20261201-r03")["build"] == 3
    assert names.artifact_name("v20261201-r03") == "ubuntu-2204-postgres-v20261201-r03.qcow2"
    with pytest.raises(AnsibleFilterError, match="revision_name: build 0"):
        filters["revision_name"]("20261201", "22.04", build=0)


def test_image_name_is_the_artifact_without_its_extension_and_checks_the_stream():
    filters = names.FilterModule().filters()
    assert filters["image_name"]("v20261201-2404") == "ubuntu-2404-postgres-v20261201-2404"
    assert filters["image_name"]("v20260615", "22.04") == "ubuntu-2204-postgres-v20260615"
    with pytest.raises(AnsibleFilterError):
        filters["image_name"]("v20261201-2404", "22.04")
    with pytest.raises(AnsibleFilterError, match="quote it"):
        filters["image_name"]("v20261201-2404", 24.04)
