# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Poll until a predicate holds, on a monotonic clock, and say exactly why when it does not.

Pure: the clock and the sleeper are parameters, so tests run without sleeping. A wait ends in
one of three ways: done, failed (the predicate says so: the object reached a terminal error),
or timed out. A time-out is reported as "stuck" when the observed state never changed, and as
"still working" when it did, always naming the pending condition and the last observed state.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.goldenimage.pipeline.plugins.module_utils.errors import PipelineError


class WaitError(PipelineError):
    """Base of wait outcomes other than success; carries the last object and its description.

    Its result fields are ``duration`` and ``last_state`` (and ``stuck`` for a timeout).
    """

    def __init__(self, message, last=None, state=None, elapsed=0.0):
        super(WaitError, self).__init__(message, duration=round(elapsed, 3), last_state=state)
        self.last = last
        self.state = state
        self.elapsed = elapsed


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


def _default_describe(obj):
    return "not found" if obj is None else repr(obj)


def wait_for(
    fetch,
    predicate,
    timeout,
    sleep,
    describe=None,
    progress=None,
    clock=time.monotonic,
    sleeper=time.sleep,
    pending="the condition",
    transient=None,
    first_sleep=None,
):
    """Poll ``fetch()`` until ``predicate(obj)`` returns ``(True, None)``; return ``(obj, duration)``.

    ``predicate(obj) -> (done, failed)``: ``failed`` is a reason string when the object can no
    longer succeed. ``fetch`` may return None (not there yet). ``progress(obj)`` is called after
    every poll (report phase or percent from it). ``describe(obj)`` renders the state named in
    failures. ``transient(exc) -> bool`` marks fetch errors to ride out (a 503 mid-wait);
    the last such error is part of the state. ``first_sleep`` starts polling faster and doubles
    up to ``sleep`` (a quick object is seen at once, a slow one is not hammered). The sleep never
    overshoots the deadline.
    """
    describe = describe or _default_describe
    start = clock()
    deadline = start + max(0, timeout)
    sleep = max(0.0, float(sleep))
    pause = sleep if first_sleep is None else min(sleep, max(0.0, float(first_sleep)))
    last_state = None
    last_change = start
    obj = None
    polls = 0
    while True:
        polls += 1
        state = None
        try:
            obj = fetch()
        except Exception as exc:
            if transient is None or not transient(exc):
                raise
            state = "%s (last poll failed: %s)" % (describe(obj), exc)
        else:
            done, failed = predicate(obj)
            if progress is not None:
                progress(obj)
            state = describe(obj)
            if failed:
                elapsed = clock() - start
                raise WaitFailed(
                    "failed while waiting for %s after %.1fs: %s; last observed: %s"
                    % (pending, elapsed, failed, state),
                    last=obj,
                    state=state,
                    elapsed=elapsed,
                    reason=failed,
                )
            if done:
                return obj, clock() - start
        now = clock()
        if state != last_state:
            if last_state is not None:
                last_change = now
            last_state = state
        if now >= deadline:
            elapsed = now - start
            since_change = now - last_change
            stuck = last_change == start
            if stuck:
                verdict = "stuck: the state did not change in %d polls" % polls
            else:
                verdict = "still working: the state last changed %.1fs ago" % since_change
            raise WaitTimeout(
                "timed out after %.1fs waiting for %s (%s); last observed: %s"
                % (elapsed, pending, verdict, state),
                last=obj,
                state=state,
                elapsed=elapsed,
                stuck=stuck,
                since_change=since_change,
            )
        sleeper(min(pause, deadline - now))
        pause = min(sleep, pause * 2) if pause > 0 else sleep
