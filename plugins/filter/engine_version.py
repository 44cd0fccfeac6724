# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The engine-version rule for playbooks; documented in engine_version.yml beside this file."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import catalog
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError


def engine_version(doc, requested=None, today=None):
    """The PostgreSQL major a new database gets from ``doc`` (a catalog dict or its YAML text).

    The error is stated once: the cause is not chained (Ansible would print it again after it).
    """
    try:
        if isinstance(doc, str):
            doc = catalog.load(doc)
        return catalog.resolve_engine_version(doc, requested, today=today)
    except PipelineError as exc:
        raise AnsibleFilterError("engine_version: %s" % exc.msg) from None


class FilterModule(object):
    def filters(self):
        return {"engine_version": engine_version}
