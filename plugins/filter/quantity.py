# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Role input rules as filters: bytes in a Kubernetes quantity (gate.parse_quantity), positive durations
(inputs.positive), so a role refuses bad input with the rule every module applies, before any write."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import inputs
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import gate


def quantity_bytes(value, option="value"):
    try:
        return gate.parse_quantity(value)
    except PipelineError as exc:
        raise AnsibleFilterError("%s: %s" % (option, getattr(exc, "msg", None) or exc)) from exc


def positive_seconds(value, option="value"):
    """``value`` when it is a positive number of seconds (a numeric string counts); else the task fails."""
    if isinstance(value, str):
        try:
            value = float(value) if "." in value else int(value)
        except ValueError:
            pass
    try:
        return inputs.positive(value, option)
    except PipelineError as exc:
        raise AnsibleFilterError(exc.msg) from exc


class FilterModule(object):
    def filters(self):
        return {"quantity_bytes": quantity_bytes, "positive_seconds": positive_seconds}
