"""baked_image_rebuild_due against APT repositories on loopback: an Ubuntu-like archive (release,
-updates and -security suites, InRelease) and a PGDG-like one (Release + Release.gpg, Packages.gz), both
signed with a key made in the test; the manifest is the build manifest packer_build writes, or the one the
catalog entry of each stream's tip records."""

from __future__ import annotations

import json
import lzma
import shutil

import pytest
import yaml

from tests.integration.modules.test_baked_image import refused
from tests.integration.modules.test_baked_image import task as baked_task
from tests.integration.support.apt_repo import Server, Signer, write_suite
from tests.integration.support.runner import play, run_playbook

MODULE = "goldenimage.pipeline.baked_image_rebuild_due"


@pytest.fixture(autouse=True)
def _signing_tools():
    # gpg makes the test key and gpgv checks it: the README's set-up installs them (gnupg, gpgv).
    missing = [tool for tool in ("gpg", "gpgv") if shutil.which(tool) is None]
    assert not missing, "missing %s: run make setup (installs gnupg and gpgv)" % ", ".join(missing)


INSTALLED = {
    "base-files": "12ubuntu4.6",
    "openssl": "3.0.2-0ubuntu1.15",
    "libc6": "2.35-0ubuntu3.8",
    "curl": "7.81.0-1ubuntu1.16",
    "tzdata": "1:2024a-0ubuntu0.22.04",
    "postgresql-16": "16.4-1.pgdg22.04+1",
    "postgresql-17": "17.2-1.pgdg22.04+1",
}
ARCHIVE = {
    "jammy": {
        "base-files": "12ubuntu4",
        "openssl": "3.0.2-0ubuntu1",
        "libc6": "2.35-0ubuntu3",
        "curl": "7.81.0-1",
    },
    # A point release (base-files) and an update that is not a security fix (curl).
    "jammy-updates": {"base-files": "12ubuntu4.7", "curl": "7.81.0-1ubuntu1.18", "libc6": "2.35-0ubuntu3.8"},
    # A security fix; tzdata's newer-looking version has no epoch, so it is older than the installed 1:...
    "jammy-security": {
        "openssl": "3.0.2-0ubuntu1.16",
        "libc6": "2.35-0ubuntu3.8",
        "tzdata": "2025a-0ubuntu0.22.04",
    },
}
PGDG = {
    "jammy-pgdg": {
        "postgresql-16": "16.6-1.pgdg22.04+1",
        # A release candidate sorts before the release (~): not newer than 17.2.
        "postgresql-17": "17.2~rc1-1.pgdg22.04+1",
        "postgresql-18": "18.1-1.pgdg22.04+1",  # not baked, not installed
    }
}


def manifest(path, revision="v20261129", packages=None):
    packages = INSTALLED if packages is None else packages
    path.write_text(
        json.dumps(
            {
                "revision": revision,
                "os_version": "22.04",
                "pg_versions": [{"major": "16"}, {"major": "17"}],
                "packages": ["%s=%s" % kv for kv in sorted(packages.items())],
            }
        )
    )
    return str(path)


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    base = tmp_path_factory.mktemp("apt")
    signer = Signer(base / "gnupg", "Test Archive <archive@example.invalid>")
    other = Signer(base / "other", "Someone Else <else@example.invalid>")
    for suite, pkgs in ARCHIVE.items():
        write_suite(base / "www" / "ubuntu", suite, pkgs, signer)
    write_suite(
        base / "www" / "pgdg", "jammy-pgdg", PGDG["jammy-pgdg"], signer, style="Release.gpg", compression="gz"
    )
    write_suite(base / "www" / "unsigned", "jammy-pgdg", PGDG["jammy-pgdg"], None, compression="gz")
    # A mirror whose index does not match its (validly signed) Release file.
    dist = write_suite(base / "www" / "tampered", "jammy-security", ARCHIVE["jammy-security"], signer)
    index = dist / "main" / "binary-amd64" / "Packages.xz"
    index.write_bytes(
        lzma.compress(lzma.decompress(index.read_bytes()).replace(b"0ubuntu1.16", b"0ubuntu1.99"))
    )
    server = Server(base / "www")
    yield {"url": server.url, "keyring": str(signer.keyring), "other": str(other.keyring)}
    server.close()


def ubuntu(repos, **more):
    return dict(
        {"url": repos["url"] + "/ubuntu", "suites": list(ARCHIVE), "keyring": repos["keyring"]}, **more
    )


def pgdg(repos, **more):
    return dict(
        {"url": repos["url"] + "/pgdg", "suites": ["jammy-pgdg"], "keyring": repos["keyring"]}, **more
    )


def task(title, /, **params):
    return baked_task(title, module=MODULE, **params)


def test_rebuild_due_with_reasons_then_not_due_once_rebuilt(repos, tmp_path):
    current = dict(INSTALLED, **{"base-files": "12ubuntu4.7", "openssl": "3.0.2-0ubuntu1.16"})
    current["postgresql-16"] = "16.6-1.pgdg22.04+1"
    run = run_playbook(
        play(
            task(
                "due",
                check=False,
                manifest=manifest(tmp_path / "m.json"),
                repositories=[ubuntu(repos), pgdg(repos)],
            ),
            task(
                "check mode",
                check=True,
                manifest=manifest(tmp_path / "m.json"),
                repositories=[ubuntu(repos), pgdg(repos)],
            ),
            task(
                "rebuilt",
                manifest=manifest(tmp_path / "n.json", "v20261201", current),
                repositories=[ubuntu(repos), pgdg(repos)],
            ),
        )
    )
    assert run.ok, run.log
    due = run["due"]
    assert due["changed"] is False and due["rebuild_due"] is True, due
    got = {
        (r["kind"], r["package"]): (r["manifest_version"], r["available_version"], r["suite"])
        for r in due["reasons"]
    }
    assert got == {
        ("point-release", "base-files"): ("12ubuntu4.6", "12ubuntu4.7", "jammy-updates"),
        ("security", "openssl"): ("3.0.2-0ubuntu1.15", "3.0.2-0ubuntu1.16", "jammy-security"),
        ("postgresql-minor", "postgresql-16"): ("16.4-1.pgdg22.04+1", "16.6-1.pgdg22.04+1", "jammy-pgdg"),
    }, got
    assert [r["pocket"] for r in due["reasons"] if r["kind"] == "security"] == ["security"]
    assert "security: openssl 3.0.2-0ubuntu1.15 -> 3.0.2-0ubuntu1.16 (jammy-security, " in " ".join(
        due["lines"]
    )
    assert due["streams"]["22.04"]["other_updates"] == {"curl": "7.81.0-1ubuntu1.18"}
    assert due["streams"]["22.04"]["security_updates"] == ["openssl 3.0.2-0ubuntu1.16"]
    verified = {(i["suite"], i["verified"], i["path"]) for i in due["indexes"]}
    assert ("jammy-security", "InRelease", "main/binary-amd64/Packages.xz") in verified
    assert ("jammy-pgdg", "Release.gpg", "main/binary-amd64/Packages.gz") in verified
    assert run["check mode"]["rebuild_due"] is True
    rebuilt = run["rebuilt"]
    assert rebuilt["rebuild_due"] is False and rebuilt["reasons"] == [], rebuilt
    assert rebuilt["lines"][0].startswith("22.04 v20261201: no rebuild due, it has every"), rebuilt["lines"]


def test_signatures_and_index_hashes_are_checked(repos, tmp_path):
    path = manifest(tmp_path / "m.json")
    unsigned = dict(url=repos["url"] + "/unsigned", suites=["jammy-pgdg"], keyring=repos["keyring"])
    run = run_playbook(
        play(
            task(
                "wrong key",
                ignore_errors=True,
                manifest=path,
                repositories=[ubuntu(repos, keyring=repos["other"])],
            ),
            task("no keyring", ignore_errors=True, manifest=path, repositories=[pgdg(repos, keyring=None)]),
            task("unsigned", ignore_errors=True, manifest=path, repositories=[unsigned]),
            task("allowed", manifest=path, repositories=[dict(unsigned, keyring=None, allow_unsigned=True)]),
            task(
                "tampered",
                ignore_errors=True,
                manifest=path,
                repositories=[
                    dict(url=repos["url"] + "/tampered", suites=["jammy-security"], keyring=repos["keyring"])
                ],
            ),
            task(
                "no index",
                ignore_errors=True,
                manifest=path,
                repositories=[ubuntu(repos, architectures=["arm64"])],
            ),
        )
    )
    msg = refused(run, "wrong key")["msg"]
    assert "No public key" in msg or "public key not found" in msg or "Can't check signature" in msg, msg
    msg = refused(run, "no keyring")["msg"]
    assert (
        "/pgdg jammy-pgdg: Release is not verified (no keyring configured)" in msg and "allow_unsigned" in msg
    )
    msg = refused(run, "unsigned")["msg"]
    assert "jammy-pgdg: Release is not verified (no Release.gpg signature)" in msg, msg
    assert run["allowed"]["indexes"][0]["verified"] == "unsigned"
    assert run["allowed"]["rebuild_due"] is True
    msg = refused(run, "tampered")["msg"]
    assert "main/binary-amd64/Packages.xz does not match the Release file" in msg, msg
    assert "lists no Packages index for main/arm64" in refused(run, "no index")["msg"]


NOBLE_INSTALLED = {
    "base-files": "13ubuntu10.1",
    "openssl": "3.0.13-0ubuntu3.4",
    "libc6": "2.39-0ubuntu8.3",
    "postgresql-17": "17.2-1.pgdg24.04+1",
}
NOBLE = {
    "noble": {"base-files": "13ubuntu10", "openssl": "3.0.13-0ubuntu3", "libc6": "2.39-0ubuntu8"},
    "noble-updates": {"base-files": "13ubuntu10.1", "libc6": "2.39-0ubuntu8.4"},
    "noble-security": {"openssl": "3.0.13-0ubuntu3.5", "libc6": "2.39-0ubuntu8.4"},
}
NOBLE_PGDG = {"noble-pgdg": {"postgresql-17": "17.2-1.pgdg24.04+1"}}
# Every stream's suites from one list: {codename} is each stream's release.
BY_CODENAME = ["{codename}", "{codename}-updates", "{codename}-security"]


@pytest.fixture(scope="module")
def streams_repos(tmp_path_factory):
    """The Ubuntu archive with jammy's and noble's pockets, PGDG with both, and a snapshot mirror that
    serves jammy's security pocket under a dated directory (its Release says Suite: jammy-security)."""
    base = tmp_path_factory.mktemp("apt-streams")
    signer = Signer(base / "gnupg", "Test Archive <archive@example.invalid>")
    for suite, pkgs in dict(ARCHIVE, **NOBLE).items():
        write_suite(base / "www" / "ubuntu", suite, pkgs, signer)
    for suite, pkgs in dict(PGDG, **NOBLE_PGDG).items():
        write_suite(base / "www" / "pgdg", suite, pkgs, signer)
    snapshot = {"curl": "7.81.0-1ubuntu1.17"}
    write_suite(base / "www" / "snapshot", "jammy-20261201", snapshot, signer, release_suite="jammy-security")
    server = Server(base / "www")
    keyring = str(signer.keyring)
    yield [
        {"url": server.url + "/ubuntu", "suites": BY_CODENAME, "keyring": keyring},
        {"url": server.url + "/pgdg", "suites": ["{codename}-pgdg"], "keyring": keyring},
        {"url": server.url + "/snapshot", "suites": ["jammy-20261201"], "keyring": keyring},
    ]
    server.close()


def recorded(packages, revision, os_version):
    """The catalog entry's manifest record, as publishing makes it from the build manifest."""
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import apt_release

    data = {
        "revision": revision,
        "os_version": os_version,
        "packages": ["%s=%s" % kv for kv in sorted(packages.items())],
    }
    return apt_release.manifest_record(data, "0" * 64)


def two_streams():
    from tests.integration.modules.test_dbinstance_operator_env import imported_images

    images = imported_images(("v20261129", "22.04"), ("v20261201-2404", "24.04"), ("v20250601-2004", "20.04"))
    images["v20261129"].update(pg_versions=["16", "17"], manifest=recorded(INSTALLED, "v20261129", "22.04"))
    images["v20261201-2404"].update(
        pg_versions=["17"], manifest=recorded(NOBLE_INSTALLED, "v20261201-2404", "24.04")
    )
    return {
        "version": 1,
        "default_stream": "22.04",
        "streams": {
            "22.04": {"tip": "v20261129", "validated": True},
            "24.04": {"tip": "v20261201-2404", "validated": False},
        },
        "images": images,
    }


def catalog_map(kube_client, namespace, name, doc):
    from kubernetes import client

    client.CoreV1Api(kube_client).create_namespaced_config_map(
        namespace, {"metadata": {"name": name}, "data": {"catalog.yaml": yaml.safe_dump(doc)}}
    )
    return {"namespace": namespace, "name": name}


@pytest.mark.lab_only
def test_every_stream_from_the_catalog_alone_with_its_security_updates(
    lab, kube_client, kube_namespace, streams_repos, tmp_path
):
    """No manifest file: each stream's tip is compared, from the package list its catalog entry records,
    with the suites of its own release; the security updates are named per stream, among them one a
    snapshot mirror serves under a dated directory whose Release says it is the security pocket."""
    doc = two_streams()
    where = catalog_map(kube_client, kube_namespace, "catalog", doc)
    legacy = dict(
        doc, streams=dict(doc["streams"], **{"20.04": {"tip": "v20250601-2004", "validated": True}})
    )
    older = catalog_map(kube_client, kube_namespace, "legacy", legacy)
    auth = {"kubeconfig": "{{ lookup('env', 'KUBECONFIG') }}"}
    lab.clear_audit()
    run = run_playbook(
        play(
            task("catalog alone", catalog=where, repositories=streams_repos, **auth),
            task(
                "a tip without a manifest",
                ignore_errors=True,
                catalog=older,
                repositories=streams_repos,
                **auth,
            ),
        ),
        env=lab.env(),
    )
    assert run.ok, run.log
    got = run["catalog alone"]
    assert got["changed"] is False and got["rebuild_due"] is True and got["security_due"] is True
    assert got["revision"] == "v20261129"
    assert sorted(got["streams"]) == ["22.04", "24.04"], got["streams"]
    jammy, noble = got["streams"]["22.04"], got["streams"]["24.04"]
    assert (jammy["revision"], jammy["default"], jammy["validated"]) == ("v20261129", True, True)
    assert (noble["revision"], noble["default"], noble["validated"]) == ("v20261201-2404", False, False)
    assert jammy["security_updates"] == ["curl 7.81.0-1ubuntu1.17", "openssl 3.0.2-0ubuntu1.16"], jammy
    assert noble["security_updates"] == ["libc6 2.39-0ubuntu8.4", "openssl 3.0.13-0ubuntu3.5"], noble
    kinds = {(r["stream"], r["kind"], r["package"]): r["suite"] for r in got["reasons"]}
    assert kinds == {
        ("22.04", "point-release", "base-files"): "jammy-updates",
        ("22.04", "postgresql-minor", "postgresql-16"): "jammy-pgdg",
        ("22.04", "security", "curl"): "jammy-20261201",
        ("22.04", "security", "openssl"): "jammy-security",
        ("24.04", "security", "libc6"): "noble-security",
        ("24.04", "security", "openssl"): "noble-security",
    }, kinds
    # jammy's suites were never read for noble's tip, nor noble's for jammy's.
    assert not [r for r in got["reasons"] if r["stream"] == "24.04" and "jammy" in r["suite"]]
    assert "22.04 v20261129 (default stream): security: openssl 3.0.2-0ubuntu1.15 -> 3.0.2-0ubuntu1.16" in (
        " ".join(got["lines"])
    )
    assert any(line.startswith("24.04 v20261201-2404: security: libc6 ") for line in got["lines"]), got[
        "lines"
    ]
    indexes = {(i["suite"], i["security"]) for i in got["indexes"]}
    assert ("jammy-20261201", True) in indexes and ("noble-updates", False) in indexes, indexes
    # A tip published before builds recorded a manifest: the others are reported, the run fails naming it.
    failed = refused(run, "a tip without a manifest")
    assert failed["msg"].startswith("20.04 v20250601-2004 records no package manifest in the catalog"), failed
    assert sorted(failed["streams"]) == ["22.04", "24.04"]
    assert lab.mutating_requests() == []


@pytest.mark.lab_only
def test_a_manifest_file_stands_in_for_a_tip_that_records_none(
    lab, kube_client, kube_namespace, repos, tmp_path
):
    from tests.integration.modules.test_dbinstance_operator_env import imported_images

    doc = {
        "version": 1,
        "default_stream": "22.04",
        "streams": {"22.04": {"tip": "v20261129", "validated": True}},
        "images": imported_images(("v20261129", "22.04"), ("v20261201", "22.04")),
    }
    where = catalog_map(kube_client, kube_namespace, "catalog", doc)
    auth = {"kubeconfig": "{{ lookup('env', 'KUBECONFIG') }}"}
    run = run_playbook(
        play(
            task(
                "other revision",
                ignore_errors=True,
                catalog=where,
                manifest=manifest(tmp_path / "m.json", "v20261201"),
                repositories=[pgdg(repos)],
                **auth,
            ),
            task(
                "file",
                catalog=where,
                manifest=[manifest(tmp_path / "t.json")],
                repositories=[pgdg(repos)],
                **auth,
            ),
        ),
        env=lab.env(),
    )
    msg = refused(run, "other revision")["msg"]
    assert "is of revision v20261201, which is the tip of no stream (22.04 v20261129)" in msg, msg
    assert run["file"]["revision"] == "v20261129" and run["file"]["rebuild_due"] is True
    assert [r["package"] for r in run["file"]["reasons"]] == ["postgresql-16"]


@pytest.mark.lab_only
def test_the_rebuild_due_playbook_fails_on_a_security_update_for_the_schedule(
    lab, kube_client, kube_namespace, streams_repos, tmp_path
):
    """The playbook the daily schedule runs: per-stream lines, nothing written; with
    rebuild_due_fail_on=security it fails when a tip lacks a security update, and a misspelt option is
    refused before anything is read."""
    from tests.integration.support.runner import ROOT

    where = catalog_map(kube_client, kube_namespace, "catalog", two_streams())
    extra = {"rebuild_due_catalog": where, "rebuild_due_apt_repositories": streams_repos}
    playbook = ROOT / "playbooks" / "baked_image_rebuild_due.yml"
    lab.clear_audit()
    run = run_playbook(playbook, env=lab.env(), extra_vars=extra)
    assert run.ok, run.log
    said = run["Say, per stream, whether a rebuild is due"]["msg"]
    assert any(line.startswith("24.04 v20261201-2404: security: openssl ") for line in said), said
    assert lab.mutating_requests() == []
    failing = run_playbook(playbook, env=lab.env(), extra_vars=dict(extra, rebuild_due_fail_on="security"))
    assert not failing.ok
    assert failing.entry("Say, per stream, whether a rebuild is due")["status"] == "failed"
    misspelt = run_playbook(playbook, env=lab.env(), extra_vars=dict(extra, rebuild_due_fail_if="security"))
    assert not misspelt.ok and "rebuild_due_fail_if" in misspelt.log
    assert "Compare every stream's tip with the repositories (changes nothing)" not in misspelt.task_names()
