"""The lab itself: bootstrap objects, S3, the controller framework, audit of dry runs, pod logs, up/down.

What an API server does (CRUD, selectors, paging, watches, patch types, schemas, discovery) is the real
kube-apiserver's and is not tested here; these test what the lab adds to it. The CRDs' schemas and
status subresources are tested on the real server in tests/lab/tests/controllers/test_crds_apiserver.py.
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys

import pytest

from tests.lab import Lab
from tests.lab.controllers import Controller, ControllerManager, LabContext

from .conftest import unique, wait_for

pytestmark = pytest.mark.lab_only
REPO = pathlib.Path(__file__).resolve().parents[4]


def test_bootstrap_objects(kube_client):
    from kubernetes import client
    from kubernetes.dynamic import DynamicClient

    classes = {sc.metadata.name: sc for sc in client.StorageV1Api(kube_client).list_storage_class().items}
    assert classes["lab-fs"].metadata.annotations["storageclass.kubernetes.io/is-default-class"] == "true"
    assert classes["lab-fs"].volume_binding_mode == "Immediate" and classes["lab-fs"].allow_volume_expansion
    assert classes["lab-wffc"].volume_binding_mode == "WaitForFirstConsumer"
    # Other tests on the shared lab add classes of their own (Harvester's Longhorn ones); the lab's are these.
    # CSI provisioners named after their drivers: the snapshot controller snapshots only CSI volumes.
    assert {classes[n].provisioner for n in ("lab-fs", "lab-wffc")} == {"hostpath.lab.goldenimage.io"}
    assert classes["lab-rbd"].provisioner == "rbd.lab.goldenimage.io"

    dyn = DynamicClient(kube_client)
    snapshot_classes = dyn.resources.get(api_version="snapshot.storage.k8s.io/v1", kind="VolumeSnapshotClass")
    # One default class per driver, as the snapshot controller picks a default by the volume's driver.
    defaults = (("lab-snap", "hostpath.lab.goldenimage.io"), ("lab-snap-rbd", "rbd.lab.goldenimage.io"))
    for name, driver in defaults:
        snap = dyn.get(snapshot_classes, name=name)
        assert snap.driver == driver and snap.deletionPolicy == "Delete"
        assert snap.metadata.annotations["snapshot.storage.kubernetes.io/is-default-class"] == "true"
    for api_version, kind in (
        ("kubevirt.io/v1", "VirtualMachine"),
        ("cdi.kubevirt.io/v1beta1", "DataVolume"),
    ):
        assert dyn.resources.get(api_version=api_version, kind=kind).namespaced


def test_s3_endpoint(lab):
    s3 = lab.s3.client()
    bucket = unique("bucket")
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"data"
    env_file = (lab.kubeconfig.parent / "s3.env").read_text()
    assert f"AWS_ENDPOINT_URL={lab.s3.endpoint_url}" in env_file


class _Annotator(Controller):
    name = "annotator"
    watches = (("", "configmaps"),)
    resync_seconds = 0.5

    def __init__(self, lab):
        super().__init__(lab)
        self.deleted_names: list[str] = []
        self.calls: dict[str, int] = {}

    def reconcile(self, rt, obj):
        name = obj["metadata"]["name"]
        self.calls[name] = self.calls.get(name, 0) + 1
        if self.lab.faults.object_fault(rt.kind, obj["metadata"]["namespace"], name) == "fail":
            obj["metadata"].setdefault("annotations", {})["state"] = "failed"
        else:
            obj["metadata"].setdefault("annotations", {})["state"] = "seen"
        self.lab.store.update(rt, obj)
        return None

    def deleted(self, rt, obj):
        self.deleted_names.append(obj["metadata"]["name"])


def test_controller_framework(tmp_path):
    """A controller on the lab's ApiStore: the initial list, watch events, resync, deletions, and the
    per-object `stuck` and `fail` knobs."""
    with Lab(tmp_path, with_s3=False, controllers=[]) as lab:
        store = lab.store
        lab.faults.update(
            {"objects": {"ConfigMap/default/stuck": "stuck", "ConfigMap/default/broken": "fail"}}
        )
        manager = ControllerManager(LabContext(store, tmp_path, lab.faults), [_Annotator])
        rt = store.resource("", "v1", "configmaps")
        store.create(rt, {"metadata": {"name": "before", "namespace": "default"}})
        manager.start()
        try:
            for name in ("after", "stuck", "broken"):
                store.create(rt, {"metadata": {"name": name, "namespace": "default"}})

            def state(name):
                return (store.get(rt, "default", name)["metadata"].get("annotations") or {}).get("state")

            wait_for(
                lambda: state("before") == "seen" and state("after") == "seen" and state("broken") == "failed"
            )
            controller = manager.controllers[0]
            # Resync re-reconciles (every 0.5 s; later on a loaded machine), and never the stuck object.
            wait_for(lambda: controller.calls.get("after", 0) >= 2)
            assert state("stuck") is None and "stuck" not in controller.calls
            store.delete(rt, "default", "after")
            wait_for(lambda: "after" in controller.deleted_names)
        finally:
            manager.stop()


def test_dry_run_is_audited(lab, kube_client, kube_namespace):
    """The audit the lab reads from the API server's log marks dry runs, and counts none as mutating."""
    from kubernetes import client

    lab.clear_audit()
    body = {"metadata": {"name": "dry"}, "data": {"k": "v"}}
    client.CoreV1Api(kube_client).create_namespaced_config_map(kube_namespace, body, dry_run="All")
    records = [r for r in lab.audit() if r["verb"] == "create" and r["resource"] == "configmaps"]
    assert records and all(r["dry_run"] for r in records)
    assert lab.mutating_requests() == []


def test_pod_logs_come_from_the_lab_kubelet(lab, kube_client, kube_namespace):
    """kube-apiserver asks the kubelet of the pod's Node, the lab's listener, for the log the lab's Job
    runner recorded (tailLines too)."""
    from kubernetes import client

    from tests.lab.controllers.pods import NODE_NAME

    core = client.CoreV1Api(kube_client)
    spec = {"nodeName": NODE_NAME, "containers": [{"name": "c", "image": "busybox"}]}
    pod = {"metadata": {"name": "p"}, "spec": spec}
    core.create_namespaced_pod(kube_namespace, pod)
    lab.store.set_pod_log(kube_namespace, "p", "line one\nline two\n")
    assert core.read_namespaced_pod_log("p", kube_namespace) == "line one\nline two\n"
    assert core.read_namespaced_pod_log("p", kube_namespace, tail_lines=1) == "line two\n"


def test_up_status_down(tmp_path):
    env = dict(os.environ)
    env.pop("K8S_AUTH_KUBECONFIG", None)

    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "tests.lab", *args, "--state-dir", str(tmp_path)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    up = cli("up", "--no-s3")
    assert up.returncode == 0, up.stderr
    assert str(tmp_path / "kubeconfig") in up.stdout
    # It says which address has the fault knobs: the fault proxy's, with a kubeconfig of its own.
    assert str(tmp_path / "kubeconfig-faults") in up.stdout, up.stdout
    info = json.loads((tmp_path / "lab.json").read_text())
    assert cli("status").returncode == 0
    down = cli("down")
    assert down.returncode == 0, down.stderr
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", info["port"])) != 0
    assert cli("status").returncode == 3
