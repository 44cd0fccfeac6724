# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Run goldenimage.pipeline.clone_gate round after round, printing each round's progress line."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.plugin_utils._progress import PollingAction


class ActionModule(PollingAction):
    MODULE = "goldenimage.pipeline.clone_gate"
