"""The lab's Harvester image controller: real downloads, conditions, the StorageClass merge rule, the
upload endpoint and the delete webhook."""

from __future__ import annotations

import functools
import hashlib
import http.server
import pathlib
import subprocess
import threading
import time
import uuid

import pytest

from tests.lab.controllers.harvester import LONGHORN, RATE_ENV, SC_ANNOTATION
from tests.lab.objects import ApiError
from tests.lab.tests.controllers.conftest import until

H = "harvesterhci.io"
IMAGES = "virtualmachineimages"
SC = "storage.k8s.io"


@pytest.fixture(scope="module")
def qcow2(tmp_path_factory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("images")
    path = root / "small.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(path), "64M"], check=True)
    return path


@pytest.fixture(scope="module")
def http_root(qcow2):
    """A plain HTTP server on loopback serving the image directory."""
    handler = functools.partial(_QuietHandler, directory=str(qcow2.parent))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def sha512(path: pathlib.Path) -> str:
    return hashlib.sha512(path.read_bytes()).hexdigest()


def image(name, url=None, checksum=None, params=None, annotations=None, retry=None, source="download"):
    spec = {"displayName": name, "sourceType": source}
    if url:
        spec["url"] = url
    if checksum:
        spec["checksum"] = checksum
    if params is not None:
        spec["storageClassParameters"] = params
    if retry is not None:
        spec["retry"] = retry
    return {
        "apiVersion": "harvesterhci.io/v1beta1",
        "kind": "VirtualMachineImage",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": spec,
    }


def cond(obj, ctype):
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c["type"] == ctype:
            return c
    return {}


def imported(obj):
    return cond(obj, "Imported").get("status") == "True"


def exceeded(obj):
    return cond(obj, "RetryLimitExceeded").get("status") == "True"


def vmi_rt(mini):
    return mini.store.resource(H, "v1beta1", IMAGES)


def create_image(mini, body):
    body["metadata"]["namespace"] = mini.namespace
    return mini.store.create(vmi_rt(mini), body)


def get_image(mini, name):
    return mini.store.get(vmi_rt(mini), mini.namespace, name)


def wait_image(mini, name, check, timeout=15):
    end = time.monotonic() + timeout
    obj = None
    while time.monotonic() < end:
        obj = get_image(mini, name)
        if check(obj):
            return obj
        time.sleep(0.05)
    raise AssertionError(f"image {name} did not reach the expected state: {obj and obj.get('status')}")


def longhorn_class(mini, name, replicas, default=False):
    notes = {"storageclass.kubernetes.io/is-default-class": "true"} if default else {}
    body = {
        "metadata": {"name": name, "annotations": notes},
        "provisioner": LONGHORN,
        "parameters": {"numberOfReplicas": replicas, "staleReplicaTimeout": "45", "migratable": "true"},
    }
    return mini.create(SC, "storageclasses", body)


def test_download_with_progress_checksum_sizes_and_storage_class(mini, qcow2, http_root, monkeypatch):
    monkeypatch.setenv(RATE_ENV, str(qcow2.stat().st_size * 2))  # about half a second
    body = image("img-a", f"{http_root}/{qcow2.name}", sha512(qcow2), {"numberOfReplicas": "4"})
    created = create_image(mini, body)
    # the mutating webhook merged the request over the defaults (no Longhorn template here)
    assert created["spec"]["storageClassParameters"] == {
        "numberOfReplicas": "4",
        "staleReplicaTimeout": "30",
        "migratable": "true",
    }
    seen = set()
    deadline = time.monotonic() + 20
    obj = created
    while time.monotonic() < deadline and not imported(obj):
        obj = get_image(mini, "img-a")
        seen.add((obj.get("status") or {}).get("progress"))
        time.sleep(0.03)
    assert imported(obj), obj.get("status")
    assert any(isinstance(p, int) and 0 < p < 100 for p in seen), seen
    status = obj["status"]
    assert status["progress"] == 100 and status["failed"] == 0
    assert status["size"] == qcow2.stat().st_size and status["virtualSize"] == 64 * 2**20
    assert status["appliedUrl"] == body["spec"]["url"]
    assert cond(obj, "Initialized")["status"] == "True"
    assert cond(obj, "Imported")["reason"] == "Imported"
    uid = obj["metadata"]["uid"]
    assert status["storageClassName"] == f"lh-{uid}"  # never derived from the image name
    sc = mini.get(SC, "storageclasses", f"lh-{uid}")
    assert sc["provisioner"] == LONGHORN and sc["parameters"]["numberOfReplicas"] == "4"
    data = mini.context.state_dir / "volumes" / "backingimages" / f"{uid}.img"
    assert data.read_bytes() == qcow2.read_bytes()
    mini.store.delete(vmi_rt(mini), mini.namespace, "img-a")
    until(lambda: not data.exists() and not mini.exists(SC, "storageclasses", f"lh-{uid}"), 20, "cleanup")


def test_template_by_annotation_wins_over_the_request(mini, qcow2, http_root):
    longhorn_class(mini, "harvester-longhorn", "2")
    body = image(
        "img-b",
        f"{http_root}/{qcow2.name}",
        params={"numberOfReplicas": "4"},
        annotations={SC_ANNOTATION: "harvester-longhorn"},
    )
    created = create_image(mini, body)
    assert created["spec"]["storageClassParameters"]["numberOfReplicas"] == "2"
    obj = wait_image(mini, "img-b", imported)
    sc = mini.get(SC, "storageclasses", obj["status"]["storageClassName"])
    assert sc["parameters"]["numberOfReplicas"] == "2" and sc["parameters"]["staleReplicaTimeout"] == "45"


def test_default_longhorn_class_wins_and_other_provisioners_do_not(mini, qcow2, http_root):
    # a non-Longhorn class named by annotation is no template: the request wins
    body = image("img-c", f"{http_root}/{qcow2.name}", params={"numberOfReplicas": "4"})
    body["metadata"]["annotations"] = {SC_ANNOTATION: "lab-fs"}
    assert create_image(mini, body)["spec"]["storageClassParameters"]["numberOfReplicas"] == "4"
    lab_fs = mini.get(SC, "storageclasses", "lab-fs")
    lab_fs["metadata"]["annotations"] = {}
    mini.store.update(mini.rt(SC, "storageclasses"), lab_fs)
    longhorn_class(mini, "longhorn-default", "3", default=True)
    body = image("img-d", f"{http_root}/{qcow2.name}", params={"numberOfReplicas": "4"})
    assert create_image(mini, body)["spec"]["storageClassParameters"]["numberOfReplicas"] == "3"


def test_checksum_mismatch_counts_failures_until_the_retry_limit(mini, qcow2, http_root):
    create_image(mini, image("img-e", f"{http_root}/{qcow2.name}", "0" * 128, retry=1))
    obj = wait_image(mini, "img-e", exceeded)
    assert obj["status"]["failed"] == 2 and obj["status"]["lastFailedTime"]
    message = cond(obj, "RetryLimitExceeded")["message"]
    assert message.startswith("retry attempted 1/1 failed due to error: checksum mismatch")
    assert cond(obj, "Imported")["status"] == "False"
    assert mini.events("img-e", "ImportFailed")


def test_missing_url_fails(mini, http_root):
    create_image(mini, image("img-g", f"{http_root}/missing.qcow2", retry=0))
    obj = wait_image(mini, "img-g", exceeded)
    assert "got 404 status code" in cond(obj, "RetryLimitExceeded")["message"]


def test_faults_fail_and_stuck(mini, qcow2, http_root):
    ns = mini.namespace
    mini.faults.update(
        {"objects": {f"VirtualMachineImage/{ns}/img-h": "fail", f"VirtualMachineImage/{ns}/img-i": "stuck"}}
    )
    create_image(mini, image("img-h", f"{http_root}/{qcow2.name}", retry=2))
    create_image(mini, image("img-i", f"{http_root}/{qcow2.name}"))
    obj = wait_image(mini, "img-h", exceeded)
    assert obj["status"]["failed"] == 3 and "injected fault" in cond(obj, "Imported")["message"]
    time.sleep(0.5)
    assert not (get_image(mini, "img-i").get("status") or {}).get("conditions")
    mini.faults.update({"objects": {}})
    wait_image(mini, "img-i", imported)


def test_webhooks_refuse_changes_and_duplicates(mini, qcow2, http_root):
    create_image(mini, image("img-j", f"{http_root}/{qcow2.name}"))
    with pytest.raises(ApiError) as err:
        create_image(
            mini,
            dict(
                image("img-k", f"{http_root}/{qcow2.name}"),
                spec=dict(image("img-j", f"{http_root}/{qcow2.name}")["spec"]),
            ),
        )
    assert err.value.code == 409 and "same name exists" in err.value.message
    obj = wait_image(mini, "img-j", imported)  # no status write races the update below
    obj["spec"]["url"] = f"{http_root}/other.qcow2"
    with pytest.raises(ApiError) as err:
        mini.store.update(vmi_rt(mini), obj)
    assert err.value.code == 422 and "url cannot be modified" in err.value.message
    with pytest.raises(ApiError, match="url is required"):
        create_image(mini, image("img-l"))


# ------------------------------------------------------------------ over HTTP (the lab)


@pytest.mark.lab_only
def test_upload_endpoint_and_delete_webhook(lab, kube_client, kube_namespace, qcow2):
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    custom = client.CustomObjectsApi(kube_client)
    core = client.CoreV1Api(kube_client)
    name = "up-" + uuid.uuid4().hex[:6]
    body = image(name, checksum=sha512(qcow2), source="upload")
    custom.create_namespaced_custom_object(H, "v1beta1", kube_namespace, IMAGES, body)
    path = f"/v1/harvester/harvesterhci.io.virtualmachineimages/{kube_namespace}/{name}"
    headers = {"Authorization": f"Bearer {lab.admin_token}"}
    import urllib3

    http = urllib3.PoolManager(ca_certs=str(lab.ca_path))  # the lab serves HTTPS with its own CA
    answer = http.request(
        "POST",
        f"{lab.harvester_url}{path}?action=upload",
        fields={"chunk": ("small.qcow2", qcow2.read_bytes(), "application/octet-stream")},
        headers=headers,
    )
    assert answer.status == 200, answer.data
    obj = custom.get_namespaced_custom_object(H, "v1beta1", kube_namespace, IMAGES, name)
    assert imported(obj) and obj["status"]["size"] == qcow2.stat().st_size
    again = http.request(
        "POST", f"{lab.harvester_url}{path}?action=upload", body=qcow2.read_bytes(), headers=headers
    )
    assert again.status == 409
    storage_class = obj["status"]["storageClassName"]
    pvc = {
        "metadata": {"name": "os-disk"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": "64Mi"}},
        },
    }
    core.create_namespaced_persistent_volume_claim(kube_namespace, pvc)
    with pytest.raises(ApiException) as err:
        custom.delete_namespaced_custom_object(H, "v1beta1", kube_namespace, IMAGES, name)
    assert err.value.status == 422
    assert f"being used by volume {kube_namespace}/os-disk" in err.value.body
    core.delete_namespaced_persistent_volume_claim("os-disk", kube_namespace)
    until(lambda: not core.list_namespaced_persistent_volume_claim(kube_namespace).items, 20, "pvc gone")
    custom.delete_namespaced_custom_object(H, "v1beta1", kube_namespace, IMAGES, name)
    until(lambda: not lab.store.exists(lab.store.resource(SC, "v1", "storageclasses"), None, storage_class))


@pytest.mark.lab_only
def test_download_from_the_loopback_bucket(lab, kube_client, kube_namespace, qcow2):
    from kubernetes import client

    s3 = lab.s3.client()
    bucket = "mirror-" + uuid.uuid4().hex[:6]
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="baked/small.qcow2", Body=qcow2.read_bytes())
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "baked/small.qcow2"})
    custom = client.CustomObjectsApi(kube_client)
    custom.create_namespaced_custom_object(
        H, "v1beta1", kube_namespace, IMAGES, image("s3-img", url, sha512(qcow2))
    )
    store_rt = lab.store.resource(H, "v1beta1", IMAGES)
    until(lambda: imported(lab.store.get(store_rt, kube_namespace, "s3-img")), 15, "imported from S3")


def test_backing_image_copies_follow_the_minimum_not_the_nodes(mini, qcow2, http_root):
    """Harvester makes the image's BackingImage with minNumberOfCopies from the class; Longhorn puts that
    many ready copies on the schedulable nodes' disks and none on a node added later, until the minimum
    is raised; a copy on a node gone reads unknown and is made again elsewhere."""
    from tests.lab.controllers.longhorn import NAMESPACE, disk_uuid
    from tests.lab.controllers.pods import NODE_NAME

    core = mini.store.resource("", "v1", "nodes")
    for node in list(mini.store.list(core)[0]):
        if node["metadata"]["name"] != NODE_NAME:  # the lab's own, cordoned: its kubelet serves pod logs
            mini.store.delete(core, None, node["metadata"]["name"])
    names = [f"{mini.namespace}-{n}" for n in ("a", "b", "c", "d")]

    def add_node(name, ready="True", unschedulable=False):
        mini.store.create(core, {"metadata": {"name": name}, "spec": {"unschedulable": unschedulable}})
        node = mini.store.get(core, None, name)
        node["status"] = {"conditions": [{"type": "Ready", "status": ready}]}
        mini.store.update(core, node, subresource="status")
        node = mini.store.get(core, None, name)
        node["spec"]["taints"] = []  # the node lifecycle controller, which the lab does not run, lifts it
        mini.store.update(core, node)

    try:
        for name in names[:3]:
            add_node(name)
        add_node(f"{mini.namespace}-cordoned", unschedulable=True)
        body = image("img-copies", url=f"{http_root}/{qcow2.name}", params={"numberOfReplicas": "3"})
        create_image(mini, body)
        wait_image(mini, "img-copies", imported)
        bi_rt = mini.store.resource("longhorn.io", "v1beta2", "backingimages")
        bi_name = f"{mini.namespace}-img-copies"

        def ready():
            obj = mini.store.get(bi_rt, NAMESPACE, bi_name)
            files = (obj.get("status") or {}).get("diskFileStatusMap") or {}
            return sorted(d for d, f in files.items() if f["state"] == "ready"), obj

        until(lambda: len(ready()[0]) == 3, 15, "three ready copies")
        held, obj = ready()
        assert held == sorted(disk_uuid(n) for n in names[:3])
        assert obj["spec"]["minNumberOfCopies"] == 3
        assert obj["metadata"]["annotations"]["harvesterhci.io/imageId"] == f"{mini.namespace}/img-copies"
        sc = mini.get(SC, "storageclasses", get_image(mini, "img-copies")["status"]["storageClassName"])
        assert sc["parameters"]["backingImage"] == bi_name

        add_node(names[3])  # a node added: Longhorn makes no copy for it
        time.sleep(2.5)
        assert ready()[0] == held
        obj["spec"]["minNumberOfCopies"] = 4  # the minimum raised: the fourth disk gets one
        mini.store.update(bi_rt, obj)
        until(lambda: disk_uuid(names[3]) in ready()[0], 15, "a copy on the new node")

        mini.store.delete(core, None, names[0])  # a node gone: its copy is unknown, made again nowhere else
        until(lambda: disk_uuid(names[0]) not in ready()[0], 15, "the lost copy")
        assert len(ready()[0]) == 3

        mini.store.delete(vmi_rt(mini), mini.namespace, "img-copies")
        until(lambda: not mini.store.exists(bi_rt, NAMESPACE, bi_name), 20, "the backing image deleted")
    finally:
        for node in list(mini.store.list(core)[0]):
            mini.store.delete(core, None, node["metadata"]["name"])
