# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Who uses this? The one reference query every delete path asks before it deletes.

Pure: no I/O. The caller lists what the query needs once (the same LISTs golden_info reports from,
see ``golden_inventory.observation_plan``) and passes the items here. A consumer is a record
``{"kind", "namespace", "name", "why", "loses"}``: the object that uses the subject, why it counts,
and what deleting anyway (``force``) would cost it. ``loses`` is None when no option may override
it: a clone still restoring, or a project's copy on the same storage snapshot, would lose its data.

Golden side (this file): clones in flight (PVCs and DataVolumes restoring from the golden directly
or through a project's seeded copy), project copies on the golden's snapshot handle, selections
naming it, selections and goldens recording it as their rollback target, and the active label.
Another producer's side (stream tips, applied revisions, claims on an image's class) adds its own
``<subject>_consumers`` function returning the same records and refuses through ``refuse_delete``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.module_utils import (
    golden,
    golden_inventory,
    kinds,
    selection,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.errors import Refusal


def consumer(kind, namespace, name, why, loses=None):
    """One consumer record. ``loses``: what a forced delete costs it; None means force cannot override."""
    return {"kind": kind, "namespace": namespace, "name": name, "why": why, "loses": loses}


def describe(record):
    where = "%s/%s" % (record["namespace"], record["name"]) if record["namespace"] else record["name"]
    return "%s %s %s" % (record["kind"], where, record["why"])


def blocking(consumers, force=False):
    """The consumers a delete must not go past: all of them, or with ``force`` those it cannot override."""
    return [c for c in consumers or [] if not force or c.get("loses") is None]


def refuse_delete(subject, consumers, move):
    """The Refusal naming every consumer of ``subject`` (kind namespace/name and why), or None if none."""
    if not consumers:
        return None
    return Refusal(
        subject,
        "refusing to delete it, %d object(s) use it: %s"
        % (len(consumers), "; ".join(describe(c) for c in consumers)),
        move,
        consumers=list(consumers),
    )


# The golden side ----------------------------------------------------------------------------------


def _selection_mode(sel):
    return selection.selection_mode(sel)


def golden_consumers(target, observed, namespaces=None):
    """Every consumer of the golden ``target`` (a VolumeSnapshot of a golden namespace).

    ``observed``: the dict ``golden_inventory.observe_from`` returns (snapshots, contents, pvcs,
    projects, selections, datavolumes). ``namespaces``: ``{mode: namespace}`` of the goldens.
    """
    namespaces = namespaces or golden_inventory.golden_namespaces()
    name, namespace = kinds.name(target), kinds.namespace(target)
    mode_of = {ns: mode for mode, ns in namespaces.items()}
    mode = mode_of.get(namespace)
    family = golden.observed_family(target)
    found = []

    if golden.is_active(target):
        found.append(
            consumer(
                golden.SNAPSHOT_KIND,
                namespace,
                name,
                "carries %s=true, so projects of family %s are seeded from it (label path)"
                % (golden.ACTIVE_LABEL, family),
                loses="new projects of %s are not seeded until another golden is active" % family,
            )
        )

    goldens, copies = golden_inventory.split_snapshots(observed.get("snapshots"), namespaces)
    index = golden_inventory.index(goldens, copies, observed.get("contents"))
    entries = golden_inventory.clones(observed.get("pvcs"), observed.get("datavolumes"), index)
    for entry in entries:
        if entry["namespace"] != namespace or entry["name"] != name:
            continue
        for kind, key in (("PersistentVolumeClaim", "pvcs"), ("DataVolume", "datavolumes")):
            for used in entry[key]:
                via = "directly" if used["via"] == "golden" else "through the project copy %s" % used["via"]
                found.append(consumer(kind, used["namespace"], used["name"], "restores from it %s" % via))

    handle = selection.golden_handle(target, index.contents)
    if handle:
        for copy in copies:
            if index.copy_handle(copy) == handle:
                found.append(
                    consumer(
                        golden.SNAPSHOT_KIND,
                        kinds.namespace(copy),
                        kinds.name(copy),
                        "is a project's seeded copy on its snapshot handle %s, whose storage snapshot the "
                        "golden's delete frees" % handle,
                    )
                )

    for sel in observed.get("selections") or []:
        if kinds.namespace(sel) not in mode_of:
            continue
        spec = kinds.spec(sel)
        if mode is not None and _selection_mode(sel) != mode:
            continue
        if spec.get("snapshotName") == name:
            found.append(
                consumer(
                    selection.SELECTION_KIND,
                    kinds.namespace(sel),
                    kinds.name(sel),
                    "names it in spec.snapshotName",
                    loses="the selection fails closed: %s/%s is skipped and no new project is seeded"
                    % (spec.get("family"), mode),
                )
            )
        if selection.recorded_previous(sel)[0] == name:
            found.append(
                consumer(
                    selection.SELECTION_KIND,
                    kinds.namespace(sel),
                    kinds.name(sel),
                    "records it as the rollback target (annotation %s)" % selection.PREVIOUS_SNAPSHOT,
                    loses="a rollback of %s/%s has nothing to restore" % (spec.get("family"), mode),
                )
            )

    for other_mode, other in goldens:
        if other is target or (kinds.name(other), kinds.namespace(other)) == (name, namespace):
            continue
        if other_mode == mode and selection.recorded_previous(other)[0] == name:
            found.append(
                consumer(
                    golden.SNAPSHOT_KIND,
                    kinds.namespace(other),
                    kinds.name(other),
                    "records it as the rollback target (annotation %s, label path)"
                    % selection.PREVIOUS_SNAPSHOT,
                    loses="a rollback of %s/%s has nothing to restore" % (family, mode),
                )
            )
    return found


def golden_delete_refusal(subject, found, force=False):
    """The Refusal a golden delete raises for ``found`` consumers, or None when it may go ahead.

    ``force`` overrides only consumers that say what they lose (selections, rollback records, the
    active label); a clone still restoring and a project copy on the same storage snapshot always block.
    """
    blockers = blocking(found, force)
    if not blockers:
        return None
    if any(c["loses"] is None for c in blockers):
        move = (
            "wait until the clones finish and delete the PVCs, DataVolumes and project copies that use it "
            "(or let the seeder move the projects to another golden), then run again; force cannot override "
            "these"
        )
    else:
        move = (
            "select or activate another golden first (goldenimage.pipeline.golden_selection), or set "
            "force: true, which costs: %s" % "; ".join(sorted({c["loses"] for c in blockers}))
        )
    return refuse_delete(subject, blockers, move)


# A claim or ConfigMap of a Job's own making (the export's scratch claim and program) ----------------


def _pod_volumes(spec):
    for volume in (spec or {}).get("volumes") or []:
        yield volume
        yield from (volume.get("projected") or {}).get("sources") or []


def _uses(volume, kind, name):
    if kind == "PersistentVolumeClaim":
        return (volume.get("persistentVolumeClaim") or {}).get("claimName") == name or (
            volume.get("dataVolume") or {}
        ).get("name") == name
    return (volume.get("configMap") or {}).get("name") == name


def volume_consumers(kind, namespace, name, observed, own_pod=lambda pod: False):
    """Who uses the claim or ConfigMap ``name`` of ``namespace``, besides the pods ``own_pod`` tells apart
    (those of the Job that made it): pods and VirtualMachines mounting it, and, for a claim, PVCs and
    DataVolumes cloning from it. ``observed``: ``{"pods", "pvcs", "datavolumes", "vms"}``, the namespace's
    items (a missing key means none)."""
    where = "%s %s/%s" % (kind, namespace, name)
    found = []
    for pod in observed.get("pods") or []:
        if own_pod(pod) or kinds.terminating(pod):
            continue
        if any(_uses(v, kind, name) for v in _pod_volumes(kinds.spec(pod))):
            found.append(consumer("Pod", namespace, kinds.name(pod), "mounts %s" % where))
    for vm in observed.get("vms") or []:
        template = (kinds.spec(vm).get("template") or {}).get("spec")
        if any(_uses(v, kind, name) for v in _pod_volumes(template)):
            found.append(consumer("VirtualMachine", namespace, kinds.name(vm), "has %s as a volume" % where))
    if kind != "PersistentVolumeClaim":
        return found
    for pvc in observed.get("pvcs") or []:
        spec = kinds.spec(pvc)
        sources = [spec.get("dataSource") or {}, spec.get("dataSourceRef") or {}]
        if kinds.name(pvc) != name and any(
            s.get("kind") == "PersistentVolumeClaim" and s.get("name") == name for s in sources
        ):
            found.append(
                consumer("PersistentVolumeClaim", namespace, kinds.name(pvc), "clones from %s" % where)
            )
    for dv in observed.get("datavolumes") or []:
        source = (kinds.spec(dv).get("source") or {}).get("pvc") or {}
        if source.get("name") == name and source.get("namespace", namespace) == namespace:
            found.append(consumer("DataVolume", namespace, kinds.name(dv), "clones from %s" % where))
    return found
