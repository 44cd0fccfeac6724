# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Harvester VMs repaved without an operator: the module swaps the OS disk itself, one step at a time.

The instance is a ``kubevirt.io/v1`` VirtualMachine. Its disks are declared in the annotation
``harvesterhci.io/volumeClaimTemplates``; Harvester creates each claim named there, without
ownerReferences, so a deleted VM leaves its disks behind. Every step below is decided from what the
cluster shows, so a killed run resumes wherever it stopped:

1. stop: ``runStrategy: Halted`` with the target in ``goldenimage.pipeline/repave-target`` (one write),
   then wait until the VMI is gone;
2. swap: the new OS disk ``<instance>-os-<revision>`` (never a reused name) joins the annotation with the
   target image's StorageClass and imageId, the OS volume's claimName points at it, and the disk it
   leaves is recorded in ``goldenimage.pipeline/previous-os-disks`` (one write, resourceVersion checked);
3. start: ``runStrategy: Always``, then wait for the VMI Running with ``AgentConnected`` on the new disk;
4. only then the previous OS disks leave the annotation (Harvester would recreate a declared claim),
   are deleted, and a last write removes the markers and records the applied revision.

The data volume is never detached, renamed or deleted. A new disk that does not boot leaves the VM on it
and the old disk kept; the same module with the previous revision rolls back by the same steps.
Teardown deletes the VM and then, explicitly, every claim it declared, and verifies none remain.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.goldenimage.pipeline.plugins.module_utils._kube import (
    MERGE_PATCH,
    error_details,
    is_transient,
    ref,
    status_code,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils._wait import WaitError, wait_for

VM_API = "kubevirt.io/v1"
VM_KIND = "VirtualMachine"
VMI_KIND = "VirtualMachineInstance"
PVC_KIND = "PersistentVolumeClaim"
PREFIX = "goldenimage.pipeline/"
REVISION = PREFIX + "image-revision"
ENGINE = PREFIX + "engine-version"
STREAM = PREFIX + "os-version"
OPT_IN = PREFIX + "repave-opt-in"
TARGET = PREFIX + "repave-target"
PREVIOUS = PREFIX + "previous-os-disks"
# On claims being torn down, so a teardown killed after the VM was deleted still finds them.
TEARDOWN = PREFIX + "teardown"
TEARDOWN_ROLE = PREFIX + "teardown-role"
TEMPLATES = "harvesterhci.io/volumeClaimTemplates"
IMAGE_ID = "harvesterhci.io/imageId"
RUNNING_STRATEGIES = ("Always", "RerunOnFailure", "Once")
STOPPING, SWAPPING, STARTING, DELETING = "StoppingVM", "SwappingOSDisk", "StartingVM", "DeletingOldDisk"
_REVISION = r"v\d{8}(?:-\d{4})?"


# ------------------------------------------------------------------------------ reading a VM


def os_disk_name(instance, revision):
    return "%s-os-%s" % (instance, revision)


def meta_of(obj):
    return (obj or {}).get("metadata") or {}


def annotations_of(obj):
    return meta_of(obj).get("annotations") or {}


def run_strategy(vm):
    spec = vm.get("spec") or {}
    if spec.get("runStrategy"):
        return spec["runStrategy"]
    return "Always" if spec.get("running") is True else "Halted"


def claim_templates(vm):
    """The claim bodies declared in the annotation; ValueError when it is not a JSON list."""
    text = annotations_of(vm).get(TEMPLATES) or ""
    if not text:
        return []
    try:
        items = json.loads(text)
    except ValueError as exc:
        raise ValueError("annotation %s is not valid JSON: %s" % (TEMPLATES, exc)) from exc
    if not isinstance(items, list) or not all(isinstance(i, dict) and meta_of(i).get("name") for i in items):
        raise ValueError("annotation %s is not a list of named PersistentVolumeClaims" % TEMPLATES)
    return items


def volumes_of(vm):
    return (((vm.get("spec") or {}).get("template") or {}).get("spec") or {}).get("volumes") or []


def claims_of(vm):
    """``{volume name: claim name}`` for volumes backed by a claim (or a DataVolume's claim)."""
    found = {}
    for volume in volumes_of(vm):
        source = volume.get("persistentVolumeClaim") or volume.get("dataVolume") or {}
        claim = source.get("claimName") or (source.get("name") if volume.get("dataVolume") else None)
        if claim:
            found[volume.get("name")] = claim
    return found


def split_names(text):
    return [n for n in (text or "").split(",") if n]


def condition(obj, ctype):
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return cond
    return None


def agent_connected(vmi):
    if not vmi or meta_of(vmi).get("deletionTimestamp"):
        return False
    running = (vmi.get("status") or {}).get("phase") == "Running"
    return running and (condition(vmi, "AgentConnected") or {}).get("status") == "True"


def describe_vmi(vmi):
    """``VMI Running; Ready=True; Paused=False (reason: message)``: the state a timeout names."""
    if not vmi:
        return "no VMI"
    status = vmi.get("status") or {}
    parts = ["VMI %s" % (status.get("phase") or "without a phase")]
    if meta_of(vmi).get("deletionTimestamp"):
        parts[0] += " (terminating)"
    for cond in status.get("conditions") or []:
        text = "%s=%s" % (cond.get("type"), cond.get("status"))
        detail = ": ".join(str(v) for v in (cond.get("reason"), cond.get("message")) if v)
        parts.append("%s (%s)" % (text, detail) if detail else text)
    return "; ".join(parts)


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

    # --- plumbing

    def _where(self, inst):
        return inst.get("namespace") or self.namespace, inst["name"]

    def _fetch(self, api_version, kind, name, namespace):
        """The object or None; a transient error raises _Conflict, others fail the module."""
        try:
            return self.module.fetch(api_version, kind, name, namespace)
        except Exception as exc:
            if is_transient(exc):
                raise _Conflict("reading %s failed: %s" % (ref(kind, name, namespace), exc)) from exc
            self.module.fail_from_exception("get %s" % ref(kind, name, namespace), exc)

    def _patch(self, obj, patch, action, api_version=VM_API, kind=VM_KIND):
        """Merge-patch ``obj``; a 409 or a transient error raises _Conflict with the server's words."""
        meta = meta_of(obj)
        res = self.module.resource(api_version, kind)
        self.module.mutations += 1
        try:
            return res.patch(
                body=patch, name=meta["name"], namespace=meta.get("namespace"), content_type=MERGE_PATCH
            ).to_dict()
        except Exception as exc:
            if status_code(exc) == 409 or is_transient(exc):
                raise _Conflict("%s: %s" % (action, error_details(exc)["message"])) from exc
            self.module.fail_from_exception(
                "%s on %s" % (action, ref(kind, meta["name"], meta.get("namespace"))), exc
            )

    # --- list

    def list(self, names, label_selector):
        """The VMs in scope with one LIST each of VMs, VMIs and claims; never a GET per instance."""
        vms = self.module.list(VM_API, VM_KIND, self.namespace, label_selector=label_selector)
        vmis = {(meta_of(o).get("namespace"), meta_of(o).get("name")): o for o in self._list(VMI_KIND)}
        claims = {(meta_of(o).get("namespace"), meta_of(o).get("name")): o for o in self._list(PVC_KIND)}
        wanted = set(names or [])
        found = []
        for vm in vms:
            meta = meta_of(vm)
            if wanted and meta.get("name") not in wanted:
                continue
            found.append(self.view(vm, vmis.get((meta.get("namespace"), meta.get("name"))), claims))
        return sorted(found, key=lambda i: (i["namespace"] or "", i["name"]))

    def _list(self, kind):
        return self.module.list("v1" if kind == PVC_KIND else VM_API, kind, self.namespace)

    def view(self, vm, vmi, claims):
        meta = meta_of(vm)
        notes = dict(meta.get("annotations") or {})
        volumes = claims_of(vm)
        target = notes.get(TARGET)
        available = agent_connected(vmi)
        if target:
            phase = "Repaving"
        elif available:
            phase = "Available"
        elif vmi is None:
            phase = "Stopped" if run_strategy(vm) == "Halted" else "Starting"
        else:
            phase = "NotReady"
        os_claim = volumes.get(self.os_volume)
        repave = {}
        if target:
            step = STOPPING if vmi is not None else SWAPPING
            if os_claim == os_disk_name(meta.get("name"), target):
                step = DELETING if available else STARTING
            repave = {"targetRevision": target, "step": step, "from": notes.get(REVISION)}
        disks = {}
        for claim in (os_claim, volumes.get(self.data_volume)):
            found = claims.get((meta.get("namespace"), claim)) if claim else None
            if claim:
                disks[claim] = ((found or {}).get("status") or {}).get("phase") or "Missing"
        return {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            # While a repave is in flight no revision is applied: the run resumes, or a rollback
            # to the previous revision is not mistaken for "already current".
            "revision": None if target else notes.get(REVISION),
            "applied_revision": notes.get(REVISION),
            "engine_version": notes.get(ENGINE),
            "os_stream": notes.get(STREAM) or None,
            "phase": phase,
            "available": available,
            "operator": {},
            "opt_in": notes.get(OPT_IN),
            "annotations": notes,
            "labels": dict(meta.get("labels") or {}),
            "resource_version": meta.get("resourceVersion"),
            "os_disk": os_claim,
            "data_disk": volumes.get(self.data_volume),
            "disks": disks,
            "repave": repave,
        }

    def in_flight(self, inst):
        """A repave an earlier run started (its target is recorded on the VM): resumed, not restarted."""
        return bool((inst.get("annotations") or {}).get(TARGET))

    # --- opt-in

    def set_opt_in(self, inst, value):
        if (inst.get("annotations") or {}).get(OPT_IN) == value:
            return False
        if self.module.check_mode:
            return True
        namespace, name = self._where(inst)
        patch = {"metadata": {"annotations": {OPT_IN: value}}}
        for _attempt in range(5):
            try:
                self._patch({"metadata": {"name": name, "namespace": namespace}}, patch, "record the opt-in")
            except _Conflict:
                continue
            notes = inst.setdefault("annotations", {})
            notes.pop(OPT_IN, None)
            if value is not None:
                notes[OPT_IN] = value
            inst["opt_in"] = value
            return True
        self.module.fail_json(msg="record %s on %s: still conflicting after 5 attempts" % (OPT_IN, name))

    # --- the swap

    def advance(self, inst, target):
        """Look at the VM once and take the next step toward ``target["revision"]``."""
        namespace, name = self._where(inst)
        disk = os_disk_name(name, target["revision"])
        try:
            vm = self._fetch(VM_API, VM_KIND, name, namespace)
            if vm is None:
                return _state("failed", "deleted", "%s does not exist" % ref(VM_KIND, name, namespace))
            try:
                templates = claim_templates(vm)
            except ValueError as exc:
                return _state("failed", "invalid", "%s: %s" % (ref(VM_KIND, name, namespace), exc))
            current = claims_of(vm).get(self.os_volume)
            if current is None:
                return _state(
                    "failed",
                    "invalid",
                    "%s has no volume %s backed by a claim (os_volume)"
                    % (ref(VM_KIND, name, namespace), self.os_volume),
                )
            if disk == claims_of(vm).get(self.data_volume):
                return _state("failed", "invalid", "the new OS disk %s is the data volume's claim" % disk)
            vmi = self._fetch(VM_API, VMI_KIND, name, namespace)
            if current != disk:
                return self._toward(vm, vmi, templates, current, disk, target)
            return self._settle(vm, vmi, templates, disk, target)
        except _Conflict as exc:
            return _state("working", "looking again", "%s; the next step looks again" % exc)

    def _toward(self, vm, vmi, templates, current, disk, target):
        """Steps 1 and 2: stop, then point the OS volume at the new disk."""
        notes = annotations_of(vm)
        if notes.get(TARGET) != target["revision"] or run_strategy(vm) != "Halted":
            patch = {
                "metadata": {"annotations": {TARGET: target["revision"]}},
                "spec": {"runStrategy": "Halted"},
            }
            if "running" in (vm.get("spec") or {}):
                patch["spec"]["running"] = None  # KubeVirt refuses running and runStrategy together
            self._patch(vm, patch, "stop the VM")
            return _state(
                "working",
                "stopping the VM",
                "runStrategy Halted; the VM keeps %s until the VMI is gone" % current,
                STOPPING,
                True,
            )
        if vmi is not None:
            return _state("working", "waiting for the VM to stop", describe_vmi(vmi), STOPPING)
        namespace = meta_of(vm).get("namespace")
        declared = [meta_of(t)["name"] for t in templates]
        existing = self._fetch("v1", PVC_KIND, disk, namespace)
        if existing is not None:
            if meta_of(existing).get("deletionTimestamp"):
                return _state(
                    "working",
                    "waiting for the old claim %s to go" % disk,
                    "its name is used again only once it is deleted",
                    SWAPPING,
                )
            if disk not in declared and disk not in split_names(notes.get(PREVIOUS)):
                return _state(
                    "failed",
                    "swapping the OS disk",
                    "claim %s/%s exists but the VM does not declare it (left by an earlier VM of this "
                    "name?): nothing was swapped; check what it holds and delete it" % (namespace, disk),
                    SWAPPING,
                )
        if disk not in declared:
            templates = templates + [self._template(vm, templates, current, disk, target)]
        volumes = []
        for volume in volumes_of(vm):
            volume = dict(volume)
            if volume.get("name") == self.os_volume:
                volume.pop("dataVolume", None)
                volume["persistentVolumeClaim"] = dict(
                    volume.get("persistentVolumeClaim") or {}, claimName=disk
                )
            volumes.append(volume)
        previous = [d for d in split_names(notes.get(PREVIOUS)) + [current] if d != disk]
        patch = {
            "metadata": {
                # Only onto the state just checked: a 409 means look again.
                "resourceVersion": meta_of(vm).get("resourceVersion"),
                "annotations": {
                    TEMPLATES: json.dumps(templates, sort_keys=True),
                    PREVIOUS: ",".join(sorted(set(previous), key=previous.index)),
                },
            },
            "spec": {"template": {"spec": {"volumes": volumes}}},
        }
        try:
            self._patch(vm, patch, "swap the OS disk")
        except _Conflict as exc:
            return _state("working", "swapping the OS disk to %s" % disk, "%s; looking again" % exc, SWAPPING)
        return _state(
            "working",
            "swapped the OS disk to %s" % disk,
            "%s is kept until %s boots" % (current, disk),
            SWAPPING,
            True,
        )

    def _template(self, vm, templates, current, disk, target):
        """The new disk's claim: the current OS disk's shape, the target image's class and imageId."""
        image = target.get("image") or {}
        if not target.get("storage_class") or not image.get("name"):
            self.module.fail_json(
                msg="catalog entry %s has no image or storage_class (is it imported?): the new OS disk needs "
                "both" % target["revision"]
            )
        base = next((t for t in templates if meta_of(t)["name"] == current), None)
        if base is None:
            claim = self._fetch("v1", PVC_KIND, current, meta_of(vm).get("namespace")) or {}
            base = {
                "spec": {
                    k: v for k, v in (claim.get("spec") or {}).items() if k in ("accessModes", "resources")
                }
            }
        spec = dict(base.get("spec") or {})
        spec.setdefault("accessModes", ["ReadWriteMany"])
        spec.setdefault("resources", {"requests": {"storage": "10Gi"}})
        spec.update(volumeMode="Block", storageClassName=target["storage_class"])
        for key in ("volumeName", "dataSource", "dataSourceRef"):
            spec.pop(key, None)
        annotations = dict(meta_of(base).get("annotations") or {})
        annotations[IMAGE_ID] = "%s/%s" % (
            image.get("namespace") or meta_of(vm).get("namespace"),
            image["name"],
        )
        return {"metadata": {"name": disk, "annotations": annotations}, "spec": spec}

    def _settle(self, vm, vmi, templates, disk, target):
        """Steps 3 and 4 on the new disk: start, wait for the agent, delete the old disks, record."""
        notes = annotations_of(vm)
        wanted = target["revision"]
        in_use = set(claims_of(vm).values())
        previous = [d for d in split_names(notes.get(PREVIOUS)) if d not in in_use]
        stream = target.get("os_stream")
        unfinished = (
            notes.get(TARGET)
            or previous
            or notes.get(REVISION) != wanted
            or (stream and notes.get(STREAM) != stream)
        )
        if not unfinished:
            return _state("done", "current", "runs %s on %s" % (wanted, disk))
        if run_strategy(vm) not in RUNNING_STRATEGIES:
            patch = {"spec": {"runStrategy": "Always"}}
            if "running" in (vm.get("spec") or {}):
                patch["spec"]["running"] = None
            self._patch(vm, patch, "start the VM")
            return _state("working", "starting the VM on %s" % disk, "runStrategy Always", STARTING, True)
        if not (agent_connected(vmi) and self._boots_from(vmi, disk)):
            return _state("working", "waiting for the guest agent on %s" % disk, describe_vmi(vmi), STARTING)
        kept = [t for t in templates if meta_of(t)["name"] not in previous]
        if len(kept) != len(templates):
            # Undeclared first: Harvester recreates a declared claim that goes missing.
            patch = {
                "metadata": {
                    "resourceVersion": meta_of(vm).get("resourceVersion"),
                    "annotations": {TEMPLATES: json.dumps(kept, sort_keys=True)},
                }
            }
            try:
                self._patch(vm, patch, "drop the old OS disk from %s" % TEMPLATES)
            except _Conflict as exc:
                return _state("working", "releasing the old OS disk", "%s; looking again" % exc, DELETING)
            return _state(
                "working",
                "releasing the old OS disk %s" % ", ".join(previous),
                "%s boots with its guest agent connected; the old disk is no longer declared" % disk,
                DELETING,
                True,
            )
        namespace = meta_of(vm).get("namespace")
        deleted, remaining = [], []
        for old in previous:
            claim = self._fetch("v1", PVC_KIND, old, namespace)
            if claim is None:
                continue
            remaining.append(old)
            if not meta_of(claim).get("deletionTimestamp") and self.module.delete(
                "v1", PVC_KIND, old, namespace, before=claim
            ):
                deleted.append(old)
        if remaining:
            return _state(
                "working",
                "deleting the old OS disk %s" % ", ".join(remaining),
                "%s boots with its guest agent connected" % disk,
                DELETING,
                bool(deleted),
            )
        record = {REVISION: wanted, TARGET: None, PREVIOUS: None}
        if stream:
            record[STREAM] = stream
        patch = {"metadata": {"resourceVersion": meta_of(vm).get("resourceVersion"), "annotations": record}}
        try:
            self._patch(vm, patch, "record the applied revision")
        except _Conflict as exc:
            return _state("working", "recording %s" % wanted, "%s; looking again" % exc, DELETING)
        gone = "; deleted %s" % ", ".join(previous) if previous else ""
        return _state("done", "repaved", "runs %s on %s%s" % (wanted, disk, gone), None, True)

    def _boots_from(self, vmi, disk):
        """The VMI was started from the swapped spec (not one left from before the stop)."""
        volumes = (vmi.get("spec") or {}).get("volumes") or []
        claims = claims_of({"spec": {"template": {"spec": {"volumes": volumes}}}})
        return claims.get(self.os_volume) == disk

    def failure_hint(self, inst, target):
        """How to get back when the repave stopped: the disk the VM is on, the one kept, the rollback."""
        namespace, name = self._where(inst)
        try:
            vm = self._fetch(VM_API, VM_KIND, name, namespace)
        except _Conflict:
            return None
        if vm is None:
            return None
        notes = annotations_of(vm)
        current = claims_of(vm).get(self.os_volume)
        kept = [d for d in split_names(notes.get(PREVIOUS)) if d != current]
        if current != os_disk_name(name, target["revision"]) or not kept:
            return "the VM keeps its OS disk %s; run the module again to resume the repave" % current
        previous = notes.get(REVISION) or "<the previous revision>"
        return "the VM runs on %s; %s %s kept; roll back with state=repaved strategy=direct revision=%s" % (
            current,
            ", ".join(kept),
            "is" if len(kept) == 1 else "are",
            previous,
        )

    # --- teardown

    def teardown(self, inst, purge_data):
        """Delete the VM, then every claim it declared, explicitly (Harvester leaves them behind)."""
        namespace, name = self._where(inst)
        vm = self.module.get(VM_API, VM_KIND, name, namespace)
        roles = self._disks_of(vm, name, namespace)
        data = sorted(n for n, role in roles.items() if role == "data")
        outcome = {"vm": name if vm else None, "pvcs": sorted(roles), "data_pvcs": data}
        what = ", ".join(
            ([ref(VM_KIND, name, namespace)] if vm else []) + ["PVC %s" % n for n in sorted(roles)]
        )
        if data and not purge_data:
            outcome.update(
                failed=True,
                changed=False,
                msg="refusing to tear down %s: it would delete the data volume(s) %s; nothing was deleted. "
                "Set purge_data: true to delete them with the VM (their data is lost)"
                % (ref(VM_KIND, name, namespace), ", ".join(data)),
            )
            return outcome
        if vm is None and not roles:
            return dict(outcome, changed=False, msg="nothing left of %s" % name)
        if self.module.check_mode:
            return dict(outcome, changed=True, msg="would delete %s" % what)
        for claim, role in sorted(roles.items()):
            self._mark(claim, namespace, name, role)
        try:
            if vm is not None:
                self.module.delete(VM_API, VM_KIND, name, namespace, before=vm)
                self._wait_gone(VM_KIND, name, namespace)
                self._wait_gone(VMI_KIND, name, namespace)
            for claim in sorted(roles):
                self.module.delete("v1", PVC_KIND, claim, namespace)
            self._wait_claims_gone(sorted(roles), namespace)
        except WaitError as exc:
            return dict(outcome, failed=True, changed=True, msg="teardown of %s: %s" % (name, exc))
        return dict(outcome, changed=True, msg="deleted %s" % what)

    def _disks_of(self, vm, name, namespace):
        """``{claim: "os" | "data"}`` of the claims that exist: declared by the VM, marked by an earlier
        teardown, or (the VM being gone) named as this collection names them."""
        declared = {}
        if vm is not None:
            try:
                templates = claim_templates(vm)
            except ValueError as exc:
                self.module.fail_json(
                    msg="cannot tell the disks of %s: %s" % (ref(VM_KIND, name, namespace), exc)
                )
            volumes = claims_of(vm)
            os_disks = set(split_names(annotations_of(vm).get(PREVIOUS)))
            os_disks.add(volumes.get(self.os_volume))
            os_disks.update(meta_of(t)["name"] for t in templates if annotations_of(t).get(IMAGE_ID))
            for claim in [meta_of(t)["name"] for t in templates] + list(volumes.values()):
                declared[claim] = "os" if claim in os_disks else "data"
        pattern = re.compile(r"^%s-(?:(os)-%s|(pgdata))$" % (re.escape(name), _REVISION))
        found = {}
        for claim in self.module.list("v1", PVC_KIND, namespace):
            meta = meta_of(claim)
            claim_name = meta.get("name")
            if claim_name in declared:
                found[claim_name] = declared[claim_name]
            elif (meta.get("labels") or {}).get(TEARDOWN) == name:
                found[claim_name] = (meta.get("annotations") or {}).get(TEARDOWN_ROLE) or "data"
            elif vm is None:
                match = pattern.match(claim_name or "")
                if match:
                    found[claim_name] = "os" if match.group(1) else "data"
        return found

    def _mark(self, claim, namespace, name, role):
        patch = {"metadata": {"labels": {TEARDOWN: name}, "annotations": {TEARDOWN_ROLE: role}}}
        obj = {"metadata": {"name": claim, "namespace": namespace}}
        for _attempt in range(5):
            try:
                self._patch(obj, patch, "mark PVC %s for teardown" % claim, "v1", PVC_KIND)
                return
            except _Conflict as exc:
                last = exc
        self.module.fail_json(msg="%s (still failing after 5 attempts)" % last)

    def _wait_gone(self, kind, name, namespace):
        def describe(obj):
            if obj is None:
                return "gone"
            return (
                describe_vmi(obj)
                if kind == VMI_KIND
                else "still there (%s)"
                % ("terminating" if meta_of(obj).get("deletionTimestamp") else "not deleted")
            )

        self.module.wait(
            VM_API,
            kind,
            name,
            namespace,
            lambda obj: (obj is None, None),
            describe,
            "%s to be deleted" % ref(kind, name, namespace),
            self.timeout,
            self.sleep,
        )

    def _wait_claims_gone(self, claims, namespace):
        wanted = set(claims)

        def remaining():
            return sorted(
                wanted & {meta_of(c).get("name") for c in self.module.list("v1", PVC_KIND, namespace)}
            )

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
