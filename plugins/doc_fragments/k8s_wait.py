# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    DOCUMENTATION = r"""
options:
  wait:
    description:
      - Wait until the object reaches the state this module documents before returning.
      - Nothing is waited for in check mode.
    type: bool
    default: true
  wait_timeout:
    description:
      - How many seconds to wait in total.
      - On timeout the module fails with a message that names the condition still pending, the last
        observed state, and whether that state was still changing (working) or never moved (stuck).
    type: int
    default: 300
  wait_sleep:
    description:
      - Longest pause, in seconds, between two polls of the object. Polling starts after a quarter
        of a second and doubles up to this, so a quick object is seen at once.
    type: float
    default: 2
"""
