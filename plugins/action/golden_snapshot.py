# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Run goldenimage.pipeline.golden_snapshot round after round until the snapshot is readyToUse, printing
each round's line. The first round makes or stamps the snapshot; the later ones find it, write nothing and
continue the wait, so the result is the first round's (what was written, its diff) updated with the last's.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.plugin_utils._progress import PollingAction


class ActionModule(PollingAction):
    MODULE = "goldenimage.pipeline.golden_snapshot"
    KEEP_FIRST = True
