# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Cozystack worker images: one golden DataVolume per (schematicID, version), cloned by every pool.

Pure: no I/O. The catalog side (``images[]`` entries becoming golden DataVolumes in ``cozy-public``)
and the pool side (a worker disk rendered as a clone of its golden, or as the HTTP import it was
before) build the same name from the same fields, so both validate with the same patterns here.
Every refusal names the object, the rule it breaks and the supported move; the module only
observes the cluster, calls these rules and applies what they return.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import re
from fractions import Fraction

from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket import mirror
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import redact
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import consumers as who_uses
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import golden
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import serving
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import kinds
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance

NAMESPACE = "cozy-public"
FACTORY = "https://factory.talos.dev"
STORAGE = "6Gi"
STORAGE_CLASS = "replicated"
DISK_SIZE = "20Gi"
# openstack, not nocloud: KubeVirt's cluster-api provider hands bootstrap data over a config drive,
# which the nocloud image ignores.
PLATFORM_IMAGE = "openstack-amd64.raw.xz"
NAME_PREFIX = "talos-worker-"

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "cozystack"
KEEP = "helm.sh/resource-policy"
BIND_IMMEDIATE = "cdi.kubevirt.io/storage.bind.immediate.requested"
USE_POPULATOR = "cdi.kubevirt.io/storage.usePopulator"
SCHEMATIC_ANNOTATION = "kubernetes-worker-image.cozystack.io/schematic-id"
VERSION_ANNOTATION = "kubernetes-worker-image.cozystack.io/talos-version"
GOLDEN_ANNOTATION = "kubernetes-worker-image.cozystack.io/golden"
POOL_ANNOTATION = "kubernetes-worker-image.cozystack.io/pool"
# The tenant cluster a worker disk belongs to: two clusters in one namespace may both have a pool md0.
CLUSTER_ANNOTATION = "kubernetes-worker-image.cozystack.io/cluster"
# The chart names a pool's disks disk-system-<cluster>-<pool>-<machine>.
DISK_PREFIX = "disk-system-"
CLONE_TYPE_ANNOTATION = "cdi.kubevirt.io/cloneType"
DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
BETA_DEFAULT_CLASS = "storageclass.beta.kubernetes.io/is-default-class"
# CDI's own default for VM disks, preferred over the cluster default for content type kubevirt.
VIRT_DEFAULT_CLASS = "storageclass.kubevirt.io/is-default-virt-class"
VM_CONTENT = "kubevirt"

SCHEMATIC_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
VERSION_PATTERN = r"^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9a-z.]+)?$"
_SCHEMATIC = re.compile(SCHEMATIC_PATTERN)
_VERSION = re.compile(VERSION_PATTERN)
_FACTORY = re.compile(r"^https?://[^/\s?#@]+(/[^\s?#]*)?$")
_QUANTITY = re.compile(
    r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E))?$"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"m": Fraction(1, 1000), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
# A DataVolume name is a DNS subdomain, and CDI names its importer pod and claims after it.
MAX_NAME = 253

# Phases after which a DataVolume will not change on its own. Only Failed is an error: every other
# phase of an import (Pending, ImportScheduled, ImportInProgress, PendingPopulation, ...) is progress.
FAILED = "Failed"
SUCCEEDED = "Succeeded"

# Clone strategies as CDI spells them (CDI.spec.cloneStrategyOverride, StorageProfile cloneStrategy).
HOST_ASSISTED = "copy"
CDI_DEFAULT_STRATEGY = "snapshot"

CATALOG_MOVE = (
    "add an images[] entry with this schematicID and version to the worker image catalog "
    "(state=present, which imports it into %s), or remove osImage from the pool so its disks import the "
    "factory image over HTTP as before"
)


# Names, patterns and quantities ---------------------------------------------------------------------


def _name_part(field, value, pattern, compiled, what, move, subject):
    """A value interpolated into the golden's name and the image URL must match its pattern."""
    if not isinstance(value, str) or not compiled.match(value):
        raise Refusal(
            subject,
            "%s %r does not match %s; it becomes part of the DataVolume name "
            "talos-worker-<schematicID>-<version> and of the image URL, so it must be %s"
            % (field, value, pattern, what),
            move,
        )
    return value


def check_schematic(value, subject):
    """A schematic ID: a plain lowercase alphanumeric identifier."""
    return _name_part(
        "schematicID",
        value,
        SCHEMATIC_PATTERN,
        _SCHEMATIC,
        "a plain lowercase alphanumeric identifier",
        "give the schematic ID exactly as the Image Factory returned it (lowercase hex)",
        subject,
    )


def check_version(value, subject):
    """A Talos release ``vMAJOR.MINOR.PATCH`` (optionally ``-pre.release``); never a YAML number."""
    return _name_part(
        "version",
        value,
        VERSION_PATTERN,
        _VERSION,
        "a Talos release vMAJOR.MINOR.PATCH",
        'give the release as a quoted string with its leading v, for example version: "v1.13.0"',
        subject,
    )


def check_factory(url, subject):
    """``http(s)://host[/path]``, without credentials, query or fragment; a trailing ``/`` is trimmed."""
    move = "give the Image Factory's base URL (default %s), or the base URL of the mirror bucket" % FACTORY
    if isinstance(url, str):
        redact.refuse_credentials(url, "%s imageFactoryURL" % subject, move + ", without credentials")
    if not isinstance(url, str) or not _FACTORY.match(url):
        raise Refusal(
            subject,
            "imageFactoryURL %r is not an http(s) URL of the form https://host[/path] without credentials, "
            "query or fragment; the image URL <factory>/image/<schematicID>/<version>/%s is built from it"
            % (redact.redact_url(url), PLATFORM_IMAGE),
            move,
        )
    return url.rstrip("/")


def golden_name(schematic, version):
    return "%s%s-%s" % (NAME_PREFIX, schematic, version)


def image_url(factory, schematic, version):
    return "%s/image/%s/%s/%s" % (factory.rstrip("/"), schematic, version, PLATFORM_IMAGE)


# A signed worker image -----------------------------------------------------------------------------------
#
# The subject its provenance names is its path under the Image Factory, the same in every mirror bucket
# holding the Factory's paths; its family is the schematic (one Talos flavour), its stream the version.


def signed_name(entry):
    """The artifact name a worker image is signed under: ``image/<schematicID>/<version>/<file>``."""
    return "image/%s/%s/%s" % (entry["schematicID"], entry["version"], PLATFORM_IMAGE)


def signed_family(entry):
    return "talos-%s" % entry["schematicID"]


def import_verdict(entry, sha256, policy, signature, found):
    """The verdict on the image ``entry`` would import, pinned to ``sha256`` (hex, or None when nothing is
    pinned), from what its ``.sig`` and ``.intoto.jsonl`` prove (``_signing.evidence``'s pair); a Refusal,
    before anything is written, when the trust policy does not let it be imported.

    The signature is checked over the digest CDI verifies while importing, so an unpinned import cannot be
    verified at all: it is refused unless the policy relaxes the family (or the version) and nothing is
    signed.
    """
    family, stream = signed_family(entry), entry["version"]
    unsigned = signature is None and found is None
    if not sha256 and not (unsigned and provenance.relaxed_reason(policy, family, stream)):
        raise Refusal(
            entry["subject"],
            "no sha256 is pinned, so its signature cannot be checked against the bytes CDI imports",
            "give sha256 (the digest os_mirror recorded), or import from a mirror bucket that records it; "
            "nothing was written",
        )
    artifact = {"name": signed_name(entry), "digest": {"sha256": sha256} if sha256 else {}}
    verdict = provenance.judge(artifact, family, stream, policy, signature, found)
    if not verdict["ok"]:
        raise Refusal(
            entry["subject"],
            "refusing to import it: %s" % verdict["message"],
            "nothing was written",
            verdict=verdict["verdict"],
            check=verdict["check"],
            key_id=verdict.get("key"),
        )
    return verdict


def verdict_annotations(entry, sha256, verdict, found, texts=None):
    """The annotation recording ``verdict`` (``import_verdict``'s) on the golden it lets import, with the
    ``.sig`` and ``.intoto.jsonl`` ``texts`` it was verified from (its evidence), so that the verification
    is checked again where the golden is used, not taken on the annotation's word."""
    doc = (found or {}).get("statement")
    record = provenance.verdict_record(verdict, signed_name(entry), sha256, signed_family(entry), doc, texts)
    return {golden.PROVENANCE_ANNOTATION: json.dumps(record, sort_keys=True, separators=(",", ":"))}


def refuse_unproven_golden(entry, live, policy, prove, namespace=NAMESPACE):
    """A golden that exists is judged again under today's trust policy by the verdict recorded on it when
    it was imported, its evidence verified again by ``prove`` (``_signing.record_proof``) for the entry's
    family and version and over the checksum CDI imported (``spec.source.http.checksum``; a DataVolume's spec
    never changes): none recorded (made before the policy, or by hand), a key the policy no longer trusts, a
    relaxation taken back, no evidence or evidence that does not verify, or a verdict for another image or
    other bytes is refused."""
    what = "the golden DataVolume %s/%s" % (namespace, entry["name"])
    record = golden.recorded_provenance(live)
    checksum = (_http(live).get("checksum") or "").partition(":")[2]
    move = "delete the golden after moving its pools away and import it again under the trust policy"
    proof = prove(policy, record) if (record or {}).get("verdict") == provenance.VERIFIED else None
    found = provenance.recorded_verdict_problem(
        policy,
        record,
        proof,
        what,
        signed_family(entry),
        entry["version"],
        digest={"sha256": checksum},
        artifact=signed_name(entry),
        moves=(move, move),
    )
    if found:
        raise Refusal(
            entry["subject"],
            found[0],
            found[1] + "; nothing was written",
            verdict=(record or {}).get("verdict"),
            key_id=(record or {}).get("key"),
        )
    return record


def quantity_bytes(value, subject="quantity"):
    """Bytes of a Kubernetes quantity (``6Gi``, ``6442450944``, ``6.5G``, ``1e9``), rounded up."""
    if isinstance(value, bool):
        value = None
    if isinstance(value, int):
        return value
    text = str(value).strip() if value is not None else ""
    match = _QUANTITY.match(text)
    if not match:
        raise Refusal(
            subject,
            "%r is not a Kubernetes quantity" % (value,),
            "give a size such as 6Gi, 20Gi or 21474836480",
        )
    number = Fraction(match.group(1))
    if match.group(2):
        number *= Fraction(10) ** int(match.group(2)[1:])
    elif match.group(3):
        number *= _BINARY.get(match.group(3)) or _DECIMAL[match.group(3)]
    return math.ceil(number)


def normalize_sha256(value, subject):
    """The mirror's digest rule (``sha256:<hex>``, ``sha256-<hex>`` or ``<hex>``), refused as a Refusal."""
    try:
        return mirror.normalize_sha256(value)
    except mirror.MirrorError as exc:
        raise Refusal(
            subject,
            "sha256 %r is not 64 hexadecimal digits" % (value,),
            "give the digest os_mirror recorded for the mirrored raw.xz (sha256:<hex>)",
        ) from exc


# The catalog ----------------------------------------------------------------------------------------


def entry_subject(index, raw):
    raw = raw or {}
    return "images[%d] (schematicID %r, version %r)" % (index, raw.get("schematicID"), raw.get("version"))


def catalog_entry(raw, index):
    """One ``images[]`` entry validated and completed with the catalog's defaults."""
    subject = entry_subject(index, raw)
    if not isinstance(raw, dict):
        raise Refusal(subject, "an images[] entry is a mapping", "give {schematicID, version, ...}")
    schematic = check_schematic(raw.get("schematicID"), subject)
    version = check_version(raw.get("version"), subject)
    factory = raw.get("imageFactoryURL")
    factory = check_factory(FACTORY if factory is None else factory, subject)
    storage = raw.get("storage")
    storage = STORAGE if storage is None else str(storage)
    quantity_bytes(storage, "%s storage" % subject)
    storage_class = raw.get("storageClass")
    storage_class = STORAGE_CLASS if storage_class is None else storage_class
    sha256 = raw.get("sha256")
    return {
        "index": index,
        "subject": subject,
        "schematicID": schematic,
        "version": version,
        "imageFactoryURL": factory,
        "storage": storage,
        "storageClass": storage_class,
        "certConfigMap": raw.get("certConfigMap") or None,
        "sha256": normalize_sha256(sha256, subject) if sha256 else None,
        "name": golden_name(schematic, version),
        "url": image_url(factory, schematic, version),
    }


def catalog(images):
    """All entries, validated before anything is written; two entries for one golden are refused."""
    entries = [catalog_entry(raw, index) for index, raw in enumerate(images or [])]
    seen = {}
    for entry in entries:
        if len(entry["name"]) > MAX_NAME:
            raise Refusal(
                entry["subject"],
                "the golden's name %s is %d characters, over the %d a DataVolume name may have"
                % (entry["name"], len(entry["name"]), MAX_NAME),
                "use a shorter schematic ID or version",
            )
        if entry["name"] in seen:
            raise Refusal(
                entry["subject"],
                "it names the same golden %s as images[%d]" % (entry["name"], seen[entry["name"]]),
                "keep one entry per (schematicID, version)",
            )
        seen[entry["name"]] = entry["index"]
    return entries


def present_catalog(images):
    """The catalog state=present keeps: ``images`` is required (an empty list keeps no golden), since
    a catalog left out is more likely a mistake than a wish to keep nothing."""
    if images is None:
        raise Refusal("option images", "state=present needs the catalog", "give images (it may be empty)")
    return catalog(images)


def _storage_request(size, storage_class):
    """``spec.storage``: the size, and the class only when one is named (empty: the cluster's default)."""
    storage = {"resources": {"requests": {"storage": size}}}
    if storage_class:
        storage["storageClassName"] = storage_class
    return storage


def render_golden(entry, namespace=NAMESPACE, checksum=None, annotations=None):
    """The golden DataVolume of a catalog entry (``checksum`` pins the import to a sha256; ``annotations``
    adds to the golden's own, as the verdict ``verdict_annotations`` records)."""
    http = {"url": entry["url"]}
    if entry.get("certConfigMap"):
        http["certConfigMap"] = entry["certConfigMap"]
    if checksum:
        http["checksum"] = "sha256:%s" % checksum
    storage = _storage_request(entry["storage"], entry.get("storageClass"))
    return {
        "apiVersion": kinds.CDI,
        "kind": "DataVolume",
        "metadata": {
            "name": entry["name"],
            "namespace": namespace,
            "labels": {MANAGED_BY: MANAGED_BY_VALUE},
            "annotations": {
                KEEP: "keep",
                BIND_IMMEDIATE: "true",
                USE_POPULATOR: "true",
                SCHEMATIC_ANNOTATION: entry["schematicID"],
                VERSION_ANNOTATION: entry["version"],
                **(annotations or {}),
            },
        },
        "spec": {"contentType": "kubevirt", "source": {"http": http}, "storage": storage},
    }


def _http(dv):
    return (kinds.spec(dv).get("source") or {}).get("http") or {}


def _storage(dv):
    return kinds.spec(dv).get("storage") or kinds.spec(dv).get("pvc") or {}


def _request(dv):
    return ((_storage(dv).get("resources") or {}).get("requests") or {}).get("storage")


def _shown(value):
    return "''" if value in (None, "") else str(value)


def edited_fields(entry, live):
    """``[(field, live value, entry value)]`` where a live golden differs from its entry.

    The source URL, the storage request (compared as bytes: 6Gi and 6144Mi are one size), the
    storage class (an empty live class is a value like any other: a golden created on the cluster
    default is not the same spec as one on ``replicated``), the CA ConfigMap and, when the entry
    pins one, the checksum.
    """
    changes = []
    http = _http(live)
    if http.get("url") != entry["url"]:
        changes.append(("source URL", http.get("url"), entry["url"]))
    live_request = _request(live)
    try:
        same_size = live_request is not None and quantity_bytes(live_request) == quantity_bytes(
            entry["storage"]
        )
    except Refusal:
        same_size = False
    if not same_size:
        changes.append(("storage", live_request, entry["storage"]))
    live_class = _storage(live).get("storageClassName") or ""
    if live_class != (entry["storageClass"] or ""):
        changes.append(("storageClass", live_class, entry["storageClass"] or ""))
    if (http.get("certConfigMap") or None) != entry.get("certConfigMap"):
        changes.append(("certConfigMap", http.get("certConfigMap"), entry.get("certConfigMap")))
    if entry.get("sha256"):
        wanted = "sha256:%s" % entry["sha256"]
        if http.get("checksum") != wanted:
            changes.append(("checksum", http.get("checksum"), wanted))
    return changes


def pinned_checksum(dv):
    """The checksum a golden DataVolume's import is pinned to, or None."""
    return _http(dv).get("checksum") or None


def refuse_dropped_checksum(entry, sent, answered, namespace=NAMESPACE):
    """A golden pinned to a checksum the cluster's CDI does not keep (``answered`` is the server's
    dry-run reply to creating ``sent``): CDI before v1.65.0 has no ``spec.source.http.checksum`` and its
    schema prunes it, so the import would go unverified and every later run would see the golden as
    edited."""
    pinned = pinned_checksum(sent)
    if not pinned or pinned_checksum(answered) == pinned:
        return
    raise Refusal(
        entry["subject"],
        "the cluster's CDI drops spec.source.http.checksum from the golden DataVolume %s/%s (the field "
        "came in CDI v1.65.0), so the import of the pinned sha256 would not be verified"
        % (namespace, entry["name"]),
        "upgrade CDI to v1.65.0 or later; a golden cannot be pinned to a digest on an older CDI",
    )


def refuse_edited(entry, live, namespace=NAMESPACE):
    """An entry edited after its golden exists: a DataVolume spec cannot be changed in place."""
    changes = edited_fields(entry, live)
    if not changes:
        return
    listed = ", ".join("%s %s -> %s" % (field, _shown(old), _shown(new)) for field, old, new in changes)
    raise Refusal(
        entry["subject"],
        "the entry was edited after its golden DataVolume %s/%s exists, or that DataVolume was made by "
        "someone else (%s), and a DataVolume spec cannot be changed in place"
        % (namespace, entry["name"], listed),
        "add a new (schematicID, version) entry with the new values, move the pools to it, then remove the "
        "old entry (that stops managing the old golden; it is never deleted)",
        changes=[{"field": f, "live": o, "entry": n} for f, o, n in changes],
    )


def refuse_digest(entry, observed, url_shown):
    """The mirrored object's sha256 must be the digest the entry pins."""
    if entry.get("sha256") and observed and observed != entry["sha256"]:
        raise Refusal(
            entry["subject"],
            "the object at %s has sha256 %s, not the sha256 %s the entry pins; importing it would make a "
            "golden of other bytes than the ones mirrored" % (url_shown, observed, entry["sha256"]),
            "mirror the image again (os_mirror copies it by digest) and pin the digest it records, or "
            "point imageFactoryURL at the bucket that holds that digest",
        )


# Goldens and their consumers ------------------------------------------------------------------------


def is_golden(dv):
    notes = kinds.annotations(dv)
    return bool(notes.get(SCHEMATIC_ANNOTATION) and notes.get(VERSION_ANNOTATION))


def worker_disks(datavolumes, pvcs=()):
    """Every disk a worker query reads: each DataVolume, and each claim that has no DataVolume of its name in
    its namespace (CDI garbage-collected it, or the disk was made outside the chart). A claim CDI made for a
    DataVolume carries the DataVolume's annotations, so it is read once, through its DataVolume."""
    made = {(kinds.namespace(dv), kinds.name(dv)) for dv in datavolumes or ()}
    claims = [p for p in pvcs or () if (kinds.namespace(p), kinds.name(p)) not in made]
    return list(datavolumes or ()) + claims


def clones_of(golden_namespace, name, disks):
    """The worker disks (``worker_disks``) that clone the golden: by their golden annotation, or a
    DataVolume by ``source.pvc``; the golden's own DataVolume and claim left out."""
    found = []
    for disk in disks:
        pvc = (kinds.spec(disk).get("source") or {}).get("pvc") or {}
        by_source = (
            pvc.get("name") == name and (pvc.get("namespace") or kinds.namespace(disk)) == golden_namespace
        )
        by_note = kinds.annotations(disk).get(GOLDEN_ANNOTATION) == name
        if (by_source or by_note) and not (
            kinds.namespace(disk) == golden_namespace and kinds.name(disk) == name
        ):
            found.append(disk)
    return found


def disk_pool(disk):
    """``namespace/pool``, or ``namespace/cluster/pool`` when the disk's cluster is known, of a worker disk;
    None for a disk no pool annotation names."""
    pool = kinds.annotations(disk).get(POOL_ANNOTATION)
    if not pool:
        return None
    cluster = disk_cluster(disk, pool)
    parts = [kinds.namespace(disk)] + ([cluster] if cluster else []) + [pool]
    return "/".join(parts)


def disk_cluster(disk, pool):
    """The tenant cluster of a worker disk of ``pool``: its cluster annotation, else the one its name says
    (the chart names a pool's disks ``disk-system-<cluster>-<pool>-...``); None when neither tells."""
    noted = kinds.annotations(disk).get(CLUSTER_ANNOTATION)
    if noted:
        return noted
    name = kinds.name(disk) or ""
    if not name.startswith(DISK_PREFIX):
        return None
    rest = name[len(DISK_PREFIX) :]
    cut = rest.rfind("-%s-" % pool)
    if cut <= 0 and rest.endswith("-%s" % pool):
        cut = len(rest) - len(pool) - 1
    return rest[:cut] if cut > 0 else None


def consumers(golden_namespace, name, disks):
    """``{"disks": [ns/name...], "pools": [ns/[cluster/]pool...]}`` of the worker disks cloning the golden."""
    found = clones_of(golden_namespace, name, disks)
    pools = {disk_pool(d) for d in found} - {None}
    return {"disks": sorted(kinds.ref(d) for d in found), "pools": sorted(pools)}


def orphans(golden_namespace, disks, existing):
    """The worker disks annotated with a golden of ``golden_namespace`` that no longer exists (neither its
    DataVolume nor its claim is in ``existing``, the names there): they still say what they were cloned
    from, which a report must keep answering after the golden is gone."""
    found = []
    for disk in disks:
        golden = kinds.annotations(disk).get(GOLDEN_ANNOTATION)
        pvc = (kinds.spec(disk).get("source") or {}).get("pvc") or {}
        if not golden or (pvc.get("namespace") or golden_namespace) != golden_namespace:
            continue
        if golden in existing or kinds.terminating(disk):
            continue
        found.append(
            {
                "kind": disk_kind(disk),
                "namespace": kinds.namespace(disk),
                "name": kinds.name(disk),
                "golden": golden,
                "pool": disk_pool(disk),
            }
        )
    return sorted(found, key=lambda o: (o["golden"], o["namespace"], o["name"]))


def disk_kind(disk):
    """``DataVolume`` or ``PersistentVolumeClaim`` (a worker disk whose DataVolume is gone)."""
    spec = kinds.spec(disk)
    return disk.get("kind") or (
        "DataVolume" if "source" in spec or "sourceRef" in spec else "PersistentVolumeClaim"
    )


def progress_percent(dv):
    """CDI's ``status.progress`` (``"45.20%"``) as a float, or None for ``N/A``."""
    text = str(kinds.status(dv).get("progress") or "").strip().rstrip("%")
    try:
        return float(text)
    except ValueError:
        return None


def importer_reason(dv):
    """Why an import failed, as CDI reports it on the Running condition (or the Ready one)."""
    for ctype in ("Running", "Ready", "Bound"):
        cond = kinds.condition(dv, ctype) or {}
        if cond.get("message"):
            return "%s: %s" % (cond.get("reason") or ctype, cond["message"])
    return "no reason reported"


def golden_summary(dv, pvc, disks, golden_namespace=NAMESPACE):
    """A golden as ``state=info`` reports it; ``disks``: ``worker_disks`` of every namespace."""
    state = kinds.status(dv)
    who = consumers(golden_namespace, kinds.name(dv), disks)
    return {
        "name": kinds.name(dv),
        "namespace": kinds.namespace(dv),
        "schematicID": kinds.annotations(dv).get(SCHEMATIC_ANNOTATION),
        "version": kinds.annotations(dv).get(VERSION_ANNOTATION),
        "phase": state.get("phase") or "Pending",
        "progress": state.get("progress") or "N/A",
        "storage": _request(dv),
        "storage_class": claim_class(pvc) or _storage(dv).get("storageClassName") or "",
        "url": redact.redact_url(_http(dv).get("url")),
        "checksum": _http(dv).get("checksum"),
        "failed": state.get("phase") == FAILED,
        "reason": importer_reason(dv) if state.get("phase") == FAILED else None,
        "consumers": who,
    }


def import_state(dv):
    """``(done, failed reason)`` of a golden's import, for a wait: only phase Failed is terminal."""
    if dv is None:
        return False, None
    phase = kinds.status(dv).get("phase")
    if phase == FAILED:
        return False, "the golden %s failed to import (%s)" % (kinds.ref(dv), importer_reason(dv))
    return phase == SUCCEEDED, None


def describe_import(dv):
    if dv is None:
        return "no DataVolume yet"
    state = kinds.status(dv)
    return "%s %s %s" % (kinds.ref(dv), state.get("phase") or "Pending", state.get("progress") or "N/A")


def delete_consumers(golden, observed):
    """Who uses the golden DataVolume ``golden`` (as read): the collection's reference query of its claim
    (``consumers.delete_consumers``: pods and VMs mounting it; claims, DataVolumes, VM
    dataVolumeTemplates and snapshots made from it, in any namespace; its own importer pods left out),
    and the worker disks whose golden annotation names it, DataVolumes and claims whose DataVolume is gone
    (``worker_disks``). ``observed``: ``consumers.volume_plan``'s."""
    namespace, name = kinds.namespace(golden), kinds.name(golden)
    found, _taken = who_uses.delete_consumers(golden, observed)
    seen = {(c["kind"], c["namespace"], c["name"]) for c in found}
    for disk in clones_of(namespace, name, observed_disks(observed)):
        kind = disk_kind(disk)
        if (kind, kinds.namespace(disk), kinds.name(disk)) in seen or kinds.terminating(disk):
            continue
        pool = disk_pool(disk)
        pool = pool.split("/", 1)[1] if pool else None
        found.append(
            who_uses.consumer(
                kind,
                kinds.namespace(disk),
                kinds.name(disk),
                "is a worker disk%s made from it (annotation %s%s)"
                % (
                    " of pool %s" % pool if pool else "",
                    GOLDEN_ANNOTATION,
                    "; a claim whose DataVolume is gone" if kind != "DataVolume" else "",
                ),
            )
        )
    return found


def observed_disks(observed):
    """``worker_disks`` of an observation (``consumers.volume_plan``'s: claims and DataVolumes)."""
    return worker_disks(observed.get("datavolumes") or [], observed.get("pvcs") or [])


def refuse_delete_in_use(golden, observed, pools=()):
    """Refuse deleting the golden ``golden`` while anything uses it, naming each consumer: what the serving
    truth of a worker golden says (``serving.worker_users``: its disks and claims, and every pool declared
    in ``pools`` that names it, whatever its size)."""
    found = serving.worker_users(golden, delete_consumers(golden, observed), pools, _pool_golden)
    refusal = who_uses.refuse_delete(
        "golden DataVolume %s" % kinds.ref(golden),
        found,
        "move those pools to another golden (or remove their osImage) and let their disks be replaced, "
        "then delete it",
        pools=consumers(kinds.namespace(golden), kinds.name(golden), observed_disks(observed))["pools"],
    )
    if refusal is not None:
        raise refusal


def _pool_golden(raw):
    return pool_request(raw)["golden"]


def refuse_missing_namespace(namespace, found, to_create):
    """Goldens to create need their namespace: a run would fail at the first create, so check mode must not
    promise it either."""
    if to_create and (found is None or kinds.terminating(found)):
        raise Refusal(
            "namespace %s" % namespace,
            "it %s, so the goldens %s cannot be created in it"
            % (
                "does not exist" if found is None else "is being deleted",
                ", ".join(kinds.name(dv) for dv in to_create),
            ),
            "create the namespace first (Cozystack makes %s with the platform), or give the namespace the "
            "goldens belong in" % NAMESPACE,
        )


def refuse_not_golden(namespace, name, dv):
    if dv is not None and not is_golden(dv):
        raise Refusal(
            "DataVolume %s/%s" % (namespace, name),
            "it is not a worker golden (it carries no %s / %s annotations)"
            % (SCHEMATIC_ANNOTATION, VERSION_ANNOTATION),
            "name a golden talos-worker-<schematicID>-<version>; other DataVolumes are not this module's "
            "to delete",
        )


# Storage classes ------------------------------------------------------------------------------------


def _annotated(sc, marks):
    notes = kinds.annotations(sc)
    return any(notes.get(mark) == "true" for mark in marks)


def _newest(classes):
    """CDI's pick of several annotated classes: the newest by creationTimestamp, then the first by name."""
    if not classes:
        return None
    newest = max(kinds.meta(sc).get("creationTimestamp") or "" for sc in classes)
    return min(kinds.name(sc) for sc in classes if (kinds.meta(sc).get("creationTimestamp") or "") == newest)


def resolve_default_class(storage_classes, content_type=VM_CONTENT):
    """``(class, where it came from)`` CDI gives a DataVolume whose ``spec.storage`` names no class.

    For VM disk content (``kubevirt``, a DataVolume's default content type) CDI prefers the class annotated
    ``storageclass.kubevirt.io/is-default-virt-class``; otherwise (and for ``archive``) the cluster default,
    annotated ``storageclass.kubernetes.io/is-default-class`` or its beta form. Of several, the newest
    wins. ``(None, None)`` when neither exists.
    """
    classes = list(storage_classes or ())
    if (content_type or VM_CONTENT) == VM_CONTENT:
        virt = _newest([sc for sc in classes if _annotated(sc, (VIRT_DEFAULT_CLASS,))])
        if virt:
            return virt, "the default virt StorageClass"
    plain = _newest([sc for sc in classes if _annotated(sc, (DEFAULT_CLASS, BETA_DEFAULT_CLASS))])
    return (plain, "the cluster default StorageClass") if plain else (None, None)


def default_class(storage_classes, content_type=VM_CONTENT):
    """The class CDI resolves an empty one of a DataVolume to (``resolve_default_class``), or None."""
    return resolve_default_class(storage_classes, content_type)[0]


def claim_class(pvc):
    """The class of a bound claim, which is where its volume is; None for an unbound or missing one."""
    if not pvc or kinds.status(pvc).get("phase") != "Bound":
        return None
    return kinds.spec(pvc).get("storageClassName") or None


def golden_class(golden, golden_pvc, default):
    """The golden's class: its bound claim's, else the class its spec asks for, else the cluster default."""
    return claim_class(golden_pvc) or _storage(golden).get("storageClassName") or default


def pool_class(pool, disk_pvcs, default, default_source="the cluster default StorageClass"):
    """``(class, where it came from)`` of a pool.

    A class the pool names is the class. An empty one is ``default``, the class CDI resolves it to
    (``resolve_default_class``), except for a pool that has cloned already: its bound disks say where it
    is, so moving a default later does not change the answer.
    """
    if pool.get("storageClass"):
        return pool["storageClass"], "the pool's storageClass"
    bound = sorted({c for c in (claim_class(p) for p in disk_pvcs or ()) if c})
    if len(bound) == 1:
        return bound[0], "the pool's bound disks"
    if len(bound) > 1:
        raise Refusal(
            pool_subject(pool),
            "its bound disks are on several StorageClasses (%s) and the pool names none" % ", ".join(bound),
            "set the pool's storageClass to the class its disks should be on",
        )
    return default, default_source


def pool_claims(pool, datavolumes, pvcs):
    """The claims of the pool's disks (``pool_disks`` of ``worker_disks``): where their class is read."""
    names = {kinds.name(d) for d in pool_disks(pool, worker_disks(datavolumes, pvcs))}
    return [p for p in pvcs or () if kinds.namespace(p) == pool["namespace"] and kinds.name(p) in names]


def refuse_unresolved(pool, pool_cls, gold_cls, golden_ref):
    if not pool_cls or not gold_cls:
        side = "the pool" if not pool_cls else "the golden %s" % golden_ref
        raise Refusal(
            pool_subject(pool),
            "%s has an empty StorageClass, which CDI resolves to the default virt StorageClass, else the "
            "cluster default, and the cluster has neither (no StorageClass is annotated %s or %s)"
            % (side, VIRT_DEFAULT_CLASS, DEFAULT_CLASS),
            "set storageClass explicitly on the pool and on the catalog entry",
        )


def refuse_class_mismatch(pool, pool_cls, pool_source, gold_cls, golden_ref):
    if pool_cls != gold_cls:
        raise Refusal(
            pool_subject(pool),
            "its StorageClass %s (%s) differs from the golden %s's StorageClass %s; CDI cannot CSI-clone "
            "across classes and would fall back to a host-assisted copy over the pod network"
            % (pool_cls, pool_source, golden_ref, gold_cls),
            "set the pool's storageClass to %s, or add a catalog entry (a new schematicID/version) whose "
            "storageClass is %s and point the pool at it, or remove osImage so the pool imports over HTTP"
            % (gold_cls, pool_cls),
            pool_class=pool_cls,
            golden_class=gold_cls,
        )


def refuse_disk_size(pool, disk_size, golden_size, golden_ref):
    want = quantity_bytes(disk_size, "%s diskSize" % pool_subject(pool))
    minimum = quantity_bytes(golden_size, "golden %s storage" % golden_ref)
    if want < minimum:
        raise Refusal(
            pool_subject(pool),
            "diskSize %s (%d bytes) is below the golden %s's storage %s (%d bytes), and a clone target "
            "cannot be smaller than its source" % (disk_size, want, golden_ref, golden_size, minimum),
            "set diskSize to at least %s" % golden_size,
        )


def golden_size(golden, golden_pvc):
    """What a clone target must hold: the golden claim's capacity once bound, else its request."""
    capacity = (kinds.status(golden_pvc).get("capacity") or {}).get("storage") if golden_pvc else None
    return capacity or _request(golden)


# Clone strategy and permission ----------------------------------------------------------------------


def clone_strategy(cdis, storage_profile):
    """``(strategy, where it came from)``: the CDI override, else the StorageProfile's, else CDI's default."""
    for cdi in cdis or ():
        override = kinds.spec(cdi).get("cloneStrategyOverride")
        if override:
            return override, "CDI %s spec.cloneStrategyOverride" % kinds.name(cdi)
    if storage_profile:
        for where, value in (
            ("spec", kinds.spec(storage_profile).get("cloneStrategy")),
            ("status", kinds.status(storage_profile).get("cloneStrategy")),
        ):
            if value:
                return value, "StorageProfile %s %s.cloneStrategy" % (kinds.name(storage_profile), where)
    return CDI_DEFAULT_STRATEGY, "CDI's default (no override, no StorageProfile strategy)"


def refuse_host_assisted(pool, strategy, source, storage_class, allow):
    if strategy == HOST_ASSISTED and not allow:
        raise Refusal(
            pool_subject(pool),
            "the clone strategy for StorageClass %s is %s (%s), a host-assisted copy of the whole golden "
            "over the pod network, the transfer cloning from a golden exists to remove"
            % (storage_class, strategy, source),
            "set CDI spec.cloneStrategyOverride (or the StorageProfile's cloneStrategy) to csi-clone, or "
            "pass allow_host_assisted=true to accept the copy",
        )


def access_review(pool_namespace, golden_namespace, name, service_account="default"):
    """The SubjectAccessReview CDI's clone authorization asks: may the pool's service account clone?"""
    user = "system:serviceaccount:%s:%s" % (pool_namespace, service_account)
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "groups": [
                "system:serviceaccounts",
                "system:serviceaccounts:%s" % pool_namespace,
                "system:authenticated",
            ],
            "resourceAttributes": {
                "namespace": golden_namespace,
                "verb": "create",
                "group": "cdi.kubevirt.io",
                "resource": "datavolumes",
                "subresource": "source",
                "name": name,
            },
        },
    }


def refuse_clone_forbidden(pool, review_status, golden_namespace):
    if not (review_status or {}).get("allowed"):
        why = (review_status or {}).get("reason") or "no RBAC rule allows it"
        raise Refusal(
            pool_subject(pool),
            "service accounts of namespace %s may not create datavolumes/source in %s (%s), so CDI would "
            "refuse the clone when the worker disk is created" % (pool["namespace"], golden_namespace, why),
            "bind the ClusterRole cdi-copy-dv (create on datavolumes/source) to the group "
            "system:serviceaccounts:%s, or to system:serviceaccounts, in %s"
            % (pool["namespace"], golden_namespace),
        )


# Pools ----------------------------------------------------------------------------------------------


def pool_subject(pool):
    pool = pool or {}
    cluster = "%s/" % pool["cluster"] if pool.get("cluster") else ""
    return "pool %s/%s%s" % (pool.get("namespace"), cluster, pool.get("name"))


def _talos_field(pool, builtin, field, subject):
    """A field of ``osImage.builtin``, else of the pool's Talos settings (``talos``), which it inherits."""
    value = builtin.get(field) if builtin.get(field) is not None else (pool.get("talos") or {}).get(field)
    if value is None:
        raise Refusal(
            subject,
            "osImage.builtin gives no %s and the pool's Talos settings (talos.%s) give none to inherit"
            % (field, field),
            "give talos.%s (the pool's Talos settings, which osImage.builtin inherits) or osImage.builtin.%s"
            % (field, field),
        )
    return value


def pool_request(raw):
    """The pool, validated: its (schematicID, version) follow the catalog's patterns.

    ``osImage.builtin`` clones the golden of its (schematicID, version), each inherited from the pool's Talos
    settings (``talos``) when it leaves it out (``builtin: {}`` inherits both). Without ``osImage`` the disk
    imports over HTTP: ``imageURL`` when given, else the factory image of the pool's Talos settings.
    """
    pool = dict(raw or {})
    subject = pool_subject(pool)
    for key in ("name", "namespace"):
        if not pool.get(key):
            raise Refusal(subject, "pool.%s is required" % key, "give the pool's name and namespace")
    pool["cluster"] = pool.get("cluster") or None
    pool["diskSize"] = str(pool.get("diskSize") or DISK_SIZE)
    quantity_bytes(pool["diskSize"], "%s diskSize" % subject)
    pool["storageClass"] = pool.get("storageClass") or ""
    os_image = pool.get("osImage")
    if os_image and (not isinstance(os_image, dict) or "builtin" not in os_image):
        raise Refusal(
            subject, "osImage has no builtin {schematicID, version}", "give osImage.builtin or drop osImage"
        )
    talos = pool.get("talos") or {}
    if os_image:
        builtin = os_image.get("builtin") or {}
        where = "%s osImage.builtin" % subject
        schematic = check_schematic(_talos_field(pool, builtin, "schematicID", subject), where)
        version = check_version(_talos_field(pool, builtin, "version", subject), where)
        pool["golden"] = golden_name(schematic, version)
        return pool
    pool["golden"] = None
    if not pool.get("imageURL") and (talos.get("schematicID") or talos.get("version")):
        where = "%s talos" % subject
        pool["imageURL"] = image_url(
            check_factory(talos.get("imageFactoryURL") or FACTORY, where),
            check_schematic(talos.get("schematicID"), where),
            check_version(talos.get("version"), where),
        )
    if not pool.get("imageURL"):
        raise Refusal(
            subject,
            "it has no osImage, no imageURL and no Talos settings, so there is nothing for its disk to "
            "import",
            "give osImage.builtin to clone a golden, or talos {schematicID, version} (or imageURL) for the "
            "HTTP import",
        )
    redact.refuse_credentials(
        pool["imageURL"],
        "%s imageURL" % subject,
        "give an image URL the worker disks may read without credentials, or osImage.builtin to clone a "
        "golden of the catalog",
    )
    return pool


def disk_name(pool):
    """The pool's disk: ``disk-system-<cluster>-<pool>`` as the chart names it, ``<pool>-disk-system``
    for a pool given without its cluster."""
    if pool.get("cluster"):
        return "%s%s-%s" % (DISK_PREFIX, pool["cluster"], pool["name"])
    return "%s-disk-system" % pool["name"]


def pool_disks(pool, disks):
    """The worker disks (``worker_disks``) of ``pool``: its pool annotation, and, for a pool given with its
    cluster, that cluster (``disk_cluster``). A pool given without one whose disks belong to several
    clusters of its namespace is refused: their classes would be read as one pool's."""
    mine = [
        d
        for d in disks
        if kinds.namespace(d) == pool["namespace"]
        and kinds.annotations(d).get(POOL_ANNOTATION) == pool["name"]
    ]
    if pool.get("cluster"):
        return [d for d in mine if disk_cluster(d, pool["name"]) == pool["cluster"]]
    clusters = sorted({disk_cluster(d, pool["name"]) for d in mine} - {None})
    if len(clusters) > 1:
        raise Refusal(
            pool_subject(pool),
            "the disks of pool %s in namespace %s belong to the clusters %s, and the pool names none"
            % (pool["name"], pool["namespace"], ", ".join(clusters)),
            "give pool.cluster, the tenant cluster the pool belongs to",
        )
    return mine


def render_http_disk(pool):
    """The worker disk as it renders without the feature: an HTTP import, the class left to the cluster.

    Nothing here depends on the catalog or on cluster state, so the render of a pool without osImage
    is byte-identical before and after the feature is adopted and no worker is rolled.
    """
    storage = _storage_request(pool["diskSize"], pool.get("storageClass"))
    return _disk_volume(
        pool,
        {USE_POPULATOR: "false"},
        {"source": {"http": {"url": pool["imageURL"]}}, "storage": storage},
    )


def render_clone_disk(pool, golden_namespace, resolved_class):
    """The worker disk cloned from its golden, on the class the guard checked (written, not left empty)."""
    notes = {GOLDEN_ANNOTATION: pool["golden"], POOL_ANNOTATION: pool["name"]}
    if pool.get("cluster"):
        notes[CLUSTER_ANNOTATION] = pool["cluster"]
    return _disk_volume(
        pool,
        notes,
        {
            "source": {"pvc": {"namespace": golden_namespace, "name": pool["golden"]}},
            "storage": {
                "resources": {"requests": {"storage": pool["diskSize"]}},
                "storageClassName": resolved_class,
            },
        },
    )


def _disk_volume(pool, annotations, spec):
    """The pool's system disk DataVolume with ``annotations`` and ``spec``."""
    return {
        "apiVersion": kinds.CDI,
        "kind": "DataVolume",
        "metadata": {"name": disk_name(pool), "namespace": pool["namespace"], "annotations": annotations},
        "spec": spec,
    }


def refuse_missing_golden(pool, golden, golden_namespace, entries=None):
    """No golden to clone: not in the catalog, not in the namespace, or failed to import."""
    ref = "%s/%s" % (golden_namespace, pool["golden"])
    if entries is not None and pool["golden"] not in {e["name"] for e in entries}:
        raise Refusal(
            pool_subject(pool),
            "its osImage names the golden %s, which has no entry in the worker image catalog" % ref,
            CATALOG_MOVE % golden_namespace,
        )
    if golden is None:
        raise Refusal(
            pool_subject(pool),
            "its osImage names the golden %s, which does not exist (is the worker image catalog enabled with "
            "this entry?)" % ref,
            CATALOG_MOVE % golden_namespace,
        )
    if kinds.status(golden).get("phase") == FAILED:
        raise Refusal(
            pool_subject(pool),
            "its golden %s failed to import (%s)" % (ref, importer_reason(golden)),
            "check the importer (the DataVolume's events and the importer pod's log), fix the cause, then "
            "delete the DataVolume %s so the catalog imports it again" % ref,
        )
