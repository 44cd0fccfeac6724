# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The one retry layer: every adapter that sends a request again after a failure does it through here.

A ``Policy`` per backend (``kubernetes()``, ``registry()``, ``conflicts()``; S3's retries are
botocore's own configuration, see ``_s3``) holds the bound and the pauses; ``Policy.run`` is the only
loop over attempts in the collection (the layering test checks that no other adapter loops or sleeps
for a retry). What is transient and how long to pause are rules of ``retries``. What an error means
for one request is the adapter's ``decide(exc, attempts)``, which answers with one of:

* ``None``: not for this layer, raise it as it is;
* ``(DONE, value)``: the request is over after all (a read-back found the object, a 404 on a retried
  delete) and ``value`` is its result;
* ``(AGAIN, why, hinted)``: send it again after a pause (``hinted``: the server's Retry-After seconds);
* ``(REFRESH,)``: the credentials were renewed, send it again at once (bounded by the policy);
* ``(FAIL,)``: give up now.

``give_up(exc, attempts)`` raises the adapter's error (naming the attempts with ``attempts.note()``)
when the answer is FAIL or the bound is reached. A call may raise ``Again(why)`` itself to ask for
another attempt (a read-modify-write that lost a race). The clock, the sleeper and the random source
are parameters, so tests run without sleeping.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import random
import time

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import retries

DONE, AGAIN, REFRESH, FAIL = "done", "again", "refresh", "fail"


class Again(Exception):
    """A control-flow signal, not an error: the call asks for another attempt (``why`` says why)."""

    def __init__(self, why):
        super(Again, self).__init__(why)
        self.why = why


class Policy(object):
    """The bound and the pauses of one request's attempts: full jitter, in count and in time."""

    def __init__(
        self,
        attempts,
        seconds,
        base,
        cap,
        refreshes=0,
        clock=time.monotonic,
        sleeper=time.sleep,
        rand=random.random,
    ):
        self.attempts = attempts
        self.seconds = seconds
        self.base = base
        self.cap = cap
        self.refreshes = refreshes
        self.clock = clock
        self.sleeper = sleeper
        self.rand = rand

    def start(self):
        return Attempts(self)

    def run(self, call, decide, give_up, attempts=None):
        """``call()`` until it returns, or until ``decide`` (see the module's docstring) ends it."""
        attempts = attempts or self.start()
        while True:
            try:
                return call()
            except Exception as exc:
                if isinstance(exc, Again):
                    verdict = (AGAIN, exc.why, None)
                else:
                    verdict = decide(exc, attempts)
                    if verdict is None:
                        raise
                move = verdict[0]
                if move == DONE:
                    return verdict[1]
                if move == REFRESH and attempts.refresh():
                    continue
                if move == AGAIN and attempts.retry(verdict[1], verdict[2]):
                    continue
                give_up(exc, attempts)
                raise  # give_up raises; this is only reached when it does not


class Attempts(object):
    """The attempts of one request: how many were made, why each retry happened."""

    def __init__(self, policy):
        self.policy = policy
        self.started = policy.clock()
        self.tried = 1
        self.refreshed = 0
        self.retries = []

    def retry(self, why, hinted=None):
        """Sleep before the next attempt and return True, or return False when the bound is reached."""
        p = self.policy
        elapsed = p.clock() - self.started
        if retries.exhausted(self.tried, elapsed, p.attempts, p.seconds):
            return False
        seconds = retries.pause(self.tried, p.rand(), p.base, p.cap, hinted, p.seconds - elapsed)
        self.retries.append(why)
        self.tried += 1
        p.sleeper(seconds)
        return True

    def refresh(self):
        """Count one credential renewal and return True, or False when the policy allows no more.

        A renewal is not a retry of a failure: it does not pause and ``note()`` does not name it."""
        if self.refreshed >= self.policy.refreshes:
            return False
        self.refreshed += 1
        self.tried += 1
        return True

    def note(self):
        """``" (after N attempts; retried on: reasons)"`` for a failure message, empty without retries."""
        if not self.retries:
            return ""
        return " (after %d attempts; retried on: %s)" % (self.tried, ", ".join(self.retries))


def kubernetes(**changes):
    """The policy of one Kubernetes API request (``retries.KUBERNETES``), with ``changes`` for tests."""
    return Policy(**dict(retries.KUBERNETES, **changes))


def registry(**changes):
    """The policy of one OCI registry request (``retries.REGISTRY``)."""
    return Policy(**dict(retries.REGISTRY, **changes))


def conflicts(**changes):
    """The policy of a read-modify-write that lost a race to another writer (``retries.CONFLICTS``)."""
    return Policy(**dict(retries.CONFLICTS, **changes))
