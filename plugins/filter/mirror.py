# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The os_mirror role's values as filters (mirror.run_report, images_with_userinfo, shown_source), so the
role computes nothing."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket import mirror


def mirror_report(results):
    """Totals and one line per image from the results of a loop of goldenimage.pipeline.os_mirror_object."""
    return mirror.run_report(results)


def mirror_userinfo_images(images):
    """``family/version`` of each image in ``images`` whose URL carries user-info."""
    return mirror.images_with_userinfo(images)


def mirror_shown_source(image):
    """An image's source as a log line may show it: the URL without user-info or query, else the path."""
    return mirror.shown_source(image)


class FilterModule(object):
    def filters(self):
        return {
            "mirror_report": mirror_report,
            "mirror_userinfo_images": mirror_userinfo_images,
            "mirror_shown_source": mirror_shown_source,
        }
