# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Bytes in a Kubernetes quantity, by the rule the clone gate uses (gate.parse_quantity)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.goldenimage.pipeline.plugins.module_utils import gate
from ansible_collections.goldenimage.pipeline.plugins.module_utils.errors import PipelineError


def quantity_bytes(value, option="value"):
    try:
        return gate.parse_quantity(value)
    except (gate.GateError, PipelineError) as exc:
        raise AnsibleFilterError("%s: %s" % (option, getattr(exc, "msg", None) or exc)) from exc


class FilterModule(object):
    def filters(self):
        return {"quantity_bytes": quantity_bytes}
