# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The API kinds this collection drives and the accessors every rule reads them with.

Pure: no I/O. One place for group/versions and for reading objects as dicts, so a meaning (when is
a guest agent connected, which field is a snapshot's handle) is decided once and tested once.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

CORE = "v1"
SNAPSHOT = "snapshot.storage.k8s.io/v1"
KUBEVIRT = "kubevirt.io/v1"
CDI = "cdi.kubevirt.io/v1beta1"
HARVESTER = "harvesterhci.io/v1beta1"
KUBEDC = "kube-dc.com/v1"
STORAGE = "storage.k8s.io/v1"
APPS = "apps/v1"
BATCH = "batch/v1"
# Where a Harvester VM declares the claims Harvester makes for it (a JSON list of claim bodies).
HARVESTER_CLAIM_TEMPLATES = "harvesterhci.io/volumeClaimTemplates"


def meta(obj):
    return (obj or {}).get("metadata") or {}


def name(obj):
    return meta(obj).get("name")


def namespace(obj):
    return meta(obj).get("namespace")


def labels(obj):
    return meta(obj).get("labels") or {}


def annotations(obj):
    return meta(obj).get("annotations") or {}


def spec(obj):
    return (obj or {}).get("spec") or {}


def status(obj):
    return (obj or {}).get("status") or {}


def terminating(obj):
    return bool(meta(obj).get("deletionTimestamp"))


def ref(obj):
    """``namespace/name`` (or ``name`` for a cluster-scoped object)."""
    return "%s/%s" % (namespace(obj), name(obj)) if namespace(obj) else name(obj)


def condition(obj, ctype):
    """The status condition of type ``ctype``, or None."""
    for cond in status(obj).get("conditions") or ():
        if cond.get("type") == ctype:
            return cond
    return None


def condition_true(obj, ctype):
    return (condition(obj, ctype) or {}).get("status") == "True"


def agent_connected(vmi):
    """The guest agent of a running VMI is connected: the earliest proof that the guest booted.

    A terminating VMI, or one not in phase Running, is not booted whatever its last condition says
    (a condition can outlive the guest for a moment while the VMI is torn down).
    """
    if not vmi or terminating(vmi):
        return False
    return status(vmi).get("phase") == "Running" and condition_true(vmi, "AgentConnected")


def describe_vmi(vmi):
    """``VMI Running; Ready=True; AgentConnected=False (reason: message)``: what a timeout names."""
    if not vmi:
        return "no VirtualMachineInstance yet"
    state = status(vmi)
    parts = ["VMI %s" % (state.get("phase") or "without a phase")]
    if terminating(vmi):
        parts[0] += " (terminating)"
    for cond in state.get("conditions") or ():
        if not cond.get("type"):
            continue
        text = "%s=%s" % (cond.get("type"), cond.get("status"))
        detail = ": ".join(str(v) for v in (cond.get("reason"), cond.get("message")) if v)
        parts.append("%s (%s)" % (text, detail) if detail else text)
    return "; ".join(parts)


def snapshot_handle(content):
    """The storage snapshot a VolumeSnapshotContent stands for.

    A pre-provisioned content (how goldens are distributed and seeded into projects) declares it in
    ``spec.source.snapshotHandle``: that is its identity, present before the sidecar reports status. A
    dynamically provisioned one learns it from the driver into ``status.snapshotHandle``.
    """
    if not content:
        return None
    declared = (spec(content).get("source") or {}).get("snapshotHandle")
    return declared or status(content).get("snapshotHandle") or None


def declared_claims(vm):
    """The claim names a Harvester VM declares in its volumeClaimTemplates annotation; None when the
    annotation is there but cannot be read."""
    text = annotations(vm).get(HARVESTER_CLAIM_TEMPLATES) or ""
    if not text:
        return []
    try:
        items = json.loads(text)
    except ValueError:
        return None
    if not isinstance(items, list):
        return None
    return [name(item) for item in items if isinstance(item, dict) and name(item)]
