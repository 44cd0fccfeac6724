# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""A DataVolume read before a run writes it, as a filter (datavolume.failed_import), so the linux_golden
role refuses or replaces a Failed import without judging its status in Jinja."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import datavolume


def failed_import(resources, replace_option):
    """The refusal of a rerun over the Failed DataVolume in ``resources`` (as read), else ``""``."""
    if isinstance(resources, dict):
        resources = [resources]
    if not isinstance(resources, list) or len(resources) > 1:
        raise AnsibleFilterError("failed_import: give the resources of one DataVolume read by name")
    return datavolume.rerun_refusal(resources[0] if resources else None, replace_option)


class FilterModule(object):
    def filters(self):
        return {"failed_import": failed_import}
