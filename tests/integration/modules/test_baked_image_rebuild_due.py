"""baked_image_rebuild_due against APT repositories on loopback: an Ubuntu-like archive (release,
-updates and -security suites, InRelease) and a PGDG-like one (Release + Release.gpg, Packages.gz), both
signed with a key made in the test; the manifest is the build manifest packer_build writes, or the one the
catalog entry of the default stream's tip records."""

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
    assert due["other_updates"] == {"curl": "7.81.0-1ubuntu1.18"}
    verified = {(i["suite"], i["verified"], i["path"]) for i in due["indexes"]}
    assert ("jammy-security", "InRelease", "main/binary-amd64/Packages.xz") in verified
    assert ("jammy-pgdg", "Release.gpg", "main/binary-amd64/Packages.gz") in verified
    assert run["check mode"]["rebuild_due"] is True
    rebuilt = run["rebuilt"]
    assert rebuilt["rebuild_due"] is False and rebuilt["reasons"] == [], rebuilt
    assert rebuilt["lines"][0].startswith("no rebuild due: v20261201 has every"), rebuilt["lines"]


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


@pytest.mark.lab_only
def test_the_default_stream_tip_from_the_catalog(lab, kube_client, kube_namespace, repos, tmp_path):
    from kubernetes import client

    from tests.integration.modules.test_dbinstance_operator_env import imported_images

    images = imported_images(("v20261129", "22.04"), ("v20261201", "22.04"))
    images["v20261201"]["manifest"] = {
        "pg_versions": ["16", "17"],
        "packages": ["%s=%s" % kv for kv in sorted(INSTALLED.items())],
    }
    doc = {
        "version": 1,
        "default_stream": "22.04",
        "streams": {"22.04": {"tip": "v20261129", "validated": True}},
    }
    core = client.CoreV1Api(kube_client)
    core.create_namespaced_config_map(
        kube_namespace,
        {"metadata": {"name": "catalog"}, "data": {"catalog.yaml": yaml.safe_dump(dict(doc, images=images))}},
    )
    where = {"namespace": kube_namespace, "name": "catalog"}
    auth = {"kubeconfig": "{{ lookup('env', 'KUBECONFIG') }}"}
    run = run_playbook(
        play(
            task("no manifest", ignore_errors=True, catalog=where, repositories=[pgdg(repos)], **auth),
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
                manifest=manifest(tmp_path / "t.json"),
                repositories=[pgdg(repos)],
                **auth,
            ),
        ),
        env=lab.env(),
    )
    assert "v20261129 has no manifest in the catalog; give manifest" in refused(run, "no manifest")["msg"]
    msg = refused(run, "other revision")["msg"]
    assert "is of revision v20261201 but the default stream's tip is v20261129" in msg, msg
    assert run["file"]["revision"] == "v20261129" and run["file"]["rebuild_due"] is True
    # The tip's recorded manifest is read from the catalog itself.
    cm = core.read_namespaced_config_map("catalog", kube_namespace)
    doc["streams"]["22.04"]["tip"] = "v20261201"
    cm.data["catalog.yaml"] = yaml.safe_dump(dict(doc, images=images))
    core.replace_namespaced_config_map("catalog", kube_namespace, cm)
    lab.clear_audit()
    run = run_playbook(
        play(task("recorded", catalog=where, repositories=[pgdg(repos)], **auth)), env=lab.env()
    )
    assert run.ok, run.log
    assert run["recorded"]["revision"] == "v20261201" and run["recorded"]["rebuild_due"] is True
    assert [r["package"] for r in run["recorded"]["reasons"]] == ["postgresql-16"]
    assert lab.mutating_requests() == []


@pytest.mark.lab_only
def test_the_publish_playbook_step_runs_alone_from_a_schedule(
    lab, kube_client, kube_namespace, repos, tmp_path
):
    """``--tags rebuild_due`` reads the catalog's default tip and its manifest under the output
    directory, says whether a rebuild is due, runs no other step and writes nothing; with
    publish_fail_if_due it fails when one is due, for a scheduler to start the build."""
    from kubernetes import client

    from tests.integration.modules.test_dbinstance_operator_env import imported_images
    from tests.integration.support.runner import ROOT

    doc = {
        "version": 1,
        "default_stream": "22.04",
        "streams": {"22.04": {"tip": "v20261129", "validated": True}},
        "images": imported_images(("v20261129", "22.04")),
    }
    client.CoreV1Api(kube_client).create_namespaced_config_map(
        kube_namespace, {"metadata": {"name": "catalog"}, "data": {"catalog.yaml": yaml.safe_dump(doc)}}
    )
    out = tmp_path / "out"
    out.mkdir()
    manifest(out / "ubuntu-2204-postgres-v20261129.manifest.json")
    extra = {
        "publish_output_dir": str(out),
        "publish_catalog": {"namespace": kube_namespace, "name": "catalog"},
        "publish_apt_repositories": [ubuntu(repos), pgdg(repos)],
    }
    playbook = ROOT / "playbooks" / "publish_baked_image.yml"
    lab.clear_audit()
    run = run_playbook(playbook, env=lab.env(), extra_vars=extra, args=["--tags", "rebuild_due"])
    assert run.ok, run.log
    said = run["Say whether a rebuild is due"]["msg"]
    assert said[0] == "rebuild due: True (v20261129)", said
    assert any(line.startswith("postgresql-minor: postgresql-16 16.4-1.pgdg22.04+1 -> 16.6") for line in said)
    ran = run.task_names()
    assert "EOL guard, before anything is built or uploaded" not in ran, ran
    assert "Move the tip of the stream to the revision" not in ran, ran
    assert lab.mutating_requests() == []
    failing = run_playbook(
        playbook,
        env=lab.env(),
        extra_vars=dict(extra, publish_fail_if_due=True),
        args=["--tags", "rebuild_due"],
    )
    assert not failing.ok
    assert failing.entry("Say whether a rebuild is due")["status"] == "failed"
