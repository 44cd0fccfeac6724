# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The one serving truth of a (family, mode), and the rules that keep it: what may be deleted, promoted, held.

Pure: no I/O. ``truth`` answers, from one observation (``golden_inventory.assemble``'s ``observed``), which
golden is served and through what (a selection wherever one governs, else the label path), which goldens are
staged (newer than the served one, or every golden while nothing is served), which golden is the recorded
rollback target, whether the family is held and why, which golden the projects actually hold, and who uses
each golden (selections, the active label, project copies, clones in flight, gate and export volumes: every
claim or DataVolume restoring from it). Retention, every delete, promotion, rollback, golden_info and the
gate's choice of candidate ask it; none keeps a copy of the rule.

Intent before serving: a golden is promoted only with a gate pass that ``clone_gate`` recorded on it for
its exact release digest (``GATE_RECORD``), or with an override that records who and why (``UNGATED``).
Publishing never serves: the first golden of a family is published behind a holding selection.

Worker goldens (Cozystack's DataVolumes in ``cozy-public``) have no selection; what uses one is the pools
declared in the catalog that name it, and the disks made from it (``worker_users``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import (
    consumers,
    golden,
    golden_inventory,
    selection,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import kinds

# On the golden, written by golden_snapshot at publish: the full digest (the name keeps 12 hex only).
RELEASE_DIGEST = selection.RELEASE_DIGEST
# On the golden, written by clone_gate: its verdict for the golden's release digest (JSON).
GATE_RECORD = "goldenimage.pipeline/gate"
# On the golden, written by a promotion that served it without a gate pass on purpose (JSON: by, why, at).
UNGATED = "goldenimage.pipeline/ungated"
# On a holding selection: why it names no snapshot.
HOLD = selection.HOLD
HOLD_REASON = "published, not promoted: nothing of this family is served until the first promotion"

SERVED = "served"
STAGED = "staged"
ROLLBACK = "rollback target"
HELD = "the family is held"
CONFLICT = "serving is in conflict"
# What an explicit, forced delete of one named golden may go past: withdrawing a candidate, or deleting in a
# family that is held. Nothing served, recorded for rollback, cloned, copied or declared is ever forced.
FORCEABLE = (STAGED, HELD)


def _recency(obj, family):
    version = golden_inventory.parse_version(kinds.name(obj), family)
    date = version["date"] or golden_inventory._created_date(obj) or ""
    return (date, _created(obj), kinds.name(obj) or "")


def _created(obj):
    return str(kinds.meta(obj).get("creationTimestamp") or "")


def newest_first(goldens, family):
    """Goldens ordered newest first (version date, then creation time, then name)."""
    return sorted(goldens, key=lambda obj: _recency(obj, family), reverse=True)


def pair_goldens(observed, family, mode, namespaces):
    """The goldens of (family, mode) from ``observed`` (golden namespaces only), in list order."""
    goldens, _copies = golden_inventory.split_snapshots(observed.get("snapshots"), namespaces)
    return [obj for obj_mode, obj in goldens if obj_mode == mode and golden.observed_family(obj) == family]


def governing(observed, namespaces):
    """The selections the consumer reads: those of every golden namespace, whichever wrote them."""
    return golden_inventory._governing(observed.get("selections"), namespaces)


def holding_selection(family, mode):
    """The selection that holds a family published for the first time: it names no snapshot."""
    body = selection.selection_definition(
        selection.selection_name(family, mode), selection.SELECTION_NAMESPACE, family, mode, ""
    )
    body["metadata"]["annotations"] = {HOLD: HOLD_REASON}
    return body


def _projects_hold(observed, namespaces, family, mode):
    """``{golden name: number of project copies on its handle}`` for (family, mode)."""
    goldens, copies = golden_inventory.split_snapshots(observed.get("snapshots"), namespaces)
    index = golden_inventory.index(goldens, copies, observed.get("contents"))
    wanted = selection.project_snapshot_name(family, mode)
    held = {}
    for copy in copies:
        owner = index.by_handle.get(index.copy_handle(copy)) if kinds.name(copy) == wanted else None
        if owner is not None and owner[0] == mode:
            held[kinds.name(owner[1])] = held.get(kinds.name(owner[1]), 0) + 1
    return held


def _record_of(governing_sels, ordered, served, path):
    """The object carrying the promotion's record: the one governing selection, or the served golden."""
    if path == selection.PATH_SELECTION:
        return governing_sels[0] if len(governing_sels) == 1 else None
    return next((g for g in ordered if kinds.name(g) == served), None)


def truth(observed, family, mode, namespaces=None, users=True):
    """The serving truth of (family, mode), from one observation. A dict:

    - ``served``, ``path``, ``selection``, ``reason``, ``conflicts``: as ``selection.resolve_serving``;
    - ``held`` and ``why``: whether projects are seeded with nothing new, and why (a holding selection,
      a conflict, a selection naming a golden that cannot serve);
    - ``goldens``: the names, newest first; ``active``: those labelled active; ``staged``: the goldens
      newer than the served one or published after it (all of them while nothing is served);
      ``rollback_target``: the golden the promotion's record names;
    - ``projects_hold``: ``{golden: count}`` of project copies on each golden's handle;
    - ``selections``: the governing selections' names; ``users``: ``{golden: [consumer records]}``
      (``consumers.golden_consumers``; left empty with ``users=False``, for a report that lists clones
      itself); ``gate``: ``{golden: recorded gate pass or None}``; ``ungated``: ``{golden: recorded
      override or None}``; ``digests`` and ``handles``: each
      golden's release digest and storage snapshot handle.
    """
    namespaces = namespaces or golden_inventory.golden_namespaces()
    mode = golden.normalize_mode(mode)
    listed = pair_goldens(observed, family, mode, namespaces)
    ordered = newest_first(listed, family)
    sels = governing(observed, namespaces)
    # API list order, not recency: it decides the label path, as the seeder reads it.
    canonical = [golden_inventory._canonical(obj, mode) for obj in listed]
    resolved = selection.resolve_serving(canonical, sels, family, mode)
    mine = selection.selections_for(sels, family, mode)
    served = resolved["snapshot"]
    held, why = resolved["held"], resolved["reason"]
    served_obj = next((g for g in ordered if kinds.name(g) == served), None)
    served_key = _recency(served_obj, family) if served_obj is not None else None
    # Staged: newer than what is served, or published after it (a candidate built from an older date is
    # a candidate all the same).
    staged = [
        kinds.name(g)
        for g in ordered
        if kinds.name(g) != served
        and (served_key is None or _recency(g, family) > served_key or _created(g) > _created(served_obj))
    ]
    record = _record_of(mine, ordered, served, resolved["path"])
    contents = {kinds.name(c): c for c in observed.get("contents") or []}
    handles = {kinds.name(g): selection.golden_handle(g, contents) for g in ordered}
    recorded = golden_inventory._digests(mine)
    return {
        "family": family,
        "mode": mode,
        "served": served,
        "path": resolved["path"],
        "selection": resolved["selection"],
        "selections": [kinds.name(s) for s in mine],
        "reason": resolved["reason"],
        "conflicts": resolved["conflicts"],
        "held": held,
        "why": why if held else "",
        "goldens": [kinds.name(g) for g in ordered],
        "active": [kinds.name(g) for g in ordered if golden.is_active(g)],
        "staged": staged,
        "rollback_target": selection.recorded_previous(record)[0] if record is not None else None,
        "projects_hold": _projects_hold(observed, namespaces, family, mode),
        "users": {
            kinds.name(g): consumers.golden_consumers(g, observed, namespaces) if users else []
            for g in ordered
        },
        "gate": {kinds.name(g): gate_pass(g, handles[kinds.name(g)]) for g in ordered},
        "ungated": {kinds.name(g): ungated_recorded(g) for g in ordered},
        # The digest published with each golden, else the one a selection recorded for it.
        "digests": {kinds.name(g): golden.release_digest(g) or recorded.get(kinds.name(g)) for g in ordered},
        "handles": handles,
    }


def keep_reasons(state, name):
    """Why golden ``name`` of ``state`` (a ``truth``) must not be deleted: ``[(reason, why)]``, [] when
    nothing keeps it. ``reason`` is SERVED, STAGED, ROLLBACK, HELD or the kind of a user."""
    found = []
    if name == state["served"]:
        found.append(
            (SERVED, "it is served for %s/%s (%s)" % (state["family"], state["mode"], state["reason"]))
        )
    if name in state["staged"]:
        found.append(
            (
                STAGED,
                "it is staged: newer than what is served or published after it, waiting for its gate and "
                "promotion",
            )
        )
    if name == state["rollback_target"]:
        found.append(
            (ROLLBACK, "it is the recorded rollback target of %s/%s" % (state["family"], state["mode"]))
        )
    if state["held"]:
        found.append((HELD, state["why"]))
    for conflict in state["conflicts"]:
        # What is served cannot be told for sure (two active, none active among several, two selections):
        # nothing of the pair is deleted until one golden is served on purpose.
        found.append((CONFLICT, conflict["message"]))
    for user in state["users"].get(name, []):
        found.append((user["kind"], consumers.describe(user)))
    return found


def blocking(reasons, force=False):
    """The reasons a delete must not go past: all, or with ``force`` those force cannot override."""
    return [r for r in reasons if not force or r[0] not in FORCEABLE]


def delete_refusal(state, name, subject, force=False):
    """The Refusal a delete of golden ``name`` raises, or None when it may go ahead (asked by every path that
    deletes a golden: golden_snapshot, golden_retention, worker goldens through ``worker_users``)."""
    blockers = blocking(keep_reasons(state, name), force)
    if not blockers:
        return None
    if all(reason in FORCEABLE for reason, _why in blockers):
        move = "set force: true to withdraw it on purpose (it is only %s)" % " and ".join(
            r for r, _w in blockers
        )
    else:
        move = (
            "promote or select another golden first (goldenimage.pipeline.golden_selection) and wait until "
            "its clones finish"
        )
    return Refusal(
        subject,
        "refusing to delete it: %s" % "; ".join(why for _reason, why in blockers),
        move,
        keep=[{"reason": reason, "why": why} for reason, why in blockers],
        consumers=state["users"].get(name, []),
    )


# Intent before serving ----------------------------------------------------------------------------


def _json(text):
    try:
        found = json.loads(text) if text else None
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def gate_pass(obj, handle=None):
    """The gate pass recorded on golden ``obj`` for its own release digest, or None: a record of another
    digest (the bytes behind the name changed), of another golden, of another storage snapshot than
    ``handle`` (the golden's, when known), a rejection, or no record at all is no pass."""
    return gate_pass_problem(obj, handle)[0]


def gate_pass_problem(obj, handle=None):
    """``(record, None)`` for a pass of ``obj`` itself, else ``(None, why)``."""
    record = _json(kinds.annotations(obj).get(GATE_RECORD))
    if not record:
        return None, "no clone gate ever recorded a pass for it (annotation %s)" % GATE_RECORD
    if record.get("verdict") != "passed":
        return None, "the clone gate's verdict recorded for it is %s" % record.get("verdict")
    if (record.get("release_digest") or None) != golden.release_digest(obj):
        return None, "its recorded gate pass is for release digest %s, not its own %s" % (
            record.get("release_digest") or "none",
            golden.release_digest(obj),
        )
    me = "%s/%s" % (kinds.namespace(obj), kinds.name(obj))
    if record.get("candidate") != me:
        return None, "its recorded gate pass names golden %s, not %s" % (record.get("candidate"), me)
    if handle and record.get("snapshot_handle") and record.get("snapshot_handle") != handle:
        return None, "its recorded gate pass is for storage snapshot %s, not its own %s" % (
            record.get("snapshot_handle") or "none",
            handle,
        )
    return record, None


def record_changes(obj, record):
    """Whether writing gate ``record`` on golden ``obj`` changes what it says: a verdict, digest, golden or
    storage snapshot than the recorded one. The same verdict of the same bytes keeps the first record."""
    current = _json(kinds.annotations(obj).get(GATE_RECORD)) or {}
    keys = ("verdict", "release_digest", "candidate", "snapshot_handle")
    return any(current.get(key) != record.get(key) for key in keys)


def serves_on_purpose(state, name):
    """Whether ``name`` is served already by a selection naming it or as the one golden labelled active,
    without conflict: moving to it again serves nothing new, so no gate is asked again. A golden the seeder
    serves only by list order is not served on purpose."""
    if state["served"] != name or state["conflicts"]:
        return False
    return state["path"] == selection.PATH_SELECTION or name in state["active"]


SERVED_UNINTENDED = "served_unintended"


def unintended(state):
    """The conflict entry (``selection.resolve_serving``'s shape) when what ``state`` serves was not
    served on purpose: by list order (nothing promoted it: a hold deleted, a snapshot made by hand), or
    with neither a gate pass nor a recorded override; None otherwise."""
    name = state["served"]
    if not name:
        return None
    if not serves_on_purpose(state, name):
        why = "it is served by list order (%s): nothing promoted it" % state["reason"]
    elif not state["gate"].get(name) and not state["ungated"].get(name):
        why = "it is served with neither a gate pass nor a recorded override (allow_ungated)"
    else:
        return None
    return {
        "type": SERVED_UNINTENDED,
        "family": state["family"],
        "mode": state["mode"],
        "names": [name],
        "message": "%s/%s serves %s, not on purpose: %s; gate it (goldenimage.pipeline.clone_gate) and "
        "promote it, or promote another golden" % (state["family"], state["mode"], name, why),
    }


def ungated_recorded(obj):
    """The override recorded on golden ``obj`` (UNGATED) as a dict, or None."""
    return _json(kinds.annotations(obj).get(UNGATED))


def ungated_changes(recorded, by, why):
    """Whether an override by ``by`` for ``why`` differs from the one recorded (the first one is kept)."""
    return not recorded or recorded.get("by") != by or recorded.get("why") != why


def ungated_record(by, why, at):
    """The UNGATED value a promotion writes when it serves a golden without a gate pass on purpose."""
    return json.dumps({"by": by, "why": why, "at": at}, sort_keys=True, separators=(",", ":"))


def refuse_ungated(obj, name, what, mode, allow_ungated=False, reason=None, handle=None):
    """Refuse serving golden ``name`` (``obj``; None: missing) through ``what`` unless clone_gate recorded a
    pass for it (its release digest, its name, its storage snapshot ``handle``), or the caller overrides on
    purpose with a reason (recorded)."""
    subject = "VolumeSnapshot %s/%s" % (golden.namespace_for(mode), name)
    if obj is None:
        raise Refusal(subject, "refusing to serve it through %s: it is not found" % what, "writing nothing")
    record, why = gate_pass_problem(obj, handle)
    if record is not None:
        return None
    if allow_ungated:
        if not (reason or "").strip():
            raise Refusal(
                "option allow_ungated",
                "serving %s without a gate pass is recorded with who and why, and no reason was given" % name,
                "give ungated_reason (it is written on the golden with the user and the time)",
            )
        return "ungated"
    raise Refusal(
        subject,
        "refusing to serve it through %s: %s" % (what, why),
        "writing nothing; run goldenimage.pipeline.clone_gate on it (the golden_promote role does; "
        "golden_promote_rollback_gate: true for a rollback), which records its verdict for the golden's "
        "release digest, or serve it ungated on purpose with "
        "allow_ungated: true and ungated_reason (in the golden_promote role: golden_promote_allow_ungated: "
        "true, or golden_promote_rollback_allow_ungated: true for a rollback, with "
        "golden_promote_ungated_reason)",
    )


def publish_plan(state, selection_kind_served):
    """What publishing a new golden must do so that it is not served.

    ``"none"``: a golden is served through a selection or the one active label, or the family is held
    already, so the new one is staged. ``"hold"``: nothing of the family exists yet; write a holding
    selection first. Refuses where the new golden could be served at once: the label path with no golden
    labelled active (the seeder serves the first listed) or with two, and a first golden on a cluster
    without the selection kind."""
    if state["held"] or (state["served"] and state["path"] == selection.PATH_SELECTION):
        return "none"
    if state["path"] == selection.PATH_LABEL and len(state["active"]) == 1:
        return "none"
    where = "%s/%s" % (state["family"], state["mode"])
    if state["path"] == selection.PATH_NONE and selection_kind_served:
        return "hold"
    if state["path"] == selection.PATH_NONE:
        raise Refusal(
            where,
            "refusing to publish its first golden: the cluster serves no GoldenImageSelection, so the seeder "
            "would serve it at once, before any gate",
            "install Kube-DC's GoldenImageSelection CRD (publishing then holds the family until the first "
            "promotion)",
        )
    raise Refusal(
        where,
        "refusing to publish: %s, so a new golden could be served by list order, before any gate"
        % state["reason"],
        "serve one golden on purpose first (goldenimage.pipeline.golden_selection with method: selection), "
        "then publish",
    )


def rollback_previous(state):
    """``(golden, release digest)`` a promotion records as its rollback target: the golden the projects
    actually hold (when they agree on one), else the one served now; ``(None, None)`` when there is none."""
    held = state["projects_hold"]
    name = next(iter(held)) if len(held) == 1 else state["served"]
    return name, state["digests"].get(name) if name else None


# Worker goldens -----------------------------------------------------------------------------------


def worker_users(golden_dv, observed, pools, pool_golden):
    """Who uses the worker golden ``golden_dv``: the disks and claims made from it, claims whose DataVolume
    is gone included (``worker.delete_consumers``'s records, passed in ``observed``), and the pools declared
    in the catalog that name it (``pools``; ``pool_golden(pool)`` gives the golden a pool clones), whatever
    their size."""
    name = kinds.name(golden_dv)
    found = list(observed)
    for pool in pools or []:
        if pool_golden(pool) == name:
            found.append(
                consumers.consumer(
                    "Pool",
                    pool.get("namespace"),
                    pool.get("name"),
                    "is declared in the catalog with it as its osImage (its next scale-up clones it)",
                )
            )
    return found
