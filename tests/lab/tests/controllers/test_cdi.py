"""CDI in the lab: DataVolume imports over real HTTP from the loopback S3 server, the image store,
clones, DataSources; qcow2 files are made and converted with the real qemu-img."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pathlib
import re
import subprocess
import uuid

import pytest

from tests.lab.controllers import cdi
from tests.lab.controllers.cdi import (
    CLONE_FALLBACK_REASON,
    CLONE_TYPE,
    FALLBACKS,
    IMMEDIATE_BINDING,
    IMPORT_RETRIES,
    RATE_ENV,
    publish_container_disk,
)
from tests.lab.controllers.storage import volume_path

from .conftest import SNAP, MiniLab, until, visit

CDI = "cdi.kubevirt.io"
MIB = 1024 * 1024
DATA_MIB = 3


# ------------------------------------------------------------------------------ fixtures


class CdiLab(MiniLab):
    def rt(self, group: str, plural: str, version: str = "v1"):
        return super().rt(group, plural, "v1beta1" if group == CDI else version)


@pytest.fixture(scope="module")
def s3(controller_lab):
    """The lab's loopback S3 endpoint, which its CDI controller reads over plain HTTP as CDI does."""
    return controller_lab.s3


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """A raw disk with data in it, and the same disk as qcow2 and compressed qcow2."""
    root = tmp_path_factory.mktemp("images")
    raw = root / "disk.raw"
    block = os.urandom(256 * 1024)
    with open(raw, "wb") as out:
        for i in range(DATA_MIB * 4):
            out.write(block if i % 2 == 0 else bytes(len(block)))  # data and holes
    qcow2, compressed = root / "disk.qcow2", root / "disk-c.qcow2"
    subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, qcow2], check=True)
    subprocess.run(["qemu-img", "convert", "-c", "-f", "raw", "-O", "qcow2", raw, compressed], check=True)
    return {"raw": raw, "qcow2": qcow2, "compressed": compressed}


@pytest.fixture(scope="module")
def bucket(s3, images):
    """Objects in a public bucket (its policy lets anyone list it and read its objects; a canned
    public-read ACL is refused on a new bucket, as on S3) and in a private one; returns their URLs, and a
    presigned one of the private object."""
    client = s3.client()
    public, private = "os-images-" + uuid.uuid4().hex[:6], "private-images-" + uuid.uuid4().hex[:6]
    client.create_bucket(Bucket=public)
    statement = {
        "Effect": "Allow",
        "Principal": "*",
        "Action": ["s3:GetObject", "s3:ListBucket"],
        "Resource": ["arn:aws:s3:::%s" % public, "arn:aws:s3:::%s/*" % public],
    }
    client.put_bucket_policy(
        Bucket=public, Policy=json.dumps({"Version": "2012-10-17", "Statement": [statement]})
    )
    client.create_bucket(Bucket=private)
    for key, path in (
        ("debian/12/disk.qcow2", images["qcow2"]),
        ("debian/12/disk-c.qcow2", images["compressed"]),
    ):
        client.upload_file(str(path), public, key)
    client.upload_file(str(images["qcow2"]), private, "windows/11/golden.qcow2")
    base = s3.endpoint_url
    return {
        "qcow2": f"{base}/{public}/debian/12/disk.qcow2",
        "compressed": f"{base}/{public}/debian/12/disk-c.qcow2",
        "missing": f"{base}/{public}/debian/13/none.qcow2",
        "private": f"{base}/{private}/windows/11/golden.qcow2",
        "presigned": client.generate_presigned_url(
            "get_object", Params={"Bucket": private, "Key": "windows/11/golden.qcow2"}, ExpiresIn=3600
        ),
    }


@pytest.fixture
def cdi_lab(controller_lab):
    """The module's lab (its storage and CDI controllers, its loopback S3 endpoint), a fresh namespace."""
    with visit(controller_lab, CdiLab) as view:
        yield view


# ------------------------------------------------------------------------------- helpers


def sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def dv_body(
    name: str, source: dict, size: str = "8Mi", mode: str | None = None, sc: str | None = None, **extra
) -> dict:
    storage_spec: dict = {"resources": {"requests": {"storage": size}}}
    if mode:
        storage_spec["volumeMode"] = mode
    if sc:
        storage_spec["storageClassName"] = sc
    body = {
        "apiVersion": f"{CDI}/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": name, **extra.pop("metadata", {})},
        "spec": {"source": source, "storage": storage_spec, **extra},
    }
    return body


def phase_is(*phases: str):
    return lambda dv: (dv.get("status") or {}).get("phase") in phases


def cond(dv: dict, ctype: str) -> dict:
    return next(c for c in dv["status"]["conditions"] if c["type"] == ctype)


def create_dv(cdi_lab: MiniLab, body: dict) -> dict:
    return cdi_lab.create(CDI, "datavolumes", body)


def wait_dv(cdi_lab: MiniLab, name: str, *phases: str, timeout: float = 15) -> dict:
    return cdi_lab.wait(CDI, "datavolumes", name, phase_is(*phases), timeout)


def disk_of(cdi_lab: MiniLab, claim: str) -> pathlib.Path:
    path = volume_path(cdi_lab.context, cdi_lab.get("", "persistentvolumeclaims", claim))
    return path / "disk.img" if path.is_dir() else path


def assert_same_disk(disk: pathlib.Path, raw: pathlib.Path, size: int) -> None:
    assert disk.stat().st_size == size
    data = raw.read_bytes()
    with open(disk, "rb") as handle:
        assert handle.read(len(data)) == data
        assert handle.read(MIB).strip(b"\0") == b""
    assert disk.stat().st_blocks * 512 < size  # still sparse


def reasons(cdi_lab: MiniLab, name: str, *expected: str) -> list[str]:
    """The Event reasons recorded for `name`, once they include `expected`.

    A controller records its Events after the status write, as an EventRecorder does, so a reader that has
    just seen the phase may not see them yet.
    """

    def recorded() -> list[str]:
        return [e["reason"] for e in cdi_lab.events(name)]

    if expected:
        cdi_lab.wait(CDI, "datavolumes", name, lambda _dv: set(expected) <= set(recorded()))
    return recorded()


# --------------------------------------------------------------------------------- http


def test_http_import_reports_phases_progress_and_converts_qcow2(cdi_lab, bucket, images, monkeypatch):
    monkeypatch.setenv(RATE_ENV, str(4 * MIB))  # slow enough to watch the progress move
    sub = cdi_lab.store.subscribe({(CDI, "datavolumes")})
    checksum = f"sha256:{sha256(images['qcow2'])}"
    create_dv(cdi_lab, dv_body("debian", {"http": {"url": bucket["qcow2"], "checksum": checksum}}))
    dv = wait_dv(cdi_lab, "debian", "Succeeded")
    seen = []
    while (event := sub.get(timeout=0.01)) is not None:
        status = event.obj.get("status") or {}
        seen.append((status.get("phase"), status.get("progress")))
    sub.close()
    phases = []
    for phase, _ in seen:
        if phase and (not phases or phases[-1] != phase):
            phases.append(phase)
    assert phases == ["Pending", "ImportScheduled", "ImportInProgress", "Succeeded"]
    progress = [p for _, p in seen if p]
    assert progress[0] == "N/A"
    middle = [float(p[:-1]) for p in progress if re.fullmatch(r"\d+\.\d\d%", p)]
    assert any(0 < value < 100 for value in middle), progress
    assert middle == sorted(middle)
    status = dv["status"]
    assert status["progress"] == "100.0%" and status["claimName"] == "debian"
    assert status["restartCount"] == 0
    assert (cond(dv, "Ready")["status"], cond(dv, "Bound")["status"]) == ("True", "True")
    assert (cond(dv, "Running")["status"], cond(dv, "Running")["reason"]) == ("False", "Completed")
    pvc = cdi_lab.get("", "persistentvolumeclaims", "debian")
    owner = pvc["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("DataVolume", dv["metadata"]["uid"], True)
    assert (pvc["spec"]["storageClassName"], pvc["spec"]["volumeMode"]) == ("lab-fs", "Filesystem")
    assert_same_disk(disk_of(cdi_lab, "debian"), images["raw"], 8 * MIB)
    got = reasons(cdi_lab, "debian", "ImportScheduled", "ImportInProgress", "ImportSucceeded")
    for reason in ("ImportScheduled", "ImportInProgress", "ImportSucceeded"):
        assert reason in got
    assert got.index("ImportScheduled") < got.index("ImportSucceeded")


def test_checksum_mismatch_fails_the_import_at_once(cdi_lab, bucket, images):
    wrong = "sha256:" + "0" * 64
    create_dv(cdi_lab, dv_body("bad-sum", {"http": {"url": bucket["qcow2"], "checksum": wrong}}))
    dv = wait_dv(cdi_lab, "bad-sum", "Failed")
    running = cond(dv, "Running")
    assert (running["status"], running["reason"]) == ("False", "Error")
    assert "checksum mismatch" in running["message"] and sha256(images["qcow2"]) in running["message"]
    assert dv["status"]["restartCount"] == 0
    assert cond(dv, "Ready")["status"] == "False"
    assert {"Error", "ImportFailed"} <= set(reasons(cdi_lab, "bad-sum", "Error", "ImportFailed"))
    assert not disk_of(cdi_lab, "bad-sum").exists()


def test_a_private_bucket_is_read_presigned_and_refuses_the_secret(cdi_lab, bucket, images, s3):
    """CDI reads an http source anonymously, or with the secretRef's keys as basic auth: S3 refuses both
    (403, and 400 "Unsupported Authorization Type"), so only the presigned URL imports."""
    create_dv(cdi_lab, dv_body("anon", {"http": {"url": bucket["private"]}}))
    secret = {
        "metadata": {"name": "bucket-creds"},
        "type": "Opaque",
        "data": {
            "accessKeyId": base64.b64encode(s3.access_key.encode()).decode(),
            "secretKey": base64.b64encode(s3.secret_key.encode()).decode(),
        },
    }
    cdi_lab.create("", "secrets", secret)
    md5 = "md5:" + hashlib.md5(images["qcow2"].read_bytes()).hexdigest()
    create_dv(
        cdi_lab,
        dv_body("basic", {"http": {"url": bucket["private"], "secretRef": "bucket-creds", "checksum": md5}}),
    )
    create_dv(cdi_lab, dv_body("signed", {"http": {"url": bucket["presigned"], "checksum": md5}}))
    signed = wait_dv(cdi_lab, "signed", "Succeeded")
    assert signed["status"]["restartCount"] == 0
    assert_same_disk(disk_of(cdi_lab, "signed"), images["raw"], 8 * MIB)
    for name, status in (("anon", "got 403"), ("basic", "got 400")):
        failed = wait_dv(cdi_lab, name, "Failed")
        assert failed["status"]["restartCount"] == IMPORT_RETRIES
        running = cond(failed, "Running")
        assert running["reason"] == "Error" and status in running["message"], (name, running)
        assert reasons(cdi_lab, name, "Error").count("Error") >= 1
        assert not disk_of(cdi_lab, name).exists()


def test_compressed_qcow2_into_a_block_volume_with_immediate_binding(cdi_lab, bucket, images):
    notes = {"annotations": {IMMEDIATE_BINDING: "true"}}
    url = bucket["compressed"]
    create_dv(
        cdi_lab,
        dv_body("blk", {"http": {"url": url}}, size="6Mi", mode="Block", sc="lab-wffc", metadata=notes),
    )
    create_dv(cdi_lab, dv_body("wffc", {"http": {"url": url}}, size="6Mi", sc="lab-wffc"))
    create_dv(cdi_lab, dv_body("waits", {"blank": {}}, size="4Mi"))
    wait_dv(cdi_lab, "blk", "Succeeded")
    disk = disk_of(cdi_lab, "blk")
    assert disk.is_file() and disk.suffix == ".img"
    assert (
        cdi_lab.get("", "persistentvolumeclaims", "blk")["metadata"]["annotations"][IMMEDIATE_BINDING]
        == "true"
    )
    assert_same_disk(disk, images["raw"], 6 * MIB)
    wffc = wait_dv(cdi_lab, "wffc", "WaitForFirstConsumer")
    assert cond(wffc, "Bound")["reason"] == "Pending"
    assert cdi_lab.get("", "persistentvolumeclaims", "wffc")["status"]["phase"] == "Pending"
    blank = wait_dv(cdi_lab, "waits", "Succeeded")
    assert blank["status"]["progress"] == "100.0%"
    empty = disk_of(cdi_lab, "waits")
    assert empty.stat().st_size == 4 * MIB and empty.stat().st_blocks == 0


def test_missing_object_and_too_small_volume(cdi_lab, bucket):
    create_dv(cdi_lab, dv_body("gone", {"http": {"url": bucket["missing"]}}))
    create_dv(cdi_lab, dv_body("tiny", {"http": {"url": bucket["qcow2"]}}, size="1Mi"))
    tiny = wait_dv(cdi_lab, "tiny", "Failed")
    assert "larger than the reported available storage" in cond(tiny, "Running")["message"]
    gone = wait_dv(cdi_lab, "gone", "Failed")
    assert gone["status"]["restartCount"] == IMPORT_RETRIES
    assert "got 404" in cond(gone, "Running")["message"]


# ----------------------------------------------------------------------------- registry


def test_registry_import_is_digest_pinned(cdi_lab, images):
    digest = publish_container_disk(cdi_lab.context, images["qcow2"])
    assert digest == f"sha256:{sha256(images['qcow2'])}"
    assert publish_container_disk(cdi_lab.context.state_dir, images["qcow2"]) == digest  # idempotent
    create_dv(
        cdi_lab, dv_body("cd", {"registry": {"url": f"docker://quay.io/containerdisks/debian@{digest}"}})
    )
    unknown = "sha256:" + "ab" * 32
    create_dv(
        cdi_lab, dv_body("nope", {"registry": {"url": f"docker://quay.io/containerdisks/debian@{unknown}"}})
    )
    create_dv(cdi_lab, dv_body("tag", {"registry": {"url": "docker://quay.io/containerdisks/debian:12"}}))
    wait_dv(cdi_lab, "cd", "Succeeded")
    assert_same_disk(disk_of(cdi_lab, "cd"), images["raw"], 8 * MIB)
    tag = wait_dv(cdi_lab, "tag", "Failed")
    assert tag["status"]["restartCount"] == 0 and "digest-pinned" in cond(tag, "Running")["message"]
    nope = wait_dv(cdi_lab, "nope", "Failed")
    assert nope["status"]["restartCount"] == IMPORT_RETRIES
    assert "manifest unknown" in cond(nope, "Running")["message"]


# ------------------------------------------------------------------------------- clones


def test_pvc_and_snapshot_clones(cdi_lab, images):
    digest = publish_container_disk(cdi_lab.context, images["qcow2"])
    create_dv(cdi_lab, dv_body("src", {"registry": {"url": f"docker://example.org/os@{digest}"}}))
    # a clone of a claim still being imported waits for the import
    create_dv(cdi_lab, dv_body("same", {"pvc": {"namespace": cdi_lab.namespace, "name": "src"}}))
    immediate = {"annotations": {IMMEDIATE_BINDING: "true"}}
    source = {"pvc": {"namespace": cdi_lab.namespace, "name": "src"}}
    create_dv(cdi_lab, dv_body("other", source, sc="lab-wffc", metadata=immediate))
    create_dv(cdi_lab, dv_body("small", {"pvc": {"namespace": cdi_lab.namespace, "name": "src"}}, size="4Mi"))
    create_dv(cdi_lab, dv_body("orphan", {"pvc": {"namespace": cdi_lab.namespace, "name": "nothing"}}))
    same = wait_dv(cdi_lab, "same", "Succeeded")
    assert same["metadata"]["annotations"][CLONE_TYPE] == "snapshot"
    assert_same_disk(disk_of(cdi_lab, "same"), images["raw"], 8 * MIB)
    copied = wait_dv(cdi_lab, "other", "Succeeded")
    assert copied["metadata"]["annotations"][CLONE_TYPE] == "copy"
    # The fallback is visible as CDI shows it: on the target claim, an annotation and a Warning Event.
    target = cdi_lab.get("", "persistentvolumeclaims", "other")
    assert target["metadata"]["annotations"][CLONE_TYPE] == "copy"
    assert target["metadata"]["annotations"][CLONE_FALLBACK_REASON] == FALLBACKS["IncompatibleStorageClasses"]
    fallback = cdi_lab.events("other", "IncompatibleStorageClasses")
    assert [(e["type"], e["involvedObject"]["kind"]) for e in fallback] == [
        ("Warning", "PersistentVolumeClaim")
    ]
    assert (
        CLONE_FALLBACK_REASON
        not in cdi_lab.get("", "persistentvolumeclaims", "same")["metadata"]["annotations"]
    )
    # The Event follows the status write, as in CDI: wait for it rather than read it at once.
    cdi_lab.wait(CDI, "datavolumes", "other", lambda d: reasons(cdi_lab, "other")[-1:] == ["CloneSucceeded"])
    assert disk_of(cdi_lab, "other").read_bytes() == disk_of(cdi_lab, "src").read_bytes()
    small = cdi_lab.wait(
        CDI, "datavolumes", "small", lambda d: "CloneValidationFailed" in reasons(cdi_lab, "small")
    )
    assert small["status"]["phase"] == "Pending"
    assert "smaller than the source" in cond(small, "Running")["message"]
    assert not cdi_lab.exists("", "persistentvolumeclaims", "small")
    orphan = cdi_lab.get(CDI, "datavolumes", "orphan")
    assert (
        orphan["status"]["phase"] == "Pending" and cond(orphan, "Running")["reason"] == "CloneWithoutSource"
    )

    cdi_lab.create(
        SNAP,
        "volumesnapshots",
        {"metadata": {"name": "src-snap"}, "spec": {"source": {"persistentVolumeClaimName": "src"}}},
    )
    cdi_lab.wait(SNAP, "volumesnapshots", "src-snap", lambda s: (s.get("status") or {}).get("readyToUse"))
    create_dv(
        cdi_lab, dv_body("restored", {"snapshot": {"namespace": cdi_lab.namespace, "name": "src-snap"}})
    )
    create_dv(
        cdi_lab,
        dv_body("as-block", {"snapshot": {"namespace": cdi_lab.namespace, "name": "src-snap"}}, mode="Block"),
    )
    restored = wait_dv(cdi_lab, "restored", "Succeeded")
    assert restored["metadata"]["annotations"][CLONE_TYPE] == "snapshot"
    assert_same_disk(disk_of(cdi_lab, "restored"), images["raw"], 8 * MIB)
    block = wait_dv(cdi_lab, "as-block", "Succeeded")
    assert block["metadata"]["annotations"][CLONE_TYPE] == "copy"
    notes = cdi_lab.get("", "persistentvolumeclaims", "as-block")["metadata"]["annotations"]
    assert notes[CLONE_FALLBACK_REASON] == FALLBACKS["IncompatibleVolumeModes"]
    assert cdi_lab.events("as-block", "IncompatibleVolumeModes")
    assert_same_disk(disk_of(cdi_lab, "as-block"), images["raw"], 8 * MIB)


def test_datasource_not_ready_rejects_the_datavolume(cdi_lab, images):
    ds = {
        "metadata": {"name": "debian"},
        "spec": {"source": {"snapshot": {"namespace": cdi_lab.namespace, "name": "golden"}}},
    }
    cdi_lab.create(CDI, "datasources", ds)
    not_ready = cdi_lab.wait(
        CDI,
        "datasources",
        "debian",
        lambda d: any(c["type"] == "Ready" for c in (d.get("status") or {}).get("conditions") or ()),
    )
    assert (cond(not_ready, "Ready")["status"], cond(not_ready, "Ready")["reason"]) == ("False", "NotFound")
    create_dv(
        cdi_lab,
        {
            **dv_body("vm-disk", {}),
            "spec": {
                "sourceRef": {"kind": "DataSource", "name": "debian"},
                "storage": {"resources": {"requests": {"storage": "8Mi"}}},
            },
        },
    )
    rejected = cdi_lab.wait(  # the first status write and the held one are two writes on a real server
        CDI,
        "datavolumes",
        "vm-disk",
        lambda d: any(
            c["type"] == "Running" and c.get("reason")
            for c in (d.get("status") or {}).get("conditions") or ()
        ),
    )
    assert rejected["status"]["phase"] == "Pending"
    running = cond(rejected, "Running")
    assert running["reason"] == "NotFound" and "is not ready" in running["message"]
    assert not cdi_lab.exists("", "persistentvolumeclaims", "vm-disk")  # fails closed: nothing made

    digest = publish_container_disk(cdi_lab.context, images["qcow2"])
    create_dv(cdi_lab, dv_body("base", {"registry": {"url": f"docker://example.org/os@{digest}"}}))
    wait_dv(cdi_lab, "base", "Succeeded")
    cdi_lab.create(
        SNAP,
        "volumesnapshots",
        {"metadata": {"name": "golden"}, "spec": {"source": {"persistentVolumeClaimName": "base"}}},
    )
    ready = cdi_lab.wait(CDI, "datasources", "debian", lambda d: cond(d, "Ready")["status"] == "True")
    assert ready["status"]["source"]["snapshot"]["name"] == "golden"
    wait_dv(cdi_lab, "vm-disk", "Succeeded")
    assert_same_disk(disk_of(cdi_lab, "vm-disk"), images["raw"], 8 * MIB)


# ------------------------------------------------------------------------------- faults


def test_faults_and_deletion_cancel(cdi_lab, bucket, monkeypatch):
    monkeypatch.setenv(RATE_ENV, str(MIB))
    cdi_lab.faults.update(
        {
            "objects": {
                f"DataVolume/{cdi_lab.namespace}/stuck": "stuck",
                f"DataVolume/{cdi_lab.namespace}/broken": "fail",
            }
        }
    )
    create_dv(cdi_lab, dv_body("stuck", {"blank": {}}))
    create_dv(cdi_lab, dv_body("broken", {"blank": {}}))
    create_dv(cdi_lab, dv_body("slow", {"http": {"url": bucket["qcow2"]}}))
    broken = wait_dv(cdi_lab, "broken", "Failed")
    assert "injected failure" in cond(broken, "Running")["message"]
    wait_dv(cdi_lab, "slow", "ImportInProgress")
    assert not (cdi_lab.get(CDI, "datavolumes", "stuck").get("status") or {}).get("phase")
    controller = next(c for c in cdi_lab.controllers if isinstance(c, cdi.DataVolumeController))
    assert controller.transfers() == [(cdi_lab.namespace, "slow")]
    cdi_lab.delete(CDI, "datavolumes", "slow")
    until(lambda: not controller.transfers(), 15, "the import to stop")
    cdi_lab.wait_gone("", "persistentvolumeclaims", "slow")
