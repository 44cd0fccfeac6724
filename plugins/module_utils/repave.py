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
past end of life, is never offered a repave; it needs pg_dump and restore into a new DBInstance.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime

from ansible_collections.goldenimage.pipeline.plugins.module_utils import eol, revision

CURRENT = "Current"
OS_UPDATE = "OSUpdateAvailable"
PG_EOL = "PGVersionEOL"
INVALID_STREAM = "InvalidOSStream"
BLOCKED_EOL = "RepaveBlockedPGVersionEOL"
NOT_AVAILABLE = "NotAvailable"
ACTION_REPAVE = "os-repave"
ACTION_MIGRATE = "pg-major-migration"
POLICY_KEYS = ("auto_apply_after_days", "forced_apply_after_days")
# What the operator's two drift conditions should say for each of our verdicts.
_EXPECTED = {
    CURRENT: {OS_UPDATE: False, PG_EOL: False},
    OS_UPDATE: {OS_UPDATE: True, PG_EOL: False},
    PG_EOL: {OS_UPDATE: False, PG_EOL: True},
    INVALID_STREAM: {OS_UPDATE: False, PG_EOL: False},
}


class RepaveRefused(ValueError):
    """A repave the rules refuse. ``reason`` is the status reason (``InvalidOSStream``, ...), ``name`` the
    instance; the message names the instance, the rule and the move that is supported instead."""

    def __init__(self, reason, name, message):
        super().__init__(message)
        self.reason = reason
        self.name = name


def _refused(instance, reason, problem, move):
    name = instance.get("name") or "?"
    who = "%s/%s" % (instance["namespace"], name) if instance.get("namespace") else name
    return RepaveRefused(reason, name, "%s cannot be repaved (%s): %s; %s" % (who, reason, problem, move))


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
    }


def _build_date(name, image):
    """ISO build date of a revision (the catalog's, else the one in its name), or None."""
    try:
        day = revision.build_date(image["build_date"]) if image.get("build_date") else None
        return (day or revision.parse_revision(name).date).isoformat()
    except ValueError:
        return None


def is_current(instance, target):
    """True when the instance already runs the target revision."""
    return bool(target) and instance.get("revision") == target["revision"]


# ------------------------------------------------------------------------------- drift


def _major(instance):
    try:
        return eol.normalize_pg_major(instance.get("engine_version"))
    except ValueError:
        return None


def _major_state(instance, today, eol_table):
    """``(major or None, its EOL date or None, past EOL?, day, table)``."""
    day = eol.parse_today(today)
    table = eol.eol_table(eol_table)
    major = _major(instance)
    date = table[eol.PG].get(major) if major else None
    return major, date, bool(date and date < day), day, table


def _blocked(major, date, past, target, day, table):
    """``(why, move)`` when a repave cannot keep the major in ``target``; None when it can."""
    if major is None:
        why = "its PostgreSQL major is unknown (engineVersion is not set)"
    elif past:
        why = "PostgreSQL %s is past end of life on %s" % (major, date.isoformat())
    elif major not in target["pg_versions"]:
        why = "revision %s does not carry PostgreSQL %s" % (target["revision"], major)
    else:
        return None
    supported = [m for m in target["pg_versions"] if not (table[eol.PG].get(m) and table[eol.PG][m] < day)]
    newer = [m for m in supported if major is None or int(m) > int(major)]
    if newer:
        move = "pg_dump and restore into a DBInstance with engineVersion %s" % _either(newer)
    else:
        move = (
            "revision %s carries no newer supported major: register a newer image first" % target["revision"]
        )
    return why, move


def _policy_dates(target, policy):
    policy = dict(policy or {})
    unknown = sorted(set(policy) - set(POLICY_KEYS))
    if unknown:
        raise ValueError(
            "maintenance_policy: unknown key(s) %s; expected %s" % (unknown, ", ".join(POLICY_KEYS))
        )
    dates = []
    for key in POLICY_KEYS:
        days = policy.get(key)
        if days is not None and (isinstance(days, bool) or not isinstance(days, int) or days < 0):
            raise ValueError("maintenance_policy.%s %r: expected a number of days >= 0" % (key, days))
        built = target.get("build_date")
        if days is None or not built:
            dates.append(None)
        else:
            dates.append((revision.build_date(built) + datetime.timedelta(days=days)).isoformat())
    return dates


def drift(instance, doc, today=None, eol_table=None, policy=None):
    """The drift verdict of one instance against the catalog, RDS pending-maintenance style.

    Returns ``{target, verdict, action, description, auto_apply_after, forced_apply, eol_date}``:
    ``Current``; ``OSUpdateAvailable`` (action ``os-repave``, dates from ``policy`` counted from the
    target's build date); ``PGVersionEOL`` (action ``pg-major-migration``, never a repave: the target
    does not carry the major or it is past EOL); ``InvalidOSStream`` (no action).
    """
    major, date, past, day, table = _major_state(instance, today, eol_table)
    result = {
        "target": None,
        "verdict": INVALID_STREAM,
        "action": None,
        "description": None,
        "auto_apply_after": None,
        "forced_apply": None,
        "eol_date": date.isoformat() if date else None,
    }
    try:
        target = target_of(instance, doc)
    except RepaveRefused as exc:
        _policy_dates({}, policy)  # a bad policy is refused whatever the verdict
        result["description"] = str(exc)
        return result
    auto, forced = _policy_dates(target, policy)
    result["target"] = target["revision"]
    blocked = _blocked(major, date, past, target, day, table)
    until = " until %s" % date.isoformat() if date else ""
    if blocked:
        description = "%s: a repave cannot change the major; %s" % blocked
        result.update(verdict=PG_EOL, action=ACTION_MIGRATE, description=description)
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
    expected = _EXPECTED[verdict]
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


def preflight(instance, doc, target, today=None, eol_table=None):
    """Refuse a repave before anything changes: ``InvalidOSStream`` (the target's stream is unknown or not
    validated), ``RepaveBlockedPGVersionEOL`` (the target does not carry the engineVersion, or the major
    is past EOL), ``NotAvailable`` (phase is not Available), in that order. ``target`` None: the tip."""
    target = target_of(instance, doc, target["revision"] if target else None)
    major, date, past, day, table = _major_state(instance, today, eol_table)
    blocked = _blocked(major, date, past, target, day, table)
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
