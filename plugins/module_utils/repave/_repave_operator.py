# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""DBInstances repaved by their operator: read them with one LIST, trigger with an annotation, watch.

The operator does the repave (stop, swap the OS disk, start, delete the old disk) when the trigger
annotation says ``now``, and clears it when done or when its own pre-flight refuses. This driver only
ever sets the trigger on an instance it saw Available and not on the target, with the resourceVersion
it saw: a trigger never lands on a state it did not check, and never twice on one instance in a run.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import kinds
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import (
    KubeError,
    is_transient,
    ref,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.repave import repave_steps

OPT_IN_ANNOTATION = "goldenimage.pipeline/repave-opt-in"
TRIGGER_VALUE = repave_steps.TRIGGER_VALUE
AVAILABLE, REPAVING = repave_steps.AVAILABLE, repave_steps.REPAVING


def conditions_by_type(obj):
    """``{type: {status, reason, message}}`` of the CR's own conditions."""
    found = {}
    for cond in kinds.status(obj).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type"):
            found[cond["type"]] = {
                "status": cond.get("status"),
                "reason": cond.get("reason"),
                "message": cond.get("message"),
            }
    return found


class OperatorDriver:
    def __init__(self, module, client, params):
        self.module = module
        self.client = client
        self.api_version = params["api_version"]
        self.kind = params["kind"]
        self.namespace = params.get("namespace")
        self.trigger = params["trigger_annotation"]
        self._triggered = set()
        self._settled = {}
        self._objects = {}

    # --- reads

    def require_served(self):
        if not self.module.served(self.api_version, self.kind):
            raise Refusal(
                "kind %s in %s" % (self.kind, self.api_version),
                "the cluster does not serve kind %s in %s" % (self.kind, self.api_version),
                "is the DBInstance CRD installed? check the api_version and kind options",
            )

    def list(self, names, label_selector):
        """Every instance in scope from one LIST; ``names`` filter the listed ones, never GET each."""
        self.require_served()
        items = self.module.list(self.api_version, self.kind, self.namespace, label_selector=label_selector)
        wanted = set(names or [])
        found = []
        for obj in items:
            if wanted and kinds.name(obj) not in wanted:
                continue
            inst = self.view(obj)
            self._objects[self._key(inst)] = obj
            found.append(inst)
        return sorted(found, key=lambda i: (i["namespace"] or "", i["name"]))

    def view(self, obj):
        meta = kinds.meta(obj)
        spec = kinds.spec(obj)
        status = kinds.status(obj)
        applied = status.get("appliedSpec") or {}
        annotations = dict(meta.get("annotations") or {})
        phase = status.get("phase")
        return {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "revision": applied.get("imageRevision"),
            # The running major is what a repave must keep; the spec's is what was asked for.
            "engine_version": str(applied.get("engineVersion") or spec.get("engineVersion") or "") or None,
            "os_stream": spec.get("osVersion") or None,
            "applied_os_stream": applied.get("osVersion"),
            "phase": phase,
            "available": phase == AVAILABLE,
            "operator": conditions_by_type(obj),
            "opt_in": annotations.get(OPT_IN_ANNOTATION),
            "annotations": annotations,
            "labels": dict(meta.get("labels") or {}),
            "resource_version": meta.get("resourceVersion"),
            "trigger": annotations.get(self.trigger),
            "repave": status.get("repave") or {},
            "reason": status.get("reason"),
            "message": status.get("message"),
            "in_flight": annotations.get(self.trigger) == TRIGGER_VALUE or phase == REPAVING,
        }

    def in_flight(self, inst):
        """Repaving, or asked to (an earlier run set the trigger): to be waited on, not triggered."""
        return inst.get("trigger") == TRIGGER_VALUE or inst.get("phase") == REPAVING

    def adopt(self, inst):
        """An earlier round of this roll-out triggered ``inst``: a cleared trigger now means the operator
        ended that repave (done or refused), never that it is still to be set."""
        self._triggered.add(self._key(inst))

    @staticmethod
    def _key(inst):
        return (inst.get("namespace"), inst.get("name"))

    def where(self, inst):
        return ref(self.kind, inst["name"], inst.get("namespace"))

    # --- writes

    def _patch(self, inst, patch, action):
        """Merge-patch the instance through the adapter (5xx, dropped connections and lost replies ridden
        out, an unguarded patch re-applied after a 409). None when a guarded write (the patch names the
        resourceVersion seen) meets an object that moved on: the caller looks again. Else the object."""
        before = self._objects.get(self._key(inst))
        try:
            after, _changed = self.module.patch(
                self.api_version, self.kind, inst["name"], inst.get("namespace"), patch, before=before
            )
        except KubeError as exc:
            if exc.status == 409:
                return None
            raise KubeError("%s on %s: %s" % (action, self.where(inst), exc.msg), **exc.fields) from exc
        self._objects[self._key(inst)] = after
        return after

    def set_opt_in(self, inst, value):
        """Record (or with None remove) the opt-in annotation; True when it changes."""
        if (inst.get("annotations") or {}).get(OPT_IN_ANNOTATION) == value:
            return False
        if self.module.check_mode:
            return True
        action = "set %s" % OPT_IN_ANNOTATION if value else "remove %s" % OPT_IN_ANNOTATION
        patch = {"metadata": {"annotations": {OPT_IN_ANNOTATION: value}}}
        self._patch(inst, patch, action)  # unguarded: the adapter re-applies it after a 409
        inst.setdefault("annotations", {})
        if value is None:
            inst["annotations"].pop(OPT_IN_ANNOTATION, None)
        else:
            inst["annotations"][OPT_IN_ANNOTATION] = value
        inst["opt_in"] = value
        return True

    def advance(self, inst, target):
        """Look at the instance once and take the next step toward ``target["revision"]``."""
        key = self._key(inst)
        if self.in_flight(inst):
            self._triggered.add(key)
        try:
            obj = self.module.fetch(self.api_version, self.kind, inst["name"], inst.get("namespace"))
        except Exception as exc:
            if is_transient(exc):
                return self._state("working", "unknown", "last read failed: %s" % exc)
            self.module.fail_from_exception("get %s" % self.where(inst), exc)
        if obj is None:
            return self._state("failed", "deleted", "%s was deleted during the repave" % self.where(inst))
        now = self.view(obj)
        self._objects[key] = obj
        step = repave_steps.operator_step(
            now, target["revision"], self.trigger, key in self._triggered, self._settled.get(key, 0)
        )
        if step.pop("settled", False):
            self._settled[key] = self._settled.get(key, 0) + 1
        patch = step.pop("write", None)
        if patch is None:
            return dict(step, changed=False)
        after = self._patch(now, patch, "set %s=%s" % (self.trigger, TRIGGER_VALUE))
        if after is None:
            return self._state("working", now["phase"], "the object changed while triggering; looking again")
        self._triggered.add(key)
        self._objects[key] = after
        return dict(step, changed=True)

    @staticmethod
    def _state(state, phase, message, changed=False, step=None):
        return {"state": state, "phase": phase, "message": message, "changed": changed, "step": step}

    def teardown(self, inst, purge_data):
        raise Refusal(
            "state absent with strategy operator",
            "this module deletes Harvester VMs only with strategy direct",
            "delete the %s and let the operator tear it down (its disks included)" % self.where(inst),
        )
