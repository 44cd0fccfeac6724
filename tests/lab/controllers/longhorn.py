"""Longhorn's backing images in the lab: the copies of each VirtualMachineImage's file, one per disk.

What Harvester (`pkg/image/backingimage`, v1.8.2) and Longhorn (`longhorn-manager`, BackingImage v1beta2)
do, as far as the collection reads it:
- Harvester creates one BackingImage per VirtualMachineImage in `longhorn-system`, named in the image
  StorageClass's `backingImage` parameter, annotated `harvesterhci.io/imageId: <ns>/<name>`, with
  `spec.minNumberOfCopies` set from that class's `numberOfReplicas` (`ensure_backing_image`, called by the
  lab's Harvester controller when it creates the class), and deletes it with the image.
- Longhorn reports each copy in `status.diskFileStatusMap`, keyed by disk UUID, with `state: ready` once
  the file is on that disk. It makes copies until `minNumberOfCopies` disks hold one, and no more: a node
  added later gets no copy unless the minimum is raised. A copy on a disk that is gone reads `unknown`,
  and a new copy is made elsewhere when that leaves fewer ready copies than the minimum.
The lab's disks: one per schedulable Node (Ready, not cordoned, no NoSchedule/NoExecute taint), its UUID
derived from the node's name; with no Node object at all, the lab's own node. The first copy is ready once
the lab's Harvester controller has the image's bytes (the image is `Imported=True`).
"""

from __future__ import annotations

import uuid

from ..objects import ApiError, ResourceType, now_rfc3339
from . import Controller
from .kit import CORE, condition, modify
from .pods import NODE_NAME

GROUP = "longhorn.io"
VERSION = "v1beta2"
PLURAL = "backingimages"
NAMESPACE = "longhorn-system"
IMAGE_ID_ANNOTATION = "harvesterhci.io/imageId"
READY = "ready"
UNKNOWN = "unknown"
BLOCKING_TAINTS = ("NoSchedule", "NoExecute")
_DISK_NAMESPACE = uuid.UUID("6f1c1d2e-8a4b-4c5d-9e0f-1a2b3c4d5e6f")


def disk_uuid(node: str) -> str:
    """The UUID of the lab's one Longhorn disk on ``node``."""
    return str(uuid.uuid5(_DISK_NAMESPACE, node))


def _schedulable(node: dict) -> bool:
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return False
    ready = condition(node, "Ready")
    if not ready or ready.get("status") != "True":
        return False
    return not any(t.get("effect") in BLOCKING_TAINTS for t in spec.get("taints") or [])


def disks(store) -> dict[str, str]:
    """``{disk UUID: node}`` of the disks Longhorn may put copies on."""
    nodes, _ = store.list(store.resource(CORE, "v1", "nodes"))
    # The lab's own Node (the kubelet endpoint of pod logs, cordoned) holds the one disk only when no
    # test made Nodes of its own.
    nodes = [n for n in nodes if n["metadata"]["name"] != NODE_NAME]
    names = sorted(n["metadata"]["name"] for n in nodes if _schedulable(n)) if nodes else [NODE_NAME]
    return {disk_uuid(name): name for name in names}


def ensure_backing_image(store, image: dict, name: str, replicas: str) -> None:
    """Create the BackingImage of ``image`` as Harvester's backing image backend does."""
    ns_rt = store.resource(CORE, "v1", "namespaces")
    if not store.exists(ns_rt, None, NAMESPACE):
        try:
            store.create(ns_rt, {"metadata": {"name": NAMESPACE}})
        except ApiError as exc:
            if exc.code != 409:
                raise
    meta, spec = image["metadata"], image.get("spec") or {}
    rt = store.resource(GROUP, VERSION, PLURAL)
    if store.exists(rt, NAMESPACE, name):
        return
    source = {"url": spec["url"]} if spec.get("url") else {}
    body = {
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "annotations": {IMAGE_ID_ANNOTATION: f"{meta['namespace']}/{meta['name']}"},
        },
        "spec": {
            "sourceType": spec.get("sourceType") or "download",
            "sourceParameters": source,
            "checksum": spec.get("checksum") or "",
            "minNumberOfCopies": int(replicas),
        },
    }
    try:
        store.create(rt, body)
    except ApiError as exc:
        if exc.code != 409:
            raise


def delete_backing_image(store, name: str) -> None:
    try:
        store.delete(store.resource(GROUP, VERSION, PLURAL), NAMESPACE, name)
    except ApiError:
        pass


class LonghornBackingImageController(Controller):
    name = "longhorn-backing-image"
    watches = ((GROUP, PLURAL),)
    resync_seconds = 1.0  # a Node added or gone is seen at the next resync

    def _image(self, backing_image: dict) -> dict | None:
        ref = ((backing_image.get("metadata") or {}).get("annotations") or {}).get(IMAGE_ID_ANNOTATION) or ""
        namespace, _, name = ref.partition("/")
        if not name:
            return None
        try:
            return self.lab.store.get(
                self.lab.store.resource("harvesterhci.io", "v1beta1", "virtualmachineimages"), namespace, name
            )
        except ApiError:
            return None

    def reconcile(self, rt: ResourceType, obj: dict) -> float | None:
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            return None
        image = self._image(obj)
        imported = condition(image or {}, "Imported") or {}
        if imported.get("status") != "True":
            return None  # no file yet: nothing to copy
        present = disks(self.lab.store)
        wanted = max(1, int((obj.get("spec") or {}).get("minNumberOfCopies") or 1))
        image_status = (image or {}).get("status") or {}

        def copies(status: dict) -> bool | None:
            files = dict(status.get("diskFileStatusMap") or {})
            now = now_rfc3339()
            changed = False
            for disk, entry in files.items():
                state = READY if disk in present else UNKNOWN
                if (entry or {}).get("state") != state:
                    files[disk] = dict(entry or {}, state=state, lastStateTransitionTime=now)
                    changed = True
            ready = sum(1 for entry in files.values() if entry.get("state") == READY)
            for disk in sorted(present, key=present.get):
                if ready >= wanted:
                    break
                if disk not in files:
                    files[disk] = {
                        "dataEngine": "v1",
                        "state": READY,
                        "progress": 100,
                        "message": "",
                        "lastStateTransitionTime": now,
                    }
                    ready += 1
                    changed = True
            if not changed and status.get("uuid"):
                return False
            status.update(
                uuid=status.get("uuid") or meta["uid"],
                size=int(image_status.get("size") or 0),
                virtualSize=int(image_status.get("virtualSize") or 0),
                checksum=(obj.get("spec") or {}).get("checksum") or "",
                diskFileStatusMap=files,
            )
            return None

        def apply(current: dict) -> bool | None:
            if current["metadata"].get("uid") != meta["uid"]:
                return False
            return copies(current.setdefault("status", {}))

        try:
            modify(self.lab.store, rt, NAMESPACE, meta["name"], apply, status=True)
        except ApiError as exc:
            if exc.code != 404:
                raise
        return None


CONTROLLERS = [LonghornBackingImageController]

__all__ = [
    "CONTROLLERS",
    "NAMESPACE",
    "LonghornBackingImageController",
    "delete_backing_image",
    "disk_uuid",
    "disks",
    "ensure_backing_image",
]
