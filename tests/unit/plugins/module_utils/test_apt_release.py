import datetime

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import apt_release
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError

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


@pytest.mark.parametrize(
    "fields, suite, secure",
    [
        # Ubuntu's pockets, as their Release files name them.
        ({"Origin": "Ubuntu", "Label": "Ubuntu", "Suite": "jammy-security", "Codename": "jammy"}, "x", True),
        ({"Origin": "Ubuntu", "Label": "Ubuntu", "Suite": "jammy-updates", "Codename": "jammy"}, "x", False),
        ({"Origin": "Ubuntu", "Label": "Ubuntu", "Suite": "jammy", "Codename": "jammy"}, "jammy", False),
        # ESM's infra pocket, and Debian's security archive (bookworm's, and buster's buster/updates).
        ({"Origin": "UbuntuESM", "Suite": "jammy-infra-security", "Codename": "jammy"}, "x", True),
        ({"Origin": "Debian", "Label": "Debian-Security", "Suite": "stable-security"}, "x", True),
        (
            {"Origin": "Debian", "Label": "Debian-Security", "Suite": "oldoldstable", "Codename": "buster"},
            "x",
            True,
        ),
        ({"Origin": "Debian", "Label": "Debian", "Suite": "stable", "Codename": "bookworm"}, "x", False),
        # The fields decide, not the directory: a mirror serving the pocket under another name, and a
        # directory named -security whose Release is the -updates pocket.
        ({"Suite": "jammy-security", "Codename": "jammy"}, "security-snapshot", True),
        ({"Suite": "jammy-updates", "Codename": "jammy"}, "jammy-security", False),
        # PGDG has no security archive.
        (
            {
                "Origin": "apt.postgresql.org",
                "Label": "PostgreSQL for Debian/Ubuntu repository",
                "Suite": "jammy-pgdg",
                "Codename": "jammy-pgdg",
            },
            "jammy-pgdg",
            False,
        ),
        # A Release naming neither suite nor codename: the directory is all there is.
        ({"Origin": "X"}, "jammy-security", True),
        ({"Origin": "X"}, "jammy", False),
    ],
)
def test_a_security_archive_is_what_its_release_says(fields, suite, secure):
    assert apt_release.security_archive(fields, suite) is secure


def test_a_security_version_from_any_archive_is_named_a_security_update():
    installed = {
        "openssl": "3.0.2-0ubuntu1.15",
        "postgresql-14": "14.11-0ubuntu0.22.04.1",
        "curl": "7.81.0-1",
    }
    offers = [
        # Ubuntu publishes each security update to -updates as well: the same version, one reason.
        dict(offer("openssl", "3.0.2-0ubuntu1.16", "jammy-updates"), security=False),
        dict(offer("openssl", "3.0.2-0ubuntu1.16", "mirror-sec"), security=True),
        # Ubuntu's own PostgreSQL in the security pocket: a minor of a baked major, and a security update.
        dict(offer("postgresql-14", "14.13-0ubuntu0.22.04.1", "jammy-security"), security=True),
        # A directory named -security whose Release is no security archive.
        dict(offer("curl", "7.81.0-1ubuntu1.18", "jammy-security"), security=False),
    ]
    reasons, others = apt_release.decide(installed, ["14"], offers)
    got = [(r["kind"], r["package"], r["security"], r["suite"]) for r in reasons]
    assert got == [
        ("postgresql-minor", "postgresql-14", True, "jammy-security"),
        ("security", "openssl", True, "mirror-sec"),
    ]
    assert others == {"curl": "7.81.0-1ubuntu1.18"}
    assert apt_release.security_updates(reasons) == [
        "postgresql-14 14.13-0ubuntu0.22.04.1",
        "openssl 3.0.2-0ubuntu1.16",
    ]
    assert apt_release.reason_line(reasons[0]).startswith("postgresql-minor (security): postgresql-14 ")


def test_the_catalog_records_the_package_list_compressed_and_reads_it_back():
    manifest = {
        "revision": "v20261129",
        "kernel": "5.15.0-126-generic",
        "pg_versions": [{"major": "16", "minor": "16.6"}, {"major": "17"}],
        "packages": ["libc6:amd64=2.35-0ubuntu3.8", "openssl=3.0.2-0ubuntu1.15"]
        + ["pkg%04d=1.0-%d" % (i, i) for i in range(700)],
    }
    record = apt_release.manifest_record(manifest, "AB" * 32, "s3://b/k.manifest.json")
    assert record["sha256"] == "ab" * 32 and record["object"] == "s3://b/k.manifest.json"
    assert record["package_count"] == 702 and record["postgresql"] == {"16": "16.6"}
    assert record["kernel"] == "5.15.0-126-generic" and record["encoding"] == "zlib+base64"
    # Small enough for a ConfigMap that keeps every revision: far below the list written out.
    assert len(record["package_list"]) < len("\n".join(manifest["packages"])) / 2
    packages = apt_release.manifest_packages(record, "r")
    assert packages["libc6"] == "2.35-0ubuntu3.8" and len(packages) == 702
    # An artifact given without its build manifest: recorded, with nothing to compare.
    empty = apt_release.manifest_record({"revision": "v1"}, "cd" * 32)
    assert empty == {"sha256": "cd" * 32, "package_count": 0}
    with pytest.raises(PipelineError, match="r has no package list"):
        apt_release.manifest_packages(empty, "r")
    with pytest.raises(PipelineError, match="r: the recorded package list is not zlib"):
        apt_release.manifest_packages(dict(record, package_list="not base64!"), "r")
    with pytest.raises(PipelineError, match="encoded as 'gzip'"):
        apt_release.manifest_packages(dict(record, encoding="gzip"), "r")


def test_each_stream_reads_the_suites_of_its_release():
    suites = ["{codename}", "{codename}-security", "jammy-pgdg", "noble-pgdg"]
    assert apt_release.suites_for(suites, "jammy") == ["jammy", "jammy-security", "jammy-pgdg"]
    assert apt_release.suites_for(suites, "noble") == ["noble", "noble-security", "noble-pgdg"]
    assert apt_release.suites_for(["jammy-security"], None) == ["jammy-security"]
    assert apt_release.stream_codename("24.04") == "noble"
    # What the bytes say wins over the table.
    assert (
        apt_release.stream_codename("26.04", {"os_release": {"version_codename": "resolute"}}) == "resolute"
    )
    apt_release.check_suites([{"url": "u", "suites": ["{codename}-security", "noble"]}], ["jammy"])
    with pytest.raises(PipelineError, match="u: suite jamy-security belongs to no stream compared"):
        apt_release.check_suites([{"url": "u", "suites": ["jamy-security"]}], ["jammy"])
    with pytest.raises(PipelineError, match="names no OS stream"):
        apt_release.check_suites([{"url": "u", "suites": ["{codename}"]}], [None])


ENTRY = {"pg_versions": ["16", "17"], "facts": {"os_release": {"version_codename": "jammy"}}}


def test_every_stream_tip_is_compared_with_its_recorded_manifest_or_a_file():
    record = {"packages": ["openssl=1"]}
    tips = [
        ("22.04", "v20261129", dict(ENTRY, manifest=record), True, True),
        ("24.04", "v20261201-2404", {"pg_versions": ["17"]}, False, False),
        ("20.04", "v20250101-2004", {"pg_versions": ["15"]}, False, True),
    ]
    compared, missing = apt_release.comparisons(
        tips, [("f.json", {"revision": "v20261201-2404", "packages": []})]
    )
    assert [(c["stream"], c["revision"], c["codename"], c["majors"], c["default"]) for c in compared] == [
        ("22.04", "v20261129", "jammy", ["16", "17"], True),
        ("24.04", "v20261201-2404", "noble", ["17"], False),
    ]
    assert compared[0]["manifest"] is record
    assert missing == [{"stream": "20.04", "revision": "v20250101-2004", "default": False}]
    assert apt_release.missing_line(missing[0]).startswith(
        "20.04 v20250101-2004 records no package manifest in the catalog"
    )
    with pytest.raises(PipelineError, match="is of revision v1, which is the tip of no stream"):
        apt_release.comparisons(tips, [("f.json", {"revision": "v1"})])
    with pytest.raises(PipelineError, match="the catalog has no stream with a registered tip"):
        apt_release.comparisons([], [])
    with pytest.raises(PipelineError, match="nothing to compare"):
        apt_release.comparisons(None, [])
    alone = apt_release.comparisons(None, [("f.json", {"revision": "v2", "os_version": "22.04"})])[0]
    assert (alone[0]["stream"], alone[0]["codename"], alone[0]["default"]) == ("22.04", "jammy", None)


def test_a_manifest_recorded_for_a_revision_must_be_of_that_revision():
    apt_release.check_manifest_revision("m.json", {"revision": "v20261129"}, "v20261129")
    with pytest.raises(PipelineError) as caught:
        apt_release.check_manifest_revision("m.json", {"revision": "v20261201"}, "v20261129")
    assert caught.value.msg == (
        "manifest m.json is of revision v20261201, not v20261129; give the manifest packer_build wrote "
        "beside v20261129's artifact"
    )
    with pytest.raises(PipelineError, match="is of revision \\(none\\)"):
        apt_release.check_manifest_revision("m.json", [], "v20261129")
