# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Where the catalog lives: a ConfigMap (key ``catalog.yaml``) or a YAML file (to keep it in Git).

Writers are safe against each other: a change is read-modify-write with the ConfigMap's
resourceVersion, and a 409 (someone wrote in between) re-reads and re-applies the change, which
may then be refused by the rules on the newer document. In check mode nothing is written.

Every write stores the catalog as ``catalog.dump`` makes it, with no signed URL or user-info in any
entry. A stored catalog that holds one (an entry written by an older release or by hand) counts as a
change for any update, so the next write rewrites it, and a warning names the revisions (never the URL).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import tempfile

from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import catalog
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import _retry
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import ref, status_code

MANAGED_BY = {"app.kubernetes.io/managed-by": "goldenimage.pipeline"}


def catalog_options(required=False):
    """The ``catalog`` option of the modules that read or write the catalog."""
    return dict(
        type="dict",
        required=required,
        options=dict(
            namespace=dict(type="str"),
            name=dict(type="str"),
            path=dict(type="path"),
            trust=dict(type="dict"),
        ),
        mutually_exclusive=[("path", "name"), ("path", "namespace")],
        required_one_of=[("path", "name")],
        required_together=[("namespace", "name")],
    )


def describe(spec):
    if spec.get("path"):
        return "catalog file %s" % spec["path"]
    return "catalog ConfigMap %s/%s" % (spec["namespace"], spec["name"])


def locate(spec):
    """``(kind, namespace, name)`` of a catalog: the record shape a consumer names it with."""
    if spec.get("path"):
        return ("catalog file", None, spec["path"])
    return ("ConfigMap", spec["namespace"], spec["name"])


def find_catalogs(module):
    """Every ConfigMap in the cluster holding a catalog (key ``catalog.yaml``): ``[(spec, doc)]``.

    Whoever wrote it (this collection, kubectl, the operator's chart), an image recorded there may be
    handed to new databases, so a delete asks all of them. A ConfigMap whose ``catalog.yaml`` does not
    read as a catalog is reported by name in ``unreadable`` rather than skipped silently.
    """
    found, unreadable = [], []
    for obj in module.list("v1", "ConfigMap"):
        text = ((obj.get("data") or {}).get(catalog.DATA_KEY)) if isinstance(obj.get("data"), dict) else None
        if text is None:
            continue
        meta = obj.get("metadata") or {}
        spec = {"namespace": meta.get("namespace"), "name": meta.get("name")}
        try:
            found.append((spec, catalog.load(text)))
        except catalog.CatalogError as exc:
            unreadable.append("%s: %s" % (describe(spec), exc.msg))
    return found, unreadable


class CatalogStore:
    def __init__(self, module, spec):
        self.module = module
        self.spec = spec
        self.where = describe(spec)
        self.locator = locate(spec)
        self._warned = False
        self.conflicts = _retry.conflicts()  # a write that lost a race reads again and re-applies

    def missing_permission(self):
        """The grant a write of this catalog needs, as an RBAC rule reads."""
        if self.spec.get("path"):
            return "write access to the file %s" % self.spec["path"]
        return "get, create and update on configmaps in namespace %s" % self.spec["namespace"]

    # --- reads
    def read(self):
        """The catalog document (empty when the ConfigMap or file does not exist yet)."""
        if self.spec.get("path"):
            return self._load(self._read_file())
        return self._load(self._configmap_text(self._get_configmap()))

    def _load(self, text):
        """The stored catalog, refused unless its trust section is the one the caller pins."""
        doc = catalog.load(text)
        catalog.check_trust_pin(doc, self.spec.get("trust"), self.where)
        return doc

    def _read_file(self):
        path = self.spec["path"]
        if not os.path.exists(path):
            return ""
        with open(path, "r") as handle:
            return handle.read()

    def _get_configmap(self):
        return self.module.get("v1", "ConfigMap", self.spec["name"], self.spec["namespace"])

    @staticmethod
    def _configmap_text(obj):
        return ((obj or {}).get("data") or {}).get(catalog.DATA_KEY, "")

    # --- read-modify-write
    def update(self, change):
        """Apply ``change(doc) -> (new_doc, changed)``; returns ``(before, after, changed)``.

        ``change`` raises ``catalog.CatalogError`` to refuse; it may run more than once when
        another writer wins a race, always on the newest document.
        """
        if self.spec.get("path"):
            return self._update_file(change)

        def once():
            current = self._get_configmap()
            before, after, changed = self._apply(self._configmap_text(current), change)
            text = catalog.dump(after) if changed else None
            if text is not None:
                try:
                    catalog.check_configmap_size(text, self.where)
                except catalog.CatalogError as exc:
                    raise PipelineError(exc.msg, refused=True) from None
            if not changed or self.module.check_mode:
                return before, after, changed
            if not self._write_configmap(current, text):
                raise _retry.Again("409 Conflict")
            return before, after, True

        def give_up(_exc, attempts):
            raise PipelineError(
                "update %s: still conflicting after %d attempts (other writers keep changing it)"
                % (self.where, attempts.tried)
            ) from None

        return self.conflicts.run(once, lambda _exc, _attempts: None, give_up)

    def _apply(self, text, change):
        """``(before, after, changed)`` of ``change`` on the stored ``text``; a stored entry holding a
        secret makes it a change, said once per catalog in a warning."""
        before = self._load(text)
        after, changed = change(before)
        leaked = catalog.unstorable(text)
        if leaked and not self._warned:
            self._warned = True
            self.module.warn(
                "%s: the entries of %s held a signed URL or credentials, which a catalog never keeps; %s "
                "without them"
                % (
                    self.where,
                    ", ".join(leaked),
                    "the catalog would be written" if self.module.check_mode else "the catalog is written",
                )
            )
        return before, after, changed or bool(leaked)

    def _write_configmap(self, current, text):
        """Create or replace with the read resourceVersion; False on a 409 (retry on newer data)."""
        namespace, name = self.spec["namespace"], self.spec["name"]
        res = self.module.resource("v1", "ConfigMap")
        self.module.mutations += 1
        try:
            if current is None:
                body = {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY)},
                    "data": {catalog.DATA_KEY: text},
                }
                res.create(body=body, namespace=namespace)
            else:
                body = dict(current)
                body["data"] = dict(current.get("data") or {}, **{catalog.DATA_KEY: text})
                res.replace(body=body, name=name, namespace=namespace)
        except Exception as exc:
            # A reply lost after the server committed (a retried write then meets its own commit as a 409):
            # the catalog read back holds what was sent.
            if self._configmap_text(self._reread()) == text:
                return True
            if status_code(exc) == 409:
                return False
            self.module.fail_from_exception("write %s" % ref("ConfigMap", name, namespace), exc)
        return True

    def _reread(self):
        try:
            return self._get_configmap()
        except Exception:  # the server is still unreachable: the write's own error is the one to report
            return None

    def _update_file(self, change):
        before, after, changed = self._apply(self._read_file(), change)
        if changed and not self.module.check_mode:
            write_file(self.spec["path"], catalog.dump(after))
        return before, after, changed


def write_file(path, text):
    """Write atomically: a reader never sees half a catalog."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        os.makedirs(directory)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".catalog-")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except Exception:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
