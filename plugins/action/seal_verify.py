# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Run goldenimage.pipeline.seal_verify; for a claim, as an async job whose progress lines (the verifier
Job's counts and the time waited) are printed as they come, so a verifier that waits for its image or a
node is not silent for the length of wait_timeout. A file is read in the controller's process in one call.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.plugin_utils._progress import PollingAction


class ActionModule(PollingAction):
    MODULE = "goldenimage.pipeline.seal_verify"
    ROUNDS = False

    def in_background(self, args):
        return bool(args.get("pvc"))
