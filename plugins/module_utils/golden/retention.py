# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Which goldens of a (family, mode) retention keeps, and why; which it may delete.

Pure: no I/O. Keeps the ``keep`` most recent goldens (newest first by the version date in the name,
else the creation time), and whatever the serving truth (``serving.truth``) says is in use: the served
golden, the staged ones, the recorded rollback target, and every golden something uses. A held pair keeps
everything: nothing is deleted while what is served cannot be told.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import (
    golden,
    golden_inventory,
    serving,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import kinds


def plan(observed, family, mode, keep, namespaces=None):
    """``{"served", "held", "reason", "kept": [...], "delete": [...]}`` for (family, mode).

    Each entry is ``{"name", "namespace", "reasons", "consumers"}``; ``reasons`` is empty for a golden
    to delete. ``observed``: what ``golden_inventory.assemble`` returns. What keeps a golden besides
    ``keep`` is the serving truth's (``serving.keep_reasons``), never forced.
    """
    namespaces = namespaces or golden_inventory.golden_namespaces()
    mode = golden.normalize_mode(mode)
    state = serving.truth(observed, family, mode, namespaces)
    by_name = {kinds.name(o): o for o in serving.pair_goldens(observed, family, mode, namespaces)}
    result = {
        "served": state["served"],
        "held": state["held"],
        "reason": state["why"] or state["reason"],
        "kept": [],
        "delete": [],
    }
    for position, name in enumerate(state["goldens"]):
        labels = (serving.SERVED, serving.STAGED, serving.ROLLBACK)
        reasons = [r if r in labels else why for r, why in serving.keep_reasons(state, name)]
        if position < keep:
            reasons.append("within keep (%d most recent)" % keep)
        entry = {
            "name": name,
            "namespace": kinds.namespace(by_name[name]),
            "reasons": reasons,
            "consumers": state["users"][name],
        }
        result["kept" if reasons else "delete"].append(entry)
    return result


def still_deletable(fresh_plan, name):
    """The fresh plan's entry for ``name`` when it may still be deleted, else None."""
    for entry in fresh_plan["delete"]:
        if entry["name"] == name:
            return entry
    return None


def fresh_entry(fresh_plan, name):
    """The fresh plan's kept entry for ``name`` (why it is kept now), or None when it is gone."""
    for entry in fresh_plan["kept"]:
        if entry["name"] == name:
            return entry
    return None


def validate_keep(keep):
    """``keep`` is a count of goldens: an integer of at least 1 (the served one always stays anyway)."""
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise Refusal(
            "option keep",
            "%r is not a number of goldens to keep: it must be an integer of at least 1, checked before "
            "anything is deleted" % (keep,),
            "give a positive integer (the default is 3, as CDI's importsToKeep)",
        )
    return keep
