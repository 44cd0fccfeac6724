"""Storage controllers of the lab on real files: binding, snapshots, restores, clones, reclaim."""

from __future__ import annotations

import os
import pathlib
import time

import pytest

from tests.lab.controllers.storage import (
    ensure_bound,
    format_quantity,
    parse_quantity,
    snapshot_data,
    volume_path,
)

from .conftest import PROVISIONER, SNAP, until

MIB = 1024 * 1024


def pvc_body(name: str, size: str = "8Mi", mode: str = "Filesystem", sc: str | None = None, **spec) -> dict:
    body = {
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "volumeMode": mode,
            "resources": {"requests": {"storage": size}},
            **spec,
        },
    }
    if sc is not None:
        body["spec"]["storageClassName"] = sc
    return body


def bound(obj: dict) -> bool:
    return (obj.get("status") or {}).get("phase") == "Bound"


def ready(obj: dict) -> bool:
    return bool((obj.get("status") or {}).get("readyToUse"))


def snapshot_body(name: str, claim: str, cls: str | None = None) -> dict:
    body = {"metadata": {"name": name}, "spec": {"source": {"persistentVolumeClaimName": claim}}}
    if cls:
        body["spec"]["volumeSnapshotClassName"] = cls
    return body


def write_pattern(path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(data)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("1Gi", 2**30),
        ("512Mi", 512 * MIB),
        ("10Ki", 10240),
        ("1G", 10**9),
        ("2k", 2000),
        ("1.5Gi", 3 * 2**29),
    ],
)
def test_parse_quantity(text, size):
    assert parse_quantity(text) == size


def test_parse_quantity_plain_and_invalid():
    assert parse_quantity("4096") == 4096
    assert parse_quantity(7) == 7
    assert parse_quantity("1e3") == 1000
    with pytest.raises(ValueError, match="quantities must match"):
        parse_quantity("12 GB")


def test_format_quantity():
    assert format_quantity(2**30) == "1Gi"
    assert format_quantity(3 * 2**29) == "1536Mi"
    assert format_quantity(10**9) == "1G"
    assert format_quantity(1000001) == "1000001"


def test_block_claim_binds_to_a_sparse_file_of_the_requested_size(mini):
    mini.create("", "persistentvolumeclaims", pvc_body("disk", "64Mi", "Block", "lab-fs"))
    pvc = mini.wait("", "persistentvolumeclaims", "disk", bound)
    uid = pvc["metadata"]["uid"]
    assert pvc["spec"]["volumeName"] == f"pvc-{uid}"
    assert pvc["status"]["capacity"] == {"storage": "64Mi"}
    assert pvc["status"]["accessModes"] == ["ReadWriteOnce"]
    assert pvc["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] == "yes"
    assert pvc["metadata"]["annotations"]["volume.kubernetes.io/storage-provisioner"] == PROVISIONER

    pv = mini.wait("", "persistentvolumes", f"pvc-{uid}", bound)
    spec = pv["spec"]
    assert spec["capacity"] == {"storage": "64Mi"}
    assert spec["volumeMode"] == "Block"
    assert spec["persistentVolumeReclaimPolicy"] == "Delete"
    assert spec["storageClassName"] == "lab-fs"
    assert spec["claimRef"]["name"] == "disk" and spec["claimRef"]["uid"] == uid
    path = volume_path(mini.context, pvc)
    assert path == mini.context.state_dir / "volumes" / f"pvc-{uid}.img"
    # A CSI volume of the class's driver: nothing on it says where the bytes are (the lab's volume store).
    assert spec["csi"] == {"driver": PROVISIONER, "volumeHandle": f"lab-{uid}"} and "hostPath" not in spec
    stat = path.stat()
    assert stat.st_size == 64 * MIB
    assert stat.st_blocks == 0  # sparse: nothing allocated yet
    # The Event is written after the bind the waits above saw.
    until(
        lambda: [e["reason"] for e in mini.events("disk")][-2:] == ["Provisioning", "ProvisioningSucceeded"],
        what="Provisioning then ProvisioningSucceeded",
    )


def test_filesystem_claim_binds_to_a_directory(mini):
    mini.create("", "persistentvolumeclaims", pvc_body("data", "1Gi", sc="lab-fs"))
    pvc = mini.wait("", "persistentvolumeclaims", "data", bound)
    path = volume_path(mini.context, pvc)
    assert path.is_dir()
    assert path.name == pvc["spec"]["volumeName"]


def test_claim_without_class_gets_the_default_class(mini):
    mini.create("", "persistentvolumeclaims", pvc_body("plain"))
    pvc = mini.wait("", "persistentvolumeclaims", "plain", bound)
    assert pvc["spec"]["storageClassName"] == "lab-fs"


def test_default_class_is_adopted_when_it_appears_later(mini):
    sc_rt = mini.rt("storage.k8s.io", "storageclasses")
    lab_fs = mini.store.get(sc_rt, None, "lab-fs")
    lab_fs["metadata"]["annotations"] = {}
    mini.store.update(sc_rt, lab_fs)
    mini.create("", "persistentvolumeclaims", pvc_body("late"))
    pvc = mini.wait("", "persistentvolumeclaims", "late", lambda o: mini.events("late", "FailedBinding"))
    assert pvc["status"]["phase"] == "Pending"
    assert "storageClassName" not in pvc["spec"]
    lab_fs = mini.store.get(sc_rt, None, "lab-fs")
    lab_fs["metadata"]["annotations"] = {"storageclass.kubernetes.io/is-default-class": "true"}
    mini.store.update(sc_rt, lab_fs)
    pvc = mini.wait("", "persistentvolumeclaims", "late", bound)
    assert pvc["spec"]["storageClassName"] == "lab-fs"


def test_unknown_class_stays_pending_with_an_event(mini):
    mini.create("", "persistentvolumeclaims", pvc_body("lost", sc="no-such-class"))
    mini.wait("", "persistentvolumeclaims", "lost", lambda o: mini.events("lost", "ProvisioningFailed"))
    event = mini.events("lost", "ProvisioningFailed")[0]
    assert event["type"] == "Warning"
    assert 'storageclass.storage.k8s.io "no-such-class" not found' in event["message"]
    assert event["involvedObject"]["kind"] == "PersistentVolumeClaim"
    assert mini.get("", "persistentvolumeclaims", "lost")["status"]["phase"] == "Pending"


def test_empty_class_binds_only_to_a_matching_static_volume(mini):
    mini.create("", "persistentvolumeclaims", pvc_body("static", "1Gi", sc=""))
    mini.wait("", "persistentvolumeclaims", "static", lambda o: mini.events("static", "FailedBinding"))
    assert mini.get("", "persistentvolumeclaims", "static")["status"]["phase"] == "Pending"
    target = mini.context.state_dir / "volumes" / "manual"
    target.mkdir(parents=True)
    for name, size in (("too-small", "512Mi"), ("manual", "2Gi")):
        mini.create(
            "",
            "persistentvolumes",
            {
                "metadata": {"name": name},
                "spec": {
                    "capacity": {"storage": size},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "",
                    "hostPath": {"path": str(target)},
                },
            },
        )
    pvc = mini.wait("", "persistentvolumeclaims", "static", bound)
    assert pvc["spec"]["volumeName"] == "manual"
    assert pvc["status"]["capacity"] == {"storage": "2Gi"}
    assert volume_path(mini.context, pvc) == target
    assert mini.get("", "persistentvolumes", "too-small")["status"]["phase"] == "Available"


def test_wait_for_first_consumer_holds_until_a_consumer(mini):
    mini.create("", "persistentvolumeclaims", pvc_body("later", sc="lab-wffc"))
    pvc = mini.wait(
        "", "persistentvolumeclaims", "later", lambda o: mini.events("later", "WaitForFirstConsumer")
    )
    event = mini.events("later", "WaitForFirstConsumer")[0]
    assert event["message"] == "waiting for first consumer to be created before binding"
    assert event["type"] == "Normal"
    assert pvc["status"]["phase"] == "Pending" and "volumeName" not in pvc["spec"]
    assert ensure_bound(mini.context, mini.namespace, "later", consumer=False)["status"]["phase"] == "Pending"
    pvc = ensure_bound(mini.context, mini.namespace, "later")
    assert pvc["status"]["phase"] == "Bound"
    assert volume_path(mini.context, pvc).is_dir()


def test_wait_for_first_consumer_binds_for_a_pod(mini):
    mini.create("", "persistentvolumeclaims", pvc_body("podvol", sc="lab-wffc"))
    mini.wait("", "persistentvolumeclaims", "podvol", lambda o: mini.events("podvol", "WaitForFirstConsumer"))
    pod = {
        "metadata": {"name": "user"},
        "spec": {
            "containers": [{"name": "c", "image": "busybox", "command": ["true"]}],
            "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "podvol"}}],
        },
    }
    mini.create("", "pods", pod)
    mini.wait("", "persistentvolumeclaims", "podvol", bound)


def test_deleting_the_claim_deletes_volume_and_data(mini):
    mini.create("", "persistentvolumeclaims", pvc_body("gone", "16Mi", "Block"))
    pvc = mini.wait("", "persistentvolumeclaims", "gone", bound)
    path = volume_path(mini.context, pvc)
    assert path.exists()
    mini.delete("", "persistentvolumeclaims", "gone")
    mini.wait_gone("", "persistentvolumes", pvc["spec"]["volumeName"])
    assert not path.exists()


def test_retained_volume_is_released_not_deleted(mini):
    sc_rt = mini.rt("storage.k8s.io", "storageclasses")
    body = {"metadata": {"name": "keep"}, "provisioner": PROVISIONER, "reclaimPolicy": "Retain"}
    mini.store.create(sc_rt, body)
    mini.create("", "persistentvolumeclaims", pvc_body("kept", sc="keep"))
    pvc = mini.wait("", "persistentvolumeclaims", "kept", bound)
    mini.delete("", "persistentvolumeclaims", "kept")
    pv = mini.wait(
        "", "persistentvolumes", pvc["spec"]["volumeName"], lambda o: o["status"]["phase"] == "Released"
    )
    assert volume_path(mini.context, pv).is_dir()


def make_block_with_data(mini, name: str, size: str = "32Mi") -> tuple[dict, bytes]:
    mini.create("", "persistentvolumeclaims", pvc_body(name, size, "Block"))
    pvc = mini.wait("", "persistentvolumeclaims", name, bound)
    data = os.urandom(4096) * 4
    write_pattern(volume_path(mini.context, pvc), 5 * MIB, data)
    return pvc, data


def test_snapshot_copies_the_data_and_binds_a_content(mini):
    pvc, data = make_block_with_data(mini, "golden")
    mini.create(SNAP, "volumesnapshots", snapshot_body("golden-snap", "golden", "lab-snap"))
    vs = mini.wait(SNAP, "volumesnapshots", "golden-snap", ready)
    uid = vs["metadata"]["uid"]
    assert vs["status"]["boundVolumeSnapshotContentName"] == f"snapcontent-{uid}"
    assert vs["status"]["restoreSize"] == "32Mi"
    assert vs["status"]["creationTime"].endswith("Z")
    content = mini.get(SNAP, "volumesnapshotcontents", f"snapcontent-{uid}")
    assert content["spec"]["driver"] == PROVISIONER
    assert content["spec"]["deletionPolicy"] == "Delete"
    pv = mini.get("", "persistentvolumes", pvc["spec"]["volumeName"])
    assert content["spec"]["source"]["volumeHandle"] == pv["spec"]["csi"]["volumeHandle"]
    assert content["spec"]["volumeSnapshotClassName"] == "lab-snap"
    ref = content["spec"]["volumeSnapshotRef"]
    assert (ref["name"], ref["namespace"], ref["uid"]) == ("golden-snap", mini.namespace, uid)
    status = content["status"]
    assert status["readyToUse"] is True and status["restoreSize"] == 32 * MIB
    assert isinstance(status["creationTime"], int)
    path, info = snapshot_data(mini.context, status["snapshotHandle"])
    assert info["volumeMode"] == "Block"
    assert path.stat().st_size == 32 * MIB
    assert path.stat().st_blocks * 512 < 4 * MIB  # the copy stayed sparse
    with open(path, "rb") as handle:
        handle.seek(5 * MIB)
        assert handle.read(len(data)) == data
    # the snapshot is a copy: later writes to the volume do not reach it
    write_pattern(volume_path(mini.context, pvc), 5 * MIB, b"\0" * len(data))
    with open(path, "rb") as handle:
        handle.seek(5 * MIB)
        assert handle.read(len(data)) == data
    assert [e["reason"] for e in mini.events("golden-snap")] == [
        "CreatingSnapshot",
        "SnapshotCreated",
        "SnapshotReady",
    ]


def test_snapshot_without_class_uses_the_default_class(mini):
    make_block_with_data(mini, "src")
    mini.create(SNAP, "volumesnapshots", snapshot_body("auto", "src"))
    vs = mini.wait(SNAP, "volumesnapshots", "auto", ready)
    assert vs["spec"]["volumeSnapshotClassName"] == "lab-snap"


def test_restore_from_snapshot_is_byte_for_byte_equal(mini):
    pvc, _ = make_block_with_data(mini, "origin")
    mini.create(SNAP, "volumesnapshots", snapshot_body("snap", "origin"))
    source = {"apiGroup": SNAP, "kind": "VolumeSnapshot", "name": "snap"}
    mini.create("", "persistentvolumeclaims", pvc_body("restored", "32Mi", "Block", dataSource=source))
    restored = mini.wait("", "persistentvolumeclaims", "restored", bound, timeout=20)
    original = volume_path(mini.context, pvc).read_bytes()
    assert volume_path(mini.context, restored).read_bytes() == original
    assert restored["status"]["capacity"] == {"storage": "32Mi"}


def test_restore_waits_for_the_snapshot(mini):
    source = {"apiGroup": SNAP, "kind": "VolumeSnapshot", "name": "not-yet"}
    mini.create("", "persistentvolumeclaims", pvc_body("early", "32Mi", "Block", dataSourceRef=source))
    mini.wait("", "persistentvolumeclaims", "early", lambda o: mini.events("early", "ProvisioningFailed"))
    assert mini.get("", "persistentvolumeclaims", "early")["status"]["phase"] == "Pending"
    make_block_with_data(mini, "base")
    mini.create(SNAP, "volumesnapshots", snapshot_body("not-yet", "base"))
    mini.wait("", "persistentvolumeclaims", "early", bound, timeout=20)


def test_restore_smaller_than_the_snapshot_is_refused(mini):
    make_block_with_data(mini, "big", "32Mi")
    mini.create(SNAP, "volumesnapshots", snapshot_body("big-snap", "big"))
    mini.wait(SNAP, "volumesnapshots", "big-snap", ready)
    source = {"apiGroup": SNAP, "kind": "VolumeSnapshot", "name": "big-snap"}
    mini.create("", "persistentvolumeclaims", pvc_body("small", "16Mi", "Block", dataSource=source))
    mini.wait("", "persistentvolumeclaims", "small", lambda o: mini.events("small", "ProvisioningFailed"))
    messages = [e["message"] for e in mini.events("small", "ProvisioningFailed")]
    assert (
        f"requested volume size {16 * MIB} is less than the size {32 * MIB} for the source snapshot big-snap"
        in messages
    )
    assert mini.get("", "persistentvolumeclaims", "small")["status"]["phase"] == "Pending"


def test_larger_restore_grows_the_block_file(mini):
    _, data = make_block_with_data(mini, "grow", "16Mi")
    mini.create(SNAP, "volumesnapshots", snapshot_body("grow-snap", "grow"))
    source = {"apiGroup": SNAP, "kind": "VolumeSnapshot", "name": "grow-snap"}
    mini.create("", "persistentvolumeclaims", pvc_body("grown", "64Mi", "Block", dataSource=source))
    pvc = mini.wait("", "persistentvolumeclaims", "grown", bound, timeout=20)
    path = volume_path(mini.context, pvc)
    assert path.stat().st_size == 64 * MIB
    with open(path, "rb") as handle:
        handle.seek(5 * MIB)
        assert handle.read(len(data)) == data


def test_filesystem_snapshot_restore_and_clone(mini):
    mini.create("", "persistentvolumeclaims", pvc_body("fs", "1Gi"))
    pvc = mini.wait("", "persistentvolumeclaims", "fs", bound)
    root = volume_path(mini.context, pvc)
    (root / "nested").mkdir()
    (root / "nested" / "file.txt").write_text("hello from the volume\n")
    with open(root / "disk.img", "wb") as handle:
        handle.truncate(8 * MIB)
        handle.seek(MIB)
        handle.write(b"payload")
    mini.create(SNAP, "volumesnapshots", snapshot_body("fs-snap", "fs"))
    source = {"apiGroup": SNAP, "kind": "VolumeSnapshot", "name": "fs-snap"}
    mini.create("", "persistentvolumeclaims", pvc_body("fs-restored", "1Gi", dataSource=source))
    clone_source = {"kind": "PersistentVolumeClaim", "name": "fs"}
    mini.create("", "persistentvolumeclaims", pvc_body("fs-clone", "1Gi", dataSource=clone_source))
    for name in ("fs-restored", "fs-clone"):
        copy = volume_path(mini.context, mini.wait("", "persistentvolumeclaims", name, bound, timeout=20))
        assert (copy / "nested" / "file.txt").read_text() == "hello from the volume\n"
        assert (copy / "disk.img").read_bytes() == (root / "disk.img").read_bytes()
        assert (copy / "disk.img").stat().st_blocks * 512 < 2 * MIB


def test_block_clone_of_a_claim(mini):
    pvc, _ = make_block_with_data(mini, "clone-src", "16Mi")
    source = {"kind": "PersistentVolumeClaim", "name": "clone-src"}
    mini.create("", "persistentvolumeclaims", pvc_body("clone", "16Mi", "Block", dataSource=source))
    clone = mini.wait("", "persistentvolumeclaims", "clone", bound)
    assert volume_path(mini.context, clone).read_bytes() == volume_path(mini.context, pvc).read_bytes()
    mini.create("", "persistentvolumeclaims", pvc_body("clone-fs", "16Mi", "Filesystem", dataSource=source))
    mini.wait(
        "", "persistentvolumeclaims", "clone-fs", lambda o: mini.events("clone-fs", "ProvisioningFailed")
    )
    message = mini.events("clone-fs", "ProvisioningFailed")[0]["message"]
    assert "must have the same volume mode for cloning" in message


def test_snapshot_of_a_missing_claim_reports_an_error(mini):
    mini.create(SNAP, "volumesnapshots", snapshot_body("orphan", "nobody"))
    vs = mini.wait(SNAP, "volumesnapshots", "orphan", lambda o: (o.get("status") or {}).get("error"))
    # The controller fails before it picks a class (the default is chosen by the volume's driver).
    assert not ready(vs) and "boundVolumeSnapshotContentName" not in vs["status"]
    assert 'persistentvolumeclaim \\"nobody\\" not found' in vs["status"]["error"]["message"]
    assert vs["status"]["error"]["time"].endswith("Z")
    assert mini.events("orphan", "SetDefaultSnapshotClassFailed")[0]["type"] == "Warning"


def test_snapshot_with_an_unknown_class_reports_an_error(mini):
    make_block_with_data(mini, "classless", "8Mi")
    mini.create(SNAP, "volumesnapshots", snapshot_body("bad-class", "classless", "nope"))
    vs = mini.wait(SNAP, "volumesnapshots", "bad-class", lambda o: (o.get("status") or {}).get("error"))
    assert 'volumesnapshotclass.snapshot.storage.k8s.io "nope" not found' in vs["status"]["error"]["message"]
    contents = mini.store.list(mini.rt(SNAP, "volumesnapshotcontents"))[0]  # cluster-wide: other tests' too
    refs = [
        (c["spec"]["volumeSnapshotRef"].get("namespace"), c["spec"]["volumeSnapshotRef"].get("name"))
        for c in contents
    ]
    assert (mini.namespace, "bad-class") not in refs


def test_stuck_snapshot_fault_leaves_the_content_uncut(mini):
    make_block_with_data(mini, "slow", "8Mi")
    mini.faults.set_object(f"VolumeSnapshot/{mini.namespace}/frozen", "stuck")
    mini.create(SNAP, "volumesnapshots", snapshot_body("frozen", "slow"))
    # The fault holds the driver side: the controller binds a content that is never cut.
    vs = mini.wait(SNAP, "volumesnapshots", "frozen", lambda o: "status" in o)
    with pytest.raises(AssertionError):
        mini.wait(SNAP, "volumesnapshots", "frozen", ready, timeout=1.5)
    content = mini.get(SNAP, "volumesnapshotcontents", vs["status"]["boundVolumeSnapshotContentName"])
    assert "snapshotHandle" not in (content.get("status") or {})
    mini.faults.set_object(f"VolumeSnapshot/{mini.namespace}/frozen", None)
    mini.wait(SNAP, "volumesnapshots", "frozen", ready)


def test_deleting_a_snapshot_deletes_content_and_data(mini):
    make_block_with_data(mini, "temp", "8Mi")
    mini.create(SNAP, "volumesnapshots", snapshot_body("temp-snap", "temp"))
    vs = mini.wait(SNAP, "volumesnapshots", "temp-snap", ready)
    content_name = vs["status"]["boundVolumeSnapshotContentName"]
    handle = mini.get(SNAP, "volumesnapshotcontents", content_name)["status"]["snapshotHandle"]
    assert snapshot_data(mini.context, handle) is not None
    mini.delete(SNAP, "volumesnapshots", "temp-snap")
    mini.wait_gone(SNAP, "volumesnapshotcontents", content_name)
    assert snapshot_data(mini.context, handle) is None


def test_retained_snapshot_can_be_adopted_as_pre_provisioned(mini):
    pvc, _ = make_block_with_data(mini, "keeper", "8Mi")
    mini.create(SNAP, "volumesnapshots", snapshot_body("first", "keeper", "lab-snap-retain"))
    vs = mini.wait(SNAP, "volumesnapshots", "first", ready)
    content_name = vs["status"]["boundVolumeSnapshotContentName"]
    handle = mini.get(SNAP, "volumesnapshotcontents", content_name)["status"]["snapshotHandle"]
    mini.delete(SNAP, "volumesnapshots", "first")
    mini.wait_gone(SNAP, "volumesnapshots", "first")
    assert mini.exists(SNAP, "volumesnapshotcontents", content_name)
    assert snapshot_data(mini.context, handle) is not None

    ref = {
        "apiVersion": f"{SNAP}/v1",
        "kind": "VolumeSnapshot",
        "name": "adopted",
        "namespace": mini.namespace,
    }
    content = {
        "metadata": {"name": "golden-content"},
        "spec": {
            "deletionPolicy": "Retain",
            "driver": PROVISIONER,
            "source": {"snapshotHandle": handle},
            "sourceVolumeMode": "Block",
            "volumeSnapshotRef": ref,
        },
    }
    mini.create(SNAP, "volumesnapshotcontents", content)
    adopted = {
        "metadata": {"name": "adopted"},
        "spec": {"source": {"volumeSnapshotContentName": "golden-content"}},
    }
    mini.create(SNAP, "volumesnapshots", adopted)
    vs = mini.wait(SNAP, "volumesnapshots", "adopted", ready)
    assert vs["status"]["boundVolumeSnapshotContentName"] == "golden-content"
    assert vs["status"]["restoreSize"] == "8Mi"
    bound_content = mini.get(SNAP, "volumesnapshotcontents", "golden-content")
    assert bound_content["spec"]["volumeSnapshotRef"]["uid"] == vs["metadata"]["uid"]
    assert bound_content["status"]["snapshotHandle"] == handle

    source = {"apiGroup": SNAP, "kind": "VolumeSnapshot", "name": "adopted"}
    mini.create("", "persistentvolumeclaims", pvc_body("from-adopted", "8Mi", "Block", dataSource=source))
    restored = mini.wait("", "persistentvolumeclaims", "from-adopted", bound)
    assert volume_path(mini.context, restored).read_bytes() == volume_path(mini.context, pvc).read_bytes()


def test_pre_provisioned_snapshot_checks_the_content_reference(mini):
    ref = {"kind": "VolumeSnapshot", "name": "someone-else", "namespace": mini.namespace}
    content = {
        "metadata": {"name": "taken"},
        "spec": {"deletionPolicy": "Retain", "driver": PROVISIONER, "source": {"snapshotHandle": "x"}},
    }
    content["spec"]["volumeSnapshotRef"] = ref
    mini.create(SNAP, "volumesnapshotcontents", content)
    mini.create(
        SNAP,
        "volumesnapshots",
        {"metadata": {"name": "thief"}, "spec": {"source": {"volumeSnapshotContentName": "taken"}}},
    )
    vs = mini.wait(SNAP, "volumesnapshots", "thief", lambda o: (o.get("status") or {}).get("error"))
    assert "bound to a different snapshot" in vs["status"]["error"]["message"]

    ref = {"kind": "VolumeSnapshot", "name": "dataless", "namespace": mini.namespace}
    content = {
        "metadata": {"name": "empty"},
        "spec": {"deletionPolicy": "Retain", "driver": PROVISIONER, "source": {"snapshotHandle": "missing"}},
    }
    content["spec"]["volumeSnapshotRef"] = ref
    mini.create(SNAP, "volumesnapshotcontents", content)
    mini.create(
        SNAP,
        "volumesnapshots",
        {"metadata": {"name": "dataless"}, "spec": {"source": {"volumeSnapshotContentName": "empty"}}},
    )
    vs = mini.wait(SNAP, "volumesnapshots", "dataless", lambda o: (o.get("status") or {}).get("error"))
    assert '"snapshot missing not found"' in vs["status"]["error"]["message"]
    assert not ready(vs)


# ------------------------------------------------------------------ through the API server


def poll(read, check, timeout: float = 20):
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        last = read()
        if check(last):
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out; last seen: {last}")


def stored_volume(lab, pv_name: str) -> pathlib.Path:
    """Where the lab keeps a CSI volume's bytes (its PersistentVolume does not say)."""
    pv = lab.store.get(lab.store.resource("", "v1", "persistentvolumes"), None, pv_name)
    return volume_path(lab.controller_manager.lab, pv)


@pytest.mark.lab_only
def test_snapshot_and_restore_through_the_api(lab, kube_client, kube_namespace):
    from kubernetes import client

    core, custom = client.CoreV1Api(kube_client), client.CustomObjectsApi(kube_client)
    ns = kube_namespace
    core.create_namespaced_persistent_volume_claim(ns, pvc_body("api-disk", "16Mi", "Block"))
    pvc = poll(
        lambda: core.read_namespaced_persistent_volume_claim("api-disk", ns),
        lambda p: p.status.phase == "Bound",
    )
    assert pvc.spec.storage_class_name == "lab-fs"
    pv = core.read_persistent_volume(pvc.spec.volume_name)
    assert pv.spec.capacity == {"storage": "16Mi"} and pv.spec.volume_mode == "Block"
    disk = stored_volume(lab, pvc.spec.volume_name)
    assert lab.state_dir in disk.parents and disk.stat().st_size == 16 * MIB
    write_pattern(disk, MIB, b"golden bytes" * 100)

    custom.create_namespaced_custom_object(
        SNAP,
        "v1",
        ns,
        "volumesnapshots",
        # Through the API a custom object names its kind, or the real API server refuses it (400).
        dict(
            snapshot_body("api-snap", "api-disk", "lab-snap"), apiVersion=f"{SNAP}/v1", kind="VolumeSnapshot"
        ),
    )

    def read_snap():
        return custom.get_namespaced_custom_object(SNAP, "v1", ns, "volumesnapshots", "api-snap")

    snap = poll(read_snap, ready)
    assert snap["status"]["restoreSize"] == "16Mi"
    content = custom.get_cluster_custom_object(
        SNAP, "v1", "volumesnapshotcontents", snap["status"]["boundVolumeSnapshotContentName"]
    )
    assert (
        content["status"]["readyToUse"] is True
        and content["spec"]["driver"] == pv.metadata.annotations["pv.kubernetes.io/provisioned-by"]
    )

    source = {"apiGroup": SNAP, "kind": "VolumeSnapshot", "name": "api-snap"}
    core.create_namespaced_persistent_volume_claim(
        ns, pvc_body("api-restore", "16Mi", "Block", dataSource=source)
    )
    restored = poll(
        lambda: core.read_namespaced_persistent_volume_claim("api-restore", ns),
        lambda p: p.status.phase == "Bound",
    )
    copy = stored_volume(lab, restored.spec.volume_name)
    assert copy.read_bytes() == disk.read_bytes()

    events = core.list_namespaced_event(ns).items
    reasons = {(e.involved_object.name, e.reason) for e in events}
    assert {("api-disk", "ProvisioningSucceeded"), ("api-snap", "SnapshotReady")} <= reasons

    core.delete_namespaced_persistent_volume_claim("api-restore", ns)
    poll(lambda: copy.exists(), lambda exists: not exists)
