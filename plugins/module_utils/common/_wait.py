# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Every long wait of the collection: one loop that polls, judges, reports and sleeps, on a clock.

A wait is its hooks (``Wait``: observe, state, verdict, report and the two errors) run by ``RoundRunner``
over a ``rounds.Rounds`` (when the wait began, its deadline, the end of this round, the state reported
last). A wait ends in one of three ways: done, failed (the verdict says so: the object reached a terminal
error), or timed out. A time-out is reported as "stuck" when the observed state never changed, and as
"still working" when it did, always naming the pending condition and the last observed state.

This is the one place that sleeps between polls: a module hands its hooks to the runner and never sleeps
itself (the layering test checks it). The clock and the sleeper are parameters, so tests run without
sleeping. ``wait_for`` is the runner for a wait that does not report between rounds (one round, the whole
wait); ``nap`` is a pause that is not a poll (the time between two batches, two screenshots).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.rounds import Rounds


class WaitError(PipelineError):
    """Base of wait outcomes other than success; carries the last object and its description.

    Its result fields are ``duration`` and ``last_state`` (and ``stuck`` for a timeout).
    """

    def __init__(self, message, last=None, state=None, elapsed=0.0):
        super(WaitError, self).__init__(message, duration=round(elapsed, 3), last_state=state)
        self.last = last
        self.state = state
        self.elapsed = elapsed

    def reworded(self, message):
        """This outcome in the words of the wait that owns it (its own time-out message); returns itself."""
        self.msg = message
        self.args = (message,)
        return self


class WaitTimeout(WaitError):
    """The condition did not hold in time. ``stuck`` is True when the state never changed."""

    def __init__(self, message, last=None, state=None, elapsed=0.0, stuck=False, since_change=0.0):
        super(WaitTimeout, self).__init__(message, last, state, elapsed)
        self.fields["stuck"] = stuck
        self.stuck = stuck
        self.since_change = since_change


class WaitFailed(WaitError):
    """The object reached a state from which it will not become ready."""

    def __init__(self, message, last=None, state=None, elapsed=0.0, reason=None):
        super(WaitFailed, self).__init__(message, last, state, elapsed)
        self.reason = reason


class Wait(object):
    """The hooks of one wait: what a wait module writes, and all it writes, of its loop.

    ``RoundRunner.run`` calls them in this order on every poll: ``observe()`` reads what is waited for
    (an error the runner's ``transient`` accepts is ridden out: the poll counts, nothing is judged);
    ``state(seen)`` is the text compared from poll to poll (news, and stuck against still working);
    ``verdict(seen, now)`` is ``(done, failure)``, ``failure`` the reason it can no longer succeed, which
    ``failed(seen, failure, now)`` turns into the error raised. ``report(seen, now, done, going_on)`` is
    the round's result (``going_on``: the wait continues in another round, so the result says how to
    resume it); ``timed_out(seen, now, stuck, words)`` is the error of the whole wait running out, ``words``
    the verdict (stuck or still working, and the failure of the last read if it failed).

    ``observe``, ``report`` and ``timed_out`` are the wait's own; the others default to a state that is the
    object's repr, a verdict that never ends the wait, and a failure that is a ``PipelineError``.
    """

    def state(self, seen):
        return repr(seen)

    def verdict(self, seen, now):
        return False, None

    def failed(self, seen, failure, now):
        return PipelineError(failure)


class RoundRunner(object):
    """Run one round of a wait: poll, judge, and return at the first news, at the round's end or when
    done; raise when it failed or the whole wait ran out; sleep in between, never past the round's end.

    ``rounds`` is the wait's ``Rounds``; ``sleep`` the seconds between polls, ``first_sleep`` a shorter
    first pause that doubles up to ``sleep`` (a quick object is seen at once, a slow one is not
    hammered). ``quiet_first``: the first state of the whole wait is not news (it is reported when the
    round ends). ``news_ends``: news ends the round (False for a wait that reports nothing between
    rounds). ``stop``: return after the first judged poll (check mode, ``wait: false``).
    """

    def __init__(
        self,
        rounds,
        sleep,
        clock=None,
        sleeper=None,
        transient=None,
        first_sleep=None,
        quiet_first=False,
        news_ends=True,
        stop=False,
    ):
        self.rounds = rounds
        self.sleep = max(0.0, float(sleep))
        self.clock = clock or time.time
        self.sleeper = sleeper or time.sleep
        self.transient = transient or (lambda exc: False)
        self.first_sleep = first_sleep
        self.quiet_first = quiet_first
        self.news_ends = news_ends
        self.stop = stop
        self.polls = 0
        self.error = None  # the transient error of the last read, None after a good one

    def run(self, wait, seen=None):
        """The round's result (``wait.report``); ``seen`` stands for the object until a read succeeds."""
        rounds = self.rounds
        pause = self.sleep if self.first_sleep is None else min(self.sleep, max(0.0, float(self.first_sleep)))
        while True:
            self.polls += 1
            try:
                seen = wait.observe()
            except Exception as exc:
                if not self.transient(exc):
                    raise
                self.error = exc
                now = self.clock()
            else:
                self.error = None
                now = self.clock()
                quiet = self.quiet_first and rounds.last_state is None
                news = rounds.see(wait.state(seen), now) and not quiet and self.news_ends
                done, failure = wait.verdict(seen, now)
                if failure:
                    raise wait.failed(seen, failure, now)
                if done or self.stop:
                    return wait.report(seen, now, done, False)
                if news and not rounds.expired(now):
                    return wait.report(seen, now, False, True)
            if rounds.expired(now):
                stuck, words = rounds.verdict(now)
                if self.error is not None:
                    words = "%s; the last read failed: %s" % (words, self.error)
                raise wait.timed_out(seen, now, stuck, words)
            if rounds.over(now):
                return wait.report(seen, now, False, True)
            self.nap(rounds.pause(pause, now))
            pause = min(self.sleep, pause * 2) if pause > 0 else self.sleep

    def nap(self, seconds):
        """Sleep ``seconds`` (none when not positive): a pause that is not a poll goes through here too."""
        if seconds > 0:
            self.sleeper(seconds)


def nap(seconds, sleeper=None):
    """Sleep ``seconds`` outside a poll (between two batches of a roll-out); none when not positive."""
    RoundRunner(None, 0, sleeper=sleeper).nap(seconds)


def _default_describe(obj):
    return "not found" if obj is None else repr(obj)


class _Predicate(Wait):
    """``wait_for``'s hooks: a fetch, a predicate, a description; ``WaitFailed`` and ``WaitTimeout``."""

    def __init__(self, runner, fetch, predicate, describe, progress, pending, share=False):
        self.runner, self.fetch, self.predicate = runner, fetch, predicate
        self.describe, self.progress, self.pending = describe, progress, pending
        self.share = share

    def observe(self):
        return self.fetch()

    def state(self, seen):
        return self.describe(seen)

    def verdict(self, seen, now):
        done, failed = self.predicate(seen)
        if self.progress is not None:
            self.progress(seen)
        return done, failed

    def report(self, seen, now, done, going_on):
        return seen, None if going_on else now - self.runner.rounds.started

    def failed(self, seen, failure, now):
        elapsed = now - self.runner.rounds.started
        state = self.describe(seen)
        return WaitFailed(
            "failed while waiting for %s after %.1fs: %s; last observed: %s"
            % (self.pending, elapsed, failure, state),
            last=seen,
            state=state,
            elapsed=elapsed,
            reason=failure,
        )

    def timed_out(self, seen, now, stuck, words):
        rounds, error = self.runner.rounds, self.runner.error
        elapsed = rounds.elapsed(now)
        since_change = now - (rounds.started if rounds.changed_at is None else rounds.changed_at)
        state = self.describe(seen)
        if error is not None:
            state = "%s (last poll failed: %s)" % (state, error)
        if self.share:  # a share of a longer wait: the time-out of the whole wait, in its words
            message = rounds.timeout_message(self.pending, state, now)
        else:
            if stuck:
                verdict = "stuck: the state did not change in %d polls" % self.runner.polls
            else:
                verdict = "still working: the state last changed %.1fs ago" % since_change
            message = "timed out after %.1fs waiting for %s (%s); last observed: %s" % (
                elapsed,
                self.pending,
                verdict,
                state,
            )
        return WaitTimeout(
            message,
            last=seen,
            state=state,
            elapsed=elapsed,
            stuck=stuck,
            since_change=since_change,
        )


def wait_for(
    fetch,
    predicate,
    timeout,
    sleep,
    describe=None,
    progress=None,
    clock=None,
    sleeper=time.sleep,
    pending="the condition",
    transient=None,
    first_sleep=None,
    rounds=None,
):
    """Poll ``fetch()`` until ``predicate(obj)`` returns ``(True, None)``; return ``(obj, duration)``.

    ``predicate(obj) -> (done, failed)``: ``failed`` is a reason string when the object can no
    longer succeed. ``fetch`` may return None (not there yet). ``progress(obj)`` is called after
    every poll (report phase or percent from it). ``describe(obj)`` renders the state named in
    failures. ``transient(exc) -> bool`` marks fetch errors to ride out (a 503 mid-wait);
    the last such error is part of the state. ``first_sleep`` starts polling faster and doubles
    up to ``sleep`` (a quick object is seen at once, a slow one is not hammered). The sleep never
    overshoots the deadline.

    ``rounds`` makes it one round's share of a longer wait (``Rounds`` on ``clock``, by default the wall
    clock, as the rounds span calls; ``timeout`` is then theirs): the round's end returns ``(obj, None)``
    (report and resume), the deadline of the whole wait times out in ``Rounds.timeout_message``'s words.
    """
    share = rounds is not None
    clock = clock or (time.time if share else time.monotonic)
    rounds = rounds or Rounds.span(clock(), timeout)
    runner = RoundRunner(rounds, sleep, clock, sleeper, transient, first_sleep, news_ends=False)
    describe = describe or _default_describe
    return runner.run(_Predicate(runner, fetch, predicate, describe, progress, pending, share))
