# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""What is worth another attempt, and how long to pause before it: the rules of the one retry layer.

Pure: no I/O, no clock, no random source. ``_retry`` runs the loop; the adapters say how they read an
error (its HTTP status, its Retry-After header, a dropped connection) and what a write may repeat.

* Transient, for every backend: throttling (429), the 5xx answers a server or its proxy gives while
  it is busy or restarting (500, 502, 503, 504), and a connection dropped before an answer. Any other
  4xx is an answer, never retried as such: 409 is read by the write's own rule (read back, re-apply,
  or raise), 404 by the caller (absent, or a delete already done), 401 by the registry's one
  credential refresh.
* The pause is full jitter: a uniform draw in ``[0, min(cap, base * 2**(n-1))]`` before attempt
  ``n + 1``. A server's Retry-After is honoured up to the cap (never longer: a bound is a bound), and
  no pause runs past the policy's time bound.
* Each backend has one policy: its attempts, its seconds, its pauses, and how many times a refused
  credential may be renewed. S3's is botocore's own retry configuration (see ``_s3``), not one of these.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Statuses that mean "busy, try again", for every HTTP backend of the collection.
TRANSIENT_STATUS = (429, 500, 502, 503, 504)
# Registry requests a transient failure may repeat: reads. A push is not repeated as such (a chunk sent
# twice would be appended twice); the module is run again and skips what the registry already has.
REPEATABLE_REGISTRY_METHODS = ("GET", "HEAD")

# One request to the Kubernetes API: 8 attempts and no new one after 60 s, pauses from 0.2 s up to 5 s.
KUBERNETES = {"attempts": 8, "seconds": 60.0, "base": 0.2, "cap": 5.0, "refreshes": 0}
# One request to an OCI registry: its reads ride out 5 attempts; a 401 renews the token (or sends the
# basic credentials) once, without a pause.
REGISTRY = {"attempts": 5, "seconds": 60.0, "base": 0.2, "cap": 5.0, "refreshes": 1}
# A read-modify-write that lost a race (409 on the resourceVersion it read): read again and re-apply,
# 20 times, with short pauses (the other writer is done in milliseconds).
CONFLICTS = {"attempts": 20, "seconds": 60.0, "base": 0.05, "cap": 0.5, "refreshes": 0}


def transient_status(code):
    """Whether an HTTP status is worth another attempt of the same request."""
    return code in TRANSIENT_STATUS


def registry_repeats(method, code):
    """Whether a registry request that failed with ``code`` (None: no answer) is sent again."""
    if method.upper() not in REPEATABLE_REGISTRY_METHODS:
        return False
    return code is None or transient_status(code)


def refreshes(code, refreshed, allowed):
    """Whether a refused request renews its credentials and goes again: a 401, ``allowed`` times."""
    return code == 401 and refreshed < allowed


def retry_after(value):
    """Seconds from a Retry-After header value (delay-seconds), or None when absent or not a number."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    return seconds if seconds >= 0 else None


def exhausted(tried, elapsed, attempts, seconds):
    """Whether the bound is reached: ``tried`` attempts made, ``elapsed`` seconds since the first."""
    return tried >= attempts or elapsed >= seconds


def pause(tried, draw, base, cap, hinted=None, left=None):
    """Seconds before attempt ``tried + 1``: full jitter (``draw`` in [0, 1)) over ``base * 2**(tried-1)``
    capped at ``cap``; at least the server's ``hinted`` Retry-After (itself capped); never more than the
    ``left`` seconds of the bound."""
    seconds = draw * min(cap, base * (2 ** (tried - 1)))
    if hinted is not None:
        seconds = max(seconds, min(hinted, cap))
    if left is not None:
        seconds = min(seconds, left)
    return max(0.0, seconds)
