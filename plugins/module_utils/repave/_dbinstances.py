# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Every DBInstance in the cluster, of every API group that serves the kind (found by discovery, not by a
name the caller gives), in every namespace. I/O only: what they mean is decided in ``catalog``."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

KIND = "DBInstance"


def served_versions(module, kind=KIND):
    """``group/version`` of each API group that serves ``kind``, its preferred version, from discovery."""
    try:
        found = module.client.resources.search(kind=kind)
    except Exception as exc:
        module.fail_from_exception("discover the API groups that serve %s" % kind, exc)
    versions = {}
    for res in found or ():
        if "/" in (getattr(res, "name", "") or ""):
            continue  # a subresource (status, scale) of the kind
        group = getattr(res, "group", "") or ""
        if group not in versions or getattr(res, "preferred", False):
            versions[group] = res.group_version
    return [versions[group] for group in sorted(versions)]


def all_dbinstances(module):
    """Every DBInstance object in the cluster, all namespaces, all serving API groups."""
    items = []
    for api_version in served_versions(module, KIND):
        items.extend(module.list(api_version, KIND))
    return items
