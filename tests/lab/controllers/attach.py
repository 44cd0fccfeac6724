"""ReadWriteOnce attachment, as kube-controller-manager's attach-detach controller enforces it (v1.36,
`pkg/controller/volume/attachdetach`), for the lab's Ceph RBD-like volumes.

An attachable volume (here the CSI volumes of `rbd.lab.goldenimage.io`, as ceph-csi's RBD driver requires
attachment) whose PersistentVolume allows neither ReadWriteMany nor ReadOnlyMany is attached to one node at
a time. A pod bound to another node that uses it and has not terminated holds it there: a new consumer on a
different node is not attached, its pod stays ContainerCreating and gets the controller's Warning
`FailedAttachVolume` "Multi-Attach error for volume "<pv>" Volume is already used by pod(s) <names>".
Upstream removes a terminated pod (phase Succeeded or Failed, or deleted with no container running) from
the controller's desired state (`util.DetermineVolumeAction`) and the kubelet unmounts its volumes, so a
completed pod releases the attachment; it still holds the claim against deletion (the real pvc-protection
controller counts every scheduled pod that names the claim, whatever its phase). The lab detaches at once,
where a cluster takes the kubelet's unmount and the detach, a few seconds.

Placement: a consumer goes to the node its spec names (`spec.nodeName`, or a `kubernetes.io/hostname`
nodeSelector); otherwise the lab's scheduler puts it on the first of NODES where no holder of its
attachable claims runs. A scheduler may place it there on a cluster of several nodes (the
default scheduler does not look at attachments for ReadWriteOnce); the lab always does, so an overlapping
use shows every time instead of one run in a few.
"""

from __future__ import annotations

from . import LabContext
from .kit import get_or_none
from .volumes import RBD_CSI_DRIVER, core_types

COMPONENT = "attachdetach-controller"
NODES = ("lab-node", "lab-node-2", "lab-node-3")
HOSTNAME_LABEL = "kubernetes.io/hostname"
ATTACHABLE_DRIVERS = (RBD_CSI_DRIVER,)
_SHARED_MODES = ("ReadWriteMany", "ReadOnlyMany")


def pod_claims(spec: dict) -> list[str]:
    """The claims a pod (or a VMI, through its DataVolumes) names."""
    out = []
    for volume in spec.get("volumes") or ():
        if volume.get("persistentVolumeClaim"):
            out.append(volume["persistentVolumeClaim"].get("claimName", ""))
        elif volume.get("dataVolume"):
            out.append(volume["dataVolume"].get("name", ""))
    return [c for c in out if c]


def requested_node(spec: dict) -> str | None:
    return spec.get("nodeName") or (spec.get("nodeSelector") or {}).get(HOSTNAME_LABEL) or None


def terminated(pod: dict) -> bool:
    """volumeutil.IsPodTerminated: finished, or deleted with no container running."""
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return True
    if not pod["metadata"].get("deletionTimestamp"):
        return False
    kinds = ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses")
    return not any("running" in (s.get("state") or {}) for k in kinds for s in status.get(k) or ())


def _exclusive_volumes(lab: LabContext, namespace: str, claims: list[str]) -> list[tuple[str, str]]:
    """(claim, PersistentVolume name) of the bound claims whose volumes attach to one node at a time."""
    rts = core_types(lab)
    out = []
    for claim in claims:
        pvc = get_or_none(lab.store, rts["pvc"], namespace, claim)
        pv_name = ((pvc or {}).get("spec") or {}).get("volumeName")
        pv = get_or_none(lab.store, rts["pv"], None, pv_name) if pv_name else None
        if pv is None:
            continue
        spec = pv.get("spec") or {}
        if (spec.get("csi") or {}).get("driver") not in ATTACHABLE_DRIVERS:
            continue
        if set(spec.get("accessModes") or ()) & set(_SHARED_MODES):
            continue  # isMultiAttachAllowed
        out.append((claim, pv_name))
    return out


def waiting_for_attach(pod: dict) -> bool:
    """Bound, but its container waits for the volume (this module's own mark)."""
    status = pod.get("status") or {}
    first = (status.get("containerStatuses") or [{}])[0]
    waiting = (first.get("state") or {}).get("waiting") or {}
    return status.get("phase") == "Pending" and waiting.get("reason") == "ContainerCreating"


def _holders(lab: LabContext, namespace: str, claim: str, uid: str) -> list[dict]:
    """The pods the volume is attached for: bound, live, and not themselves waiting for the attachment
    (the controller names the pods of the nodes the volume is attached to, not every consumer)."""
    pods = lab.store.list(core_types(lab)["pod"], namespace)[0]
    return [
        p
        for p in pods
        if p["metadata"]["uid"] != uid
        and (p.get("spec") or {}).get("nodeName")
        and claim in pod_claims(p.get("spec") or {})
        and not terminated(p)
        and not waiting_for_attach(p)
    ]


def place(lab: LabContext, namespace: str, spec: dict) -> str:
    """The node a new consumer of these volumes goes to (see the module's docstring)."""
    explicit = requested_node(spec)
    if explicit:
        return explicit
    busy = {
        p["spec"]["nodeName"]
        for claim, _pv in _exclusive_volumes(lab, namespace, pod_claims(spec))
        for p in _holders(lab, namespace, claim, "")
    }
    return next((n for n in NODES if n not in busy), NODES[0])


def multi_attach_error(lab: LabContext, pod: dict) -> str | None:
    """The controller's event message when a volume of this bound pod is held on another node, else None."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    node = spec.get("nodeName")
    for claim, pv_name in _exclusive_volumes(lab, meta["namespace"], pod_claims(spec)):
        others = [
            p["metadata"]["name"]
            for p in _holders(lab, meta["namespace"], claim, meta["uid"])
            if p["spec"]["nodeName"] != node
        ]
        if others:
            used = ", ".join(sorted(others))
            return f'Multi-Attach error for volume "{pv_name}" Volume is already used by pod(s) {used}'
    return None


__all__ = [
    "COMPONENT",
    "NODES",
    "multi_attach_error",
    "place",
    "pod_claims",
    "requested_node",
    "terminated",
    "waiting_for_attach",
]
