"""Harvester VM disks in the lab: ownerless claims from the volumeClaimTemplates annotation, Longhorn
backing-image provisioning from real image files, and the repave faults of KubeVirt VMs."""

from __future__ import annotations

import json
import pathlib
import time

import pytest

from tests.integration.support import disks
from tests.lab.controllers.bootdisk import inspect
from tests.lab.controllers.harvester import UPLOAD_PREFIX, HarvesterImageController
from tests.lab.controllers.harvester_vm import IMAGE_ID, TEMPLATES
from tests.lab.controllers.kubevirt import AGENT_DELAY_ENV, STOP_HANGS
from tests.lab.controllers.volumes import disk_image_path, volume_path
from tests.lab.front import RemoteIdentity
from tests.lab.objects import ApiError

from .conftest import until

KV = "kubevirt.io"
H = "harvesterhci.io"
PVC = "persistentvolumeclaims"
QCOW2_MAGIC = b"QFI\xfb"


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> dict[str, pathlib.Path]:
    folder = tmp_path_factory.mktemp("vm-disks")
    linux = disks.linux_disk(folder / "linux.raw", disks.ext4_tree(folder / "tree"))["path"]
    zeros = folder / "zeros.raw"
    disks.run("truncate", "-s", "64M", zeros)
    return {"linux": linux, "linux-qcow2": disks.qcow2(linux, folder / "linux.qcow2"), "zeros": zeros}


@pytest.fixture(autouse=True)
def quick_agent(monkeypatch):
    monkeypatch.setenv(AGENT_DELAY_ENV, "0.2")


def upload_image(mini, name: str, data: pathlib.Path | None) -> dict:
    """A Harvester upload image; its file is sent now unless `data` is None."""
    rt = mini.rt(H, "virtualmachineimages", "v1beta1")
    body = {"metadata": {"name": name, "namespace": mini.namespace}, "spec": {"displayName": name}}
    body["spec"]["sourceType"] = "upload"
    mini.store.create(rt, body)
    image = wait_image(mini, name, lambda o: (o.get("status") or {}).get("storageClassName"))
    if data is not None:
        send(mini, name, data)
        image = wait_image(mini, name, imported)
    return image


def send(mini, name: str, data: pathlib.Path) -> None:
    controller = next(c for c in mini.controllers if isinstance(c, HarvesterImageController))
    path = f"{UPLOAD_PREFIX}{mini.namespace}/{name}"
    admin = RemoteIdentity("lab-admin", ["system:masters"], mini.store)
    answer = controller.upload("POST", path, {"action": "upload"}, {}, data.read_bytes(), admin)
    assert answer[0] == 200


def imported(image: dict) -> bool:
    return cond(image, "Imported") == "True"


def wait_image(mini, name, check, timeout=15) -> dict:
    rt = mini.rt(H, "virtualmachineimages", "v1beta1")
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        image = mini.store.get(rt, mini.namespace, name)
        if check(image):
            return image
        time.sleep(0.05)
    raise AssertionError(f"image {name}: {image.get('status')}")


def cond(obj: dict, ctype: str, field: str = "status") -> str | None:
    for item in (obj.get("status") or {}).get("conditions") or ():
        if item["type"] == ctype:
            return item.get(field)
    return None


def template(name: str, storage_class: str, size: str, image: dict | None = None, mode="Block") -> dict:
    meta: dict = {"name": name}
    if image is not None:
        meta["annotations"] = {IMAGE_ID: f"{image['metadata']['namespace']}/{image['metadata']['name']}"}
    return {
        "metadata": meta,
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": size}},
            "volumeMode": mode,
            "storageClassName": storage_class,
        },
    }


def vm_body(name: str, templates: list[dict], os_claim: str, data_claim: str | None = None) -> dict:
    volumes = [{"name": "rootdisk", "persistentVolumeClaim": {"claimName": os_claim}}]
    devices = [{"name": "rootdisk", "bootOrder": 1, "disk": {"bus": "virtio"}}]
    if data_claim:
        volumes.append({"name": "pgdata", "persistentVolumeClaim": {"claimName": data_claim}})
        devices.append({"name": "pgdata", "disk": {"bus": "virtio"}})
    return {
        "metadata": {"name": name, "annotations": {TEMPLATES: json.dumps(templates)}},
        "spec": {
            "runStrategy": "Always",
            "template": {
                "spec": {
                    "domain": {"devices": {"disks": devices}, "memory": {"guest": "1Gi"}},
                    "volumes": volumes,
                }
            },
        },
    }


def agent_up(vmi: dict) -> bool:
    return cond(vmi, "AgentConnected") == "True"


def running(vmi: dict) -> bool:
    return (vmi.get("status") or {}).get("phase") == "Running"


def bound(pvc: dict) -> bool:
    return (pvc.get("status") or {}).get("phase") == "Bound"


def booting_vm(mini, images, name: str = "db") -> dict:
    image = upload_image(mini, "ubuntu-" + name, images["linux-qcow2"])
    templates = [
        template(f"{name}-os-v1", image["status"]["storageClassName"], "64Mi", image),
        template(f"{name}-pgdata", "lab-fs", "16Mi", mode="Filesystem"),
    ]
    mini.create(KV, "virtualmachines", vm_body(name, templates, f"{name}-os-v1", f"{name}-pgdata"))
    mini.wait(KV, "virtualmachineinstances", name, agent_up)
    return image


def test_annotation_claims_are_ownerless_boot_from_the_image_and_outlive_the_vm(mini, images):
    image = booting_vm(mini, images)
    os_pvc = mini.wait("", PVC, "db-os-v1", bound)
    data_pvc = mini.wait("", PVC, "db-pgdata", bound)
    for pvc in (os_pvc, data_pvc):
        assert not pvc["metadata"].get("ownerReferences")
    assert os_pvc["metadata"]["annotations"][IMAGE_ID] == f"{mini.namespace}/ubuntu-db"
    assert os_pvc["spec"]["storageClassName"] == image["status"]["storageClassName"]
    # Longhorn presents a raw disk: the qcow2 image was laid out raw, sparse, at the claim's size.
    disk = disk_image_path(mini.context, os_pvc)
    assert disk.read_bytes()[:4] != QCOW2_MAGIC
    assert disk.stat().st_size == 64 * 2**20 and disk.stat().st_blocks * 512 < 64 * 2**20
    assert disk.read_bytes() == images["linux"].read_bytes()
    assert inspect(disk).guest == "linux"

    # Deleting the VM collects its VMI, never its disks.
    marker = volume_path(mini.context, data_pvc) / "PG_VERSION"
    marker.write_text("16\n")
    mini.delete(KV, "virtualmachines", "db")
    mini.wait_gone(KV, "virtualmachineinstances", "db")
    time.sleep(0.5)
    assert mini.exists("", PVC, "db-os-v1") and mini.exists("", PVC, "db-pgdata")

    # A new VM declaring the same names gets the old disks, data included.
    os_template = template("db-os-v1", image["status"]["storageClassName"], "64Mi", image)
    data_template = template("db-pgdata", "lab-fs", "16Mi", mode="Filesystem")
    mini.create(KV, "virtualmachines", vm_body("db", [os_template, data_template], "db-os-v1", "db-pgdata"))
    mini.wait(KV, "virtualmachineinstances", "db", agent_up)
    again = mini.get("", PVC, "db-pgdata")
    assert again["metadata"]["uid"] == data_pvc["metadata"]["uid"]
    assert (volume_path(mini.context, again) / "PG_VERSION").read_text() == "16\n"


def test_claim_waits_for_the_image_and_its_import(mini, images):
    # The image does not exist: no claim. (Another name than the one created below, so the controller
    # cannot make a claim from this template in the moment between the image's creation and the update.)
    ghost = {"metadata": {"namespace": mini.namespace, "name": "never"}}
    os_template = template("vm-os", "lh-unknown", "64Mi", ghost)
    mini.create(KV, "virtualmachines", vm_body("vm", [os_template], "vm-os"))
    time.sleep(0.6)
    assert not mini.exists("", PVC, "vm-os")

    # It exists but is not imported: the claim is created and stays Pending, saying why.
    image = upload_image(mini, "later", None)
    storage_class = image["status"]["storageClassName"]
    vm = mini.get(KV, "virtualmachines", "vm")
    real = template("vm-os", storage_class, "64Mi", image)
    vm["metadata"]["annotations"][TEMPLATES] = json.dumps([real])
    mini.store.update(mini.rt(KV, "virtualmachines"), vm)
    mini.wait("", PVC, "vm-os", lambda o: (o.get("status") or {}).get("phase") == "Pending")
    until(lambda: mini.events("vm-os", "ProvisioningFailed"), 15, "ProvisioningFailed event")
    event = mini.events("vm-os", "ProvisioningFailed")[-1]
    assert "is not ready" in event["message"] and f"{mini.namespace}-later" in event["message"]
    assert event["type"] == "Warning"

    # A claim smaller than the image is refused as Longhorn refuses it.
    small = template("small-os", storage_class, "16Mi", image)
    mini.create("", PVC, {"metadata": small["metadata"], "spec": small["spec"]})

    send(mini, "later", images["linux-qcow2"])
    mini.wait("", PVC, "vm-os", bound, timeout=10)
    mini.wait(KV, "virtualmachineinstances", "vm", agent_up, timeout=10)
    until(lambda: any("smaller than" in e["message"] for e in mini.events("small-os")), 15, "size refused")
    assert not bound(mini.get("", PVC, "small-os"))


def test_webhook_refuses_a_bad_annotation_and_a_shrinking_disk(mini):
    rt = mini.rt(KV, "virtualmachines")
    body = vm_body("bad", [], "x")
    body["metadata"]["annotations"][TEMPLATES] = "[{not json"
    with pytest.raises(ApiError) as err:
        mini.create(KV, "virtualmachines", body)
    assert err.value.code == 422 and "volumeClaimTemplates annotation is invalid" in err.value.message
    body["metadata"]["annotations"][TEMPLATES] = json.dumps([{"metadata": {}, "spec": {}}])
    with pytest.raises(ApiError, match="PVC name is required"):
        mini.create(KV, "virtualmachines", body)

    good = vm_body("good", [template("good-data", "lab-fs", "32Mi", mode="Filesystem")], "good-data")
    good["spec"]["runStrategy"] = "Halted"
    mini.create(KV, "virtualmachines", good)
    vm = mini.get(KV, "virtualmachines", "good")
    vm["metadata"]["annotations"][TEMPLATES] = json.dumps(
        [template("good-data", "lab-fs", "16Mi", mode="Filesystem")]
    )
    with pytest.raises(ApiError, match="can't be less than previous value"):
        mini.store.update(rt, vm)


def test_stop_hangs_until_the_fault_is_cleared(mini, images):
    booting_vm(mini, images)
    key = f"VirtualMachine/{mini.namespace}/db"
    mini.faults.set_object(key, "stop-hangs")
    vm = mini.get(KV, "virtualmachines", "db")
    vm["spec"]["runStrategy"] = "Halted"
    mini.store.update(mini.rt(KV, "virtualmachines"), vm)
    vmi = mini.wait(KV, "virtualmachineinstances", "db", lambda o: cond(o, "Stopping") == "True")
    assert running(vmi) and cond(vmi, "Stopping", "message") == STOP_HANGS
    time.sleep(1.2)  # past a resync: still there
    assert running(mini.get(KV, "virtualmachineinstances", "db"))
    vm = mini.wait(KV, "virtualmachines", "db", lambda o: o["status"].get("printableStatus") == "Stopping")
    assert mini.events("db", "ShutdownHangs")
    mini.faults.set_object(key, None)
    mini.wait_gone(KV, "virtualmachineinstances", "db")


def test_no_agent_keeps_a_booting_guest_silent(mini, images):
    mini.faults.set_object(f"VirtualMachine/{mini.namespace}/db", "no-agent")
    image = upload_image(mini, "ubuntu-db", images["linux-qcow2"])
    os_template = template("db-os-v1", image["status"]["storageClassName"], "64Mi", image)
    mini.create(KV, "virtualmachines", vm_body("db", [os_template], "db-os-v1"))
    vmi = mini.wait(KV, "virtualmachineinstances", "db", running)
    assert vmi["metadata"]["annotations"]["lab.goldenimage.io/boot"].startswith("linux")
    time.sleep(0.8)  # well past the agent delay
    assert cond(mini.get(KV, "virtualmachineinstances", "db"), "AgentConnected") is None
    mini.faults.set_object(f"VirtualMachine/{mini.namespace}/db", None)
    mini.wait(KV, "virtualmachineinstances", "db", agent_up, timeout=5)


def test_swap_conflict_refuses_spec_changes_but_not_stop_and_start(mini):
    rt = mini.rt(KV, "virtualmachines")
    body = vm_body("db", [template("db-os-v1", "lab-fs", "16Mi")], "db-os-v1")
    body["spec"]["runStrategy"] = "Halted"
    mini.create(KV, "virtualmachines", body)
    mini.faults.set_object(f"VirtualMachine/{mini.namespace}/db", "swap-conflict")
    vm = mini.get(KV, "virtualmachines", "db")
    vm["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] = "db-os-v2"
    with pytest.raises(ApiError) as err:
        mini.store.update(rt, vm)
    assert err.value.code == 409 and "swap-conflict" in err.value.message
    patch = {"spec": {"template": {"metadata": {"labels": {"x": "y"}}}}}
    with pytest.raises(ApiError) as err:
        mini.store.patch(rt, mini.namespace, "db", "application/merge-patch+json", patch)
    assert err.value.code == 409
    started = mini.store.patch(
        rt, mini.namespace, "db", "application/merge-patch+json", {"spec": {"runStrategy": "Always"}}
    )
    assert started["spec"]["runStrategy"] == "Always"
    noted = mini.store.patch(
        rt, mini.namespace, "db", "application/merge-patch+json", {"metadata": {"annotations": {"a": "b"}}}
    )
    assert noted["metadata"]["annotations"]["a"] == "b"
    mini.faults.set_object(f"VirtualMachine/{mini.namespace}/db", None)
    for _ in range(20):  # the started VM's status is being written too: a stale read conflicts, read again
        vm = mini.get(KV, "virtualmachines", "db")
        vm["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] = "db-os-v2"
        try:
            swapped = mini.store.update(rt, vm)
            break
        except ApiError as exc:
            if exc.code != 409 or "swap-conflict" in exc.message:
                raise
    assert swapped["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"] == {
        "claimName": "db-os-v2"
    }
