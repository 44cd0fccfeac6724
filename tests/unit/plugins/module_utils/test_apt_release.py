import datetime

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils import apt_release
from ansible_collections.goldenimage.pipeline.plugins.module_utils.errors import PipelineError

RELEASE = """Origin: Ubuntu
Suite: jammy-security
Codename: jammy
SHA256:
 aaaa 10 main/binary-amd64/Packages
 bbbb 5 main/binary-amd64/Packages.gz
 cccc 4 main/binary-amd64/Packages.xz
 dddd 7 main/i18n/Translation-en
"""


def test_release_lists_its_indexes_and_the_smallest_is_picked():
    rel = apt_release.parse_release(RELEASE, "archive jammy-security")
    assert rel["fields"]["Suite"] == "jammy-security"
    assert apt_release.pick_index(rel, "main", "amd64", "x") == ("main/binary-amd64/Packages.xz", "cccc", 4)
    with pytest.raises(PipelineError, match="lists no Packages index for universe/amd64"):
        apt_release.pick_index(rel, "universe", "amd64", "x")
    with pytest.raises(PipelineError, match="lists no SHA256 checksums"):
        apt_release.parse_release("Origin: X\nMD5Sum:\n aa 1 main/binary-amd64/Packages\n", "x")


def test_an_index_must_match_the_release():
    apt_release.check_index("w", "p", "cccc", 4, "CCCC", 4)
    with pytest.raises(PipelineError, match="p does not match the Release file"):
        apt_release.check_index("w", "p", "cccc", 4, "cccc", 5)
    with pytest.raises(PipelineError, match="tampered"):
        apt_release.check_index("w", "p", "cccc", 4, "eeee", 4)


def test_packages_keeps_the_highest_version_of_each():
    text = (
        "Package: a\nVersion: 1.0-1\n\nPackage: a\nVersion: 1:0.9\nDescription: x\n more\n\n"
        "Package: b\nVersion: 2~rc1\n"
    )
    assert apt_release.packages(text) == {"a": "1:0.9", "b": "2~rc1"}


def test_clearsigned_text():
    text = (
        "-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA512\n\nOrigin: X\n- -dashed\n"
        "-----BEGIN PGP SIGNATURE-----\nxx\n-----END PGP SIGNATURE-----\n"
    )
    assert apt_release.clearsigned_text(text) == "Origin: X\n-dashed\n"


def test_manifest_packages_and_majors():
    manifest = {
        "packages": ["libc6:amd64=2.35-0ubuntu3.8", "openssl=3.0.2"],
        "pg_versions": [{"major": "16"}],
    }
    assert apt_release.manifest_packages(manifest, "m") == {"libc6": "2.35-0ubuntu3.8", "openssl": "3.0.2"}
    assert apt_release.baked_majors(manifest) == ["16"]
    assert apt_release.baked_majors({"pg_versions": ["15", "17"]}) == ["15", "17"]
    with pytest.raises(PipelineError, match="revision v1 has no package list"):
        apt_release.manifest_packages({}, "revision v1")
    with pytest.raises(PipelineError, match="is not name=version"):
        apt_release.manifest_packages({"packages": ["openssl"]}, "m")


def offer(package, version, suite="jammy-security", repository="ubuntu"):
    return {"package": package, "version": version, "suite": suite, "repository": repository}


def test_decide():
    installed = {
        "openssl": "3.0.2-0ubuntu1.15",
        "base-files": "12ubuntu4.6",
        "postgresql-16": "16.4-1.pgdg22.04+1",
        "postgresql-15": "15.8-1",
        "curl": "7.81.0-1ubuntu1.16",
        "tzdata": "1:2024a-0ubuntu0.22.04",
    }
    reasons, others = apt_release.decide(
        installed,
        ["16"],
        [
            offer("openssl", "3.0.2-0ubuntu1.16"),
            offer("openssl", "3.0.2-0ubuntu1.17", "jammy-security", "mirror"),
            offer("openssl", "3.0.2-0ubuntu1.18", "jammy-updates"),  # newer, but not from -security
            offer("base-files", "12ubuntu4.7", "jammy-updates"),
            offer("postgresql-16", "16.6-1.pgdg22.04+1", "jammy-pgdg", "pgdg"),
            offer("postgresql-16", "16.6~rc1-1.pgdg22.04+1", "jammy-pgdg", "pgdg"),
            offer("postgresql-15", "15.9-1", "jammy-pgdg", "pgdg"),  # not baked here: an ordinary update
            offer("curl", "7.81.0-1ubuntu1.16"),  # the same version
            offer("tzdata", "2025a-0ubuntu0.22.04"),  # older: the installed one has an epoch
            offer("postgresql-18", "18.1-1", "jammy-pgdg", "pgdg"),  # not installed
        ],
    )
    assert [
        (r["kind"], r["package"], r["available_version"], r["pocket"], r["repository"]) for r in reasons
    ] == [
        ("point-release", "base-files", "12ubuntu4.7", "updates", "ubuntu"),
        ("postgresql-minor", "postgresql-16", "16.6-1.pgdg22.04+1", "release", "pgdg"),
        ("security", "openssl", "3.0.2-0ubuntu1.17", "security", "mirror"),
    ]
    assert others == {"openssl": "3.0.2-0ubuntu1.18", "postgresql-15": "15.9-1"}
    assert apt_release.reason_line(reasons[2]) == (
        "security: openssl 3.0.2-0ubuntu1.15 -> 3.0.2-0ubuntu1.17 (jammy-security, mirror)"
    )
    assert apt_release.decide(installed, ["16"], []) == ([], {})


@pytest.mark.parametrize(
    "suite, pocket",
    [
        ("jammy", "release"),
        ("jammy-security", "security"),
        ("jammy-updates", "updates"),
        ("jammy-pgdg", "release"),
    ],
)
def test_pocket(suite, pocket):
    assert apt_release.pocket(suite) == pocket


def test_an_expired_release_is_refused():
    now = datetime.datetime(2026, 12, 1, 12, tzinfo=datetime.UTC)
    fresh = apt_release.parse_release("Valid-Until: Tue, 08 Dec 2026 10:00:00 UTC\n" + RELEASE, "a")
    apt_release.check_fresh(fresh, now, "a")
    apt_release.check_fresh(apt_release.parse_release(RELEASE, "a"), now, "a")
    stale = apt_release.parse_release("Valid-Until: Sun, 01 Nov 2026 10:00:00 UTC\n" + RELEASE, "a")
    with pytest.raises(PipelineError, match="a: the Release file expired on Sun, 01 Nov 2026"):
        apt_release.check_fresh(stale, now, "a")


def test_a_revision_without_a_recorded_manifest_needs_the_file():
    apt_release.need_manifest_file("v20261129", "/tmp/m.json")
    with pytest.raises(apt_release.AptError) as caught:
        apt_release.need_manifest_file("v20261129", None)
    assert caught.value.msg.startswith("v20261129 has no manifest in the catalog; give manifest")
    assert caught.value.result["refused"] is True
    with pytest.raises(apt_release.AptError, match=r"^the tip has no manifest"):
        apt_release.need_manifest_file(None, "")


def test_a_manifest_file_of_another_revision_does_not_stand_in_for_the_tip():
    assert apt_release.manifest_revision("m.json", {"revision": "v1"}, "v1") == "v1"
    assert apt_release.manifest_revision("m.json", {}, "v1") == "v1"
    assert apt_release.manifest_revision("m.json", {"revision": "v2"}, None) == "v2"
    with pytest.raises(apt_release.AptError) as caught:
        apt_release.manifest_revision("m.json", {"revision": "v20261201"}, "v20261129")
    assert caught.value.msg == (
        "manifest m.json is of revision v20261201 but the default stream's tip is v20261129; give the "
        "tip's manifest"
    )
