"""Harvester's VM controller in the lab: the disks a VirtualMachine declares in an annotation.

What Harvester does with `harvesterhci.io/volumeClaimTemplates` on a `kubevirt.io/v1` VirtualMachine:
- the annotation is a JSON list of PersistentVolumeClaim bodies. The validating webhook refuses a VM
  whose annotation does not parse or names a claim without a name, and a template whose requested size
  shrinks.
- the VM controller creates every claim named there that does not exist yet, in the VM's namespace, with
  the template's labels, annotations (`harvesterhci.io/imageId` included) and spec, and WITHOUT
  ownerReferences: deleting the VM leaves its disks, and a new VM declaring the same names is given the
  old disks back. A template whose imageId names an image that does not exist yet waits for it. Claims
  that exist are left as they are (the lab does not expand them).
The image's `lh-...` class then provisions the disk from the image's data (storage.py).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ..objects import ApiError, ResourceType, invalid
from . import Controller, LabContext
from .kit import CORE, record_event
from .kubevirt import ChainedHooks, install_hooks
from .volumes import parse_quantity

if TYPE_CHECKING:
    from ..apistore import ApiStore

GROUP = "kubevirt.io"
PLURAL = "virtualmachines"
TEMPLATES = "harvesterhci.io/volumeClaimTemplates"
IMAGE_ID = "harvesterhci.io/imageId"
COMPONENT = "harvester-vm-controller"
WEBHOOK = 'admission webhook "validator.harvesterhci.io" denied the request: '
WAIT_FOR_IMAGE_SECONDS = 1.0


def claim_templates(vm: dict) -> list[dict]:
    """The claim bodies the VM declares; ValueError when the annotation is not a list of named claims."""
    text = ((vm.get("metadata") or {}).get("annotations") or {}).get(TEMPLATES) or ""
    if not text:
        return []
    try:
        items = json.loads(text)
    except ValueError as exc:
        raise ValueError(str(exc)) from exc
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise ValueError("expected a JSON list of PersistentVolumeClaims")
    for item in items:
        if not (item.get("metadata") or {}).get("name"):
            raise ValueError("PVC name is required")
    return items


def _requested(template: dict) -> int:
    storage = (((template.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage")
    try:
        return parse_quantity(storage) if storage is not None else 0
    except ValueError:
        return 0


class VMWebhooks(ChainedHooks):
    """Harvester's validating webhook for the annotation, on VM create and update."""

    def _check(self, rt: ResourceType, vm: dict) -> list[dict]:
        try:
            return claim_templates(vm)
        except ValueError as exc:
            cause = {
                "field": "metadata.annotations",
                "reason": "FieldValueInvalid",
                "message": f"{WEBHOOK}the volumeClaimTemplates annotation is invalid: {exc}",
            }
            raise invalid(rt, vm["metadata"].get("name", ""), [cause]) from exc

    def prepare_create(self, store: ApiStore, rt: ResourceType, obj: dict) -> None:
        super().prepare_create(store, rt, obj)
        self._check(rt, obj)

    def prepare_update(self, store: ApiStore, rt: ResourceType, old: dict, new: dict) -> None:
        super().prepare_update(store, rt, old, new)
        after = {t["metadata"]["name"]: t for t in self._check(rt, new)}
        try:
            before = claim_templates(old)
        except ValueError:
            return
        for template in before:
            name = template["metadata"]["name"]
            if name in after and _requested(after[name]) < _requested(template):
                cause = {
                    "field": f"metadata.annotations.{TEMPLATES}",
                    "reason": "FieldValueInvalid",
                    "message": f"{WEBHOOK}{name} PVC requests storage can't be less than previous value",
                }
                raise invalid(rt, new["metadata"]["name"], [cause])


class HarvesterVMController(Controller):
    name = "harvester-vm"
    watches = ((GROUP, PLURAL),)
    resync_seconds = 2.0

    def __init__(self, lab: LabContext):
        super().__init__(lab)
        install_hooks(lab.store, GROUP, PLURAL, VMWebhooks)

    def reconcile(self, rt: ResourceType, obj: dict) -> float | None:
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            return None
        try:
            templates = claim_templates(obj)
        except ValueError:
            return None  # written before the webhook existed; Harvester logs and skips it too
        store = self.lab.store
        pvc_rt = store.resource(CORE, "v1", "persistentvolumeclaims")
        waiting = False
        for template in templates:
            name = template["metadata"]["name"]
            if store.exists(pvc_rt, meta["namespace"], name):
                continue
            if not self._image_exists(template):
                waiting = True
                continue
            try:
                store.create(pvc_rt, self._claim(template, meta["namespace"]))
            except ApiError as exc:
                if exc.code == 409:
                    continue  # created meanwhile, or still terminating under that name
                message = f"failed to create PVC {meta['namespace']}/{name}: {exc.message}"
                record_event(store, obj, "Warning", "FailedCreate", message, COMPONENT)
                waiting = True
        return WAIT_FOR_IMAGE_SECONDS if waiting else None

    def _image_exists(self, template: dict) -> bool:
        image_id = ((template.get("metadata") or {}).get("annotations") or {}).get(IMAGE_ID) or ""
        if image_id.count("/") != 1:
            return True
        namespace, name = image_id.split("/")
        rt = self.lab.store.resource("harvesterhci.io", "v1beta1", "virtualmachineimages")
        return self.lab.store.exists(rt, namespace, name)

    @staticmethod
    def _claim(template: dict, namespace: str) -> dict:
        tmeta = template.get("metadata") or {}
        meta = {"name": tmeta["name"], "namespace": namespace}
        for key in ("labels", "annotations"):
            if tmeta.get(key):
                meta[key] = dict(tmeta[key])
        return {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": meta,
            "spec": dict(template.get("spec") or {}),
        }


CONTROLLERS = [HarvesterVMController]

__all__ = ["CONTROLLERS", "IMAGE_ID", "TEMPLATES", "HarvesterVMController", "VMWebhooks", "claim_templates"]
