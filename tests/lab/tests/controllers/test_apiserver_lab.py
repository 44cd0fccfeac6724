"""The lab on a real kube-apiserver: what the lab adds around it holds, and the server is the real one.

One lab for the module: etcd, kube-apiserver and
kube-controller-manager from tools/build-apiserver.sh, the front (faults, routes, webhooks), and the
controllers as API clients.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
import uuid

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tests.lab import Lab
from tests.lab.apiserver import binaries
from tests.lab.controllers.pods import NODE_NAME

PIN = os.environ.get("LAB_K8S_VERSION", "v1.36.3")


@pytest.fixture(scope="module")
def real_lab(tmp_path_factory):
    binaries()  # builds on a cold cache (minutes), reused afterwards
    lab = Lab(tmp_path_factory.mktemp("apiserver-lab"), with_s3=False).start()
    try:
        yield lab
    finally:
        lab.stop()


@pytest.fixture(scope="module")
def api(real_lab):
    with config.new_client_from_config(str(real_lab.kubeconfig)) as api_client:
        yield api_client


@pytest.fixture
def namespace(api):
    name = "t-" + uuid.uuid4().hex[:8]
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    return name


def eventually(check, timeout=30.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def test_version_is_the_pinned_release(api):
    info = client.VersionApi(api).get_code()
    assert info.git_version == PIN
    assert (info.major, info.minor) == ("1", PIN.split(".")[1])


def test_kubectl_works_with_the_lab_kubeconfig(real_lab):
    proc = subprocess.run(
        ["kubectl", "--kubeconfig", str(real_lab.kubeconfig), "get", "volumesnapshots", "-A"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "No resources found" in proc.stderr + proc.stdout


def test_controllers_work_through_the_api(api, namespace):
    core = client.CoreV1Api(api)
    claim = {
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "8Mi"}}},
    }
    core.create_namespaced_persistent_volume_claim(namespace, claim)
    bound = eventually(
        lambda: core.read_namespaced_persistent_volume_claim("data", namespace).status.phase == "Bound"
    )
    assert bound, "the lab's storage controller did not bind the claim through the API"


def test_audit_comes_from_the_real_backend_and_leaves_controllers_out(real_lab, api, namespace):
    real_lab.clear_audit()
    client.CoreV1Api(api).create_namespaced_config_map(
        namespace, {"metadata": {"name": "cm"}, "data": {"a": "1"}}
    )
    records = eventually(lambda: [r for r in real_lab.mutating_requests() if r["name"] == "cm"])
    assert records and records[0]["verb"] == "create" and records[0]["code"] == 201
    assert records[0]["user"] == "lab-admin" and records[0]["resource"] == "configmaps"
    assert {r["user"] for r in real_lab.audit()} <= {"lab-admin"}


def test_a_limited_token_is_refused_by_rbac(real_lab, namespace):
    token = real_lab.add_token("reader", [{"verbs": ["get", "list"], "resources": ["configmaps"]}])
    path = real_lab.state_dir / "reader.kubeconfig"
    real_lab.write_kubeconfig(path, token=token, user="reader")
    with config.new_client_from_config(str(path)) as reader:
        core = client.CoreV1Api(reader)
        assert eventually(lambda: _allowed(lambda: core.list_namespaced_config_map(namespace)), 10)
        with pytest.raises(ApiException) as refused:
            core.create_namespaced_config_map(namespace, {"metadata": {"name": "x"}})
    assert refused.value.status == 403
    message = json.loads(refused.value.body)["message"]
    assert 'User "reader" cannot create resource "configmaps"' in message


def _allowed(call):
    try:
        call()
    except ApiException as exc:
        if exc.status in (401, 403):
            return False
        raise
    return True


def test_injected_conflicts_come_from_the_front_and_are_audited(real_lab, api, namespace):
    core = client.CoreV1Api(api)
    real_lab.clear_audit()
    real_lab.faults.update({"conflict_rate": 1.0})
    try:
        with pytest.raises(ApiException) as conflict:
            core.create_namespaced_config_map(namespace, {"metadata": {"name": "never"}})
    finally:
        real_lab.faults.reset()
    assert conflict.value.status == 409
    assert [r for r in real_lab.audit() if r.get("injected") and r["code"] == 409]
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_config_map("never", namespace)
    assert missing.value.status == 404


def test_a_controller_webhook_mutates_and_refuses_through_admission(api, namespace):
    custom = client.CustomObjectsApi(api)
    image = {
        "apiVersion": "harvesterhci.io/v1beta1",
        "kind": "VirtualMachineImage",
        "metadata": {"name": "img"},
        "spec": {"displayName": "ubuntu-2404", "sourceType": "download", "url": "http://127.0.0.1:9/x.img"},
    }
    made = custom.create_namespaced_custom_object(
        "harvesterhci.io", "v1beta1", namespace, "virtualmachineimages", image
    )
    assert made["metadata"]["labels"]["harvesterhci.io/imageDisplayName"] == "ubuntu-2404"
    bad = dict(image, metadata={"name": "img2"}, spec=dict(image["spec"], displayName=""))
    with pytest.raises(ApiException) as refused:
        custom.create_namespaced_custom_object(
            "harvesterhci.io", "v1beta1", namespace, "virtualmachineimages", bad
        )
    assert "displayName is required" in json.loads(refused.value.body)["message"]


def test_namespace_deletion_and_garbage_collection_are_kube_controller_managers(api, namespace):
    core = client.CoreV1Api(api)
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "dependent", "ownerReferences": [ref]}}
    )
    core.delete_namespaced_config_map("owner", namespace)
    assert eventually(lambda: not _exists(lambda: core.read_namespaced_config_map("dependent", namespace)))
    core.delete_namespace(namespace)
    assert eventually(lambda: not _exists(lambda: core.read_namespace(namespace)), 60)


def _exists(call):
    try:
        call()
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def test_a_committed_write_whose_answer_is_lost(real_lab, api, namespace):
    core = client.CoreV1Api(api)
    api.configuration.retries = 0
    real_lab.faults.update({"commit_drop_rate": 1.0})
    try:
        with pytest.raises(Exception):  # noqa: B017 - the connection closes without an answer
            core.create_namespaced_config_map(namespace, {"metadata": {"name": "lost"}}, _request_timeout=10)
    finally:
        real_lab.faults.reset()
    assert core.read_namespaced_config_map("lost", namespace).metadata.name == "lost"
    assert [r for r in real_lab.audit() if r.get("committed") and r["name"] == "lost"]


def _answer(lab, base: str, method: str, path: str) -> tuple[int, str]:
    """The code and the text of an answer (a Status's message)."""
    request = urllib.request.Request(base + path, method=method, data=b"" if method == "POST" else None)
    request.add_header("Authorization", "Bearer " + lab.admin_token)
    try:
        with urllib.request.urlopen(request, timeout=30, context=lab.ssl_context()) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        code, text = exc.code, exc.read().decode()
    try:
        return code, json.loads(text)["message"]
    except ValueError:  # a body that is not a Status
        return code, text


def test_the_kubeconfig_address_serves_what_kube_apiserver_alone_does_not(real_lab, api, namespace):
    """Why the kubeconfig points at the front with every fault knob at zero (README): pod logs, Harvester's
    upload action and KubeVirt's screenshot are answered there, and kube-apiserver answers none of them."""
    pod = {
        "metadata": {"name": "p"},
        "spec": {"nodeName": NODE_NAME, "containers": [{"name": "c", "image": "busybox"}]},
    }
    client.CoreV1Api(api).create_namespaced_pod(namespace, pod)
    real_lab.store.set_pod_log(namespace, "p", "verdict: sealed\n")
    kubeconfig = yaml.safe_load(real_lab.kubeconfig.read_text())
    assert kubeconfig["clusters"][0]["cluster"]["server"] == real_lab.url != real_lab.apiserver.url
    log = ("GET", f"/api/v1/namespaces/{namespace}/pods/p/log")
    upload = ("POST", f"/v1/harvester/harvesterhci.io.virtualmachineimages/{namespace}/gone?action=upload")
    screenshot = (
        "GET",
        f"/apis/subresources.kubevirt.io/v1/namespaces/{namespace}/virtualmachineinstances/gone/vnc/screenshot",
    )

    assert _answer(real_lab, real_lab.url, *log) == (200, "verdict: sealed\n")
    code, body = _answer(real_lab, real_lab.url, *upload)
    assert code == 404 and 'virtualmachineimages.harvesterhci.io "gone" not found' in body, body
    code, body = _answer(real_lab, real_lab.url, *screenshot)
    assert code == 404 and 'virtualmachineinstance.kubevirt.io "gone" not found' in body, body

    direct = real_lab.apiserver.url
    code, body = _answer(real_lab, direct, *log)
    # It looks up the pod's node to ask that node's kubelet for the log: the lab has neither.
    assert code == 404 and "verdict" not in body, body
    # Neither is a path it serves: no API group subresources.kubevirt.io is registered (virt-api's
    # APIService on a cluster), and /v1/harvester is Harvester's API, not Kubernetes'.
    for request in (upload, screenshot):
        assert _answer(real_lab, direct, *request) == (404, "404 page not found\n")
