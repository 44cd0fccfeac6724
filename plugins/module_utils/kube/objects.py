# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""What applying a list of object definitions decides, before and after any request.

``goldenimage.pipeline.kube_object`` reads each object, asks ``pending`` which of the given fields the
object does not hold yet, and writes only those objects (a create, or a merge patch of the given fields).
Everything here is pure: the requests and their retries are the adapter's (``_kube.KubeModule``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import copy

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import redact
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import gate, golden
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import kinds

STATES = ("present", "patched", "absent")
PROPAGATION = ("Foreground", "Background", "Orphan")
# Fields a definition may not carry: the server owns them, and a copy of a read object must not pin them.
SERVER_METADATA = ("managedFields", "resourceVersion", "generation", "uid", "creationTimestamp", "selfLink")
# Keys whose values are Kubernetes quantities: the API server writes them back in canonical form
# (8388608 becomes 8Mi), which is the same value, not a change.
QUANTITY_PARENTS = ("requests", "limits", "capacity")
QUANTITY_KEYS = ("guest", "storage", "memory")
# What this module may delete: only what the collection itself made (the label its roles and modules
# set), never a golden, never a Harvester image. Those have their own delete paths, which ask who uses
# the object first; a generic delete must not be a way around them.
MANAGED_BY = ("app.kubernetes.io/managed-by", "goldenimage.pipeline")
GUARDED_DELETES = {
    ("snapshot.storage.k8s.io", "VolumeSnapshot"): "goldenimage.pipeline.golden_snapshot with state=absent",
    ("harvesterhci.io", "VirtualMachineImage"): "goldenimage.pipeline.baked_image with state=absent",
}
# What to do instead of a URL with a password inside an object the module writes.
URL_CREDENTIALS_MOVE = (
    "put the credentials in a Secret and reference it (for a bucket object a DataVolume's source.s3 with a "
    "secretRef, which CDI signs with; for a web server behind basic auth source.http.secretRef), or give a "
    "presigned URL (goldenimage.pipeline.bucket_object_url) for a bucket object"
)
HIDDEN = "<hidden>"
HIDDEN_CHANGED = "<hidden: changed>"


def ident(definition):
    """``(apiVersion, kind, name, namespace)`` of a definition."""
    meta = definition.get("metadata") or {}
    return definition.get("apiVersion"), definition.get("kind"), meta.get("name"), meta.get("namespace")


def describe(definition):
    _api, kind, name, namespace = ident(definition)
    return "%s %s/%s" % (kind, namespace, name) if namespace else "%s %s" % (kind, name)


def check_definitions(definitions, state):
    """Refuse, before any request, a definition the module cannot apply; name the first one at fault."""
    if state not in STATES:
        raise Refusal("option state (%r)" % (state,), "state is one of %s" % ", ".join(STATES), "pick one")
    if not definitions:
        raise Refusal(
            "option definitions",
            "at least one object is needed",
            "give the objects as a list of definitions (apiVersion, kind, metadata.name)",
        )
    seen = set()
    for index, definition in enumerate(definitions):
        where = "definitions[%d]" % index
        if not isinstance(definition, dict):
            raise Refusal(where, "a definition is a mapping", "give apiVersion, kind and metadata.name")
        api_version, kind, name, namespace = ident(definition)
        missing = [
            field
            for field, value in (("apiVersion", api_version), ("kind", kind), ("metadata.name", name))
            if not isinstance(value, str) or not value
        ]
        if missing:
            raise Refusal(
                "%s (%s)" % (where, describe(definition)),
                "it has no %s" % ", ".join(missing),
                "every object is named by apiVersion, kind and metadata.name (generateName is not supported: "
                "a rerun could not find the object it made)",
            )
        key = (api_version, kind, namespace, name)
        if key in seen:
            raise Refusal(
                "%s (%s)" % (where, describe(definition)),
                "the same object is listed twice",
                "give each object once, with all its fields",
            )
        seen.add(key)


def check_urls(definitions, namespace=None):
    """Refuse a URL with credentials in its user-info anywhere in a definition (a Secret aside, the place
    for credentials): the object stores it in its spec, and the module prints the object. ``namespace`` is
    the one a definition that names none goes to."""
    for index, definition in enumerate(definitions):
        if isinstance(definition, dict) and definition.get("kind") != "Secret":
            _api, kind, name, own = ident(definition)
            shown = describe({"kind": kind, "metadata": {"name": name, "namespace": own or namespace}})
            redact.refuse_credentials_in(
                definition, "definitions[%d] (%s)" % (index, shown), URL_CREDENTIALS_MOVE
            )


def namespace_of(definition, kind, namespace):
    """The namespace a namespaced object is written in; refused when neither source names one."""
    if not namespace:
        raise Refusal(
            describe(definition),
            "%s is namespaced and neither the definition nor option namespace names a namespace" % kind,
            "give metadata.namespace or namespace",
        )
    return namespace


def check_write(current, want=None):
    """Refuse to write over an object the server is deleting (the write would land on a dying object), and
    a write that would make deletable what was not: labelling someone else's object as the collection's
    would let ``state=absent`` delete it later."""
    since = ((current or {}).get("metadata") or {}).get("deletionTimestamp")
    if since:
        raise Refusal(
            describe(current),
            "it is being deleted (since %s); nothing was written" % since,
            "run again once it is gone",
        )
    if current and want and not deletable(current):
        labelled = copy.deepcopy(current)
        kinds.meta(labelled).setdefault("labels", {}).update(kinds.labels(want))
        if deletable(labelled):
            key, value = MANAGED_BY
            raise Refusal(
                describe(current),
                "it exists and was not made by this collection, and this write would label it %s=%s, "
                "which would let kube_object delete it; nothing was written" % (key, value),
                "name an object that does not exist yet, or leave the label out to change it in place",
            )


def deletable(current):
    """Whether ``check_delete`` lets kube_object delete ``current``."""
    try:
        check_delete(current)
    except Refusal:
        return False
    return True


def check_delete(current):
    """Refuse to delete ``current`` (the object as read) unless it is one of the collection's own
    intermediate objects. Decided from the object itself, never from the name the caller gave."""
    api_version = current.get("apiVersion") or ""
    group = api_version.split("/")[0] if "/" in api_version else ""
    if (group, current.get("kind")) == ("", "Namespace"):
        raise Refusal(
            describe(current),
            "deleting a namespace deletes everything in it (goldens, tenants' disks), and kube_object never "
            "deletes one",
            "delete it with kubectl once it is empty, if that is what you mean",
        )
    guarded = GUARDED_DELETES.get((group, current.get("kind")))
    if guarded or golden.observed_family(current):
        raise Refusal(
            describe(current),
            "a golden or a baked image is deleted only by its own module, which first asks who uses it",
            "delete it with %s" % (guarded or GUARDED_DELETES[("snapshot.storage.k8s.io", "VolumeSnapshot")]),
        )
    key, value = MANAGED_BY
    if kinds.labels(current).get(key) != value:
        raise Refusal(
            describe(current),
            "it was not made by this collection (no label %s=%s), and kube_object deletes only the "
            "collection's own intermediate objects" % (key, value),
            "delete it with kubectl or kubernetes.core.k8s if that is what you mean",
        )


def desired(definition, namespace=None):
    """The definition as it is sent: the namespace filled in, server-owned metadata dropped, and a Secret's
    ``stringData`` turned into ``data`` (the API server stores only ``data``, so a read never shows
    ``stringData`` and comparing it would report a change on every run)."""
    result = copy.deepcopy(definition)
    meta = result.setdefault("metadata", {})
    for key in SERVER_METADATA:
        meta.pop(key, None)
    if namespace and not meta.get("namespace"):
        meta["namespace"] = namespace
    if result.get("kind") == "Secret" and isinstance(result.get("stringData"), dict):
        data = result.setdefault("data", {}) or {}
        for key, value in result.pop("stringData").items():
            data[key] = base64.b64encode(str(value).encode("utf-8")).decode("ascii")
        result["data"] = data
    result.pop("status", None)
    return result


def _quantity_path(path):
    parts = [p.split("[")[0] for p in path.split(".")]
    if not parts:
        return False
    return parts[-1] in QUANTITY_KEYS or (len(parts) > 1 and parts[-2] in QUANTITY_PARENTS)


def _same_quantity(want, have):
    try:
        return gate.parse_quantity(want) == gate.parse_quantity(have)
    except Exception:
        return False


def _scalar_equal(want, have, path):
    if want == have:
        return True
    if isinstance(want, bool) or isinstance(have, bool):
        return False
    if isinstance(want, (int, float)) and isinstance(have, (int, float)):
        return float(want) == float(have)
    if isinstance(want, (str, int)) and isinstance(have, (str, int)) and _quantity_path(path):
        return _same_quantity(want, have)
    return False


def pending(want, have, path=""):
    """Paths of ``want`` that ``have`` does not hold (fields the server added are fine).

    A mapping holds another when it holds each of its keys; a list only when it has the same length and
    holds it item by item (a merge patch replaces a whole list); an empty value is held by a missing key;
    a quantity is held by the same value in another form.
    """
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return [path or "."]
        out = []
        for key, value in want.items():
            child = "%s.%s" % (path, key) if path else str(key)
            if key not in have:
                if value in (None, {}, [], ""):
                    continue
                out.append(child)
            else:
                out.extend(pending(value, have[key], child))
        return out
    if isinstance(want, list):
        if not isinstance(have, list) or len(have) != len(want):
            return [path or "."]
        out = []
        for index, item in enumerate(want):
            out.extend(pending(item, have[index], "%s[%d]" % (path, index)))
        return out
    if want is None:
        return [] if have is None else [path or "."]
    return [] if _scalar_equal(want, have, path) else [path or "."]


def patch_of(want):
    """The merge patch that makes an object hold ``want``: its fields, not its name or kind."""
    body = copy.deepcopy(want)
    meta = body.get("metadata") or {}
    for key in ("name", "namespace"):
        meta.pop(key, None)
    if not meta:
        body.pop("metadata", None)
    body.pop("apiVersion", None)
    body.pop("kind", None)
    return body


def hide_secret(obj, before=None):
    """A Secret with its values replaced by a marker (``before`` given: marked where they differ from it)."""
    if not isinstance(obj, dict) or obj.get("kind") != "Secret":
        return obj
    result = copy.deepcopy(obj)
    old = (before or {}).get("data") or {}
    for field in ("data", "stringData"):
        values = result.get(field)
        if isinstance(values, dict):
            result[field] = {
                key: (HIDDEN if before is None or old.get(key) == value else HIDDEN_CHANGED)
                for key, value in values.items()
            }
    return result


def secret_values(definitions, shortest=4):
    """Every value of the Secrets among ``definitions``, in each form it is given or stored (plain and
    base64), for the module to mask wherever it would echo them. Values shorter than ``shortest`` (flags
    such as ``0``) are left: masking them would blank every such character of the output."""
    found = set()
    for definition in definitions or []:
        if not isinstance(definition, dict) or definition.get("kind") != "Secret":
            continue
        for value in (definition.get("stringData") or {}).values():
            text = str(value)
            found.update((text, base64.b64encode(text.encode("utf-8")).decode("ascii")))
        for value in (definition.get("data") or {}).values():
            text = str(value)
            found.add(text)
            try:
                found.add(base64.b64decode(text, validate=True).decode("utf-8"))
            except (ValueError, UnicodeDecodeError):
                pass
    return {value for value in found if len(value) >= shortest}


def entry(definition, action, obj=None):
    """One line of the module's ``objects`` result."""
    api_version, kind, name, namespace = ident(definition)
    return {
        "api_version": api_version,
        "kind": kind,
        "name": name,
        "namespace": namespace,
        "action": action,
        "object": redact.redact_fields(hide_secret(obj)) if obj is not None else None,
    }


def summary(entries):
    """``"created 1, patched 0, ..."`` for the module's ``msg``: every action, with counts."""
    counts = {}
    for item in entries:
        counts[item["action"]] = counts.get(item["action"], 0) + 1
    return ", ".join("%s %d" % (action, counts[action]) for action in sorted(counts)) or "nothing to do"


def selector(values):
    """kubernetes.core's list of selectors as the one comma-joined selector the API takes."""
    if not values:
        return None
    return ",".join(str(v).strip() for v in values if str(v).strip()) or None
