"""CDI in the lab: DataVolumes fill PersistentVolumeClaims, DataSources name clone sources.

A DataVolume gets a claim of its own name (owned by it) and a worker thread that fills it as CDI's
importer or cloner pod would: `http` really downloads as CDI's importer does (anonymously, or with the
`secretRef`'s accessKeyId and secretKey as HTTP basic auth, which the lab's S3 refuses as S3 does, so a
private bucket is read from a presigned URL), checks `checksum` and converts with the real `qemu-img`;
`s3` reads `<endpoint>/<bucket>/<key>` with requests signed (Signature Version 4, boto3) by the
`secretRef`'s accessKeyId and secretKey, as CDI's S3 importer does, so a private bucket imports with no
bearer URL in the spec (CDI's s3 source carries no checksum);
`registry` reads digest-pinned containerdisks from the lab's image store (`publish_container_disk`);
`pvc` and `snapshot` copy data; `blank` makes an empty sparse disk. Phases, `progress`, `restartCount`,
conditions and Events follow CDI's spelling so modules see what they would see on a cluster.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import lzma
import os
import pathlib
import re
import shutil
import ssl
import subprocess
import tarfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

from ..lifetime import tied
from ..objects import ApiError, ResourceType, clone, now_rfc3339
from . import Controller, LabContext
from .kit import CORE, SNAPSHOT_GROUP, condition, modify, record_event
from .storage import (
    BETA_DEFAULT_CLASS_ANNOTATION,
    DEFAULT_CLASS_ANNOTATION,
    copy_data,
    ensure_bound,
    parse_quantity,
    remove_data,
    snapshot_data,
    volume_path,
)

CDI_GROUP = "cdi.kubevirt.io"
CDI_VERSION = "v1beta1"
COMPONENT = "datavolume-controller"
IMMEDIATE_BINDING = "cdi.kubevirt.io/storage.bind.immediate.requested"
CLONE_TYPE = "cdi.kubevirt.io/cloneType"
# Why a clone fell back to a host-assisted copy (CDI's clone planner, pkg/controller/clone/planner.go, v1.62
# and v1.65): the target claim carries the message, and a Warning Event of the reason names it.
CLONE_FALLBACK_REASON = "cdi.kubevirt.io/cloneFallbackReason"
FALLBACKS = {
    "NoVolumeSnapshotClass": "No compatible volumesnapshotclass found",
    "IncompatibleVolumeModes": "The volume modes of source and target are incompatible",
    "NoProvisionerMatch": "The storageclass provisioner does not match the volumesnapshotcontent driver",
    "IncompatibleProvisioners": "Provisioners are incompatible",
    # The lab's: CDI's documentation lists "source and target share the same Storage Class" among the
    # prerequisites of an efficient clone, its planner compares CSI drivers only (README, "CDI").
    "IncompatibleStorageClasses": "The source and target PVCs do not share the same Storage Class",
}
POD_PHASE = "cdi.kubevirt.io/storage.pod.phase"
# CDI's default class for VM disks, preferred over the cluster default for `spec.storage` of kubevirt content.
VIRT_DEFAULT_CLASS_ANNOTATION = "storageclass.kubevirt.io/is-default-virt-class"
IMPORT_RETRIES = 3  # restarts of a failing importer before the DataVolume is Failed
RETRY_BACKOFF_SECONDS = 0.1  # CDI's pod backoff is 10s doubling; the lab keeps the shape, faster
PROGRESS_INTERVAL_SECONDS = 0.1
RATE_ENV = "LAB_CDI_IMPORT_BYTES_PER_SECOND"  # throttles downloads so tests can watch progress
CHUNK = 1024 * 1024
PROGRESS_NONE = "N/A"
PROGRESS_DONE = "100.0%"
_DIGEST_URL = re.compile(r"^docker://[^@\s]+@sha256:([0-9a-f]{64})$")
_CHECKSUM = re.compile(r"^(md5|sha1|sha256|sha512):([0-9a-fA-F]+)$")
_WFFC = "WaitForFirstConsumer"


# ------------------------------------------------------------------------- the image store


def registry_dir(state_dir: pathlib.Path) -> pathlib.Path:
    """Where containerdisks live, one `<sha256 hex>.img` per digest."""
    path = pathlib.Path(state_dir) / "registry"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _state_dir_of(target) -> pathlib.Path:
    if isinstance(target, str | os.PathLike):
        return pathlib.Path(target)
    for holder in (target, getattr(target, "context", None), getattr(target, "lab", None)):
        state_dir = getattr(holder, "state_dir", None)
        if state_dir is not None:
            return pathlib.Path(state_dir)
    raise TypeError(f"no state directory in {target!r}")


def publish_container_disk(lab_or_state_dir, path: pathlib.Path | str) -> str:
    """Store a disk image (qcow2 or raw) as a containerdisk; returns its digest `sha256:<hex>`.

    Accepts a Lab, a LabContext, anything with `.state_dir` or `.context.state_dir`, or the directory.
    A DataVolume imports it from `docker://<any host>/<any repo>@<digest>`.
    """
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
    stored = registry_dir(_state_dir_of(lab_or_state_dir)) / f"{digest.hexdigest()}.img"
    if not stored.exists():
        partial = stored.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        copy_data(pathlib.Path(path), partial)
        partial.rename(stored)
    return f"sha256:{digest.hexdigest()}"


# ----------------------------------------------------------------------------- conditions


def _set_condition(status: dict, ctype: str, value: str, reason: str = "", message: str = "") -> None:
    """CDI's updateCondition: transition time only when the status flips."""
    now = now_rfc3339()
    conditions = status.setdefault("conditions", [])
    cond = next((c for c in conditions if c.get("type") == ctype), None)
    if cond is None:
        cond = {"type": ctype}
        conditions.append(cond)
    if cond.get("status") != value:
        cond.update(
            status=value, reason=reason, message=message, lastTransitionTime=now, lastHeartbeatTime=now
        )
    elif cond.get("reason") != reason or cond.get("message") != message:
        cond.update(reason=reason, message=message, lastHeartbeatTime=now)


def _initial(status: dict) -> None:
    status.setdefault("phase", "Pending")
    status.setdefault("progress", PROGRESS_NONE)
    status.setdefault("restartCount", 0)
    if not status.get("conditions"):
        _set_condition(status, "Bound", "False", "NotFound", "No PVC found")
        _set_condition(status, "Ready", "False")
        _set_condition(status, "Running", "False")


def _same(a: dict, b: dict) -> bool:
    """Status equality that ignores heartbeats, so an unchanged state is not rewritten."""

    def strip(status: dict) -> dict:
        status = clone(status)
        for cond in status.get("conditions") or ():
            cond.pop("lastHeartbeatTime", None)
        return status

    return strip(a) == strip(b)


# ---------------------------------------------------------------------------------- plans


class _Hold(Exception):
    """The DataVolume cannot proceed yet; CDI reports why on the DataVolume and waits."""

    def __init__(self, reason: str, message: str, retry: float | None = 1.0, warn: bool = True):
        super().__init__(message)
        self.reason, self.message, self.retry, self.warn = reason, message, retry, warn


class _ImportError(Exception):
    """The importer or cloner failed; `fatal` ends the DataVolume at once, else it restarts."""

    def __init__(self, message: str, fatal: bool = False):
        super().__init__(message)
        self.message, self.fatal = message, fatal


class _Cancelled(Exception):
    pass


@dataclass
class _Plan:
    op: str  # "import" or "clone"
    source: str  # http, registry, blank, pvc, snapshot
    spec: dict
    source_ref: tuple[str, str] = ("", "")  # clone source namespace/name
    source_size: int | None = None
    source_class: str = ""
    source_mode: str = "Filesystem"
    source_driver: str = ""
    clone_type: str = ""
    fallback: tuple[str, str] | None = None  # (reason, message) of a host-assisted fallback


@dataclass
class _Run:
    uid: str
    namespace: str
    name: str
    cancel: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None


def _owner_of(pvc: dict) -> dict | None:
    for ref in pvc["metadata"].get("ownerReferences") or ():
        if ref.get("kind") == "DataVolume" and ref.get("controller"):
            return ref
    return None


def _progress(done: int, total: int | None) -> str:
    if not total:
        return PROGRESS_NONE
    return "%.2f%%" % min(100.0, done * 100.0 / total)


class DataVolumeController(Controller):
    """CDI's DataVolume controller with its importer and cloner: each transfer runs in a thread."""

    name = "cdi-datavolume"
    watches = ((CDI_GROUP, "datavolumes"), (CORE, "persistentvolumeclaims"))

    def __init__(self, lab: LabContext):
        super().__init__(lab)
        self._lock = threading.Lock()
        self._runs: dict[str, _Run] = {}
        self._http_bytes: dict[str, int] = {}  # URL -> bytes an HTTP import read from it

    def http_bytes(self, url: str | None = None) -> int | dict[str, int]:
        """Bytes read over HTTP by imports, for one URL or (without it) a copy of the per-URL table."""
        with self._lock:
            if url is not None:
                return self._http_bytes.get(url, 0)
            return dict(self._http_bytes)

    def _count_http(self, url: str, size: int) -> None:
        with self._lock:
            self._http_bytes[url] = self._http_bytes.get(url, 0) + size

    # --- types
    def _rt(self, group: str, plural: str, version: str = "v1") -> ResourceType:
        return self.lab.store.resource(group, version, plural)

    @property
    def _dv_rt(self) -> ResourceType:
        return self._rt(CDI_GROUP, "datavolumes", CDI_VERSION)

    # --- lifecycle
    def stop(self) -> None:
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            run.cancel.set()
        for run in runs:
            if run.thread is not None:
                run.thread.join(timeout=10)

    def deleted(self, rt: ResourceType, obj: dict) -> None:
        if rt.plural == "datavolumes":
            self._cancel(obj["metadata"]["uid"])

    def _cancel(self, uid: str) -> None:
        with self._lock:
            run = self._runs.get(uid)
        if run is not None:
            run.cancel.set()

    def transfers(self) -> list[tuple[str, str]]:
        """(namespace, name) of the DataVolumes whose import or clone is running now."""
        with self._lock:
            return sorted((run.namespace, run.name) for run in self._runs.values())

    def _running(self, uid: str) -> bool:
        with self._lock:
            return uid in self._runs

    # --- dispatch
    def reconcile(self, rt: ResourceType, obj: dict) -> float | None:
        if rt.plural == "persistentvolumeclaims":
            ref = _owner_of(obj)
            if ref is None:
                return None
            try:
                dv = self.lab.store.get(self._dv_rt, obj["metadata"]["namespace"], ref.get("name", ""))
            except ApiError:
                return None
            if dv["metadata"]["uid"] != ref.get("uid"):
                return None
            meta = dv["metadata"]
            if self.lab.faults.object_fault("DataVolume", meta["namespace"], meta["name"]) == "stuck":
                return None
            return self._sync(dv)
        return self._sync(obj)

    def _sync(self, dv: dict) -> float | None:
        meta = dv["metadata"]
        if meta.get("deletionTimestamp"):
            self._cancel(meta["uid"])
            return None
        phase = (dv.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed") or self._running(meta["uid"]):
            return None
        if not phase:  # CDI reports Pending before it makes the claim
            dv, _ = self._write(dv, lambda status: None)
            if dv is None:
                return None
        if self.lab.faults.object_fault("DataVolume", meta["namespace"], meta["name"]) == "fail":
            self._fail(dv, "injected failure: the importer pod failed", restarts=None)
            return None
        try:
            plan = self._plan(dv)
            pvc = self._claim(dv, plan)
        except _Hold as hold:
            self._hold(dv, hold)
            return hold.retry
        if (pvc.get("status") or {}).get("phase") != "Bound":
            return self._pending(dv, pvc)
        self._start(dv, pvc, plan)
        return None

    # --- status writes
    def _write(self, dv: dict, mutate) -> tuple[dict | None, bool]:
        """Apply `mutate` to the DataVolume's status; (new object or None when gone, changed)."""
        meta = dv["metadata"]
        changed = []

        def apply(obj: dict) -> bool:
            if obj["metadata"]["uid"] != meta["uid"]:
                raise ApiError(404, "NotFound", "the DataVolume was replaced")
            status = obj.setdefault("status", {})
            before = clone(status)
            _initial(status)
            mutate(status)
            if _same(before, status):
                return False
            changed.append(True)
            return True

        try:
            new = modify(self.lab.store, self._dv_rt, meta["namespace"], meta["name"], apply, status=True)
        except ApiError as exc:
            if exc.code != 404:
                raise
            return None, False
        return new, bool(changed)

    def _event(self, dv: dict | None, event_type: str, reason: str, message: str) -> None:
        if dv is not None:
            record_event(self.lab.store, dv, event_type, reason, message, COMPONENT)

    def _hold(self, dv: dict, hold: _Hold) -> None:
        def held(status: dict) -> None:
            if status.get("phase") not in ("Pending", "WaitForFirstConsumer"):
                status["phase"] = "Pending"
            _set_condition(status, "Ready", "False")
            _set_condition(status, "Running", "False", hold.reason, hold.message)

        new, changed = self._write(dv, held)
        if changed and hold.warn:
            self._event(new, "Warning", hold.reason, hold.message)

    def _pending(self, dv: dict, pvc: dict) -> float:
        name = pvc["metadata"]["name"]
        waits = self._waits_for_consumer(dv, pvc)

        def pending(status: dict) -> None:
            status["phase"] = _WFFC if waits else "Pending"
            status["claimName"] = name
            _set_condition(status, "Bound", "False", "Pending", f"PVC {name} Pending")
            _set_condition(status, "Ready", "False")
            _set_condition(status, "Running", "False")

        new, changed = self._write(dv, pending)
        if changed:
            self._event(new, "Normal", "Pending", f"PVC {name} Pending")
        return 1.0

    def _waits_for_consumer(self, dv: dict, pvc: dict) -> bool:
        if (dv["metadata"].get("annotations") or {}).get(IMMEDIATE_BINDING) == "true":
            return False
        name = (pvc.get("spec") or {}).get("storageClassName")
        if not name:
            return False
        try:
            sc = self.lab.store.get(self._rt("storage.k8s.io", "storageclasses"), None, name)
        except ApiError:
            return False
        return sc.get("volumeBindingMode") == _WFFC

    def _fail(self, dv: dict, message: str, restarts: int | None) -> None:
        claim = dv["metadata"]["name"]
        source = (dv.get("spec") or {}).get("source") or {}
        clone_src = source.get("pvc") or source.get("snapshot")

        def failed(status: dict) -> None:
            status["phase"] = "Failed"
            if restarts is not None:
                status["restartCount"] = restarts
            _set_condition(status, "Ready", "False")
            _set_condition(status, "Running", "False", "Error", message)

        new, changed = self._write(dv, failed)
        if changed:
            self._event(new, "Warning", "Error", message)
            if clone_src or (dv.get("spec") or {}).get("sourceRef"):
                src = "/".join(
                    filter(None, ((clone_src or {}).get("namespace"), (clone_src or {}).get("name")))
                )
                target = f"{dv['metadata']['namespace']}/{claim}"
                self._event(
                    new, "Warning", "CloneFailed", f"Cloning from {src or 'its source'} into {target} failed"
                )
            else:
                self._event(new, "Warning", "ImportFailed", f"Failed to import into PVC {claim}")
        self._annotate_claim(dv, "Failed")

    # --- what to do
    def _plan(self, dv: dict) -> _Plan:
        spec = dv.get("spec") or {}
        source = spec.get("source") or {}
        if spec.get("sourceRef"):
            source = self._resolve_ref(dv, spec["sourceRef"])
        kinds = [k for k in ("http", "s3", "registry", "blank", "pvc", "snapshot") if k in source]
        others = [k for k in source if k not in kinds]
        if len(kinds) + len(others) != 1:
            raise _Hold("InvalidSource", "exactly one DataVolume source is required", None)
        if others:
            msg = f"the lab's CDI does not import from source {others[0]!r}"
            raise _Hold("UnsupportedSource", msg, None)
        kind = kinds[0]
        if kind in ("http", "s3", "registry", "blank"):
            return _Plan("import", kind, source[kind] or {})
        return self._clone_plan(dv, kind, source[kind] or {})

    def _resolve_ref(self, dv: dict, ref: dict) -> dict:
        """The source a DataSource names; a DataSource that is not Ready rejects the DataVolume."""
        if ref.get("kind") != "DataSource":
            msg = f"Unsupported sourceRef kind {ref.get('kind')}, currently only DataSource is supported"
            raise _Hold("InvalidSourceRef", msg, None)
        namespace = ref.get("namespace") or dv["metadata"]["namespace"]
        name = ref.get("name", "")
        try:
            ds = self.lab.store.get(self._rt(CDI_GROUP, "datasources", CDI_VERSION), namespace, name)
        except ApiError as exc:
            if exc.code != 404:
                raise
            raise _Hold("NotFound", f'datasources.cdi.kubevirt.io "{name}" not found') from exc
        ready = condition(ds, "Ready") or {}
        if ready.get("status") != "True":
            why = ready.get("message") or "no Ready condition yet"
            msg = f"DataSource {namespace}/{name} is not ready: {why}"
            raise _Hold(ready.get("reason") or "DataSourceNotReady", msg)
        source = (ds.get("status") or {}).get("source") or (ds.get("spec") or {}).get("source") or {}
        found = {k: v for k, v in source.items() if k in ("pvc", "snapshot") and v}
        if not found:
            raise _Hold(
                "DataSourceNotReady", f"Empty source field in '{name}'. DataSource may not be ready yet"
            )
        return found

    def _clone_plan(self, dv: dict, kind: str, source: dict) -> _Plan:
        store = self.lab.store
        namespace = source.get("namespace") or dv["metadata"]["namespace"]
        name = source.get("name", "")
        plan = _Plan("clone", kind, source, (namespace, name))
        if kind == "pvc":
            try:
                pvc = store.get(self._rt(CORE, "persistentvolumeclaims"), namespace, name)
            except ApiError as exc:
                if exc.code != 404:
                    raise
                raise _Hold("CloneWithoutSource", f"The source pvc {name} doesn't exist") from exc
            owner = _owner_of(pvc)
            if owner is not None and self._dv_phase(namespace, owner.get("name", "")) != "Succeeded":
                raise _Hold("ImportPVCNotReady", "The source PVC is not fully imported", warn=False)
            if (pvc.get("status") or {}).get("phase") != "Bound":
                raise _Hold(
                    "ImportPVCNotReady", f"The source PVC {namespace}/{name} is not Bound", warn=False
                )
            pspec = pvc.get("spec") or {}
            capacity = ((pvc.get("status") or {}).get("capacity") or {}).get("storage")
            requested = ((pspec.get("resources") or {}).get("requests") or {}).get("storage")
            plan.source_size = parse_quantity(capacity or requested or 0)
            plan.source_class = pspec.get("storageClassName") or ""
            plan.source_mode = pspec.get("volumeMode") or "Filesystem"
            return plan
        try:
            vs = store.get(self._rt(SNAPSHOT_GROUP, "volumesnapshots"), namespace, name)
        except ApiError as exc:
            if exc.code != 404:
                raise
            raise _Hold("CloneWithoutSource", f"The source snapshot {name} doesn't exist") from exc
        status = vs.get("status") or {}
        if not status.get("readyToUse"):
            raise _Hold(
                "SnapshotNotReady", f"The source snapshot {namespace}/{name} is not ready", warn=False
            )
        try:
            content = store.get(
                self._rt(SNAPSHOT_GROUP, "volumesnapshotcontents"),
                None,
                status.get("boundVolumeSnapshotContentName", ""),
            )
        except ApiError as exc:
            raise _Hold("SnapshotNotReady", f"snapshot content of {namespace}/{name}: {exc.message}") from exc
        cspec = content.get("spec") or {}
        found = snapshot_data(self.lab, _content_handle(content))
        info = found[1] if found else {}
        plan.source_size = parse_quantity(status.get("restoreSize") or info.get("size") or 0)
        plan.source_mode = cspec.get("sourceVolumeMode") or info.get("volumeMode") or "Filesystem"
        plan.source_driver = cspec.get("driver") or ""
        return plan

    def _dv_phase(self, namespace: str, name: str) -> str | None:
        try:
            return (self.lab.store.get(self._dv_rt, namespace, name).get("status") or {}).get("phase")
        except ApiError:
            return None

    # --- the claim
    def _default_class(self, content_type: str = "kubevirt") -> str | None:
        """The class CDI gives a DataVolume's `spec.storage` that names none (CDI v1.57+): for VM disk
        content (`kubevirt`, the default) the class annotated `is-default-virt-class` first, else the
        cluster default (GA or beta annotation); of several, the newest, then the first by name."""
        classes = self.lab.store.list(self._rt("storage.k8s.io", "storageclasses"))[0]

        def newest(marks):
            marked = [
                sc
                for sc in classes
                if any((sc["metadata"].get("annotations") or {}).get(mark) == "true" for mark in marks)
            ]
            if not marked:
                return None
            top = max(sc["metadata"]["creationTimestamp"] for sc in marked)
            return min(sc["metadata"]["name"] for sc in marked if sc["metadata"]["creationTimestamp"] == top)

        if content_type == "kubevirt":
            virt = newest((VIRT_DEFAULT_CLASS_ANNOTATION,))
            if virt:
                return virt
        return newest((DEFAULT_CLASS_ANNOTATION, BETA_DEFAULT_CLASS_ANNOTATION))

    def _claim_spec(self, dv: dict, plan: _Plan) -> dict:
        spec = dv.get("spec") or {}
        if spec.get("pvc"):
            claim = clone(spec["pvc"])
        elif spec.get("storage") is not None:
            claim = clone(spec["storage"])  # completed as the StorageProfile would
            claim.setdefault("accessModes", ["ReadWriteOnce"])
            claim.setdefault("volumeMode", "Filesystem")
            if not claim.get("storageClassName"):
                default = self._default_class(spec.get("contentType") or "kubevirt")
                if default:
                    claim["storageClassName"] = default
        else:
            raise _Hold("ErrClaimNotValid", "DataVolume.spec.pvc or spec.storage is required", None)
        requests = claim.setdefault("resources", {}).setdefault("requests", {})
        if not requests.get("storage"):
            if plan.source_size is None:
                raise _Hold("ErrClaimNotValid", "DataVolume storage size is required for this source", None)
            requests["storage"] = str(plan.source_size)
        if plan.op == "clone":
            self._validate_clone(dv, plan, claim)
        return claim

    def _validate_clone(self, dv: dict, plan: _Plan, claim: dict) -> None:
        want = parse_quantity(claim["resources"]["requests"]["storage"])
        if plan.source_size is not None and want < plan.source_size:
            msg = (
                "The clone doesn't meet the validation requirements: target resources requests storage "
                f"size is smaller than the source {want} < {plan.source_size}"
            )
            raise _Hold("CloneValidationFailed", msg, 5.0)
        plan.clone_type = self._clone_type(plan, claim)
        if plan.clone_type != "copy":
            plan.fallback = None

    def _fallback(self, plan: _Plan, reason: str) -> str:
        plan.fallback = (reason, FALLBACKS[reason])
        return "copy"

    def _clone_type(self, plan: _Plan, claim: dict) -> str:
        """`snapshot` (or `csi-clone`) when the storage can do it, else host-assisted `copy`, with the
        reason of the fallback in `plan.fallback` (none when `copy` is the strategy asked for)."""
        store = self.lab.store
        target_class = claim.get("storageClassName") or ""
        target_mode = claim.get("volumeMode") or "Filesystem"
        provisioner = ""
        if target_class:
            try:
                sc = store.get(self._rt("storage.k8s.io", "storageclasses"), None, target_class)
                provisioner = sc.get("provisioner") or ""
            except ApiError:
                pass
        override = ""
        try:
            for cdi in store.list(self._rt(CDI_GROUP, "cdis", CDI_VERSION))[0]:
                override = (cdi.get("spec") or {}).get("cloneStrategyOverride") or override
        except ApiError:
            pass
        if plan.source == "snapshot":
            if override == "copy":
                return "copy"
            if plan.source_driver != provisioner:
                return self._fallback(plan, "NoProvisionerMatch")
            if plan.source_mode != target_mode:
                return self._fallback(plan, "IncompatibleVolumeModes")
            return "snapshot"
        strategy = override or self._profile_strategy(target_class) or "snapshot"
        if strategy == "copy":
            return "copy"
        if strategy == "snapshot":
            try:
                classes = store.list(self._rt(SNAPSHOT_GROUP, "volumesnapshotclasses"))[0]
            except ApiError:
                classes = []
            if not provisioner or not any(c.get("driver") == provisioner for c in classes):
                return self._fallback(plan, "NoVolumeSnapshotClass")
        if not provisioner or self._provisioner(plan.source_class) != provisioner:
            return self._fallback(plan, "IncompatibleProvisioners")
        if plan.source_mode != target_mode:
            return self._fallback(plan, "IncompatibleVolumeModes")
        if plan.source_class != target_class:
            return self._fallback(plan, "IncompatibleStorageClasses")
        return strategy

    def _provisioner(self, storage_class: str) -> str:
        try:
            sc = self.lab.store.get(self._rt("storage.k8s.io", "storageclasses"), None, storage_class)
        except ApiError:
            return ""
        return sc.get("provisioner") or ""

    def _profile_strategy(self, storage_class: str) -> str:
        """The StorageProfile's clone strategy for a class (spec first, then status), or ""."""
        try:
            profile = self.lab.store.get(
                self._rt(CDI_GROUP, "storageprofiles", CDI_VERSION), None, storage_class
            )
        except ApiError:
            return ""
        return (
            (profile.get("spec") or {}).get("cloneStrategy")
            or (profile.get("status") or {}).get("cloneStrategy")
            or ""
        )

    def _claim(self, dv: dict, plan: _Plan) -> dict:
        store, meta = self.lab.store, dv["metadata"]
        pvc_rt = self._rt(CORE, "persistentvolumeclaims")
        if store.exists(pvc_rt, meta["namespace"], meta["name"]):
            pvc = store.get(pvc_rt, meta["namespace"], meta["name"])
            if (_owner_of(pvc) or {}).get("uid") != meta["uid"]:
                msg = f'Resource "{meta["name"]}" already exists and is not managed by DataVolume'
                raise _Hold("ErrResourceExists", msg, 2.0)
            if plan.op == "clone" and not plan.clone_type:
                plan.clone_type = (pvc["metadata"].get("annotations") or {}).get(CLONE_TYPE) or "copy"
        else:
            pvc = store.create(pvc_rt, self._claim_body(dv, plan))
            if plan.op == "clone" and plan.fallback is not None:
                record_event(store, pvc, "Warning", *plan.fallback, "clone-populator")
        if (pvc.get("status") or {}).get("phase") != "Bound":
            immediate = (meta.get("annotations") or {}).get(IMMEDIATE_BINDING) == "true"
            pvc = ensure_bound(self.lab, meta["namespace"], meta["name"], consumer=immediate)
        return pvc

    def _claim_body(self, dv: dict, plan: _Plan) -> dict:
        meta = dv["metadata"]
        spec = self._claim_spec(dv, plan)  # first: it decides the clone type the annotations carry
        notes = {
            "cdi.kubevirt.io/storage.contentType": (dv.get("spec") or {}).get("contentType") or "kubevirt"
        }
        if plan.op == "import":
            notes["cdi.kubevirt.io/storage.import.source"] = "none" if plan.source == "blank" else plan.source
            if plan.spec.get("url"):
                notes["cdi.kubevirt.io/storage.import.endpoint"] = plan.spec["url"]
            if plan.spec.get("secretRef"):
                notes["cdi.kubevirt.io/storage.import.secretName"] = plan.spec["secretRef"]
        else:
            notes[CLONE_TYPE] = plan.clone_type
            notes["k8s.io/CloneRequest"] = "/".join(plan.source_ref)
            if plan.fallback is not None:
                notes[CLONE_FALLBACK_REASON] = plan.fallback[1]
        if (meta.get("annotations") or {}).get(IMMEDIATE_BINDING) == "true":
            notes[IMMEDIATE_BINDING] = "true"
        labels = dict(meta.get("labels") or {})
        labels.update({"app": "containerized-data-importer", "app.kubernetes.io/component": "storage"})
        owner = {
            "apiVersion": f"{CDI_GROUP}/{CDI_VERSION}",
            "kind": "DataVolume",
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        return {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "labels": labels,
                "annotations": notes,
                "ownerReferences": [owner],
            },
            "spec": spec,
        }

    def _annotate_claim(self, dv: dict, phase: str) -> None:
        meta = dv["metadata"]

        def mark(obj: dict) -> bool:
            if (_owner_of(obj) or {}).get("uid") != meta["uid"]:
                return False
            notes = obj["metadata"].setdefault("annotations", {})
            if notes.get(POD_PHASE) == phase:
                return False
            notes[POD_PHASE] = phase
            return True

        try:
            modify(
                self.lab.store,
                self._rt(CORE, "persistentvolumeclaims"),
                meta["namespace"],
                meta["name"],
                mark,
            )
        except ApiError as exc:
            if exc.code != 404:
                raise

    # --- the transfer
    def _start(self, dv: dict, pvc: dict, plan: _Plan) -> None:
        meta = dv["metadata"]
        claim = pvc["metadata"]["name"]
        scheduled = "ImportScheduled" if plan.op == "import" else "CloneScheduled"

        def schedule(status: dict) -> None:
            status["phase"] = scheduled
            status["claimName"] = claim
            _set_condition(status, "Bound", "True", "Bound", f"PVC {claim} Bound")
            _set_condition(status, "Ready", "False")
            _set_condition(status, "Running", "False", "Pending", "")

        def type_note(obj: dict) -> bool:
            notes = obj["metadata"].setdefault("annotations", {})
            if notes.get(CLONE_TYPE) == plan.clone_type:
                return False
            notes[CLONE_TYPE] = plan.clone_type
            return True

        if plan.op == "clone":
            try:
                dv = modify(self.lab.store, self._dv_rt, meta["namespace"], meta["name"], type_note)
            except ApiError as exc:
                if exc.code != 404:
                    raise
                return
        new, changed = self._write(dv, schedule)
        if new is None:
            return
        if changed:
            self._event(new, "Normal", "Bound", f"PVC {claim} Bound")
            if plan.op == "import":
                self._event(new, "Normal", scheduled, f"Import into {claim} scheduled")
            else:
                src = "/".join(plan.source_ref)
                self._event(
                    new, "Normal", scheduled, f"Cloning from {src} into {meta['namespace']}/{claim} scheduled"
                )
        run = _Run(meta["uid"], meta["namespace"], meta["name"])
        run.thread = threading.Thread(
            target=self._work, args=(run, plan), name=f"lab-cdi-{meta['name']}", daemon=True
        )
        with self._lock:
            if meta["uid"] in self._runs:
                return
            self._runs[meta["uid"]] = run
        run.thread.start()

    def _work(self, run: _Run, plan: _Plan) -> None:
        scratch = self.lab.state_dir / "cdi-scratch" / run.uid
        try:
            self._attempts(run, plan, scratch)
        except _Cancelled:
            pass
        except Exception as exc:  # the DataVolume must not stay in progress for ever
            dv = self._current(run)
            if dv is not None:
                self._fail(dv, f"lab importer error: {exc}", restarts=None)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
            with self._lock:
                self._runs.pop(run.uid, None)

    def _current(self, run: _Run) -> dict | None:
        try:
            dv = self.lab.store.get(self._dv_rt, run.namespace, run.name)
        except ApiError:
            return None
        if dv["metadata"]["uid"] != run.uid or dv["metadata"].get("deletionTimestamp"):
            return None
        return dv

    def _attempts(self, run: _Run, plan: _Plan, scratch: pathlib.Path) -> None:
        if plan.op == "import":
            in_progress = "ImportInProgress"
        elif plan.clone_type == "csi-clone":
            in_progress = "CSICloneInProgress"
        elif plan.clone_type == "snapshot":
            smart = "SnapshotForSmartCloneInProgress"
            in_progress = "CloneFromSnapshotSourceInProgress" if plan.source == "snapshot" else smart
        else:
            in_progress = "CloneInProgress"
        restarts = int(((self._current(run) or {}).get("status") or {}).get("restartCount") or 0)
        first = True
        while True:
            dv = self._current(run)
            if dv is None:
                raise _Cancelled()

            def progressing(status: dict) -> None:
                status["phase"] = in_progress
                _set_condition(status, "Running", "True", "", "")
                _set_condition(status, "Ready", "False", "TransferRunning", "")

            new, changed = self._write(dv, progressing)
            if new is None:
                raise _Cancelled()
            if changed and first:
                claim = run.name
                if plan.op == "import":
                    self._event(new, "Normal", "ImportInProgress", f"Import into {claim} in progress")
                else:
                    src = "/".join(plan.source_ref)
                    msg = f"Cloning from {src} into {run.namespace}/{claim} in progress"
                    self._event(new, "Normal", "CloneInProgress", msg)
            first = False
            shutil.rmtree(scratch, ignore_errors=True)
            scratch.mkdir(parents=True)
            try:
                self._transfer(run, plan, scratch)
            except _ImportError as err:
                dv = self._current(run)
                if dv is None:
                    raise _Cancelled() from err
                if err.fatal or restarts >= IMPORT_RETRIES:
                    self._fail(dv, err.message, restarts=restarts)
                    return
                restarts += 1
                self._restarted(dv, err.message, restarts)
                if run.cancel.wait(RETRY_BACKOFF_SECONDS * 2 ** (restarts - 1)):
                    raise _Cancelled() from err
                continue
            self._succeeded(run, plan)
            return

    def _restarted(self, dv: dict, message: str, restarts: int) -> None:
        def restarted(status: dict) -> None:
            status["restartCount"] = restarts
            _set_condition(status, "Running", "False", "Error", message)
            _set_condition(status, "Ready", "False")

        new, _ = self._write(dv, restarted)
        self._event(new, "Warning", "Error", message)

    def _succeeded(self, run: _Run, plan: _Plan) -> None:
        dv = self._current(run)
        if dv is None:
            raise _Cancelled()
        done = "Import Complete" if plan.op == "import" else "Clone Complete"

        def success(status: dict) -> None:
            status["phase"] = "Succeeded"
            status["progress"] = PROGRESS_DONE
            _set_condition(status, "Running", "False", "Completed", done)
            _set_condition(status, "Ready", "True")

        self._annotate_claim(dv, "Succeeded")
        new, changed = self._write(dv, success)
        if not changed:
            return
        if plan.op == "import":
            self._event(new, "Normal", "ImportSucceeded", f"Successfully imported into PVC {run.name}")
        else:
            src = "/".join(plan.source_ref)
            msg = f"Successfully cloned from {src} into {run.namespace}/{run.name}"
            self._event(new, "Normal", "CloneSucceeded", msg)

    def _checkpoint(self, run: _Run) -> None:
        """Between chunks: honour cancellation and the `stuck`/`fail` faults of the DataVolume."""
        while True:
            if run.cancel.is_set() or self._current(run) is None:
                raise _Cancelled()
            fault = self.lab.faults.object_fault("DataVolume", run.namespace, run.name)
            if fault == "fail":
                raise _ImportError("injected failure: the importer pod failed", fatal=True)
            if fault != "stuck":
                return
            run.cancel.wait(0.1)

    def _set_progress(self, run: _Run, value: str) -> None:
        dv = self._current(run)
        if dv is not None:
            self._write(dv, lambda status: status.update(progress=value))

    def _target(self, run: _Run) -> tuple[pathlib.Path, str, int]:
        """(data path, volume mode, size) of the DataVolume's bound claim."""
        pvc = self.lab.store.get(self._rt(CORE, "persistentvolumeclaims"), run.namespace, run.name)
        mode = (pvc.get("spec") or {}).get("volumeMode") or "Filesystem"
        capacity = ((pvc.get("status") or {}).get("capacity") or {}).get("storage")
        requested = (((pvc.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage")
        return volume_path(self.lab, pvc), mode, parse_quantity(capacity or requested or 0)

    def _transfer(self, run: _Run, plan: _Plan, scratch: pathlib.Path) -> None:
        self._checkpoint(run)
        target, mode, size = self._target(run)
        dv = self._current(run) or {}
        content_type = (dv.get("spec") or {}).get("contentType") or "kubevirt"
        if plan.source in ("http", "s3"):
            image = self._download(run, plan.spec, scratch, signed=plan.source == "s3")
            self._write_disk(run, image, target, mode, size, content_type, scratch)
        elif plan.source == "registry":
            image = self._pull(plan.spec)
            self._write_disk(run, image, target, mode, size, "kubevirt", scratch)
        elif plan.source == "blank":
            _blank(target, mode, size)
        else:
            self._clone_data(run, plan, target, mode)
        self._checkpoint(run)

    # --- sources
    def _download(self, run: _Run, spec: dict, scratch: pathlib.Path, signed: bool = False) -> pathlib.Path:
        url = spec.get("url") or ""
        expected = None
        if spec.get("checksum"):
            match = _CHECKSUM.match(spec["checksum"].strip())
            if not match:
                raise _ImportError(
                    f"invalid checksum {spec['checksum']!r}: want <md5|sha1|sha256|sha512>:<hex>", True
                )
            expected = (match.group(1), match.group(2).lower())
        digest = hashlib.new(expected[0]) if expected else None
        body, total, close = (self._open_s3 if signed else self._open)(run, spec, url)
        path = scratch / "source"
        rate = float(os.environ.get(RATE_ENV) or 0)
        done, started, last = 0, time.monotonic(), 0.0
        self._set_progress(run, _progress(0, total))
        try:
            with open(path, "wb") as out:
                while True:
                    self._checkpoint(run)
                    chunk = body.read(min(CHUNK, int(rate / 10) or CHUNK) if rate else CHUNK)
                    if not chunk:
                        break
                    out.write(chunk)
                    done += len(chunk)
                    self._count_http(url, len(chunk))
                    if digest is not None:
                        digest.update(chunk)
                    if rate:
                        ahead = done / rate - (time.monotonic() - started)
                        if ahead > 0 and run.cancel.wait(ahead):
                            raise _Cancelled()
                    now = time.monotonic()
                    if now - last >= PROGRESS_INTERVAL_SECONDS:
                        last = now
                        self._set_progress(run, _progress(done, total))
        except (OSError, urllib.error.URLError) as exc:
            raise _ImportError(f"Unable to transfer source data to scratch space: {exc}") from exc
        finally:
            close()
        if total is not None and done != total:
            raise _ImportError(f"Unable to transfer source data: got {done} of {total} bytes")
        self._set_progress(run, _progress(done, total or done))
        if expected is not None and digest is not None and digest.hexdigest() != expected[1]:
            algo = expected[0]
            raise _ImportError(
                f"Unable to process data: checksum mismatch: expected {algo}:{expected[1]}, "
                f"calculated {algo}:{digest.hexdigest()}",
                fatal=True,
            )
        return path

    def _secret_keys(self, run: _Run, secret_name: str) -> tuple[str, str]:
        try:
            secret = self.lab.store.get(self._rt(CORE, "secrets"), run.namespace, secret_name)
        except ApiError as exc:
            raise _ImportError(f'Error: secret "{secret_name}" not found') from exc
        data = secret.get("data") or {}
        plain = secret.get("stringData") or {}

        def value(key: str) -> str:
            if key in data:
                return base64.b64decode(data[key]).decode()
            return plain.get(key, "")

        return value("accessKeyId"), value("secretKey")

    def _open(self, run: _Run, spec: dict, url: str):
        """(readable body, content length or None, close) for the URL; errors as CDI words them."""
        secret = spec.get("secretRef")
        request = urllib.request.Request(url)
        if secret:
            user, password = self._secret_keys(run, secret)
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        context = None
        if url.startswith("https://"):
            context = ssl.create_default_context()
            if spec.get("certConfigMap"):
                context.load_verify_locations(cadata=self._ca_bundle(run, spec["certConfigMap"]))
        try:
            response = urllib.request.urlopen(request, timeout=30, context=context)
        except urllib.error.HTTPError as exc:
            exc.close()
            raise _ImportError(
                "Unable to connect to http data source: expected status code 200, "
                f"got {exc.code}. Status: {exc.code} {exc.reason}"
            ) from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise _ImportError(f"Unable to connect to http data source: {reason}") from exc
        return response, response.length, response.close

    def _open_s3(self, run: _Run, spec: dict, url: str):
        """(body, content length, close) of ``<scheme>://<endpoint>/<bucket>/<key>``, read with a GetObject
        signed by the secretRef's keys (anonymous without one), as CDI's S3 importer reads it."""
        import boto3
        from botocore import UNSIGNED
        from botocore.config import Config

        parts = urllib.parse.urlsplit(url)
        bucket, _slash, key = urllib.parse.unquote(parts.path.lstrip("/")).partition("/")
        if parts.scheme not in ("http", "https") or not bucket or not key:
            raise _ImportError(
                f"Unable to process data: s3 url {url!r} is not <endpoint>/<bucket>/<key>", True
            )
        secret = spec.get("secretRef")
        options: dict = {"s3": {"addressing_style": "path"}, "retries": {"total_max_attempts": 1}}
        keys: dict = {}
        if secret:
            access, secret_key = self._secret_keys(run, secret)
            keys = {"aws_access_key_id": access, "aws_secret_access_key": secret_key}
            options["signature_version"] = "s3v4"
        else:
            options["signature_version"] = UNSIGNED
        client = boto3.session.Session().client(
            "s3",
            endpoint_url="%s://%s" % (parts.scheme, parts.netloc),
            region_name="us-east-1",
            config=Config(**options),
            **keys,
        )
        try:
            got = client.get_object(Bucket=bucket, Key=key)
        except Exception as exc:
            raise _ImportError(f"Unable to connect to s3 data source: {exc}") from exc
        body = got["Body"]
        return body, got.get("ContentLength"), body.close

    def _ca_bundle(self, run: _Run, name: str) -> str:
        try:
            cm = self.lab.store.get(self._rt(CORE, "configmaps"), run.namespace, name)
        except ApiError as exc:
            raise _ImportError(f'Error: configmap "{name}" not found') from exc
        return "\n".join((cm.get("data") or {}).values())

    def _pull(self, spec: dict) -> pathlib.Path:
        url = spec.get("url") or ""
        match = _DIGEST_URL.match(url)
        if not match:
            raise _ImportError(
                f"Unable to process data: the lab registry serves digest-pinned images only "
                f"(docker://<host>/<repo>@sha256:<64 hex>), got {url!r}",
                fatal=True,
            )
        image = registry_dir(self.lab.state_dir) / f"{match.group(1)}.img"
        if not image.exists():
            raise _ImportError(
                "Unable to process data: Unable to transfer source data to scratch space: Failed to read "
                f"registry image: Error retrieving image: reading manifest sha256:{match.group(1)} in "
                f"{url[len('docker://') :].split('@')[0]}: manifest unknown"
            )
        return image

    # --- writing the disk
    def _write_disk(
        self,
        run: _Run,
        image: pathlib.Path,
        target: pathlib.Path,
        mode: str,
        size: int,
        content_type: str,
        scratch: pathlib.Path,
    ) -> None:
        if content_type == "archive":
            if mode == "Block":
                raise _ImportError(
                    "Unable to process data: archive content cannot be written to a block volume", True
                )
            try:
                with tarfile.open(image) as archive:
                    archive.extractall(target, filter="data")
            except (tarfile.TarError, OSError) as exc:
                raise _ImportError(f"Unable to process data: {exc}", True) from exc
            return
        image = _decompress(image, scratch)
        info = _image_info(image)
        virtual = int(info.get("virtual-size") or 0)
        if virtual > size:
            raise _ImportError(
                f"Virtual image size {virtual} is larger than the reported available storage {size}. "
                "A larger PVC is required.",
                fatal=True,
            )
        fmt = info.get("format") or "raw"
        if mode == "Block":
            self._qemu_img(
                run, ["convert", "-t", "writeback", "-f", fmt, "-O", "raw", "-n", str(image), str(target)]
            )
            return
        disk = target / "disk.img"
        partial = target / "disk.img.partial"
        partial.unlink(missing_ok=True)
        self._qemu_img(run, ["convert", "-t", "writeback", "-f", fmt, "-O", "raw", str(image), str(partial)])
        if partial.stat().st_size < size:
            os.truncate(partial, size)  # CDI grows the image to fill the volume
        partial.rename(disk)

    def _qemu_img(self, run: _Run, args: list[str]) -> None:
        proc = subprocess.Popen(
            tied(["qemu-img", *args]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        while True:
            try:
                _, err = proc.communicate(timeout=0.1)
                break
            except subprocess.TimeoutExpired:
                if run.cancel.is_set():
                    proc.kill()
                    proc.communicate()
                    raise _Cancelled() from None
        if proc.returncode != 0:
            raise _ImportError(f"Unable to process data: qemu-img: {err.decode(errors='replace').strip()}")

    def _clone_data(self, run: _Run, plan: _Plan, target: pathlib.Path, mode: str) -> None:
        store = self.lab.store
        namespace, name = plan.source_ref
        if plan.source == "pvc":
            try:
                pvc = store.get(self._rt(CORE, "persistentvolumeclaims"), namespace, name)
                src = volume_path(self.lab, pvc)
            except (ApiError, ValueError) as exc:
                raise _ImportError(f"The source pvc {namespace}/{name} is not available: {exc}") from exc
            src_mode = (pvc.get("spec") or {}).get("volumeMode") or "Filesystem"
        else:
            try:
                vs = store.get(self._rt(SNAPSHOT_GROUP, "volumesnapshots"), namespace, name)
                content = store.get(
                    self._rt(SNAPSHOT_GROUP, "volumesnapshotcontents"),
                    None,
                    (vs.get("status") or {}).get("boundVolumeSnapshotContentName", ""),
                )
            except ApiError as exc:
                raise _ImportError(
                    f"The source snapshot {namespace}/{name} is not available: {exc.message}"
                ) from exc
            found = snapshot_data(self.lab, _content_handle(content))
            if found is None:
                raise _ImportError(f"The data of snapshot {namespace}/{name} is missing")
            src, info = found
            src_mode = info.get("volumeMode") or ("Filesystem" if src.is_dir() else "Block")
        self._set_progress(run, PROGRESS_NONE)
        try:
            if src_mode == "Filesystem" and mode == "Filesystem":
                for child in sorted(src.iterdir()):
                    copy_data(child, target / child.name)
            elif src_mode == "Block" and mode == "Block":
                size = target.stat().st_size
                remove_data(self.lab, target)
                copy_data(src, target)
                if target.stat().st_size < size:
                    os.truncate(target, size)
            elif mode == "Block":  # a Filesystem source's disk image onto a device
                image = src / "disk.img"
                if not image.exists():
                    raise _ImportError(f"the source {namespace}/{name} holds no disk.img", True)
                if image.stat().st_size > target.stat().st_size:
                    raise _ImportError("the source disk image is larger than the target device", True)
                self._qemu_img(run, ["convert", "-f", "raw", "-O", "raw", "-n", str(image), str(target)])
            else:
                self._qemu_img(run, ["convert", "-f", "raw", "-O", "raw", str(src), str(target / "disk.img")])
        except OSError as exc:
            raise _ImportError(f"Unable to clone data: {exc}") from exc


def _content_handle(content: dict) -> str:
    return ((content.get("spec") or {}).get("source") or {}).get("snapshotHandle") or (
        (content.get("status") or {}).get("snapshotHandle") or ""
    )


def _blank(target: pathlib.Path, mode: str, size: int) -> None:
    path = target if mode == "Block" else target / "disk.img"
    with open(path, "wb"):
        pass  # truncated: a retried import starts from nothing
    os.truncate(path, size)


def _decompress(image: pathlib.Path, scratch: pathlib.Path) -> pathlib.Path:
    """gzip and xz images are unpacked first, as CDI's importer does."""
    with open(image, "rb") as handle:
        magic = handle.read(6)
    if magic[:2] == b"\x1f\x8b":
        opener = gzip.open
    elif magic == b"\xfd7zXZ\x00":
        opener = lzma.open
    else:
        return image
    out = scratch / "unpacked"
    try:
        with opener(image, "rb") as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, CHUNK)
    except (OSError, EOFError, lzma.LZMAError) as exc:
        raise _ImportError(f"Unable to process data: {exc}", True) from exc
    return out


def _image_info(image: pathlib.Path) -> dict:
    result = subprocess.run(
        ["qemu-img", "info", "--output=json", str(image)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise _ImportError(f"Unable to process data: qemu-img: {result.stderr.strip()}", True)
    return json.loads(result.stdout)


# ----------------------------------------------------------------------------- DataSource


class DataSourceController(Controller):
    """CDI's DataSource controller: `Ready` when the PVC (or its import) or the snapshot is usable."""

    name = "cdi-datasource"
    watches = (
        (CDI_GROUP, "datasources"),
        (CDI_GROUP, "datavolumes"),
        (CORE, "persistentvolumeclaims"),
        (SNAPSHOT_GROUP, "volumesnapshots"),
    )
    resync_seconds = 5.0

    def _ds_rt(self) -> ResourceType:
        return self.lab.store.resource(CDI_GROUP, CDI_VERSION, "datasources")

    def reconcile(self, rt: ResourceType, obj: dict) -> float | None:
        if rt.plural == "datasources":
            self._refresh(obj)
            return None
        self._refresh_users(obj)
        return None

    def deleted(self, rt: ResourceType, obj: dict) -> None:
        if rt.plural != "datasources":
            self._refresh_users(obj)

    def _refresh_users(self, obj: dict) -> None:
        """A source changed: refresh the DataSources that name it."""
        meta = obj["metadata"]
        key = (meta.get("namespace"), meta.get("name"))
        try:
            sources = self.lab.store.list(self._ds_rt())[0]
        except ApiError:
            return
        for ds in sources:
            _, source = self._resolve(ds)
            for ref in (source or {}).values():
                if (
                    isinstance(ref, dict)
                    and (ref.get("namespace") or ds["metadata"]["namespace"], ref.get("name")) == key
                ):
                    self._refresh(ds)
                    break

    def _resolve(self, ds: dict) -> tuple[str | None, dict | None]:
        """(error reason or None, the source) following one DataSource reference."""
        source = (ds.get("spec") or {}).get("source") or {}
        ref = source.get("dataSource")
        if not ref:
            return None, source
        meta = ds["metadata"]
        namespace = ref.get("namespace") or meta["namespace"]
        if namespace != meta["namespace"]:
            return "CrossNamespaceReference", None
        if ref.get("name") == meta["name"]:
            return "SelfReference", None
        try:
            target = self.lab.store.get(self._ds_rt(), namespace, ref.get("name", ""))
        except ApiError:
            return "NotFound", None
        target_source = (target.get("spec") or {}).get("source") or {}
        if target_source.get("dataSource"):
            return "MaxReferenceDepthReached", None
        return None, target_source

    def _refresh(self, ds: dict) -> None:
        meta = ds["metadata"]
        error, source = self._resolve(ds)
        if error:
            messages = {
                "CrossNamespaceReference": "DataSource cannot reference a DataSource in another namespace",
                "SelfReference": "DataSource cannot self-reference",
                "NotFound": "referenced DataSource not found",
                "MaxReferenceDepthReached": "DataSource reference chain exceeds maximum depth of 1",
            }
            value, reason, message = "False", error, messages[error]
        else:
            value, reason, message = self._source_state(meta["namespace"], source or {})

        def update(obj: dict) -> bool:
            status = obj.setdefault("status", {})
            before = clone(status)
            status["source"] = clone(source) if value == "True" and source else {}
            _set_condition(status, "Ready", value, reason, message)
            return not _same(before, status)

        try:
            modify(self.lab.store, self._ds_rt(), meta["namespace"], meta["name"], update, status=True)
        except ApiError as exc:
            if exc.code != 404:
                raise

    def _source_state(self, namespace: str, source: dict) -> tuple[str, str, str]:
        store = self.lab.store
        if source.get("pvc"):
            ns = source["pvc"].get("namespace") or namespace
            name = source["pvc"].get("name", "")
            pvc_here = store.exists(store.resource(CORE, "v1", "persistentvolumeclaims"), ns, name)
            try:
                dv = store.get(store.resource(CDI_GROUP, CDI_VERSION, "datavolumes"), ns, name)
            except ApiError:
                dv = None
            if dv is not None:
                phase = (dv.get("status") or {}).get("phase") or ""
                if phase != "Succeeded":
                    return "False", phase, f"Import DataVolume phase {phase}"
            elif not pvc_here:
                return "False", "NotFound", "PVC not found"
            return "True", "Ready", "DataSource is ready to be consumed"
        if source.get("snapshot"):
            ns = source["snapshot"].get("namespace") or namespace
            try:
                vs = store.get(
                    store.resource(SNAPSHOT_GROUP, "v1", "volumesnapshots"), ns, source["snapshot"]["name"]
                )
            except ApiError:
                return "False", "NotFound", "Snapshot not found"
            if (vs.get("status") or {}).get("readyToUse"):
                return "True", "Ready", "DataSource is ready to be consumed"
            return "False", "SnapshotNotReady", "Snapshot phase is not ready"
        return "False", "NoSource", "No source PVC set"


CONTROLLERS = [DataVolumeController, DataSourceController]

__all__ = [
    "CDI_GROUP",
    "CDI_VERSION",
    "CLONE_TYPE",
    "CONTROLLERS",
    "IMMEDIATE_BINDING",
    "IMPORT_RETRIES",
    "RATE_ENV",
    "DataSourceController",
    "DataVolumeController",
    "publish_container_disk",
    "registry_dir",
]
