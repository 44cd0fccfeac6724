# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The read-only golden report: families, what each serves, conflicts, projects and clones.

Pure: no I/O. The caller lists each kind once (the VolumeSnapshots of the golden namespaces and those
carrying the family label elsewhere, VolumeSnapshotContents, PersistentVolumeClaims, project Namespaces,
GoldenImageSelections and DataVolumes) and passes the items here, so the cost of a report does not grow
with the number of projects. What a (family, mode) serves and what counts as a conflict are decided
by ``selection``; this file only joins the listed objects around those decisions.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import details
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import golden, selection
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import kinds
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance

SEEDED_FROM_ANNOTATION = "kube-dc.com/seeded-from"
SNAPSHOT_GROUP = "snapshot.storage.k8s.io"
DATAVOLUME_API_VERSION = "cdi.kubevirt.io/v1beta1"
DATAVOLUME_KIND = "DataVolume"
DATASOURCE_KIND = "DataSource"
VM_API_VERSION, VM_KIND = "kubevirt.io/v1", "VirtualMachine"
# What restores from a golden by naming it, by list: a claim's dataSource, a DataVolume's source.snapshot,
# a DataSource's source.snapshot (every clone of the DataSource reads it), a VirtualMachine's
# dataVolumeTemplates (its next start, or a pool's next member, clones it).
CLONE_LISTS = ("pvcs", "datavolumes", "datasources", "vms")
CLONE_KINDS = {
    "pvcs": "PersistentVolumeClaim",
    "datavolumes": DATAVOLUME_KIND,
    "datasources": DATASOURCE_KIND,
    "vms": VM_KIND,
}
# A selection whose family and mode match no golden is reported with the conflicts.
GOVERNS_NOTHING = "governs_nothing"

_VERSION = re.compile(r"(?:^|-)(\d{8}|\d{4}-\d{2}-\d{2})(?:-([0-9a-f]{12}))?$")


_name = kinds.name
_namespace = kinds.namespace


def _ref(namespace, name):
    return "%s/%s" % (namespace, name)


def golden_namespaces(filesystem=None, block=None):
    """``{mode: namespace}``: the contract's namespaces unless overridden."""
    return {
        golden.FILESYSTEM: filesystem or golden.NAMESPACES[golden.FILESYSTEM],
        golden.BLOCK: block or golden.NAMESPACES[golden.BLOCK],
    }


def snapshot_selector(family=None):
    """Label selector of the VolumeSnapshot list across all namespaces that finds every project's copy."""
    return "%s=%s" % (golden.FAMILY_LABEL, family) if family else golden.FAMILY_LABEL


def parse_version(name, family=None):
    """``{"date": "YYYYMMDD" or None, "digest_prefix": 12 hex or None}`` from a versioned golden name.

    Reads ``golden-<family>-<YYYYMMDD>-<12 hex>`` and the hand-made ``golden-<family>-<YYYY-MM-DD>``.
    """
    text = name or ""
    prefix = "golden-%s-" % family if family else None
    if prefix and text.startswith(prefix):
        text = "-" + text[len(prefix) :]
    match = _VERSION.search(text)
    if not match:
        return {"date": None, "digest_prefix": None}
    try:
        date = golden.normalize_date(match.group(1))
    except golden.GoldenError:
        date = None
    return {"date": date, "digest_prefix": match.group(2)}


def _created_date(obj):
    stamp = ((obj or {}).get("metadata") or {}).get("creationTimestamp") or ""
    match = re.match(r"^(\d{4})-(\d{2})-(\d{2})T", str(stamp))
    return "".join(match.groups()) if match else None


def _copy_mode(obj):
    """The mode of a project's seeded copy: its mode key, else its name's ``-block`` suffix."""
    try:
        raw = kinds.labels(obj).get(golden.MODE_KEY) or kinds.annotations(obj).get(golden.MODE_KEY)
        if raw:
            return golden.normalize_mode(raw)
    except golden.GoldenError:
        pass
    return golden.BLOCK if (_name(obj) or "").endswith("-block") else golden.FILESYSTEM


def _raw_mode(value):
    try:
        return golden.normalize_mode(value)
    except golden.GoldenError:
        return None


def _canonical(obj, mode):
    """``obj`` as if it lived in the contract's namespace for ``mode``.

    ``selection`` maps namespaces to modes by the contract; a cluster that overrides the golden
    namespaces is mapped onto it here, so the rules stay in one place.
    """
    default = golden.NAMESPACES[mode]
    if _namespace(obj) == default:
        return obj
    shallow = dict(obj)
    shallow["metadata"] = dict(obj.get("metadata") or {}, namespace=default)
    return shallow


def split_snapshots(snapshots, namespaces):
    """``(goldens, copies)``: goldens are the family-carrying snapshots of the golden namespaces
    (as ``(mode, obj)``, in list order); copies are the rest, the projects' seeded snapshots."""
    mode_of = {ns: mode for mode, ns in namespaces.items()}
    goldens, copies = [], []
    for obj in snapshots or []:
        if not golden.observed_family(obj):
            continue
        mode = mode_of.get(_namespace(obj))
        if mode is None:
            copies.append(obj)
        else:
            goldens.append((mode, obj))
    return goldens, copies


def _governing(selections, namespaces):
    """Selections of the golden namespaces; the consumer reads nothing anywhere else."""
    wanted = set(namespaces.values())
    return [s for s in selections or [] if _namespace(s) in wanted]


def _digests(selections):
    """``{snapshot name: release digest}`` from what selections name now or recorded before."""
    found = {}
    for sel in selections or []:
        previous, previous_digest = selection.recorded_previous(sel)
        if previous and previous_digest:
            found.setdefault(previous, previous_digest)
        spec = sel.get("spec") or {}
        if spec.get("snapshotName") and spec.get("releaseDigest"):
            found[spec["snapshotName"]] = spec["releaseDigest"]
    return found


def candidate(obj, mode, handle, digests):
    """One golden as the report shows it."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    family = golden.observed_family(obj)
    version = parse_version(meta.get("name"), family)
    own = golden.release_digest(obj)
    digest = own or digests.get(meta.get("name"))
    prefix = version["digest_prefix"]
    if digest and not prefix:
        try:
            prefix = golden.normalize_digest(digest)[7:19]
        except golden.GoldenError:
            prefix = None
    found = {
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "family": family,
        "os_name": kinds.annotations(obj).get(golden.OS_NAME_ANNOTATION),
        "mode": mode,
        "date": version["date"] or _created_date(obj),
        "created": meta.get("creationTimestamp"),
        "digest": digest,
        # The golden's own digest: a selection's word for it binds no recorded verdict (judge_provenance).
        "own_digest": own,
        "digest_prefix": prefix,
        "size": status.get("restoreSize"),
        "ready": golden.is_ready(obj),
        "active": golden.is_active(obj),
        "content": status.get("boundVolumeSnapshotContentName"),
        "handle": handle,
        "selected": False,
        "serving": False,
        "problems": golden.validate_golden(_canonical(obj, mode)),
        "clones": 0,
        "image_facts": golden.recorded_facts(obj),
        "provenance": golden.recorded_provenance(obj),
    }
    # Who signed it and whether its facts are the signed ones: the rule the drift report reads too.
    found["provenance_report"] = (
        provenance.signed_report(found["provenance"], found["image_facts"]) if found["provenance"] else None
    )
    return found


def _pair_key(family, mode):
    return (family, mode)


class _Index:
    """Lookups built once over the listed objects.

    Each project copy is read once here (its family, mode and handle); the per-pair passes of the
    report look copies up by name instead of walking every copy again.
    """

    def __init__(self, goldens, copies, contents):
        self.contents = {_name(c): c for c in contents or []}
        self.goldens = goldens
        self.snapshots = {}
        self.by_handle = {}
        # copy name -> {namespace: copy}, and (family, mode) of every copy in list order
        self.copies_by_name = {}
        self.copy_pairs = []
        for mode, obj in goldens:
            handle = selection.golden_handle(obj, self.contents)
            self.snapshots[(_namespace(obj), _name(obj))] = ("golden", mode, obj, handle)
            if handle:
                self.by_handle.setdefault(handle, (mode, obj))
        for obj in copies:
            handle = self.copy_handle(obj)
            mode = _copy_mode(obj)
            name, namespace = _name(obj), _namespace(obj)
            self.snapshots[(namespace, name)] = ("copy", mode, obj, handle)
            self.copies_by_name.setdefault(name, {})[namespace] = obj
            self.copy_pairs.append((namespace, golden.observed_family(obj), mode))

    def copy_handle(self, obj):
        bound = ((obj.get("status") or {}).get("boundVolumeSnapshotContentName")) or (
            ((obj.get("spec") or {}).get("source") or {}).get("volumeSnapshotContentName")
        )
        return selection.content_handle(self.contents.get(bound)) if bound else None

    def golden_ref(self, handle):
        found = self.by_handle.get(handle) if handle else None
        return _ref(_namespace(found[1]), _name(found[1])) if found else None


def index(goldens, copies, contents):
    """The lookups a report and the reference query (``consumers``) share, built once."""
    return _Index(goldens, copies, contents)


def observation_plan(namespaces, family=None, project_selector=selection.PROJECT_SELECTOR):
    """The LIST requests a report needs, whatever the number of projects, as dicts with ``key`` (where
    the items go), ``api``, ``kind``, ``namespace``, ``selector`` and ``optional`` (the kind may not be
    served: a cluster without the CRD or without CDI has none).

    Goldens are listed whole from their namespaces, so they are seen in the order and with the family
    annotation the seeder sees; project copies come from one labelled list of all namespaces.
    """
    snapshots = (golden.SNAPSHOT_API_VERSION, golden.SNAPSHOT_KIND)
    queries = [("goldens",) + snapshots + (ns, None, False) for ns in sorted(set(namespaces.values()))]
    queries += [
        ("labelled",) + snapshots + (None, snapshot_selector(family), False),
        ("contents", selection.CONTENT_API_VERSION, selection.CONTENT_KIND, None, None, False),
        ("pvcs", "v1", "PersistentVolumeClaim", None, None, False),
        ("projects", "v1", "Namespace", None, project_selector, False),
        ("selections", selection.SELECTION_API_VERSION, selection.SELECTION_KIND, None, None, True),
        ("datavolumes", DATAVOLUME_API_VERSION, DATAVOLUME_KIND, None, None, True),
        ("datasources", DATAVOLUME_API_VERSION, DATASOURCE_KIND, None, None, True),
        ("vms", VM_API_VERSION, VM_KIND, None, None, True),
    ]
    fields = ("key", "api", "kind", "namespace", "selector", "optional")
    plan = [{field: query[i] for i, field in enumerate(fields)} for query in queries]
    return plan


def assemble(listed, namespaces):
    """``observed`` for ``report`` and ``consumers`` from ``{key: [items of each LIST]}`` of the plan."""
    golden_spaces = set(namespaces.values())
    observed = {key: [] for key in ("snapshots", "contents", "pvcs", "projects", "selections") + CLONE_LISTS}
    for key, batches in listed.items():
        for items in batches:
            if key == "goldens":
                observed["snapshots"].extend(items)
            elif key == "labelled":
                observed["snapshots"].extend(s for s in items if _namespace(s) not in golden_spaces)
            else:
                observed[key].extend(items)
    return observed


def _pairs(goldens, index, projects, family, mode):
    """(family, mode) pairs to report: those with goldens, then those only projects still hold."""
    seen = {}
    for pair_mode, obj in goldens:
        seen.setdefault(_pair_key(golden.observed_family(obj), pair_mode), None)
    for namespace, copy_family, copy_mode in index.copy_pairs:
        if namespace in projects:
            seen.setdefault(_pair_key(copy_family, copy_mode), None)
    return sorted(
        (k for k in seen if (family is None or k[0] == family) and (mode is None or k[1] == mode)),
        key=lambda k: (k[0], k[1] != golden.FILESYSTEM),
    )


def _serving_entry(resolved, namespaces, mode, index):
    name = resolved["snapshot"]
    handle = None
    if name:
        found = index.snapshots.get((namespaces[mode], name))
        handle = found[3] if found else None
    return {
        "mode": mode,
        "snapshot": name,
        "namespace": namespaces[mode] if name else None,
        "path": resolved["path"],
        "selection": resolved["selection"],
        "held": resolved["held"],
        "reason": resolved["reason"],
        "handle": handle,
        "conflicts": [c["type"] for c in resolved["conflicts"]],
        "order": resolved["candidates"],
    }


def _projects(project_names, index, family, mode, serving):
    """``selection.project_resolution`` of every project (``project_names`` sorted) for one pair."""
    expected = serving["handle"]
    served = _ref(serving["namespace"], serving["snapshot"]) if serving["snapshot"] else None
    seeded = index.copies_by_name.get(selection.project_snapshot_name(family, mode)) or {}
    contents = index.contents
    resolve = selection.project_resolution
    entries = [resolve(ns, seeded.get(ns), contents, expected) for ns in project_names]
    for entry in entries:
        entry.update(
            family=family,
            mode=mode,
            golden=index.golden_ref(entry["handle"]),
            serving=served,
            held=serving["held"],
        )
        if entry["handle"] and not expected:
            if serving["held"]:
                entry["reason"] = "nothing is served for %s/%s (held: %s); the project keeps %s" % (
                    family,
                    mode,
                    serving["reason"],
                    entry["golden"] or entry["handle"] or "its copy",
                )
            elif serving["snapshot"] is None:
                entry["reason"] = "no golden serves %s/%s; the project still holds a copy of %s" % (
                    family,
                    mode,
                    entry["golden"] or entry["handle"] or "an unknown snapshot",
                )
            else:
                entry["reason"] = "the serving golden %s has no snapshot handle yet" % served
    return entries


def _pvc_sources(pvc):
    """(namespace, name) of each VolumeSnapshot a PVC is restored from."""
    spec = pvc.get("spec") or {}
    found = []
    for key in ("dataSource", "dataSourceRef"):
        source = spec.get(key) or {}
        if source.get("kind") != golden.SNAPSHOT_KIND or source.get("apiGroup") not in (
            None,
            "",
            SNAPSHOT_GROUP,
        ):
            continue
        where = (source.get("namespace") or _namespace(pvc), source.get("name"))
        if where not in found:
            found.append(where)
    return found


def _snapshot_source(spec, namespace):
    snap = ((spec or {}).get("source") or {}).get("snapshot") or {}
    return [(snap.get("namespace") or namespace, snap["name"])] if snap.get("name") else []


def _sources(key, obj):
    """(namespace, name) of each VolumeSnapshot the object of list ``key`` restores from."""
    if key == "pvcs":
        return _pvc_sources(obj)
    if key == "vms":
        found = []
        for template in (obj.get("spec") or {}).get("dataVolumeTemplates") or []:
            for where in _snapshot_source(template.get("spec"), _namespace(obj)):
                if where not in found:
                    found.append(where)
        return found
    return _snapshot_source(obj.get("spec"), _namespace(obj))


def clones(observed, index, family=None, mode=None):
    """Who still restores from each golden, directly or through a project's seeded copy.

    ``observed``: the lists of CLONE_LISTS (a missing one is empty). One entry per golden (with ``count``
    0 when nothing clones it), plus one per handle that no listed golden owns any more (``golden`` is then
    None) when something still clones it.
    """
    entries = {}
    order = []

    def entry_for(kind, snap_mode, obj, handle):
        if kind == "golden":
            key = ("golden", _namespace(obj), _name(obj))
            label = {
                "golden": _ref(_namespace(obj), _name(obj)),
                "namespace": _namespace(obj),
                "name": _name(obj),
            }
        else:
            owner = index.by_handle.get(handle) if handle else None
            if owner:
                return entry_for("golden", owner[0], owner[1], handle)
            key = ("orphan", handle or _ref(_namespace(obj), _name(obj)))
            label = {"golden": None, "namespace": None, "name": None}
        if key not in entries:
            entries[key] = dict(
                label,
                family=golden.observed_family(obj),
                mode=snap_mode,
                handle=handle,
                count=0,
                **{key: [] for key in CLONE_LISTS},
            )
            order.append(key)
        return entries[key]

    for snap_mode, obj in index.goldens:
        entry_for("golden", snap_mode, obj, None)

    def add(kind_list, consumer, where):
        found = index.snapshots.get(where)
        if found is None:
            return
        kind, snap_mode, obj, handle = found
        entry = entry_for(kind, snap_mode, obj, handle)
        via = "golden" if kind == "golden" else _ref(where[0], where[1])
        entry[kind_list].append({"namespace": _namespace(consumer), "name": _name(consumer), "via": via})
        entry["count"] += 1

    for key in CLONE_LISTS:
        for obj in observed.get(key) or []:
            for where in _sources(key, obj):
                add(key, obj, where)
    result = []
    for key in order:
        entry = entries[key]
        if key[0] == "orphan" and not entry["count"]:
            continue
        if (family is not None and entry["family"] != family) or (mode is not None and entry["mode"] != mode):
            continue
        result.append(entry)
    return result


def report(
    snapshots,
    contents,
    pvcs,
    projects,
    selections,
    datavolumes=None,
    namespaces=None,
    family=None,
    mode=None,
    datasources=None,
    vms=None,
):
    """The whole report: ``{"families", "conflicts", "projects", "clones"}``.

    ``snapshots``: the VolumeSnapshots of the golden namespaces in API list order (the order decides
    the label path), and the projects' seeded copies.
    ``projects``: project Namespace objects (or names). ``selections``: GoldenImageSelections of any
    namespace (None when the cluster has no such kind). ``namespaces``: ``{mode: namespace}``.
    """
    namespaces = namespaces or golden_namespaces()
    mode = golden.normalize_mode(mode) if mode else None
    project_names = sorted(p if isinstance(p, str) else _name(p) for p in projects or [])
    project_set = set(project_names)
    goldens, copies = split_snapshots(snapshots, namespaces)
    index = _Index(goldens, copies, contents)
    governing = _governing(selections, namespaces)
    if family is not None:
        governing = [s for s in governing if (s.get("spec") or {}).get("family") == family]
    canonical = [_canonical(obj, m) for m, obj in goldens]
    digests = _digests(governing)

    families, conflicts, project_entries = {}, [], []
    for pair_family, pair_mode in _pairs(goldens, index, project_set, family, mode):
        resolved = selection.resolve_serving(canonical, governing, pair_family, pair_mode)
        serving = _serving_entry(resolved, namespaces, pair_mode, index)
        conflicts.extend(resolved["conflicts"])
        fam = families.setdefault(
            pair_family, {"family": pair_family, "os_name": None, "candidates": [], "serving": {}}
        )
        fam["serving"][pair_mode] = serving
        selected = {
            (s.get("spec") or {}).get("snapshotName")
            for s in selection.selections_for(governing, pair_family, pair_mode)
        }
        for golden_mode, obj in goldens:
            if golden_mode != pair_mode or golden.observed_family(obj) != pair_family:
                continue
            info = candidate(obj, golden_mode, index.snapshots[(_namespace(obj), _name(obj))][3], digests)
            info["serving"] = info["name"] == serving["snapshot"]
            info["selected"] = info["name"] in selected
            fam["os_name"] = fam["os_name"] or info["os_name"]
            fam["candidates"].append(info)
        project_entries.extend(_projects(project_names, index, pair_family, pair_mode, serving))

    for idle in selection.idle_selections(governing, canonical):
        if mode is not None and _raw_mode(idle["mode"]) not in (None, mode):
            continue
        conflicts.append(
            {
                "type": GOVERNS_NOTHING,
                "family": idle["family"],
                "mode": idle["mode"],
                "names": [idle["name"]],
                "message": idle["message"],
            }
        )

    users = {"pvcs": pvcs, "datavolumes": datavolumes, "datasources": datasources, "vms": vms}
    clone_entries = clones(users, index, family, mode)
    counts = {(e["namespace"], e["name"]): e["count"] for e in clone_entries if e["golden"]}
    for fam in families.values():
        for info in fam["candidates"]:
            info["clones"] = counts.get((info["namespace"], info["name"]), 0)
    return {
        "families": [families[name] for name in sorted(families)],
        "conflicts": conflicts,
        "projects": sorted(project_entries, key=lambda e: (e["namespace"], e["family"], e["mode"])),
        "clones": clone_entries,
    }


def summary(result):
    """Counts for a one-line message: families, conflicts, projects served the intended golden."""
    projects = result["projects"]
    return {
        "families": len(result["families"]),
        "conflicts": len(result["conflicts"]),
        "project_entries": len(projects),
        "matching": sum(1 for p in projects if p["match"]),
        "not_matching": sum(1 for p in projects if not p["match"]),
        "clones": sum(e["count"] for e in result["clones"]),
    }


def condense(result, limit=None):
    """The report with its large tables cut to what needs attention.

    Families and conflicts stay whole (a handful of rows). ``projects`` keeps the entries that do not
    match the served golden, at most ``limit`` of them (``projects_omitted`` counts the rest, matching
    ones included); ``clones`` keeps every golden with its count and drops the per-consumer lists
    (``consumers_omitted`` counts them). The summary of the full report says the rest.
    """
    limit = details.kept_rows(limit)
    projects = [p for p in result["projects"] if not p["match"]]
    kept = projects[:limit]
    clone_entries = []
    consumers = 0
    for entry in result["clones"]:
        consumers += sum(len(entry[key]) for key in CLONE_LISTS)
        clone_entries.append(dict(entry, **{key: [] for key in CLONE_LISTS}))
    return dict(
        result,
        projects=kept,
        projects_omitted=len(result["projects"]) - len(kept),
        clones=clone_entries,
        consumers_omitted=consumers,
    )


def judge_provenance(result, policy_doc, prove):
    """Each candidate of the report with ``provenance_verifies`` (whether the verdict recorded on it holds
    under today's trust policy, its evidence verified again by ``prove``, ``_signing.record_proof``) and
    ``provenance_problem`` (why not, naming the key and the check)."""
    for fam in result["families"]:
        for cand in fam["candidates"]:
            where = "golden %s/%s" % (cand["namespace"], cand["name"])
            problem = golden.provenance_problem(
                cand.get("provenance"),
                policy_doc,
                fam["family"],
                where,
                cand.get("own_digest"),
                cand.get("image_facts"),
                prove,
            )
            cand.update(provenance_verifies=problem is None, provenance_problem=problem)
    return result
