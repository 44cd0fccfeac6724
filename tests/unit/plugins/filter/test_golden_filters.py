import datetime

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.goldenimage.pipeline.plugins.filter import golden as filters

HEX = "f0dea74da9c54ba4728b2f4841316490cadd66b7ab1ed10de46549d457eb5018"


def test_the_filters_are_registered():
    assert sorted(filters.FilterModule().filters()) == [
        "gate_os",
        "golden_name",
        "linux_golden_distribution_plan",
        "linux_golden_plan",
        "linux_golden_secret_refs",
        "pinned_source",
        "snapshot_class",
        "source_digest",
    ]


def test_gate_os_is_the_gate_rule():
    assert filters.gate_os("Windows 11", "windows-11") == "windows"
    assert filters.gate_os("", "ubuntu-24-04") == "linux"
    assert filters.gate_os("Windows 11", "windows-11", "linux") == "linux"


def test_golden_name_uses_the_contract_naming():
    assert filters.golden_name("ubuntu-24-04", "2026-08-28", "sha256:" + HEX) == (
        "golden-ubuntu-24-04-20260828-f0dea74da9c5"
    )
    assert filters.golden_name("ubuntu-24-04", "20260828", HEX) == "golden-ubuntu-24-04-20260828-f0dea74da9c5"


def test_golden_name_without_a_date_is_today_utc():
    today = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d")
    assert filters.golden_name("debian-12", "", HEX) == "golden-debian-12-%s-f0dea74da9c5" % today


@pytest.mark.parametrize(
    "family,date,digest,text",
    [
        ("Ubuntu_24", "20260828", HEX, "makes the invalid snapshot name"),
        ("debian-12", "28/08/2026", HEX, "is not a date"),
        ("debian-12", "20260828", "latest", "is not a sha256 digest"),
    ],
)
def test_golden_name_refusals_are_filter_errors(family, date, digest, text):
    with pytest.raises(AnsibleFilterError) as err:
        filters.golden_name(family, date, digest)
    assert text in str(err.value)


def test_pinned_source_and_digest():
    ref = "docker://quay.io/containerdisks/debian@sha256:" + HEX
    assert filters.pinned_source({"registry": ref}) == {"registry": {"url": ref}}
    assert filters.source_digest({"registry": ref}) == "sha256:" + HEX


def test_pinned_source_refusals_are_filter_errors():
    with pytest.raises(AnsibleFilterError) as err:
        filters.pinned_source({"registry": "docker://quay.io/containerdisks/debian:12"})
    assert "pin it as docker://quay.io/containerdisks/debian@sha256:<digest>" in str(err.value)
    with pytest.raises(AnsibleFilterError) as err:
        filters.source_digest({"http": {"url": "http://s3/b/k.qcow2"}})
    assert "http source http://s3/b/k.qcow2 has no checksum" in str(err.value)


def test_a_source_url_with_credentials_is_a_filter_error_without_them():
    for rule in (filters.pinned_source, filters.source_digest):
        with pytest.raises(AnsibleFilterError) as err:
            rule({"http": {"url": "http://u:hunter2@s3/b/k.qcow2", "checksum": HEX}})
        assert "option source.http.url (http://REDACTED@s3/b/k.qcow2)" in str(err.value)
        assert "hunter2" not in str(err.value)


def test_gate_os_refuses_an_os_the_gate_does_not_know():
    with pytest.raises(AnsibleFilterError, match="os must be one of linux, windows, not 'bsd'"):
        filters.gate_os("", "", "bsd")


def test_the_linux_golden_plans_are_the_domain_plans_and_refuse_as_filter_errors():
    image = {
        "family": "ubuntu",
        "os_name": "Ubuntu",
        "size": "8Mi",
        "source": {"registry": "docker://q/u@sha256:" + HEX},
    }
    plan = filters.linux_golden_plan([image], "2026-08-28", "golden-images-block")
    assert plan[0]["job"] == "golden-ubuntu-20260828-f0dea74da9c5-convert"
    with pytest.raises(AnsibleFilterError, match="same golden more than once"):
        filters.linux_golden_plan([image, image], "2026-08-28", "ns")
    with pytest.raises(AnsibleFilterError, match="has a registry source"):
        filters.linux_golden_distribution_plan([image], "2026-08-28", {"Filesystem": "golden-images"})
    assert filters.linux_golden_secret_refs([dict(plan[0], secret_ref="s3")]) == [
        {"namespace": "golden-images-block", "name": "s3"}
    ]
