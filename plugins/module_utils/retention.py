# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Which goldens of a (family, mode) retention keeps, and why; which it may delete.

Pure: no I/O. Keeps the ``keep`` most recent goldens (newest first by the version date in the name,
else the creation time), and whatever else is in use: the served golden, any golden newer than the
served one, and every golden the one reference query (``consumers.golden_consumers``) finds a
consumer for (selections naming it or recording it as the rollback target, the active label, clones in
flight directly or through a project's copy, project copies on its snapshot handle). A pair whose
serving is held by a conflict keeps everything: what is served cannot be told, so nothing is deleted.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.module_utils import (
    consumers,
    golden,
    golden_inventory,
    kinds,
    selection,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.errors import Refusal

SERVED = "served"
NEWER = "newer than served"
HELD = "the pair is held"


def _recency(obj, family):
    version = golden_inventory.parse_version(kinds.name(obj), family)
    date = version["date"] or golden_inventory._created_date(obj) or ""
    created = str(kinds.meta(obj).get("creationTimestamp") or "")
    return (date, created, kinds.name(obj) or "")


def newest_first(goldens, family):
    """Goldens ordered newest first (version date, then creation time, then name)."""
    return sorted(goldens, key=lambda obj: _recency(obj, family), reverse=True)


def consumer_reason(record):
    """One consumer as a retention reason: selected, rollback target, cloned by, project copy, active."""
    kind, why = record["kind"], record["why"]
    where = "%s/%s" % (record["namespace"], record["name"])
    if kind in ("PersistentVolumeClaim", "DataVolume"):
        return "cloned by %s %s (%s)" % (kind, where, why)
    if kind == selection.SELECTION_KIND:
        if "rollback target" in why:
            return "rollback target of %s %s" % (kind, where)
        return "selected by %s %s" % (kind, where)
    if "rollback target" in why:
        return "rollback target of %s %s" % (kind, where)
    if "seeded copy" in why:
        return "project copy %s %s on its snapshot handle" % (kind, where)
    return "active (%s)" % golden.ACTIVE_LABEL


def pair_goldens(observed, family, mode, namespaces):
    """The goldens of (family, mode) from ``observed`` (golden namespaces only)."""
    goldens, _copies = golden_inventory.split_snapshots(observed.get("snapshots"), namespaces)
    return [obj for obj_mode, obj in goldens if obj_mode == mode and golden.observed_family(obj) == family]


def plan(observed, family, mode, keep, namespaces=None):
    """``{"served", "held", "kept": [...], "delete": [...]}`` for (family, mode).

    Each entry is ``{"name", "namespace", "reasons", "consumers"}``; ``reasons`` is empty for a golden
    to delete. ``observed``: what ``golden_inventory.assemble`` returns.
    """
    namespaces = namespaces or golden_inventory.golden_namespaces()
    mode = golden.normalize_mode(mode)
    ordered = newest_first(pair_goldens(observed, family, mode, namespaces), family)
    namespace = namespaces[mode]
    sels = [s for s in observed.get("selections") or [] if kinds.namespace(s) == namespace]
    canonical = [golden_inventory._canonical(obj, mode) for obj in ordered]
    serving = selection.resolve_serving(canonical, sels, family, mode)
    served = serving["snapshot"]
    served_key = None
    for obj in ordered:
        if kinds.name(obj) == served:
            served_key = _recency(obj, family)
    result = {
        "served": served,
        "held": serving["held"],
        "reason": serving["reason"],
        "kept": [],
        "delete": [],
    }
    for position, obj in enumerate(ordered):
        found = consumers.golden_consumers(obj, observed, namespaces)
        reasons = []
        if kinds.name(obj) == served:
            reasons.append(SERVED)
        elif served_key is not None and _recency(obj, family) > served_key:
            reasons.append(NEWER)
        if serving["held"]:
            reasons.append("%s (%s)" % (HELD, serving["reason"]))
        if position < keep:
            reasons.append("within keep (%d most recent)" % keep)
        reasons.extend(consumer_reason(c) for c in found)
        entry = {
            "name": kinds.name(obj),
            "namespace": kinds.namespace(obj),
            "reasons": reasons,
            "consumers": found,
        }
        result["kept" if reasons else "delete"].append(entry)
    return result


def still_deletable(fresh_plan, name):
    """The fresh plan's entry for ``name`` when it may still be deleted, else None."""
    for entry in fresh_plan["delete"]:
        if entry["name"] == name:
            return entry
    return None


def fresh_entry(fresh_plan, name):
    """The fresh plan's kept entry for ``name`` (why it is kept now), or None when it is gone."""
    for entry in fresh_plan["kept"]:
        if entry["name"] == name:
            return entry
    return None


def validate_keep(keep):
    """``keep`` is a count of goldens: an integer of at least 1 (the served one always stays anyway)."""
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise Refusal(
            "option keep",
            "%r is not a number of goldens to keep: it must be an integer of at least 1, checked before "
            "anything is deleted" % (keep,),
            "give a positive integer (the default is 3, as CDI's importsToKeep)",
        )
    return keep
