# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Harvester VirtualMachineImages of baked revisions: the definition, its identity, its import state,
and the replica trap.

Pure: no I/O. Facts from Harvester (``pkg/apis/harvesterhci.io/v1beta1/image.go``, ``pkg/image``):
the source, displayName and storageClassParameters are immutable; the controller reports
``Initialized``, ``Imported`` (Unknown while importing) and ``RetryLimitExceeded`` once ``failed``
exceeds ``retry``; the image's StorageClass is ``status.storageClassName`` (never computed here).
Its ``numberOfReplicas`` comes from a template class when one applies (annotation
``harvesterhci.io/storageClassName``, else the cluster default if it is a Longhorn class), whatever
the request said.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.goldenimage.pipeline.plugins.module_utils import eol, revision

API_VERSION = "harvesterhci.io/v1beta1"
KIND = "VirtualMachineImage"
LONGHORN = "driver.longhorn.io"
SC_ANNOTATION = "harvesterhci.io/storageClassName"
DEFAULT_CLASS_ANNOTATIONS = (
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
)
REVISION_LABEL = "goldenimage.io/revision"
OS_LABEL = "goldenimage.io/os-version"
PG_LABEL = "goldenimage.io/pg-majors"
PG_MAJOR_LABEL = "pg.goldenimage.io/"  # + major: "true", so a selector can ask for one major
UPLOAD_PATH = "/v1/harvester/harvesterhci.io.virtualmachineimages/%s/%s"
_SHA512 = re.compile(r"^[0-9a-f]{128}$")


class ImageError(ValueError):
    """A request the rules refuse; the message names the field and the fix."""


def normalize_checksum(value):
    """SHA-512 hex, as Longhorn checks it; ``sha512:`` prefix and upper case accepted."""
    if value is None or str(value).strip() == "":
        return None
    text = str(value).strip().lower()
    if text.startswith("sha512:"):
        text = text[len("sha512:") :]
    if not _SHA512.match(text):
        raise ImageError(
            "checksum must be the SHA-512 of the image (128 hex digits): Harvester passes it to Longhorn, "
            "which verifies SHA-512 only"
        )
    return text


def image_name(name, os_version):
    """The object name and displayName: the artifact name without ``.qcow2``."""
    artifact = revision.artifact_name(name, os_version)
    return artifact[: -len(revision.ARTIFACT_EXTENSION)]


def labels(name, os_version, pg_versions):
    majors = sorted({eol.normalize_pg_major(v) for v in pg_versions}, key=int)
    result = {REVISION_LABEL: name, OS_LABEL: os_version, PG_LABEL: "-".join(majors)}
    result.update((PG_MAJOR_LABEL + major, "true") for major in majors)
    return result


def definition(
    namespace, name, os_version, pg_versions, checksum, url=None, replicas=None, retry=3, storage_class=None
):
    """The VirtualMachineImage of revision ``name``: download from ``url``, else upload."""
    try:
        rev = revision.validate_revision(name, os_version)
    except ValueError as exc:
        raise ImageError(str(exc)) from exc
    obj_name = image_name(name, os_version)
    tags = labels(name, rev.os_stream, pg_versions)
    spec = {
        "displayName": obj_name,
        "sourceType": "download" if url else "upload",
        "retry": retry,
        "description": "PostgreSQL %s on Ubuntu %s, built %s"
        % (tags[PG_LABEL].replace("-", ", "), rev.os_stream, rev.date.isoformat()),
    }
    if url:
        spec["url"] = url
    if checksum:
        spec["checksum"] = checksum
    if replicas is not None:
        spec["storageClassParameters"] = {"numberOfReplicas": str(replicas)}
    meta = {"name": obj_name, "namespace": namespace, "labels": tags}
    if storage_class:
        meta["annotations"] = {SC_ANNOTATION: storage_class}
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta, "spec": spec}


def source_of(obj):
    """What the catalog records as the source: the download URL, or ``upload``."""
    spec = (obj or {}).get("spec") or {}
    return spec.get("url") if spec.get("sourceType") == "download" else "upload"


def identity_changes(existing, desired):
    """Immutable fields in which ``existing`` differs from ``desired`` (``[(field, old, new)]``)."""
    old, new = existing.get("spec") or {}, desired.get("spec") or {}
    changes = []
    for key in ("sourceType", "url", "displayName"):
        if (old.get(key) or "") != (new.get(key) or ""):
            changes.append((key, old.get(key), new.get(key)))
    if new.get("checksum") and (old.get("checksum") or "").lower() != new["checksum"]:
        changes.append(("checksum", old.get("checksum"), new["checksum"]))
    wanted = ((desired.get("metadata") or {}).get("annotations") or {}).get(SC_ANNOTATION)
    have = ((existing.get("metadata") or {}).get("annotations") or {}).get(SC_ANNOTATION)
    if wanted and wanted != have:
        changes.append(("storage class", have, wanted))
    return changes


# ------------------------------------------------------------------------- import state


def condition(obj, ctype):
    for cond in ((obj or {}).get("status") or {}).get("conditions") or ():
        if cond.get("type") == ctype:
            return cond
    return None


def is_true(obj, ctype):
    cond = condition(obj, ctype)
    return bool(cond) and cond.get("status") == "True"


def progress(obj):
    value = ((obj or {}).get("status") or {}).get("progress")
    return int(value) if isinstance(value, int) else 0


def failure(obj):
    """Why the import will not finish by itself, or None while it may."""
    if is_true(obj, "RetryLimitExceeded"):
        cond = condition(obj, "RetryLimitExceeded")
        return "RetryLimitExceeded after %s failed attempts: %s" % (
            ((obj.get("status") or {}).get("failed")),
            cond.get("message") or "no message",
        )
    imported = condition(obj, "Imported")
    if imported and imported.get("status") == "False" and imported.get("reason") == "UploadFailed":
        return "upload failed: %s" % (imported.get("message") or "no message")
    return None


def describe(obj):
    """One line for wait messages: progress and every condition with reason and message."""
    if obj is None:
        return "the VirtualMachineImage does not exist"
    status = obj.get("status") or {}
    if not status.get("conditions"):
        return "progress %d%%, no conditions yet (the image controller has not picked it up)" % progress(obj)
    parts = []
    for cond in status["conditions"]:
        text = "%s=%s" % (cond.get("type"), cond.get("status"))
        detail = ": ".join(x for x in (cond.get("reason"), cond.get("message")) if x)
        parts.append("%s (%s)" % (text, detail) if detail else text)
    failed = " failed %s," % status["failed"] if status.get("failed") else ""
    return "progress %d%%,%s conditions %s" % (progress(obj), failed, ", ".join(parts))


# ---------------------------------------------------------------------------- replicas


def is_default_class(storage_class):
    notes = ((storage_class or {}).get("metadata") or {}).get("annotations") or {}
    return any(notes.get(key) == "true" for key in DEFAULT_CLASS_ANNOTATIONS)


def winning_template(image, classes):
    """``(class name, why)`` of the template whose parameters Harvester used, or ``(None, None)``."""
    named = (((image or {}).get("metadata") or {}).get("annotations") or {}).get(SC_ANNOTATION)
    by_name = dict(((c.get("metadata") or {}).get("name"), c) for c in classes)
    if named:
        found = by_name.get(named)
        if found is not None and found.get("provisioner") == LONGHORN:
            return named, "named by the annotation %s on the image" % SC_ANNOTATION
        return None, None
    for storage_class in classes:
        if is_default_class(storage_class) and storage_class.get("provisioner") == LONGHORN:
            return storage_class["metadata"]["name"], "the cluster default StorageClass"
    return None, None


def replica_trap(requested, in_force, storage_class_name, template, why):
    """The failure message when the replica count in force is not the one requested, else None."""
    if requested is None or str(in_force) == str(requested):
        return None
    if template:
        cause = (
            "Harvester took the parameters of the Longhorn StorageClass %s (%s), which has "
            "numberOfReplicas=%s, and ignored storageClassParameters.numberOfReplicas"
            % (template, why, in_force)
        )
        fix = (
            'set numberOfReplicas: "%s" on %s, or annotate the image with %s naming a Longhorn class '
            "that has %s replicas, then delete this image and register the revision again"
            % (requested, template, SC_ANNOTATION, requested)
        )
    else:
        cause = "the StorageClass holds numberOfReplicas=%s" % in_force
        fix = "delete this image and register it again with the replica count you need"
    return "replicas: asked for %s copies but StorageClass %s has numberOfReplicas=%s: %s. To fix it: %s" % (
        requested,
        storage_class_name,
        in_force,
        cause,
        fix,
    )
