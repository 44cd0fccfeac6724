#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: baked_image
short_description: Register a baked PostgreSQL image revision as a Harvester VirtualMachineImage
version_added: 0.1.0
description:
  - Creates the Harvester C(VirtualMachineImage) of a baked image revision, from a download URL (the mirror
    bucket) or by uploading a local file, waits until Harvester has imported it, checks the replica count
    actually in force, and records the revision in the catalog.
  - The image is named after the artifact, C(ubuntu-<stream without dot>-postgres-<revision>), which is also
    its C(displayName). Labels C(goldenimage.io/revision), C(goldenimage.io/os-version),
    C(goldenimage.io/pg-majors) and one C(pg.goldenimage.io/<major>=true) per major describe it.
  - Images are immutable. A revision that exists with another source or checksum (in the cluster or in the
    catalog) is refused with "build a new revision"; the same input again reports C(changed=false).
  - The StorageClass is read from C(status.storageClassName), never computed. Harvester ignores
    C(storageClassParameters.numberOfReplicas) when a Longhorn template class applies (the class named by the
    annotation C(harvesterhci.io/storageClassName), or the cluster default). When the replica count in force
    differs from O(replicas) the module fails, naming the class that won and how to fix it.
  - With O(state=absent) the image is deleted unless a PersistentVolumeClaim uses its StorageClass; those
    claims are named. The catalog keeps the revision (it keeps every revision ever registered).
author:
  - goldenimage.pipeline maintainers (@goldenimage)
requirements:
  - kubernetes >= 24.2.0 (on the controller)
options:
  name:
    description:
      - The revision, C(v<YYYYMMDD>) for the default naming stream 22.04 or
        C(v<YYYYMMDD>-<stream without dot>) for others, for example C(v20261201-2404).
    type: str
    required: true
  namespace:
    description: Namespace of the VirtualMachineImage.
    type: str
    default: default
  url:
    description:
      - Where Harvester downloads the qcow2 from (C(sourceType=download)), for example the mirror
        bucket's URL.
      - Mutually exclusive with O(src).
    type: str
  src:
    description:
      - A local qcow2 to upload (C(sourceType=upload)) through Harvester's upload endpoint.
      - The file is read into memory for the upload; prefer O(url) for large images.
    type: path
  harvester_url:
    description:
      - Base URL of the Harvester API that serves the upload action, when it is not the Kubernetes API server
        of the kubeconfig (for example C(https://harvester.example.com)). Used only with O(src).
    type: str
  os_version:
    description:
      - The Ubuntu LTS stream of the image, C(22.04) or C(24.04). Must agree with the revision name.
      - Required with O(state=present); with O(state=absent) it is taken from the revision name.
    type: str
  pg_versions:
    description: The PostgreSQL majors baked into the image. Required with O(state=present).
    type: list
    elements: str
  replicas:
    description:
      - How many nodes must hold a copy of the backing image (C(storageClassParameters.numberOfReplicas)).
      - The count in force on the resulting StorageClass is verified.
    type: int
  storage_class:
    description:
      - A Longhorn StorageClass whose parameters the image's StorageClass is made from (annotation
        C(harvesterhci.io/storageClassName)). Harvester then takes C(numberOfReplicas) from it, not from
        O(replicas); the module verifies which count won. Without it, Harvester uses the cluster default
        class the same way when that is a Longhorn class.
    type: str
  checksum:
    description:
      - SHA-512 of the qcow2 (128 hex digits, C(sha512:) prefix accepted); Harvester's Longhorn backend
        verifies it. Computed from O(src) when omitted; must match it when given.
    type: str
  retry:
    description: How many failed import attempts Harvester retries (C(spec.retry), 0 to 10).
    type: int
    default: 3
  catalog:
    description:
      - Where the revision is recorded, a ConfigMap (O(catalog.namespace), O(catalog.name)) or a file
        (O(catalog.path)). Omit it to register the image only.
    type: dict
    suboptions:
      namespace:
        description: Namespace of the catalog ConfigMap.
        type: str
      name:
        description: Name of the catalog ConfigMap (key C(catalog.yaml)); created when missing.
        type: str
      path:
        description: A catalog YAML file instead of a ConfigMap.
        type: path
  state:
    description: V(present) registers the revision; V(absent) deletes its VirtualMachineImage.
    type: str
    choices: [present, absent]
    default: present
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - goldenimage.pipeline.k8s_wait
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.actiongroup_k8s
attributes:
  check_mode:
    support: full
    details: Reads only; nothing is created, uploaded, waited for or written to the catalog.
  diff_mode:
    support: full
  idempotent:
    support: full
notes:
  - "Runs on the controller; use C(delegate_to: localhost) when the play targets other hosts."
  - The wait is for C(Imported=True). It fails at once on C(RetryLimitExceeded) or a failed upload, with
    Harvester's message, and on timeout reports the last progress and every condition.
seealso:
  - module: goldenimage.pipeline.baked_image_stream
"""

EXAMPLES = r"""
- name: Register a revision from the mirror bucket, 4 copies, and record it in the catalog
  goldenimage.pipeline.baked_image:
    name: v20261201-2404
    namespace: harvester-public
    url: https://mirror.example.com/baked/ubuntu-2404-postgres-v20261201-2404.qcow2
    checksum: "{{ lookup('file', 'ubuntu-2404-postgres-v20261201-2404.qcow2.sha512') }}"
    os_version: "24.04"
    pg_versions: ["15", "16", "17"]
    replicas: 4
    catalog:
      namespace: dbaas-system
      name: baked-image-catalog
    wait_timeout: 1800
  register: baked

- name: Upload a local build directly (no bucket)
  goldenimage.pipeline.baked_image:
    name: v20260615
    src: output/ubuntu-2204-postgres-v20260615.qcow2
    os_version: "22.04"
    pg_versions: ["15", "16", "17"]
    replicas: 3
    catalog:
      path: catalog/baked-images.yaml

- name: Remove an image no disk uses any more
  goldenimage.pipeline.baked_image:
    name: v20260101
    namespace: harvester-public
    state: absent
"""

RETURN = r"""
changed:
  description: Whether the image or the catalog was (or, in check mode, would be) changed.
  returned: always
  type: bool
image:
  description: The VirtualMachineImage after the task (in check mode, the prediction); empty when absent.
  returned: always
  type: dict
storage_class:
  description: C(status.storageClassName), the StorageClass of the image (C(lh-<uid>) on current Harvester).
  returned: when known
  type: str
  sample: lh-6c1f0bde-3bd1-4b8e-9a51-2f4a7c0e9d11
progress:
  description: The last C(status.progress) seen (0 to 100).
  returned: when state is present
  type: int
  sample: 100
progress_seen:
  description: Every distinct progress value observed while waiting, in order.
  returned: when state is present
  type: list
  elements: int
  sample: [0, 35, 99, 100]
replicas_in_force:
  description: C(numberOfReplicas) on the image's StorageClass, what Longhorn actually keeps.
  returned: when the StorageClass exists
  type: int
  sample: 4
revision:
  description: The catalog entry of the revision.
  returned: when O(catalog) is given and state is present
  type: dict
  sample: {os_version: "24.04", pg_versions: ["15", "16", "17"], imported: true}
catalog_changed:
  description: Whether the catalog was (or would be) changed.
  returned: when O(catalog) is given
  type: bool
pvcs:
  description: PersistentVolumeClaims (C(namespace/name)) that use the image's StorageClass.
  returned: when state is absent and the deletion is refused
  type: list
  elements: str
duration:
  description: Seconds spent waiting.
  returned: always
  type: float
diff:
  description: Before and after of the image (server fields removed) and of the catalog YAML, with C(--diff).
  returned: when diff mode is on
  type: list
  elements: dict
"""

import hashlib
import os

from ansible_collections.goldenimage.pipeline.plugins.module_utils import catalog, revision
from ansible_collections.goldenimage.pipeline.plugins.module_utils import harvester_image
from ansible_collections.goldenimage.pipeline.plugins.module_utils._catalog_store import (
    CatalogStore,
    catalog_options,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils._kube import KubeModule, object_diff
from ansible_collections.goldenimage.pipeline.plugins.module_utils._wait import WaitError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.errors import PipelineError

hi = harvester_image
API = hi.API_VERSION
KIND = hi.KIND


def argument_spec():
    return dict(
        name=dict(type="str", required=True),
        namespace=dict(type="str", default="default"),
        url=dict(type="str"),
        src=dict(type="path"),
        harvester_url=dict(type="str"),
        os_version=dict(type="str"),
        pg_versions=dict(type="list", elements="str"),
        replicas=dict(type="int"),
        storage_class=dict(type="str"),
        checksum=dict(type="str", no_log=False),
        retry=dict(type="int", default=3),
        catalog=catalog_options(),
        state=dict(type="str", choices=["present", "absent"], default="present"),
        wait=dict(type="bool", default=True),
        wait_timeout=dict(type="int", default=300),
        wait_sleep=dict(type="int", default=2),
    )


def _sha512(path):
    digest = hashlib.sha512()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1024 * 1024), b""):
            digest.update(block)
    return digest.hexdigest()


class BakedImage:
    def __init__(self, module):
        self.module = module
        self.p = module.params
        self.result = {"changed": False, "duration": 0.0, "image": {}}
        self.store = CatalogStore(module, self.p["catalog"]) if self.p["catalog"] else None

    def fail(self, msg, **extra):
        self.result.update(extra)
        self.module.fail_json(msg=msg, **self.result)

    def os_version(self):
        try:
            if self.p["os_version"]:
                return revision.validate_revision(self.p["name"], self.p["os_version"]).os_stream
            return revision.parse_revision(self.p["name"]).os_stream
        except ValueError as exc:
            self.fail(str(exc))

    # state=present -----------------------------------------------------------------------------

    def desired(self, os_version):
        p = self.p
        if p["replicas"] is not None and p["replicas"] < 1:
            self.fail("replicas must be at least 1")
        if not 0 <= p["retry"] <= 10:
            self.fail("retry must be between 0 and 10 (Harvester's range)")
        try:
            checksum = hi.normalize_checksum(p["checksum"])
            if p["src"]:
                if not os.path.isfile(p["src"]):
                    self.fail("src %s is not a file" % p["src"])
                actual = _sha512(p["src"])
                if checksum and checksum != actual:
                    self.fail(
                        "src %s has SHA-512 %s, not the checksum given (%s)" % (p["src"], actual, checksum)
                    )
                checksum = actual
            elif not checksum:
                self.module.warn("no checksum given: Harvester cannot verify the download")
            return hi.definition(
                p["namespace"],
                p["name"],
                os_version,
                p["pg_versions"],
                checksum,
                url=p["url"],
                replicas=p["replicas"],
                retry=p["retry"],
                storage_class=p["storage_class"],
            )
        except ValueError as exc:
            self.fail(str(exc))

    def record(self, desired, obj, storage_class):
        """Register the revision in the catalog (refusals come from catalog.py)."""
        spec = desired["spec"]
        meta = desired["metadata"]

        def change(doc):
            return catalog.register_image(
                doc,
                self.p["name"],
                self.p["os_version"],
                self.p["pg_versions"],
                spec.get("checksum"),
                hi.source_of(desired),
                image={"namespace": meta["namespace"], "name": meta["name"]},
                storage_class=storage_class,
                imported=obj is not None and hi.is_true(obj, "Imported"),
            )

        return self.store.update(change)

    def present(self):
        p = self.p
        if not p["pg_versions"]:
            self.fail("pg_versions is required with state=present")
        if not p["os_version"]:
            self.fail("os_version is required with state=present")
        os_version = self.os_version()
        desired = self.desired(os_version)
        name, namespace = desired["metadata"]["name"], desired["metadata"]["namespace"]
        if self.store is not None:  # refuse a changed source before touching the cluster
            try:
                catalog.register_image(
                    self.store.read(),
                    p["name"],
                    os_version,
                    p["pg_versions"],
                    desired["spec"].get("checksum"),
                    hi.source_of(desired),
                )
            except catalog.CatalogError as exc:
                self.fail("%s: %s" % (self.store.where, exc))
        existing = self.module.get(API, KIND, name, namespace)
        after = existing
        if existing is not None:
            changes = hi.identity_changes(existing, desired)
            if changes:
                detail = "; ".join("%s is %r, asked %r" % change for change in changes)
                self.fail(
                    "%s %s/%s (revision %s) exists with another source: %s. Images are immutable: "
                    "build a new revision" % (KIND, namespace, name, p["name"], detail),
                    image=existing,
                )
            wanted = desired["metadata"]["labels"]
            have = (existing.get("metadata") or {}).get("labels") or {}
            if any(have.get(k) != v for k, v in wanted.items()):
                after, changed = self.module.patch(
                    API, KIND, name, namespace, {"metadata": {"labels": wanted}}, before=existing
                )
                self.result["changed"] = changed
        else:
            after = self.module.create(desired)
            self.result["changed"] = True
        if self.module._diff:
            self.result["diff"] = [
                dict(object_diff(existing, after), before_header="%s %s/%s" % (KIND, namespace, name))
            ]
        seen = [hi.progress(after)]
        if not self.module.check_mode:
            if p["src"] and not hi.is_true(after, "Imported") and not hi.failure(after):
                after = self.upload(name, namespace, after)
            if p["wait"] and not hi.is_true(after, "Imported"):
                after = self.wait_imported(name, namespace, after, seen)
        self.result.update(image=after, progress=hi.progress(after), progress_seen=seen)
        storage_class = ((after or {}).get("status") or {}).get("storageClassName")
        if storage_class:
            self.check_replicas(after, storage_class)
        if self.store is not None:
            try:
                before_doc, after_doc, changed = self.record(desired, after, storage_class)
            except catalog.CatalogError as exc:
                self.fail("%s: %s" % (self.store.where, exc))
            self.result["catalog_changed"] = changed
            self.result["changed"] = self.result["changed"] or changed
            self.result["revision"] = after_doc["images"].get(p["name"], {})
            if self.module._diff:
                self.result.setdefault("diff", []).append(
                    {
                        "before_header": self.store.where,
                        "before": catalog.dump(before_doc),
                        "after": catalog.dump(after_doc),
                    }
                )
        self.module.exit_json(**self.result)

    def check_replicas(self, image, storage_class):
        self.result["storage_class"] = storage_class
        found = self.module.get("storage.k8s.io/v1", "StorageClass", storage_class)
        if found is None:
            self.fail(
                "StorageClass %s named by the image's status.storageClassName does not exist" % storage_class
            )
        in_force = (found.get("parameters") or {}).get("numberOfReplicas")
        self.result["replicas_in_force"] = int(in_force) if str(in_force or "").isdigit() else in_force
        if self.p["replicas"] is None or str(in_force) == str(self.p["replicas"]):
            return
        classes = self.module.list("storage.k8s.io/v1", "StorageClass")
        template, why = hi.winning_template(image, classes)
        self.fail(hi.replica_trap(self.p["replicas"], in_force, storage_class, template, why))

    def _pending(self, name, namespace, what):
        return "%s %s/%s to be %s" % (KIND, namespace, name, what)

    def wait_imported(self, name, namespace, current, seen):
        def imported(obj):
            if hi.is_true(obj, "Imported"):
                return True, None
            return False, hi.failure(obj)

        def progress(obj):
            value = hi.progress(obj)
            if obj is not None and value != seen[-1]:
                seen.append(value)

        try:
            obj, duration = self.module.wait(
                API,
                KIND,
                name,
                namespace,
                imported,
                hi.describe,
                self._pending(name, namespace, "Imported=True"),
                self.p["wait_timeout"],
                self.p["wait_sleep"],
                progress=progress,
            )
        except WaitError as exc:
            last = exc.last if exc.last is not None else current
            self.result.update(image=last or {}, progress=hi.progress(last), progress_seen=seen)
            storage_class = ((last or {}).get("status") or {}).get("storageClassName")
            if storage_class:
                self.result["storage_class"] = storage_class
            self.module.fail_from_wait(exc, **self.result)
        self.result["duration"] = round(self.result["duration"] + duration, 3)
        return obj

    def upload(self, name, namespace, current):
        """POST the file to Harvester's upload action once the image is initialized."""
        try:
            current, duration = self.module.wait(
                API,
                KIND,
                name,
                namespace,
                lambda obj: (hi.is_true(obj, "Initialized"), hi.failure(obj)),
                hi.describe,
                self._pending(name, namespace, "Initialized=True before the upload"),
                self.p["wait_timeout"],
                self.p["wait_sleep"],
            )
        except WaitError as exc:
            self.result.update(image=exc.last or current or {})
            self.module.fail_from_wait(exc, **self.result)
        self.result["duration"] = round(duration, 3)
        api = self.module.client.client.client
        base = (self.p["harvester_url"] or api.configuration.host).rstrip("/")
        headers = {"Content-Type": "multipart/form-data", "Accept": "application/json"}
        api.update_params_for_auth(headers, [], ["BearerToken"])
        with open(self.p["src"], "rb") as handle:
            data = handle.read()
        self.module.mutations += 1
        try:
            api.rest_client.request(
                "POST",
                base + hi.UPLOAD_PATH % (namespace, name),
                query_params=[("action", "upload"), ("size", str(len(data)))],
                headers=headers,
                post_params=[("chunk", (os.path.basename(self.p["src"]), data, "application/octet-stream"))],
                _request_timeout=max(60, self.p["wait_timeout"]),
            )
        except Exception as exc:
            self.module.fail_from_exception(
                "upload %s to %s %s/%s" % (self.p["src"], KIND, namespace, name), exc
            )
        return self.module.get(API, KIND, name, namespace) or current

    # state=absent ------------------------------------------------------------------------------

    def absent(self):
        p = self.p
        name, namespace = hi.image_name(p["name"], self.os_version()), p["namespace"]
        existing = self.module.get(API, KIND, name, namespace)
        if existing is None:
            self.module.exit_json(**self.result)
        self.result["image"] = existing
        storage_class = (existing.get("status") or {}).get("storageClassName")
        if storage_class:
            self.result["storage_class"] = storage_class
            users = sorted(
                "%s/%s" % (c["metadata"]["namespace"], c["metadata"]["name"])
                for c in self.module.list("v1", "PersistentVolumeClaim")
                if (c.get("spec") or {}).get("storageClassName") == storage_class
            )
            if users:
                self.fail(
                    "refusing to delete %s %s/%s (revision %s): PersistentVolumeClaim %s use its "
                    "StorageClass %s; repave or delete those disks first"
                    % (KIND, namespace, name, p["name"], ", ".join(users), storage_class),
                    pvcs=users,
                )
        changed = self.module.delete(API, KIND, name, namespace, before=existing)
        self.result["changed"] = changed
        if self.module._diff:
            self.result["diff"] = [
                dict(object_diff(existing, None), before_header="%s %s/%s" % (KIND, namespace, name))
            ]
        if changed and p["wait"] and not self.module.check_mode:
            try:
                _observed, duration = self.module.wait(
                    API,
                    KIND,
                    name,
                    namespace,
                    lambda obj: (obj is None, None),
                    hi.describe,
                    self._pending(name, namespace, "deleted"),
                    p["wait_timeout"],
                    p["wait_sleep"],
                )
            except WaitError as exc:
                self.module.fail_from_wait(exc, **self.result)
            self.result["duration"] = round(duration, 3)
        self.result["image"] = {}
        self.module.exit_json(**self.result)


def main():
    module = KubeModule(
        argument_spec=argument_spec(),
        supports_check_mode=True,
        mutually_exclusive=[("url", "src")],
        required_if=[("state", "present", ("url", "src"), True)],
    )
    try:
        if module.params["wait_sleep"] < 1 or module.params["wait_timeout"] < 0:
            module.fail_json(msg="wait_sleep must be at least 1 and wait_timeout at least 0 (seconds)")
        runner = BakedImage(module)
        getattr(runner, module.params["state"])()
    except PipelineError as exc:
        module.fail_json(**exc.result)


if __name__ == "__main__":
    main()
