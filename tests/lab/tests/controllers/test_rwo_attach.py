"""ReadWriteOnce attachment on the lab's Ceph RBD-like class (controllers/attach.py), on the real API server:
a consumer on another node waits with the attach-detach controller's Multi-Attach error while a live pod
holds the volume; a completed pod releases the attachment but still holds the claim against deletion."""

from __future__ import annotations

from tests.lab.controllers.attach import NODES, waiting_for_attach

from .conftest import until
from .test_job_runner import claim, job_body, job_pods
from .test_kubevirt import vm_body


def _rbd_claim(mini, name: str) -> str:
    mini.create("", "persistentvolumeclaims", claim(name, "64Mi", sc="lab-rbd"))
    pvc = mini.wait(
        "", "persistentvolumeclaims", name, lambda c: (c.get("status") or {}).get("phase") == "Bound"
    )
    return pvc["spec"]["volumeName"]


def _job(mini, name: str, pvc: str, command: list[str]) -> dict:
    body = job_body(
        name,
        command,
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": pvc}}],
        container={"volumeMounts": [{"name": "data", "mountPath": "/data"}]},
    )
    return mini.create("batch", "jobs", body)


def _phase(obj: dict) -> str:
    return (obj.get("status") or {}).get("phase") or ""


def _launcher(mini, vm: str) -> dict:
    pods, _ = mini.store.list(
        mini.rt("", "pods"), mini.namespace, label_selector=f"vm.kubernetes.io/name={vm}"
    )
    pods = (
        pods
        or mini.store.list(mini.rt("", "pods"), mini.namespace, label_selector=f"vm.kubevirt.io/name={vm}")[0]
    )
    assert len(pods) == 1, pods
    return pods[0]


def test_a_running_pod_keeps_the_volume_from_a_vm_on_another_node_until_it_is_gone(mini):
    pv = _rbd_claim(mini, "disk")
    _job(mini, "holder", "disk", ["sleep", "60"])
    until(lambda: [_phase(p) for p in job_pods(mini, "holder")] == ["Running"], 15, "holder running")
    holder = job_pods(mini, "holder")[0]
    assert holder["spec"]["nodeName"] == NODES[0]

    mini.create("kubevirt.io", "virtualmachines", vm_body("vm", "disk"))
    vmi = mini.wait("kubevirt.io", "virtualmachineinstances", "vm", lambda v: _phase(v) == "Scheduling")
    launcher = _launcher(mini, "vm")
    assert launcher["spec"]["nodeName"] == vmi["status"]["nodeName"] != NODES[0]
    waiting = launcher["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting["reason"] == "ContainerCreating"
    event = mini.events(launcher["metadata"]["name"], "FailedAttachVolume")[-1]
    assert event["type"] == "Warning" and event["source"]["component"] == "attachdetach-controller"
    expected = (
        f'Multi-Attach error for volume "{pv}" Volume is already used by pod(s) {holder["metadata"]["name"]}'
    )
    assert event["message"] == expected

    mini.delete("batch", "jobs", "holder")  # its pod with it (a pod deleted alone is replaced by the Job)
    mini.wait("kubevirt.io", "virtualmachineinstances", "vm", lambda v: _phase(v) == "Running", timeout=30)
    assert _launcher(mini, "vm")["status"]["phase"] == "Running"


def test_a_completed_pod_releases_the_attachment_but_holds_the_claim_until_it_is_deleted(mini):
    _rbd_claim(mini, "disk")
    _job(mini, "done", "disk", ["true"])
    until(lambda: [_phase(p) for p in job_pods(mini, "done")] == ["Succeeded"], 15, "pod succeeded")
    pod = job_pods(mini, "done")[0]

    # The attach-detach controller drops a terminated pod's volumes (the kubelet unmounts them): the VM
    # attaches, here on the node the pod ran on or any other.
    mini.create("kubevirt.io", "virtualmachines", vm_body("vm", "disk"))
    mini.wait("kubevirt.io", "virtualmachineinstances", "vm", lambda v: _phase(v) == "Running", timeout=20)
    assert not mini.events(_launcher(mini, "vm")["metadata"]["name"], "FailedAttachVolume", wait=0)

    # pvc-protection (kube-controller-manager's own) counts the completed pod, not only the VM's.
    mini.delete("kubevirt.io", "virtualmachines", "vm")
    mini.wait_gone("kubevirt.io", "virtualmachineinstances", "vm")
    until(
        lambda: (
            not mini.store.list(
                mini.rt("", "pods"), mini.namespace, label_selector="kubevirt.io=virt-launcher"
            )[0]
        ),
        15,
        "launcher gone",
    )
    mini.delete("", "persistentvolumeclaims", "disk")
    held = mini.wait(
        "", "persistentvolumeclaims", "disk", lambda c: bool(c["metadata"].get("deletionTimestamp"))
    )
    assert "kubernetes.io/pvc-protection" in held["metadata"]["finalizers"]
    until(lambda: mini.exists("", "persistentvolumeclaims", "disk"), 3, "claim still there")
    mini.delete("", "pods", pod["metadata"]["name"])
    mini.wait_gone("", "persistentvolumeclaims", "disk", timeout=30)


def test_a_running_vm_keeps_the_volume_from_a_job_pod_and_the_same_node_shares_it(mini):
    pv = _rbd_claim(mini, "disk")
    mini.create("kubevirt.io", "virtualmachines", vm_body("vm", "disk"))
    vmi = mini.wait(
        "kubevirt.io", "virtualmachineinstances", "vm", lambda v: _phase(v) == "Running", timeout=20
    )
    launcher = _launcher(mini, "vm")

    _job(mini, "reader", "disk", ["true"])
    until(lambda: [waiting_for_attach(p) for p in job_pods(mini, "reader")] == [True], 15, "reader waiting")
    reader = job_pods(mini, "reader")[0]
    assert _phase(reader) == "Pending"
    event = mini.events(reader["metadata"]["name"], "FailedAttachVolume")[-1]
    assert event["message"].endswith(
        f'"{pv}" Volume is already used by pod(s) {launcher["metadata"]["name"]}'
    )
    assert reader["spec"]["nodeName"] != vmi["status"]["nodeName"]

    # A pod the user pins to the VM's node shares the attachment, as RWO allows on one node.
    body = job_body(
        "pinned",
        ["true"],
        nodeSelector={"kubernetes.io/hostname": vmi["status"]["nodeName"]},
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "disk"}}],
        container={"volumeMounts": [{"name": "data", "mountPath": "/data"}]},
    )
    mini.create("batch", "jobs", body)
    until(lambda: [_phase(p) for p in job_pods(mini, "pinned")] == ["Succeeded"], 15, "pinned pod ran")

    mini.delete("kubevirt.io", "virtualmachines", "vm")
    until(lambda: [_phase(p) for p in job_pods(mini, "reader")] == ["Succeeded"], 20, "reader ran")
