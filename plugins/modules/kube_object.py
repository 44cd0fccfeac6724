#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: kube_object
short_description: Create, update or delete Kubernetes objects, riding out conflicts, 5xx and lost replies
version_added: 0.1.0
description:
  - Applies a list of object definitions through the collection's Kubernetes adapter, so every request
    the roles send has the same retry layer as the collection's other modules.
  - With O(state=present) each object is read first. A missing object is created; an existing one is
    merge-patched with the given fields only when it does not already hold them (fields the server or
    other writers added are left alone). An object that already holds every given field is not written
    to at all, so a rerun sends no mutating request.
  - A write never makes deletable what was not. An existing object that does not carry
    C(app.kubernetes.io/managed-by=goldenimage.pipeline) is refused, with nothing written, when the definition
    would add that label, since O(state=absent) would then delete someone else's object (a tenant's database
    named like a test instance, say).
  - With O(state=patched) an existing object is merge-patched the same way; a missing one is not created
    (it is reported with action C(missing) and a warning).
  - With O(state=absent) each object is deleted with the O(propagation) policy; one that is already gone is
    done. With O(wait) the module waits until each deleted object is gone.
  - O(state=absent) deletes only what the collection made, objects labelled
    C(app.kubernetes.io/managed-by=goldenimage.pipeline), as read from the cluster. A golden (a
    VolumeSnapshot or any object carrying the golden contract's family) is refused with a pointer to
    M(goldenimage.pipeline.golden_snapshot), and a Harvester VirtualMachineImage with a pointer to
    M(goldenimage.pipeline.baked_image), since those delete paths ask who uses the object first. A Namespace
    is never deleted, labelled or not, since everything in it goes with it.
  - O(state=absent) of a PersistentVolumeClaim, a DataVolume or a VirtualMachine asks who uses it first,
    with the reference query the collection's other delete paths share. A claim (for a DataVolume, its
    claim) is refused while a pod or a VirtualMachine mounts it, or while a claim (C(dataSource),
    C(dataSourceRef)), a DataVolume or a VirtualMachine's C(dataVolumeTemplates) (C(source.pvc)) clones
    it or a VolumeSnapshot is taken of it, in any namespace; pods that ended, its own importer pods and
    objects being deleted do not count. A VirtualMachine (unless O(propagation=Orphan)) is refused while
    anything but itself uses a DataVolume it owns, since its delete takes them along. The refusal names
    each consumer, and every object of the task is read and asked about before the first delete.
  - "Transient errors are ridden out with jittered exponential backoff, bounded in attempts and in time:
    throttling (429), 5xx answers and dropped connections. A C(409) on create reads the object back: when it
    holds what was sent (the reply of an earlier attempt was lost after the server committed it) it is the
    result, otherwise the create fails naming the fields that differ. A C(409) on a patch re-reads the
    object and re-applies the patch. A C(404) on a delete retry means the delete was done."
  - A Secret's C(stringData) is sent as C(data) (what the API server stores), so a rerun compares like with
    like; Secret values never appear in the module's output or diff.
  - An object that is being deleted (it has a C(deletionTimestamp)) is refused with O(state=present).
author:
  - goldenimage.pipeline maintainers (@goldenimage)
options:
  definitions:
    description:
      - The objects, each a mapping with C(apiVersion), C(kind) and C(metadata.name) (and
        C(metadata.namespace) for namespaced kinds, unless O(namespace) gives it).
      - With O(state=absent) only the names are used.
    type: list
    elements: dict
    required: true
  namespace:
    description: Namespace of the namespaced objects whose definition names none.
    type: str
  state:
    description: What to make of each object.
    type: str
    choices: [present, patched, absent]
    default: present
  propagation:
    description: The deletion's C(propagationPolicy) with O(state=absent).
    type: str
    choices: [Foreground, Background, Orphan]
  wait:
    description: With O(state=absent), wait until each deleted object is gone.
    type: bool
    default: false
  wait_timeout:
    description: Seconds to wait for each deleted object with O(wait).
    type: int
    default: 120
  wait_sleep:
    description: Seconds between polls with O(wait).
    type: float
    default: 2
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.actiongroup_k8s
attributes:
  check_mode:
    support: full
    details: No mutating request is sent (not even a server-side dry run); the result says what would change.
  diff_mode:
    support: full
    details: One diff per object written, Secret values replaced by markers.
  idempotent:
    support: full
notes:
  - Objects named by C(generateName) only are refused; a rerun could not tell which object it made.
seealso:
  - module: goldenimage.pipeline.kube_object_info
"""

EXAMPLES = r"""
- name: Ensure the golden namespaces carry their labels
  goldenimage.pipeline.kube_object:
    definitions:
      - apiVersion: v1
        kind: Namespace
        metadata:
          name: golden-images-block
          labels:
            kube-dc.com/golden-mode: Block

- name: Remove the import DataVolume and the conversion Job, with their pods
  goldenimage.pipeline.kube_object:
    state: absent
    namespace: golden-images-block
    propagation: Foreground
    definitions:
      - apiVersion: cdi.kubevirt.io/v1beta1
        kind: DataVolume
        metadata:
          name: golden-debian-12-import
      - apiVersion: batch/v1
        kind: Job
        metadata:
          name: golden-debian-12-convert
"""

RETURN = r"""
objects:
  description: One entry per definition, in order.
  returned: always
  type: list
  elements: dict
  contains:
    api_version:
      description: The object's apiVersion.
      type: str
    kind:
      description: The object's kind.
      type: str
    name:
      description: The object's name.
      type: str
    namespace:
      description: The object's namespace (null for cluster-scoped kinds).
      type: str
    action:
      description: C(created), C(patched), C(unchanged), C(deleted), C(absent) (already gone) or C(missing).
      type: str
      sample: created
    object:
      description:
        - The object as the server answered (or, in check mode, as predicted); null once deleted. A Secret's
          values are replaced by markers.
      type: dict
  sample:
    - api_version: v1
      kind: Namespace
      name: golden-images-block
      namespace: null
      action: unchanged
      object: {}
msg:
  description: How many objects took each action.
  returned: always
  type: str
  sample: created 1, unchanged 1
retries:
  description: Requests retried during the run (conflicts, transient errors, lost replies).
  returned: always
  type: int
  sample: 0
"""

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import redact
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import (
    PipelineError,
    run_module,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.inputs import (
    positive_all,
    wait_arg_spec,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import consumers
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden._golden_observe import (
    observe_volume_users,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import objects
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import (
    KubeError,
    KubeModule,
    object_diff,
)


def argument_spec():
    return dict(
        definitions=dict(type="list", elements="dict", required=True),
        namespace=dict(type="str"),
        state=dict(type="str", choices=list(objects.STATES), default="present"),
        propagation=dict(type="str", choices=list(objects.PROPAGATION)),
        **wait_arg_spec(120, 2, wait=False),
    )


class Apply(object):
    """Reads each object, then writes only what it does not hold yet. Returns the module's result."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self._users = {}  # namespace -> what may use a volume there (read once per run)

    def run(self):
        state = self.params["state"]
        definitions = self.params["definitions"] or []
        # Secret values, and the signatures and tokens of URLs (a DataVolume's presigned source), are
        # masked wherever the result would echo them (the invocation included).
        self.module.no_log_values.update(objects.secret_values(definitions))
        self.module.no_log_values.update(redact.secrets_in(definitions))
        objects.check_definitions(definitions, state)
        if state != "absent":
            objects.check_urls(definitions, self.params["namespace"])
        if state == "absent" and self.params["wait"]:
            positive_all(self.params, ("wait_timeout", "wait_sleep"))
        entries, diffs = [], []
        # Every delete is read and asked about first: a refusal comes before the first delete.
        deletes = [self.read_for_delete(d) for d in definitions] if state == "absent" else []
        for index, definition in enumerate(definitions):
            if state == "absent":
                item, diff = self.absent(*deletes[index])
            else:
                item, diff = self.present(definition, create=state == "present")
            entries.append(item)
            if diff is not None:
                diffs.append(diff)
        # The objects read back may hold such URLs too (CDI copies the source URL into a claim's annotation).
        self.module.no_log_values.update(redact.secrets_in([entries, diffs]))
        changed = any(e["action"] in ("created", "patched", "deleted") for e in entries)
        result = {
            "changed": changed,
            "objects": entries,
            "msg": objects.summary(entries),
            "retries": self.module.retried,
        }
        if diffs:
            result["diff"] = diffs if len(diffs) > 1 else diffs[0]
        return result

    def _where(self, definition):
        api_version, kind, name, namespace = objects.ident(definition)
        res = self.module.resource(api_version, kind)
        if not res.namespaced:
            return api_version, kind, name, None, objects.desired(definition)
        namespace = objects.namespace_of(definition, kind, namespace or self.params["namespace"])
        return api_version, kind, name, namespace, objects.desired(definition, namespace)

    def present(self, definition, create):
        m = self.module
        api_version, kind, name, namespace, want = self._where(definition)
        current = m.get(api_version, kind, name, namespace)
        if current is None:
            if not create:
                m.warn("%s does not exist; nothing was patched" % objects.describe(want))
                return objects.entry(want, "missing"), None
            after = self._create(want)
            return objects.entry(want, "created", after), self._diff(want, None, after)
        objects.check_write(current, want)
        if not objects.pending(want, current):
            return objects.entry(want, "unchanged", current), None
        after, changed = m.patch(api_version, kind, name, namespace, objects.patch_of(want), before=current)
        action = "patched" if changed else "unchanged"
        return objects.entry(want, action, after), self._diff(want, current, after) if changed else None

    def _create(self, want):
        try:
            return self.module.create(want)
        except KubeError as exc:
            # The adapter compares the read-back field by field; the server may have written a field in
            # its canonical form (a quantity), which is still what was sent.
            existing = exc.fields.get("existing")
            if (
                exc.fields.get("reason") == "AlreadyExists"
                and existing
                and not objects.pending(want, existing)
            ):
                return existing
            raise

    def _diff(self, want, before, after):
        diff = redact.redact_fields(
            object_diff(objects.hide_secret(before), objects.hide_secret(after, before))
        )
        diff["before_header"] = diff["after_header"] = objects.describe(want)
        return diff

    def read_for_delete(self, definition):
        """``(where, want, current)`` of an object to delete, refused while it is not the collection's
        own or while something uses it (or what its delete takes with it)."""
        where = self._where(definition)
        want = where[4]
        current = self.module.get(*where[:4])
        if current is None:
            return where, want, None
        objects.check_delete(current)
        if consumers.asks(current):
            namespace = where[3]
            if namespace not in self._users:
                try:
                    self._users[namespace] = observe_volume_users(self.module, namespace)
                except PipelineError as exc:
                    raise consumers.users_unknown(objects.describe(current), exc) from exc
            refusal = consumers.delete_refusal(current, self._users[namespace], self.params["propagation"])
            if refusal is not None:
                raise refusal
        return where, want, current

    def absent(self, where, want, current):
        m = self.module
        api_version, kind, name, namespace, _want = where
        if current is None:
            return objects.entry(want, "absent"), None
        propagation = self.params["propagation"]
        if self.params["wait"]:
            m.delete_and_wait(
                api_version,
                kind,
                name,
                namespace,
                self.params["wait_timeout"],
                self.params["wait_sleep"],
                before=current,
                propagation=propagation,
            )
        else:
            m.delete(api_version, kind, name, namespace, before=current, propagation=propagation)
        return objects.entry(want, "deleted"), self._diff(want, current, None)


def main():
    module = KubeModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(module, lambda: Apply(module).run())


if __name__ == "__main__":
    main()
