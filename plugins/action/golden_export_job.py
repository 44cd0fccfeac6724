# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Run goldenimage.pipeline.golden_export_job round after round, printing the export's progress."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.plugin_utils._progress import PollingAction


class ActionModule(PollingAction):
    MODULE = "goldenimage.pipeline.golden_export_job"
