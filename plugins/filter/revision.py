# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Baked image revision and artifact names for playbooks; the rules live in module_utils/revision.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.goldenimage.pipeline.plugins.module_utils import revision


def _wrap(function):
    def filter_function(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except ValueError as exc:
            raise AnsibleFilterError(str(exc)) from exc

    filter_function.__name__ = function.__name__
    return filter_function


def _parse(name, default_stream=revision.DEFAULT_STREAM):
    rev = revision.parse_revision(name, default_stream)
    return {
        "name": rev.name,
        "date": rev.date.isoformat(),
        "os_stream": rev.os_stream,
        "suffixed": rev.suffixed,
    }


class FilterModule(object):
    def filters(self):
        return {
            "revision_name": _wrap(revision.revision_name),
            "artifact_name": _wrap(revision.artifact_name),
            "parse_revision": _wrap(_parse),
        }
