# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Run goldenimage.pipeline.golden_selection, then its project verification round after round, printing
each round's line.

The first round writes (or refuses) and starts the verification; the later ones only check the projects,
so the result is the first round's (what was written, the diff) with the last round's verification.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.plugin_utils._progress import PollingAction


class ActionModule(PollingAction):
    MODULE = "goldenimage.pipeline.golden_selection"
    KEEP_FIRST = True
