# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # ansible-test reads each fragment as one string literal, so the resume options are written twice.

    # Modules that wait in rounds: the action plugin of the same name calls them again and prints a line.
    DOCUMENTATION = r"""
options:
  wait:
    description:
      - Wait for the outcome. V(false) reads once and reports; nothing is waited for in check mode either.
    type: bool
    default: true
  wait_timeout:
    description:
      - How many seconds to wait in total, counted from O(started). Zero or negative is refused before
        anything is read or written.
      - On time-out the task fails naming the last observed state and whether it was C(stuck) (nothing
        changed since the wait began) or C(still working).
    type: int
    default: 1800
  wait_sleep:
    description: Seconds between two reads of the object waited for.
    type: float
    default: 5
  report_every:
    description:
      - Longest time, in seconds, one call of the module waits before it returns a progress C(line); a wait
        module returns sooner when the observed state changes. The action plugin calls it again with
        C(resume) and prints each line, so a wait prints a line at least this often.
    type: int
    default: 20
  started:
    description:
      - When the wait began, in seconds since the epoch. Set by the action plugin from C(resume); leave it out
        to start now.
    type: float
  last_state:
    description: The state the previous round reported (from C(resume)); set by the action plugin.
    type: str
  changed_at:
    description:
      - When the observed state last changed, in seconds since the epoch (from C(resume)); set by the action
        plugin.
    type: float
attributes:
  action:
    description: An action plugin of the same name runs on the controller around the module.
    support: full
    details: The action plugin calls the module round after round and prints each round's line as it comes.
"""

    # The resume options and the action plugin alone, for a module whose own wait options are another
    # fragment's (goldenimage.pipeline.k8s_wait): golden_snapshot.
    RESUME = r"""
options:
  report_every:
    description:
      - Longest time, in seconds, one call of the module waits before it returns a progress C(line); a wait
        module returns sooner when the observed state changes. The action plugin calls it again with
        C(resume) and prints each line, so a wait prints a line at least this often.
    type: int
    default: 20
  started:
    description:
      - When the wait began, in seconds since the epoch. Set by the action plugin from C(resume); leave it out
        to start now.
    type: float
  last_state:
    description: The state the previous round reported (from C(resume)); set by the action plugin.
    type: str
  changed_at:
    description:
      - When the observed state last changed, in seconds since the epoch (from C(resume)); set by the action
        plugin.
    type: float
attributes:
  action:
    description: An action plugin of the same name runs on the controller around the module.
    support: full
    details: The action plugin calls the module round after round and prints each round's line as it comes.
"""

    # A module that does its work in one call, run by its action plugin as an async job that reports.
    BACKGROUND = r"""
options:
  progress_file:
    description:
      - A file the module appends its progress lines to while it runs (phase, percent or bytes, seconds since
        the task began; every 10 percent and at least every 30 s). Set by the action plugin, which runs the
        module as an async job and prints the lines as they come; leave it out.
    type: path
attributes:
  action:
    description: An action plugin of the same name runs on the controller around the module.
    support: full
    details: It runs the module as an async job and prints its progress lines as they come.
"""
