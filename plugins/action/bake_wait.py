# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Run goldenimage.pipeline.bake_wait round after round, taking the console screenshots it asks for.

Between two rounds, when the last one returned ``screenshot`` (the options of a screenshot), this runs
goldenimage.pipeline.console_screenshot with them (and the task's Kubernetes auth options) and hands what
it saw, or why it failed, to the next round; the console rules are bake_wait's.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.plugin_utils._progress import PollingAction
from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC

SCREENSHOT = "goldenimage.pipeline.console_screenshot"
# What of a screenshot's result the console rules read.
SHOT_KEYS = ("class", "base_class", "confidence", "fingerprint", "since", "stuck", "unchanged_for", "msg")
# The Kubernetes auth options, exactly kubernetes.core's, handed on to the screenshot.
AUTH_KEYS = tuple(sorted(AUTH_ARG_SPEC))


class ActionModule(PollingAction):
    MODULE = "goldenimage.pipeline.bake_wait"

    def between(self, out, args, task_vars):
        request = out.get("screenshot")
        if not isinstance(request, dict):
            args.pop("screenshot", None)
            return
        shot_args = dict(request)
        shot_args.update((key, args[key]) for key in AUTH_KEYS if args.get(key) is not None)
        shot = self._execute_module(module_name=SCREENSHOT, module_args=shot_args, task_vars=task_vars)
        taken = {key: shot[key] for key in SHOT_KEYS if key in shot}
        if shot.get("failed"):
            taken = {"msg": shot.get("msg") or "no answer"}
        args["screenshot"] = taken
