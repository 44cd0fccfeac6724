#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: golden_retention
short_description: Keep the N most recent goldens of a family and mode, and never delete one in use
version_added: 0.1.0
description:
  - Per family and mode, keeps the O(keep) most recent goldens (newest first by the version date in the
    name, else the creation time), the way CDI's C(DataImportCron) keeps C(importsToKeep) imports, and
    deletes the older ones.
  - A golden is never deleted when it is the one served (by the C(GoldenImageSelection) or the active
    label), when it is newer than the served one or published after it (a candidate not yet promoted), or
    when the reference query M(goldenimage.pipeline.golden_info) reports from and
    M(goldenimage.pipeline.golden_snapshot) asks before a delete finds a consumer for it - a selection naming
    it or recording it as the rollback target, a golden recording it as its rollback target, the active
    label, a PersistentVolumeClaim, DataVolume, DataSource or VirtualMachine template still restoring from it
    directly or through a project's seeded copy, or a project copy on
    its snapshot handle. Each kept golden carries the reasons it is kept.
  - When the pair's serving is held by a conflict (two selections, a broken selection), nothing is deleted.
  - Right before each delete the cluster is observed again and the plan recomputed; a golden that gained
    a consumer in between (a clone that just started) is not deleted and is reported in RV(refused) with
    the consumers named.
  - There is no force option; what is in use is always kept.
author:
  - goldenimage.pipeline maintainers (@goldenimage)
options:
  family:
    description:
      - The OS family id (label C(kube-dc.com/golden-os), else annotation C(kube-dc.com/os-family-id)).
    type: str
    required: true
  mode:
    description:
      - V(Filesystem) (namespace C(golden-images)) or V(Block) (namespace C(golden-images-block)); any
        casing is accepted.
    type: str
    default: Filesystem
  keep:
    description:
      - How many of the most recent goldens to keep whatever their use; an integer of at least 1. Goldens in
        use are kept on top of these.
    type: int
    default: 3
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.actiongroup_k8s
attributes:
  check_mode:
    support: full
    details:
      - Prints the plan (RV(kept), RV(deleted) as what would be deleted) and sends only reads.
  diff_mode:
    support: full
  idempotent:
    support: full
notes:
  - "Runs on the controller; use C(delegate_to: localhost) when the play targets other hosts."
  - O(keep) below 1 is refused before anything is read or deleted.
seealso:
  - module: goldenimage.pipeline.golden_info
  - module: goldenimage.pipeline.golden_snapshot
"""

EXAMPLES = r"""
- name: Show what retention would delete
  goldenimage.pipeline.golden_retention:
    family: ubuntu-24-04
    mode: Block
    keep: 3
  check_mode: true
  register: plan

- name: Keep the two most recent Filesystem goldens of debian-12 and whatever is in use
  goldenimage.pipeline.golden_retention:
    family: debian-12
    keep: 2
  register: retained

- name: Say why each golden stays
  ansible.builtin.debug:
    msg: "{{ item.name }}: {{ item.reasons | join(', ') }}"
  loop: "{{ retained.kept }}"
"""

RETURN = r"""
changed:
  description: Whether a golden was (in check mode, would be) deleted.
  returned: always
  type: bool
  sample: true
served:
  description: The golden served for the family and mode, or null when none is (or the pair is held).
  returned: always
  type: str
  sample: golden-debian-12-20260828-0123456789ab
kept:
  description: Goldens kept, newest first, each with the reasons it stays.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Snapshot name.
      type: str
    namespace:
      description: Snapshot namespace.
      type: str
    reasons:
      description:
        - V(served), V(newer than served), V(within keep (N most recent)), V(selected by GoldenImageSelection
          ns/name), V(rollback target of <kind> ns/name), V(cloned by <kind> ns/name (why)),
          V(project copy VolumeSnapshot ns/name on its snapshot handle), V(active (label)), or V(the pair is
          held (why)).
      type: list
      elements: str
    consumers:
      description: The consumers the reference query found, as C({kind, namespace, name, why, loses}).
      type: list
      elements: dict
  sample:
    - name: golden-debian-12-20260101-0123456789ab
      namespace: golden-images
      reasons: ["cloned by PersistentVolumeClaim shop/vm-1-root (restores from it directly)"]
      consumers: [{kind: PersistentVolumeClaim, namespace: shop, name: vm-1-root,
                   why: restores from it directly, loses: null}]
deleted:
  description: Goldens deleted (in check mode, that would be deleted), as C({name, namespace}).
  returned: always
  type: list
  elements: dict
  sample: [{name: golden-debian-12-20250101-0123456789ab, namespace: golden-images}]
refused:
  description:
    - Goldens the plan meant to delete but that gained a use before their delete, with the refusal
      (naming each consumer) and the consumers. Nothing was deleted for them.
  returned: always
  type: list
  elements: dict
  sample:
    - name: golden-debian-12-20250101-0123456789ab
      namespace: golden-images
      msg: "VolumeSnapshot golden-images/golden-debian-12-20250101-0123456789ab: refusing to delete it, ..."
      consumers: []
diff:
  description: Before and after as the list of golden names of the family and mode, with C(--diff).
  returned: when diff mode is on
  type: dict
  sample: {before: {goldens: [a, b, c, d]}, after: {goldens: [a, b, c]}}
"""

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import run_module
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import (
    consumers,
    golden,
    golden_inventory,
    retention,
    serving,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden._golden_observe import observe
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeModule

API = golden.SNAPSHOT_API_VERSION
KIND = golden.SNAPSHOT_KIND


def argument_spec():
    return dict(
        family=dict(type="str", required=True),
        mode=dict(type="str", default="Filesystem"),
        keep=dict(type="int", default=3),
    )


class Retention:
    """The runner: returns the result, raises a PipelineError to fail; never exits."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.namespaces = golden_inventory.golden_namespaces()

    def plan(self, family, mode, keep):
        observed = observe(self.module, self.namespaces, family)
        return observed, retention.plan(observed, family, mode, keep, self.namespaces)

    def run(self):
        p = self.params
        keep = retention.validate_keep(p["keep"])
        mode = golden.normalize_mode(p["mode"])
        family = golden.validate_family(p["family"])
        observed, planned = self.plan(family, mode, keep)
        before = [e["name"] for e in planned["kept"] + planned["delete"]]
        result = {
            "changed": False,
            "served": planned["served"],
            "kept": planned["kept"],
            "deleted": [],
            "refused": [],
        }
        for entry in planned["delete"]:
            where = "%s %s/%s" % (KIND, entry["namespace"], entry["name"])
            if self.module.check_mode:
                result["deleted"].append({"name": entry["name"], "namespace": entry["namespace"]})
                continue
            # Asked again right before the delete: a clone or a promotion since the plan stops it.
            observed, fresh = self.plan(family, mode, keep)
            if retention.still_deletable(fresh, entry["name"]) is None:
                now = retention.fresh_entry(fresh, entry["name"])
                if now is None:
                    continue  # gone meanwhile: nothing to delete
                found = now["consumers"]
                refusal = consumers.refuse_delete(
                    where, found, "it is kept; run retention again once nothing uses it"
                )
                msg = refusal.msg if refusal else "%s: kept now: %s" % (where, "; ".join(now["reasons"]))
                self.module.warn(msg)
                result["refused"].append(
                    {"name": entry["name"], "namespace": entry["namespace"], "msg": msg, "consumers": found}
                )
                result["kept"].append(now)
                continue
            target = next(
                o
                for o in serving.pair_goldens(observed, family, mode, self.namespaces)
                if o["metadata"]["name"] == entry["name"]
            )
            state = serving.truth(observed, family, mode, self.namespaces)
            refusal = serving.delete_refusal(state, entry["name"], where)
            if refusal is not None:  # the plan and the guard disagree: the guard wins
                result["refused"].append(
                    {
                        "name": entry["name"],
                        "namespace": entry["namespace"],
                        "msg": refusal.msg,
                        "consumers": refusal.fields.get("consumers", []),
                    }
                )
                continue
            if self.module.delete(API, KIND, entry["name"], entry["namespace"], before=target):
                result["deleted"].append({"name": entry["name"], "namespace": entry["namespace"]})
        result["changed"] = bool(result["deleted"])
        if self.module._diff:
            gone = {d["name"] for d in result["deleted"]}
            result["diff"] = {
                "before": {"goldens": before},
                "after": {"goldens": [n for n in before if n not in gone]},
            }
        return result


def main():
    module = KubeModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(module, lambda: Retention(module).run())


if __name__ == "__main__":
    main()
