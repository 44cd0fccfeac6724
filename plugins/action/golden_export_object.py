# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Run goldenimage.pipeline.golden_export_object as an async job whose progress lines (hash, copy and
upload, every 10 percent and at least every 30 s) are printed as they come: a multi-GiB transfer is one
module call, and ansible-core shows a module's output only when it returns.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.plugin_utils._progress import BackgroundAction


class ActionModule(BackgroundAction):
    MODULE = "goldenimage.pipeline.golden_export_object"
