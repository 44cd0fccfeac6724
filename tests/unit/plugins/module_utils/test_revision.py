import datetime

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import revision as r
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError


def test_revision_names_match_the_catalog():
    assert r.revision_name("20260615", "22.04") == "v20260615"
    assert r.revision_name(datetime.date(2026, 12, 1), "24.04") == "v20261201-2404"
    assert r.revision_name("2027-03-01", "24.04") == "v20270301-2404"
    # Another naming default moves the suffix, never the date.
    assert r.revision_name("20270301", "24.04", default_stream="24.04") == "v20270301"


def test_artifact_names():
    assert r.artifact_file_name("20260615", "22.04") == "ubuntu-2204-postgres-v20260615.qcow2"
    assert r.artifact_file_name("20261201", "24.04") == "ubuntu-2404-postgres-v20261201-2404.qcow2"
    assert r.artifact_name("v20261201-2404") == "ubuntu-2404-postgres-v20261201-2404.qcow2"


def test_parse_revision():
    rev = r.parse_revision("v20261201-2404")
    assert rev == r.Revision("v20261201-2404", datetime.date(2026, 12, 1), "24.04", True)
    assert r.parse_revision("v20260615").os_stream == "22.04"


@pytest.mark.parametrize(
    "name,match",
    [
        ("20260615", "expected v<YYYYMMDD>"),
        ("v2026061", "expected v<YYYYMMDD>"),
        ("v20260615-24.04", "expected v<YYYYMMDD>"),
        ("v20260230", "not a calendar date"),
        ("v20260615-2204", "named without a suffix"),
        (None, "expected v<YYYYMMDD>"),
    ],
)
def test_parse_revision_refuses(name, match):
    with pytest.raises(PipelineError, match=match):
        r.parse_revision(name)


def test_validate_revision_against_stream():
    assert r.validate_revision("v20261201-2404", "24.04").date == datetime.date(2026, 12, 1)
    with pytest.raises(PipelineError, match=r"belongs to OS stream 22\.04, not 24\.04.*v20260615-2404"):
        r.validate_revision("v20260615", "24.04")


@pytest.mark.parametrize("stream", ["22.4", "2204", "jammy", "", None])
def test_stream_refused(stream):
    with pytest.raises(PipelineError, match="OS stream"):
        r.revision_name("20260615", stream)


@pytest.mark.parametrize("value", ["2026-13-01", "yesterday", "2026061"])
def test_build_date_refused(value):
    with pytest.raises(PipelineError, match="build date"):
        r.revision_name(value, "22.04")


def test_parse_artifact_name():
    assert r.parse_artifact_name("ubuntu-2404-postgres-v20261201-2404.qcow2").os_stream == "24.04"
    with pytest.raises(PipelineError, match="belongs to OS stream"):
        r.parse_artifact_name("ubuntu-2404-postgres-v20261201.qcow2")
    with pytest.raises(PipelineError, match="expected ubuntu-"):
        r.parse_artifact_name("ubuntu-2204-postgres-v20260615.img")


def test_ordering():
    names = ["v20270301-2404", "v20260615", "v20261201-2404", "v20261201"]
    assert r.sort_revisions(names) == ["v20260615", "v20261201", "v20261201-2404", "v20270301-2404"]
    assert r.latest_revision(names) == "v20270301-2404"
    assert r.latest_revision(names, "22.04") == "v20261201"
    assert r.latest_revision(names, "26.04") is None
    assert r.is_newer("v20261201", "v20260615")
    assert not r.is_newer("v20261201", "v20261201-2404")
    with pytest.raises(PipelineError):
        r.sort_revisions(["v20260615", "latest"])


def test_same_day_rebuilds_are_distinct_and_sort_after_the_first():
    assert r.revision_name("20261201", "22.04", build=2) == "v20261201-r02"
    assert r.revision_name("20261201", "24.04", build=12) == "v20261201-2404-r12"
    rebuild = r.parse_revision("v20261201-2404-r02")
    assert (rebuild.date, rebuild.os_stream, rebuild.suffixed, rebuild.build) == (
        datetime.date(2026, 12, 1),
        "24.04",
        True,
        2,
    )
    assert r.parse_revision("v20261201").build == 1
    names = ["v20261201-r10", "v20261201-r02", "v20261201", "v20261130", "v20261202"]
    ordered = ["v20261130", "v20261201", "v20261201-r02", "v20261201-r10", "v20261202"]
    assert r.sort_revisions(names) == ordered
    assert sorted(names) == ordered  # also as text, within one stream
    assert r.latest_revision(["v20261201", "v20261201-r02"], "22.04") == "v20261201-r02"
    assert r.is_newer("v20261201-r02", "v20261201") and not r.is_newer("v20261201", "v20261201-r02")
    assert r.artifact_name("v20261201-2404-r02") == "ubuntu-2404-postgres-v20261201-2404-r02.qcow2"
    assert r.parse_artifact_name("ubuntu-2204-postgres-v20261201-r02.qcow2").build == 2
    assert r.validate_revision("v20261201-r02", "22.04").build == 2
    assert r.next_revision("20261201", "22.04", ["v20261201"]) == "v20261201-r02"
    assert r.next_revision("20261201", "24.04", []) == "v20261201-2404"


@pytest.mark.parametrize(
    "name, match",
    [
        ("v20261201-r01", "first build of a day"),
        ("v20261201-r2", "expected v"),
        ("v20261201-r002", "expected"),
    ],
)
def test_same_day_build_number_refused(name, match):
    with pytest.raises(PipelineError, match=match):
        r.parse_revision(name)


@pytest.mark.parametrize("build", [0, 100, "two", True])
def test_build_refused(build):
    with pytest.raises(PipelineError, match="build"):
        r.revision_name("20261201", "22.04", build=build)


DEBIAN_12 = {"id": "debian", "version_id": "12", "version_codename": "bookworm"}
UBUNTU_2204 = {"id": "ubuntu", "version_id": "22.04", "version_codename": "jammy"}


def test_an_image_of_another_distribution_is_named_by_its_os_release():
    found = r.image_os(DEBIAN_12, "22.04")
    assert found == {"id": "debian", "version_id": "12", "revision_stream": "22.04", "ubuntu": False}
    revision = r.revision_name("20261207", found["revision_stream"])
    assert r.image_artifact_name(revision, found) == "debian-12-postgres-v20261207.qcow2"
    # The declared stream names Ubuntu only: a Debian image declared 24.04 is still Debian 12, dated alone.
    assert r.image_os(DEBIAN_12, "24.04")["revision_stream"] == "22.04"


def test_an_ubuntu_image_keeps_its_stream_name_and_must_be_the_declared_stream():
    found = r.image_os(UBUNTU_2204, "22.04")
    assert r.image_artifact_name("v20260615", found) == "ubuntu-2204-postgres-v20260615.qcow2"
    with pytest.raises(r.Refusal, match=r"says Ubuntu 22\.04, the build declares the 24\.04 stream"):
        r.image_os(UBUNTU_2204, "24.04")


@pytest.mark.parametrize("release", [None, {}, {"id": "debian"}, {"id": "Debian OS", "version_id": "12"}])
def test_an_image_without_a_usable_os_release_is_refused(release):
    with pytest.raises(r.Refusal, match="no usable ID and VERSION_ID"):
        r.image_os(release, "22.04", source="base image /x.qcow2")


def test_a_revision_of_another_stream_is_refused_for_a_non_ubuntu_image():
    with pytest.raises(r.InvalidValue, match=r"belongs to OS stream 24\.04"):
        r.image_artifact_name("v20261207-2404", r.image_os(DEBIAN_12, "22.04"))
