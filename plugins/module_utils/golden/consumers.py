# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Who uses this? The one reference query every delete path asks before it deletes.

Pure: no I/O. The caller lists what the query needs once (the same LISTs golden_info reports from,
see ``golden_inventory.observation_plan``) and passes the items here. A consumer is a record
``{"kind", "namespace", "name", "why"}``: the object that uses the subject and why it counts, its
``why`` a predicate (``describe`` reads ``Kind namespace/name why``). A golden's records add
``loses``, what deleting anyway (``force``) would cost it; None when no option may override it: a
clone still restoring, or a project's copy on the same storage snapshot, would lose its data.
Every delete refuses through ``refuse_delete``: one message naming each consumer.

Golden side: clones in flight (PVCs and DataVolumes restoring from the golden directly or through a
project's seeded copy), project copies on the golden's snapshot handle, selections naming it,
selections and goldens recording it as their rollback target, and the active label.
Volume side (``volume_consumers``, ``delete_consumers``): pods and VirtualMachines mounting a claim or
ConfigMap, and claims, DataVolumes, VirtualMachine dataVolumeTemplates and VolumeSnapshots made from a
claim. Another producer's side (stream tips, applied revisions, claims on an image's class) adds its
own ``<subject>_consumers`` function returning the same records.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import (
    golden,
    golden_inventory,
    selection,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import kinds


def consumer(kind, namespace, name, why, **extra):
    """One consumer record; ``extra`` fields (a golden's ``loses``) are added to it."""
    record = {"kind": kind, "namespace": namespace, "name": name, "why": why}
    record.update(extra)
    return record


def golden_consumer(kind, namespace, name, why, loses=None):
    """A golden's consumer: ``loses`` says what a forced delete costs it; None means force cannot override."""
    return consumer(kind, namespace, name, why, loses=loses)


def describe(record):
    where = "%s/%s" % (record["namespace"], record["name"]) if record["namespace"] else record["name"]
    return "%s %s %s" % (record["kind"], where, record["why"])


def blocking(consumers, force=False):
    """The consumers a delete must not go past: all of them, or with ``force`` those it cannot override."""
    return [c for c in consumers or [] if not force or c.get("loses") is None]


def refuse_delete(subject, consumers, move, **fields):
    """The Refusal naming every consumer of ``subject`` (kind namespace/name and why), or None if none.

    ``fields`` are added to the result next to ``consumers``."""
    if not consumers:
        return None
    return Refusal(
        subject,
        "refusing to delete it, %d object(s) use it: %s"
        % (len(consumers), "; ".join(describe(c) for c in consumers)),
        move,
        consumers=list(consumers),
        **fields,
    )


def users_unknown(subject, exc):
    """The Refusal for a delete whose reference query failed: not knowing who uses an object is never
    taken to mean nobody does."""
    return Refusal(subject, "cannot tell who uses it, nothing was deleted: %s" % exc.msg, **exc.fields)


# The golden side ----------------------------------------------------------------------------------


def _selection_mode(sel):
    return selection.selection_mode(sel)


# How each kind of object uses a golden it names.
CLONE_WHY = {
    "pvcs": "restores from it",
    "datavolumes": "restores from it",
    "datasources": "names it as its source (every clone of the DataSource restores from it)",
    "vms": "restores a disk from it in its dataVolumeTemplates (at its next start or scale-up)",
}


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
            golden_consumer(
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
    for entry in golden_inventory.clones(observed, index):
        if entry["namespace"] != namespace or entry["name"] != name:
            continue
        for key in golden_inventory.CLONE_LISTS:
            for used in entry[key]:
                via = "directly" if used["via"] == "golden" else "through the project copy %s" % used["via"]
                found.append(
                    golden_consumer(
                        golden_inventory.CLONE_KINDS[key],
                        used["namespace"],
                        used["name"],
                        "%s %s" % (CLONE_WHY[key], via),
                    )
                )

    handle = selection.golden_handle(target, index.contents)
    if handle:
        seen = {kinds.status(target).get("boundVolumeSnapshotContentName")}
        for copy in copies:
            if index.copy_handle(copy) == handle:
                seen.add(kinds.status(copy).get("boundVolumeSnapshotContentName"))
                found.append(
                    golden_consumer(
                        golden.SNAPSHOT_KIND,
                        kinds.namespace(copy),
                        kinds.name(copy),
                        "is a project's seeded copy on its snapshot handle %s, whose storage snapshot the "
                        "golden's delete frees" % handle,
                    )
                )
        # Any other content on the same storage snapshot (a copy made by hand or by another tool, in any
        # namespace, labelled or not) loses its bytes with the golden's: it is a consumer as well.
        for content in observed.get("contents") or []:
            if kinds.name(content) in seen or selection.content_handle(content) != handle:
                continue
            ref = kinds.spec(content).get("volumeSnapshotRef") or {}
            found.append(
                golden_consumer(
                    selection.CONTENT_KIND,
                    ref.get("namespace"),
                    kinds.name(content),
                    "shares its storage snapshot handle %s (bound to VolumeSnapshot %s/%s), which the "
                    "golden's delete frees" % (handle, ref.get("namespace"), ref.get("name")),
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
                golden_consumer(
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
                golden_consumer(
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
                golden_consumer(
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
    if any(c.get("loses") is None for c in blockers):
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


# Claims and ConfigMaps: who mounts them, who is made from them -------------------------------------

CLAIM = "PersistentVolumeClaim"
# A pod in one of these phases has ended: it mounts nothing any more (Kubernetes' pvc-protection agrees).
ENDED = ("Succeeded", "Failed")


def _pod_volumes(spec):
    for volume in (spec or {}).get("volumes") or []:
        yield volume
        yield from (volume.get("projected") or {}).get("sources") or []


def _uses(volume, kind, name):
    if kind == CLAIM:
        return (volume.get("persistentVolumeClaim") or {}).get("claimName") == name or (
            volume.get("dataVolume") or {}
        ).get("name") == name
    return (volume.get("configMap") or {}).get("name") == name


def _where(item, namespace):
    """The item's namespace, or the subject's for an item listed from it without one."""
    return kinds.namespace(item) or namespace


def _names_claim(ref, default_namespace, namespace, name):
    """Whether a claim reference (a dataSource, a dataSourceRef or a DataVolume's ``source.pvc``) names
    ``namespace/name``; a reference without a namespace is to its holder's own namespace."""
    ref = ref or {}
    return (
        ref.get("kind", CLAIM) == CLAIM
        and not ref.get("apiGroup")
        and ref.get("name") == name
        and (ref.get("namespace") or default_namespace) == namespace
    )


def owned_by(obj, kind, name):
    """Whether an ownerReference of ``obj`` names ``kind``/``name`` (the owner is in ``obj``'s namespace)."""
    return any(
        ref.get("kind") == kind and ref.get("name") == name
        for ref in kinds.meta(obj).get("ownerReferences") or []
    )


def volume_consumers(kind, namespace, name, observed, own_pod=lambda pod: False, skip=()):
    """Who uses the claim or ConfigMap ``name`` of ``namespace``.

    Pods (those ``own_pod`` tells apart, ended or being deleted left out) and VirtualMachines mounting
    it (or, for a claim, declaring it in Harvester's volumeClaimTemplates, so Harvester makes it again
    for them); for a claim also the claims cloning it (``dataSource``, ``dataSourceRef``), the DataVolumes and
    VirtualMachine ``dataVolumeTemplates`` cloning it (``source.pvc``), the DataSources naming it
    (``source.pvc``) and the VolumeSnapshots taken of it. ``observed``: ``{"pods", "pvcs", "datavolumes",
    "datasources", "vms", "snapshots"}``, items of the namespace or
    of all namespaces (an item without a namespace is of ``namespace``; a missing key means none).
    ``skip``: ``(kind, namespace, name)`` of objects that do not count (those deleted with it).
    """
    where = "%s %s/%s" % (kind, namespace, name)
    found = []

    def add(item_kind, item, why):
        key = (item_kind, _where(item, namespace), kinds.name(item))
        if key not in skip and not kinds.terminating(item):
            found.append(consumer(item_kind, key[1], key[2], why))

    for pod in observed.get("pods") or []:
        if _where(pod, namespace) != namespace or own_pod(pod) or kinds.status(pod).get("phase") in ENDED:
            continue
        if any(_uses(v, kind, name) for v in _pod_volumes(kinds.spec(pod))):
            add("Pod", pod, "mounts %s" % where)
    for vm in observed.get("vms") or []:
        vm_ns = _where(vm, namespace)
        template = (kinds.spec(vm).get("template") or {}).get("spec")
        templates = kinds.spec(vm).get("dataVolumeTemplates") or []
        declared = kinds.declared_claims(vm) if kind == CLAIM and vm_ns == namespace else []
        if vm_ns == namespace and any(_uses(v, kind, name) for v in _pod_volumes(template)):
            add("VirtualMachine", vm, "has %s as a volume" % where)
        elif declared is None:
            add("VirtualMachine", vm, "has a volumeClaimTemplates annotation that cannot be read")
        elif name in declared:
            add("VirtualMachine", vm, "declares %s in its volumeClaimTemplates" % where)
        elif kind == CLAIM and any(
            _names_claim((kinds.spec(t).get("source") or {}).get("pvc"), vm_ns, namespace, name)
            for t in templates
        ):
            add("VirtualMachine", vm, "clones %s in its dataVolumeTemplates" % where)
    if kind != CLAIM:
        return found
    for pvc in observed.get("pvcs") or []:
        pvc_ns, spec = _where(pvc, namespace), kinds.spec(pvc)
        if (pvc_ns, kinds.name(pvc)) == (namespace, name):
            continue
        source = dict(spec.get("dataSource") or {}, namespace=None)  # a dataSource is of its own namespace
        if _names_claim(source, pvc_ns, namespace, name) or _names_claim(
            spec.get("dataSourceRef"), pvc_ns, namespace, name
        ):
            add(CLAIM, pvc, "clones from %s" % where)
    for dv in observed.get("datavolumes") or []:
        dv_ns = _where(dv, namespace)
        if (dv_ns, kinds.name(dv)) != (namespace, name) and _names_claim(
            (kinds.spec(dv).get("source") or {}).get("pvc"), dv_ns, namespace, name
        ):
            add("DataVolume", dv, "clones from %s" % where)
    for source in observed.get("datasources") or []:
        if _names_claim(
            (kinds.spec(source).get("source") or {}).get("pvc"), _where(source, namespace), namespace, name
        ):
            add(
                "DataSource",
                source,
                "names %s as its source (every clone of the DataSource reads it)" % where,
            )
    for snapshot in observed.get("snapshots") or []:
        source = kinds.spec(snapshot).get("source") or {}
        if _where(snapshot, namespace) == namespace and source.get("persistentVolumeClaimName") == name:
            state = "ready" if kinds.status(snapshot).get("readyToUse") else "not ready yet"
            add("VolumeSnapshot", snapshot, "is a snapshot of %s (%s)" % (where, state))
    return found


# A delete of a claim, a DataVolume or a VirtualMachine (goldenimage.pipeline.kube_object) ----------

CDI_GROUP, KUBEVIRT_GROUP = "cdi.kubevirt.io", "kubevirt.io"
# (group, kind) of the objects whose delete asks who uses them first, and what it takes with it.
ASKING = {("", CLAIM), (CDI_GROUP, "DataVolume"), (KUBEVIRT_GROUP, "VirtualMachine")}


def _group(obj):
    api_version = obj.get("apiVersion") or ""
    return api_version.split("/")[0] if "/" in api_version else ""


def asks(obj):
    """Whether deleting ``obj`` must first ask who uses it (a volume, or a VM that owns volumes)."""
    return (_group(obj), obj.get("kind")) in ASKING


def volume_plan(namespace):
    """The LIST requests ``delete_consumers`` needs for an object of ``namespace``, in the shape of
    ``golden_inventory.observation_plan``: pods and snapshots of the namespace (they reach no other),
    claims, DataVolumes, DataSources and VirtualMachines of all namespaces (they clone across namespaces)."""
    queries = [
        ("pods", kinds.CORE, "Pod", namespace, False),
        ("pvcs", kinds.CORE, CLAIM, None, False),
        ("datavolumes", kinds.CDI, "DataVolume", None, True),
        ("datasources", kinds.CDI, "DataSource", None, True),
        ("vms", kinds.KUBEVIRT, "VirtualMachine", None, True),
        ("snapshots", kinds.SNAPSHOT, "VolumeSnapshot", namespace, True),
    ]
    fields = ("key", "api", "kind", "namespace", "optional")
    return [dict({f: query[i] for i, f in enumerate(fields)}, selector=None) for query in queries]


def dependents(vm, observed):
    """The DataVolumes a VirtualMachine's delete takes with it: those of its ``dataVolumeTemplates`` and
    those it owns, by name."""
    names = [kinds.name(t) for t in kinds.spec(vm).get("dataVolumeTemplates") or [] if kinds.name(t)]
    uid, namespace = kinds.meta(vm).get("uid"), kinds.namespace(vm)
    for dv in observed.get("datavolumes") or []:
        owners = kinds.meta(dv).get("ownerReferences") or []
        if _where(dv, namespace) == namespace and any(
            r.get("kind") == "VirtualMachine"
            and (r.get("uid") == uid if uid else r.get("name") == kinds.name(vm))
            for r in owners
        ):
            names.append(kinds.name(dv))
    return sorted(set(names))


def delete_consumers(obj, observed, propagation=None):
    """Who uses ``obj`` (as read) or what its delete takes with it: ``(consumers, taken)``.

    A claim: what mounts or is made from it, its own pods (CDI's importer, owned by it) left out. A
    DataVolume: the same of its claim (same name), its own and its claim's pods left out. A
    VirtualMachine (unless ``propagation`` is Orphan): the same of each DataVolume it owns, the VM itself
    and its launcher pods (owned by its VirtualMachineInstance) left out. ``taken``: the DataVolumes that
    go with it.
    """
    namespace, name, kind = kinds.namespace(obj), kinds.name(obj), obj.get("kind")
    if kind == "VirtualMachine":
        taken = [] if propagation == "Orphan" else dependents(obj, observed)
        skip = {("VirtualMachine", namespace, name)}
        found = []
        for claim in taken:

            def own(pod, claim=claim):
                return owned_by(pod, "VirtualMachineInstance", name) or _owns_claim(pod, claim)

            found.extend(volume_consumers(CLAIM, namespace, claim, observed, own, skip))
        return found, taken
    return volume_consumers(CLAIM, namespace, name, observed, lambda pod: _owns_claim(pod, name)), []


def _owns_claim(pod, name):
    return owned_by(pod, CLAIM, name) or owned_by(pod, "DataVolume", name)


def delete_refusal(obj, observed, propagation=None):
    """The Refusal of deleting ``obj`` while something uses it (or what goes with it), or None."""
    found, taken = delete_consumers(obj, observed, propagation)
    subject = "%s %s" % (obj.get("kind"), kinds.ref(obj))
    if taken:
        subject += " (with its DataVolumes %s)" % ", ".join(taken)
    return refuse_delete(
        subject,
        found,
        "stop or delete what mounts it, let the clones and snapshots made from it finish and delete them "
        "first (or move their users to another volume), then run again; nothing was deleted",
    )
