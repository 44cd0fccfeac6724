# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The fleet roll-out plan for repaves: how many instances may be down at once, the maintenance window,
the order (for example standbys first) and the batches.

Pure: no I/O and no clock; callers pass ``now`` (an aware datetime). Window times are wall-clock times
in the window's timezone, turned into instants per day through zoneinfo, so DST days are as long as the
clock says (a 01:00-03:00 Europe/Berlin window lasts one hour on the spring-forward day, three on the
fall-back day). Returned datetimes are in UTC: datetimes sharing one zoneinfo compare and subtract by
wall clock, which is wrong across a DST change.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import json
import re
import zoneinfo

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import (
    InvalidValue,
    PipelineError,
)

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_FULL_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_UTC = datetime.timezone.utc
_HHMM = re.compile(r"^(\d{1,2}):(\d{2})$")
_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_SET_TERM = re.compile(r"^(%s)\s+(in|notin)\s+\(([^()]*)\)$" % _KEY)
_EQ_TERM = re.compile(r"^(%s)\s*(==|=|!=)\s*([-A-Za-z0-9_.]*)$" % _KEY)
_EXISTS_TERM = re.compile(r"^(!?)\s*(%s)$" % _KEY)


def parse_max_unavailable(value, total):
    """How many instances may be down at once: a count, or ``"N%"`` of ``total`` rounded down but at
    least 1 (like a Deployment's maxUnavailable)."""
    usage = "expected a count such as 2 or a percentage of the fleet such as 25%"
    if isinstance(value, (bool, float)):
        raise InvalidValue("max_unavailable %r: %s" % (value, usage))
    match = re.match(r"^(-?\d+)\s*(%?)$", str(value).strip()) if value is not None else None
    if not match:
        raise InvalidValue("max_unavailable %r: %s" % (value, usage))
    number = int(match.group(1))
    if match.group(2):
        if not 0 < number <= 100:
            raise InvalidValue("max_unavailable %r: a percentage must be between 1%% and 100%%" % (value,))
        return max(1, int(total) * number // 100)
    if number < 1:
        raise InvalidValue(
            "max_unavailable %r: at least 1 instance must be allowed down to repave" % (value,)
        )
    return number


# ----------------------------------------------------------------------------- windows


def _instant(day, at, tz):
    """The first instant (UTC) on local ``day`` at which the wall clock reads ``at`` or later: the first
    of two on a fall-back day, the moment the clock jumps when ``at`` falls in a spring-forward gap."""
    naive = datetime.datetime.combine(day, at)
    first = naive.replace(tzinfo=tz, fold=0)
    if first.astimezone(_UTC).astimezone(tz).replace(tzinfo=None) == naive:
        return first.astimezone(_UTC)
    # In a gap: fold=1 maps before the jump, fold=0 after it; bisect to the second of the jump.
    low = int(naive.replace(tzinfo=tz, fold=1).timestamp())
    high = int(first.timestamp())
    while high - low > 1:
        mid = (low + high) // 2
        if datetime.datetime.fromtimestamp(mid, tz).replace(tzinfo=None) >= naive:
            high = mid
        else:
            low = mid
    return datetime.datetime.fromtimestamp(high, _UTC)


def _utc(now):
    if not isinstance(now, datetime.datetime) or now.tzinfo is None or now.utcoffset() is None:
        raise InvalidValue("now %r: expected an aware datetime" % (now,))
    return now.astimezone(_UTC)


class Window:
    """A weekly maintenance window: on ``days`` (weekday numbers, Monday 0) from ``start`` to ``end``
    (``datetime.time``) in ``timezone``; ``end`` before ``start`` ends the next day, and such a window
    belongs to the day it starts on."""

    def __init__(self, days, start, end, timezone):
        self.days = tuple(sorted(set(days)))
        self.start, self.end, self.timezone = start, end, timezone
        self.tz = zoneinfo.ZoneInfo(timezone)
        self.overnight = end < start

    def _occurrences(self, now):
        """``(opens, closes)`` in UTC for the windows starting from the local day before ``now`` to a
        week after it."""
        today = now.astimezone(self.tz).date()
        for offset in range(-1, 9):
            day = today + datetime.timedelta(days=offset)
            if day.weekday() in self.days:
                opens = _instant(day, self.start, self.tz)
                closes = _instant(day + datetime.timedelta(days=int(self.overnight)), self.end, self.tz)
                if closes > opens:
                    yield opens, closes

    def closes_at(self, now):
        """When the window open at ``now`` closes (UTC), or None when it is closed at ``now``."""
        now = _utc(now)
        closes = [c for o, c in self._occurrences(now) if o <= now < c]
        return max(closes) if closes else None

    def contains(self, now):
        return self.closes_at(now) is not None

    def next_open(self, now):
        """``now`` (UTC) when the window is open, else the next time it opens."""
        now = _utc(now)
        if self.contains(now):
            return now
        return min((o for o, _c in self._occurrences(now) if o > now), default=None)

    def fits(self, now, seconds):
        """True when the window is open at ``now`` and still open ``seconds`` later."""
        closes = self.closes_at(now)
        return closes is not None and _utc(now) + datetime.timedelta(seconds=seconds) <= closes

    def next_fit(self, now, seconds):
        """The first time at or after ``now`` when something lasting ``seconds`` fits in the window (UTC);
        None when no window of the coming week is that long."""
        now = _utc(now)
        if self.fits(now, seconds):
            return now
        length = datetime.timedelta(seconds=seconds)
        return min((o for o, c in self._occurrences(now) if o > now and o + length <= c), default=None)

    def local(self, when):
        """``when`` on the window's wall clock, for messages."""
        return _utc(when).astimezone(self.tz)

    def to_dict(self):
        return {
            "days": [DAYS[d] for d in self.days],
            "start": self.start.strftime("%H:%M"),
            "end": self.end.strftime("%H:%M"),
            "timezone": self.timezone,
        }

    def describe(self):
        days = "every day" if len(self.days) == 7 else ",".join(DAYS[d] for d in self.days)
        text = "%s %s-%s %s" % (days, self.start.strftime("%H:%M"), self.end.strftime("%H:%M"), self.timezone)
        return text + (" (ends the next day)" if self.overnight else "")


def _clock(spec, key):
    value = spec.get(key)
    match = _HHMM.match(str(value).strip()) if value is not None else None
    if not match or int(match.group(1)) > 23 or int(match.group(2)) > 59:
        raise InvalidValue("window.%s %r: expected a wall-clock time HH:MM such as 22:00" % (key, value))
    return datetime.time(int(match.group(1)), int(match.group(2)))


def parse_window(spec):
    """A ``Window`` from ``{days: [mon, ...], start: "HH:MM", end: "HH:MM", timezone: "Europe/Berlin"}``
    (days default to every day, timezone to UTC); None gives None (no window: always open)."""
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise InvalidValue("window %r: expected a mapping with days, start, end and timezone" % (spec,))
    unknown = sorted(set(spec) - {"days", "start", "end", "timezone"})
    if unknown:
        raise InvalidValue("window: unknown key(s) %s; expected days, start, end, timezone" % unknown)
    days = spec.get("days")
    if days is None:
        numbers = range(7)
    else:
        if isinstance(days, str):
            days = days.split(",")
        if not days:
            raise InvalidValue("window.days is empty; leave it out for every day")
        numbers = []
        for day in days:
            name = str(day).strip().lower()
            if name not in DAYS and name not in _FULL_DAYS:
                raise InvalidValue("window.days: %r is not a day; use %s" % (day, ", ".join(DAYS)))
            numbers.append(DAYS.index(name[:3]))
    start, end = _clock(spec, "start"), _clock(spec, "end")
    if start == end:
        raise InvalidValue(
            "window: start and end are both %s; a window needs a length" % start.strftime("%H:%M")
        )
    timezone = str(spec.get("timezone") or "UTC").strip()
    try:
        return Window(numbers, start, end, timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidValue(
            "window.timezone %r is not an IANA time zone such as Europe/Berlin" % timezone
        ) from exc


# ------------------------------------------------------------------------ order, plan


def _terms(selector):
    """Split a label selector on the commas outside ``(...)``."""
    terms, depth, current = [], 0, ""
    for char in selector:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(current.strip())
            current = ""
        else:
            current += char
    terms.append(current.strip())
    return [t for t in terms if t]


def match_selector(labels, selector):
    """True when ``labels`` match a Kubernetes label selector: ``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``,
    ``a in (x,y)``, ``a notin (x,y)``, comma-separated (all must hold); empty matches everything."""
    labels = labels or {}
    for term in _terms(str(selector or "")):
        found = _SET_TERM.match(term)
        if found:
            key, op, values = found.groups()
            inside = labels.get(key) in {v.strip() for v in values.split(",")}
            ok = (key in labels and inside) if op == "in" else not inside
        elif _EQ_TERM.match(term):
            key, op, value = _EQ_TERM.match(term).groups()
            ok = (labels.get(key) == value) if op != "!=" else labels.get(key) != value
        elif _EXISTS_TERM.match(term):
            negate, key = _EXISTS_TERM.match(term).groups()
            ok = (key in labels) != bool(negate)
        else:
            raise InvalidValue("label selector %r: cannot read %r" % (selector, term))
        if not ok:
            return False
    return True


def _group_selector(group):
    if isinstance(group, dict) and set(group) == {"label_selector"}:
        return str(group["label_selector"] or "")
    if isinstance(group, str):
        return group
    raise InvalidValue("order: each group is {label_selector: ...}, got %r" % (group,))


def order_instances(instances, groups, selector_match=None):
    """Instances matching ``groups[0]`` first, then ``groups[1]``, ..., the rest last; by name within."""
    match = selector_match or match_selector
    selectors = [_group_selector(g) for g in groups or []]

    def rank(inst):
        labels = inst.get("labels") or {}
        return next((i for i, s in enumerate(selectors) if match(labels, s)), len(selectors))

    return sorted(instances, key=lambda inst: (rank(inst), inst.get("name") or ""))


def plan(instances, targets, max_unavailable, groups=None, replication=None):
    """Batches (lists of names, in order) of the instances not yet on their target, each at most
    ``max_unavailable`` long.

    ``targets`` maps a name to its target (``repave.target_of``); instances already current or without
    a target are left out. Pending instances that are down already (a repave in progress) lead the first
    batch; every other unavailable instance takes a place of the first batch, so the fleet never has
    more than ``max_unavailable`` down. An empty first batch means the budget is used up: nothing may
    start until an instance is Available again.

    ``replication`` maps a name to its replication group (``replication_group``): two members of one
    group never share a batch, and a member waits for a later batch while another member is down, so a
    primary and its standby are never repaved together, whatever ``max_unavailable`` is. Each instance
    takes the earliest batch that has room and no member of its group, so the order holds within a group.
    """
    if isinstance(max_unavailable, bool) or not isinstance(max_unavailable, int) or max_unavailable < 1:
        raise InvalidValue(
            "max_unavailable %r: expected a count >= 1 (see parse_max_unavailable)" % (max_unavailable,)
        )
    replication = replication or {}
    ordered = order_instances(instances, groups)
    # Already current (on its target's revision): nothing to plan.
    pending = [
        i for i in ordered if targets.get(i["name"]) and i.get("revision") != targets[i["name"]]["revision"]
    ]
    names = [i["name"] for i in pending if i.get("available") is False]
    names += [i["name"] for i in pending if i.get("available") is not False]
    planned = set(names)
    elsewhere = [i["name"] for i in instances if i.get("available") is False and i["name"] not in planned]
    if not names:
        return []

    def group(name):
        return replication.get(name, name)

    first = max(max_unavailable - len(elsewhere), 0)
    batches = [[]]
    members = [{group(n) for n in elsewhere}]
    for name in names:
        index = 0
        while True:
            if index == len(batches):
                batches.append([])
                members.append(set())
            room = first if index == 0 else max_unavailable
            if len(batches[index]) < room and group(name) not in members[index]:
                break
            index += 1
        batches[index].append(name)
        members[index].add(group(name))
    return batches


def admit(batch, down, in_flight, limit, replication=None):
    """``(start now, deferred)`` of a batch about to start, from what is down at this moment.

    Instances in flight (already repaving) and instances of the batch already down are kept, to be waited
    on (they use no more of the budget than they already do). A new trigger is admitted
    only while fewer than ``limit`` instances are down (those down count, whatever made them so) and no
    other member of its replication group (``replication``: name -> group) is down or admitted: a
    primary and its standby are never repaved together. The rest is deferred, in order.
    """
    replication = replication or {}
    down = set(down)
    in_flight = set(in_flight)

    def group(name):
        return replication.get(name, name)

    busy = {group(k) for k in down | (in_flight & set(batch))}
    room = limit - len(down | (in_flight & set(batch)))
    start, deferred = [], []
    for key in batch:
        if key in in_flight or key in down:
            start.append(key)
        elif room < 1 or group(key) in busy:
            deferred.append(key)
        else:
            start.append(key)
            busy.add(group(key))
            room -= 1
    return start, deferred


def estimate_batch_seconds(history_seconds, default):
    """How long a batch is expected to take: the longest repave seen so far, else ``default``."""
    observed = [float(s) for s in history_seconds or [] if s is not None and float(s) > 0]
    if observed:
        return max(observed)
    if default is None or float(default) <= 0:
        raise InvalidValue("default batch duration %r: expected seconds > 0" % (default,))
    return float(default)


def stall_verdict(quiet_seconds, timeout, step=None):
    """How a repave that timed out is described: ``stuck`` when it showed no progress (no change of
    state, phase, step or message) for at least half the timeout, or a minute, whichever is shorter;
    else ``still working``. Names the step it is on and how long it has been quiet."""
    quiet = max(float(quiet_seconds or 0), 0.0)
    limit = min(float(timeout) / 2, 60.0)
    where = " at step %s" % step if step else ""
    if quiet >= limit:
        return "stuck: no progress for %ds%s" % (round(quiet), where)
    return "still working%s: last progress %ds ago" % (where, round(quiet))


def resume_plan(found, started, finished):
    """A later round of the same roll-out: ``classify``'s answer corrected by what earlier rounds did.

    ``found`` is ``repave.classify``'s answer for what the cluster shows now; ``started`` the keys whose
    repave the roll-out started or waited on in an earlier round; ``finished`` the keys it saw end
    (repaved or failed). A finished key is not planned again (a failed repave is not retried by the same
    roll-out); a started key that is not finished and shows no repave any more is waited on (in flight:
    looked at, never triggered again). Returns ``(found, landed)``, ``landed`` the started keys found on
    their target that no round saw finish: their repave ended between two rounds.
    """
    finished = set(finished or ())
    started = set(started or ())
    entries = found.get("entries") or {}
    landed = sorted(k for k in started - finished if (entries.get(k) or {}).get("result") == "current")
    candidates = [k for k in found.get("candidates") or () if k not in finished]
    in_flight = [k for k in found.get("in_flight") or () if k not in finished]
    adopted = [k for k in candidates if k in started]
    resumed = dict(found)
    resumed["candidates"] = [k for k in candidates if k not in started]
    resumed["in_flight"] = in_flight + [k for k in adopted if k not in in_flight]
    return resumed, landed


def batch_started(since, keys):
    """When the wait for a batch began, its time-out counting from there: the earliest start among ``keys``
    (``since`` maps a key to when its repave began, across rounds), or None before any began."""
    starts = [float(since[k]) for k in keys if since.get(k) is not None]
    return min(starts) if starts else None


def fleet_line(done, total, busy, failed, waiting, elapsed, phase=None):
    """The one line a round of a roll-out prints: counts, what is repaving (``busy``: ``"key: phase
    (step)"`` texts), what failed and waits, and the seconds since the roll-out began."""
    percent = int(100 * done / total) if total else 100
    return "fleet: %d/%d repaved (%d%%), %d repaving%s, %d failed, %d not started%s; elapsed %ds" % (
        done,
        total,
        percent,
        len(busy),
        " (%s)" % "; ".join(busy) if busy else "",
        failed,
        waiting,
        "; %s" % phase if phase else "",
        round(elapsed),
    )


# ------------------------------------------------------------- an instance's own window, its group

# A DBInstance (or a direct-mode VM) may carry its own weekly maintenance window, which wins over the
# run's: "sat,sun 22:00-04:00 Europe/Berlin" (days and time zone optional: every day, UTC), or the
# mapping the window option takes, as JSON.
WINDOW_ANNOTATION = "goldenimage.pipeline/maintenance-window"
# A standby names its primary (same namespace) with this label; a primary and its standbys form one
# replication group, and at most one member of a group is ever down for a repave at a time.
STANDBY_OF_LABEL = "goldenimage.pipeline/standby-of"
WINDOW_FORMAT = (
    '"[days ]HH:MM-HH:MM[ timezone]", for example "sat,sun 22:00-04:00 Europe/Berlin", or the mapping '
    "the window option takes as JSON"
)
_WINDOW_TEXT = re.compile(r"^(?:(\S+)\s+)?(\d{1,2}:\d{2})\s*-\s*(\d{1,2}:\d{2})(?:\s+(\S+))?$")


def parse_window_text(text):
    """A ``Window`` from an instance's window annotation (see ``WINDOW_ANNOTATION``); None when empty."""
    text = str(text or "").strip()
    if not text:
        return None
    if text.startswith("{"):
        try:
            spec = json.loads(text)
        except ValueError as exc:
            raise InvalidValue("%r is not JSON: %s; expected %s" % (text, exc, WINDOW_FORMAT)) from exc
        return parse_window(spec)
    match = _WINDOW_TEXT.match(text)
    if not match:
        raise InvalidValue("%r: expected %s" % (text, WINDOW_FORMAT))
    days, start, end, timezone = match.groups()
    spec = {"start": start, "end": end}
    if days:
        spec["days"] = days.split(",")
    if timezone:
        spec["timezone"] = timezone
    return parse_window(spec)


def own_window(inst):
    """The window an instance carries itself (its annotation), or None. Raises ``InvalidValue`` naming
    the annotation when it cannot be read."""
    text = (inst.get("annotations") or {}).get(WINDOW_ANNOTATION)
    try:
        return parse_window_text(text)
    except PipelineError as exc:
        raise InvalidValue("annotation %s %s" % (WINDOW_ANNOTATION, exc.msg)) from exc


def replication_group(inst):
    """The replication group of an instance: ``(namespace, primary name)``; a primary is its own."""
    primary = str((inst.get("labels") or {}).get(STANDBY_OF_LABEL) or "").strip()
    return (inst.get("namespace") or "", primary or inst.get("name") or "")
