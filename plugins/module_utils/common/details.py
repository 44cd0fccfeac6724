# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""How much of a fleet-sized report goes back to Ansible: every row, or a summary of what needs attention.

Pure. A result of tens of thousands of rows costs seconds twice over: exit_json scrubs every string of it
for no_log values, and the controller templates it again when it is registered.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import InvalidValue

DETAILS = ("auto", "full", "summary")
# ``auto`` returns every row up to this many, the condensed report above it.
DETAIL_LIMIT = 1000


def detail_level(details, rows, limit=None):
    """``"full"`` or ``"summary"``: what ``details`` (one of ``DETAILS``) asks of a report of ``rows``."""
    limit = DETAIL_LIMIT if limit is None else limit
    if details not in DETAILS:
        raise InvalidValue("details must be one of %s, not %r" % (", ".join(DETAILS), details))
    if details == "auto":
        return "full" if rows <= limit else "summary"
    return details


def kept_rows(limit=None):
    """How many rows a summary keeps at most (never negative)."""
    return max(0, DETAIL_LIMIT if limit is None else limit)
