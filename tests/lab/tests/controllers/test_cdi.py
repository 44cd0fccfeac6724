"""CDI in the lab: DataVolume imports over real HTTP from the loopback S3 server, the image store,
clones, DataSources; qcow2 files are made and converted with the real qemu-img."""

from __future__ import annotations

import base64
import hashlib
import os
import pathlib
import re
import subprocess
import uuid

import pytest

from tests.lab.controllers import ControllerManager, LabContext, cdi, storage
from tests.lab.controllers.cdi import (
    CLONE_TYPE,
    IMMEDIATE_BINDING,
    IMPORT_RETRIES,
    RATE_ENV,
    publish_container_disk,
)
from tests.lab.controllers.storage import volume_path
from tests.lab.faults import Faults
from tests.lab.s3 import S3Server
from tests.lab.store import Store

from .conftest import SNAP, MiniLab, install_classes, until

CDI = "cdi.kubevirt.io"
MIB = 1024 * 1024
DATA_MIB = 3


# ------------------------------------------------------------------------------ fixtures


class CdiLab(MiniLab):
    def rt(self, group: str, plural: str, version: str = "v1"):
        return super().rt(group, plural, "v1beta1" if group == CDI else version)


@pytest.fixture(scope="module")
def s3():
    server = S3Server()
    endpoint = server.start()
    try:
        yield endpoint
    finally:
        server.stop()


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
    """Objects in a public-read bucket and in a private one; returns their URLs."""
    client = s3.client()
    client.create_bucket(Bucket="os-images")
    client.create_bucket(Bucket="private-images")
    for key, path in (
        ("debian/12/disk.qcow2", images["qcow2"]),
        ("debian/12/disk-c.qcow2", images["compressed"]),
    ):
        client.upload_file(str(path), "os-images", key, ExtraArgs={"ACL": "public-read"})
    client.upload_file(str(images["qcow2"]), "private-images", "windows/11/golden.qcow2")
    base = s3.endpoint_url
    return {
        "qcow2": f"{base}/os-images/debian/12/disk.qcow2",
        "compressed": f"{base}/os-images/debian/12/disk-c.qcow2",
        "missing": f"{base}/os-images/debian/13/none.qcow2",
        "private": f"{base}/private-images/windows/11/golden.qcow2",
    }


@pytest.fixture
def lab(tmp_path, s3):
    """An in-process lab with the storage and CDI controllers and the loopback S3 endpoint."""
    store = Store()
    install_classes(store)
    namespace = "t-" + uuid.uuid4().hex[:8]
    store.create(store.resource("", "v1", "namespaces"), {"metadata": {"name": namespace}})
    faults = Faults()
    context = LabContext(store=store, state_dir=tmp_path, faults=faults, s3_endpoint=s3.endpoint_url)
    manager = ControllerManager(context, [*storage.CONTROLLERS, *cdi.CONTROLLERS])
    manager.start()
    try:
        yield CdiLab(store, context, faults, namespace, manager.controllers)
    finally:
        manager.stop()


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


def create_dv(lab: MiniLab, body: dict) -> dict:
    return lab.create(CDI, "datavolumes", body)


def wait_dv(lab: MiniLab, name: str, *phases: str, timeout: float = 15) -> dict:
    return lab.wait(CDI, "datavolumes", name, phase_is(*phases), timeout)


def disk_of(lab: MiniLab, claim: str) -> pathlib.Path:
    path = volume_path(lab.context, lab.get("", "persistentvolumeclaims", claim))
    return path / "disk.img" if path.is_dir() else path


def assert_same_disk(disk: pathlib.Path, raw: pathlib.Path, size: int) -> None:
    assert disk.stat().st_size == size
    data = raw.read_bytes()
    with open(disk, "rb") as handle:
        assert handle.read(len(data)) == data
        assert handle.read(MIB).strip(b"\0") == b""
    assert disk.stat().st_blocks * 512 < size  # still sparse


def reasons(lab: MiniLab, name: str) -> list[str]:
    return [e["reason"] for e in lab.events(name)]


# --------------------------------------------------------------------------------- http


def test_http_import_reports_phases_progress_and_converts_qcow2(lab, bucket, images, monkeypatch):
    monkeypatch.setenv(RATE_ENV, str(4 * MIB))  # slow enough to watch the progress move
    sub = lab.store.subscribe({(CDI, "datavolumes")})
    checksum = f"sha256:{sha256(images['qcow2'])}"
    create_dv(lab, dv_body("debian", {"http": {"url": bucket["qcow2"], "checksum": checksum}}))
    dv = wait_dv(lab, "debian", "Succeeded")
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
    pvc = lab.get("", "persistentvolumeclaims", "debian")
    owner = pvc["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("DataVolume", dv["metadata"]["uid"], True)
    assert (pvc["spec"]["storageClassName"], pvc["spec"]["volumeMode"]) == ("lab-fs", "Filesystem")
    assert_same_disk(disk_of(lab, "debian"), images["raw"], 8 * MIB)
    got = reasons(lab, "debian")
    for reason in ("ImportScheduled", "ImportInProgress", "ImportSucceeded"):
        assert reason in got
    assert got.index("ImportScheduled") < got.index("ImportSucceeded")


def test_checksum_mismatch_fails_the_import_at_once(lab, bucket, images):
    wrong = "sha256:" + "0" * 64
    create_dv(lab, dv_body("bad-sum", {"http": {"url": bucket["qcow2"], "checksum": wrong}}))
    dv = wait_dv(lab, "bad-sum", "Failed")
    running = cond(dv, "Running")
    assert (running["status"], running["reason"]) == ("False", "Error")
    assert "checksum mismatch" in running["message"] and sha256(images["qcow2"]) in running["message"]
    assert dv["status"]["restartCount"] == 0
    assert cond(dv, "Ready")["status"] == "False"
    assert {"Error", "ImportFailed"} <= set(reasons(lab, "bad-sum"))
    assert not disk_of(lab, "bad-sum").exists()


def test_private_bucket_needs_the_secret_and_failures_restart_until_failed(lab, bucket, images, s3):
    create_dv(lab, dv_body("anon", {"http": {"url": bucket["private"]}}))
    secret = {
        "metadata": {"name": "bucket-creds"},
        "type": "Opaque",
        "data": {
            "accessKeyId": base64.b64encode(s3.access_key.encode()).decode(),
            "secretKey": base64.b64encode(s3.secret_key.encode()).decode(),
        },
    }
    lab.create("", "secrets", secret)
    md5 = "md5:" + hashlib.md5(images["qcow2"].read_bytes()).hexdigest()
    create_dv(
        lab,
        dv_body("signed", {"http": {"url": bucket["private"], "secretRef": "bucket-creds", "checksum": md5}}),
    )
    signed = wait_dv(lab, "signed", "Succeeded")
    assert signed["status"]["restartCount"] == 0
    assert_same_disk(disk_of(lab, "signed"), images["raw"], 8 * MIB)
    anon = wait_dv(lab, "anon", "Failed")
    assert anon["status"]["restartCount"] == IMPORT_RETRIES
    running = cond(anon, "Running")
    assert running["reason"] == "Error" and "got 403" in running["message"]
    assert reasons(lab, "anon").count("Error") >= 1


def test_compressed_qcow2_into_a_block_volume_with_immediate_binding(lab, bucket, images):
    notes = {"annotations": {IMMEDIATE_BINDING: "true"}}
    url = bucket["compressed"]
    create_dv(
        lab, dv_body("blk", {"http": {"url": url}}, size="6Mi", mode="Block", sc="lab-wffc", metadata=notes)
    )
    create_dv(lab, dv_body("wffc", {"http": {"url": url}}, size="6Mi", sc="lab-wffc"))
    create_dv(lab, dv_body("waits", {"blank": {}}, size="4Mi"))
    wait_dv(lab, "blk", "Succeeded")
    disk = disk_of(lab, "blk")
    assert disk.is_file() and disk.suffix == ".img"
    assert (
        lab.get("", "persistentvolumeclaims", "blk")["metadata"]["annotations"][IMMEDIATE_BINDING] == "true"
    )
    assert_same_disk(disk, images["raw"], 6 * MIB)
    wffc = wait_dv(lab, "wffc", "WaitForFirstConsumer")
    assert cond(wffc, "Bound")["reason"] == "Pending"
    assert lab.get("", "persistentvolumeclaims", "wffc")["status"]["phase"] == "Pending"
    blank = wait_dv(lab, "waits", "Succeeded")
    assert blank["status"]["progress"] == "100.0%"
    empty = disk_of(lab, "waits")
    assert empty.stat().st_size == 4 * MIB and empty.stat().st_blocks == 0


def test_missing_object_and_too_small_volume(lab, bucket):
    create_dv(lab, dv_body("gone", {"http": {"url": bucket["missing"]}}))
    create_dv(lab, dv_body("tiny", {"http": {"url": bucket["qcow2"]}}, size="1Mi"))
    tiny = wait_dv(lab, "tiny", "Failed")
    assert "larger than the reported available storage" in cond(tiny, "Running")["message"]
    gone = wait_dv(lab, "gone", "Failed")
    assert gone["status"]["restartCount"] == IMPORT_RETRIES
    assert "got 404" in cond(gone, "Running")["message"]


# ----------------------------------------------------------------------------- registry


def test_registry_import_is_digest_pinned(lab, images):
    digest = publish_container_disk(lab.context, images["qcow2"])
    assert digest == f"sha256:{sha256(images['qcow2'])}"
    assert publish_container_disk(lab.context.state_dir, images["qcow2"]) == digest  # idempotent
    create_dv(lab, dv_body("cd", {"registry": {"url": f"docker://quay.io/containerdisks/debian@{digest}"}}))
    unknown = "sha256:" + "ab" * 32
    create_dv(
        lab, dv_body("nope", {"registry": {"url": f"docker://quay.io/containerdisks/debian@{unknown}"}})
    )
    create_dv(lab, dv_body("tag", {"registry": {"url": "docker://quay.io/containerdisks/debian:12"}}))
    wait_dv(lab, "cd", "Succeeded")
    assert_same_disk(disk_of(lab, "cd"), images["raw"], 8 * MIB)
    tag = wait_dv(lab, "tag", "Failed")
    assert tag["status"]["restartCount"] == 0 and "digest-pinned" in cond(tag, "Running")["message"]
    nope = wait_dv(lab, "nope", "Failed")
    assert nope["status"]["restartCount"] == IMPORT_RETRIES
    assert "manifest unknown" in cond(nope, "Running")["message"]


# ------------------------------------------------------------------------------- clones


def test_pvc_and_snapshot_clones(lab, images):
    digest = publish_container_disk(lab.context, images["qcow2"])
    create_dv(lab, dv_body("src", {"registry": {"url": f"docker://example.org/os@{digest}"}}))
    # a clone of a claim still being imported waits for the import
    create_dv(lab, dv_body("same", {"pvc": {"namespace": lab.namespace, "name": "src"}}))
    immediate = {"annotations": {IMMEDIATE_BINDING: "true"}}
    source = {"pvc": {"namespace": lab.namespace, "name": "src"}}
    create_dv(lab, dv_body("other", source, sc="lab-wffc", metadata=immediate))
    create_dv(lab, dv_body("small", {"pvc": {"namespace": lab.namespace, "name": "src"}}, size="4Mi"))
    create_dv(lab, dv_body("orphan", {"pvc": {"namespace": lab.namespace, "name": "nothing"}}))
    same = wait_dv(lab, "same", "Succeeded")
    assert same["metadata"]["annotations"][CLONE_TYPE] == "snapshot"
    assert_same_disk(disk_of(lab, "same"), images["raw"], 8 * MIB)
    copied = wait_dv(lab, "other", "Succeeded")
    assert copied["metadata"]["annotations"][CLONE_TYPE] == "copy"
    # The Event follows the status write, as in CDI: wait for it rather than read it at once.
    lab.wait(CDI, "datavolumes", "other", lambda d: reasons(lab, "other")[-1:] == ["CloneSucceeded"])
    assert disk_of(lab, "other").read_bytes() == disk_of(lab, "src").read_bytes()
    small = lab.wait(CDI, "datavolumes", "small", lambda d: "CloneValidationFailed" in reasons(lab, "small"))
    assert small["status"]["phase"] == "Pending"
    assert "smaller than the source" in cond(small, "Running")["message"]
    assert not lab.exists("", "persistentvolumeclaims", "small")
    orphan = lab.get(CDI, "datavolumes", "orphan")
    assert (
        orphan["status"]["phase"] == "Pending" and cond(orphan, "Running")["reason"] == "CloneWithoutSource"
    )

    lab.create(
        SNAP,
        "volumesnapshots",
        {"metadata": {"name": "src-snap"}, "spec": {"source": {"persistentVolumeClaimName": "src"}}},
    )
    lab.wait(SNAP, "volumesnapshots", "src-snap", lambda s: (s.get("status") or {}).get("readyToUse"))
    create_dv(lab, dv_body("restored", {"snapshot": {"namespace": lab.namespace, "name": "src-snap"}}))
    create_dv(
        lab, dv_body("as-block", {"snapshot": {"namespace": lab.namespace, "name": "src-snap"}}, mode="Block")
    )
    restored = wait_dv(lab, "restored", "Succeeded")
    assert restored["metadata"]["annotations"][CLONE_TYPE] == "snapshot"
    assert_same_disk(disk_of(lab, "restored"), images["raw"], 8 * MIB)
    block = wait_dv(lab, "as-block", "Succeeded")
    assert block["metadata"]["annotations"][CLONE_TYPE] == "copy"
    assert_same_disk(disk_of(lab, "as-block"), images["raw"], 8 * MIB)


def test_datasource_not_ready_rejects_the_datavolume(lab, images):
    ds = {
        "metadata": {"name": "debian"},
        "spec": {"source": {"snapshot": {"namespace": lab.namespace, "name": "golden"}}},
    }
    lab.create(CDI, "datasources", ds)
    not_ready = lab.wait(
        CDI,
        "datasources",
        "debian",
        lambda d: any(c["type"] == "Ready" for c in (d.get("status") or {}).get("conditions") or ()),
    )
    assert (cond(not_ready, "Ready")["status"], cond(not_ready, "Ready")["reason"]) == ("False", "NotFound")
    create_dv(
        lab,
        {
            **dv_body("vm-disk", {}),
            "spec": {
                "sourceRef": {"kind": "DataSource", "name": "debian"},
                "storage": {"resources": {"requests": {"storage": "8Mi"}}},
            },
        },
    )
    rejected = lab.wait(CDI, "datavolumes", "vm-disk", lambda d: (d.get("status") or {}).get("conditions"))
    assert rejected["status"]["phase"] == "Pending"
    running = cond(rejected, "Running")
    assert running["reason"] == "NotFound" and "is not ready" in running["message"]
    assert not lab.exists("", "persistentvolumeclaims", "vm-disk")  # fails closed: nothing made

    digest = publish_container_disk(lab.context, images["qcow2"])
    create_dv(lab, dv_body("base", {"registry": {"url": f"docker://example.org/os@{digest}"}}))
    wait_dv(lab, "base", "Succeeded")
    lab.create(
        SNAP,
        "volumesnapshots",
        {"metadata": {"name": "golden"}, "spec": {"source": {"persistentVolumeClaimName": "base"}}},
    )
    ready = lab.wait(CDI, "datasources", "debian", lambda d: cond(d, "Ready")["status"] == "True")
    assert ready["status"]["source"]["snapshot"]["name"] == "golden"
    wait_dv(lab, "vm-disk", "Succeeded")
    assert_same_disk(disk_of(lab, "vm-disk"), images["raw"], 8 * MIB)


# ------------------------------------------------------------------------------- faults


def test_faults_and_deletion_cancel(lab, bucket, monkeypatch):
    monkeypatch.setenv(RATE_ENV, str(MIB))
    lab.faults.update(
        {
            "objects": {
                f"DataVolume/{lab.namespace}/stuck": "stuck",
                f"DataVolume/{lab.namespace}/broken": "fail",
            }
        }
    )
    create_dv(lab, dv_body("stuck", {"blank": {}}))
    create_dv(lab, dv_body("broken", {"blank": {}}))
    create_dv(lab, dv_body("slow", {"http": {"url": bucket["qcow2"]}}))
    broken = wait_dv(lab, "broken", "Failed")
    assert "injected failure" in cond(broken, "Running")["message"]
    wait_dv(lab, "slow", "ImportInProgress")
    assert not (lab.get(CDI, "datavolumes", "stuck").get("status") or {}).get("phase")
    controller = next(c for c in lab.controllers if isinstance(c, cdi.DataVolumeController))
    assert controller.transfers() == [(lab.namespace, "slow")]
    lab.delete(CDI, "datavolumes", "slow")
    until(lambda: not controller.transfers(), 5, "the import to stop")
    lab.wait_gone("", "persistentvolumeclaims", "slow")
