# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""One long wait cut into short rounds, so the role can print a line after each.

Pure: the clock is a parameter. A wait starts at ``started`` and ends at ``started + timeout``. A round
(one module call) ends at the first news (the observed state differs from the one reported last), at
``report_every`` seconds, or at the deadline, whichever comes first. ``resume()`` is what the next
round needs to continue the same wait: the start, the state reported last and when the state last
changed, so a time-out can tell "stuck" (nothing moved since the wait began) from "still working".
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.inputs import (
    positive,
    positive_all,
    wait_arg_spec,
)

# A round returns after this many seconds at most, so a line is printed at least this often.
REPORT_EVERY = 20

# What the action plugin threads from one round of a wait to the next (documented by wait_rounds).
RESUME_ARG_SPEC = dict(
    report_every={"type": "int", "default": REPORT_EVERY},
    started={"type": "float"},
    last_state={"type": "str"},
    changed_at={"type": "float"},
)


def round_arg_spec(timeout=1800, sleep=5, **aliases):
    """The options of a module that waits in rounds (documented by the wait_rounds doc fragment): the
    shared wait options (``inputs.wait_arg_spec``, here with the rounds' defaults) and ``RESUME_ARG_SPEC``."""
    return dict(wait_arg_spec(timeout, sleep, **aliases), **RESUME_ARG_SPEC)


ROUND_ARG_SPEC = round_arg_spec()


class Reporter(object):
    """Which observations of a wait that cannot return between rounds become a progress line: a new
    state, or the same one again after ``every`` seconds."""

    def __init__(self, every=REPORT_EVERY):
        self.every = every
        self.state = None
        self.at = None

    def due(self, state, now):
        if self.at is not None and state == self.state and now - self.at < self.every:
            return False
        self.state, self.at = state, now
        return True


TRANSFER_REPORT_PERCENT = 10  # a progress line per this many percent of a transfer of known size
TRANSFER_REPORT_SECONDS = 30.0  # and at least this often


class TransferProgress(object):
    """Which moments of a transfer (an upload, a hash, a copy) become a line: every
    ``TRANSFER_REPORT_PERCENT`` of a known size, at least every 30 s, and the end. A new phase (hash, then
    upload) reports its own start and counts again.

    ``seen(done, total, elapsed, phase)`` returns the line to print, or None; ``record()`` is what a
    result says of the last phase.
    """

    def __init__(self, name, total=None):
        self.name, self.total = name, total
        self.phase = None
        self.done, self.elapsed = 0, 0.0
        self.reported = []  # [percent, seconds] at each report of the last phase
        self._last_percent, self._last_time = None, 0.0

    def percent(self):
        if self.total is None:
            return None
        return 100 if not self.total else int(self.done * 100 // self.total)

    def seen(self, done, total, elapsed, phase="upload"):
        if phase != self.phase:
            self.phase, self.reported, self._last_percent = phase, [], None
        self.done, self.total, self.elapsed = done, total, elapsed
        percent = self.percent()
        due = (
            self._last_percent is None
            or elapsed - self._last_time >= TRANSFER_REPORT_SECONDS
            or (percent is not None and percent >= self._last_percent + TRANSFER_REPORT_PERCENT)
            or (total is not None and done >= total)
        )
        if not due:
            return None
        self._last_percent, self._last_time = (percent or 0), elapsed
        self.reported.append([percent, round(elapsed, 1)])
        if percent is None:
            return "%s %s: %d bytes after %.1fs" % (phase, self.name, done, elapsed)
        return "%s %s: %d%% (%d of %d bytes) after %.1fs" % (phase, self.name, percent, done, total, elapsed)

    def record(self):
        return {
            "src": self.name,
            "bytes_sent": self.done,
            "size": self.total,
            "percent": self.percent(),
            "seconds": round(self.elapsed, 3),
            "reported": list(self.reported),
        }


class RoundOver(Exception):
    """Control flow inside one runner, never out of it: this round's share of the wait has passed while
    the whole wait has not, so the runner reports ``last`` (the object seen last, if any) and returns."""

    def __init__(self, last=None):
        super(RoundOver, self).__init__("round over")
        self.last = last


def from_params(params, now, durations=()):
    """The ``Rounds`` of a module's parameters; every duration is checked before anything is read."""
    positive_all(params, ("wait_timeout", "wait_sleep", "report_every") + tuple(durations))
    return Rounds(
        now,
        params["wait_timeout"],
        params["started"],
        params["report_every"],
        params["last_state"],
        params["changed_at"],
    )


class Rounds(object):
    def __init__(
        self, now, timeout, started=None, report_every=REPORT_EVERY, last_state=None, changed_at=None
    ):
        positive(timeout, "wait_timeout")
        positive(report_every, "report_every")
        self.started = float(now if started is None else started)
        self.timeout = timeout
        self.deadline = self.started + timeout
        self.round_end = min(self.deadline, float(now) + report_every)
        self.last_state = last_state
        self.changed_at = changed_at

    @classmethod
    def span(cls, started, timeout, round_end=None):
        """A wait that began at ``started`` and ends ``timeout`` seconds later (a budget already spent, 0
        or less, still polls once), its round ending at ``round_end`` (None: at the deadline)."""
        rounds = cls(started, 1, report_every=1)
        rounds.timeout = max(0, timeout)
        rounds.deadline = rounds.started + rounds.timeout
        rounds.round_end = rounds.deadline if round_end is None else min(rounds.deadline, float(round_end))
        return rounds

    def see(self, state, now):
        """Record an observed state; True when it is news (the first one, or one that differs)."""
        if state == self.last_state:
            return False
        if self.last_state is not None:
            self.changed_at = float(now)
        self.last_state = state
        return True

    def expired(self, now):
        return now >= self.deadline

    def over(self, now):
        """The round is over: report what was seen, and let the caller call again."""
        return now >= self.round_end

    def elapsed(self, now):
        return max(0.0, float(now) - self.started)

    def pause(self, sleep, now):
        """How long to sleep before the next poll: never past the round's end."""
        return max(0.0, min(float(sleep), self.round_end - float(now)))

    def verdict(self, now):
        """``(stuck, words)`` for a time-out."""
        if self.changed_at is None:
            return True, "stuck: the state did not change in %ds" % int(self.elapsed(now))
        return False, "still working: the state last changed %.1fs ago" % (float(now) - self.changed_at)

    def timeout_message(self, pending, state, now):
        """The time-out of the whole wait (every round of it), naming what was still pending."""
        return "timed out after %.1fs waiting for %s (%s); last observed: %s" % (
            self.elapsed(now),
            pending,
            self.verdict(now)[1],
            state,
        )

    def resume(self):
        return {"started": self.started, "last_state": self.last_state, "changed_at": self.changed_at}


def object_arg_spec(timeout=1800, sleep=5, **options):
    """The options of a module that waits in rounds for one namespaced object: ``round_arg_spec`` with
    the module's wait defaults, the object's ``name`` and ``namespace``, and the module's ``options``."""
    spec = dict(
        round_arg_spec(timeout, sleep),
        name={"type": "str", "required": True},
        namespace={"type": "str", "required": True},
    )
    spec.update(options)
    return spec
