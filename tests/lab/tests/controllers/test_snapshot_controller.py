"""The lab's snapshot controller is external-snapshotter v8.7.0's own, with the lab's driver side.

Binding, readiness, the Retain and Delete policies and the finalizers below are the upstream controller's
behaviour; the lab only cuts the data and fills the contents' status as a CSI driver and its
csi-snapshotter sidecar do. Each test says which writes were the controller's by their field manager.
"""

from __future__ import annotations

import os

import pytest

from tests.lab.controllers.snapshots import BEING_CREATED, CONTENT_FINALIZER
from tests.lab.controllers.volumes import HOSTPATH_CSI_DRIVER, snapshot_data, volume_path

from .conftest import SNAP
from .test_storage_controllers import MIB, bound, pvc_body, ready, snapshot_body, write_pattern

pytestmark = pytest.mark.lab_only

SNAPSHOT_BOUND_FINALIZER = "snapshot.storage.kubernetes.io/volumesnapshot-bound-protection"
CONTROLLER = "snapshot-controller"  # the field manager of the upstream binary's writes


def managers(obj: dict, subresource: str = "") -> set[str]:
    return {
        m["manager"]
        for m in obj["metadata"].get("managedFields") or ()
        if m.get("subresource", "") == subresource
    }


def dynamic_snapshot(mini, name: str, cls: str = "lab-snap") -> tuple[dict, dict, bytes]:
    mini.create("", "persistentvolumeclaims", pvc_body(f"{name}-disk", "16Mi", "Block", "lab-fs"))
    pvc = mini.wait("", "persistentvolumeclaims", f"{name}-disk", bound)
    data = os.urandom(4096)
    write_pattern(volume_path(mini.context, pvc), 3 * MIB, data)
    mini.create(SNAP, "volumesnapshots", snapshot_body(name, f"{name}-disk", cls))
    vs = mini.wait(SNAP, "volumesnapshots", name, ready, timeout=30)
    return pvc, vs, data


def test_the_controller_is_the_upstream_binary_and_volumes_are_csi(controller_lab, mini):
    log = (controller_lab.apiserver.dir / "snapshot-controller.log").read_text()
    assert "v8.7.0" in log
    mini.create("", "persistentvolumeclaims", pvc_body("plain", sc="lab-fs"))
    pvc = mini.wait("", "persistentvolumeclaims", "plain", bound)
    pv = mini.get("", "persistentvolumes", pvc["spec"]["volumeName"])
    assert pv["spec"]["csi"]["driver"] == HOSTPATH_CSI_DRIVER and "hostPath" not in pv["spec"]


def test_a_dynamic_snapshot_becomes_ready_through_the_driver_side(mini):
    pvc, vs, data = dynamic_snapshot(mini, "golden")
    uid = vs["metadata"]["uid"]
    name = vs["status"]["boundVolumeSnapshotContentName"]
    assert name == f"snapcontent-{uid}"
    assert vs["status"]["restoreSize"] == "16Mi"
    assert SNAPSHOT_BOUND_FINALIZER in vs["metadata"]["finalizers"]
    assert CONTROLLER in managers(vs, "status")
    content = mini.get(SNAP, "volumesnapshotcontents", name)
    assert CONTROLLER in managers(content)  # the controller created it and holds its finalizer
    assert CONTENT_FINALIZER in content["metadata"]["finalizers"]
    assert content["spec"]["driver"] == HOSTPATH_CSI_DRIVER
    pv = mini.get("", "persistentvolumes", pvc["spec"]["volumeName"])
    assert content["spec"]["source"]["volumeHandle"] == pv["spec"]["csi"]["volumeHandle"]
    assert content["spec"]["sourceVolumeMode"] == "Block"
    # The driver side's status, as csi-snapshotter writes it, and its mark removed once cut.
    status = content["status"]
    assert status["readyToUse"] is True and status["restoreSize"] == 16 * MIB
    assert isinstance(status["creationTime"], int)
    assert BEING_CREATED not in (content["metadata"].get("annotations") or {})
    path, _ = snapshot_data(mini.context, status["snapshotHandle"])
    with open(path, "rb") as handle:
        handle.seek(3 * MIB)
        assert handle.read(len(data)) == data


def test_a_pre_provisioned_retain_content_binds_and_survives_its_snapshot(mini):
    _, source, data = dynamic_snapshot(mini, "origin", "lab-snap-retain")
    handle = mini.get(SNAP, "volumesnapshotcontents", source["status"]["boundVolumeSnapshotContentName"])[
        "status"
    ]["snapshotHandle"]
    content_name = f"imported-{mini.namespace}"
    mini.create(
        SNAP,
        "volumesnapshotcontents",
        {
            "metadata": {"name": content_name},
            "spec": {
                "deletionPolicy": "Retain",
                "driver": HOSTPATH_CSI_DRIVER,
                "source": {"snapshotHandle": handle},
                "volumeSnapshotRef": {"name": "imported", "namespace": mini.namespace},
            },
        },
    )
    body = {"metadata": {"name": "imported"}, "spec": {"source": {"volumeSnapshotContentName": content_name}}}
    mini.create(SNAP, "volumesnapshots", body)
    vs = mini.wait(SNAP, "volumesnapshots", "imported", ready, timeout=30)
    assert vs["status"]["boundVolumeSnapshotContentName"] == content_name
    content = mini.get(SNAP, "volumesnapshotcontents", content_name)
    assert content["spec"]["volumeSnapshotRef"]["uid"] == vs["metadata"]["uid"]  # bound by the controller
    assert content["status"]["snapshotHandle"] == handle and content["status"]["readyToUse"] is True

    mini.delete(SNAP, "volumesnapshots", "imported")
    mini.wait_gone(SNAP, "volumesnapshots", "imported", timeout=30)
    content = mini.get(SNAP, "volumesnapshotcontents", content_name)
    assert not content["metadata"].get("deletionTimestamp")
    path, _ = snapshot_data(mini.context, handle)
    with open(path, "rb") as stream:
        stream.seek(3 * MIB)
        assert stream.read(len(data)) == data
    mini.delete(
        SNAP, "volumesnapshotcontents", content_name
    )  # cluster-scoped: not cleaned with the namespace
    mini.wait_gone(SNAP, "volumesnapshotcontents", content_name, timeout=30)
    assert snapshot_data(mini.context, handle) is not None  # Retain: the data outlives its content


def test_a_failed_cut_reaches_the_snapshot_through_the_controller(mini):
    mini.create("", "persistentvolumeclaims", pvc_body("broken-disk", sc="lab-fs"))
    mini.wait("", "persistentvolumeclaims", "broken-disk", bound)
    mini.faults.set_object(f"VolumeSnapshot/{mini.namespace}/broken", "fail")
    mini.create(SNAP, "volumesnapshots", snapshot_body("broken", "broken-disk"))
    vs = mini.wait(
        SNAP, "volumesnapshots", "broken", lambda o: (o.get("status") or {}).get("error"), timeout=30
    )
    assert "injected failure" in vs["status"]["error"]["message"]
    assert vs["status"]["readyToUse"] is False
    # The driver side's Event is on the content, as the csi-snapshotter sidecar records it.
    event = mini.events(vs["status"]["boundVolumeSnapshotContentName"], "SnapshotCreationFailed")[0]
    assert event["type"] == "Warning" and event["source"]["component"] == "csi-snapshotter"
    # The driver side retries the cut as the sidecar does; once it succeeds the controller clears the error.
    mini.faults.set_object(f"VolumeSnapshot/{mini.namespace}/broken", None)
    vs = mini.wait(SNAP, "volumesnapshots", "broken", ready, timeout=30)
    assert not vs["status"].get("error")
