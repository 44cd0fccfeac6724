#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: kube_object_info
short_description: Read Kubernetes objects by name or by selector, riding out 5xx and dropped connections
version_added: 0.1.0
description:
  - Reads one object (O(name) given) or lists the objects of a kind (in O(namespace), or in every namespace)
    through the collection's Kubernetes adapter, so the roles' reads have the same bounded, jittered retries
    of throttling (429), 5xx answers and dropped connections as the collection's other modules.
  - A kind the cluster does not serve (its CRD is not installed) is not an error; RV(api_found) says so.
  - A Secret's values are left out unless O(secret_data) asks for them.
  - Never writes anything.
author:
  - goldenimage.pipeline maintainers (@goldenimage)
options:
  api_version:
    description: API group and version of the kind, for example C(v1) or C(kubevirt.io/v1).
    type: str
    default: v1
  kind:
    description: The kind, for example C(PersistentVolumeClaim).
    type: str
    required: true
  name:
    description: Name of the one object to read; without it every object that matches is listed.
    type: str
  namespace:
    description: Namespace to read in; without it a namespaced kind is listed in every namespace.
    type: str
  label_selectors:
    description: Label selectors the listed objects match, all of them (for example C(app=x), C(!y)).
    type: list
    elements: str
    default: []
  field_selectors:
    description: Field selectors the listed objects match, all of them.
    type: list
    elements: str
    default: []
  secret_data:
    description: Return the C(data) of Secrets too (mark the task C(no_log)).
    type: bool
    default: false
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.actiongroup_k8s
  - goldenimage.pipeline.attributes.info_module
seealso:
  - module: goldenimage.pipeline.kube_object
"""

EXAMPLES = r"""
- name: Read the VolumeSnapshotClasses
  goldenimage.pipeline.kube_object_info:
    api_version: snapshot.storage.k8s.io/v1
    kind: VolumeSnapshotClass
  register: classes

- name: Find the leftovers of failed bakes
  goldenimage.pipeline.kube_object_info:
    api_version: kubevirt.io/v1
    kind: VirtualMachine
    namespace: windows-bake
    label_selectors:
      - app.kubernetes.io/part-of=windows-bake
      - goldenimage.pipeline/bake-state=failed
"""

RETURN = r"""
resources:
  description: The objects found (empty when nothing matches, or the kind is not served).
  returned: always
  type: list
  elements: dict
  sample: []
api_found:
  description: Whether the cluster serves the kind.
  returned: always
  type: bool
  sample: true
retries:
  description: Requests retried during the run.
  returned: always
  type: int
  sample: 0
"""

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import run_module
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import objects
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeModule


def argument_spec():
    return dict(
        api_version=dict(type="str", default="v1"),
        kind=dict(type="str", required=True),
        name=dict(type="str"),
        namespace=dict(type="str"),
        label_selectors=dict(type="list", elements="str", default=[]),
        field_selectors=dict(type="list", elements="str", default=[]),
        secret_data=dict(type="bool", default=False),
    )


class Read(object):
    def __init__(self, module):
        self.module = module
        self.params = module.params

    def run(self):
        m, p = self.module, self.params
        api_version, kind = p["api_version"], p["kind"]
        if not m.served(api_version, kind):
            return {"changed": False, "resources": [], "api_found": False, "retries": m.retried}
        if p["name"]:
            found = m.get(api_version, kind, p["name"], p["namespace"])
            resources = [found] if found is not None else []
        else:
            resources = m.list(
                api_version,
                kind,
                p["namespace"],
                label_selector=objects.selector(p["label_selectors"]),
                field_selector=objects.selector(p["field_selectors"]),
                managed_fields=True,  # returned as the API server holds them, as a get returns one
            )
        if not p["secret_data"]:
            resources = [objects.hide_secret(r) for r in resources]
        return {"changed": False, "resources": resources, "api_found": True, "retries": m.retried}


def main():
    module = KubeModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(module, lambda: Read(module).run())


if __name__ == "__main__":
    main()
