"""KubeVirt of the lab: VM -> VMI lifecycle, boots decided from real disks, the agent and the guest port."""

from __future__ import annotations

import pathlib
import socket
import time

import pytest

from tests.integration.support import disks
from tests.lab import POD_SECURITY_ENFORCE
from tests.lab.controllers.bootdisk import inspect
from tests.lab.controllers.kit import modify
from tests.lab.controllers.kubevirt import AGENT_DELAY_ENV, FORWARDED, PORT_OPEN
from tests.lab.controllers.volumes import disk_image_path

from .conftest import until

KV = "kubevirt.io"


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    folder = tmp_path_factory.mktemp("boot-disks")
    sealed = disks.windows_disk(folder / "windows.raw", disks.sealed_windows_files())["path"]
    tree = disks.ext4_tree(folder / "linux.tree")
    linux = disks.linux_disk(folder / "linux.raw", tree)["path"]
    zeros = folder / "zeros.raw"
    disks.run("truncate", "-s", "64M", zeros)
    return {
        "windows": sealed,
        "windows-qcow2": disks.qcow2(sealed, folder / "windows.qcow2", compressed=True),
        "bitlocker": disks.windows_disk(folder / "bl.raw", disks.sealed_windows_files(), bitlocker=True)[
            "path"
        ],
        "linux": linux,
        "linux-qcow2": disks.qcow2(linux, folder / "linux.qcow2"),
        "zeros": zeros,
    }


@pytest.fixture(autouse=True)
def quick_agent(monkeypatch):
    monkeypatch.setenv(AGENT_DELAY_ENV, "0.2")


def claim_with(mini, name: str, image: pathlib.Path | None) -> None:
    body = {
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    mini.create("", "persistentvolumeclaims", body)
    pvc = mini.wait("", "persistentvolumeclaims", name, lambda o: o.get("status", {}).get("phase") == "Bound")
    if image is not None:
        target = disk_image_path(mini.context, pvc)
        disks.run("cp", "--sparse=always", image, target)


def vm_body(name: str, claim: str, memory: str = "4Gi", notes: dict | None = None, **spec) -> dict:
    volume = spec.pop("volume", {"name": "boot", "persistentVolumeClaim": {"claimName": claim}})
    body = {
        "metadata": {"name": name, "annotations": notes or {}},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "domain": {
                        "devices": {"disks": [{"name": "boot", "bootOrder": 1, "disk": {"bus": "virtio"}}]},
                        "memory": {"guest": memory},
                    },
                    "volumes": [volume],
                },
            }
        },
    }
    body["spec"].update(spec or {"runStrategy": "Always"})
    return body


def cond(obj: dict, ctype: str) -> str | None:
    for item in (obj.get("status") or {}).get("conditions") or ():
        if item["type"] == ctype:
            return item["status"]
    return None


def agent_up(vmi: dict) -> bool:
    return cond(vmi, "AgentConnected") == "True"


def connect(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
        conn.settimeout(1)
        try:
            return conn.recv(64)
        except TimeoutError:
            return b""


@pytest.mark.parametrize(
    "case, boots, guest",
    [
        ("windows", True, "windows"),
        ("windows-qcow2", True, "windows"),
        ("linux", True, "linux"),
        ("linux-qcow2", True, "linux"),
        ("bitlocker", False, ""),
        ("zeros", False, ""),
    ],
)
def test_boot_check_reads_the_real_disk(images, case, boots, guest):
    result = inspect(images[case])
    assert (result.boots, result.guest) == (boots, guest), result.reason
    if not boots:
        assert result.reason.startswith("no bootable device")


def test_sealed_windows_vm_boots_and_rdp_answers(mini, images):
    claim_with(mini, "disk", images["windows-qcow2"])
    vm = mini.create(KV, "virtualmachines", vm_body("win", "disk"))
    vmi = mini.wait(KV, "virtualmachineinstances", "win", agent_up)
    owner = vmi["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "VirtualMachine",
        vm["metadata"]["uid"],
        True,
    )
    phases = [s["phase"] for s in vmi["status"]["phaseTransitionTimestamps"]]
    assert phases == ["Pending", "Scheduled", "Running"]
    assert vmi["status"]["interfaces"][0]["ipAddress"] == "127.0.0.1"
    assert vmi["status"]["guestOSInfo"]["id"] == "mswindows"
    assert vmi["status"]["memory"]["guestCurrent"] == str(4 * 2**30)
    port = int(vmi["metadata"]["annotations"][FORWARDED + "3389"])
    assert connect(port) == b""
    vm = mini.wait(
        KV, "virtualmachines", "win", lambda o: o.get("status", {}).get("printableStatus") == "Running"
    )
    assert vm["status"]["ready"] is True and cond(vm, "Ready") == "True"

    # Halted stops it: the VMI goes, the port closes, the VM reads Stopped.
    vm = mini.get(KV, "virtualmachines", "win")
    vm["spec"]["runStrategy"] = "Halted"
    mini.store.update(mini.rt(KV, "virtualmachines"), vm)
    mini.wait_gone(KV, "virtualmachineinstances", "win")
    vm = mini.wait(KV, "virtualmachines", "win", lambda o: o["status"].get("printableStatus") == "Stopped")
    assert "ready" not in vm["status"] and cond(vm, "Ready") == "False"

    def refused() -> bool:
        try:
            connect(port)
        except OSError:
            return True
        return False

    until(refused, 15, "guest port closed")


def set_pod_security(mini, level: str) -> None:
    def write(ns: dict) -> None:
        ns["metadata"].setdefault("labels", {})[POD_SECURITY_ENFORCE] = level

    modify(mini.store, mini.rt("", "namespaces"), None, mini.namespace, write)


def test_the_launcher_pod_is_admitted_by_the_api_servers_pod_security(mini, images, controller_lab):
    """A namespace enforcing baseline refuses the virt-launcher pod (the real PodSecurity admission): the
    VMI stays Pending with FailedCreate, as on a cluster; once the namespace allows privileged pods it
    starts. The lab's golden namespaces enforce baseline from the start."""
    for name in ("golden-images", "golden-images-block"):
        ns = mini.store.get(mini.rt("", "namespaces"), None, name)
        assert ns["metadata"]["labels"][POD_SECURITY_ENFORCE] == "baseline"
    set_pod_security(mini, "baseline")
    claim_with(mini, "disk", images["windows"])
    mini.create(KV, "virtualmachines", vm_body("win", "disk"))

    def refused(vmi: dict) -> bool:
        return any(c.get("reason") == "FailedCreate" for c in vmi.get("status", {}).get("conditions", []))

    vmi = mini.wait(KV, "virtualmachineinstances", "win", refused)
    assert vmi["status"]["phase"] == "Pending"
    message = next(c for c in vmi["status"]["conditions"] if c["type"] == "Synchronized")["message"]
    assert 'violates PodSecurity "baseline:latest"' in message and "SYS_NICE" in message, message
    (event,) = mini.events("win", "FailedCreate")
    assert event["type"] == "Warning" and "forbidden" in event["message"]
    pods, _ = mini.store.list(mini.rt("", "pods"), mini.namespace)
    assert pods == []
    time.sleep(1.5)  # retried, and refused again: still Pending, no second event
    assert mini.get(KV, "virtualmachineinstances", "win")["status"]["phase"] == "Pending"
    assert len(mini.events("win", "FailedCreate")) == 1

    set_pod_security(mini, "privileged")
    vmi = mini.wait(KV, "virtualmachineinstances", "win", agent_up)
    (pod,) = mini.store.list(mini.rt("", "pods"), mini.namespace)[0]
    owner = pod["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("VirtualMachineInstance", vmi["metadata"]["uid"])
    assert pod["metadata"]["labels"]["kubevirt.io"] == "virt-launcher"
    assert cond(vmi, "Synchronized") is None


def test_port_closed_knob_agent_up_port_down(mini, images):
    claim_with(mini, "disk", images["windows"])
    mini.create(KV, "virtualmachines", vm_body("win", "disk", notes={PORT_OPEN: "false"}))
    vmi = mini.wait(KV, "virtualmachineinstances", "win", agent_up)
    assert not [k for k in vmi["metadata"]["annotations"] if k.startswith(FORWARDED)]


@pytest.mark.parametrize("case", ["zeros", "bitlocker"])
def test_unbootable_disk_runs_but_agent_never_connects(mini, images, case):
    claim_with(mini, "disk", images[case])
    mini.create(KV, "virtualmachines", vm_body("broken", "disk"))
    vmi = mini.wait(
        KV, "virtualmachineinstances", "broken", lambda o: o.get("status", {}).get("phase") == "Running"
    )
    assert cond(vmi, "Ready") == "True"  # QEMU runs; the firmware finds nothing to boot
    until(lambda: mini.events("broken", "GuestNotBooting"), 15, "GuestNotBooting event")
    assert mini.events("broken", "GuestNotBooting")[0]["type"] == "Warning"
    vmi = mini.get(KV, "virtualmachineinstances", "broken")
    assert vmi["metadata"]["annotations"]["lab.goldenimage.io/boot"].startswith("no bootable device")
    time.sleep(0.8)  # well past the agent delay
    vmi = mini.get(KV, "virtualmachineinstances", "broken")
    assert cond(vmi, "AgentConnected") is None and "guestOSInfo" not in vmi["status"]


def test_too_little_memory_does_not_boot(mini, images):
    claim_with(mini, "disk", images["windows"])
    mini.create(KV, "virtualmachines", vm_body("small", "disk", memory="1Gi"))
    vmi = mini.wait(
        KV,
        "virtualmachineinstances",
        "small",
        lambda o: "lab.goldenimage.io/boot" in (o["metadata"].get("annotations") or {}),
    )
    assert "too little" in vmi["metadata"]["annotations"]["lab.goldenimage.io/boot"]


def test_linux_legacy_running_datavolume_and_missing_claim(mini, images):
    body = vm_body(
        "lin",
        "root",
        memory="1Gi",
        running=True,
        volume={"name": "boot", "dataVolume": {"name": "root"}},
    )
    body["spec"]["template"]["spec"]["domain"].pop("memory")
    body["spec"]["template"]["spec"]["domain"]["resources"] = {"requests": {"memory": "1Gi"}}
    mini.create(KV, "virtualmachines", body)
    mini.wait(
        KV,
        "virtualmachines",
        "lin",
        lambda o: o.get("status", {}).get("printableStatus") == "ErrorPvcNotFound",
    )
    assert mini.events("lin", "FailedPvcNotFound")
    claim_with(mini, "root", images["linux-qcow2"])
    vmi = mini.wait(KV, "virtualmachineinstances", "lin", agent_up, timeout=10)
    assert vmi["status"]["guestOSInfo"]["id"] == "linux"
    assert connect(int(vmi["metadata"]["annotations"][FORWARDED + "22"])).startswith(b"SSH-2.0-")
    vm = mini.get(KV, "virtualmachines", "lin")
    assert vm["status"]["runStrategy"] == "Always"
    # Deleting the VM collects its VMI.
    mini.delete(KV, "virtualmachines", "lin")
    mini.wait_gone(KV, "virtualmachineinstances", "lin")
