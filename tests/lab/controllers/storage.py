"""Storage controllers of the lab: PVC binding to real files, restores and clones, reclaim.

Claims bind as Kubernetes binds them: to a matching static PersistentVolume, or through a dynamically
provisioned one `pvc-<uid>` whose data is a real file or directory in the volume store (volumes.py).
WaitForFirstConsumer classes wait for a Pod, a Job or any caller of `ensure_bound`. VolumeSnapshots are
run by the upstream snapshot controller with the CSI driver side of snapshots.py; this module lists that
driver side too so the lab runs all storage controllers.

A Longhorn class with `parameters.backingImage` (the `lh-...` class of a Harvester image) provisions
from the image's file: a sparse raw copy (qcow2 is converted), so the volume reads as the raw disk
Longhorn presents to a VM. An image that is not imported yet keeps the claim Pending with an Event.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import threading
from dataclasses import dataclass

from ..objects import ApiError, ResourceType
from . import Controller, LabContext
from .kit import CORE, SNAPSHOT_GROUP, condition, get_or_none, modify, record_event
from .snapshots import CsiSnapshotDriver
from .volumes import (
    HOSTPATH_CSI_DRIVER,
    copy_data,
    core_types,
    disk_image_path,
    fill_volume,
    format_quantity,
    parse_quantity,
    remove_data,
    snapshot_data,
    snapshot_type,
    volume_path,
    volumes_dir,
)

DRIVER_COMPONENT = "lab-external-provisioner"
BINDER_COMPONENT = "persistentvolume-controller"
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
BETA_DEFAULT_CLASS_ANNOTATION = "storageclass.beta.kubernetes.io/is-default-class"
MODE_CHANGE_ANNOTATION = "snapshot.storage.kubernetes.io/allow-volume-mode-change"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
# What the API server accepts as a PersistentVolume's `spec.csi.driver` (ValidateCSIDriverName).
_CSI_DRIVER_NAME = re.compile(r"^[a-zA-Z0-9][-a-zA-Z0-9_.]{0,61}[a-zA-Z0-9]$")
LONGHORN = "driver.longhorn.io"
IMAGE_ID_ANNOTATION = "harvesterhci.io/imageId"
QCOW2_MAGIC = b"QFI\xfb"
WFFC_MESSAGE = "waiting for first consumer to be created before binding"

# Bindings run from several controller threads (and the Job runner); one lock keeps them from racing.
_bind_lock = threading.RLock()

# ------------------------------------------------------------------------------ binding


class _NotYet(Exception):
    """The claim cannot bind yet; carries the Event a real controller would record."""

    def __init__(self, event_type: str | None, reason: str, message: str, retry: float | None = 1.0):
        super().__init__(message)
        self.event_type, self.reason, self.message, self.retry = event_type, reason, message, retry


@dataclass
class _Seed:
    path: pathlib.Path
    mode: str
    backing_image: bool = False  # a disk image file to lay out as the volume's disk


def ensure_bound(lab: LabContext, namespace: str, claim: str, consumer: bool = True) -> dict:
    """Bind the claim now if it can be bound and return it (status.phase Bound, or still Pending).

    `consumer` says a Pod, Job, VM or import is about to use the claim, which is what releases a
    WaitForFirstConsumer class. Safe to call from any thread and repeatedly.
    """
    pvc, _ = _bind(lab, namespace, claim, consumer)
    return pvc


def _bind(lab: LabContext, namespace: str, name: str, consumer: bool) -> tuple[dict, float | None]:
    rts = core_types(lab)
    with _bind_lock:
        pvc = lab.store.get(rts["pvc"], namespace, name)
        if pvc["metadata"].get("deletionTimestamp"):
            return pvc, None
        spec = pvc.get("spec") or {}
        if spec.get("volumeName"):
            if (pvc.get("status") or {}).get("phase") == "Bound":
                return pvc, None
            return _bind_prebound(lab, pvc)
        try:
            pvc = _bind_new(lab, pvc, consumer)
        except _NotYet as wait:
            pvc = _mark_pending(lab, pvc, wait)
            return pvc, wait.retry
        return pvc, None


def _mark_pending(lab: LabContext, pvc: dict, wait: _NotYet) -> dict:
    rt = core_types(lab)["pvc"]
    meta = pvc["metadata"]

    def pending(obj: dict) -> bool:
        status = obj.setdefault("status", {})
        if status.get("phase") == "Pending":
            return False
        status["phase"] = "Pending"
        return True

    pvc = modify(lab.store, rt, meta["namespace"], meta["name"], pending, status=True)
    if wait.event_type:
        record_event(lab.store, pvc, wait.event_type, wait.reason, wait.message, BINDER_COMPONENT)
    return pvc


def _storage_class(lab: LabContext, pvc: dict) -> dict | None:
    """The claim's StorageClass; None for an explicit "" (no class). Adopts the default class for a
    claim that names none, as the DefaultStorageClass admission plugin and retroactive assignment do."""
    rts = core_types(lab)
    spec = pvc.get("spec") or {}
    if "storageClassName" in spec and spec["storageClassName"] is not None:
        if spec["storageClassName"] == "":
            return None
        try:
            return lab.store.get(rts["sc"], None, spec["storageClassName"])
        except ApiError as exc:
            if exc.code != 404:
                raise
            msg = f'storageclass.storage.k8s.io "{spec["storageClassName"]}" not found'
            raise _NotYet("Warning", "ProvisioningFailed", msg, 2.0) from exc
    defaults = []
    for sc in lab.store.list(rts["sc"])[0]:
        notes = sc["metadata"].get("annotations") or {}
        if "true" in (notes.get(DEFAULT_CLASS_ANNOTATION), notes.get(BETA_DEFAULT_CLASS_ANNOTATION)):
            defaults.append(sc)
    if not defaults:
        msg = "no persistent volumes available for this claim and no storage class is set"
        raise _NotYet("Normal", "FailedBinding", msg, 2.0)
    chosen = max(defaults, key=lambda sc: (sc["metadata"]["creationTimestamp"], sc["metadata"]["name"]))
    meta = pvc["metadata"]

    def adopt(obj: dict) -> bool:
        if (obj.get("spec") or {}).get("storageClassName") is not None:
            return False
        obj.setdefault("spec", {})["storageClassName"] = chosen["metadata"]["name"]
        return True

    modify(lab.store, core_types(lab)["pvc"], meta["namespace"], meta["name"], adopt)
    return chosen


def _bind_new(lab: LabContext, pvc: dict, consumer: bool) -> dict:
    sc = _storage_class(lab, pvc)
    class_name = sc["metadata"]["name"] if sc else ""
    waits = sc is not None and sc.get("volumeBindingMode") == "WaitForFirstConsumer"
    if waits and not consumer:
        raise _NotYet("Normal", "WaitForFirstConsumer", WFFC_MESSAGE, None)
    if sc is None or sc.get("provisioner") == NO_PROVISIONER:
        pv = _match_static(lab, pvc, class_name)
        if pv is None:
            msg = (
                "no persistent volumes available for this claim and no storage class is set"
                if sc is None
                else f'no persistent volumes available for this claim and storage class "{class_name}" '
                "is not dynamically provisioned"
            )
            raise _NotYet("Normal", "FailedBinding", msg, 2.0)
        return _bind_pair(lab, pvc, pv, by_controller=True)
    return _provision(lab, pvc, sc)


def _requested(pvc: dict) -> int:
    storage = (((pvc.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage")
    if storage is None:
        raise _NotYet(
            "Warning", "ProvisioningFailed", "spec.resources.requests.storage: Required value", None
        )
    try:
        return parse_quantity(storage)
    except ValueError as exc:
        raise _NotYet("Warning", "ProvisioningFailed", str(exc), None) from exc


def _match_static(lab: LabContext, pvc: dict, class_name: str) -> dict | None:
    """The smallest Available PersistentVolume that satisfies the claim, preferring one pre-bound to it."""
    spec, meta = pvc.get("spec") or {}, pvc["metadata"]
    want = _requested(pvc)
    modes = set(spec.get("accessModes") or [])
    fits = []
    for pv in lab.store.list(core_types(lab)["pv"])[0]:
        pspec = pv.get("spec") or {}
        ref = pspec.get("claimRef")
        if ref and (ref.get("namespace"), ref.get("name")) != (meta["namespace"], meta["name"]):
            continue
        if ref and ref.get("uid") and ref["uid"] != meta["uid"]:
            continue
        if (pv.get("status") or {}).get("phase") in ("Released", "Failed"):
            continue
        if (pspec.get("storageClassName") or "") != class_name:
            continue
        if pspec.get("volumeMode", "Filesystem") != spec.get("volumeMode", "Filesystem"):
            continue
        if not modes <= set(pspec.get("accessModes") or []):
            continue
        size = parse_quantity((pspec.get("capacity") or {}).get("storage", "0"))
        if size >= want:
            fits.append((0 if ref else 1, size, pv["metadata"]["name"], pv))
    return min(fits)[3] if fits else None


def _bind_prebound(lab: LabContext, pvc: dict) -> tuple[dict, float | None]:
    """A claim that names its volume binds to it once the volume exists and is free for it."""
    meta = pvc["metadata"]
    name = pvc["spec"]["volumeName"]
    try:
        pv = lab.store.get(core_types(lab)["pv"], None, name)
    except ApiError as exc:
        if exc.code != 404:
            raise
        pvc = _mark_pending(lab, pvc, _NotYet("Warning", "FailedBinding", f'volume "{name}" not found', 2.0))
        return pvc, 2.0
    ref = (pv.get("spec") or {}).get("claimRef") or {}
    if ref and (ref.get("namespace"), ref.get("name")) != (meta["namespace"], meta["name"]):
        msg = f'volume "{name}" already bound to a different claim.'
        return _mark_pending(lab, pvc, _NotYet("Warning", "FailedBinding", msg, 2.0)), 2.0
    return _bind_pair(lab, pvc, pv, by_controller=False), None


def _claim_ref(pvc: dict) -> dict:
    meta = pvc["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "namespace": meta["namespace"],
        "name": meta["name"],
        "uid": meta["uid"],
        "resourceVersion": meta.get("resourceVersion", ""),
    }


def _bind_pair(lab: LabContext, pvc: dict, pv: dict, by_controller: bool) -> dict:
    """Bind claim and volume both ways, in the order the PV controller does: volume first."""
    rts, store = core_types(lab), lab.store
    meta = pvc["metadata"]
    pv_name = pv["metadata"]["name"]

    def claim_volume(obj: dict) -> None:
        if not obj["spec"].get("claimRef", {}).get("uid"):
            obj["spec"]["claimRef"] = _claim_ref(pvc)
            if by_controller:
                obj["metadata"].setdefault("annotations", {})["pv.kubernetes.io/bound-by-controller"] = "yes"

    pv = modify(store, rts["pv"], None, pv_name, claim_volume)
    modify(
        store,
        rts["pv"],
        None,
        pv_name,
        lambda o: o.setdefault("status", {}).update(phase="Bound"),
        status=True,
    )

    def bind_claim(obj: dict) -> None:
        obj["spec"]["volumeName"] = pv_name
        notes = obj["metadata"].setdefault("annotations", {})
        notes["pv.kubernetes.io/bind-completed"] = "yes"
        if by_controller:
            notes["pv.kubernetes.io/bound-by-controller"] = "yes"

    modify(store, rts["pvc"], meta["namespace"], meta["name"], bind_claim)
    pspec = pv["spec"]

    def bound(obj: dict) -> None:
        obj["status"] = {
            "phase": "Bound",
            "accessModes": list(pspec.get("accessModes") or []),
            "capacity": dict(pspec.get("capacity") or {}),
        }

    return modify(store, rts["pvc"], meta["namespace"], meta["name"], bound, status=True)


def _provision(lab: LabContext, pvc: dict, sc: dict) -> dict:
    """Dynamic provisioning: a new volume file, a PersistentVolume `pvc-<uid>` for it, and the binding."""
    rts, store = core_types(lab), lab.store
    meta, spec = pvc["metadata"], pvc.get("spec") or {}
    want = _requested(pvc)
    mode = spec.get("volumeMode") or "Filesystem"
    seed = _data_source(lab, pvc, want, mode, sc)
    pv_name = f"pvc-{meta['uid']}"
    provisioner = sc.get("provisioner", "")

    def announce(obj: dict) -> bool:
        notes = obj["metadata"].setdefault("annotations", {})
        if notes.get("volume.kubernetes.io/storage-provisioner") == provisioner:
            return False
        notes["volume.kubernetes.io/storage-provisioner"] = provisioner
        notes["volume.beta.kubernetes.io/storage-provisioner"] = provisioner
        return True

    pvc = modify(store, rts["pvc"], meta["namespace"], meta["name"], announce)
    claim = f"{meta['namespace']}/{meta['name']}"
    record_event(
        store,
        pvc,
        "Normal",
        "Provisioning",
        f'External provisioner is provisioning volume for claim "{claim}"',
        DRIVER_COMPONENT,
    )
    if store.exists(rts["pv"], None, pv_name):
        pv = store.get(rts["pv"], None, pv_name)
    else:
        path = volumes_dir(lab) / (f"{pv_name}.img" if mode == "Block" else pv_name)
        remove_data(lab, path)  # left over from an attempt that failed half way
        try:
            if seed is not None and seed.backing_image:
                _fill_from_image(path, mode, want, seed.path)
            else:
                fill_volume(path, mode, want, seed.path if seed else None)
        except OSError as exc:
            remove_data(lab, path)
            raise _NotYet("Warning", "ProvisioningFailed", f"failed to provision volume: {exc}", 5.0) from exc
        pv_body = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv_name, "annotations": {"pv.kubernetes.io/provisioned-by": provisioner}},
            "spec": {
                "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
                "capacity": {"storage": format_quantity(want)},
                "claimRef": _claim_ref(pvc),
                "persistentVolumeReclaimPolicy": sc.get("reclaimPolicy") or "Delete",
                "storageClassName": sc["metadata"]["name"],
                "volumeMode": mode,
            },
        }
        # A CSI volume, as an external-provisioner's: nothing on the PersistentVolume says where its bytes
        # are, so only a pod (here, the lab's kubelet) reaches them; the lab keeps them in its volume store.
        # The driver is the class's provisioner, as a CSI provisioner names its driver (lab-rbd's is the
        # attachable rbd.lab.goldenimage.io), or the lab's hostpath driver for a name no CSI driver can have.
        driver = provisioner if _CSI_DRIVER_NAME.match(provisioner) else HOSTPATH_CSI_DRIVER
        pv_body["spec"]["csi"] = {"driver": driver, "volumeHandle": "lab-" + meta["uid"]}
        if sc.get("mountOptions"):
            pv_body["spec"]["mountOptions"] = list(sc["mountOptions"])
        pv = store.create(rts["pv"], pv_body)
    pvc = _bind_pair(lab, pvc, pv, by_controller=True)
    record_event(
        store,
        pvc,
        "Normal",
        "ProvisioningSucceeded",
        f"Successfully provisioned volume {pv_name}",
        DRIVER_COMPONENT,
    )
    return pvc


def _data_source(lab: LabContext, pvc: dict, want: int, mode: str, sc: dict) -> _Seed | None:
    spec = pvc.get("spec") or {}
    source = spec.get("dataSourceRef") or spec.get("dataSource")
    if sc.get("provisioner") == LONGHORN and (sc.get("parameters") or {}).get("backingImage"):
        return _backing_image_seed(lab, want, sc)
    if not source:
        return None
    kind, group = source.get("kind"), source.get("apiGroup") or ""
    name = source.get("name", "")
    if kind == "VolumeSnapshot" and group == SNAPSHOT_GROUP:
        return _snapshot_seed(lab, pvc, source, want, mode)
    if kind == "PersistentVolumeClaim" and group == "":
        return _clone_seed(lab, pvc, name, want, mode, sc)
    # Any other kind is a volume populator's business (CDI, for one); the provisioner leaves it alone.
    raise _NotYet(None, "", f"waiting for a volume populator for {kind} {name}", 2.0)


def _snapshot_seed(lab: LabContext, pvc: dict, source: dict, want: int, mode: str) -> _Seed:
    name = source.get("name", "")
    namespace = source.get("namespace") or pvc["metadata"]["namespace"]
    prefix = f"error getting handle for DataSource Type VolumeSnapshot by Name {name}"
    try:
        vs = lab.store.get(snapshot_type(lab, "volumesnapshots"), namespace, name)
    except ApiError as exc:
        msg = f"{prefix}: error getting snapshot {name} from api server: {exc.message}"
        raise _NotYet("Warning", "ProvisioningFailed", msg) from exc
    status = vs.get("status") or {}
    if not status.get("readyToUse"):
        raise _NotYet("Warning", "ProvisioningFailed", f"{prefix}: snapshot {name} is not Ready")
    content_name = status.get("boundVolumeSnapshotContentName", "")
    try:
        content = lab.store.get(snapshot_type(lab, "volumesnapshotcontents"), None, content_name)
    except ApiError as exc:
        msg = f"{prefix}: error getting snapshot content {content_name} from api server: {exc.message}"
        raise _NotYet("Warning", "ProvisioningFailed", msg) from exc
    handle = (content.get("status") or {}).get("snapshotHandle") or ""
    found = snapshot_data(lab, handle)
    if found is None:
        msg = f"{prefix}: data of snapshot handle {handle!r} is missing"
        raise _NotYet("Warning", "ProvisioningFailed", msg, 5.0)
    path, info = found
    size = parse_quantity(status.get("restoreSize") or info.get("size") or 0)
    if want < size:
        msg = f"requested volume size {want} is less than the size {size} for the source snapshot {name}"
        raise _NotYet("Warning", "ProvisioningFailed", msg, 5.0)
    source_mode = (
        (content.get("spec") or {}).get("sourceVolumeMode") or info.get("volumeMode") or "Filesystem"
    )
    allowed = (content["metadata"].get("annotations") or {}).get(MODE_CHANGE_ANNOTATION) == "true"
    if source_mode != mode and not allowed:
        meta = pvc["metadata"]
        msg = (
            f"requested volume {meta['namespace']}/{meta['name']} modifies the mode of the source volume but "
            f"does not have permission to do so. {MODE_CHANGE_ANNOTATION} annotation is not present on "
            f"snapshotcontent {content_name}"
        )
        raise _NotYet("Warning", "ProvisioningFailed", msg, 5.0)
    return _Seed(path, source_mode)


def _clone_seed(lab: LabContext, pvc: dict, name: str, want: int, mode: str, sc: dict) -> _Seed:
    rts = core_types(lab)
    namespace = pvc["metadata"]["namespace"]
    prefix = f"error getting handle for DataSource Type PersistentVolumeClaim by Name {name}"
    try:
        source = lab.store.get(rts["pvc"], namespace, name)
    except ApiError as exc:
        msg = f"{prefix}: error getting PVC {name} (namespace {namespace}) from api server: {exc.message}"
        raise _NotYet("Warning", "ProvisioningFailed", msg) from exc
    if (source.get("status") or {}).get("phase") != "Bound":
        raise _NotYet("Warning", "ProvisioningFailed", f"{prefix}: claim in dataSource not bound or invalid")
    src_class = (source.get("spec") or {}).get("storageClassName") or ""
    if src_class != sc["metadata"]["name"]:
        msg = (
            f"{prefix}: the source PVC and destination PVCs must be in the same storage class for cloning. "
            f"Source is in {src_class}, but new PVC is in {sc['metadata']['name']}"
        )
        raise _NotYet("Warning", "ProvisioningFailed", msg, 5.0)
    src_mode = (source.get("spec") or {}).get("volumeMode") or "Filesystem"
    if src_mode != mode:
        msg = (
            f"{prefix}: the source PVC and destination PVCs must have the same volume mode for cloning. "
            f"Source is {src_mode}, but new PVC is {mode}"
        )
        raise _NotYet("Warning", "ProvisioningFailed", msg, 5.0)
    size = parse_quantity(((source.get("status") or {}).get("capacity") or {}).get("storage", "0"))
    if want < size:
        msg = f"{prefix}: requested volume size {want} is less than the size {size} for the source PVC {name}"
        raise _NotYet("Warning", "ProvisioningFailed", msg, 5.0)
    return _Seed(volume_path(lab, source), src_mode)


def _backing_image(lab: LabContext, sc: dict) -> dict | None:
    """The Harvester image behind a backing-image class: named by the class's imageId annotation, else
    the image whose `<namespace>-<name>` is the backing image's name."""
    rt = lab.store.resource("harvesterhci.io", "v1beta1", "virtualmachineimages")
    image_id = (sc["metadata"].get("annotations") or {}).get(IMAGE_ID_ANNOTATION) or ""
    if image_id.count("/") == 1:
        namespace, name = image_id.split("/")
        return get_or_none(lab.store, rt, namespace, name)
    wanted = sc["parameters"]["backingImage"]
    images, _ = lab.store.list(rt)
    found = [i for i in images if f"{i['metadata']['namespace']}-{i['metadata']['name']}" == wanted]
    return found[0] if found else None


def _backing_image_seed(lab: LabContext, want: int, sc: dict) -> _Seed:
    """Longhorn's rule: the backing image must be ready and no larger than the volume."""
    from .harvester import backing_image_path, is_true

    name = sc["parameters"]["backingImage"]
    image = _backing_image(lab, sc)
    if image is None:
        msg = f"failed to provision volume: backing image {name} not found"
        raise _NotYet("Warning", "ProvisioningFailed", msg, 2.0)
    if not is_true(image, "Imported"):
        imported = condition(image, "Imported") or {}
        detail = imported.get("message") or imported.get("reason") or "not imported yet"
        msg = f"failed to provision volume: backing image {name} is not ready: {detail}"
        raise _NotYet("Warning", "ProvisioningFailed", msg, 1.0)
    size = int((image.get("status") or {}).get("virtualSize") or 0)
    if want < size:
        msg = f"failed to provision volume: size {want} is smaller than backing image {name} ({size} bytes)"
        raise _NotYet("Warning", "ProvisioningFailed", msg, 5.0)
    path = backing_image_path(lab, image)
    if not path.exists():
        msg = f"failed to provision volume: the data of backing image {name} is missing"
        raise _NotYet("Warning", "ProvisioningFailed", msg, 5.0)
    return _Seed(path, "Block", backing_image=True)


def _fill_from_image(dst: pathlib.Path, mode: str, size: int, image: pathlib.Path) -> None:
    """The volume as a raw disk holding the image: a Block file, or `disk.img` in a Filesystem volume."""
    target = dst
    if mode != "Block":
        dst.mkdir(parents=True)
        target = dst / "disk.img"
    with open(image, "rb") as fh:
        qcow2 = fh.read(4) == QCOW2_MAGIC
    if qcow2:
        argv = ["qemu-img", "convert", "-q", "-f", "qcow2", "-O", "raw", str(image), str(target)]
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise OSError(f"converting backing image {image.name} failed: {result.stderr.strip()}")
    else:
        copy_data(image, target)
    if mode == "Block" and target.stat().st_size < size:
        os.truncate(target, size)


def _consumers(lab: LabContext, pvc: dict) -> bool:
    """Whether a live Pod in the claim's namespace mounts it."""
    meta = pvc["metadata"]
    for pod in lab.store.list(core_types(lab)["pod"], meta["namespace"])[0]:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        if meta["name"] in _pod_claims(pod):
            return True
    return False


def _pod_claims(pod: dict) -> list[str]:
    vols = (pod.get("spec") or {}).get("volumes") or []
    return [v["persistentVolumeClaim"]["claimName"] for v in vols if v.get("persistentVolumeClaim")]


def _reclaim(lab: LabContext, pv: dict) -> None:
    """A volume whose claim is gone: Released, then (policy Delete) deleted with its data.

    Released first, as Kubernetes' volume controller does: the pv-protection finalizer the API server
    adds to every volume stays while the volume is Bound, so deleting a Bound one would leave it
    Terminating.
    """
    rts = core_types(lab)
    name = pv["metadata"]["name"]
    policy = (pv.get("spec") or {}).get("persistentVolumeReclaimPolicy", "Retain")

    def release(obj: dict) -> bool:
        if (obj.get("status") or {}).get("phase") == "Released":
            return False
        obj["status"] = {"phase": "Released"}
        return True

    with _bind_lock:
        try:
            modify(lab.store, rts["pv"], None, name, release, status=True)
            if policy == "Delete":
                lab.store.delete(rts["pv"], None, name)
        except ApiError as exc:
            if exc.code != 404:
                raise
        if policy == "Delete":
            _drop_pv_data(lab, pv)


def _drop_pv_data(lab: LabContext, pv: dict) -> None:
    spec = pv.get("spec") or {}
    provisioned = (pv["metadata"].get("annotations") or {}).get("pv.kubernetes.io/provisioned-by")
    if provisioned and spec.get("persistentVolumeReclaimPolicy") == "Delete":
        remove_data(lab, volume_path(lab, pv))


def _claim_gone(lab: LabContext, pv: dict) -> bool:
    ref = (pv.get("spec") or {}).get("claimRef") or {}
    if not ref.get("uid"):
        return False
    try:
        pvc = lab.store.get(core_types(lab)["pvc"], ref.get("namespace"), ref.get("name", ""))
    except ApiError as exc:
        if exc.code != 404:
            raise
        return True
    return pvc["metadata"]["uid"] != ref["uid"]


class ClaimBinder(Controller):
    """Binds PersistentVolumeClaims: static volumes, dynamic provisioning, restores and clones."""

    name = "claim-binder"
    watches = ((CORE, "persistentvolumeclaims"), (CORE, "pods"))

    def reconcile(self, rt: ResourceType, obj: dict) -> float | None:
        meta = obj["metadata"]
        if rt.plural == "pods":
            if (obj.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                for claim in _pod_claims(obj):
                    try:
                        ensure_bound(self.lab, meta["namespace"], claim, consumer=True)
                    except ApiError as exc:
                        if exc.code != 404:
                            raise
            return None
        status = obj.get("status") or {}
        if status.get("phase") == "Bound":
            return self._check_volume(obj)
        _, retry = _bind(self.lab, meta["namespace"], meta["name"], _consumers(self.lab, obj))
        return retry

    def _check_volume(self, pvc: dict) -> float | None:
        """A bound claim whose volume disappeared is Lost, as Kubernetes reports it."""
        name = pvc["spec"].get("volumeName", "")
        if self.lab.store.exists(core_types(self.lab)["pv"], None, name):
            return None
        meta = pvc["metadata"]

        def lost(obj: dict) -> bool:
            if (obj.get("status") or {}).get("phase") != "Bound":
                return False
            obj["status"] = {"phase": "Lost"}
            return True

        pvc = modify(
            self.lab.store, core_types(self.lab)["pvc"], meta["namespace"], meta["name"], lost, status=True
        )
        msg = f"Bound claim has lost its PersistentVolume. Data on the volume is lost! ({name})"
        record_event(self.lab.store, pvc, "Warning", "ClaimLost", msg, BINDER_COMPONENT)
        return None

    def deleted(self, rt: ResourceType, obj: dict) -> None:
        if rt.plural != "persistentvolumeclaims":
            return
        name = (obj.get("spec") or {}).get("volumeName")
        if not name:
            return
        try:
            pv = self.lab.store.get(core_types(self.lab)["pv"], None, name)
        except ApiError:
            return
        if _claim_gone(self.lab, pv):
            _reclaim(self.lab, pv)


class VolumeReclaimer(Controller):
    """Keeps PersistentVolume phases and reclaims volumes whose claims are gone."""

    name = "volume-reclaimer"
    watches = ((CORE, "persistentvolumes"),)

    def reconcile(self, rt: ResourceType, obj: dict) -> float | None:
        if obj["metadata"].get("deletionTimestamp"):
            return None
        if _claim_gone(self.lab, obj):
            _reclaim(self.lab, obj)
            return None
        ref = (obj.get("spec") or {}).get("claimRef")
        phase = (obj.get("status") or {}).get("phase")
        wanted = "Bound" if ref and ref.get("uid") else ("Available" if not ref else phase)
        if phase not in (wanted, "Released", "Failed"):
            name = obj["metadata"]["name"]
            modify(
                self.lab.store,
                rt,
                None,
                name,
                lambda o: o.setdefault("status", {}).update(phase=wanted),
                True,
            )
        return None

    def deleted(self, rt: ResourceType, obj: dict) -> None:
        _drop_pv_data(self.lab, obj)


CONTROLLERS = [ClaimBinder, VolumeReclaimer, CsiSnapshotDriver]

__all__ = [
    "CONTROLLERS",
    "ClaimBinder",
    "CsiSnapshotDriver",
    "VolumeReclaimer",
    "copy_data",
    "disk_image_path",
    "ensure_bound",
    "format_quantity",
    "parse_quantity",
    "remove_data",
    "snapshot_data",
    "volume_path",
    "volumes_dir",
]
