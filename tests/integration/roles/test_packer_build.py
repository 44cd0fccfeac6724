"""Role packer_build with real tools: Packer validates the rendered template, qemu-img post-processes.

No VM boots here. Check mode renders the template for both OS streams and runs the real
``packer validate`` (Packer 1.6 from Debian, or a newer one); the EOL guard stops a past-EOL request
before Packer; the output steps run on a real qcow2 given as ``packer_build_artifact`` (an image built
elsewhere), the same steps that follow a Packer build.
"""

from __future__ import annotations

import base64
import hashlib
import json
import pathlib
import shutil
import subprocess

import pytest

from tests.integration.support import disks
from tests.integration.support.runner import play as runner_play
from tests.integration.support.runner import run_playbook

ROLE = "goldenimage.pipeline.packer_build"
ROOT = pathlib.Path(__file__).resolve().parents[3]


def play(*role_vars):
    tasks = [
        {"name": "packer_build %d" % i, "ansible.builtin.include_role": {"name": ROLE}, "vars": v}
        for i, v in enumerate(role_vars)
    ]
    return runner_play(*tasks)


def qcow2(path, megabytes=4):
    """A real qcow2 whose clusters hold compressible data, like an installed system."""
    raw = path.with_suffix(".raw")
    line = b"postgresql-16 16.4-1.pgdg22.04+1 amd64 object-relational SQL database\n"
    raw.write_bytes((line * (megabytes * 1024 * 1024 // len(line) + 1))[: megabytes * 1024 * 1024])
    subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(raw), str(path)], check=True)
    raw.unlink()
    return path


JAMMY = 'PRETTY_NAME="Ubuntu 22.04.5 LTS"\nID=ubuntu\nVERSION_ID="22.04"\nVERSION_CODENAME=jammy\n'
NOBLE = 'PRETTY_NAME="Ubuntu 24.04.1 LTS"\nID=ubuntu\nVERSION_ID="24.04"\nVERSION_CODENAME=noble\n'
BOOKWORM = (
    'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\nVERSION_CODENAME=bookworm\n'
)


def os_disk(folder, name, os_release):
    """A real base image (qcow2, GPT, ext4 root made with mkfs.ext4 -d) whose /etc/os-release is given."""
    tree = disks.ext4_tree(
        folder / (name + ".tree"), {"etc/os-release": os_release, "usr/bin/true": b"\x7fELF"}
    )
    raw = disks.linux_disk(folder / (name + ".raw"), tree, disk_size=32 * disks.MIB)["path"]
    return disks.qcow2(raw, folder / (name + ".qcow2"))


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def dated_build(tmp_path, **role_vars):
    """Role variables for a build of 2026-11-29 from a small real base image into tmp_path/out."""
    base = qcow2(tmp_path / "base.qcow2", megabytes=1)
    return {
        "packer_build_base_image": str(base),
        "packer_build_base_image_checksum": "sha256:" + sha256(base),
        "packer_build_output_dir": str(tmp_path / "out"),
        "packer_build_date": "2026-11-29",
        **role_vars,
    }


def test_check_mode_renders_and_validates_both_streams(tmp_path):
    assert shutil.which("packer"), "packer is required (apt-get install packer)"
    base = qcow2(tmp_path / "base.qcow2", megabytes=1)
    out = tmp_path / "out"
    common = {
        "packer_build_base_image": str(base),
        "packer_build_base_image_checksum": "sha256:" + sha256(base),
        "packer_build_output_dir": str(out),
        "packer_build_date": "20261129",
        "packer_build_accelerator": "tcg",
    }
    run = run_playbook(
        play(
            dict(common, packer_build_os_version="22.04"),
            dict(common, packer_build_os_version="24.04", packer_build_pg_versions=["16", "17", "18"]),
            # A same-day rebuild (a CVE fix after the regular build) gets its own, sortable revision.
            dict(common, packer_build_os_version="24.04", packer_build_build=2),
        ),
        check=True,
    )
    assert run.ok, run.log
    validated = run.results("Validate the Packer template")
    assert [r.get("rc") for r in validated] == [0, 0, 0], run.log
    assert all(r.get("changed") is False for r in validated)
    guards = run.results("Refuse PostgreSQL majors and OS streams past end of life")
    assert guards[0]["pg_supported"] == ["15", "16", "17", "18"]
    facts = [
        r["ansible_facts"]["packer_build_result"]
        for r in run.results("Publish the result for later steps (packer_build_result)")
    ]
    assert [(f["revision"], f["built"]) for f in facts] == [
        ("v20261129", False),
        ("v20261129-2404", False),
        ("v20261129-2404-r02", False),
    ]
    assert facts[1]["artifact"] == str(out / "ubuntu-2404-postgres-v20261129-2404.qcow2")
    assert facts[2]["artifact"] == str(out / "ubuntu-2404-postgres-v20261129-2404-r02.qcow2")
    assert not out.exists(), "check mode must build and write nothing"
    assert all(
        r.get("skipped") or "skip_reason" in r
        for r in run.results("Run Packer (boots the build VM, provisions and seals it)")
    )


@pytest.mark.parametrize(
    "types, says", [(["ed25519", "dsa"], "dsa"), ([], "no SSH host key")], ids=["unknown", "none"]
)
def test_ssh_host_key_types_unknown_or_none_are_refused_before_anything_runs(tmp_path, types, says):
    out = tmp_path / "out"
    run = run_playbook(play(dated_build(tmp_path, packer_build_ssh_host_key_types=types)))
    assert not run.ok
    assert "packer_build_ssh_host_key_types" in run.log and says in run.log, run.log
    assert "Read the Packer version" not in run.task_names()
    assert not out.exists()


def test_eol_guard_stops_before_packer(tmp_path):
    out = tmp_path / "out"
    run = run_playbook(play(dated_build(tmp_path, packer_build_pg_versions=["13", "14", "15"])))
    assert not run.ok
    entry = run.entry("Refuse PostgreSQL majors and OS streams past end of life")
    assert entry["status"] == "failed"
    guard = entry["result"]
    msg = guard["msg"]
    assert "PostgreSQL 13 reached end of life on 2025-11-13" in msg
    assert "PostgreSQL 14 reached end of life on 2026-11-12" in msg
    assert "supported: 15, 16, 17, 18" in msg
    assert [v["version"] for v in guard["violations"]] == ["13", "14"]
    assert "Read the Packer version" not in run.task_names()
    assert not out.exists()


def test_post_processing_an_existing_image(tmp_path):
    image = qcow2(tmp_path / "raw-build.qcow2", megabytes=4)
    build_manifest = tmp_path / "build-manifest.json"
    build_manifest.write_text(
        json.dumps(
            {
                "revision": "v20261201-2404",
                "os_version": "24.04",
                "pg_repo": "pgdg",
                "kernel": "6.8.0-49-generic",
                "postgresql": {
                    "15": {"minor": "15.10", "package_version": "15.10-1.pgdg24.04+1"},
                    "16": {"minor": "16.6", "package_version": "16.6-1.pgdg24.04+1"},
                    "17": {"minor": "17.2", "package_version": "17.2-1.pgdg24.04+1"},
                },
                "packages": ["postgresql-15=15.10-1.pgdg24.04+1", "postgresql-16=16.6-1.pgdg24.04+1"],
            }
        )
    )
    out = tmp_path / "out"
    role_vars = {
        "packer_build_artifact": str(image),
        "packer_build_artifact_build_manifest": str(build_manifest),
        "packer_build_os_version": "24.04",
        "packer_build_output_dir": str(out),
        "packer_build_date": "20261201",
    }
    run = run_playbook(play(role_vars, role_vars))
    assert run.ok, run.log

    artifact = out / "ubuntu-2404-postgres-v20261201-2404.qcow2"
    manifest = json.loads((out / "ubuntu-2404-postgres-v20261201-2404.manifest.json").read_text())
    info = json.loads(
        subprocess.run(
            ["qemu-img", "info", "--output=json", str(artifact)], capture_output=True, text=True, check=True
        ).stdout
    )
    subprocess.run(["qemu-img", "check", str(artifact)], capture_output=True, check=True)
    assert info["format"] == "qcow2"
    assert info["format-specific"]["data"]["compression-type"] == manifest["compression"] == "zstd"

    assert manifest["revision"] == "v20261201-2404"
    assert manifest["os_version"] == "24.04"
    assert manifest["build_date"] == "2026-12-01"
    assert manifest["pg_versions"] == [
        {"major": "15", "minor": "15.10", "package_version": "15.10-1.pgdg24.04+1"},
        {"major": "16", "minor": "16.6", "package_version": "16.6-1.pgdg24.04+1"},
        {"major": "17", "minor": "17.2", "package_version": "17.2-1.pgdg24.04+1"},
    ]
    assert manifest["kernel"] == "6.8.0-49-generic"
    digest256 = sha256(artifact)
    digest512 = hashlib.sha512(artifact.read_bytes()).hexdigest()
    assert manifest["checksums"] == {"sha256": digest256, "sha512": digest512}
    assert (out / (artifact.name + ".sha256")).read_text() == "%s  %s\n" % (digest256, artifact.name)
    assert (out / (artifact.name + ".sha512")).read_text() == "%s  %s\n" % (digest512, artifact.name)
    sizes = manifest["sizes"]
    assert sizes["virtual_bytes"] == info["virtual-size"] == 4 * 1024 * 1024
    assert sizes["allocated_bytes"] == info["actual-size"]
    assert sizes["allocated_bytes"] < sizes["uncompressed_allocated_bytes"]
    assert sizes["saved_bytes"] == sizes["uncompressed_allocated_bytes"] - sizes["allocated_bytes"]
    report = run.results("Report what compression saved")[0]["msg"]
    assert "after zstd compression" in report and "saved" in report

    # The second run finds the finished revision and changes nothing.
    assert len(run.results("Write the compressed artifact")) == 1
    second_run = run.task_names().index("packer_build 1")
    assert not [e["task"] for e in run.tasks[second_run:] if e["changed"]]
    facts = run.results("Publish the result for later steps (packer_build_result)")
    assert [f["ansible_facts"]["packer_build_result"]["built"] for f in facts] == [True, False]
    assert facts[1]["ansible_facts"]["packer_build_result"]["manifest"] == manifest


def test_post_processing_refuses_a_build_missing_a_major(tmp_path):
    image = qcow2(tmp_path / "raw-build.qcow2", megabytes=1)
    build_manifest = tmp_path / "build-manifest.json"
    build_manifest.write_text(json.dumps({"postgresql": {"15": {"minor": "15.10"}}, "kernel": "6.1"}))
    out = tmp_path / "out"
    run = run_playbook(
        play(
            {
                "packer_build_artifact": str(image),
                "packer_build_artifact_build_manifest": str(build_manifest),
                "packer_build_output_dir": str(out),
                "packer_build_date": "20261201",
                "packer_build_compression": "zlib",
            }
        )
    )
    assert not run.ok
    assert (
        "['16', '17'] were requested" in run["Refuse a build that lacks a requested PostgreSQL major"]["msg"]
    )
    assert not (out / "ubuntu-2204-postgres-v20261201.manifest.json").exists()


def files_as_found(folder):
    """Each file in ``folder`` with what a rewrite changes: inode, size and modification time."""
    return {
        p.name: (p.stat().st_ino, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.iterdir())
    }


@pytest.mark.suite("idempotence")
def test_disk_image_module_check_mode_then_write_then_again(tmp_path):
    from tests.integration.support.runner import module_task

    image = qcow2(tmp_path / "raw.qcow2", megabytes=2)
    dest = tmp_path / "artifact.qcow2"
    args = {"src": str(image), "dest": str(dest), "compression": "zlib"}
    first = run_playbook(
        runner_play(
            module_task("goldenimage.pipeline.disk_image", "predict", check=True, **args),
            module_task("goldenimage.pipeline.disk_image", "write", **args),
        )
    )
    assert first.ok, first.log
    written = files_as_found(tmp_path)
    run = run_playbook(
        runner_play(
            module_task("goldenimage.pipeline.disk_image", "again", **args),
            module_task(
                "goldenimage.pipeline.disk_image",
                "refused",
                ignore_errors=True,
                **{**args, "src": str(tmp_path / "none")},
            ),
        )
    )
    assert run.ok, run.log
    assert first["predict"]["changed"] is True and first["predict"]["compression"] == "zlib"
    assert first["write"]["changed"] is True and run["again"]["changed"] is False
    # The second run rewrote no file: the artifact and its checksum files are the ones the first wrote.
    assert files_as_found(tmp_path) == written
    assert (
        run["again"]["checksums"]
        == first["write"]["checksums"]
        == {
            "sha256": sha256(dest),
            "sha512": hashlib.sha512(dest.read_bytes()).hexdigest(),
        }
    )
    assert first["write"]["sizes"]["saved_bytes"] > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "artifact.qcow2",
        "artifact.qcow2.sha256",
        "artifact.qcow2.sha512",
        "raw.qcow2",
    ]
    assert run["refused"]["msg"] == "image %s: it does not exist or is not a file; build it first" % (
        tmp_path / "none"
    )


FAKE_PACKER = r'''#!%(python)s
"""A stand-in for packer: version, validate, init, and a build that takes a while and prints its steps."""
import json, os, subprocess, sys, time

command = sys.argv[1]
if command == "version":
    print("Packer v1.6.6")
elif command == "build":
    config = json.load(open("build.pkrvars.json"))
    steps = (
        ("qemu: Starting VM, booting from CD-ROM", 1),
        ("qemu: Waiting for SSH to become available...", 12),
        ("qemu: Provisioning with shell script", 1),
    )
    for step, pause in steps:
        print("==> " + step, flush=True)
        time.sleep(pause)
    if %(fail)s:
        print("Build 'qemu' errored: provisioning failed", flush=True)
        sys.exit(1)
    os.makedirs(config["output_directory"])  # packer makes it, and refuses one that exists
    image = config["output_directory"] + "/" + config["vm_name"]
    # The built image is the base image as provisioned: the same os-release.
    subprocess.run(["qemu-img", "convert", "-O", "qcow2", config["base_image"], image], check=True)
    majors = {m: {"minor": m + ".1", "package_version": m + ".1-1"} for m in config["pg_versions"]}
    json.dump({"postgresql": majors, "kernel": "6.8.0"}, open(config["build_manifest"], "w"))
    print("==> Builds finished. The artifacts of successful builds are:", flush=True)
'''


def fake_packer(path, fail=False):
    import sys

    path.write_text(FAKE_PACKER % {"python": sys.executable, "fail": fail})
    path.chmod(0o755)
    return path


def faked_build(tmp_path, os_release, **role_vars):
    """Role variables for a build of 2026-12-01 by the fake Packer from a base image with this os-release."""
    base = os_disk(tmp_path, "base", os_release)
    return {
        "packer_build_base_image": str(base),
        "packer_build_base_image_checksum": "sha256:" + sha256(base),
        "packer_build_date": "20261201",
        "packer_build_accelerator": "tcg",
        **role_vars,
    }


def result_of(run):
    return run["Publish the result for later steps (packer_build_result)"]["ansible_facts"][
        "packer_build_result"
    ]


def test_a_packer_build_prints_its_steps_and_a_failed_one_names_its_last(tmp_path):
    common = faked_build(tmp_path, JAMMY)
    ok = dict(
        common,
        packer_build_output_dir=str(tmp_path / "ok"),
        packer_build_packer_binary=str(fake_packer(tmp_path / "packer")),
    )
    run = run_playbook(play(ok))
    assert run.ok, run.log
    build = run["Run Packer (boots the build VM, provisions and seals it)"]
    assert build["changed"] is True and build["rc"] == 0
    assert any("qemu: Waiting for SSH to become available... after " in line for line in build["lines"]), (
        build["lines"]
    )
    assert build["lines"][-1].startswith("Packer build in ") and "Builds finished" in build["lines"][-1]
    assert "qemu: Waiting for SSH to become available..." in run.stdout  # printed while it ran
    facts = result_of(run)
    assert facts["built"] is True and facts["manifest"]["checksums"]["sha256"]

    bad = dict(
        common,
        packer_build_output_dir=str(tmp_path / "bad"),
        packer_build_packer_binary=str(fake_packer(tmp_path / "packer-bad", fail=True)),
    )
    run = run_playbook(play(bad))
    assert not run.ok
    msg = run["Run Packer (boots the build VM, provisions and seals it)"]["msg"]
    assert "failed (rc 1) at qemu: Provisioning with shell script" in msg and "provisioning failed" in msg, (
        msg
    )


def test_a_debian_base_image_is_named_by_its_os_release_never_as_ubuntu(tmp_path):
    role_vars = faked_build(
        tmp_path,
        BOOKWORM,
        packer_build_pg_repo="distribution",
        packer_build_pg_versions=["15"],
        packer_build_output_dir=str(tmp_path / "out"),
        packer_build_packer_binary=str(fake_packer(tmp_path / "packer")),
    )
    run = run_playbook(play(role_vars))
    assert run.ok, run.log
    facts = result_of(run)
    assert facts["artifact"] == str(tmp_path / "out" / "debian-12-postgres-v20261201.qcow2")
    assert facts["os"] == {"id": "debian", "version_id": "12", "revision_stream": "22.04", "ubuntu": False}
    assert facts["manifest"]["os"] == {"id": "debian", "version_id": "12"}
    assert facts["manifest"]["os_version"] == "12"
    assert not list((tmp_path / "out").glob("ubuntu-*"))


def test_an_ubuntu_base_image_of_another_stream_is_refused_before_packer(tmp_path):
    role_vars = faked_build(
        tmp_path,
        NOBLE,
        packer_build_output_dir=str(tmp_path / "out"),
        packer_build_packer_binary=str(fake_packer(tmp_path / "packer")),
    )
    run = run_playbook(play(role_vars))
    assert not run.ok
    msg = run["Name the image by its os-release (an Ubuntu image must be the declared stream)"]["msg"]
    assert "says Ubuntu 24.04, the build declares the 22.04 stream" in msg, msg
    assert 'packer_build_os_version: \\"24.04\\"' in msg or 'packer_build_os_version: "24.04"' in msg, msg
    assert not (tmp_path / "out").exists()


def signed_build(tmp_path, **signing):
    """A build of 2026-12-01 by the fake Packer into tmp_path/out, signed with ``signing``'s key options."""
    return faked_build(
        tmp_path,
        JAMMY,
        packer_build_output_dir=str(tmp_path / "out"),
        packer_build_packer_binary=str(fake_packer(tmp_path / "packer")),
        **signing,
    )


def test_a_signed_build_writes_what_cosign_verifies_and_names_its_inputs(tmp_path, cosign):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    password = "build-" + hashlib.sha256(tmp_path.name.encode()).hexdigest()[:10]
    (tmp_path / "signing.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(password.encode()),
        )
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    (tmp_path / "pub.pem").write_bytes(public)
    out = tmp_path / "out"
    role_vars = signed_build(
        tmp_path,
        packer_build_signing_key_path=str(tmp_path / "signing.pem"),
        packer_build_signing_key_password=password,
    )
    run = run_playbook(play(role_vars, role_vars))
    assert run.ok, run.log
    assert password not in run.stdout + run.stderr and "PRIVATE KEY" not in run.stdout + run.stderr
    artifact = out / "ubuntu-2204-postgres-v20261201.qcow2"
    manifest = out / "ubuntu-2204-postgres-v20261201.manifest.json"
    for path in (artifact, manifest):
        cosign(
            "verify-blob",
            "--key",
            str(tmp_path / "pub.pem"),
            "--signature",
            str(path) + ".sig",
            "--insecure-ignore-tlog=true",
            str(path),
        )
        cosign(
            "verify-blob-attestation",
            "--key",
            str(tmp_path / "pub.pem"),
            "--signature",
            str(path) + ".intoto.jsonl",
            "--type",
            "slsaprovenance1",
            "--insecure-ignore-tlog=true",
            str(path),
        )
    envelope = json.loads((out / (artifact.name + ".intoto.jsonl")).read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert statement["subject"] == [{"name": artifact.name, "digest": {"sha256": sha256(artifact)}}]
    inputs = {
        d["name"]: d["digest"]["sha256"]
        for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"]
    }
    files = ROOT / "roles" / "packer_build" / "files"
    assert inputs == {
        "upstream": role_vars["packer_build_base_image_checksum"].split(":", 1)[1],
        "packer-template": sha256(files / "ubuntu-postgres.pkr.hcl"),
        "provisioning-script": sha256(files / "provision.sh"),
        "package-manifest": sha256(manifest),
        "image-facts": sha256(out / (artifact.name + ".facts.json")),
    }
    facts = run.results("Publish the result for later steps (packer_build_result)")
    first = facts[0]["ansible_facts"]["packer_build_result"]
    assert first["signature"] == str(artifact) + ".sig" and len(first["signed_by"]) == 64
    # The second run finds everything signed and changes nothing.
    second_run = run.task_names().index("packer_build 1")
    assert not [e["task"] for e in run.tasks[second_run:] if e["changed"]]


def test_a_signed_build_refuses_an_upstream_it_cannot_name_by_digest(tmp_path):
    role_vars = faked_build(
        tmp_path,
        JAMMY,
        packer_build_output_dir=str(tmp_path / "out"),
        packer_build_base_image_checksum="file:https://cloud-images.ubuntu.com/SHA256SUMS",
        packer_build_signing_key_path=str(tmp_path / "signing.pem"),
    )
    run = run_playbook(play(role_vars))
    assert not run.ok
    msg = run["Require the base image's digest when the build is signed"]["msg"]
    assert "a signed build records its upstream image by digest" in msg, msg
    assert not (tmp_path / "out").exists()


@pytest.mark.lab_only
def test_a_build_signs_with_a_key_kept_in_a_kubernetes_secret_and_never_prints_it(
    lab, kube_client, kube_namespace, tmp_path
):
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from kubernetes import client

    key = ec.generate_private_key(ec.SECP256R1())
    text = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    client.CoreV1Api(kube_client).create_namespaced_secret(
        kube_namespace,
        {
            "metadata": {"name": "image-signing"},
            "data": {"release.pem": base64.b64encode(text).decode()},
        },
    )
    out = tmp_path / "out"
    role_vars = signed_build(
        tmp_path,
        packer_build_signing_key_secret={
            "namespace": kube_namespace,
            "name": "image-signing",
            "key": "release.pem",
        },
    )
    missing = dict(
        role_vars,
        packer_build_output_dir=str(tmp_path / "missing"),
        packer_build_signing_key_secret={"namespace": kube_namespace, "name": "image-signing"},
    )
    run = run_playbook(play(role_vars), env=lab.env(), args=["-vvv"])
    assert run.ok, run.log
    body = text.decode().splitlines()[1]
    assert body not in run.stdout + run.stderr
    artifact = out / "ubuntu-2204-postgres-v20261201.qcow2"
    ring = {signing.key_id(key): key.public_key()}
    _digest, signature, found = signing.file_evidence(ring, str(artifact))
    assert signature == {"key": signing.key_id(key)} and found["key"] == signing.key_id(key)
    assert result_of(run)["signed_by"] == signing.key_id(key)

    refused = run_playbook(play(missing), env=lab.env())
    assert not refused.ok
    msg = refused["Refuse a signing key Secret that is missing or lacks the key"]["msg"]
    assert "Secret %s/image-signing (packer_build_signing_key_secret)" % kube_namespace in msg, msg
    assert "has no key cosign.pem" in msg, msg
