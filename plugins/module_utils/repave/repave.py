# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Drift and repave rules for running databases: which revision each instance should run, whether
getting there is a safe OS repave or needs a PostgreSQL major migration, and which repaves are refused
before anything changes.

Pure: no I/O. ``instance`` is the dict a driver lists (name, namespace, revision, engine_version,
os_stream, phase, available, operator, opt_in, ...); ``doc`` is a normalized catalog (catalog.py).

A repave replaces the OS disk and keeps pgdata, so it keeps the PostgreSQL major: one major cannot read
another's data directory. An instance whose major the target revision does not carry, or whose major is
past end of life (or unknown to the EOL table, or not set), is never offered a repave; it needs pg_dump
and restore into a new DBInstance. That is decided by the one engineVersion rule,
``catalog.check_engine_version``, which new databases are checked with too.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import json

from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import catalog, revision
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import details, inputs
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import (
    InvalidValue,
    PipelineError,
    Refusal,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import kinds
from ansible_collections.goldenimage.pipeline.plugins.module_utils.repave import rollout

CURRENT = "Current"
OS_UPDATE = "OSUpdateAvailable"
PG_EOL = "PGVersionEOL"
INVALID_STREAM = "InvalidOSStream"
UNSUPPORTED_ENGINE = "UnsupportedEngineVersion"
# A running database whose major nobody recorded: not end of life, not repavable, until it is set.
UNKNOWN_ENGINE = "EngineVersionUnknown"
# Where an instance keeps its major, when the view does not say (the operator's DBInstance).
ENGINE_FIELD = "spec.engineVersion"
BLOCKED_EOL = "RepaveBlockedPGVersionEOL"
NOT_AVAILABLE = "NotAvailable"
# A target whose recorded signature the catalog's trust policy no longer accepts.
UNTRUSTED_IMAGE = "UntrustedImage"
ACTION_REPAVE = "os-repave"
ACTION_MIGRATE = "pg-major-migration"
ACTION_RECREATE = "recreate"
POLICY_KEYS = ("auto_apply_after_days", "forced_apply_after_days", "migration_deadline_months")
# The seed's force-delete of an instance left on an end-of-life major: three months after the end of life.
MIGRATION_MONTHS = 3
IMMEDIATE, NEXT_MAINTENANCE, UNDO_OPT_IN = "immediate", "next-maintenance", "undo-opt-in"
# What the operator's two drift conditions should say for each of our verdicts.
_EXPECTED = {
    CURRENT: {OS_UPDATE: False, PG_EOL: False},
    OS_UPDATE: {OS_UPDATE: True, PG_EOL: False},
    PG_EOL: {OS_UPDATE: False, PG_EOL: True},
    INVALID_STREAM: {OS_UPDATE: False, PG_EOL: False},
    UNSUPPORTED_ENGINE: {OS_UPDATE: False, PG_EOL: False},
}


class RepaveRefused(Refusal):
    """A repave the rules refuse. ``reason`` is the status reason (``InvalidOSStream``, ...), ``name`` the
    instance; the message names the instance, the rule and the move that is supported instead."""

    def __init__(self, reason, name, message, subject=None, problem=None, move=None):
        Refusal.__init__(self, subject, problem or message, move, reason=reason)
        self.msg = message
        self.args = (message,)
        self.reason = reason
        self.name = name

    def __str__(self):
        return self.msg


def _refused(instance, reason, problem, move):
    name = instance.get("name") or "?"
    who = "%s/%s" % (instance["namespace"], name) if instance.get("namespace") else name
    subject = "%s cannot be repaved (%s)" % (who, reason)
    return RepaveRefused(reason, name, "%s: %s; %s" % (subject, problem, move), subject, problem, move)


def _either(values):
    values = list(values)
    return values[0] if len(values) == 1 else "%s or %s" % (", ".join(values[:-1]), values[-1])


# ------------------------------------------------------------------------------ target


def target_stream(instance, doc):
    """The OS stream an instance should run: its own (spec.osVersion) or the catalog's default stream."""
    stream = instance.get("os_stream") or doc.get("default_stream")
    return str(stream).strip() if stream else None


def _bad_stream(instance, doc, stream, problem):
    others = sorted(
        s
        for s, e in doc["streams"].items()
        if s != stream and e.get("validated") and e.get("tip") in doc["images"]
    )
    fix = "validate %s" % stream if stream in doc["streams"] else "register and validate a %s image" % stream
    move = "move the instance to a validated stream (%s) or %s with baked_image_stream first" % (
        ", ".join(others) or "none yet",
        fix,
    )
    return _refused(instance, INVALID_STREAM, problem, move)


def target_of(instance, doc, revision=None):
    """The revision an instance should run (its stream's tip, or the explicit ``revision``) as
    ``{revision, os_stream, image, storage_class, pg_versions, build_date}``.

    Raises ``RepaveRefused`` (InvalidOSStream) when the stream is unknown, has no tip or is not
    validated; an explicit revision must be in the catalog and its stream validated.
    """
    stream = target_stream(instance, doc)
    if revision:
        if revision not in doc["images"]:
            known = sorted(n for n, e in doc["images"].items() if e.get("os_version") == stream)[-5:]
            move = "give a registered revision (stream %s: %s)" % (stream, ", ".join(known) or "none")
            raise _refused(instance, INVALID_STREAM, "revision %s is not in the catalog" % revision, move)
        name, stream = revision, doc["images"][revision]["os_version"]
    elif not stream:
        move = "make a validated stream the default with goldenimage.pipeline.baked_image_stream"
        raise _refused(
            instance, INVALID_STREAM, "it names no OS stream and the catalog has no default stream", move
        )
    elif stream not in doc["streams"]:
        raise _bad_stream(instance, doc, stream, "OS stream %s is not in the catalog" % stream)
    else:
        name = doc["streams"][stream].get("tip")
        if not name or name not in doc["images"]:
            raise _bad_stream(instance, doc, stream, "OS stream %s has no tip revision" % stream)
    if not (doc["streams"].get(stream) or {}).get("validated"):
        why = "OS stream %s is not validated (an untested image never reaches a running database)" % stream
        raise _bad_stream(instance, doc, stream, why)
    image = doc["images"][name]
    return {
        "revision": name,
        "os_stream": stream,
        "image": dict(image.get("image") or {}),
        "storage_class": image.get("storage_class"),
        "pg_versions": list(image.get("pg_versions") or []),
        "build_date": _build_date(name, image),
        "available_since": catalog.available_since(name, image),
    }


def _build_date(name, image):
    """ISO build date of a revision (the catalog's, else the one in its name), or None."""
    try:
        day = revision.build_date(image["build_date"]) if image.get("build_date") else None
        return (day or revision.parse_revision(name).date).isoformat()
    except PipelineError:
        return None


def is_current(instance, target):
    """True when the instance already runs the target revision."""
    return bool(target) and instance.get("revision") == target["revision"]


# ------------------------------------------------------------------------------- drift


def engine_of(instance, doc, target, today=None, eol_table=None):
    """The one engineVersion rule (``catalog.check_engine_version``) for a running instance moving onto
    ``target``: its major must be set (a running database's major is never defaulted), in the target
    revision and not past end of life."""
    return catalog.check_engine_version(
        doc, instance.get("engine_version"), today, eol_table, target=target["revision"]
    )


def unknown_engine(instance, engine):
    """``(why, move)`` when the engineVersion verdict ``engine`` is that the running instance's major was
    never recorded (which a repave, keeping the major, must know); None otherwise."""
    if engine["problem"] != catalog.UNSET:
        return None
    field = instance.get("engine_field") or ENGINE_FIELD
    return (
        "its PostgreSQL major is unknown (%s is not set)" % field,
        "set %s to the major it runs (such as 16); it is judged and repaved once it is known" % field,
    )


def _blocked_words(engine):
    """``(why, move)`` when the engineVersion verdict ``engine`` keeps a repave from keeping the major;
    None when it does not (an unset major is ``unknown_engine``'s)."""
    problem, major = engine["problem"], engine["major"]
    if problem is None or problem == catalog.UNSET:
        return None
    if problem == catalog.MALFORMED:
        why = "its PostgreSQL major is unknown (%s)" % (
            engine.get("detail")
            or "engineVersion %r is set but is not a major version such as 16" % (engine["requested"],)
        )
    elif problem == catalog.NOT_CARRIED:
        why = "revision %s does not carry PostgreSQL %s" % (engine["revision"], major)
    elif problem == catalog.NO_EOL_DATE:
        why = "PostgreSQL %s has no end-of-life date, so it is not a supported major" % major
    else:
        why = "PostgreSQL %s is past end of life on %s" % (major, engine["eol_date"].isoformat())
    newer = [m for m in engine["supported"] if major is None or int(m) > int(major)]
    if newer:
        move = "pg_dump and restore into a DBInstance with engineVersion %s" % _either(newer)
    else:
        move = (
            "revision %s carries no newer supported major: register a newer image first" % engine["revision"]
        )
    return why, move


def check_policy(policy):
    """The maintenance policy with its defaults; refuses unknown keys and values that are not counts."""
    policy = {k: v for k, v in dict(policy or {}).items() if v is not None}
    unknown = sorted(set(policy) - set(POLICY_KEYS))
    if unknown:
        raise InvalidValue(
            "maintenance_policy: unknown key(s) %s; expected %s" % (unknown, ", ".join(POLICY_KEYS))
        )
    for key, value in policy.items():
        unit = "months" if key == "migration_deadline_months" else "days"
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidValue("maintenance_policy.%s %r: expected a number of %s >= 0" % (key, value, unit))
    forced, auto = policy.get("forced_apply_after_days"), policy.get("auto_apply_after_days")
    if forced == 0:
        # Forced the day a revision is offered would repave every database outside its window at once.
        raise InvalidValue(
            "maintenance_policy.forced_apply_after_days 0 forces every repave the day its revision is "
            "offered, whatever the windows; give at least 1 day, and use opt_in immediate with names for "
            "the instances to repave now"
        )
    if forced is not None and auto is not None and forced < auto:
        raise InvalidValue(
            "maintenance_policy.forced_apply_after_days %d comes before auto_apply_after_days %d; the forced "
            "date is the last resort after the windows: give it at least %d" % (forced, auto, auto)
        )
    policy.setdefault("migration_deadline_months", MIGRATION_MONTHS)
    return policy


def add_months(day, months):
    """``day`` moved ``months`` calendar months on, clamped to the end of a shorter month."""
    index = day.month - 1 + months
    year, month = day.year + index // 12, index % 12 + 1
    following = datetime.date(year + month // 12, month % 12 + 1, 1)
    return datetime.date(year, month, min(day.day, (following - datetime.timedelta(days=1)).day))


def migration_deadline(engine, target, policy):
    """When an instance that needs a PostgreSQL major migration is deleted whatever its owner does
    (ISO date), or None: ``migration_deadline_months`` after the end of life of its major, when that is past
    or the target revision no longer carries the major. Never counted from a build date: the data format,
    not the image, sets the clock. ``engine`` is the engineVersion verdict (``engine_of``)."""
    months = check_policy(policy)["migration_deadline_months"]
    if not (engine["past_eol"] or engine["problem"] == catalog.NOT_CARRIED) or not engine["eol_date"]:
        return None
    return add_months(engine["eol_date"], months).isoformat()


def failed_at_creation(instance):
    """True for an instance its operator refused to create (status reason ``UnsupportedEngineVersion``)
    that never ran a revision: it has no database, so there is nothing to repave or pg_dump."""
    return instance.get("reason") == UNSUPPORTED_ENGINE and not instance.get("revision")


def _recreate(instance, target, engine):
    supported = engine["supported"]
    said = instance.get("message") or "its engineVersion is not supported"
    move = (
        "delete it and create it again with engineVersion %s" % _either(supported)
        if supported
        else "revision %s carries no supported major: register a newer image first" % target["revision"]
    )
    return "never created (%s: %s): there is no database to repave or pg_dump; %s" % (
        UNSUPPORTED_ENGINE,
        said,
        move,
    )


def _policy_dates(target, policy):
    policy = check_policy(policy)
    dates = []
    for key in POLICY_KEYS[:2]:
        days = policy.get(key)
        # Counted from the day the revision was offered (validated), never before: a name's date can be old.
        built = target.get("available_since") or target.get("build_date")
        if days is None or not built:
            dates.append(None)
        else:
            dates.append((revision.build_date(built) + datetime.timedelta(days=days)).isoformat())
    return dates


def drift(instance, doc, today=None, eol_table=None, policy=None):
    """The drift verdict of one instance against the catalog, RDS pending-maintenance style.

    Returns ``{target, verdict, action, description, auto_apply_after, forced_apply, eol_date}``:
    ``Current``; ``OSUpdateAvailable`` (action ``os-repave``, dates from ``policy`` counted from the
    day the target was offered, ``catalog.available_since``); ``PGVersionEOL`` (action
    ``pg-major-migration``, never a repave: the target
    does not carry the major or it is past EOL); ``InvalidOSStream`` and ``EngineVersionUnknown`` (the
    running major was never recorded; no action).
    """
    date = catalog.requested_major(instance.get("engine_version"), today, eol_table)["eol_date"]
    result = {
        "target": None,
        "verdict": INVALID_STREAM,
        "action": None,
        "description": None,
        "auto_apply_after": None,
        "forced_apply": None,
        "migration_deadline": None,
        "eol_date": date.isoformat() if date else None,
    }
    check_policy(policy)  # a bad policy is refused whatever the verdict
    try:
        target = target_of(instance, doc)
    except RepaveRefused as exc:
        result["description"] = str(exc)
        return result
    auto, forced = _policy_dates(target, policy)
    result["target"] = target["revision"]
    engine = engine_of(instance, doc, target, today, eol_table)
    major = engine["major"]
    blocked = _blocked_words(engine)
    unknown = unknown_engine(instance, engine)
    until = " until %s" % date.isoformat() if date else ""
    if failed_at_creation(instance):
        result.update(
            verdict=UNSUPPORTED_ENGINE,
            action=ACTION_RECREATE,
            description=_recreate(instance, target, engine),
        )
    elif unknown:
        result.update(verdict=UNKNOWN_ENGINE, description="%s: never repaved; %s" % unknown)
    elif blocked:
        deadline = migration_deadline(engine, target, policy)
        description = "%s: a repave cannot change the major; %s" % blocked
        if deadline:
            description += "; migrate before %s, when it is deleted (migration deadline)" % deadline
        result.update(
            verdict=PG_EOL, action=ACTION_MIGRATE, description=description, migration_deadline=deadline
        )
    elif is_current(instance, target):
        result.update(
            verdict=CURRENT,
            description="runs %s, the tip of OS stream %s; PostgreSQL %s is supported%s"
            % (target["revision"], target["os_stream"], major, until),
        )
    else:
        result.update(
            verdict=OS_UPDATE,
            action=ACTION_REPAVE,
            auto_apply_after=auto,
            forced_apply=forced,
            description="OS repave from %s to %s (Ubuntu %s): the OS disk is replaced, pgdata and "
            "PostgreSQL %s stay (supported%s)"
            % (instance.get("revision") or "none", target["revision"], target["os_stream"], major, until),
        )
    return result


def _iso(when):
    return when.astimezone(datetime.timezone.utc).isoformat().replace("+00:00", "Z")


# Why a pending OS repave starts, as recorded in a roll-out's result (RDS's ways of applying maintenance).
BY_IMMEDIATE = "immediate"  # the run's opt_in immediate, for an instance the run names
BY_FORCED = "forced-apply"  # the maintenance policy's forced-apply date has come: applied whatever the window
BY_NEXT_MAINTENANCE = "next-maintenance"  # the run's opt_in next-maintenance, inside the instance's window
BY_AUTO_APPLY = "auto-apply"  # the auto-apply date has passed, inside the instance's window
NO_WINDOW, CLOSED, NOT_DUE = "NoMaintenanceWindow", "WindowClosed", "NotDue"


def _midnight(text):
    day = revision.build_date(text)
    return datetime.datetime(day.year, day.month, day.day, tzinfo=datetime.timezone.utc)


def apply_decision(found, opt_in, named, window, now, seconds=0):
    """Whether a pending OS repave may start at ``now`` (an aware datetime), the one rule every roll-out,
    check-mode prediction and report (``current_apply``) asks.

    ``found`` is ``drift``'s answer (its ``auto_apply_after`` and ``forced_apply`` dates), ``opt_in`` the
    run's choice (or, for a report, the recorded one), ``named`` whether the run names the instance,
    ``window`` the instance's own window or else the run's (None: no window), ``seconds`` how long the
    repave is expected to take (it must fit before the window closes). A repave starts only:
    with ``immediate`` for an instance the run names (``BY_IMMEDIATE``); once the forced-apply date has
    come, whatever the window (``BY_FORCED``); inside the window with ``next-maintenance``
    (``BY_NEXT_MAINTENANCE``) or once the auto-apply date has passed (``BY_AUTO_APPLY``). Anything else
    waits, and a run with no window and no such choice starts nothing.

    Returns ``{start, by, held, why, at}``: ``by`` why it starts, ``held`` why not (``NoMaintenanceWindow``,
    ``WindowClosed``, ``NotDue``), ``why`` one sentence, ``at`` when it starts as things stand (now when it
    starts; else the next fitting window opening from the date it becomes due, or the forced-apply date,
    whichever is earlier; None when nothing says when).
    """
    decision = {"start": False, "by": None, "held": None, "why": None, "at": None}
    if found.get("action") != ACTION_REPAVE:
        decision["why"] = "no pending OS repave"
        return decision
    forced = _midnight(found["forced_apply"]) if found.get("forced_apply") else None
    auto = _midnight(found["auto_apply_after"]) if found.get("auto_apply_after") else None

    def starts(by, why):
        decision.update(start=True, by=by, why=why, at=now)
        return decision

    if opt_in == IMMEDIATE and named:
        return starts(BY_IMMEDIATE, "opt_in immediate names it: repaved now, outside any window")
    if forced is not None and now >= forced:
        return starts(
            BY_FORCED, "its forced-apply date %s has come: repaved whatever the window" % _iso(forced)
        )
    if opt_in == NEXT_MAINTENANCE:
        due = now
    elif auto is not None:
        due = max(auto, now)
    else:
        due = None
    if window is None:
        at = forced
        decision.update(
            held=NO_WINDOW,
            why="no maintenance window (neither the run's window nor the instance's annotation %s sets one) "
            "and no opt_in immediate names it: nothing is repaved%s"
            % (rollout.WINDOW_ANNOTATION, " before its forced-apply date" if forced else ""),
        )
    elif due is None:
        at = forced
        decision.update(
            held=NOT_DUE,
            why="no opt-in and no auto-apply date (maintenance_policy) make it due: opt in with "
            "next-maintenance to repave it in its window%s"
            % (", or wait for the forced-apply date" if forced else ""),
        )
    else:
        fit = window.next_fit(due, seconds) if seconds else window.next_open(due)
        if due <= now and fit == now:
            by = BY_NEXT_MAINTENANCE if opt_in == NEXT_MAINTENANCE else BY_AUTO_APPLY
            return starts(by, "inside its maintenance window %s (%s)" % (window.describe(), by))
        at = fit if forced is None or (fit is not None and fit < forced) else forced
        if due > now:
            why = "its auto-apply date %s has not passed" % _iso(auto)
            decision.update(held=NOT_DUE, why=why + "; it is repaved in the first window after it")
        else:
            decision.update(
                held=CLOSED,
                why="its maintenance window %s is closed%s"
                % (window.describe(), " or too short for the repave now" if seconds else ""),
            )
    decision["at"] = at if at is None or at >= now else now
    return decision


def bad_window(instance, exc):
    """The refusal of an instance whose own maintenance window annotation cannot be read: it is never
    repaved on the run's window instead, since its owner asked for another."""
    return _refused(
        instance,
        "InvalidMaintenanceWindow",
        str(exc),
        "fix the annotation %s (or remove it to use the run's window)" % rollout.WINDOW_ANNOTATION,
    )


def intent(params, window, now):
    """What a roll-out was asked to do, as its result records it: the run's ``opt_in`` (None: only what
    the maintenance policy makes due), the instances it names, its window, its clock; ``applied_by``
    (key -> ``apply_decision``'s reason) is filled in as repaves start."""
    return {
        "opt_in": params.get("opt_in"),
        "names": list(params.get("names") or []),
        "window": window.to_dict() if window is not None else None,
        "maintenance_policy": {
            k: v for k, v in (params.get("maintenance_policy") or {}).items() if v is not None
        },
        "now": _iso(now),
        "applied_by": {},
    }


def held_message(entries):
    """What a roll-out that started nothing says: each reason instances were held, with how many and the
    first few, or None when none was held."""
    held = {}
    for key, entry in entries.items():
        if entry.get("held"):
            held.setdefault(entry["held_why"], []).append(key)
    if not held:
        return None
    parts = []
    for why, keys in sorted(held.items(), key=lambda item: -len(item[1])):
        shown = ", ".join(sorted(keys)[:5]) + (" and %d more" % (len(keys) - 5) if len(keys) > 5 else "")
        parts.append("%s: %s" % (shown, why))
    return "nothing repaved: %s" % "; ".join(parts)


def rollout_line(applied_by, pending, next_window, check_mode):
    """One line on a roll-out: what started each repave (or would, in check mode), what is left for later."""
    started = ", ".join("%s (%s)" % (name, why) for name, why in sorted(applied_by.items()))
    text = "%s: %s" % ("would start" if check_mode else "started", started or "nothing")
    if pending:
        text += "; still pending: %s" % ", ".join(pending)
        if next_window:
            text += " (next window %s)" % next_window
    return text


def current_apply(found, opt_in, window, now):
    """RDS's CurrentApplyDate of a pending OS repave (``found`` is ``drift``'s answer), UTC ISO 8601 or
    None, from the recorded ``opt_in`` and the instance's ``window`` (``apply_decision``)."""
    at = apply_decision(found, opt_in, True, window, now)["at"]
    return _iso(at) if at is not None else None


def entry(instance, name, doc, found, disagreement=None):
    """The result entry of one instance: as found, with its drift verdict ``found`` (``drift``)."""
    return {
        "name": name,
        "namespace": instance.get("namespace"),
        "revision": instance.get("revision"),
        "target": found["target"],
        "verdict": found["verdict"],
        "action": found["action"],
        "description": found["description"],
        "engine_version": instance.get("engine_version"),
        "os_stream": target_stream(instance, doc),
        "phase": instance.get("phase"),
        "operator": instance.get("operator") or {},
        "disagreement": disagreement,
        "opt_in": instance.get("opt_in"),
        "auto_apply_after": found["auto_apply_after"],
        "forced_apply": found["forced_apply"],
        "current_apply": found.get("current_apply"),
        "migration_deadline": found.get("migration_deadline"),
        "eol_date": found["eol_date"],
        "result": None,
    }


def condense_report(entries, limit=None):
    """``(kept, omitted)``: a fleet report cut to the instances that need attention.

    Current instances are left out; of the others, those that need more than an OS repave (an end-of-life
    major, an unknown stream or engine, a failed instance) come before the plain OS updates, fleet order
    kept within each, and at most ``limit`` are kept. ``omitted`` counts every entry left out.
    """
    attention = [e for e in entries if e["verdict"] != CURRENT]
    attention.sort(key=lambda e: e["verdict"] == OS_UPDATE)
    kept = attention[: details.kept_rows(limit)]
    return kept, len(entries) - len(kept)


def operator_disagreement(verdict, operator_conditions):
    """None when the CR's own ``OSUpdateAvailable``/``PGVersionEOL`` conditions agree with ``verdict``
    (or the operator has set neither yet); otherwise a message saying what each side says."""
    said = {}
    for kind in (OS_UPDATE, PG_EOL):
        status = str(((operator_conditions or {}).get(kind) or {}).get("status", "")).strip().lower()
        if status in ("true", "false"):
            said[kind] = status == "true"
    if not said:
        return None
    expected = _EXPECTED.get(verdict)
    if expected is None:  # nothing this catalog can judge: nothing to disagree with
        return None
    # A condition the operator does not set while it sets the other one means False.
    if all(said.get(kind, False) == want for kind, want in expected.items()):
        return None
    return (
        "the operator says %s but this catalog says %s (expected %s): the operator's catalog or default OS "
        "stream differs from this one"
    ) % (
        ", ".join("%s=%s" % (k, said[k]) for k in sorted(said)),
        verdict,
        ", ".join("%s=%s" % (k, expected[k]) for k in sorted(expected)),
    )


# --------------------------------------------------------------------------- preflight


def preflight(instance, doc, target, prove, today=None, eol_table=None):
    """Refuse a repave before anything changes: ``InvalidOSStream`` (the target's stream is unknown or not
    validated), ``UntrustedImage`` (the target's recorded signature does not hold under the catalog's trust
    policy), ``RepaveBlockedPGVersionEOL`` (the target does not carry the engineVersion, or the major
    is past EOL), ``NotAvailable`` (phase is not Available), in that order. ``target`` None: the tip.
    ``prove`` verifies the evidence a revision's recorded verdict carries (``catalog.signature_problem``)."""
    target = target_of(instance, doc, target["revision"] if target else None)
    unsigned = catalog.signature_problem(doc, target["revision"], prove)
    if unsigned:
        raise _refused(instance, UNTRUSTED_IMAGE, unsigned[0], unsigned[1])
    engine = engine_of(instance, doc, target, today, eol_table)
    unknown = unknown_engine(instance, engine)
    if unknown:
        raise _refused(instance, UNKNOWN_ENGINE, unknown[0], unknown[1])
    blocked = _blocked_words(engine)
    if blocked:
        raise _refused(
            instance, BLOCKED_EOL, "%s and a repave cannot change the major" % blocked[0], blocked[1]
        )
    phase = instance.get("phase") or "unknown"
    if phase != "Available":
        raise _refused(
            instance,
            NOT_AVAILABLE,
            "its phase is %s, not Available" % phase,
            "wait until it is Available again (a Failed instance: fix the cause in status.reason first)",
        )


# ------------------------------------------------------------------ the disks of a Harvester VM
#
# A direct-mode instance is a kubevirt.io/v1 VirtualMachine whose claims Harvester creates from the
# annotation harvesterhci.io/volumeClaimTemplates. Which of them is an OS disk (replaceable) and which
# holds data (never deleted without purge_data) is read from the claims and the VM, never from a name a
# caller passes: a disk is an OS disk only when it is proven to be one, everything else is data.

TEMPLATES = kinds.HARVESTER_CLAIM_TEMPLATES
IMAGE_ID = "harvesterhci.io/imageId"
PREVIOUS = "goldenimage.pipeline/previous-os-disks"
# On claims being torn down (label: the instance; annotation: the role), so a teardown killed after the
# VM was deleted still finds them.
TEARDOWN = "goldenimage.pipeline/teardown"
TEARDOWN_ROLE = "goldenimage.pipeline/teardown-role"
# A claim's own marker (label or annotation): "data" makes it data whatever else it carries.
DISK_ROLE = "goldenimage.pipeline/disk-role"
OS_DISK, DATA_DISK = "os", "data"
NOT_OS_DISK = "NotAnOSDisk"
DATA_SWAPPED_OUT = "DataDiskSwappedOut"


def claim_templates(vm):
    """The claim bodies the VM declares in its annotation; InvalidValue when it is not a JSON list of named
    claims."""
    text = kinds.annotations(vm).get(TEMPLATES) or ""
    if not text:
        return []
    try:
        items = json.loads(text)
    except ValueError as exc:
        raise InvalidValue("annotation %s is not valid JSON: %s" % (TEMPLATES, exc)) from exc
    if not isinstance(items, list) or not all(isinstance(i, dict) and kinds.name(i) for i in items):
        raise InvalidValue("annotation %s is not a list of named PersistentVolumeClaims" % TEMPLATES)
    return items


def volumes_of(vm):
    return (kinds.spec(kinds.spec(vm).get("template")).get("volumes")) or []


def claims_of(vm):
    """``{volume name: claim name}`` for the VM's volumes backed by a claim (or a DataVolume's claim)."""
    found = {}
    for volume in volumes_of(vm):
        source = volume.get("persistentVolumeClaim") or volume.get("dataVolume") or {}
        claim = source.get("claimName") or (source.get("name") if volume.get("dataVolume") else None)
        if claim:
            found[volume.get("name")] = claim
    return found


def split_names(text):
    return [n for n in (text or "").split(",") if n]


def boot_volume(vm):
    """The volume the VM boots from: the disk with the lowest bootOrder, else the first disk listed
    (KubeVirt boots its disks in the order they are listed when none has a bootOrder)."""
    domain = kinds.spec(kinds.spec(vm).get("template")).get("domain") or {}
    devices = domain.get("devices") or {}
    disks = [d for d in devices.get("disks") or [] if d.get("name") and "cdrom" not in d]
    ordered = [d for d in disks if isinstance(d.get("bootOrder"), int)]
    if ordered:
        return min(ordered, key=lambda d: d["bootOrder"])["name"]
    return disks[0]["name"] if disks else None


def instance_claims(name, vm, claims, pattern=None):
    """The names of the claims that belong to instance ``name``: declared or attached by its VM, recorded
    as its previous OS disks, marked by an earlier teardown of it (label ``teardown``), or, the VM being
    gone, named as this collection names them (``pattern``, a compiled regex). ``claims`` maps every claim
    of the namespace to its object."""
    owned = set()
    if vm is not None:
        owned.update(kinds.name(t) for t in claim_templates(vm))
        owned.update(claims_of(vm).values())
        owned.update(split_names(kinds.annotations(vm).get(PREVIOUS)))
    for claim_name, claim in claims.items():
        marked = kinds.labels(claim).get(TEARDOWN) == name
        named = vm is None and pattern is not None and bool(pattern.match(claim_name or ""))
        if marked or named:
            owned.add(claim_name)
    return owned


def image_ids(vm, claims):
    """The Harvester images (``namespace/name``) the VM's templates and the given claims name."""
    found = set()
    sources = list(claims.values())
    if vm is not None:
        try:
            sources += claim_templates(vm)
        except PipelineError:
            pass
    for obj in sources:
        image = kinds.annotations(obj).get(IMAGE_ID)
        if image:
            found.add(image)
    return sorted(found)


def _marked_data(sources):
    for obj in sources:
        for where, marks in (("label", kinds.labels(obj)), ("annotation", kinds.annotations(obj))):
            for key in (DISK_ROLE, TEARDOWN_ROLE):
                if str(marks.get(key) or "").strip().lower() == DATA_DISK:
                    return "its %s %s says data" % (where, key)
    return None


def _disk_role(claim_name, template, claim, attached_as, boot, images):
    """``(role, why)`` of one claim from its template, its object, the volume it is attached as and the
    images it may come from."""
    sources = [obj for obj in (template, claim) if obj]
    if not sources:
        return DATA_DISK, "neither a claim nor a template shows what it holds"
    marked = _marked_data(sources)
    if marked:
        return DATA_DISK, marked
    ids = sorted({kinds.annotations(o).get(IMAGE_ID) for o in sources} - {None, ""})
    if not ids:
        return (
            DATA_DISK,
            "it carries no %s annotation, which only a disk made from an image (an OS disk) has" % (IMAGE_ID),
        )
    if len(ids) > 1:
        return DATA_DISK, "its claim and its template name different images (%s)" % ", ".join(ids)
    image_id = ids[0]
    if image_id not in images or images[image_id] is None:
        return DATA_DISK, "the image %s it names was not found, so it cannot be proven to be an OS disk" % (
            image_id
        )
    image_class = kinds.status(images[image_id]).get("storageClassName")
    classes = sorted({kinds.spec(o).get("storageClassName") or "" for o in sources})
    if not image_class:
        return DATA_DISK, "the image %s has no StorageClass yet, so its disks cannot be recognised" % image_id
    if classes != [image_class]:
        return DATA_DISK, "its StorageClass %s is not the class of image %s (%s)" % (
            " / ".join(c or "(none)" for c in classes),
            image_id,
            image_class,
        )
    if attached_as is not None and attached_as != boot:
        return DATA_DISK, "the VM attaches it as volume %s, which is not its boot disk (%s)" % (
            attached_as,
            boot or "none",
        )
    return OS_DISK, "made from image %s (%s) on that image's StorageClass %s" % (
        image_id,
        IMAGE_ID,
        image_class,
    )


def classify_claims(vm, claims, images, names=None):
    """``{claim: {"role": "os" | "data", "why": ...}}`` for every claim of a Harvester VM.

    ``vm`` is the VirtualMachine (None when it is gone), ``claims`` maps claim names to the claims that
    exist, ``images`` maps ``namespace/name`` to the VirtualMachineImage (None: not found). Covered: the
    names in ``names``, else every claim the VM declares, attaches or recorded as a previous OS disk, and
    every claim given.

    A claim is an OS disk only when all of these hold: nothing marks it as data (label or annotation
    ``goldenimage.pipeline/disk-role: data``, or an earlier teardown's role ``data``); when attached, it
    is the VM's boot disk; it carries ``harvesterhci.io/imageId`` naming one existing image; and its
    StorageClass is that image's class. Anything not proven so is data. No option a caller passes
    takes part.
    """
    templates = {}
    attached = {}
    boot = None
    if vm is not None:
        templates = {kinds.name(t): t for t in claim_templates(vm)}
        for volume, claim in claims_of(vm).items():
            attached.setdefault(claim, volume)
        boot = boot_volume(vm)
    if names is None:
        names = set(templates) | set(attached) | set(claims)
        if vm is not None:
            names.update(split_names(kinds.annotations(vm).get(PREVIOUS)))
    roles = {}
    for claim_name in sorted(names):
        role, why = _disk_role(
            claim_name,
            templates.get(claim_name),
            claims.get(claim_name),
            attached.get(claim_name),
            boot,
            images,
        )
        roles[claim_name] = {"role": role, "why": why}
    return roles


def data_claims(roles):
    return sorted(n for n, r in roles.items() if r["role"] != OS_DISK)


def os_claims(roles):
    return sorted(n for n, r in roles.items() if r["role"] == OS_DISK)


def _os_volume_move(vm, roles):
    proven = [
        "%s (claim %s)" % (v, c)
        for v, c in sorted(claims_of(vm).items())
        if roles.get(c, {}).get("role") == OS_DISK
    ]
    if proven:
        return "set os_volume to the VM's OS volume: %s" % ", ".join(proven)
    return (
        "no volume of this VM is proven to be an OS disk (a claim made from a Harvester image, with that "
        "image's StorageClass, attached as the boot disk): check the VM's disks before repaving it"
    )


def check_os_volume(instance, vm, roles, os_volume):
    """Refuse (``NotAnOSDisk``) a repave whose ``os_volume`` is missing or backed by a claim not proven to
    be an OS disk, before anything is written. Returns the OS claim."""
    claim = claims_of(vm).get(os_volume)
    if claim is None:
        raise _refused(
            instance,
            NOT_OS_DISK,
            "the VM has no volume %s backed by a claim (os_volume); nothing was written" % os_volume,
            _os_volume_move(vm, roles),
        )
    role = roles.get(claim) or {"role": DATA_DISK, "why": "it was not classified"}
    if role["role"] != OS_DISK:
        raise _refused(
            instance,
            NOT_OS_DISK,
            "os_volume %s is backed by claim %s, which is data: %s; a repave would detach it, so nothing "
            "was written" % (os_volume, claim, role["why"]),
            _os_volume_move(vm, roles),
        )
    return claim


def swapped_out_data(vm, roles, claims):
    """The data claims an earlier repave swapped out of their slot: recorded as previous OS disks, no
    longer attached, not proven OS disks and not made from any image (a previous OS disk whose image is
    gone is unproven, and kept, but was never data in a slot; one neither declared nor existing is an old
    OS disk already deleted)."""
    previous = split_names(kinds.annotations(vm).get(PREVIOUS))
    in_use = set(claims_of(vm).values())
    templates = {kinds.name(t): t for t in claim_templates(vm)}
    found = []
    for claim in previous:
        if claim in in_use or (roles.get(claim) or {}).get("role") == OS_DISK:
            continue
        sources = [o for o in (templates.get(claim), claims.get(claim)) if o]
        if not sources:
            continue  # gone and undeclared: an old OS disk already deleted
        if _marked_data(sources) or not any(kinds.annotations(o).get(IMAGE_ID) for o in sources):
            found.append(claim)
    return found


def teardown_refusal(where, roles, purge_data):
    """The refusal of a teardown that would delete data claims without ``purge_data``, or None."""
    data = data_claims(roles)
    if not data or purge_data:
        return None
    return Refusal(
        "refusing to tear down %s" % where,
        "it would delete the data volume(s) %s; nothing was deleted"
        % "; ".join("%s (data: %s)" % (n, roles[n]["why"]) for n in data),
        "Set purge_data: true to delete them with the VM (their data is lost)",
        data_pvcs=data,
    )


# ----------------------------------------------------------------------- the request itself

# Durations checked before anything is written: a zero or negative one is refused.
DURATIONS = ("wait_timeout", "wait_sleep", "batch_estimate", "report_every")


def check_request(params):
    """Refuse a request whose options contradict each other or are out of range, before any read or
    write. ``params`` are the module's parameters; raises ``Refusal``."""
    p = params
    if p.get("opt_in") and p.get("state") != "repaved":
        raise Refusal(
            "option opt_in", "it records a choice about a pending repave", "use it with state repaved"
        )
    if p.get("opt_in") == IMMEDIATE and not p.get("names"):
        raise Refusal(
            "opt_in immediate",
            "it repaves outside the maintenance window, so it applies only to instances this run names, "
            "and names is empty",
            "list the instances to repave now in names; the others wait for the window (next-maintenance)",
        )
    if p.get("state") == "absent":
        if p.get("strategy") != "direct":
            raise Refusal(
                "state absent",
                "it is for strategy direct",
                "with the operator, delete the %s and let the operator tear it down (its disks included)"
                % p.get("kind", "DBInstance"),
            )
        if not p.get("names"):
            raise Refusal("state absent", "it needs names", "list the instances to tear down in names")
    elif not p.get("catalog"):
        raise Refusal(
            "state %s" % p.get("state"),
            "catalog is required",
            "give the catalog ConfigMap (namespace, name) or a catalog path",
        )
    if p.get("strategy") == "direct" and not p.get("namespace"):
        raise Refusal("strategy direct", "it needs namespace", "give the VMs' namespace")
    inputs.positive_all(p, DURATIONS)
    pause = p.get("batch_pause")
    if pause is not None and (isinstance(pause, bool) or not isinstance(pause, (int, float)) or pause < 0):
        raise Refusal(
            "option batch_pause",
            "%r is not a pause: it must be zero (no pause) or a positive number of seconds" % (pause,),
            "give 0 or a positive number",
        )
    try:
        window = rollout.parse_window(
            {k: v for k, v in p["window"].items() if v is not None} if p.get("window") else None
        )
        rollout.parse_max_unavailable(p.get("max_unavailable", 1), 1)
    except PipelineError as exc:
        raise Refusal(None, exc.msg) from exc
    return window


def require_tip(instance, doc, target):
    """The operator repaves to its catalog's tip: an explicit other revision is refused."""
    tip = target_of(instance, doc)["revision"]
    if tip != target["revision"]:
        raise Refusal(
            "revision %s" % target["revision"],
            "it is not the tip of OS stream %s (%s), and the operator repaves to its catalog's tip"
            % (target["os_stream"], tip),
            "roll back with strategy direct, or move the tip with baked_image_stream",
        )


def missing_refusal(kind, namespace, missing):
    where = " in namespace %s" % namespace if namespace else ""
    return Refusal(
        "%s not found%s" % (kind, where),
        ", ".join(missing),
        "check names (nothing was written)",
    )


def refused_all(refused):
    """The one failure of a run that halts on refused instances (halt_on_failure): nothing is written."""
    return Refusal(
        None,
        "refusing to repave %d instance(s), nothing written (halt_on_failure): %s"
        % (len(refused), "; ".join(str(exc) for exc in refused)),
    )


def empty_scope(params):
    """What a repave with no instance in scope says (a result, not a failure: nothing to do)."""
    parts = []
    if params.get("namespace"):
        parts.append("namespace %s" % params["namespace"])
    else:
        parts.append("any namespace")
    if params.get("label_selector"):
        parts.append("label selector %s" % params["label_selector"])
    if params.get("names"):
        parts.append("names %s" % ", ".join(params["names"]))
    return "no %s in scope (%s): nothing to repave; check namespace, names and label_selector" % (
        params.get("kind") if params.get("strategy") != "direct" else "VirtualMachine",
        "; ".join(parts),
    )


def empty_catalog(where):
    return Refusal(
        None,
        "%s has no OS streams (it is missing or empty)" % where,
        "register images with baked_image and set a stream tip with baked_image_stream",
    )


def classify(instances, doc, key, prove, revision=None, operator=False, today=None, vetoes=None):
    """What a repave run does with each instance, before anything is written.

    ``key(inst)`` names an instance in the result; an instance's ``in_flight`` (set by its driver) says an
    earlier run started its repave; ``vetoes`` maps a key to the ``RepaveRefused`` its driver raised for
    it (direct mode: its os_volume is not a proven OS disk). Returns ``{targets, in_flight, candidates,
    refused, entries}``: ``targets`` key -> target, ``in_flight`` keys to wait on (never triggered again),
    ``candidates`` keys to repave, ``refused`` the ``RepaveRefused`` of each refused instance, and
    ``entries`` key -> the result fields to set (``result: current``, the target, or the refusal).
    An explicit ``revision`` with the operator must be the tip (``require_tip``); ``prove`` is
    ``preflight``'s.
    """
    found = {"targets": {}, "in_flight": [], "candidates": [], "refused": [], "entries": {}}
    vetoes = vetoes or {}
    for inst in instances:
        name = key(inst)
        if failed_at_creation(inst):
            # Nothing runs, so nothing is repaved, and it does not hold back the others.
            found["entries"][name] = {
                "result": "skipped",
                "reason": UNSUPPORTED_ENGINE,
                "message": "%s was never created (%s): nothing to repave"
                % (name, inst.get("message") or UNSUPPORTED_ENGINE),
            }
            continue
        try:
            target = target_of(inst, doc, revision)
            if revision and operator:
                require_tip(inst, doc, target)
            if is_current(inst, target):
                found["entries"][name] = {"result": "current"}
                continue
            found["entries"][name] = {"target": target["revision"]}
            if inst.get("in_flight"):
                found["targets"][name] = target
                found["in_flight"].append(name)
                continue
            preflight(inst, doc, target, prove, today)
            if vetoes.get(name) is not None:
                raise vetoes[name]
        except RepaveRefused as exc:
            found["entries"].setdefault(name, {}).update(
                result="refused", reason=exc.reason, message=str(exc)
            )
            found["refused"].append(exc)
            continue
        found["targets"][name] = target
        found["candidates"].append(name)
    return found


def opt_in_changes(instances, key, found, opt_in):
    """The opt-in annotations a repave run writes, ``{key: value}`` (None removes), before it starts.

    The annotation only records a choice; no run acts on it, each acts on its own ``opt_in``. So what a
    run leaves behind always says what that run intends: instances it plans (``found["candidates"]``)
    get its ``opt_in`` (V(immediate) only ever on instances the run names); without one, a recorded
    ``next-maintenance`` stays and a recorded ``immediate`` (which belonged to the run that named the
    instance, interrupted since) is removed. Instances already current lose theirs (nothing is pending),
    instances in flight keep theirs until their repave is applied, and any other instance in scope loses
    a recorded ``immediate``. ``undo-opt-in`` removes every one. ``found`` is ``classify``'s answer.
    """
    candidates = set(found.get("candidates") or ())
    in_flight = set(found.get("in_flight") or ())
    entries = found.get("entries") or {}
    changes = {}
    for inst in instances:
        name = key(inst)
        recorded = inst.get("opt_in")
        if name in in_flight and opt_in != UNDO_OPT_IN:
            continue
        if opt_in == UNDO_OPT_IN:
            wanted = None
        elif name in candidates and opt_in in (IMMEDIATE, NEXT_MAINTENANCE):
            wanted = opt_in
        elif (entries.get(name) or {}).get("result") == "current":
            wanted = None
        else:
            wanted = recorded if recorded == NEXT_MAINTENANCE else None
        if wanted != recorded:
            changes[name] = wanted
    return changes
