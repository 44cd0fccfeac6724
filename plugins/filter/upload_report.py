# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The harvester_upload role's summary line as a filter (upload_report.upload_summary), so the role
computes nothing."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import upload_report


def upload_summary(result):
    """The one-line summary of ``harvester_upload_result``."""
    return upload_report.upload_summary(result)


class FilterModule(object):
    def filters(self):
        return {"upload_summary": upload_summary}
