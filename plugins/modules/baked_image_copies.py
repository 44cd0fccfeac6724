#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: baked_image_copies
short_description: Predict the copies a new baked revision gets; compare every published one with the nodes
version_added: 0.1.0
description:
  - Read-only. Sends only C(get) and C(list) requests, in check mode and out of it.
  - With O(replicas), predicts the replica count a new revision's VirtualMachineImage would get, as
    Harvester's merge decides it (the Longhorn class named by O(storage_class), else the cluster default
    class when it is a Longhorn class, wins over the request). A count that class cannot hold, or more
    copies than there are schedulable Nodes, is refused, so a publishing run stops before it builds,
    uploads or registers anything. The refusal offers first a Longhorn StorageClass used only for baked
    images, named in O(storage_class), never a change to the cluster default class.
  - With O(catalog), reads what every published revision (imported, its image recorded) holds, from its
    Longhorn C(BackingImage) (the disks whose copy is C(ready) in C(status.diskFileStatusMap), and
    C(spec.minNumberOfCopies)), and names each one holding fewer copies than there are schedulable Nodes,
    with the supported remedies in order (RV(short)). A revision short of copies is reported, not refused.
    Its first remedy mends the image in use (Longhorn's minimum copies of its backing image raised to the
    nodes); a class used only for baked images comes next, for the revisions still to come.
author:
  - goldenimage.pipeline maintainers (@goldenimage)
options:
  replicas:
    description: The copies a new revision asks for (C(storageClassParameters.numberOfReplicas)), at least 1.
    type: int
  storage_class:
    description:
      - The Longhorn StorageClass a new revision will name (annotation C(harvesterhci.io/storageClassName)),
        as M(goldenimage.pipeline.baked_image) O(goldenimage.pipeline.baked_image#module:storage_class).
    type: str
  revision:
    description: The revision the prediction is for, named in a refusal.
    type: str
    default: the new revision
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - goldenimage.pipeline.catalog
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.actiongroup_k8s
  - goldenimage.pipeline.attributes.info_module
notes:
  - "Runs on the controller; use C(delegate_to: localhost) when the play targets other hosts."
  - Nodes that cannot be listed (no cluster-wide C(list nodes)) are not compared; the module warns.
seealso:
  - module: goldenimage.pipeline.baked_image
  - module: goldenimage.pipeline.dbinstance_operator_env
"""

EXAMPLES = r"""
- name: Refuse a replica count the target class cannot hold, before anything is built
  goldenimage.pipeline.baked_image_copies:
    replicas: 4
    storage_class: baked-images

- name: Which published revisions hold fewer copies than nodes, and what to do
  goldenimage.pipeline.baked_image_copies:
    catalog: {namespace: dbaas-system, name: baked-image-catalog}
  register: copies

- name: Say it
  ansible.builtin.debug:
    msg: "{{ copies.line }}"
"""

RETURN = r"""
changed:
  description: Always false.
  returned: always
  type: bool
nodes:
  description: The schedulable Nodes (not cordoned, C(Ready=True), no C(NoSchedule) or C(NoExecute) taint).
  returned: always
  type: list
  elements: str
prediction:
  description:
    - The count a new revision would get, with C(requested), C(in_force), C(template), C(why) and C(nodes).
  returned: when O(replicas) is given
  type: dict
  sample: {requested: 4, in_force: 4, template: baked-images,
           why: named by the annotation harvesterhci.io/storageClassName on the image, nodes: 4}
copies:
  description:
    - What each published revision holds (see M(goldenimage.pipeline.baked_image) RV(copies)).
  returned: when O(catalog) is given
  type: list
  elements: dict
short:
  description:
    - Each published revision holding fewer copies than nodes, with C(revision), C(operator) (its copies),
      C(expected) (the nodes), C(message), C(move) (the first remedy) and C(remedies) (all, in order).
  returned: when O(catalog) is given
  type: list
  elements: dict
line:
  description: One line over the published revisions' copies against the nodes.
  returned: when O(catalog) is given
  type: str
  sample: "4 nodes; v20261129 holds 3 of 4; short: v20261129; first remedy: raise Longhorn's minimum copies"
"""

from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import (
    _backing_copies,
    backing_copies,
    harvester_image,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked._catalog_store import (
    CatalogStore,
    catalog_options,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import run_module
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeModule


def argument_spec():
    return dict(
        replicas=dict(type="int"),
        storage_class=dict(type="str"),
        revision=dict(type="str", default="the new revision"),
        catalog=catalog_options(),
    )


def run(module):
    p = module.params
    if p["replicas"] is not None:
        harvester_image.check_request(p["revision"], p["replicas"], 0)
    nodes = _backing_copies.schedulable_nodes(module, "copies are not compared with the node count")
    count = len(nodes) if nodes is not None else None
    result = {"changed": False, "nodes": nodes}
    if p["replicas"] is not None:
        result["prediction"] = backing_copies.predict(
            p["revision"],
            p["replicas"],
            backing_copies.request(p["storage_class"]),
            _backing_copies.storage_classes(module),
            count,
        )
    if p["catalog"]:
        held = _backing_copies.published(module, CatalogStore(module, p["catalog"]).read())
        result.update(
            copies=held,
            short=backing_copies.short_of(held, count),
            line=backing_copies.line(held, count),
        )
    return result


def main():
    module = KubeModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(module, lambda: run(module))


if __name__ == "__main__":
    main()
