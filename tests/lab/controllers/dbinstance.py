"""The DBInstance operator of the lab, as the baked-image operator behaves: provisioning against its
catalog, the two drift conditions, and the repave state machine with its pre-flight refusals.

It is written apart from the collection's own repave rules on purpose: the module and the operator must
not share a bug, so the catalog and the EOL table are read here again.

The operator's own settings come from its Deployment's container env, as the seed's operator reads them:
- BACKING_IMAGE_OS_VERSION  the OS stream of an instance that names none (spec.osVersion); unset, or no
  Deployment, and the catalog's default_stream is used. The collection's dbinstance_repave applies the
  same rule (operator_env.default_stream) when it is given the operator's Deployment.
- BACKING_IMAGE_REPLICAS  the replica count the operator asks for on each backing image; recorded on each
  instance as status.backingImageReplicas (absent when unset).
A change of either re-reads every instance at once, as the rolling restart of the operator would.

Disks, as Harvester makes them from the VM's volumeClaimTemplates annotation (ownerless claims): an
instance that becomes Available has its OS disk ``<name>-os-<revision>`` and its data disk
``<name>-pgdata``. A repave makes the new OS disk in SwappingOSDisk (a new name, never a reused one),
deletes the old one in DeletingOldDisk and never touches pgdata; deleting the instance deletes both (no
cascade would). The VM itself is not modelled, only its claims.

Settings are read on every reconcile, so tests may change them at any time:
- LAB_DBINSTANCE_OPERATOR  "<namespace>/<name>" of the operator's Deployment (default
  dbinstance-system/dbinstance-operator)
- LAB_DBINSTANCE_CATALOG  "<namespace>/<name>" of the catalog ConfigMap (key catalog.yaml)
- LAB_DBINSTANCE_TRIGGER  the annotation that asks for a repave with the value "now"
- LAB_DBINSTANCE_STEP_SECONDS  how long Provisioning and each repave step take (default 0.2)
- LAB_TODAY  the date the EOL table is read at (YYYY-MM-DD), default today in UTC
"""

from __future__ import annotations

import datetime
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass

import yaml

from ..objects import ApiError, ResourceType, clone, now_rfc3339
from . import Controller, LabContext
from .kit import CORE, modify

DEFAULT_GROUP = "db.goldenimage.io"
KIND = "DBInstance"
PLURAL = "dbinstances"
COMPONENT = "dbinstance-operator"
CATALOG_ENV = "LAB_DBINSTANCE_CATALOG"
DEFAULT_CATALOG = "dbinstance-system/baked-image-catalog"
CATALOG_KEY = "catalog.yaml"
TRIGGER_ENV = "LAB_DBINSTANCE_TRIGGER"
DEFAULT_TRIGGER = "repave-trigger"
STEP_ENV = "LAB_DBINSTANCE_STEP_SECONDS"
DEFAULT_STEP_SECONDS = 0.2
TODAY_ENV = "LAB_TODAY"
OPERATOR_ENV = "LAB_DBINSTANCE_OPERATOR"
DEFAULT_OPERATOR = "dbinstance-system/dbinstance-operator"
OS_ENV = "BACKING_IMAGE_OS_VERSION"
REPLICAS_ENV = "BACKING_IMAGE_REPLICAS"
DISK_ROLE = "goldenimage.pipeline/disk-role"
INITIAL_REVISION = "lab.goldenimage.io/initial-revision"

STEPS = ("StoppingVM", "SwappingOSDisk", "StartingVM", "DeletingOldDisk")
TRANSIENT_REASONS = ("StopFailed", "SwapFailed", "StartFailed")
STILL_POLL_SECONDS = 0.2  # how often a hung step looks again whether its fault was lifted

# Final minor release of each PostgreSQL major (postgresql.org policy); supported on the date itself.
PG_EOL = {
    "13": datetime.date(2025, 11, 13),
    "14": datetime.date(2026, 11, 12),
    "15": datetime.date(2027, 11, 11),
    "16": datetime.date(2028, 11, 9),
    "17": datetime.date(2029, 11, 8),
    "18": datetime.date(2030, 11, 14),
}


# --------------------------------------------------------------------------------------- catalog


@dataclass(frozen=True)
class Catalog:
    where: str
    default_stream: str
    streams: dict[str, dict]  # stream -> {"tip": revision, "validated": bool}
    images: dict[str, dict]  # revision -> {"os_version": stream, "pg_versions": [majors]}

    def tip(self, stream: str) -> tuple[str, dict, str]:
        """(tip revision, its image, "") for a usable stream, else ("", {}, why not)."""
        entry = self.streams.get(stream)
        if not stream:
            return "", {}, f"catalog {self.where} has no default OS stream"
        if entry is None:
            return "", {}, f"OS stream {stream} is not in catalog {self.where}"
        if not entry.get("validated"):
            return "", {}, f"OS stream {stream} is not validated in catalog {self.where}"
        tip = entry.get("tip") or ""
        if tip not in self.images:
            return "", {}, f"OS stream {stream} has no registered tip revision in catalog {self.where}"
        return tip, self.images[tip], ""


def _stream(value) -> str:
    # An unquoted 22.04 arrives as a float; Ubuntu streams are YY.MM.
    if isinstance(value, float):
        return f"{value:.2f}"
    return "" if value is None else str(value).strip()


def _major(value) -> str:
    text = str(value).strip() if value is not None else ""
    if isinstance(value, float) and value.is_integer():
        text = str(int(value))
    return text


def parse_catalog(text: str | None, where: str) -> Catalog:
    doc = yaml.safe_load(text or "") or {}
    if not isinstance(doc, dict):
        raise ValueError(f"catalog {where}: {CATALOG_KEY} is not a mapping")
    streams = {
        _stream(name): {
            "tip": str((entry or {}).get("tip") or ""),
            "validated": bool((entry or {}).get("validated")),
        }
        for name, entry in (doc.get("streams") or {}).items()
    }
    images = {
        str(name): {
            "os_version": _stream((entry or {}).get("os_version")),
            "pg_versions": [_major(v) for v in (entry or {}).get("pg_versions") or []],
        }
        for name, entry in (doc.get("images") or {}).items()
    }
    return Catalog(where, _stream(doc.get("default_stream")), streams, images)


def today() -> datetime.date:
    text = (os.environ.get(TODAY_ENV) or "").strip()
    if not text:
        return datetime.datetime.now(datetime.UTC).date()
    if re.fullmatch(r"\d{8}", text):
        text = f"{text[:4]}-{text[4:6]}-{text[6:]}"
    return datetime.date.fromisoformat(text)


def pg_problem(major: str, day: datetime.date) -> str:
    """Why this PostgreSQL major is not supported on `day`, or "" when it is."""
    eol = PG_EOL.get(major)
    if eol is None:
        return f"PostgreSQL {major or '(none)'} has no end-of-life date: not a supported major"
    if eol < day:
        return f"PostgreSQL {major} reached end of life on {eol.isoformat()}"
    return ""


def supported_majors(image: dict, day: datetime.date) -> list[str]:
    return sorted((m for m in image.get("pg_versions") or [] if not pg_problem(m, day)), key=int)


def drift(catalog: Catalog, stream: str, applied: str, major: str, day: datetime.date) -> dict:
    """OSUpdateAvailable and PGVersionEOL as (status, reason, message); never both True."""
    tip, image, problem = catalog.tip(stream)
    eol = pg_problem(major, day)
    if not tip:
        pg = (
            ("True", "PGVersionEOL", eol)
            if eol
            else ("False", "Supported", f"PostgreSQL {major} is supported")
        )
        return {"OSUpdateAvailable": ("False", "InvalidOSStream", problem), "PGVersionEOL": pg}
    if major not in image["pg_versions"]:
        eol = eol or f"revision {tip} (stream {stream}) does not carry PostgreSQL {major}"
    if eol:
        return {
            "OSUpdateAvailable": (
                "False",
                "PGVersionEOL",
                "a repave would not keep the data: migrate instead",
            ),
            "PGVersionEOL": ("True", "PGVersionEOL", f"{eol}: pg_dump and restore to a supported major"),
        }
    pg = ("False", "Supported", f"PostgreSQL {major} is supported by {tip}")
    if applied == tip:
        return {"OSUpdateAvailable": ("False", "UpToDate", f"running the tip {tip}"), "PGVersionEOL": pg}
    return {
        "OSUpdateAvailable": (
            "True",
            "OSUpdateAvailable",
            f"{applied or '(none)'} -> {tip} (stream {stream})",
        ),
        "PGVersionEOL": pg,
    }


def set_conditions(status: dict, wanted: dict) -> None:
    """Write the wanted conditions; lastTransitionTime moves only when a status flips."""
    now = now_rfc3339()
    current = {c.get("type"): c for c in status.get("conditions") or []}
    for ctype, (state, reason, message) in wanted.items():
        old = current.get(ctype) or {}
        since = old.get("lastTransitionTime") if old.get("status") == state else now
        current[ctype] = {
            "type": ctype,
            "status": state,
            "reason": reason,
            "message": message,
            "lastTransitionTime": since or now,
        }
    status["conditions"] = list(current.values())


def _micro_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class _Settings:
    trigger: str
    step: float
    day: datetime.date
    catalog: Catalog | None
    catalog_error: str
    os_version: str = ""  # BACKING_IMAGE_OS_VERSION of the operator's Deployment ("" unset)
    replicas: str = ""  # BACKING_IMAGE_REPLICAS

    @property
    def default_stream(self) -> str:
        return self.os_version or (self.catalog.default_stream if self.catalog else "")


def os_disk(name: str, revision: str) -> str:
    return f"{name}-os-{revision}"


def data_disk(name: str) -> str:
    return f"{name}-pgdata"


# ------------------------------------------------------------------------------------ controller


class DBInstanceOperator(Controller):
    """Reconciles DBInstances; `history` and its helpers let tests see what happened and when."""

    name = "dbinstance-operator"
    resync_seconds = 2.0

    def __init__(self, lab: LabContext):
        super().__init__(lab)
        self.group = self._find_group()
        self.watches = ((self.group, PLURAL), (CORE, "configmaps"), ("apps", "deployments"))
        # (monotonic time, namespace, name, what); what: RepaveStarted, RepaveStep:<step>, RepaveCompleted,
        # RepaveBlocked:<reason>, RepaveFailed:<reason>, Deleted (while repaving)
        self.history: list[tuple[float, str, str, str]] = []
        self._history_lock = threading.Lock()
        self._since: dict[str, tuple[str, float]] = {}  # uid -> (what is being timed, monotonic start)
        self._catalog_cache: tuple[tuple, Catalog | None, str] | None = None
        self._env_seen: tuple[str, str] | None = None

    # --- history for tests
    def snapshot(self, namespace: str | None = None) -> list[tuple[float, str, str, str]]:
        with self._history_lock:
            return [h for h in self.history if namespace in (None, h[1])]

    def repaves(self, namespace: str, name: str) -> int:
        """Completed repaves of one instance."""
        return sum(1 for h in self.snapshot(namespace) if h[2] == name and h[3] == "RepaveCompleted")

    def repaving_at_once(self, namespace: str | None = None) -> int:
        """The largest number of instances that were Repaving at the same moment."""
        busy: set[tuple[str, str]] = set()
        most = 0
        for _, ns, name, what in sorted(self.snapshot(namespace)):
            if what == "RepaveStarted":
                busy.add((ns, name))
                most = max(most, len(busy))
            elif what in ("RepaveCompleted", "Deleted") or what.startswith("RepaveFailed"):
                busy.discard((ns, name))
        return most

    def _note(self, obj: dict, what: str, when: float | None = None) -> None:
        with self._history_lock:
            self._append(obj, what, when)

    def _append(self, obj: dict, what: str, when: float | None = None) -> None:
        meta = obj["metadata"]
        moment = time.monotonic() if when is None else when
        self.history.append((moment, meta.get("namespace", ""), meta["name"], what))

    def _write_noted(self, rt: ResourceType, obj: dict, change, notes, **kwargs) -> None:
        """`_write`, then note each (what, when) of `notes`, all under the history lock: the write is
        visible to readers before its reply returns here, so a test that saw the written state and then
        reads the history waits for these notes instead of missing them."""
        with self._history_lock:
            self._write(rt, obj, change, **kwargs)
            for what, when in notes:
                self._append(obj, what, when)

    # --- types and settings
    def _find_group(self) -> str:
        wanted = os.environ.get("LAB_DBINSTANCE_GROUP")
        groups = [rt.group for rt in self.lab.store.types() if rt.plural == PLURAL and rt.kind == KIND]
        if wanted and wanted in groups:
            return wanted
        return groups[0] if groups else (wanted or DEFAULT_GROUP)

    def _db_type(self) -> ResourceType | None:
        for rt in self.lab.store.types():
            if rt.group == self.group and rt.plural == PLURAL:
                return rt
        return None

    def _catalog_location(self) -> tuple[str, str]:
        namespace, _, name = (os.environ.get(CATALOG_ENV) or DEFAULT_CATALOG).partition("/")
        return namespace, name

    def _catalog(self) -> tuple[Catalog | None, str]:
        namespace, name = self._catalog_location()
        where = f"{namespace}/{name}"
        try:
            entry = self.lab.store.get_entry(
                self.lab.store.resource(CORE, "v1", "configmaps"), namespace, name
            )
        except ApiError:
            return None, f"catalog ConfigMap {where} not found"
        key = (namespace, name, entry.obj["metadata"].get("resourceVersion"))
        if self._catalog_cache is None or self._catalog_cache[0] != key:
            try:
                parsed, error = parse_catalog((entry.obj.get("data") or {}).get(CATALOG_KEY), where), ""
            except (yaml.YAMLError, ValueError, AttributeError, TypeError) as exc:
                parsed, error = None, f"catalog {where} cannot be read: {exc}"
            self._catalog_cache = (key, parsed, error)
        return self._catalog_cache[1], self._catalog_cache[2]

    def _operator_location(self) -> tuple[str, str]:
        namespace, _, name = (os.environ.get(OPERATOR_ENV) or DEFAULT_OPERATOR).partition("/")
        return namespace, name

    def _operator_env(self) -> tuple[str, str]:
        """(BACKING_IMAGE_OS_VERSION, BACKING_IMAGE_REPLICAS) of the operator's Deployment, "" when unset
        or when there is no Deployment; the container is the one that sets either, else the first."""
        namespace, name = self._operator_location()
        try:
            deployment = self.lab.store.get(
                self.lab.store.resource("apps", "v1", "deployments"), namespace, name
            )
        except ApiError:
            return "", ""
        containers = ((deployment.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers")
        containers = containers or [{}]
        wanted = (OS_ENV, REPLICAS_ENV)
        chosen = next(
            (c for c in containers if any(e.get("name") in wanted for e in c.get("env") or [])), containers[0]
        )
        env = {e.get("name"): e.get("value") for e in chosen.get("env") or []}
        return _stream(env.get(OS_ENV)), str(env.get(REPLICAS_ENV) or "").strip()

    def _settings(self) -> _Settings:
        try:
            step = max(0.0, float(os.environ.get(STEP_ENV) or DEFAULT_STEP_SECONDS))
        except ValueError:
            step = DEFAULT_STEP_SECONDS
        catalog, error = self._catalog()
        trigger = os.environ.get(TRIGGER_ENV) or DEFAULT_TRIGGER
        os_version, replicas = self._operator_env()
        return _Settings(trigger, step, today(), catalog, error, os_version, replicas)

    # --- watch entry points
    def reconcile(self, rt: ResourceType, obj: dict) -> float | None:
        if rt.plural == "deployments":
            meta = obj["metadata"]
            if (meta.get("namespace"), meta["name"]) == self._operator_location():
                seen = self._operator_env()
                if seen != self._env_seen:  # its rollout's status writes are not a new setting
                    self._env_seen = seen
                    self._resync_all()
            return None
        if rt.plural == "configmaps":
            meta = obj["metadata"]
            if (meta.get("namespace"), meta["name"]) == self._catalog_location():
                self._resync_all()
            return None
        return self._reconcile(rt, obj)

    def deleted(self, rt: ResourceType, obj: dict) -> None:
        meta = obj["metadata"]
        if rt.plural == "deployments":
            if (meta.get("namespace"), meta["name"]) == self._operator_location():
                self._env_seen = None
                self._resync_all()
            return
        if rt.plural == "configmaps":
            if (meta.get("namespace"), meta["name"]) == self._catalog_location():
                self._resync_all()
            return
        self._since.pop(meta.get("uid", ""), None)
        if (obj.get("status") or {}).get("phase") == "Repaving":
            self._note(obj, "Deleted")
        # The claims have no owner, so nothing cascades: teardown deletes every OS disk and the data disk.
        self._delete_claims(obj, ("os", "data"))

    def _resync_all(self) -> None:
        """The catalog changed: every instance re-reads it now rather than at the next resync."""
        rt = self._db_type()
        if rt is None:
            return
        for entry in self.lab.store.list_page(rt)[0]:
            meta = entry.obj["metadata"]
            if self.lab.faults.object_fault(KIND, meta.get("namespace"), meta["name"]) == "stuck":
                continue
            try:
                self._reconcile(rt, self.lab.store.get(rt, meta.get("namespace"), meta["name"]))
            except ApiError:
                continue  # the periodic resync comes back to it

    # --- one instance
    def _reconcile(self, rt: ResourceType, obj: dict) -> float | None:
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            return None
        cfg = self._settings()
        status = obj.get("status") or {}
        phase = status.get("phase") or ""
        triggered = (meta.get("annotations") or {}).get(cfg.trigger) == "now"
        if phase in ("", "Provisioning"):
            return self._provision(rt, obj, cfg, triggered)
        if phase == "Repaving":
            return self._repave_step(rt, obj, cfg)
        if phase == "Available":
            if triggered:
                return self._start_repave(rt, obj, cfg)
            self._write(rt, obj, lambda s: self._refresh(s, obj, cfg))
            return None
        if phase == "Failed" and triggered and status.get("reason") in TRANSIENT_REASONS:
            wait = self._remaining(meta["uid"], "Failed", cfg.step)
            return wait if wait > 0 else self._start_repave(rt, obj, cfg)
        if triggered:
            self._guard(rt, obj, phase, cfg)
        return None

    def _refresh(self, status: dict, obj: dict, cfg: _Settings) -> None:
        """Drift conditions and Ready of an Available instance, from the catalog read now."""
        applied = status.get("appliedSpec") or {}
        stream = self._stream_of(obj, cfg)
        major = applied.get("engineVersion") or (obj.get("spec") or {}).get("engineVersion") or ""
        if cfg.catalog is None:
            unknown = ("Unknown", "CatalogUnavailable", cfg.catalog_error)
            wanted = {"OSUpdateAvailable": unknown, "PGVersionEOL": unknown}
        else:
            wanted = drift(cfg.catalog, stream, applied.get("imageRevision") or "", major, cfg.day)
        wanted["Ready"] = ("True", "Available", "the database is available")
        set_conditions(status, wanted)
        self._replicas(status, cfg)

    def _stream_of(self, obj: dict, cfg: _Settings) -> str:
        wanted = _stream((obj.get("spec") or {}).get("osVersion"))
        return wanted or cfg.default_stream

    # --- disks (the claims Harvester makes from the VM's annotation: no owner)
    def _claims_type(self) -> ResourceType:
        return self.lab.store.resource(CORE, "v1", "persistentvolumeclaims")

    def _ensure_claim(self, obj: dict, name: str, role: str, image: dict | None = None) -> None:
        meta = obj["metadata"]
        image = image or {}
        labels = {DISK_ROLE: role, "db.goldenimage.io/instance": meta["name"]}
        spec: dict = {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "64Mi"}},
        }
        if image.get("storage_class"):
            spec["storageClassName"] = image["storage_class"]
        claim = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": meta.get("namespace"), "labels": labels},
            "spec": spec,
        }
        try:
            self.lab.store.create(self._claims_type(), claim)
        except ApiError as exc:
            if exc.code != 409:  # an existing claim of that name is the disk (Harvester reuses it)
                raise

    def _ensure_disks(self, obj: dict, revision: str, cfg: _Settings) -> None:
        image = (cfg.catalog.images.get(revision) if cfg.catalog else None) or {}
        if revision:
            self._ensure_claim(obj, os_disk(obj["metadata"]["name"], revision), "os", image)
        self._ensure_claim(obj, data_disk(obj["metadata"]["name"]), "data")

    def _delete_claims(self, obj: dict, roles: tuple[str, ...], keep: str = "") -> None:
        """Delete the instance's claims of these roles (found by its label), except ``keep``."""
        rt = self._claims_type()
        meta = obj["metadata"]
        selector = f"db.goldenimage.io/instance={meta['name']}"
        for entry in self.lab.store.list_page(rt, namespace=meta.get("namespace"), label_selector=selector)[
            0
        ]:
            claim = entry.obj["metadata"]
            if claim["name"] != keep and (claim.get("labels") or {}).get(DISK_ROLE) in roles:
                try:
                    self.lab.store.delete(rt, meta.get("namespace"), claim["name"])
                except ApiError:
                    pass  # already gone

    def _remaining(self, uid: str, what: str, seconds: float) -> float:
        """Seconds left of `what` for this instance; timing starts when first asked."""
        current = self._since.get(uid)
        if current is None or current[0] != what:
            current = self._since[uid] = (what, time.monotonic())
        return seconds - (time.monotonic() - current[1])

    # --- provisioning
    def _provision(self, rt: ResourceType, obj: dict, cfg: _Settings, triggered: bool) -> float | None:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        status = obj.get("status") or {}
        preset = dict(status.get("appliedSpec") or {})
        preset.setdefault("imageRevision", (meta.get("annotations") or {}).get(INITIAL_REVISION))
        if cfg.catalog is None:
            self._write(rt, obj, lambda s: _phase(s, "Provisioning", message=cfg.catalog_error))
            return 1.0
        stream = self._stream_of(obj, cfg)
        tip, image, problem = cfg.catalog.tip(stream)
        if preset.get("imageRevision"):
            return self._adopt(rt, obj, cfg, preset, stream)
        if problem:
            return self._fail_new(rt, obj, "InvalidOSStream", problem)
        supported = supported_majors(image, cfg.day)
        major = _major(spec.get("engineVersion"))
        if not major:
            if not supported:
                why = f"{tip} carries no PostgreSQL major that is still supported"
                return self._fail_new(rt, obj, "UnsupportedEngineVersion", why)
            major = supported[-1]
        listing = ", ".join(supported) or "none"
        if major not in image["pg_versions"]:
            why = f"engineVersion {major} is not in revision {tip} (stream {stream}); supported: {listing}"
            return self._fail_new(rt, obj, "UnsupportedEngineVersion", why)
        if pg_problem(major, cfg.day):
            why = f"engineVersion {major}: {pg_problem(major, cfg.day)}; supported: {listing}"
            return self._fail_new(rt, obj, "UnsupportedEngineVersion", why)
        if not status.get("phase"):
            message = f"provisioning from {tip} with PostgreSQL {major}"
            self._write(rt, obj, lambda s: _phase(s, "Provisioning", message=message), default_engine=major)
            self._since[meta["uid"]] = ("Provisioning", time.monotonic())
            return cfg.step
        wait = self._remaining(meta["uid"], "Provisioning", cfg.step)
        if wait > 0:
            if triggered:
                self._guard(rt, obj, "Provisioning", cfg)
            return wait
        applied = {"imageRevision": tip, "osVersion": image["os_version"] or stream, "engineVersion": major}
        self._ensure_disks(obj, tip, cfg)
        self._write(rt, obj, lambda s: self._available(s, obj, cfg, applied, "the database is available"))
        self._since.pop(meta["uid"], None)
        return None

    def _adopt(self, rt: ResourceType, obj: dict, cfg: _Settings, preset: dict, stream: str) -> None:
        """An instance that already runs a revision (pre-set appliedSpec or the lab annotation)."""
        assert cfg.catalog is not None
        revision = preset["imageRevision"]
        image = cfg.catalog.images.get(revision) or {}
        major = _major(preset.get("engineVersion") or (obj.get("spec") or {}).get("engineVersion"))
        if not major:
            tip, tip_image, _ = cfg.catalog.tip(stream)
            majors = supported_majors(tip_image, cfg.day) if tip else []
            major = majors[-1] if majors else ""
        applied = {
            "imageRevision": revision,
            "osVersion": preset.get("osVersion") or image.get("os_version") or stream,
            "engineVersion": major,
        }
        self._ensure_disks(obj, revision, cfg)
        self._write(
            rt,
            obj,
            lambda s: self._available(s, obj, cfg, applied, f"running {revision}"),
            default_engine=major,
        )
        return None

    def _available(self, status: dict, obj: dict, cfg: _Settings, applied: dict, message: str) -> None:
        _phase(status, "Available", message=message)
        status["appliedSpec"] = applied
        status.pop("repave", None)
        self._refresh(status, obj, cfg)

    @staticmethod
    def _replicas(status: dict, cfg: _Settings) -> None:
        if cfg.replicas.isdigit():
            status["backingImageReplicas"] = int(cfg.replicas)
        else:
            status.pop("backingImageReplicas", None)

    def _fail_new(self, rt: ResourceType, obj: dict, reason: str, message: str) -> None:
        self._write(rt, obj, lambda s: _phase(s, "Failed", reason=reason, message=message))
        self._event(obj, "Warning", reason, message)
        return None

    # --- repave
    def _guard(self, rt: ResourceType, obj: dict, phase: str, cfg: _Settings) -> None:
        """The trigger stays; only the message says why nothing happens (a Failed reason is kept)."""
        message = f"{cfg.trigger} requires phase Available (is {phase})"
        self._write(rt, obj, lambda s: s.__setitem__("message", message))

    def _start_repave(self, rt: ResourceType, obj: dict, cfg: _Settings) -> float | None:
        meta = obj["metadata"]
        status = obj.get("status") or {}
        applied = status.get("appliedSpec") or {}
        if cfg.catalog is None:
            self._write(rt, obj, lambda s: s.__setitem__("message", f"repave waits: {cfg.catalog_error}"))
            return 1.0
        stream = self._stream_of(obj, cfg)
        tip, image, problem = cfg.catalog.tip(stream)
        if problem:
            return self._fail_blocked(rt, obj, cfg, "InvalidOSStream", f"repave refused: {problem}")
        major = applied.get("engineVersion") or _major((obj.get("spec") or {}).get("engineVersion"))
        eol = pg_problem(major, cfg.day)
        if major not in image["pg_versions"]:
            eol = f"revision {tip} (stream {stream}) does not carry PostgreSQL {major}"
        if eol:
            supported = ", ".join(supported_majors(image, cfg.day)) or "none"
            why = (
                f"repave refused: {eol}; a repave cannot change the PostgreSQL major: pg_dump and restore "
                f"to a supported major ({supported})"
            )
            return self._fail_blocked(rt, obj, cfg, "RepaveBlockedPGVersionEOL", why)
        if applied.get("imageRevision") == tip:
            message = f"already on {tip}: nothing to repave"
            self._write(rt, obj, lambda s: self._available(s, obj, cfg, applied, message), clear=cfg.trigger)
            self._event(obj, "Normal", "RepaveNotNeeded", message)
            return None
        repave = {"targetRevision": tip, "step": STEPS[0], "startedAt": now_rfc3339()}
        message = f"repaving {applied.get('imageRevision') or '(none)'} -> {tip}: {STEPS[0]}"

        def start(s: dict) -> None:
            _phase(s, "Repaving", message=message)
            s["repave"] = repave
            set_conditions(s, {"Ready": ("False", "Repaving", message)})

        began = time.monotonic()  # taken before the write: the recorded interval covers the whole phase
        self._write_noted(rt, obj, start, [("RepaveStarted", began), (f"RepaveStep:{STEPS[0]}", None)])
        self._since[meta["uid"]] = (STEPS[0], began)
        self._event(obj, "Normal", "RepaveStarted", f"repave to {tip} started")
        self._event(obj, "Normal", "RepaveStep", f"{STEPS[0]} (target {tip})")
        return cfg.step

    def _fail_blocked(self, rt: ResourceType, obj: dict, cfg: _Settings, reason: str, message: str) -> None:
        """The request itself is invalid: Failed, and the trigger is cleared so no retry loop hides why."""
        self._write_noted(
            rt,
            obj,
            lambda s: _phase(s, "Failed", reason=reason, message=message),
            [(f"RepaveBlocked:{reason}", None)],
            clear=cfg.trigger,
        )
        self._event(obj, "Warning", "RepaveBlocked", message)
        return None

    def _repave_step(self, rt: ResourceType, obj: dict, cfg: _Settings) -> float | None:
        meta = obj["metadata"]
        repave = (obj.get("status") or {}).get("repave") or {}
        step, target = repave.get("step"), repave.get("targetRevision")
        if step not in STEPS or not target:
            return self._start_repave(rt, obj, cfg)  # nothing usable recorded: start over
        fault = self.lab.faults.object_fault(KIND, meta.get("namespace"), meta["name"])
        wait = self._remaining(meta["uid"], step, cfg.step)
        if step == "StoppingVM" and fault == "stop-hangs":
            self._write(rt, obj, lambda s: s.__setitem__("message", "waiting for the VM to stop"))
            return STILL_POLL_SECONDS
        if step == "StartingVM" and fault == "no-agent":
            self._write(rt, obj, lambda s: s.__setitem__("message", "waiting for the guest agent"))
            return STILL_POLL_SECONDS
        if wait > 0:
            return wait
        if step == "SwappingOSDisk" and fault == "swap-conflict":
            message = f"swapping the OS disk to {target} failed: conflict; retrying while {cfg.trigger}=now"
            self._write_noted(
                rt,
                obj,
                lambda s: _phase(s, "Failed", reason="SwapFailed", message=message),
                [("RepaveFailed:SwapFailed", None)],
            )
            self._since[meta["uid"]] = ("Failed", time.monotonic())
            self._event(obj, "Warning", "RepaveFailed", message)
            return cfg.step
        index = STEPS.index(step)
        if step == "SwappingOSDisk":
            image = (cfg.catalog.images.get(target) if cfg.catalog else None) or {}
            self._ensure_claim(obj, os_disk(meta["name"], target), "os", image)
        elif step == "DeletingOldDisk":
            self._delete_claims(obj, ("os",), keep=os_disk(meta["name"], target))
        if index + 1 < len(STEPS):
            following = STEPS[index + 1]
            message = f"repaving -> {target}: {following}"

            def advance(s: dict) -> None:
                s["repave"] = dict(s.get("repave") or repave, step=following)
                s["message"] = message
                set_conditions(s, {"Ready": ("False", "Repaving", message)})

            self._write_noted(rt, obj, advance, [(f"RepaveStep:{following}", None)])
            self._since[meta["uid"]] = (following, time.monotonic())
            self._event(obj, "Normal", "RepaveStep", f"{following} (target {target})")
            return cfg.step
        return self._complete(rt, obj, cfg, target)

    def _complete(self, rt: ResourceType, obj: dict, cfg: _Settings, target: str) -> None:
        status = obj.get("status") or {}
        before = (status.get("appliedSpec") or {}).get("imageRevision") or "(none)"
        image = (cfg.catalog.images.get(target) if cfg.catalog else None) or {}
        applied = dict(status.get("appliedSpec") or {}, imageRevision=target)
        applied["osVersion"] = (
            image.get("os_version") or applied.get("osVersion") or self._stream_of(obj, cfg)
        )
        message = f"repaved {before} -> {target}"
        self._write_noted(
            rt,
            obj,
            lambda s: self._available(s, obj, cfg, applied, message),
            [("RepaveCompleted", None)],
            clear=cfg.trigger,
        )
        self._since.pop(obj["metadata"]["uid"], None)
        self._event(obj, "Normal", "RepaveCompleted", message)
        return None

    # --- writes
    def _write(
        self, rt: ResourceType, obj: dict, change, clear: str | None = None, default_engine: str = ""
    ) -> bool:
        """Apply `change(status)` to the object as it was read; optionally drop the trigger annotation and
        fill an empty engineVersion. Returns whether anything was written.

        The status goes out with the resourceVersion the decision was made on, so a change made
        meanwhile (a test pre-setting status, a user annotating) is a 409 and the runner reconciles again.
        """
        meta = obj["metadata"]
        body = clone(obj)
        status = body.setdefault("status", {})
        change(status)
        status_changed = status != (obj.get("status") or {})
        notes = meta.get("annotations") or {}
        object_changed = bool(clear and clear in notes) or bool(
            default_engine and not (obj.get("spec") or {}).get("engineVersion")
        )
        if not status_changed and not object_changed:
            return False

        # A defaulting webhook fills engineVersion at admission, before any status: the spec goes first, so
        # no reader sees the instance Available without its engineVersion.
        if default_engine and not (obj.get("spec") or {}).get("engineVersion"):

            def fill(current: dict) -> bool:
                spec = current.setdefault("spec", {})
                if spec.get("engineVersion"):
                    return False
                spec["engineVersion"] = default_engine
                return True

            fresh = modify(self.lab.store, rt, meta.get("namespace"), meta["name"], fill)
            if (fresh.get("status") or {}) != (obj.get("status") or {}):
                return True  # the status moved meanwhile: the runner reconciles again on what it is now
            body["metadata"]["resourceVersion"] = fresh["metadata"]["resourceVersion"]
            body["spec"] = fresh["spec"]
        # Then the status, on the resourceVersion the decision was made on, then the trigger annotation.
        if status_changed:
            self.lab.store.update(rt, body, subresource="status")
        if clear and clear in notes:

            def drop(current: dict) -> bool:
                current_notes = current["metadata"].get("annotations") or {}
                if clear not in current_notes:
                    return False
                del current_notes[clear]
                return True

            modify(self.lab.store, rt, meta.get("namespace"), meta["name"], drop)
        return True

    def _event(self, obj: dict, event_type: str, reason: str, message: str) -> None:
        """A core/v1 Event with a microsecond eventTime, one per occurrence so history can be replayed."""
        meta = obj["metadata"]
        namespace = meta.get("namespace") or "default"
        stamp, now = _micro_now(), now_rfc3339()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{secrets.token_hex(8)}", "namespace": namespace},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion", ""),
                "kind": KIND,
                "name": meta["name"],
                "namespace": namespace,
                "uid": meta.get("uid", ""),
            },
            "reason": reason,
            "message": message,
            "type": event_type,
            "action": "Repave" if reason.startswith("Repave") else "Provision",
            "eventTime": stamp,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": f"{COMPONENT}-lab",
        }
        try:
            self.lab.store.create(self.lab.store.resource(CORE, "v1", "events"), event)
        except ApiError:
            pass  # namespace going away: an event is never worth failing the reconcile


def _phase(status: dict, phase: str, reason: str | None = None, message: str = "") -> None:
    status["phase"] = phase
    if reason:
        status["reason"] = reason
    else:
        status.pop("reason", None)
    status["message"] = message
    if phase != "Repaving":
        status.pop("repave", None)
    if phase != "Available":
        set_conditions(status, {"Ready": ("False", reason or phase, message)})


CONTROLLERS = [DBInstanceOperator]

__all__ = [
    "CATALOG_ENV",
    "CONTROLLERS",
    "INITIAL_REVISION",
    "STEPS",
    "STEP_ENV",
    "TODAY_ENV",
    "TRIGGER_ENV",
    "DBInstanceOperator",
    "drift",
    "parse_catalog",
]
