# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Which golden a (family, mode) serves, and the rules of changing it.

Pure: no I/O. Callers pass the objects they listed (goldens, GoldenImageSelections, project
snapshots and contents) as dicts. Kube-DC resolves a (family, mode) in two ways, and so do we:

1. Selection path: a ``GoldenImageSelection`` with that ``spec.family`` and ``spec.mode`` (mode
   compared case-insensitively) names the snapshot. It fails closed: a selection naming a snapshot
   that is missing, not Ready or of another family or mode serves nothing (projects keep their
   copy), and two selections naming different snapshots hold the family.
2. Label path, used only when no selection governs the pair: the goldens of the family in API list
   order, stable-sorted with ``kube-dc.com/golden-active=true`` first. With none active the first
   in list order is served without a word; with two active a conflict is logged and the first is
   served anyway. Both are reported here as conflicts because the consumer does not refuse them.

The contract keys and the validation of a golden come from ``golden``; nothing is redefined here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import golden
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import kinds

SELECTION_API_VERSION = "kube-dc.com/v1"
SELECTION_KIND = "GoldenImageSelection"
CONTENT_API_VERSION = "snapshot.storage.k8s.io/v1"
CONTENT_KIND = "VolumeSnapshotContent"
PROJECT_SELECTOR = "kube-dc.com/project"

# Written by promotion so that rollback is one more write, with no memory outside the cluster.
PREVIOUS_SNAPSHOT = "goldenimage.pipeline/previous-snapshot"
PREVIOUS_DIGEST = "goldenimage.pipeline/previous-release-digest"
# Written by a rollback (and removed by the next promotion): running the same rollback again is a no-op
# instead of flipping back to what the first rollback removed.
ROLLED_BACK = "goldenimage.pipeline/rolled-back"
# On a holding selection (it names no snapshot until the first promotion, which removes it).
HOLD = "goldenimage.pipeline/hold"
# Written on a golden at publish: its full release digest (the name keeps 12 hex digits only).
RELEASE_DIGEST = golden.RELEASE_DIGEST

PATH_SELECTION = "selection"
PATH_LABEL = "label"
PATH_NONE = "none"

# Conflict types, as golden_info and golden_selection report them.
TWO_SELECTIONS = "two_selections"
TWO_ACTIVE = "two_active"
ZERO_ACTIVE = "zero_active"
BROKEN_SELECTION = "broken_selection"

UNSAFE_LABEL_PATH = (
    "The golden-active label cannot express a promotion atomically and neither intermediate state is "
    "safe: with zero goldens active the per-project seeder serves whichever golden the API lists first, "
    "silently; with two active it logs a conflict and still serves one of them. The label was removed "
    "from the incumbent and added to the candidate back to back to keep that window short, and every "
    "project should be verified rather than trusted. Prefer method: selection (a GoldenImageSelection "
    "per family and mode), which promotes in one write with no intermediate state."
)


class SelectionError(PipelineError):
    """A promotion or rollback that must not be written; the message says why and what to do."""


_name = kinds.name
_namespace = kinds.namespace
_spec = kinds.spec


def normalize_mode(value):
    """``Filesystem`` or ``Block`` from any casing (None is Filesystem); raises GoldenError otherwise."""
    return golden.normalize_mode(value)


def selection_mode(sel):
    """The normalised ``spec.mode`` of a selection, or None when it is not a mode at all."""
    try:
        return golden.normalize_mode(_spec(sel).get("mode"))
    except golden.GoldenError:
        return None


def selection_name(family, mode):
    """``<family>-<mode lowercased>``: the name a new selection gets."""
    name = "%s-%s" % (family, golden.normalize_mode(mode).lower())
    name = re.sub(r"[^a-z0-9.-]+", "-", name.lower()).strip("-.")
    return golden.validate_object_name(name)


def selections_for(selections, family, mode):
    """Selections governing (family, mode), in the order given: family equal, mode in any casing."""
    mode = golden.normalize_mode(mode)
    return [s for s in selections or [] if _spec(s).get("family") == family and selection_mode(s) == mode]


def _golden_mode(obj):
    try:
        return golden.observed_mode(obj)
    except golden.GoldenError:
        return None


def goldens_for(goldens, family, mode):
    """Goldens of (family, mode) in the order given (the API's list order matters on the label path).

    A golden's mode is its namespace's when it has one (the consumer lists the mode's namespace),
    else the mode it carries.
    """
    mode = golden.normalize_mode(mode)
    found = []
    for obj in goldens or []:
        if golden.observed_family(obj) != family:
            continue
        namespace = _namespace(obj)
        seen = golden.mode_for_namespace(namespace) if namespace else _golden_mode(obj)
        if seen == mode:
            found.append(obj)
    return found


def find_golden(goldens, name, mode):
    """The golden named ``name`` in the namespace of ``mode`` (or without a namespace), else None."""
    namespace = golden.namespace_for(mode)
    for obj in goldens or []:
        if _name(obj) == name and _namespace(obj) in (None, namespace):
            return obj
    return None


def serving_problems(obj, family, mode):
    """Why the consumer would not seed from ``obj`` for (family, mode): exists, Ready, family, mode."""
    if not obj:
        return ["snapshot not found"]
    problems = []
    if not golden.is_ready(obj):
        problems.append("not Ready: status.readyToUse is %s" % ((obj.get("status") or {}).get("readyToUse")))
    seen_family = golden.observed_family(obj)
    if seen_family != family:
        problems.append("family is %s, not %s" % (seen_family or "unset", family))
    seen_mode = _golden_mode(obj)
    if seen_mode != golden.normalize_mode(mode):
        problems.append("mode is %s, not %s" % (seen_mode or "invalid", golden.normalize_mode(mode)))
    return problems


def candidate_problems(obj, family, mode):
    """Why ``obj`` may not be promoted for (family, mode); [] when it may.

    Stricter than what the consumer checks: the whole golden contract must hold (golden.validate_golden),
    which covers existence, Ready, family and mode, so a promoted golden is one that every reader accepts.
    """
    return golden.validate_golden(obj, family=family, mode=mode)


def selection_conflict(governing, family, mode):
    """A TWO_SELECTIONS conflict when the governing selections name different snapshots, else None."""
    names = sorted({_spec(s).get("snapshotName") for s in governing})
    if len(names) < 2:
        return None
    held = ", ".join(
        "%s/%s names %s" % (_namespace(s), _name(s), _spec(s).get("snapshotName")) for s in governing
    )
    return {
        "type": TWO_SELECTIONS,
        "family": family,
        "mode": golden.normalize_mode(mode),
        "names": [_name(s) for s in governing],
        "snapshots": names,
        "message": "%d GoldenImageSelections govern %s/%s and name different snapshots (%s): the family is "
        "held, not resolved by guessing; delete all but one"
        % (len(governing), family, golden.normalize_mode(mode), held),
    }


def governs_nothing(sel, goldens):
    """Whether a selection's family and mode match no golden, so it looks like no selection at all."""
    mode = selection_mode(sel)
    if mode is None:
        return True
    return not goldens_for(goldens, _spec(sel).get("family"), mode)


def idle_selections(selections, goldens):
    """Selections that govern nothing, each with the reason, for a report."""
    idle = []
    for sel in selections or []:
        if not governs_nothing(sel, goldens):
            continue
        spec = _spec(sel)
        if selection_mode(sel) is None:
            why = "mode %r is neither Filesystem nor Block" % (spec.get("mode"),)
        else:
            why = "no golden of family %s in mode %s" % (spec.get("family"), selection_mode(sel))
        idle.append(
            {
                "name": _name(sel),
                "namespace": _namespace(sel),
                "family": spec.get("family"),
                "mode": spec.get("mode"),
                "message": "GoldenImageSelection %s/%s governs nothing (%s): it looks the same as no "
                "selection at all, check status.ready" % (_namespace(sel), _name(sel), why),
            }
        )
    return idle


def label_order(candidates):
    """The consumer's order on the label path: stable sort, active first, else API list order."""
    return sorted(candidates, key=lambda obj: not golden.is_active(obj))


def label_conflicts(candidates, family, mode):
    """TWO_ACTIVE, or ZERO_ACTIVE with several candidates, on the label path; [] when one is active."""
    mode = golden.normalize_mode(mode)
    active = [_name(c) for c in candidates if golden.is_active(c)]
    if len(active) > 1:
        return [
            {
                "type": TWO_ACTIVE,
                "family": family,
                "mode": mode,
                "names": active,
                "message": "%d goldens of %s/%s carry %s=true (%s): the consumer logs a conflict and "
                "still seeds %s"
                % (len(active), family, mode, golden.ACTIVE_LABEL, ", ".join(active), active[0]),
            }
        ]
    if not active and len(candidates) > 1:
        names = [_name(c) for c in candidates]
        return [
            {
                "type": ZERO_ACTIVE,
                "family": family,
                "mode": mode,
                "names": names,
                "message": "none of the %d goldens of %s/%s carries %s=true: the consumer seeds %s because "
                "the API listed it first, which is arbitrary and silent"
                % (len(names), family, mode, golden.ACTIVE_LABEL, names[0]),
            }
        ]
    return []


def resolve_serving(goldens, selections, family, mode):
    """What Kube-DC serves for (family, mode), and which path decided.

    ``goldens``: VolumeSnapshots as listed (API list order is kept, it decides the label path).
    ``selections``: GoldenImageSelections of the golden namespace (any family or mode; filtered here).
    Returns a dict:

    - ``snapshot``: name of the golden served, or None (held, skipped, or no golden);
    - ``path``: ``"selection"`` when a selection governs the pair (even one that serves nothing),
      ``"label"`` when the label path decided, ``"none"`` when there is no golden and no selection;
    - ``conflicts``: dicts with ``type`` (two_selections, broken_selection, two_active, zero_active),
      ``family``, ``mode``, ``names`` and ``message``;
    - ``held``: True when the consumer seeds nothing for the pair and projects keep their copy;
    - ``reason``: one sentence saying why;
    - ``selection``: name of the governing selection when exactly one snapshot is named, else None;
    - ``candidates``: names of the Ready goldens of the pair, in the consumer's label-path order.
    """
    mode = golden.normalize_mode(mode)
    # A golden that is not Ready has no handle to seed from, so the label path never considers it.
    candidates = [c for c in goldens_for(goldens, family, mode) if golden.is_ready(c)]
    result = {
        "snapshot": None,
        "path": PATH_NONE,
        "conflicts": [],
        "held": False,
        "reason": "",
        "selection": None,
        "candidates": [_name(c) for c in label_order(candidates)],
    }
    governing = selections_for(selections, family, mode)
    if governing:
        result["path"] = PATH_SELECTION
        conflict = selection_conflict(governing, family, mode)
        if conflict:
            result.update(held=True, conflicts=[conflict], reason=conflict["message"])
            return result
        sel = governing[0]
        name = _spec(sel).get("snapshotName")
        result["selection"] = _name(sel)
        if not name:
            # A holding selection (written when a family is first published): held on purpose, no conflict.
            result.update(
                held=True,
                reason="GoldenImageSelection %s/%s names no snapshot: %s/%s is held until its first promotion"
                % (_namespace(sel), _name(sel), family, mode),
            )
            return result
        problems = serving_problems(find_golden(goldens, name, mode), family, mode)
        if problems:
            message = (
                "GoldenImageSelection %s/%s names %s, which cannot serve %s/%s (%s): the family is skipped "
                "and projects keep the copy they have"
                % (_namespace(sel), _name(sel), name, family, mode, "; ".join(problems))
            )
            result["conflicts"] = [
                {
                    "type": BROKEN_SELECTION,
                    "family": family,
                    "mode": mode,
                    "names": [_name(sel)],
                    "message": message,
                }
            ]
            result.update(held=True, reason=message)
            return result
        result.update(
            snapshot=name,
            reason="GoldenImageSelection %s/%s selects %s" % (_namespace(sel), _name(sel), name),
        )
        return result
    if not candidates:
        result["reason"] = "no golden of family %s in mode %s and no GoldenImageSelection for it" % (
            family,
            mode,
        )
        return result
    ordered = label_order(candidates)
    conflicts = label_conflicts(candidates, family, mode)
    served = _name(ordered[0])
    if conflicts:
        reason = conflicts[0]["message"]
    elif golden.is_active(ordered[0]):
        reason = "%s is the one golden of %s/%s labelled %s=true" % (
            served,
            family,
            mode,
            golden.ACTIVE_LABEL,
        )
    else:
        reason = "%s is the only golden of %s/%s (none is labelled active)" % (served, family, mode)
    result.update(path=PATH_LABEL, snapshot=served, conflicts=conflicts, reason=reason)
    return result


# Promotion through a selection --------------------------------------------------------------------


# Where a new GoldenImageSelection goes: golden-images, one per family and mode, Block included, as the
# operator guide lays them out. An existing one is written where it is (the consumer reads both).
SELECTION_NAMESPACE = golden.NAMESPACES[golden.FILESYSTEM]


def governing_selection(selections, family, mode):
    """The one selection to write for (family, mode), or None to create one; refuses a conflict."""
    governing = selections_for(selections, family, mode)
    conflict = selection_conflict(governing, family, mode)
    if conflict:
        raise SelectionError("refusing to write: " + conflict["message"])
    if not governing:
        return None
    # Several selections naming the same snapshot agree; write the first and report the rest.
    return governing[0]


def selection_definition(name, namespace, family, mode, snapshot, digest=None, previous=None):
    """A new GoldenImageSelection; ``previous`` is ``(snapshot, digest)`` recorded for rollback."""
    spec = {
        "family": golden.validate_family(family),
        "mode": golden.normalize_mode(mode),
        "snapshotName": snapshot,
    }
    if digest:
        spec["releaseDigest"] = golden.normalize_digest(digest)
    body = {
        "apiVersion": SELECTION_API_VERSION,
        "kind": SELECTION_KIND,
        "metadata": {"name": golden.validate_object_name(name), "namespace": namespace},
        "spec": spec,
    }
    annotations = previous_annotations(previous)
    if annotations:
        body["metadata"]["annotations"] = annotations
    return body


def previous_annotations(previous):
    if not previous or not previous[0]:
        return {}
    out = {PREVIOUS_SNAPSHOT: previous[0]}
    if previous[1]:
        out[PREVIOUS_DIGEST] = previous[1]
    return out


def recorded_previous(obj):
    """``(snapshot, digest)`` that promotion recorded on a selection or golden, or ``(None, None)``."""
    annotations = kinds.annotations(obj)
    return annotations.get(PREVIOUS_SNAPSHOT) or None, annotations.get(PREVIOUS_DIGEST) or None


def plan_selection(existing, family, mode, snapshot, digest=None, previous=None):
    """The merge patch that makes ``existing`` select ``snapshot``; None when it already does.

    Promotion records the snapshot (and digest) it replaces, or ``previous`` (``(snapshot, digest)``, the
    golden the projects actually hold) when given; re-selecting the same snapshot changes nothing, not
    even the record. The mode is written in its canonical spelling.
    """
    spec = _spec(existing)
    mode = golden.normalize_mode(mode)
    digest = golden.normalize_digest(digest) if digest else None
    patch_spec = {}
    meta = {}
    if spec.get("snapshotName") != snapshot:
        patch_spec["snapshotName"] = snapshot
        # A digest belongs to one snapshot: without a new one, the old one must not stay.
        patch_spec["releaseDigest"] = digest
        if previous and previous[0]:
            meta["annotations"] = {PREVIOUS_SNAPSHOT: previous[0], PREVIOUS_DIGEST: previous[1] or None}
        elif spec.get("snapshotName"):
            meta["annotations"] = {
                PREVIOUS_SNAPSHOT: spec.get("snapshotName"),
                PREVIOUS_DIGEST: spec.get("releaseDigest") or None,
            }
        if HOLD in kinds.annotations(existing):
            meta.setdefault("annotations", {})[HOLD] = None
    elif digest and spec.get("releaseDigest") != digest:
        patch_spec["releaseDigest"] = digest
    if spec.get("mode") != mode:
        patch_spec["mode"] = mode
    if spec.get("family") != family:
        patch_spec["family"] = family
    if "releaseDigest" in patch_spec and patch_spec["releaseDigest"] is None and "releaseDigest" not in spec:
        del patch_spec["releaseDigest"]
    patch = {}
    if patch_spec:
        patch["spec"] = patch_spec
    if meta:
        patch["metadata"] = meta
    return patch or None


def refuse_promotion_inputs(snapshot, rollback):
    """A promotion names its snapshot; a rollback may name the snapshot it restores."""
    if not rollback and not snapshot:
        raise Refusal(
            "option snapshot",
            "a promotion names the golden to serve",
            "give snapshot, or set rollback: true to restore the recorded previous one",
        )


def refuse_without_selection_kind(method, served):
    """method=selection writes a GoldenImageSelection: the cluster must serve the kind."""
    if method == "selection" and not served:
        raise Refusal(
            "%s %s" % (SELECTION_API_VERSION, SELECTION_KIND),
            "the cluster does not serve the kind (is the Kube-DC CRD installed?)",
            "install it, or use method: label",
        )


def refuse_label_path(governing, family, mode):
    """method=label moves a label no one reads while a selection governs (family, mode)."""
    if governing:
        raise Refusal(
            "GoldenImageSelection %s" % ", ".join("%s/%s" % (_namespace(s), _name(s)) for s in governing),
            "refusing to move %s: it governs %s/%s, so the label has no effect"
            % (golden.ACTIVE_LABEL, family, golden.normalize_mode(mode)),
            "use method: selection (writing nothing)",
        )


def rollback_plan(record, what, current, named=None, missing=None):
    """What a rollback does: ``{"target", "digest", "noop", "reason"}``; refuses when it must not write.

    ``record``: the object carrying the promotion's record (the selection, or the active golden on
    the label path), None when there is none (``missing`` says why); ``current``: the snapshot
    served now. A rollback that names its target (``named``) is a no-op when that target already
    serves, and is refused unless it is the recorded previous snapshot. Without a name, a rollback
    right after a rollback is a no-op: run twice, it must not flip back to what the first removed.
    Whether the target may be served at all (a gate pass) is ``serving.refuse_ungated``'s to say.
    """
    if record is None:
        raise Refusal(
            what,
            "refusing to roll back: %s" % (missing or "nothing records a previous snapshot"),
            "writing nothing; promote the snapshot to serve instead",
        )
    if named and named == current:
        return {
            "target": current,
            "digest": None,
            "noop": True,
            "reason": "%s already serves %s, the rollback target named" % (what, named),
        }
    if not named and current and kinds.annotations(record).get(ROLLED_BACK) == "true":
        return {
            "target": current,
            "digest": None,
            "noop": True,
            "reason": "%s was already rolled back to %s; a rollback run again changes nothing (name the "
            "snapshot to roll back to in snapshot to move again)" % (what, current),
        }
    target, digest = rollback_target(record, what)
    if named and named != target:
        raise Refusal(
            what,
            "refusing to roll back: the recorded previous snapshot is %s, not %s as given" % (target, named),
            "writing nothing",
        )
    return {"target": target, "digest": digest, "noop": False, "reason": ""}


def served_digest(obj, given, name):
    """The release digest a selection of golden ``name`` (``obj``) carries: the one recorded on the golden
    at publish; a different one given is refused (a digest belongs to one set of bytes)."""
    recorded = golden.release_digest(obj)
    given = golden.normalize_digest(given) if given else None
    if given and recorded and given != recorded:
        raise Refusal(
            "option release_digest",
            "it is %s, but golden %s was published with release digest %s" % (given, name, recorded),
            "writing nothing; give the golden's own digest, or leave release_digest out",
        )
    return given or recorded


def mark_change(patch, existing, rollback):
    """Add to a selection or golden ``patch`` the rollback mark (rollback) or its removal (promotion)."""
    marked = kinds.annotations(existing).get(ROLLED_BACK) == "true"
    if rollback and not marked:
        patch = dict(patch or {})
        meta = dict(patch.get("metadata") or {})
        meta["annotations"] = dict(meta.get("annotations") or {}, **{ROLLED_BACK: "true"})
        patch["metadata"] = meta
    elif not rollback and marked and patch:
        meta = dict(patch.get("metadata") or {})
        meta["annotations"] = dict(meta.get("annotations") or {}, **{ROLLED_BACK: None})
        patch = dict(patch, metadata=meta)
    return patch


def rollback_target(obj, what):
    """``(snapshot, digest)`` to restore from the record on ``obj``; refuses when there is none."""
    previous, digest = recorded_previous(obj)
    if not previous:
        raise SelectionError(
            "refusing to roll back: %s records no previous snapshot (annotation %s); nothing was promoted "
            "over it by this collection, so give the snapshot to restore and promote it instead"
            % (what, PREVIOUS_SNAPSHOT)
        )
    return previous, digest


def refuse_candidate(obj, name, namespace, family, mode):
    """Raise SelectionError naming every reason ``obj`` cannot be promoted; fail closed."""
    problems = candidate_problems(obj, family, mode)
    if obj is None:
        problems = ["VolumeSnapshot %s/%s not found" % (namespace, name)]
    if problems:
        raise SelectionError(
            "refusing to promote %s/%s for %s/%s and writing nothing (fail closed, no sibling is picked): %s"
            % (namespace, name, family, golden.normalize_mode(mode), "; ".join(problems))
        )


# Promotion through the golden-active label (legacy) ----------------------------------------------


def label_plan(goldens, family, mode, candidate):
    """``{"remove": [names], "add": name or None}``: stand the other active goldens down, then add.

    Removal comes first: a window with none active (arbitrary, silent) is preferred to one with two
    active, and the window is kept short by sending the writes back to back.
    """
    candidates = goldens_for(goldens, family, mode)
    remove = [_name(c) for c in candidates if golden.is_active(c) and _name(c) != candidate]
    target = find_golden(candidates, candidate, mode)
    add = None if target is not None and golden.is_active(target) else candidate
    return {"remove": remove, "add": add}


def active_problems(goldens, family, mode, expected):
    """[] when exactly ``expected`` carries the active label in (family, mode); else what is wrong."""
    active = [_name(c) for c in goldens_for(goldens, family, mode) if golden.is_active(c)]
    if active == [expected]:
        return []
    if not active:
        return ["no golden of %s/%s is active, expected %s" % (family, golden.normalize_mode(mode), expected)]
    if len(active) > 1:
        return [
            "%d goldens of %s/%s are active (%s), expected only %s"
            % (len(active), family, golden.normalize_mode(mode), ", ".join(active), expected)
        ]
    return ["%s is active in %s/%s, expected %s" % (active[0], family, golden.normalize_mode(mode), expected)]


def active_golden(goldens, family, mode):
    """The one active golden of (family, mode), else None (none or several)."""
    active = [c for c in goldens_for(goldens, family, mode) if golden.is_active(c)]
    return active[0] if len(active) == 1 else None


# Per-project resolution ---------------------------------------------------------------------------


def project_snapshot_name(family, mode):
    """The seeded VolumeSnapshot in each project: ``golden-<family>`` or ``golden-<family>-block``."""
    suffix = "-block" if golden.normalize_mode(mode) == golden.BLOCK else ""
    return "golden-%s%s" % (family, suffix)


def content_handle(content):
    """The storage handle a VolumeSnapshotContent points at (pre-provisioned source, else status)."""
    return kinds.snapshot_handle(content)


def golden_handle(obj, contents):
    """The snapshot handle of a golden, through its bound content; None while unbound or unknown."""
    bound = ((obj or {}).get("status") or {}).get("boundVolumeSnapshotContentName")
    if not bound:
        return None
    return content_handle(_by_name(contents).get(bound))


def verifiable_handle(handle, namespace, snapshot):
    """The handle the projects are checked against: the selected golden's, through its bound content.

    A golden without one cannot be verified, so the verification fails naming it (the selection has
    been written by then; the projects simply cannot be compared with it)."""
    if handle is None:
        raise PipelineError(
            "cannot verify projects: %s %s/%s has no bound content with a snapshot handle"
            % (golden.SNAPSHOT_KIND, namespace, snapshot)
        )
    return handle


def active_after_move(problems):
    """The golden-active labels as re-read after moving them: any problem left fails the task."""
    if problems:
        raise PipelineError("after moving %s: %s" % (golden.ACTIVE_LABEL, "; ".join(problems)))


def _by_name(objects):
    if isinstance(objects, dict):
        return objects
    return {_name(o): o for o in objects or []}


def project_resolution(namespace, snapshot, contents, expected):
    """What one project resolved to: its seeded snapshot -> bound content -> handle, against ``expected``."""
    entry = {
        "namespace": namespace,
        "snapshot": _name(snapshot),
        "content": None,
        "handle": None,
        "expected": expected,
        "match": False,
        "seeded_from": kinds.annotations(snapshot).get("kube-dc.com/seeded-from"),
        "reason": "",
    }
    if snapshot is None:
        entry["reason"] = "not seeded: no VolumeSnapshot for this family"
        return entry
    bound = ((snapshot.get("status") or {}).get("boundVolumeSnapshotContentName")) or None
    entry["content"] = bound
    if not bound:
        entry["reason"] = "seeded snapshot %s is not bound to a content yet" % _name(snapshot)
        return entry
    content = _by_name(contents).get(bound)
    handle = content_handle(content)
    if handle is None:
        entry["reason"] = "content %s has no snapshot handle" % bound
        return entry
    # The seeder re-points a copy by deleting its snapshot and content and creating both again under
    # the same names: a snapshot listed before that and its content read after it would pair the old,
    # gone snapshot with the new handle. Only a content whose volumeSnapshotRef carries this snapshot's
    # uid (what the snapshot controller sets when it binds them) is what the snapshot resolves to.
    ref_uid = (kinds.spec(content).get("volumeSnapshotRef") or {}).get("uid")
    uid = (snapshot.get("metadata") or {}).get("uid")
    if not ref_uid or ref_uid != uid:
        entry["reason"] = "content %s is not bound back to snapshot %s (uid %s; the content refers to %s)" % (
            bound,
            _name(snapshot),
            uid,
            ref_uid or "no uid yet",
        )
        return entry
    entry["handle"] = handle
    status = snapshot.get("status") or {}
    if handle == expected and status.get("readyToUse") is not True:
        # The snapshot controller binds a copy to its content whether or not the CSI driver can serve the
        # handle: a copy the driver has not confirmed serves no clone yet.
        error = status.get("error") or {}
        entry["reason"] = "bound to the intended handle, but snapshot %s is not readyToUse%s" % (
            _name(snapshot),
            " (%s)" % error.get("message") if isinstance(error, dict) and error.get("message") else "",
        )
    elif handle == expected:
        entry["match"] = True
        entry["reason"] = "resolved to the intended handle"
    else:
        entry["reason"] = "resolved to %s, not the intended %s (seeded from %s)" % (
            handle,
            expected,
            entry["seeded_from"] or "unknown",
        )
    return entry


def project_resolutions(projects, snapshots, contents, family, mode, expected):
    """One entry per project namespace name in ``projects`` (sorted), from the listed project snapshots."""
    wanted = project_snapshot_name(family, mode)
    by_namespace = {_namespace(s): s for s in snapshots or [] if _name(s) == wanted}
    index = _by_name(contents)
    return [project_resolution(ns, by_namespace.get(ns), index, expected) for ns in sorted(projects)]


def unresolved(resolutions):
    return [entry["namespace"] for entry in resolutions if not entry["match"]]


# Verifying the projects: one wait in rounds (goldenimage.pipeline.golden_selection's action plugin
# prints each round's line).


def verification_state(resolutions):
    """What a round compares with the last one: which projects are still unresolved, and their reasons."""
    return "; ".join(
        "%s: %s" % (entry["namespace"], entry["reason"]) for entry in resolutions or [] if not entry["match"]
    ) or "all %d resolved" % len(resolutions or [])


def verification_line(resolutions, expected, snapshot, elapsed):
    """The progress line of one round: counts, what is still pending, the time since the wait began."""
    found = list(resolutions or [])
    missing = unresolved(found)
    line = "Projects: %d of %d resolved to %s (snapshot %s)" % (
        len(found) - len(missing),
        len(found),
        expected,
        snapshot,
    )
    if missing:
        line += "; waiting for %s" % ", ".join(missing)
    return "%s after %.1fs" % (line, elapsed)


def verification_timeout(resolutions, expected, snapshot, timeout, verdict):
    """The time-out message: how many projects did not resolve, each with its reason, stuck or not."""
    pending = [entry for entry in resolutions or [] if not entry["match"]]
    return "%d project(s) did not resolve to %s (snapshot %s) within %ss (%s): %s" % (
        len(pending),
        expected,
        snapshot,
        timeout,
        verdict,
        "; ".join("%s: %s" % (entry["namespace"], entry["reason"]) for entry in pending)
        or "no project namespace could be read",
    )
