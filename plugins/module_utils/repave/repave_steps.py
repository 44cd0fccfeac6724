# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The next step of a direct repave, decided from what the cluster shows.

Pure: no I/O. ``next_step(observed, target, os_volume)`` looks at one observation of a Harvester VM
(the VM, its VMI, the claims of its namespace, the images its disks name) and returns the one step to
take toward ``target``: a state (``working``, ``done``, ``failed``) with a phase, a message, the repave
step, and at most one write for the driver to apply (a merge patch of the VM, or claims to delete).
Because every step is decided from the observation, a killed run resumes wherever it stopped:

1. stop: ``runStrategy: Halted`` with the target in ``goldenimage.pipeline/repave-target`` (one write),
   then wait until the VMI is gone;
2. swap: the new OS disk ``<instance>-os-<revision>`` (never a reused name) joins the annotation with the
   target image's StorageClass and imageId, the OS volume's claimName points at it, and the disk it
   leaves is recorded in ``goldenimage.pipeline/previous-os-disks`` (one write, resourceVersion checked);
3. start: ``runStrategy: Always``, then wait for the VMI Running with ``AgentConnected`` on the new disk;
4. only then the previous OS disks leave the annotation (Harvester would recreate a declared claim),
   are deleted, and a last write removes the markers and records the applied revision.

Only a claim proven to be an OS disk (``repave.classify_claims``) is ever swapped out or deleted. A VM
found with a data claim swapped out of its slot (what an earlier run given a data volume as
``os_volume`` left) first gets its original claims back, before anything else.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import revision
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import kinds
from ansible_collections.goldenimage.pipeline.plugins.module_utils.repave import repave

PREFIX = "goldenimage.pipeline/"
REVISION = PREFIX + "image-revision"
STREAM = PREFIX + "os-version"
TARGET = PREFIX + "repave-target"
ENGINE = PREFIX + "engine-version"
OPT_IN = PREFIX + "repave-opt-in"
PREVIOUS = repave.PREVIOUS
TEMPLATES = repave.TEMPLATES
IMAGE_ID = repave.IMAGE_ID
RUNNING_STRATEGIES = ("Always", "RerunOnFailure", "Once")
STOPPING, SWAPPING, STARTING, DELETING = "StoppingVM", "SwappingOSDisk", "StartingVM", "DeletingOldDisk"
RESTORING = "RestoringDataDisk"


def os_disk_name(instance, name):
    return "%s-os-%s" % (instance, name)


def own_claim_pattern(instance, data_claim="pgdata"):
    """A regex matching the claim names this collection gives instance ``instance``: its OS disks
    (``os_disk_name`` with any revision ``revision.REVISION_PATTERN`` accepts, same-day ``-rNN`` builds
    included) and its data claim."""
    return re.compile(
        r"^%s-(?:os-%s|%s)$" % (re.escape(instance), revision.REVISION_PATTERN, re.escape(data_claim))
    )


def run_strategy(vm):
    spec = kinds.spec(vm)
    if spec.get("runStrategy"):
        return spec["runStrategy"]
    return "Always" if spec.get("running") is True else "Halted"


def instance_view(vm, vmi, claims, os_volume, data_volume):
    """What a run reads of one VM: the instance dict the rules take (phase, revision, disks, the repave
    in flight), from the VM, its VMI (or None) and the claims of its namespace."""
    meta = kinds.meta(vm)
    notes = dict(meta.get("annotations") or {})
    volumes = repave.claims_of(vm)
    target = notes.get(TARGET)
    available = kinds.agent_connected(vmi)
    if target:
        phase = "Repaving"
    elif available:
        phase = "Available"
    elif vmi is None:
        phase = "Stopped" if run_strategy(vm) == "Halted" else "Starting"
    else:
        phase = "NotReady"
    os_claim = volumes.get(os_volume)
    progress = {}
    if target:
        step = STOPPING if vmi is not None else SWAPPING
        if os_claim == os_disk_name(meta.get("name"), target):
            step = DELETING if available else STARTING
        progress = {"targetRevision": target, "step": step, "from": notes.get(REVISION)}
    disks = {}
    for claim in (os_claim, volumes.get(data_volume)):
        if claim:
            disks[claim] = kinds.status(claims.get(claim)).get("phase") or "Missing"
    return {
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        # While a repave is in flight no revision is applied: the run resumes, or a rollback
        # to the previous revision is not mistaken for "already current".
        "revision": None if target else notes.get(REVISION),
        "applied_revision": notes.get(REVISION),
        "engine_version": notes.get(ENGINE),
        "engine_field": "annotation %s" % ENGINE,
        "os_stream": notes.get(STREAM) or None,
        "phase": phase,
        "available": available,
        "operator": {},
        "opt_in": notes.get(OPT_IN),
        "annotations": notes,
        "labels": dict(meta.get("labels") or {}),
        "resource_version": meta.get("resourceVersion"),
        "os_disk": os_claim,
        "data_disk": volumes.get(data_volume),
        "disks": disks,
        "repave": progress,
        "in_flight": bool(target),
    }


def state(status, phase, message, step=None, write=None):
    """A step: ``status`` working/done/failed; ``write`` None, ``{"patch", "action", "conflict"}`` (a
    merge patch of the VM; ``conflict`` is the phase reported when it meets a 409) or ``{"delete"}``
    (claim names)."""
    return {"state": status, "phase": phase, "message": message, "step": step, "write": write}


def write_view(observed, write):
    """What a step's write changes on the VM and its claims, for --diff: ``{field: (before, after)}``; an
    ``after`` of None means the thing is gone. A swap shows the volume's claim before and after, a delete
    each claim it removes, a stop or start the run strategy."""
    vm = observed.get("vm") or {}
    if write.get("delete"):
        claims = observed.get("claims") or {}
        return {
            "claim %s" % name: (kinds.status(claims.get(name) or {}).get("phase") or "present", None)
            for name in write["delete"]
        }
    spec = (write.get("patch") or {}).get("spec") or {}
    view = {}
    if "runStrategy" in spec:
        view["runStrategy"] = (run_strategy(vm), spec["runStrategy"])
    volumes = ((spec.get("template") or {}).get("spec") or {}).get("volumes")
    if volumes is not None:
        before = repave.claims_of(vm)
        after = repave.claims_of({"spec": {"template": {"spec": {"volumes": volumes}}}})
        for name in sorted(set(before) | set(after)):
            if before.get(name) != after.get(name):
                view["volume %s claim" % name] = (before.get(name), after.get(name))
    return view


def _patch(patch, action, conflict=None):
    return {"patch": patch, "action": action, "conflict": conflict}


def observed_roles(observed):
    vm = observed.get("vm")
    return repave.classify_claims(vm, observed.get("claims") or {}, observed.get("images") or {})


def _ref(observed):
    return "VirtualMachine %s/%s" % (observed.get("namespace"), observed.get("name"))


def next_step(observed, target, os_volume):
    """The one next step toward ``target["revision"]`` (see the module docstring)."""
    vm = observed.get("vm")
    name = observed.get("name")
    if vm is None:
        return state("failed", "deleted", "%s does not exist" % _ref(observed))
    try:
        templates = repave.claim_templates(vm)
    except PipelineError as exc:
        return state("failed", "invalid", "%s: %s" % (_ref(observed), exc.msg))
    roles = observed_roles(observed)
    restore = restore_step(observed, roles)
    if restore is not None:
        return restore
    volumes = repave.claims_of(vm)
    current = volumes.get(os_volume)
    if current is None:
        return state(
            "failed",
            "invalid",
            "%s has no volume %s backed by a claim (os_volume)" % (_ref(observed), os_volume),
        )
    disk = os_disk_name(name, target["revision"])
    if current != disk:
        role = roles.get(current) or {"role": repave.DATA_DISK, "why": "it was not classified"}
        if role["role"] != repave.OS_DISK:
            return state(
                "failed",
                "refused",
                "os_volume %s of %s is backed by claim %s, which is data: %s; nothing was swapped (set "
                "os_volume to the VM's OS volume)" % (os_volume, _ref(observed), current, role["why"]),
            )
        elsewhere = [v for v, c in volumes.items() if c == disk and v != os_volume]
        if elsewhere:
            return state(
                "failed",
                "invalid",
                "the new OS disk %s is already attached as volume %s" % (disk, ", ".join(sorted(elsewhere))),
            )
        return _toward(observed, templates, current, disk, target, os_volume)
    return _settle(observed, templates, roles, disk, target, os_volume)


def restore_step(observed, roles):
    """When an earlier run swapped a data claim out of its slot: the write that puts it back, or a failure
    saying why it cannot be put back automatically; None when every data claim is in place."""
    vm = observed["vm"]
    claims = observed.get("claims") or {}
    swapped = repave.swapped_out_data(vm, roles, claims)
    if not swapped:
        return None
    boot = repave.boot_volume(vm)
    templates = {kinds.name(t): t for t in repave.claim_templates(vm)}
    # The slot the data claim was taken from holds a disk made from an image, attached as a non-boot disk.
    slots = [
        (volume, claim)
        for volume, claim in sorted(repave.claims_of(vm).items())
        if volume != boot
        and any(kinds.annotations(o).get(IMAGE_ID) for o in (templates.get(claim), claims.get(claim)) if o)
    ]
    missing = [d for d in swapped if d not in claims]
    if len(swapped) != 1 or len(slots) != 1 or missing:
        why = (
            "claim %s no longer exists" % ", ".join(missing)
            if missing
            else "cannot tell which slot each belongs in (%s)" % ", ".join("%s: %s" % s for s in slots)
        )
        return state(
            "failed",
            "data disk swapped out",
            "%s has data claim(s) %s swapped out of their slot by an earlier repave, and %s: nothing was "
            "written; point each data volume back at its claim by hand, then run again"
            % (_ref(observed), ", ".join(swapped), why),
            RESTORING,
        )
    data, (volume, intruder) = swapped[0], slots[0]
    new_volumes = with_claim(vm, volume, data)
    previous = [d for d in repave.split_names(kinds.annotations(vm).get(PREVIOUS)) if d != data] + [intruder]
    patch = {
        "metadata": {
            "resourceVersion": kinds.meta(vm).get("resourceVersion"),
            "annotations": {PREVIOUS: ",".join(sorted(set(previous), key=previous.index))},
        },
        "spec": {"template": {"spec": {"volumes": new_volumes}}},
    }
    return state(
        "working",
        "restoring the data disk %s" % data,
        "volume %s held %s in place of data claim %s (%s); it is put back before anything else"
        % (volume, intruder, data, roles[data]["why"]),
        RESTORING,
        _patch(
            patch,
            "put data claim %s back into volume %s" % (data, volume),
            "restoring the data disk %s" % data,
        ),
    )


def with_claim(vm, volume, claim):
    """The VM's volumes with ``volume`` pointed at ``claim``."""
    volumes = []
    for item in repave.volumes_of(vm):
        item = dict(item)
        if item.get("name") == volume:
            item.pop("dataVolume", None)
            item["persistentVolumeClaim"] = dict(item.get("persistentVolumeClaim") or {}, claimName=claim)
        volumes.append(item)
    return volumes


def _toward(observed, templates, current, disk, target, os_volume):
    """Steps 1 and 2: stop, then point the OS volume at the new disk."""
    vm, vmi = observed["vm"], observed.get("vmi")
    claims = observed.get("claims") or {}
    notes = kinds.annotations(vm)
    namespace = observed.get("namespace")
    declared = [kinds.name(t) for t in templates]
    existing = claims.get(disk)
    # Before the stop: a claim of the new disk's name that the VM does not declare would stop the swap
    # with the database already down.
    if (
        existing is not None
        and not kinds.terminating(existing)
        and disk not in declared
        and disk not in repave.split_names(notes.get(PREVIOUS))
    ):
        return state(
            "failed",
            "swapping the OS disk",
            "claim %s/%s exists but the VM does not declare it (left by an earlier VM of this name?): "
            "nothing was stopped or swapped; check what it holds and delete it" % (namespace, disk),
            SWAPPING,
        )
    if notes.get(TARGET) != target["revision"] or run_strategy(vm) != "Halted":
        patch = {"metadata": {"annotations": {TARGET: target["revision"]}}, "spec": {"runStrategy": "Halted"}}
        if "running" in kinds.spec(vm):
            patch["spec"]["running"] = None  # KubeVirt refuses running and runStrategy together
        return state(
            "working",
            "stopping the VM",
            "runStrategy Halted; the VM keeps %s until the VMI is gone" % current,
            STOPPING,
            _patch(patch, "stop the VM"),
        )
    if vmi is not None:
        return state("working", "waiting for the VM to stop", kinds.describe_vmi(vmi), STOPPING)
    if existing is not None and kinds.terminating(existing):
        return state(
            "working",
            "waiting for the old claim %s to go" % disk,
            "its name is used again only once it is deleted",
            SWAPPING,
        )
    if disk not in declared:
        template = new_template(observed, templates, current, disk, target)
        if isinstance(template, str):
            return state("failed", "swapping the OS disk", template, SWAPPING)
        templates = templates + [template]
    volumes = with_claim(vm, os_volume, disk)
    previous = [d for d in repave.split_names(notes.get(PREVIOUS)) + [current] if d != disk]
    patch = {
        "metadata": {
            # Only onto the state just checked: a 409 means look again.
            "resourceVersion": kinds.meta(vm).get("resourceVersion"),
            "annotations": {
                TEMPLATES: json.dumps(templates, sort_keys=True),
                PREVIOUS: ",".join(sorted(set(previous), key=previous.index)),
            },
        },
        "spec": {"template": {"spec": {"volumes": volumes}}},
    }
    return state(
        "working",
        "swapped the OS disk to %s" % disk,
        "%s is kept until %s boots" % (current, disk),
        SWAPPING,
        _patch(patch, "swap the OS disk", "swapping the OS disk to %s" % disk),
    )


def new_template(observed, templates, current, disk, target):
    """The new disk's claim: the current OS disk's shape, the target image's class and imageId; a message
    (str) when the catalog entry cannot make one."""
    vm = observed["vm"]
    image = target.get("image") or {}
    if not target.get("storage_class") or not image.get("name"):
        return (
            "catalog entry %s has no image or storage_class (is it imported?): the new OS disk needs both"
            % target["revision"]
        )
    base = next((t for t in templates if kinds.name(t) == current), None)
    if base is None:
        claim = (observed.get("claims") or {}).get(current) or {}
        base = {"spec": {k: v for k, v in kinds.spec(claim).items() if k in ("accessModes", "resources")}}
    spec = dict(kinds.spec(base))
    spec.setdefault("accessModes", ["ReadWriteMany"])
    spec.setdefault("resources", {"requests": {"storage": "10Gi"}})
    spec.update(volumeMode="Block", storageClassName=target["storage_class"])
    for key in ("volumeName", "dataSource", "dataSourceRef"):
        spec.pop(key, None)
    annotations = dict(kinds.annotations(base))
    annotations[IMAGE_ID] = "%s/%s" % (image.get("namespace") or kinds.namespace(vm), image["name"])
    return {"metadata": {"name": disk, "annotations": annotations}, "spec": spec}


def boots_from(vmi, disk, os_volume):
    """The VMI was started from the swapped spec (not one left from before the stop)."""
    volumes = kinds.spec(vmi).get("volumes") or []
    return repave.claims_of({"spec": {"template": {"spec": {"volumes": volumes}}}}).get(os_volume) == disk


def _settle(observed, templates, roles, disk, target, os_volume):
    """Steps 3 and 4 on the new disk: start, wait for the agent, delete the old OS disks, record."""
    vm, vmi = observed["vm"], observed.get("vmi")
    claims = observed.get("claims") or {}
    notes = kinds.annotations(vm)
    wanted = target["revision"]
    in_use = set(repave.claims_of(vm).values())
    previous = [d for d in repave.split_names(notes.get(PREVIOUS)) if d not in in_use]
    stream = target.get("os_stream")
    unfinished = (
        notes.get(TARGET)
        or previous
        or notes.get(REVISION) != wanted
        or (stream and notes.get(STREAM) != stream)
    )
    if not unfinished:
        return state("done", "current", "runs %s on %s" % (wanted, disk))
    if run_strategy(vm) not in RUNNING_STRATEGIES:
        patch = {"spec": {"runStrategy": "Always"}}
        if "running" in kinds.spec(vm):
            patch["spec"]["running"] = None
        return state(
            "working",
            "starting the VM on %s" % disk,
            "runStrategy Always",
            STARTING,
            _patch(patch, "start the VM"),
        )
    if not (kinds.agent_connected(vmi) and boots_from(vmi, disk, os_volume)):
        return state("working", "waiting for the guest agent on %s" % disk, kinds.describe_vmi(vmi), STARTING)
    # Never delete what is not proven to be an OS disk (restore_step has put swapped data claims back).
    keep = [d for d in previous if (roles.get(d) or {}).get("role") != repave.OS_DISK and d in claims]
    if keep:
        return state(
            "failed",
            "keeping %s" % ", ".join(keep),
            "previous disk(s) %s are not proven to be OS disks (%s): nothing was deleted"
            % (", ".join(keep), "; ".join(roles.get(d, {}).get("why", "unclassified") for d in keep)),
            DELETING,
        )
    kept = [t for t in templates if kinds.name(t) not in previous]
    if len(kept) != len(templates):
        # Undeclared first: Harvester recreates a declared claim that goes missing.
        patch = {
            "metadata": {
                "resourceVersion": kinds.meta(vm).get("resourceVersion"),
                "annotations": {TEMPLATES: json.dumps(kept, sort_keys=True)},
            }
        }
        return state(
            "working",
            "releasing the old OS disk %s" % ", ".join(previous),
            "%s boots with its guest agent connected; the old disk is no longer declared" % disk,
            DELETING,
            _patch(patch, "drop the old OS disk from %s" % TEMPLATES, "releasing the old OS disk"),
        )
    remaining = [old for old in previous if old in claims]
    if remaining:
        return state(
            "working",
            "deleting the old OS disk %s" % ", ".join(remaining),
            "%s boots with its guest agent connected" % disk,
            DELETING,
            {"delete": [old for old in remaining if not kinds.terminating(claims[old])]},
        )
    record = {REVISION: wanted, TARGET: None, PREVIOUS: None}
    if stream:
        record[STREAM] = stream
    patch = {"metadata": {"resourceVersion": kinds.meta(vm).get("resourceVersion"), "annotations": record}}
    gone = "; deleted %s" % ", ".join(previous) if previous else ""
    return state(
        "done",
        "repaved",
        "runs %s on %s%s" % (wanted, disk, gone),
        None,
        _patch(patch, "record the applied revision", "recording %s" % wanted),
    )


def failure_hint(name, vm, target, os_volume):
    """How to get back when the repave stopped: the disk the VM is on, the one kept, the rollback."""
    if vm is None:
        return None
    notes = kinds.annotations(vm)
    current = repave.claims_of(vm).get(os_volume)
    kept = [d for d in repave.split_names(notes.get(PREVIOUS)) if d != current]
    if current != os_disk_name(name, target["revision"]) or not kept:
        return "the VM keeps its OS disk %s; run the module again to resume the repave" % current
    previous = notes.get(REVISION) or "<the previous revision>"
    return "the VM runs on %s; %s %s kept; roll back with state=repaved strategy=direct revision=%s" % (
        current,
        ", ".join(kept),
        "is" if len(kept) == 1 else "are",
        previous,
    )


# ------------------------------------------------------------------ the operator's repave, watched

AVAILABLE, REPAVING, FAILED = "Available", "Repaving", "Failed"
TRIGGER_VALUE = "now"
# Seen this many polls in a row before "finished on another revision" is believed (a status
# write may trail the annotation's).
SETTLED_POLLS = 2


def describe_conditions(operator):
    parts = []
    for kind in sorted(operator):
        cond = operator[kind]
        text = "%s=%s" % (kind, cond.get("status"))
        detail = ": ".join(str(v) for v in (cond.get("reason"), cond.get("message")) if v)
        parts.append("%s (%s)" % (text, detail) if detail else text)
    return "; ".join(parts) or "none"


def operator_step(now, wanted, trigger, triggered_before, settled):
    """The next step toward ``wanted`` for a DBInstance the operator repaves, from its view ``now``.

    ``triggered_before``: this run set (or found) the trigger on it; ``settled``: how many polls in a row
    it was seen cleared and Available on another revision. Returns a state (``working``, ``done``,
    ``failed``) with ``write`` (the trigger patch, with the resourceVersion just seen) or None, and
    ``settled`` True when this poll counts as one more such sighting.
    """
    phase, triggered = now["phase"], now["trigger"] == TRIGGER_VALUE
    conditions = "conditions: %s" % describe_conditions(now["operator"])

    def result(status, at, message, step=None, write=None, seen=False):
        return {
            "state": status,
            "phase": at,
            "message": message,
            "step": step,
            "write": write,
            "settled": seen,
        }

    if phase == AVAILABLE and now["revision"] == wanted and not triggered:
        return result("done", AVAILABLE, "running %s" % wanted)
    if phase == FAILED:
        why = "%s: %s" % (now["reason"] or "Failed", now["message"] or "no message")
        if not triggered:
            return result("failed", FAILED, "the operator failed the repave: %s" % why)
        # Stop/swap/start failures keep the trigger: the operator retries them by itself.
        return result("working", FAILED, "retrying after %s; %s" % (why, conditions))
    if phase == REPAVING:
        progress = now["repave"]
        step = progress.get("step")
        text = "repave step %s toward %s" % (step or "(none yet)", progress.get("targetRevision") or wanted)
        if progress.get("startedAt"):
            text += " since %s" % progress["startedAt"]
        message = "; ".join(m for m in (now["message"], conditions) if m)
        return result("working", REPAVING, "%s; %s" % (text, message), step)
    if triggered:
        return result(
            "working", phase or "unknown", "waiting for the operator to pick up the trigger; %s" % conditions
        )
    if triggered_before:
        # The operator cleared the trigger and is Available, but not on our target.
        if settled + 1 < SETTLED_POLLS:
            return result(
                "working", phase or "unknown", "the trigger was cleared; %s" % conditions, seen=True
            )
        return result(
            "failed",
            phase or "unknown",
            "the operator cleared %s but runs %s, not %s (its catalog may differ from this one); %s"
            % (trigger, now["revision"], wanted, conditions),
            seen=True,
        )
    if phase != AVAILABLE:
        return result(
            "failed",
            phase or "unknown",
            "not triggered: phase is %s, not Available (%s)" % (phase, now["message"] or conditions),
        )
    patch = {
        "metadata": {
            "annotations": {trigger: TRIGGER_VALUE},
            # Only the state just checked: a 409 means look again.
            "resourceVersion": now["resource_version"],
        }
    }
    return result("working", AVAILABLE, "set %s=%s" % (trigger, TRIGGER_VALUE), write=patch)
