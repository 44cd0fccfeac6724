# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Debian package version ordering, as dpkg orders them (deb-version(7)).

Pure. A version is ``[epoch:]upstream[-revision]``: the epoch is compared as a number (absent is 0),
then the upstream part, then the revision (absent is ``0``), each as alternating runs of non-digits and
digits. Non-digit runs compare character by character where ``~`` sorts before everything, even the end
of the run, letters sort before other characters; digit runs compare as numbers.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError


class VersionError(PipelineError):
    """A string dpkg would not accept as a version; the message says why."""


def parse(version):
    """``(epoch, upstream, revision)`` of a Debian version; refuses what dpkg would refuse."""
    text = str(version or "").strip()
    if not text:
        raise VersionError("an empty string is not a Debian version")
    epoch, colon, rest = text.partition(":")
    if not colon:
        epoch, rest = "", text
    if epoch and not epoch.isdigit():
        raise VersionError("%r is not a Debian version: the epoch %r is not a number" % (text, epoch))
    upstream, dash, revision = rest.rpartition("-")
    if not dash:
        upstream, revision = rest, ""
    elif not revision:
        raise VersionError("%r is not a Debian version: the revision after the last hyphen is empty" % text)
    if not upstream or not upstream[0].isdigit():
        raise VersionError("%r is not a Debian version: the upstream part must start with a digit" % text)
    allowed = re.compile(r"^[A-Za-z0-9.+~:-]*$" if revision else r"^[A-Za-z0-9.+~:]*$")
    if not allowed.match(upstream) or not re.match(r"^[A-Za-z0-9.+~]*$", revision):
        raise VersionError("%r is not a Debian version: it holds characters dpkg refuses" % text)
    return int(epoch or 0), upstream, revision


def _order(char):
    if char == "~":
        return -1
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _compare_part(a, b):
    i = j = 0
    while i < len(a) or j < len(b):
        # The non-digit run, character by character; the end of a run sorts after ~ and before all else.
        while (i < len(a) and not a[i].isdigit()) or (j < len(b) and not b[j].isdigit()):
            ca = _order(a[i]) if i < len(a) and not a[i].isdigit() else 0
            cb = _order(b[j]) if j < len(b) and not b[j].isdigit() else 0
            if ca != cb:
                return -1 if ca < cb else 1
            i += 1
            j += 1
        si = i
        while i < len(a) and a[i].isdigit():
            i += 1
        sj = j
        while j < len(b) and b[j].isdigit():
            j += 1
        na, nb = int(a[si:i] or 0), int(b[sj:j] or 0)
        if na != nb:
            return -1 if na < nb else 1
    return 0


def compare(a, b):
    """-1, 0 or 1 as Debian version ``a`` sorts before, equal to or after ``b``."""
    ea, ua, ra = parse(a)
    eb, ub, rb = parse(b)
    if ea != eb:
        return -1 if ea < eb else 1
    return _compare_part(ua, ub) or _compare_part(ra or "0", rb or "0")


def newer(a, b):
    """Whether ``a`` is a later version than ``b``."""
    return compare(a, b) > 0
