# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The report of a mirror run (mirror.run_report) as a filter, so the os_mirror role computes nothing."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.module_utils import mirror


def mirror_report(results):
    """Totals and one line per image from the results of a loop of goldenimage.pipeline.os_mirror_object."""
    return mirror.run_report(results)


class FilterModule(object):
    def filters(self):
        return {"mirror_report": mirror_report}
