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

import json
import re

from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import catalog, eol, revision
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import redact
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import consumers
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import kinds

API_VERSION = kinds.HARVESTER
KIND = "VirtualMachineImage"
LONGHORN = "driver.longhorn.io"
SC_ANNOTATION = "harvesterhci.io/storageClassName"
IMAGE_ID_ANNOTATION = "harvesterhci.io/imageId"  # "<ns>/<image>" on the OS disk claims of a VM
VCT_ANNOTATION = "harvesterhci.io/volumeClaimTemplates"  # a VM's disks, a JSON list of claims
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


class ImageError(PipelineError):
    """A request the rules refuse; the message names the field and the fix."""

    def __init__(self, msg, **fields):
        fields.setdefault("refused", True)
        super(ImageError, self).__init__(msg, **fields)


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
    except PipelineError as exc:
        raise ImageError(exc.msg) from exc
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
    """What the catalog records as the source: the download URL, or ``upload``.

    A presigned URL is a bearer credential until it expires and differs on every signing: the catalog
    keeps the object's URL without its query (bucket, key and the checksum identify the bytes).
    """
    spec = kinds.spec(obj)
    if spec.get("sourceType") != "download":
        return "upload"
    return stored_url(spec.get("url"))


def stored_url(url):
    """The form of a download URL that may be stored: a signed query stripped, anything else redacted."""
    return redact.storable_url(url)


def same_url(old, new):
    """Two download URLs name the same object: equal, or equal once a signature is stripped."""
    if (old or "") == (new or ""):
        return True
    if redact.signed(old) or redact.signed(new):
        return redact.strip_query(old or "") == redact.strip_query(new or "")
    return False


def check_url(url):
    """Refuse a download URL with credentials in it, before anything is written."""
    if url:
        redact.refuse_credentials(
            url,
            "url",
            "keep the bucket private and give Harvester a presigned URL (the harvester_upload role's "
            "harvester_upload_url_mode: presigned, or goldenimage.pipeline.bucket_object_url), or upload the "
            "file with src",
        )
    return url


def check_request(revision_name, replicas, retry):
    """The numeric options of a registration, refused before anything is written."""
    subject = "revision %s" % revision_name
    if replicas is not None and replicas < 1:
        raise Refusal(
            subject, "replicas is %s; an image needs at least one copy" % replicas, "give 1 or more"
        )
    if not 0 <= retry <= 10:
        raise Refusal(subject, "retry is %s, outside Harvester's range 0 to 10" % retry, "give 0 to 10")


def check_versions(revision_name, os_version, pg_versions):
    """A registration labels the image with its OS stream and its PostgreSQL majors: both are given."""
    subject = "revision %s" % revision_name
    if not pg_versions:
        raise Refusal(
            subject, "pg_versions is required with state=present", "name the PostgreSQL majors baked in"
        )
    if not os_version:
        raise Refusal(
            subject, "os_version is required with state=present", 'give the OS stream, e.g. "24.04"'
        )


def revision_stream(revision_name, os_version=None):
    """The OS stream of a revision: its name checked against ``os_version`` when given, else read from
    the name (``v20261201-2404`` is 24.04). A name that does not say so is refused."""
    try:
        if os_version:
            return revision.validate_revision(revision_name, os_version).os_stream
        return revision.parse_revision(revision_name).os_stream
    except PipelineError as exc:
        raise ImageError(exc.msg) from None


def check_src_checksum(src, actual, given):
    """The checksum of an uploaded file: computed from it, and equal to the one given if any."""
    if given and given != actual:
        raise Refusal(
            "src %s" % src,
            "its SHA-512 is %s, not the checksum given (%s)" % (actual, given),
            "give the file's checksum, or the file the checksum belongs to",
        )
    return actual


def check_artifact_checksum(revision, artifact, actual, registered):
    """The facts are read from the bytes registered: the artifact's SHA-512 is the registered checksum."""
    if registered and normalize_checksum(registered) != actual:
        raise Refusal(
            "revision %s (artifact %s)" % (revision, artifact),
            "its SHA-512 is %s, but the bytes registered are %s: the facts read from it would describe "
            "another image, and nothing was written" % (actual, normalize_checksum(registered)),
            "give as artifact the very file registered (src, or the file url serves)",
        )


def identity_changes(existing, desired):
    """Immutable fields in which ``existing`` differs from ``desired`` (``[(field, old, new)]``).

    URLs are compared (and reported) without their signature: signing the same object again is the
    same source.
    """
    old, new = kinds.spec(existing), kinds.spec(desired)
    changes = []
    for key in ("sourceType", "displayName"):
        if (old.get(key) or "") != (new.get(key) or ""):
            changes.append((key, old.get(key), new.get(key)))
    if not same_url(old.get("url"), new.get("url")):
        changes.append(("url", redact.redact_url(old.get("url")), redact.redact_url(new.get("url"))))
    if new.get("checksum") and (old.get("checksum") or "").lower() != new["checksum"]:
        changes.append(("checksum", old.get("checksum"), new["checksum"]))
    wanted = kinds.annotations(desired).get(SC_ANNOTATION)
    have = kinds.annotations(existing).get(SC_ANNOTATION)
    if wanted and wanted != have:
        changes.append(("storage class", have, wanted))
    return changes


def refuse_changed_source(existing, desired, revision_name):
    """Refuse registering ``revision_name`` again with another source: images are immutable."""
    changes = identity_changes(existing, desired)
    if changes:
        detail = "; ".join("%s is %r, asked %r" % change for change in changes)
        raise Refusal(
            "%s %s (revision %s)" % (KIND, kinds.ref(existing), revision_name),
            "it exists with another source: %s. Images are immutable" % detail,
            "build a new revision",
            image=printable(existing),
        )


def printable(obj):
    """A copy of an image as it may be printed or returned: its download URL as the catalog stores it
    (a signed query dropped whole, user-info and token values masked)."""
    if not obj:
        return obj or {}
    url = kinds.spec(obj).get("url")
    if not url or stored_url(url) == url:
        return obj
    result = dict(obj, spec=dict(obj["spec"], url=stored_url(url)))
    status = kinds.status(obj)
    if status.get("appliedUrl"):
        result["status"] = dict(status, appliedUrl=stored_url(status["appliedUrl"]))
    return result


# ------------------------------------------------------------------------------ consumers


# One thing that uses an image: the record every delete guard of the collection speaks.
consumer = consumers.consumer


def _uses_image(claim, image_id, storage_class):
    if kinds.annotations(claim).get(IMAGE_ID_ANNOTATION) == image_id:
        return "its annotation %s names the image" % IMAGE_ID_ANNOTATION
    if storage_class and kinds.spec(claim).get("storageClassName") == storage_class:
        return "it is on the image's StorageClass %s" % storage_class
    return None


def image_consumers(image, revision_name, catalogs=(), dbinstances=(), claims=(), vms=()):
    """Who uses ``image`` (the VirtualMachineImage of ``revision_name``): ``[{kind, namespace, name, why}]``.

    The reference rules, decided here once:
    - a catalog (``[(where, doc)]``, ``where`` = ``(kind, namespace, name)``) whose stream tip is this
      revision and records this image (or no image at all): the operator gives it to new databases;
    - a DBInstance whose ``status.appliedSpec.imageRevision`` is the revision, or that is repaving onto it
      (``status.repave.targetRevision``): its OS disk was or is being made from the image;
    - a PersistentVolumeClaim on the image's StorageClass or carrying its ``harvesterhci.io/imageId``
      (Harvester itself refuses the delete while one exists);
    - a VirtualMachine whose ``harvesterhci.io/volumeClaimTemplates`` name the image or its class, or whose
      annotation cannot be read (then nobody can say it does not).
    """
    ref = {"namespace": kinds.namespace(image), "name": kinds.name(image)}
    image_id = "%s/%s" % (ref["namespace"], ref["name"])
    storage_class = storage_class_of(image)
    found = []
    for (kind, namespace, name), doc in catalogs:
        for stream, why in catalog.tips_using(doc, revision_name, ref):
            found.append(consumer(kind, namespace, name, "serves it as stream %s: %s" % (stream, why)))
    for db in dbinstances:
        state = kinds.status(db)
        applied = (state.get("appliedSpec") or {}).get("imageRevision")
        target = (state.get("repave") or {}).get("targetRevision")
        why = None
        if applied == revision_name:
            why = "runs on it: its applied revision is %s (phase %s)" % (
                applied,
                state.get("phase") or "unknown",
            )
        elif target == revision_name:
            why = "is repaving onto it: its target revision is %s" % target
        if why:
            found.append(consumer(db.get("kind") or "DBInstance", kinds.namespace(db), kinds.name(db), why))
    for claim in claims:
        why = _uses_image(claim, image_id, storage_class)
        if why:
            found.append(
                consumer(
                    "PersistentVolumeClaim", kinds.namespace(claim), kinds.name(claim), "uses it: " + why
                )
            )
    for vm in vms:
        text = kinds.annotations(vm).get(VCT_ANNOTATION)
        if not text:
            continue
        try:
            templates = json.loads(text)
        except ValueError:
            templates = None
        if not isinstance(templates, list):
            found.append(
                consumer(
                    "VirtualMachine",
                    kinds.namespace(vm),
                    kinds.name(vm),
                    "may use it: its annotation %s does not parse, so it may declare a disk of the image"
                    % VCT_ANNOTATION,
                )
            )
            continue
        for template in templates:
            why = _uses_image(template if isinstance(template, dict) else {}, image_id, storage_class)
            if why:
                found.append(
                    consumer(
                        "VirtualMachine",
                        kinds.namespace(vm),
                        kinds.name(vm),
                        "uses it: its disk %s in %s: %s" % (kinds.name(template), VCT_ANNOTATION, why),
                    )
                )
                break
    return found


def refuse_delete(image, revision_name, found):
    """Refuse deleting an image something uses, naming each consumer; None when nothing does."""
    pvcs = sorted(
        "%s/%s" % (c["namespace"], c["name"]) for c in found or [] if c["kind"] == "PersistentVolumeClaim"
    )
    return consumers.refuse_delete(
        "%s %s (revision %s)" % (KIND, kinds.ref(image), revision_name),
        found,
        "move the stream tip to another revision (goldenimage.pipeline.baked_image_stream), repave those "
        "databases (goldenimage.pipeline.dbinstance_repave) and delete the disks and VMs left on it first",
        pvcs=pvcs,
    )


# ------------------------------------------------------------------------- import state


def imported(obj):
    """Harvester reports the image ``Imported=True``: its backing image is ready for disks."""
    return kinds.condition_true(obj, "Imported")


def initialized(obj):
    return kinds.condition_true(obj, "Initialized")


def storage_class_of(obj):
    """``status.storageClassName``: the image's own StorageClass (never computed)."""
    return kinds.status(obj).get("storageClassName")


def progress(obj):
    value = kinds.status(obj).get("progress")
    return int(value) if isinstance(value, int) else 0


def phase(obj):
    """Where the import of an image is: absent, initializing, importing, imported or failed."""
    if obj is None:
        return "absent"
    if imported(obj):
        return "imported"
    if failure(obj):
        return "failed"
    if not (initialized(obj) and storage_class_of(obj)):
        return "initializing"
    return "importing"


def round_line(namespace, name, obj, elapsed):
    """The line printed after each round of the wait: phase, percent and time since the wait began."""
    return "%s %s/%s: phase %s, progress %d%% after %.1fs" % (
        KIND,
        namespace,
        name,
        phase(obj),
        progress(obj),
        elapsed,
    )


def timeout_message(pending, elapsed, seen, stuck, state):
    """The time-out of the whole wait (every round of it), naming what was still pending."""
    if stuck and len(set(seen)) <= 1:
        verdict = "stuck: the progress did not change in %ds" % int(elapsed)
    else:
        verdict = "still working: progress went %s" % " -> ".join("%d%%" % v for v in seen)
    return "timed out after %.1fs waiting for %s (%s); last observed: %s" % (elapsed, pending, verdict, state)


def failure(obj):
    """Why the import will not finish by itself, or None while it may."""
    if kinds.condition_true(obj, "RetryLimitExceeded"):
        cond = kinds.condition(obj, "RetryLimitExceeded")
        return "RetryLimitExceeded after %s failed attempts: %s" % (
            kinds.status(obj).get("failed"),
            _scrub(obj, cond.get("message") or "no message"),
        )
    done = kinds.condition(obj, "Imported")
    if done and done.get("status") == "False" and done.get("reason") == "UploadFailed":
        return "upload failed: %s" % _scrub(obj, done.get("message") or "no message")
    return None


def _scrub(obj, text):
    """A controller message with the image's own URL in it, as it may be printed (redacted)."""
    url = kinds.spec(obj).get("url")
    if url and isinstance(text, str) and url in text:
        return text.replace(url, redact.redact_url(url))
    return text


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
        detail = ": ".join(_scrub(obj, x) for x in (cond.get("reason"), cond.get("message")) if x)
        parts.append("%s (%s)" % (text, detail) if detail else text)
    failed = " failed %s," % status["failed"] if status.get("failed") else ""
    return "progress %d%%,%s conditions %s" % (progress(obj), failed, ", ".join(parts))


# ---------------------------------------------------------------------------- replicas


def is_default_class(storage_class):
    notes = kinds.annotations(storage_class)
    return any(notes.get(key) == "true" for key in DEFAULT_CLASS_ANNOTATIONS)


def winning_template(image, classes):
    """``(class name, why)`` of the template whose parameters Harvester used, or ``(None, None)``."""
    named = kinds.annotations(image).get(SC_ANNOTATION)
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


# ------------------------------------------------------------------- half-done work, said as it is


def _retry_move(missing_permission):
    if missing_permission:
        return "grant %s, then run the task again" % missing_permission
    return "run the task again"


def not_recorded(image, revision_name, where, cause, missing_permission=None, fields=None):
    """The image is registered but the catalog write failed: say both, and how a rerun completes it.
    ``fields`` are the result fields the failure carries (the image, progress, ...)."""
    state = "Imported=True" if imported(image) else "not imported yet"
    fields = dict(fields or {}, registered=True, catalog_written=False)
    if missing_permission:
        fields["missing_permission"] = missing_permission
    return PipelineError(
        "%s %s is registered (%s, StorageClass %s) but revision %s is not recorded in %s: %s. Nothing was "
        "rolled back; %s: it finds the image and only records it"
        % (
            KIND,
            kinds.ref(image),
            state,
            storage_class_of(image) or "not known yet",
            revision_name,
            where,
            cause,
            _retry_move(missing_permission),
        ),
        **fields,
    )


def still_imported(ref, deleted, revision_name, where, cause, missing_permission=None, fields=None):
    """The image is gone but a catalog still says ``imported: true``: say so and how a rerun fixes it."""
    fields = dict(fields or {}, catalog_written=False)
    if missing_permission:
        fields["missing_permission"] = missing_permission
    return PipelineError(
        "%s %s/%s is %s, but %s still says revision %s is imported: %s; %s"
        % (
            KIND,
            ref["namespace"],
            ref["name"],
            "deleted by this run" if deleted else "already gone",
            where,
            revision_name,
            cause,
            _retry_move(missing_permission),
        ),
        **fields,
    )


class ReplicaMismatch(PipelineError):
    """The replica count in force is not the one asked for (see ``backing_copies.replica_trap``)."""


def replica_mismatch_cleanup(exc, image, deleted, cleanup_error=None):
    """``exc`` (a ReplicaMismatch found at Initialized) told with what became of the image.

    An image this run created is deleted before its import completes (nothing can use it yet); one that
    existed before is left to its owner. Either way the revision is not recorded.
    """
    ref = "%s %s" % (KIND, kinds.ref(image))
    if deleted:
        exc.msg = (
            "%s [%s, created by this run, was deleted before its import finished; nothing was recorded]"
            % (
                exc.msg,
                ref,
            )
        )
        exc.fields.update(registered=False, cleaned_up=True, catalog_written=False)
    elif cleanup_error:
        exc.msg = (
            "%s [%s, created by this run, is left behind: deleting it failed: %s; delete it with "
            "state=absent]" % (exc.msg, ref, cleanup_error)
        )
        exc.fields.update(registered=True, cleaned_up=False, catalog_written=False)
    else:
        exc.msg = "%s [%s was registered before this run and is left in place, not recorded]" % (exc.msg, ref)
        exc.fields.update(registered=True, cleaned_up=False, catalog_written=False)
    return exc


def left_behind(exc, image, created, where=None, check_mode=False):
    """``exc`` (a failure after the image was written) told with what this run leaves in place."""
    what = "%s %s" % (KIND, kinds.ref(image)) if image else "the VirtualMachineImage"
    note = "%s exists (%s)" % (what, "created by this run" if created else "registered before this run")
    if where:
        note += "; the revision is not recorded in %s" % where
    exc.msg = "%s [%s]" % (exc.msg, note)
    exc.fields.setdefault("registered", not check_mode)
    exc.fields.setdefault("catalog_written", False)
    return exc
