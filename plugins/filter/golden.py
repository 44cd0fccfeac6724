# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Filters for producer playbooks: the golden's versioned name and the pinned CDI source.

Documentation lives next to this file, one YAML file per filter (golden_name.yml, ...). The rules
are the collection's own (module_utils/golden/golden.py and linux_golden.py); these filters only expose them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import gate, golden, linux_golden


def _raising(func, *args):
    try:
        return func(*args)
    except PipelineError as exc:  # a GoldenError, or a Refusal (a URL with credentials)
        raise AnsibleFilterError(exc.msg) from None


def golden_name(family, date=None, digest=None):
    """``golden-<family>-<YYYYMMDD>-<12 hex>``; an empty date means today (UTC)."""
    return _raising(golden.versioned_name, family, date or None, digest)


def pinned_source(source):
    """The DataVolume ``spec.source`` block for a digest-pinned registry or checksummed http source."""
    return _raising(linux_golden.pinned_source, source)


def source_digest(source):
    """``sha256:<hex>`` naming the artifact of a source (registry digest or http checksum)."""
    return _raising(linux_golden.source_digest, source)


def snapshot_class(classes, wanted=""):
    """The VolumeSnapshotClass goldens are taken with (``golden.snapshot_class``)."""
    return _raising(golden.snapshot_class, classes, wanted or "")


def gate_os(os_name, family="", chosen=""):
    """The clone gate's guest OS for a golden (``gate.golden_os``)."""
    return _raising(gate.golden_os, os_name, family, chosen)


def linux_golden_plan(images, date="", namespace=""):
    """The build plan of ``linux_golden`` (``linux_golden.build_plan``)."""
    return _raising(linux_golden.build_plan, images, date, namespace)


def linux_golden_distribution_plan(artifacts, date="", namespaces=None):
    """The distribution plan of ``linux_golden`` (``linux_golden.distribution_plan``)."""
    return _raising(linux_golden.distribution_plan, artifacts, date, namespaces or {})


def linux_golden_secret_refs(plan):
    """The Secrets a plan's http sources name, once per namespace (``linux_golden.secret_refs``)."""
    return linux_golden.secret_refs(plan)


class FilterModule(object):
    def filters(self):
        return {
            "gate_os": gate_os,
            "golden_name": golden_name,
            "linux_golden_distribution_plan": linux_golden_distribution_plan,
            "linux_golden_plan": linux_golden_plan,
            "linux_golden_secret_refs": linux_golden_secret_refs,
            "pinned_source": pinned_source,
            "snapshot_class": snapshot_class,
            "source_digest": source_digest,
        }
