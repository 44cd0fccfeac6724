"""The lab on a real kube-apiserver: what the lab adds around it holds, and the server is the real one.

One lab for the module: etcd, kube-apiserver and kube-controller-manager from tools/build-apiserver.sh, the
lab's listener (the fault proxy, the servers beside the API server, the webhooks), and the controllers as
API clients. The kubeconfig points at kube-apiserver; the fault tests use the fault proxy's.
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


@pytest.fixture(scope="module")
def fault_api(real_lab):
    with config.new_client_from_config(str(real_lab.fault_kubeconfig)) as api_client:
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


def test_injected_conflicts_come_from_the_front_and_are_audited(real_lab, fault_api, namespace):
    core = client.CoreV1Api(fault_api)
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


def test_a_committed_write_whose_answer_is_lost(real_lab, fault_api, namespace):
    core = client.CoreV1Api(fault_api)
    fault_api.configuration.retries = 0
    real_lab.faults.update({"commit_drop_rate": 1.0})
    try:
        with pytest.raises(Exception):  # noqa: B017 - the connection closes without an answer
            core.create_namespaced_config_map(namespace, {"metadata": {"name": "lost"}}, _request_timeout=10)
    finally:
        real_lab.faults.reset()
    assert core.read_namespaced_config_map("lost", namespace).metadata.name == "lost"
    assert [r for r in real_lab.audit() if r.get("committed") and r["name"] == "lost"]


def _answer(lab, base: str, method: str, path: str, token: str | None = None) -> tuple[int, str]:
    """The code and the text of an answer (a Status's message)."""
    request = urllib.request.Request(base + path, method=method, data=b"" if method == "POST" else None)
    request.add_header("Authorization", "Bearer " + (token or lab.admin_token))
    try:
        with urllib.request.urlopen(request, timeout=30, context=lab.ssl_context()) as reply:
            return reply.status, reply.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        code, text = exc.code, exc.read().decode()
    try:
        return code, json.loads(text)["message"]
    except ValueError:  # a body that is not a Status
        return code, text


def test_kube_apiservers_own_address_serves_logs_screenshots_and_harvesters_upload(real_lab, api, namespace):
    """The kubeconfig names kube-apiserver itself, and it serves what a cluster serves through its other
    servers: a pod's log from the kubelet of the pod's Node, KubeVirt's screenshot through the APIService
    virt-api registers, and Harvester's upload on Harvester's own endpoint (``lab.harvester_url``)."""
    kubeconfig = yaml.safe_load(real_lab.kubeconfig.read_text())
    direct = real_lab.apiserver.url
    assert kubeconfig["clusters"][0]["cluster"]["server"] == real_lab.url == direct
    faulty = yaml.safe_load(real_lab.fault_kubeconfig.read_text())
    assert faulty["clusters"][0]["cluster"]["server"] == real_lab.front_url != direct

    custom = client.CustomObjectsApi(api)
    api_service = custom.get_cluster_custom_object(
        "apiregistration.k8s.io", "v1", "apiservices", "v1.subresources.kubevirt.io"
    )
    assert api_service["spec"]["service"]["name"] == "virt-api"
    assert api_service["spec"]["service"]["namespace"] == "kubevirt"
    (available,) = [c for c in api_service["status"]["conditions"] if c["type"] == "Available"]
    assert available["status"] == "True", available

    core = client.CoreV1Api(api)
    pod = {
        "metadata": {"name": "p"},
        "spec": {"nodeName": NODE_NAME, "containers": [{"name": "c", "image": "busybox"}]},
    }
    core.create_namespaced_pod(namespace, pod)
    real_lab.store.set_pod_log(namespace, "p", "checking\nverdict: sealed\n")
    node = core.read_node(NODE_NAME)
    assert ("InternalIP", "127.0.0.1") in [(a.type, a.address) for a in node.status.addresses]
    assert node.status.daemon_endpoints.kubelet_endpoint.port == real_lab.server.port

    log = f"/api/v1/namespaces/{namespace}/pods/p/log"
    assert _answer(real_lab, direct, "GET", log) == (200, "checking\nverdict: sealed\n")
    assert _answer(real_lab, direct, "GET", log + "?tailLines=1") == (200, "verdict: sealed\n")
    assert _answer(real_lab, direct, "GET", log + "?limitBytes=5") == (200, "check")
    # kube-apiserver did RBAC for pods/log before it asked the kubelet: a token without it gets 403.
    reader = real_lab.add_token("pod-reader", [{"verbs": ["get"], "resources": ["pods"]}])
    assert eventually(
        lambda: _answer(real_lab, direct, "GET", f"/api/v1/namespaces/{namespace}/pods/p", reader)[0] == 200,
        10,
    )
    code, body = _answer(real_lab, direct, "GET", log, reader)
    assert code == 403 and 'cannot get resource "pods/log"' in body, body
    # The kubelet endpoint answers kube-apiserver's kubelet client certificate only.
    kubelet = f"/containerLogs/{namespace}/p/c"
    assert _answer(real_lab, real_lab.server.url, "GET", kubelet)[0] == 401

    screenshot = f"/apis/subresources.kubevirt.io/v1/namespaces/{namespace}/virtualmachineinstances/"
    code, body = _answer(real_lab, direct, "GET", screenshot + "gone/vnc/screenshot")
    assert code == 404 and 'virtualmachineinstance.kubevirt.io "gone" not found' in body, body
    code, body = _answer(real_lab, direct, "GET", screenshot + "gone/vnc/screenshot", reader)
    assert code == 403 and "subresources.kubevirt.io" in body, body

    upload = f"/v1/harvester/harvesterhci.io.virtualmachineimages/{namespace}/gone?action=upload"
    code, body = _answer(real_lab, real_lab.harvester_url, "POST", upload)
    assert code == 404 and 'virtualmachineimages.harvesterhci.io "gone" not found' in body, body
    # Harvester's API is not kube-apiserver's: the path is not the API server's.
    assert _answer(real_lab, direct, "POST", upload) == (404, "404 page not found\n")
