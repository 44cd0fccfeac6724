# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Runs the bucket_object_url module and marks a result that holds a presigned URL as no_log.

A module cannot hide its own result; an action plugin can. A presigned URL is a bearer credential
until it expires, so its result is censored in every output (the task line, -vvv, callbacks) even
when the task does not say ``no_log: true``. The registered variable keeps the URL for the task that
uses it, and ``url_redacted`` for display. A failure carries no URL and stays visible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        result.update(
            self._execute_module(
                module_name="goldenimage.pipeline.bucket_object_url",
                module_args=self._task.args,
                task_vars=task_vars,
            )
        )
        if result.get("url"):
            result["_ansible_no_log"] = True
        return result
