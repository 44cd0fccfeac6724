# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Runs the LIST requests ``golden_inventory.observation_plan`` names; decides nothing.

Adapter: the one place golden_info (the report) and golden_snapshot (the reference query before a
delete) read the cluster the same way, so "who uses this?" is answered from what the report shows.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.module_utils import golden_inventory, selection


def observe(module, namespaces, family=None, project_selector=selection.PROJECT_SELECTOR):
    """``observed`` for the report and the reference query: one LIST per kind and golden namespace."""
    listed = {}
    for query in golden_inventory.observation_plan(namespaces, family, project_selector):
        if query["optional"] and not module.served(query["api"], query["kind"]):
            items = []
        else:
            items = module.list(
                query["api"], query["kind"], query["namespace"], label_selector=query["selector"]
            )
        listed.setdefault(query["key"], []).append(items)
    return golden_inventory.assemble(listed, namespaces)
