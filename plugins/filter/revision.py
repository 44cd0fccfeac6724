# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Baked image revision and artifact names for playbooks; the rules live in module_utils/baked/revision.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import revision
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import inputs
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError


def _wrap(function):
    def filter_function(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except PipelineError as exc:
            raise AnsibleFilterError("%s: %s" % (function.__name__.strip("_"), exc.msg)) from None

    filter_function.__name__ = function.__name__
    return filter_function


def _stream(value, option):
    """An OS stream argument: a YAML float (24.10 read as 24.1) is refused with "quote it"."""
    return inputs.version_string(value, option)


def revision_name(date, os_stream, default_stream=revision.DEFAULT_STREAM, build=revision.FIRST_BUILD):
    return revision.revision_name(
        date, _stream(os_stream, "os_stream"), _stream(default_stream, "default_stream"), build
    )


def artifact_name(name, os_stream=None, default_stream=revision.DEFAULT_STREAM):
    return revision.artifact_name(
        name, _stream(os_stream, "os_stream"), _stream(default_stream, "default_stream")
    )


def image_name(name, os_stream=None, default_stream=revision.DEFAULT_STREAM):
    return revision.image_name(
        name, _stream(os_stream, "os_stream"), _stream(default_stream, "default_stream")
    )


def image_os(os_release, declared_stream, source="the image"):
    return revision.image_os(os_release, _stream(declared_stream, "declared_stream"), source)


def image_artifact_name(name, os):
    return revision.image_artifact_name(name, os)


def parse_revision(name, default_stream=revision.DEFAULT_STREAM):
    rev = revision.parse_revision(name, _stream(default_stream, "default_stream"))
    return {
        "name": rev.name,
        "date": rev.date.isoformat(),
        "os_stream": rev.os_stream,
        "suffixed": rev.suffixed,
        "build": rev.build,
    }


class FilterModule(object):
    def filters(self):
        return {
            "revision_name": _wrap(revision_name),
            "artifact_name": _wrap(artifact_name),
            "image_name": _wrap(image_name),
            "parse_revision": _wrap(parse_revision),
            "image_os": _wrap(image_os),
            "image_artifact_name": _wrap(image_artifact_name),
        }
