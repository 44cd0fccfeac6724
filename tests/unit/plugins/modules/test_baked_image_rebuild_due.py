"""The baked_image_rebuild_due runner called with parameters, a build manifest and the repositories' answers
(a stand-in for the APT fetch adapter): it returns the verdict or raises a PipelineError, and never exits."""

import hashlib
import json

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import apt_release
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.modules import baked_image_rebuild_due as due

from tests.unit.plugins.modules import support

PACKAGES = (
    "Package: postgresql-16\nVersion: 16.5-1.pgdg22.04+1\n\nPackage: libpq5\nVersion: 17.1-1.pgdg22.04+1\n"
)


class Module:
    def __init__(self, params):
        self.params = params


class Repositories:
    """What the fetch adapter would return: one signed Release and one Packages index per suite."""

    def __init__(self, packages=PACKAGES, listed_digest=None):
        self.body = packages
        self.digest = hashlib.sha256(packages.encode()).hexdigest()
        self.listed = listed_digest or self.digest
        self.asked = []

    def release(self, base, suite, keyring, allow_unsigned, timeout, validate_certs):
        self.asked.append(("release", base, suite))
        text = "Origin: PGDG\nSuite: %s\nSHA256:\n %s %d main/binary-amd64/Packages\n" % (
            suite,
            self.listed,
            len(self.body),
        )
        return text, "InRelease"

    def index(self, base, suite, path, timeout, validate_certs):
        self.asked.append(("index", base, suite, path))
        return self.digest, len(self.body), self.body


def params(tmp_path, recorded, **overrides):
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(recorded))
    given = {
        "manifest": [str(path)],
        "repositories": [{"url": "http://apt.postgresql.org/pub/repos/apt", "suites": ["jammy-pgdg"]}],
    }
    given.update(overrides)
    return support.validated(due.argument_spec(), given)


MANIFEST = {
    "revision": "v20261129",
    "packages": ["postgresql-16=16.4-1.pgdg22.04+1", "libpq5=17.1-1.pgdg22.04+1"],
    "pg_versions": ["16"],
}


def test_a_newer_minor_of_a_baked_major_makes_a_rebuild_due(tmp_path):
    repos = Repositories()
    result = due.RebuildDue(Module(params(tmp_path, MANIFEST)), fetch=repos).run()
    assert result["changed"] is False and result["rebuild_due"] is True
    assert result["revision"] == "v20261129"
    assert [(r["kind"], r["package"], r["available_version"]) for r in result["reasons"]] == [
        ("postgresql-minor", "postgresql-16", "16.5-1.pgdg22.04+1")
    ]
    assert result["indexes"] == [
        {
            "repository": "http://apt.postgresql.org/pub/repos/apt",
            "suite": "jammy-pgdg",
            "path": "main/binary-amd64/Packages",
            "verified": "InRelease",
            "security": False,
            "packages": 2,
        }
    ]


def test_nothing_newer_is_no_rebuild(tmp_path):
    current = dict(MANIFEST, packages=["postgresql-16=16.5-1.pgdg22.04+1", "libpq5=17.1-1.pgdg22.04+1"])
    result = due.RebuildDue(Module(params(tmp_path, current)), fetch=Repositories()).run()
    assert result["rebuild_due"] is False and result["reasons"] == []
    assert result["lines"][0].startswith(
        "manifest v20261129: no rebuild due, it has every PostgreSQL minor"
    ), result["lines"]


def test_an_index_that_does_not_match_its_release_fails_before_any_verdict(tmp_path):
    repos = Repositories(listed_digest="0" * 64)
    with pytest.raises(apt_release.AptError, match="tampered"):
        due.RebuildDue(Module(params(tmp_path, MANIFEST)), fetch=repos).run()


def test_without_a_catalog_the_manifest_file_is_needed_and_must_be_readable(tmp_path):
    with pytest.raises(PipelineError, match="nothing to compare: give catalog"):
        due.RebuildDue(Module(params(tmp_path, MANIFEST, manifest=[])), fetch=Repositories()).run()
    broken = params(tmp_path, MANIFEST, manifest=[str(tmp_path / "absent.json")])
    with pytest.raises(PipelineError, match=r"absent\.json cannot be read") as caught:
        due.RebuildDue(Module(broken), fetch=Repositories()).run()
    assert caught.value.result["refused"] is True


def test_a_bad_timeout_is_refused_before_any_request(tmp_path):
    repos = Repositories()
    with pytest.raises(PipelineError, match="option http_timeout"):
        due.RebuildDue(Module(params(tmp_path, MANIFEST, http_timeout=0)), fetch=repos).run()
    assert repos.asked == []
