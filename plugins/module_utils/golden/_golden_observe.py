# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Runs the LIST requests a reference query's plan names; decides nothing.

Adapter: the one place golden_info (the report) and golden_snapshot (the reference query before a
delete) read the cluster the same way, so "who uses this?" is answered from what the report shows;
kube_object and worker_image read what uses a volume (``consumers.volume_plan``) the same way.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import (
    consumers,
    golden_inventory,
    selection,
)


def lists(module, plan):
    """``{key: [items of each LIST]}``: one LIST per query of ``plan`` (several in flight at once); an
    optional kind the cluster does not serve lists as empty."""
    sent = [query for query in plan if not query["optional"] or module.served(query["api"], query["kind"])]
    answers, asked = iter(module.list_each(sent)), {id(query) for query in sent}
    listed = {}
    for query in plan:
        listed.setdefault(query["key"], []).append(next(answers) if id(query) in asked else [])
    return listed


def observe(module, namespaces, family=None, project_selector=selection.PROJECT_SELECTOR):
    """``observed`` for the report and the reference query: one LIST per kind and golden namespace."""
    plan = golden_inventory.observation_plan(namespaces, family, project_selector)
    return golden_inventory.assemble(lists(module, plan), namespaces)


def observe_volume_users(module, namespace):
    """``observed`` for ``consumers.delete_consumers`` of an object of ``namespace``."""
    listed = lists(module, consumers.volume_plan(namespace))
    return {key: [item for items in batches for item in items] for key, batches in listed.items()}
