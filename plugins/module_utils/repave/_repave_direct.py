# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Harvester VMs repaved without an operator: the driver that observes a VM and applies the steps
``repave_steps.next_step`` decides (stop, swap the OS disk, start, delete the old OS disk), one at a
time, and tears a VM down with the disks it declared.

The instance is a ``kubevirt.io/v1`` VirtualMachine. Its disks are declared in the annotation
``harvesterhci.io/volumeClaimTemplates``; Harvester creates each claim named there, without
ownerReferences, so a deleted VM leaves its disks behind. Which claim is an OS disk and which is data is
decided by ``repave.classify_claims`` from the claims themselves (the image they were made from, its
StorageClass, the VM's boot disk, their own markers), never from an option: a data claim is never
swapped out, and never deleted without purge_data. Teardown deletes the VM and then, explicitly, every
claim it declared, and verifies none remain.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common._wait import WaitError, wait_for
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import consumers
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden._golden_observe import (
    observe_volume_users,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import kinds
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import (
    KubeError,
    is_transient,
    ref,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.repave import repave, repave_steps

VM_API = kinds.KUBEVIRT
VM_KIND = "VirtualMachine"
VMI_KIND = "VirtualMachineInstance"
PVC_KIND = "PersistentVolumeClaim"
IMAGE_KIND = "VirtualMachineImage"
OPT_IN = repave_steps.OPT_IN
TARGET = repave_steps.TARGET
TEARDOWN = repave.TEARDOWN
TEARDOWN_ROLE = repave.TEARDOWN_ROLE


def _state(state, phase, message, step=None, changed=False):
    return {"state": state, "phase": phase, "message": message, "step": step, "changed": changed}


class _Conflict(Exception):
    """A write refused with 409 (or a transient error): look again on the next step."""


class DirectDriver:
    def __init__(self, module, client, params):
        self.module = module
        self.client = client
        self.namespace = params.get("namespace")
        self.os_volume = params.get("os_volume") or "rootdisk"
        self.data_volume = params.get("data_volume") or "pgdata"
        self.timeout = params.get("wait_timeout") or 900
        self.sleep = params.get("wait_sleep") or 2
        self._seen = {}
        self._images = {}

    # --- plumbing

    def _where(self, inst):
        return inst.get("namespace") or self.namespace, inst["name"]

    def _fetch(self, api_version, kind, name, namespace):
        """The object or None; a transient error raises _Conflict, others raise KubeError."""
        try:
            return self.module.fetch(api_version, kind, name, namespace)
        except Exception as exc:
            if is_transient(exc):
                raise _Conflict("reading %s failed: %s" % (ref(kind, name, namespace), exc)) from exc
            self.module.fail_from_exception("get %s" % ref(kind, name, namespace), exc)

    def _patch(self, obj, patch, action, api_version=VM_API, kind=VM_KIND):
        """Merge-patch ``obj`` through the adapter, which rides out 5xx, dropped connections and lost
        replies and re-applies an unguarded patch after a 409. A guarded write (the patch names the
        resourceVersion observed) on an object that moved on raises _Conflict: the next step looks again.

        ``obj`` is the object as observed (no request when the patch already shows) or a bare name, then
        the adapter reads it first.
        """
        meta = kinds.meta(obj)
        before = obj if meta.get("resourceVersion") else None
        try:
            after, _changed = self.module.patch(
                api_version, kind, meta["name"], meta.get("namespace"), patch, before=before
            )
        except KubeError as exc:
            if exc.status == 409:
                raise _Conflict("%s: %s" % (action, exc.msg)) from exc
            raise KubeError(
                "%s on %s: %s" % (action, ref(kind, meta["name"], meta.get("namespace")), exc.msg),
                **exc.fields,
            ) from exc
        return after

    def _claims(self, namespace):
        """``{name: claim}`` of the namespace, from one LIST."""
        return {kinds.name(c): c for c in self.module.list("v1", PVC_KIND, namespace)}

    def _image_objects(self, vm, claims):
        """``{namespace/name: VirtualMachineImage or None}`` for the images the disks name (read once)."""
        found = {}
        for image_id in repave.image_ids(vm, claims):
            if image_id not in self._images:
                parts = image_id.split("/")
                image = None
                if len(parts) == 2 and all(parts):
                    try:
                        image = self.module.fetch(kinds.HARVESTER, IMAGE_KIND, parts[1], parts[0])
                    except Exception as exc:
                        if is_transient(exc):
                            raise _Conflict("reading image %s failed: %s" % (image_id, exc)) from exc
                        self.module.fail_from_exception("get %s %s" % (IMAGE_KIND, image_id), exc)
                self._images[image_id] = image
            found[image_id] = self._images[image_id]
        return found

    def roles(self, vm, claims):
        """What each claim of ``vm`` is (``repave.classify_claims``), with the images read."""
        return repave.classify_claims(vm, claims, self._image_objects(vm, claims))

    # --- list

    def list(self, names, label_selector):
        """The VMs in scope with one LIST each of VMs, VMIs and claims; never a GET per instance."""
        vms = self.module.list(VM_API, VM_KIND, self.namespace, label_selector=label_selector)
        vmis = {(kinds.namespace(o), kinds.name(o)): o for o in self._list(VMI_KIND)}
        claims = {}
        for claim in self._list(PVC_KIND):
            claims.setdefault(kinds.namespace(claim), {})[kinds.name(claim)] = claim
        wanted = set(names or [])
        found = []
        for vm in vms:
            key = (kinds.namespace(vm), kinds.name(vm))
            if wanted and key[1] not in wanted:
                continue
            self._seen[key] = (vm, claims.get(key[0]) or {})
            found.append(self.view(vm, vmis.get(key), claims.get(key[0]) or {}))
        return sorted(found, key=lambda i: (i["namespace"] or "", i["name"]))

    def _list(self, kind):
        return self.module.list("v1" if kind == PVC_KIND else VM_API, kind, self.namespace)

    def view(self, vm, vmi, claims):
        return repave_steps.instance_view(vm, vmi, claims, self.os_volume, self.data_volume)

    def in_flight(self, inst):
        """A repave an earlier run started (its target is recorded on the VM): resumed, not restarted."""
        return bool((inst.get("annotations") or {}).get(TARGET))

    def preflight(self, inst):
        """Refuse, before anything is written, a repave whose os_volume is not backed by a proven OS disk
        (``RepaveRefused`` NotAnOSDisk, naming the claim and why it is data)."""
        namespace, name = self._where(inst)
        vm, claims = self._seen.get((namespace, name)) or (None, {})
        if vm is None:
            return
        try:
            roles = self.roles(vm, claims)
        except _Conflict as exc:
            raise PipelineError("%s; nothing was written, run again" % exc) from exc
        except PipelineError as exc:
            raise repave.RepaveRefused(
                repave.NOT_OS_DISK,
                name,
                "%s: cannot tell its disks: %s" % (ref(VM_KIND, name, namespace), exc),
            ) from exc
        if repave.swapped_out_data(vm, roles, claims):
            return  # an earlier run swapped data out: the first step puts it back
        repave.check_os_volume(inst, vm, roles, self.os_volume)

    # --- opt-in

    def set_opt_in(self, inst, value):
        if (inst.get("annotations") or {}).get(OPT_IN) == value:
            return False
        if self.module.check_mode:
            return True
        namespace, name = self._where(inst)
        patch = {"metadata": {"annotations": {OPT_IN: value}}}
        vm = (self._seen.get((namespace, name)) or (None, None))[0]
        self._patch(vm or {"metadata": {"name": name, "namespace": namespace}}, patch, "record the opt-in")
        notes = inst.setdefault("annotations", {})
        notes.pop(OPT_IN, None)
        if value is not None:
            notes[OPT_IN] = value
        inst["opt_in"] = value
        return True

    # --- the swap: observe, decide (repave_steps), apply

    def observe(self, inst):
        namespace, name = self._where(inst)
        vm = self._fetch(VM_API, VM_KIND, name, namespace)
        observed = {"name": name, "namespace": namespace, "vm": vm, "vmi": None, "claims": {}, "images": {}}
        if vm is None:
            return observed
        observed["vmi"] = self._fetch(VM_API, VMI_KIND, name, namespace)
        observed["claims"] = self._claims(namespace)
        observed["images"] = self._image_objects(vm, observed["claims"])
        return observed

    def advance(self, inst, target):
        """Look at the VM once and apply the next step toward ``target["revision"]``."""
        try:
            observed = self.observe(inst)
            step = repave_steps.next_step(observed, target, self.os_volume)
            return self.apply(observed, step)
        except _Conflict as exc:
            return _state("working", "looking again", "%s; the next step looks again" % exc)

    def apply(self, observed, step):
        write = step.pop("write", None)
        result = dict(step, changed=False)
        if not write:
            return result
        result["diff"] = repave_steps.write_view(observed, write)
        if "delete" in write:
            for claim in write["delete"]:
                before = observed["claims"].get(claim)
                if self.module.delete("v1", PVC_KIND, claim, observed["namespace"], before=before):
                    result["changed"] = True
            return result
        try:
            self._patch(observed["vm"], write["patch"], write["action"])
        except _Conflict as exc:
            if write.get("conflict") is None:
                raise
            return _state("working", write["conflict"], "%s; looking again" % exc, step.get("step"))
        result["changed"] = True
        return result

    def failure_hint(self, inst, target):
        """How to get back when the repave stopped: the disk the VM is on, the one kept, the rollback."""
        namespace, name = self._where(inst)
        try:
            vm = self._fetch(VM_API, VM_KIND, name, namespace)
        except _Conflict:
            return None
        return repave_steps.failure_hint(name, vm, target, self.os_volume)

    # --- teardown

    def teardown(self, inst, purge_data):
        """Delete the VM, then every claim it declared, explicitly (Harvester leaves them behind). Data
        claims (every claim not proven to be an OS disk) are deleted only with ``purge_data``."""
        namespace, name = self._where(inst)
        vm = self.module.get(VM_API, VM_KIND, name, namespace)
        where = ref(VM_KIND, name, namespace)
        claims = self._claims(namespace)
        pattern = repave_steps.own_claim_pattern(name)
        try:
            owned = repave.instance_claims(name, vm, claims, pattern)
        except PipelineError as exc:
            raise PipelineError("cannot tell the disks of %s: %s" % (where, exc.msg)) from exc
        owned = {n for n in owned if n in claims}
        mine = {n: claims[n] for n in owned}
        try:
            roles = repave.classify_claims(vm, mine, self._image_objects(vm, mine), names=owned)
        except _Conflict as exc:
            raise PipelineError("cannot tell the disks of %s: %s" % (where, exc)) from exc
        data = repave.data_claims(roles)
        outcome = {
            "vm": name if vm else None,
            "pvcs": sorted(roles),
            "data_pvcs": data,
            "disk_roles": {n: dict(r) for n, r in roles.items()},
        }
        refusal = repave.teardown_refusal(where, roles, purge_data)
        if refusal is None and roles:
            refusal = self._users_refusal(name, namespace, sorted(roles))
        if refusal is not None:
            refusal.fields.update(outcome, changed=False, teardown=dict(outcome, changed=False))
            raise refusal
        what = ", ".join(([where] if vm else []) + ["PVC %s" % n for n in sorted(roles)])
        if vm is None and not roles:
            return dict(outcome, changed=False, msg="nothing left of %s" % name)
        if self.module.check_mode:
            return dict(outcome, changed=True, msg="would delete %s" % what)
        for claim in sorted(roles):
            self._mark(claim, namespace, name, roles[claim]["role"])
        try:
            if vm is not None:
                self.module.delete_and_wait(
                    VM_API, VM_KIND, name, namespace, self.timeout, self.sleep, before=vm
                )
                self._vmi_gone(name, namespace)
            for claim in sorted(roles):
                self.module.delete("v1", PVC_KIND, claim, namespace)
            self._wait_claims_gone(sorted(roles), namespace)
        except WaitError as exc:
            raise PipelineError(
                "teardown of %s: %s" % (name, exc), teardown=dict(outcome, changed=True)
            ) from exc
        return dict(outcome, changed=True, msg="deleted %s" % what)

    def _users_refusal(self, name, namespace, claims):
        """The Refusal of the teardown while anything but this VM (and its launcher pods) uses one of its
        claims: another VM mounting or declaring it, a pod, a clone, a snapshot; asked with the reference
        query every delete path shares, before the first delete."""
        try:
            observed = observe_volume_users(self.module, namespace)
        except PipelineError as exc:
            raise consumers.users_unknown(ref(VM_KIND, name, namespace), exc) from exc
        skip = {("VirtualMachine", namespace, name)}
        found = []
        for claim in claims:

            def own(pod, claim=claim):
                return consumers.owned_by(pod, "VirtualMachineInstance", name) or consumers.owned_by(
                    pod, PVC_KIND, claim
                )

            found.extend(consumers.volume_consumers(PVC_KIND, namespace, claim, observed, own, skip))
        return consumers.refuse_delete(
            "the teardown of %s (PVCs %s)" % (ref(VM_KIND, name, namespace), ", ".join(claims)),
            found,
            "stop what else uses them, or remove them from the other VM's volumes and volumeClaimTemplates, "
            "then run again; nothing was deleted",
        )

    def _mark(self, claim, namespace, name, role):
        patch = {"metadata": {"labels": {TEARDOWN: name}, "annotations": {TEARDOWN_ROLE: role}}}
        obj = {"metadata": {"name": claim, "namespace": namespace}}
        self._patch(obj, patch, "mark PVC %s for teardown" % claim, "v1", PVC_KIND)

    def _vmi_gone(self, name, namespace):
        """Wait until the VM's instance is gone too (KubeVirt deletes it with the VM)."""
        self.module.wait(
            VM_API,
            VMI_KIND,
            name,
            namespace,
            lambda obj: (obj is None, None),
            lambda obj: "gone" if obj is None else kinds.describe_vmi(obj),
            "%s to be deleted" % ref(VMI_KIND, name, namespace),
            self.timeout,
            self.sleep,
        )

    def _wait_claims_gone(self, claims, namespace):
        wanted = set(claims)

        def remaining():
            return sorted(wanted & set(self._claims(namespace)))

        wait_for(
            remaining,
            lambda left: (not left, None),
            self.timeout,
            self.sleep,
            describe=lambda left: "remaining: %s" % (", ".join(left or []) or "none"),
            pending="the PVCs of the VM to be deleted",
            transient=is_transient,
            first_sleep=0.25,
        )
