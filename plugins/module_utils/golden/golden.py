# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The Kube-DC golden contract: names, keys, namespaces and validation.

Pure: no I/O. Every module and plugin that reads or writes a golden uses these rules, so the
contract is written down once. A golden is a Ready VolumeSnapshot in ``golden-images``
(Filesystem) or ``golden-images-block`` (Block) carrying the keys below. Producers vary; the
contract does not, so nothing here knows how a golden was made.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import json
import re

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import kinds
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance

SNAPSHOT_API_VERSION = "snapshot.storage.k8s.io/v1"
SNAPSHOT_KIND = "VolumeSnapshot"

PREFIX = "kube-dc.com/"
FAMILY_LABEL = "kube-dc.com/golden-os"
FAMILY_ANNOTATION = "kube-dc.com/os-family-id"
OS_NAME_ANNOTATION = "kube-dc.com/os-name"
MODE_KEY = "kube-dc.com/golden-mode"
ACTIVE_LABEL = "kube-dc.com/golden-active"
CLONE_MIN_SIZE_ANNOTATION = "kube-dc.com/clone-min-size"
# The released artifact's whole digest (the name keeps 12 hex digits of it), written at publish.
RELEASE_DIGEST = "goldenimage.pipeline/release-digest"
# What the golden's bytes hold, as read from them (image_facts): the document, compact JSON.
IMAGE_FACTS_ANNOTATION = "goldenimage.pipeline/image-facts"
# The verdict of the signature check made where the golden's source was imported (compact JSON).
PROVENANCE_ANNOTATION = "goldenimage.pipeline/provenance"

FILESYSTEM = "Filesystem"
BLOCK = "Block"
DEFAULT_MODE = FILESYSTEM
NAMESPACES = {FILESYSTEM: "golden-images", BLOCK: "golden-images-block"}

# Keys a producer stamps. The active label belongs to promotion and clone-min-size to the
# per-project seeder: a producer never writes either.
PRODUCER_LABELS = (FAMILY_LABEL, MODE_KEY)
PRODUCER_ANNOTATIONS = (FAMILY_ANNOTATION, OS_NAME_ANNOTATION, MODE_KEY)
KNOWN_KEYS = frozenset(
    (FAMILY_LABEL, FAMILY_ANNOTATION, OS_NAME_ANNOTATION, MODE_KEY, ACTIVE_LABEL, CLONE_MIN_SIZE_ANNOTATION)
)

_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DIGEST = re.compile(r"^(sha256:)?([0-9a-f]{64})$")
_DATE_FORMATS = ("%Y%m%d", "%Y-%m-%d")


class GoldenError(PipelineError):
    """An input that cannot make a valid golden; the message names the rule."""


def normalize_mode(value):
    """``Filesystem`` or ``Block`` from any casing; None means the default (Filesystem)."""
    if value is None or value == "":
        return DEFAULT_MODE
    text = str(value).strip()
    for mode in (FILESYSTEM, BLOCK):
        if text.lower() == mode.lower():
            return mode
    raise GoldenError("mode %r is not a golden mode: use Filesystem or Block (any casing)" % (value,))


def namespace_for(mode):
    return NAMESPACES[normalize_mode(mode)]


def mode_for_namespace(namespace):
    """The mode a golden namespace serves, or None for any other namespace."""
    for mode, ns in NAMESPACES.items():
        if ns == namespace:
            return mode
    return None


def resolve_placement(mode=None, namespace=None):
    """(mode, namespace) from either or both; refuses a namespace that does not serve the mode."""
    if mode is None and namespace:
        derived = mode_for_namespace(namespace)
        if derived is None:
            raise GoldenError(
                "namespace %s holds no goldens: Filesystem goldens live in %s and Block goldens in %s"
                % (namespace, NAMESPACES[FILESYSTEM], NAMESPACES[BLOCK])
            )
        return derived, namespace
    mode = normalize_mode(mode)
    expected = NAMESPACES[mode]
    if namespace and namespace != expected:
        raise GoldenError(
            "namespace %s does not serve %s goldens: a %s golden lives in %s (omit namespace to use it)"
            % (namespace, mode, mode, expected)
        )
    return mode, expected


def is_label_value(value):
    return isinstance(value, str) and len(value) <= 63 and bool(_LABEL_VALUE.match(value))


def validate_family(family):
    """A family id must be a non-empty label value (it is the value of the family label)."""
    if not family or not is_label_value(family):
        raise GoldenError(
            "family %r is not a valid label value: at most 63 characters of letters, digits, '-', '_' "
            "or '.', starting and ending with a letter or digit" % (family,)
        )
    return family


def validate_object_name(name):
    """A VolumeSnapshot name is a DNS-1123 subdomain: lowercase dot-separated DNS labels."""
    if not name or len(name) > 253 or not all(_DNS_LABEL.match(part) for part in name.split(".")):
        raise GoldenError(
            "name %r is not a valid Kubernetes object name (DNS-1123 subdomain: at most 253 "
            "lowercase letters, digits, '-' and '.')" % (name,)
        )
    return name


def normalize_digest(digest):
    """``sha256:<64 hex>`` from that form or bare hex."""
    match = _DIGEST.match(str(digest or "").strip().lower())
    if not match:
        raise GoldenError("digest %r is not a sha256 digest (sha256:<64 hex digits>)" % (digest,))
    return "sha256:" + match.group(2)


def normalize_date(value=None, today=None):
    """``YYYYMMDD`` from a date, ``YYYYMMDD`` or ``YYYY-MM-DD``; None means today (UTC)."""
    if value is None or value == "":
        value = today or datetime.datetime.now(datetime.timezone.utc).date()
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.strftime("%Y%m%d")
    text = str(value).strip()
    for fmt in _DATE_FORMATS:
        try:
            return datetime.datetime.strptime(text, fmt).strftime("%Y%m%d")
        except ValueError:
            continue
    raise GoldenError("date %r is not a date: use YYYYMMDD or YYYY-MM-DD" % (value,))


def versioned_name(family, date, digest):
    """``golden-<family>-<YYYYMMDD>-<first 12 hex of the digest>``: a candidate sits beside the incumbent."""
    validate_family(family)
    name = "golden-%s-%s-%s" % (family, normalize_date(date), normalize_digest(digest)[7:19])
    try:
        return validate_object_name(name)
    except GoldenError:
        raise GoldenError(
            "family %r makes the invalid snapshot name %r: a family used in a versioned name must be "
            "lowercase letters, digits and '-', or give the name explicitly" % (family, name)
        ) from None


def contract_labels(family, mode):
    return {FAMILY_LABEL: validate_family(family), MODE_KEY: normalize_mode(mode)}


def contract_annotations(family, os_name, mode):
    if not os_name or not str(os_name).strip():
        raise GoldenError("os_name is required: it is the display name of annotation %s" % OS_NAME_ANNOTATION)
    return {
        FAMILY_ANNOTATION: validate_family(family),
        OS_NAME_ANNOTATION: str(os_name),
        MODE_KEY: normalize_mode(mode),
    }


def stamp_patch(obj, family, os_name, mode):
    """The merge patch that stamps the contract onto ``obj``, holding only keys that differ; None if none."""
    want = {
        "labels": contract_labels(family, mode),
        "annotations": contract_annotations(family, os_name, mode),
    }
    meta = {}
    for section, keys in want.items():
        have = kinds.meta(obj).get(section) or {}
        diff = {k: v for k, v in keys.items() if have.get(k) != v}
        if diff:
            meta[section] = diff
    return {"metadata": meta} if meta else None


def snapshot_definition(name, pvc, family, os_name, mode, snapshot_class=None):
    """A new golden: a VolumeSnapshot of ``pvc`` in the mode's namespace, stamped, never active."""
    mode = normalize_mode(mode)
    spec = {"source": {"persistentVolumeClaimName": pvc}}
    if snapshot_class:
        spec["volumeSnapshotClassName"] = snapshot_class
    return {
        "apiVersion": SNAPSHOT_API_VERSION,
        "kind": SNAPSHOT_KIND,
        "metadata": {
            "name": validate_object_name(name),
            "namespace": NAMESPACES[mode],
            "labels": contract_labels(family, mode),
            "annotations": contract_annotations(family, os_name, mode),
        },
        "spec": spec,
    }


def observed_family(obj):
    """The family a consumer sees: the label, else the os-family-id annotation."""
    return kinds.labels(obj).get(FAMILY_LABEL) or kinds.annotations(obj).get(FAMILY_ANNOTATION)


def observed_mode(obj):
    """The mode a consumer sees: label, else annotation, else Filesystem. Raises on an unknown value."""
    raw = kinds.labels(obj).get(MODE_KEY) or kinds.annotations(obj).get(MODE_KEY)
    return normalize_mode(raw)


def is_active(obj):
    """Active only with the label's value exactly ``"true"``, as the seeder reads it."""
    return kinds.labels(obj).get(ACTIVE_LABEL) == "true"


def is_ready(obj):
    return ((obj or {}).get("status") or {}).get("readyToUse") is True


# The snapshot controller records optimistic-lock conflicts in status.error and retries them on its
# next sync: such an error means "still working", not "failed".
_RETRIED_ERRORS = ("the object has been modified",)


def snapshot_failure(obj):
    """The status.error message of a snapshot that will not become ready by itself, else None."""
    error = ((obj or {}).get("status") or {}).get("error")
    if not error:
        return None
    message = str((error.get("message") if isinstance(error, dict) else error) or error)
    if any(text in message for text in _RETRIED_ERRORS):
        return None
    return message


def source_pvc(obj):
    return (((obj or {}).get("spec") or {}).get("source") or {}).get("persistentVolumeClaimName")


def unknown_keys(obj):
    """``kube-dc.com/`` labels and annotations the contract does not define (reported, never written)."""
    found = set()
    for section in ("labels", "annotations"):
        found.update(
            k for k in kinds.meta(obj).get(section) or {} if k.startswith(PREFIX) and k not in KNOWN_KEYS
        )
    return sorted(found)


def _mode_problems(labels, annotations, namespace):
    problems = []
    values = {}
    for where, mapping in (("label", labels), ("annotation", annotations)):
        raw = mapping.get(MODE_KEY)
        if raw is None:
            continue
        try:
            values[where] = normalize_mode(raw)
        except GoldenError:
            problems.append("%s %s: %r is not Filesystem or Block" % (where, MODE_KEY, raw))
    if len(set(values.values())) > 1:
        problems.append(
            "label %s (%s) and annotation %s (%s) disagree"
            % (MODE_KEY, values["label"], MODE_KEY, values["annotation"])
        )
    if problems:
        return problems
    mode = values.get("label") or values.get("annotation") or DEFAULT_MODE
    ns_mode = mode_for_namespace(namespace)
    if ns_mode is None:
        problems.append(
            "namespace %s: goldens live in %s (Filesystem) or %s (Block)"
            % (namespace, NAMESPACES[FILESYSTEM], NAMESPACES[BLOCK])
        )
    elif ns_mode != mode:
        implied = "" if values else " (no %s key, so Filesystem is assumed)" % MODE_KEY
        problems.append(
            "mode %s%s does not match namespace %s, which serves %s goldens"
            % (mode, implied, namespace, ns_mode)
        )
    return problems


def validate_golden(obj, family=None, mode=None):
    """Every way ``obj`` breaks the golden contract, as sentences naming the key; [] when it holds.

    ``family`` and ``mode``, when given, are what the caller expects the golden to serve.
    """
    if not obj:
        return ["snapshot not found"]
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    problems = []
    if obj.get("kind") not in (None, SNAPSHOT_KIND):
        problems.append("kind %s: a golden is a %s" % (obj.get("kind"), SNAPSHOT_KIND))

    label_family = labels.get(FAMILY_LABEL)
    annotation_family = annotations.get(FAMILY_ANNOTATION)
    if not label_family:
        problems.append("label %s (the family) is missing" % FAMILY_LABEL)
    elif not is_label_value(label_family):
        problems.append("label %s: %r is not a valid label value" % (FAMILY_LABEL, label_family))
    if not annotation_family:
        problems.append("annotation %s (the canonical family id) is missing" % FAMILY_ANNOTATION)
    if label_family and annotation_family and label_family != annotation_family:
        problems.append(
            "label %s (%s) and annotation %s (%s) disagree"
            % (FAMILY_LABEL, label_family, FAMILY_ANNOTATION, annotation_family)
        )
    if not str(annotations.get(OS_NAME_ANNOTATION) or "").strip():
        problems.append("annotation %s (the display name) is missing" % OS_NAME_ANNOTATION)
    problems.extend(_mode_problems(labels, annotations, meta.get("namespace")))
    active = labels.get(ACTIVE_LABEL)
    if active is not None and active != "true":
        problems.append(
            'label %s: %r is neither "true" nor absent (the seeder reads only "true")'
            % (ACTIVE_LABEL, active)
        )

    status = obj.get("status") or {}
    if status.get("readyToUse") is not True:
        problems.append("not Ready: status.readyToUse is %s" % _show(status.get("readyToUse")))
    error = status.get("error")
    if error:
        problems.append("status.error is set: %s" % ((error or {}).get("message") or error))

    seen_family = label_family or annotation_family
    if family is not None and seen_family and seen_family != family:
        problems.append("family is %s, expected %s" % (seen_family, family))
    if mode is not None:
        try:
            seen_mode = observed_mode(obj)
        except GoldenError:
            seen_mode = None
        if seen_mode is not None and seen_mode != normalize_mode(mode):
            problems.append("mode is %s, expected %s" % (seen_mode, normalize_mode(mode)))
    return problems


def _show(value):
    if value is None:
        return "unset"
    return str(value).lower() if isinstance(value, bool) else str(value)


def summary(obj):
    """What a report shows about a golden."""
    meta = (obj or {}).get("metadata") or {}
    status = (obj or {}).get("status") or {}
    try:
        mode = observed_mode(obj)
    except GoldenError:
        mode = None
    return {
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "family": observed_family(obj),
        "os_name": kinds.annotations(obj).get(OS_NAME_ANNOTATION),
        "mode": mode,
        "source_pvc": source_pvc(obj),
        "ready": is_ready(obj),
        "restore_size": status.get("restoreSize"),
        "content_name": status.get("boundVolumeSnapshotContentName"),
        "active": is_active(obj),
        "image_facts": recorded_facts(obj),
    }


def release_digest(obj):
    """The full release digest recorded on a golden at publish, or None."""
    return kinds.annotations(obj).get(RELEASE_DIGEST) or None


def facts_annotation(facts, where):
    """The annotation value that records ``facts`` (an image-facts document) on a golden: compact JSON
    with sorted keys, so the same read gives the same value. GoldenError for anything else."""
    if not isinstance(facts, dict) or "schema_version" not in facts or "os_family" not in facts:
        raise GoldenError(
            "%s: image_facts is not an image-facts document (a mapping with schema_version and os_family): "
            "give the document as read, seal_verify's facts or golden_export_job's image_facts" % where
        )
    return json.dumps(facts, sort_keys=True, separators=(",", ":"))


def recorded_facts(obj):
    """The image-facts document recorded on a golden; None when none is. A value that is not JSON is
    answered by a document saying so, which image_facts.exposure_reasons counts as unproven."""
    text = kinds.annotations(obj).get(IMAGE_FACTS_ANNOTATION)
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        return {"schema_version": None, "unreadable": [{"source": IMAGE_FACTS_ANNOTATION, "error": str(exc)}]}


def recorded_provenance(obj):
    """The verdict recorded on a golden (``provenance.verdict_record``), None when none is; a value that is
    not JSON reads as a record with no verdict, which no trust policy accepts."""
    text = kinds.annotations(obj).get(PROVENANCE_ANNOTATION)
    if not text:
        return None
    try:
        found = json.loads(text)
    except ValueError:
        return {"verdict": None, "unreadable": text[:200]}
    return found if isinstance(found, dict) else {"verdict": None, "unreadable": text[:200]}


def provenance_patch(existing, record, digest, where):
    """What recording the verdict ``record`` on the golden needs: None (nothing given, or already recorded)
    or the merge patch. A verdict on other bytes than the golden's digest is refused."""
    if not record:
        return None
    recorded_digest = digest or release_digest(existing or {})
    if recorded_digest and record.get("sha256") and "sha256:" + record["sha256"] != recorded_digest:
        raise GoldenError(
            "%s: the provenance verdict given is for sha256:%s, the golden is made from %s; record the "
            "verdict of the artifact this golden was imported from"
            % (where, record["sha256"], recorded_digest)
        )
    value = json.dumps(record, sort_keys=True, separators=(",", ":"))
    if kinds.annotations(existing or {}).get(PROVENANCE_ANNOTATION) == value:
        return None
    return {"metadata": {"annotations": {PROVENANCE_ANNOTATION: value}}}


def provenance_problem(record, policy_doc, family, where, digest, facts, prove):
    """Why the verdict ``record`` on the golden ``where`` does not hold under today's trust policy
    (stored form), as one line naming the golden, the key and the check; None when it holds.

    ``provenance.recorded_verdict_problem`` judges it for the golden's own ``family`` (never the family the
    record names), against its release ``digest`` (``sha256:<hex>``, None when none is recorded) and the
    image ``facts`` recorded on it, from what ``prove`` (``_signing.record_proof``, the adapter's) proves
    about the evidence the record carries.
    """
    try:
        policy = provenance.normalize_policy(policy_doc)
    except provenance.ProvenanceError as exc:
        raise GoldenError("option trust_policy: %s" % exc.msg) from None
    proof = prove(policy, record) if (record or {}).get("verdict") == provenance.VERIFIED else None
    found = provenance.recorded_verdict_problem(
        policy, record, proof, where, family, digest=_digest_set(digest), facts=facts
    )
    return "%s; %s" % found if found else None


def _digest_set(digest):
    """``{"sha256": hex}`` of a release digest; empty when there is none (nothing a verdict can bind)."""
    try:
        return {"sha256": normalize_digest(digest)[len("sha256:") :]} if digest else {}
    except GoldenError:
        return {}


def facts_patch(existing, facts, where):
    """What recording ``facts`` on the existing golden needs: None (nothing, or nothing given) or the
    merge patch. A golden's bytes never change, so neither do their facts: other facts are refused."""
    if facts is None:
        return None
    value = facts_annotation(facts, where)
    recorded = kinds.annotations(existing).get(IMAGE_FACTS_ANNOTATION)
    if recorded == value:
        return None
    if recorded:
        raise GoldenError(
            "%s records other image facts than the ones given: a golden's bytes never change, so its facts "
            "do not either; read the facts from this golden's own source again, or make a new golden under "
            "a new name for other bytes" % where
        )
    return {"metadata": {"annotations": {IMAGE_FACTS_ANNOTATION: value}}}


def describe_progress(obj):
    """One line of snapshot state for wait messages, and what a wait compares to tell stuck from working.

    Only the driver's answers are in it: readiness (unset is not ready), the cut's ``creationTime``, the
    ``restoreSize`` and the error. The snapshot controller binds a snapshot to its content (the content
    name, ``readyToUse: false``) within a second whether or not the CSI driver ever cuts it, so a line with
    the binding in it would call a snapshot whose driver never answers "still working".
    """
    if obj is None:
        return "not found"
    status = obj.get("status") or {}
    error = status.get("error")
    return "readyToUse=%s, creationTime=%s, restoreSize=%s, error=%s" % (
        _show(status.get("readyToUse") is True),
        _show(status.get("creationTime")),
        _show(status.get("restoreSize")),
        _show((error or {}).get("message") if isinstance(error, dict) else error),
    )


def phase(obj):
    """A coarse phase for progress reports: Pending, Bound, Ready or Failed."""
    status = (obj or {}).get("status") or {}
    if status.get("readyToUse") is True:
        return "Ready"
    if status.get("error"):
        return "Failed"
    if status.get("boundVolumeSnapshotContentName"):
        return "Bound"
    return "Pending"


def golden_name(name=None, family=None, date=None, digest=None):
    """The snapshot name: ``name`` as given, else the versioned name from family, date and digest."""
    if name:
        return validate_object_name(name)
    if family and digest:
        return versioned_name(family, date, digest)
    raise GoldenError(
        "no snapshot name: give name, or family and digest (date defaults to today, UTC) for the "
        "versioned name golden-<family>-<YYYYMMDD>-<12 hex of the digest>"
    )


def predicted_pvc(name, namespace, mode):
    """The claim check mode assumes when an earlier task of the run would have made it: Bound, in ``mode``."""
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"volumeMode": normalize_mode(mode)},
        "status": {"phase": "Bound"},
    }


def pvc_problems(pvc, name, namespace, mode):
    """Why PersistentVolumeClaim ``name`` cannot be the source of a ``mode`` golden; [] when it can."""
    if not pvc:
        return [
            "PersistentVolumeClaim %s/%s not found (a snapshot's source PVC must be in the snapshot's "
            "namespace, %s)" % (namespace, name, namespace)
        ]
    problems = []
    volume_mode = ((pvc.get("spec") or {}).get("volumeMode")) or FILESYSTEM
    if volume_mode != normalize_mode(mode):
        problems.append(
            "PersistentVolumeClaim %s/%s has volumeMode %s, but a %s golden is made from a %s PVC"
            % (namespace, name, volume_mode, mode, normalize_mode(mode))
        )
    phase_ = (pvc.get("status") or {}).get("phase")
    if phase_ != "Bound":
        problems.append(
            "PersistentVolumeClaim %s/%s is not Bound (phase %s)" % (namespace, name, _show(phase_))
        )
    return problems


def _raw_mode(obj):
    return kinds.labels(obj).get(MODE_KEY) or kinds.annotations(obj).get(MODE_KEY)


def plan_golden(
    existing, name, family, os_name, mode, pvc=None, pvc_obj=None, adopt=False, snapshot_class=None
):
    """What making (or adopting) a golden needs: ``{"action": "create"|"stamp"|"none", ...}``.

    Pure decision over the observed snapshot (``existing``, None if absent) and source PVC. Raises
    GoldenError naming the object, the rule and the supported move when it must refuse.
    """
    mode = normalize_mode(mode)
    namespace = NAMESPACES[mode]
    where = "%s %s/%s" % (SNAPSHOT_KIND, namespace, name)
    contract_annotations(family, os_name, mode)  # validates family and os_name up front
    if existing is None:
        if not pvc:
            raise GoldenError(
                "%s not found: give pvc to make it from a PersistentVolumeClaim (adopt stamps an "
                "existing snapshot, it does not make one)" % where
            )
        problems = pvc_problems(pvc_obj, pvc, namespace, mode)
        if problems:
            raise GoldenError("refusing to make %s: %s" % (where, "; ".join(problems)))
        return {
            "action": "create",
            "definition": snapshot_definition(name, pvc, family, os_name, mode, snapshot_class),
        }
    source = source_pvc(existing)
    if pvc and source != pvc:
        raise GoldenError(
            "%s already exists with source %s, not PersistentVolumeClaim %s: a golden's content never "
            "changes; make a new golden under a new name (a new date or digest)"
            % (where, "PersistentVolumeClaim %s" % source if source else "a pre-provisioned content", pvc)
        )
    label_family = kinds.labels(existing).get(FAMILY_LABEL)
    annotation_family = kinds.annotations(existing).get(FAMILY_ANNOTATION)
    if label_family and annotation_family and label_family != annotation_family:
        raise GoldenError(
            "%s carries label %s=%s but annotation %s=%s: which family it serves is ambiguous, and stamping "
            "would silently pick one; fix or remove the wrong key by hand, then adopt it"
            % (where, FAMILY_LABEL, label_family, FAMILY_ANNOTATION, annotation_family)
        )
    seen_family = observed_family(existing)
    if seen_family and seen_family != family:
        raise GoldenError(
            "%s carries family %s, not %s: a golden's family never changes; make a new golden for %s"
            % (where, seen_family, family, family)
        )
    raw_mode = _raw_mode(existing)
    try:
        seen_mode = normalize_mode(raw_mode) if raw_mode else None
    except GoldenError:
        seen_mode = None  # an unreadable value is what adoption repairs
    if seen_mode and seen_mode != mode:
        raise GoldenError(
            "%s carries mode %s but lives in %s, the %s namespace: fix or remove it by hand; the contract "
            "cannot be stamped over a contradicting mode" % (where, seen_mode, namespace, mode)
        )
    patch = stamp_patch(existing, family, os_name, mode)
    if patch is None:
        return {"action": "none"}
    if not pvc and not adopt:
        keys = sorted(
            set(patch["metadata"].get("labels", {})) | set(patch["metadata"].get("annotations", {}))
        )
        raise GoldenError(
            "%s exists without the full golden contract (needs %s): set adopt: true to stamp it; only "
            "its labels and annotations change" % (where, ", ".join(keys))
        )
    return {"action": "stamp", "patch": patch}


# The annotation the snapshot controller reads to pick a class for a snapshot that names none.
DEFAULT_SNAPSHOT_CLASS = "snapshot.storage.kubernetes.io/is-default-class"


def snapshot_class(classes, wanted=""):
    """The VolumeSnapshotClass goldens are taken with, as ``{"name", "defaults"}``; raises GoldenError.

    ``classes``: the cluster's VolumeSnapshotClasses; ``wanted``: the class the caller names, or empty to
    rely on the default. The snapshot controller picks the default *of the volume's driver* and refuses
    only when one driver has several defaults, so one default per driver is a valid cluster: ``defaults``
    maps each driver to its default, and ``name`` is the one default when a single driver has one.
    """
    names = [c["metadata"]["name"] for c in classes]
    listed = ", ".join(names) or "none exists"
    if wanted:
        if wanted not in names:
            raise GoldenError(
                "VolumeSnapshotClass '%s' (golden_namespaces_snapshot_class) does not exist, so goldens "
                "cannot be snapshotted with it. Create it for your CSI driver, or name an existing class: %s."
                % (wanted, listed)
            )
        return {"name": wanted, "defaults": {}}
    by_driver = {}
    for c in classes:
        if (c["metadata"].get("annotations") or {}).get(DEFAULT_SNAPSHOT_CLASS) == "true":
            by_driver.setdefault(c.get("driver") or "", []).append(c["metadata"]["name"])
    if not by_driver:
        raise GoldenError(
            "No VolumeSnapshotClass is annotated %s=true, and golden_namespaces_snapshot_class is empty, "
            "so there is no class to take goldens with. Name an existing class (%s) or annotate one class "
            "of your CSI driver as its default." % (DEFAULT_SNAPSHOT_CLASS, listed)
        )
    for driver, found in sorted(by_driver.items()):
        if len(found) > 1:
            raise GoldenError(
                "VolumeSnapshotClasses %s of driver %s are all annotated %s=true; the snapshot controller "
                "refuses to pick one for that driver's volumes. Name the class goldens are taken with "
                "(golden_namespaces_snapshot_class), or leave one default per driver."
                % (", ".join(sorted(found)), driver or "(none)", DEFAULT_SNAPSHOT_CLASS)
            )
    defaults = {driver: found[0] for driver, found in by_driver.items()}
    return {"name": next(iter(defaults.values())) if len(defaults) == 1 else "", "defaults": defaults}
