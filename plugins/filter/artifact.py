# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""An artifact's manifest as filters (artifact.manifest_name, artifact.pg_manifest), so the packer_build
role composes the manifest without regular expressions or loops in Jinja."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import artifact
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError


def _filter(name, rule):
    """``rule`` as the filter ``name``: a refusal fails the task naming the filter."""

    def apply(*args):
        try:
            return rule(*args)
        except PipelineError as exc:
            raise AnsibleFilterError("%s: %s" % (name, exc.msg)) from None

    apply.__name__ = name
    return apply


# manifest_name(artifact): <name>.manifest.json for <name>.qcow2.
# pg_manifest(requested, build): the manifest's pg_versions (refused when the build lacks a major).
FILTERS = {name: _filter(name, getattr(artifact, name)) for name in ("manifest_name", "pg_manifest")}


class FilterModule(object):
    def filters(self):
        return dict(FILTERS)
