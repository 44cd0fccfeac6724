# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""End-of-life rules for baked PostgreSQL images: which PG majors and OS streams may be built.

Pure: no I/O. The image build, the catalog and the engine-version rule all ask this file, so an
EOL date is written down once. A version is supported on its EOL date and refused the day after.

PostgreSQL dates are the final minor release of each major (postgresql.org versioning policy).
Ubuntu publishes LTS end of standard support as a month ("2027-04"); a month means its last day,
so 22.04 is still buildable on 2027-04-30 and refused from 2027-05-01.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import datetime
import re

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import (
    InvalidValue,
    PipelineError,
    Refusal,
)

PG = "postgresql"
OS = "ubuntu"

# Values are ISO dates or "YYYY-MM" months (read as the month's last day). Ended releases stay in the
# table, so an old major or stream is refused as past its end of life rather than as unknown.
DEFAULT_EOL_TABLE = {
    PG: {
        "10": "2022-11-10",
        "11": "2023-11-09",
        "12": "2024-11-21",
        "13": "2025-11-13",
        "14": "2026-11-12",
        "15": "2027-11-11",
        "16": "2028-11-09",
        "17": "2029-11-08",
        "18": "2030-11-14",
    },
    OS: {
        "18.04": "2023-05",
        "20.04": "2025-05",
        "22.04": "2027-04",
        "24.04": "2029-04",
    },
}

_DAY = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
_MONTH = re.compile(r"^(\d{4})-(\d{2})$")


class EOLViolation(PipelineError):
    """A requested version is past its EOL date (or unknown to the table). ``violations`` lists each."""

    def __init__(self, message, violations):
        super().__init__(message)
        self.violations = violations


def parse_eol_date(value):
    """Return a ``datetime.date`` for an EOL value: a date, ``YYYY-MM-DD`` or ``YYYY-MM`` (last day)."""
    if isinstance(value, datetime.datetime):
        return value.date()
    if isinstance(value, datetime.date):
        return value
    text = str(value).strip()
    day = _DAY.match(text)
    if day:
        try:
            return datetime.date(int(day.group(1)), int(day.group(2)), int(day.group(3)))
        except ValueError as exc:
            raise InvalidValue("EOL date %r is not a valid date: %s" % (text, exc)) from exc
    month = _MONTH.match(text)
    if month:
        year, mon = int(month.group(1)), int(month.group(2))
        if not 1 <= mon <= 12:
            raise InvalidValue("EOL month %r is not a valid month" % text)
        return datetime.date(year, mon, calendar.monthrange(year, mon)[1])
    raise InvalidValue("EOL date %r: expected YYYY-MM-DD or YYYY-MM" % text)


def parse_today(value=None):
    """Return the build date: ``None`` means today in UTC; strings are ``YYYY-MM-DD`` or ``YYYYMMDD``."""
    if value is None or value == "":
        return datetime.datetime.now(datetime.timezone.utc).date()
    if isinstance(value, datetime.datetime):
        return value.date()
    if isinstance(value, datetime.date):
        return value
    text = str(value).strip()
    if re.match(r"^\d{8}$", text):
        text = "%s-%s-%s" % (text[:4], text[4:6], text[6:])
    if not _DAY.match(text):
        raise InvalidValue("today %r: expected YYYY-MM-DD or YYYYMMDD" % value)
    return parse_eol_date(text)


_WHOLE_WITH_ZEROS = re.compile(r"^\s*([1-9]\d*)\.0+\s*$")


def zeros_major(value):
    """The whole number a major written with a fraction of zeros means (``16.0``, ``"16.00"`` -> ``"16"``),
    else None. Such a value gets one answer whether YAML read it as a number or a string: a major is a
    whole number."""
    if isinstance(value, bool) or not isinstance(value, (float, str)):
        return None
    whole = _WHOLE_WITH_ZEROS.match(str(value))
    return whole.group(1) if whole else None


def normalize_pg_major(value):
    """``15``, ``"15"`` -> ``"15"``. Anything else (``15.0``, ``"15.4"``, ``"x"``) is refused."""
    if isinstance(value, bool):
        raise InvalidValue("PostgreSQL major %r is not a major version number" % (value,))
    whole = zeros_major(value)
    if whole:
        raise InvalidValue(
            "PostgreSQL major %r is not a major version number: a major is a whole number, so write %s"
            % (value, whole)
        )
    text = str(value).strip()
    if not re.match(r"^[1-9]\d*$", text):
        raise InvalidValue("PostgreSQL major %r is not a major version number (e.g. 16)" % (value,))
    return text


def requested_majors(values, option="pg_versions"):
    """Each major an option names, as text (``normalize_pg_major``), refused before anything runs with
    the option named when one is not a whole number."""
    majors = []
    for value in values or []:
        try:
            majors.append(normalize_pg_major(value))
        except InvalidValue as exc:
            raise Refusal(
                "option %s" % option, exc.msg, "write each major as a whole number, e.g. 16"
            ) from None
    return majors


def eol_table(overrides=None):
    """The default table merged with ``overrides`` (same shape: ``{"postgresql": {...}, "ubuntu": {...}}``).

    Values become ``datetime.date``. An override adds a version or moves its date; it never drops
    one. Unknown top-level keys are refused so a typo cannot silently disable the guard.
    """
    if not overrides:
        # The default table is parsed once per process; a fleet's report asks for it per instance.
        if not _DEFAULT_PARSED:
            _DEFAULT_PARSED.update(_merged({}))
        return {kind: dict(entries) for kind, entries in _DEFAULT_PARSED.items()}
    return _merged(overrides)


_DEFAULT_PARSED = {}


def _merged(overrides):
    merged = {}
    unknown = sorted(set(overrides) - {PG, OS})
    if unknown:
        raise InvalidValue("EOL overrides: unknown key(s) %s; expected %r and/or %r" % (unknown, PG, OS))
    for kind in (PG, OS):
        entries = dict(DEFAULT_EOL_TABLE[kind])
        entries.update(overrides.get(kind) or {})
        normalized = {}
        for version, value in entries.items():
            key = normalize_pg_major(version) if kind == PG else str(version).strip()
            normalized[key] = parse_eol_date(value)
        merged[kind] = normalized
    return merged


def _sorted_versions(versions):
    return sorted(versions, key=lambda v: tuple(int(p) for p in re.findall(r"\d+", v)))


def supported_pg_majors(today=None, table=None):
    """PG majors whose EOL is today or later, oldest first (e.g. ``["15", "16", "17", "18"]``)."""
    day = parse_today(today)
    merged = eol_table(table)
    return _sorted_versions(v for v, eol in merged[PG].items() if eol >= day)


def supported_os_streams(today=None, table=None):
    """OS streams whose end of standard support is today or later, oldest first."""
    day = parse_today(today)
    merged = eol_table(table)
    return _sorted_versions(v for v, eol in merged[OS].items() if eol >= day)


def _violation(kind, version, eol, supported, reason):
    label = "PostgreSQL" if kind == PG else "Ubuntu"
    if reason == "unknown":
        message = "%s %s has no EOL date in the table; supported: %s (add it to the EOL overrides)" % (
            label,
            version,
            ", ".join(supported) or "none",
        )
    else:
        message = "%s %s reached end of life on %s; supported: %s" % (
            label,
            version,
            eol.isoformat(),
            ", ".join(supported) or "none",
        )
    return {
        "kind": kind,
        "version": version,
        "eol": eol.isoformat() if eol else None,
        "reason": reason,
        "supported": supported,
        "message": message,
    }


def check_eol(pg_majors, os_stream, today=None, table=None):
    """Return a list of violations (dicts with ``kind``, ``version``, ``eol``, ``reason``, ``supported``,
    ``message``); empty when every requested PG major and the OS stream are within support.

    ``reason`` is ``past_eol`` or ``unknown`` (a version the table does not know is refused too:
    without a date nobody can say it is supported). ``os_stream`` may be ``None`` to check PG only.
    """
    day = parse_today(today)
    merged = eol_table(table)
    pg_supported = _sorted_versions(v for v, eol in merged[PG].items() if eol >= day)
    os_supported = _sorted_versions(v for v, eol in merged[OS].items() if eol >= day)
    violations = []
    seen = set()
    for raw in pg_majors or []:
        major = normalize_pg_major(raw)
        if major in seen:
            continue
        seen.add(major)
        eol = merged[PG].get(major)
        if eol is None:
            violations.append(_violation(PG, major, None, pg_supported, "unknown"))
        elif eol < day:
            violations.append(_violation(PG, major, eol, pg_supported, "past_eol"))
    if os_stream is not None:
        stream = str(os_stream).strip()
        eol = merged[OS].get(stream)
        if eol is None:
            violations.append(_violation(OS, stream, None, os_supported, "unknown"))
        elif eol < day:
            violations.append(_violation(OS, stream, eol, os_supported, "past_eol"))
    return violations


def eol_guard(pg_majors, os_stream, today=None, table=None):
    """Raise ``EOLViolation`` naming each refused version, its EOL date and the supported set.

    Returns ``{"today", "pg_supported", "os_supported"}`` when everything requested is supported.
    """
    day = parse_today(today)
    violations = check_eol(pg_majors, os_stream, day, table)
    if violations:
        message = "EOL guard (judged on %s): %s" % (
            day.isoformat(),
            "; ".join(v["message"] for v in violations),
        )
        raise EOLViolation(message, violations)
    return {
        "today": day.isoformat(),
        "pg_supported": supported_pg_majors(day, table),
        "os_supported": supported_os_streams(day, table),
    }


def judging_day(build_date=None, now=None):
    """The day a build's EOL is judged on: the later of the wall clock (``now``, default today in UTC) and
    the build date. A build date in the past never brings back a version that has reached its end of life
    (a revision named ``v20250101`` built today still may not carry PostgreSQL 13); one in the future is
    judged on that day, as the image will be served from it."""
    clock = parse_today(now)
    if build_date is None or build_date == "":
        return clock
    return max(clock, parse_today(build_date))


def extensions(overrides):
    """Overrides that move an EOL date the built-in table knows later (support claimed past its end),
    oldest first: ``[{"kind", "version", "default", "override", "message"}]``. A version the table does not
    know, or an earlier date, is not one. Every caller reports these and the catalog records them."""
    if not overrides:
        return []
    merged = eol_table(overrides)
    defaults = eol_table()
    found = []
    for kind in (PG, OS):
        for version in _sorted_versions(merged[kind]):
            before, after = defaults[kind].get(version), merged[kind][version]
            if before is None or after <= before:
                continue
            label = "PostgreSQL" if kind == PG else "Ubuntu"
            found.append(
                {
                    "kind": kind,
                    "version": version,
                    "default": before.isoformat(),
                    "override": after.isoformat(),
                    "message": "%s %s: end of life moved from %s to %s by an override"
                    % (label, version, before.isoformat(), after.isoformat()),
                }
            )
    return found
