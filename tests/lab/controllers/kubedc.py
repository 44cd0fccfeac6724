"""The Kube-DC per-project golden seeder, as Kube-DC's project controller behaves, flaws included.

For every project namespace (label `kube-dc.com/project`) and every (family, mode) that resolves to a
golden, it keeps a VolumeSnapshot `golden-<family>[-block]` in the project, bound to a pre-provisioned
VolumeSnapshotContent `kdc-<project>-<family>-<fs|block>` (Retain) on the golden's snapshot handle.

Resolution per (family, mode):
1. GoldenImageSelections in the golden namespaces for it: one valid selection seeds its snapshot; a
   selection naming a missing, unready or mismatched snapshot skips the family (projects keep what they
   have); two naming different snapshots skip it and record a conflict Event on the selections.
2. Otherwise the `kube-dc.com/golden-active` label path as the real code does it: goldens in API list
   order, stable-sorted active first. None active: the first listed, silently. Two active: an
   `ActiveGoldenConflict` Event, and seeding proceeds with the first anyway.
Kube-DC's seeder resyncs every 15 minutes, and so does the lab's unless told otherwise
(`Lab(kubedc_resync=...)`, `--kubedc-resync`, or LAB_KUBEDC_RESYNC_SECONDS): between two resyncs only
the watch events above start a pass, so a change nothing here watches (a project's copy deleted by hand)
waits for the next resync, as on the platform. Tests that need it sooner set it explicitly.
"""

from __future__ import annotations

import os
import threading
import time

from ..objects import ApiError, ResourceType, clone
from . import Controller, LabContext
from .kit import CORE, SNAPSHOT_GROUP, record_event

COMPONENT = "kube-dc-project-controller"
SELECTION_GROUP = "kube-dc.com"
RESYNC_ENV = "LAB_KUBEDC_RESYNC_SECONDS"
DEFAULT_RESYNC_SECONDS = 15 * 60.0
PROJECT_LABEL = "kube-dc.com/project"
FAMILY_LABEL = "kube-dc.com/golden-os"
FAMILY_ANNOTATION = "kube-dc.com/os-family-id"
MODE_KEY = "kube-dc.com/golden-mode"
ACTIVE_LABEL = "kube-dc.com/golden-active"
CLONE_MIN_SIZE = "kube-dc.com/clone-min-size"
SEEDED_FROM = "kube-dc.com/seeded-from"
GOLDEN_NAMESPACES = {"Filesystem": "golden-images", "Block": "golden-images-block"}


def resync_interval(explicit: float | None = None) -> float:
    """The seeder's resync in seconds: the value given, else the environment's, else the platform's."""
    value = explicit if explicit is not None else os.environ.get(RESYNC_ENV) or DEFAULT_RESYNC_SECONDS
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise ValueError(
            f"Kube-DC seeder resync {value!r} (Lab(kubedc_resync=...), --kubedc-resync or {RESYNC_ENV}): "
            "give a number of seconds greater than 0"
        )
    return seconds


def project_snapshot_name(family: str, mode: str) -> str:
    return f"golden-{family}-block" if mode == "Block" else f"golden-{family}"


def project_content_name(project: str, family: str, mode: str) -> str:
    return f"kdc-{project}-{family}-{'block' if mode == 'Block' else 'fs'}"


def _mode(value) -> str | None:
    """Filesystem/Block from any casing; None for anything else. Absent means Filesystem."""
    if value is None or value == "":
        return "Filesystem"
    return {"filesystem": "Filesystem", "block": "Block"}.get(str(value).strip().lower())


def _family(obj: dict) -> str | None:
    meta = obj["metadata"]
    return (meta.get("labels") or {}).get(FAMILY_LABEL) or (meta.get("annotations") or {}).get(
        FAMILY_ANNOTATION
    )


def _carried_mode(obj: dict) -> str | None:
    meta = obj["metadata"]
    value = (meta.get("labels") or {}).get(MODE_KEY) or (meta.get("annotations") or {}).get(MODE_KEY)
    return _mode(value)


UNFINISHED_RETRY_SECONDS = 1.0


class _Skip(Exception):
    """The family is not seeded this round; projects keep what they have."""


class GoldenSeeder(Controller):
    name = "kube-dc-golden-seeder"
    watches = (
        (SNAPSHOT_GROUP, "volumesnapshots"),
        (SELECTION_GROUP, "goldenimageselections"),
        (CORE, "namespaces"),
    )

    def __init__(self, lab: LabContext):
        super().__init__(lab)
        self.resync_seconds = resync_interval(lab.kubedc_resync_seconds)
        self._lock = threading.Lock()
        self._synced_rv = -1  # store resourceVersion the last full pass started from
        self._synced_at = 0.0
        # A copy the last pass could not re-point because the old one was still being deleted (the
        # snapshot controller and the driver release their finalizers first): the pass is retried soon.
        self._unfinished = False

    # --- types
    def _rt(self, group: str, plural: str, version: str = "v1") -> ResourceType | None:
        try:
            return self.lab.store.resource(group, version, plural)
        except ApiError:
            return None

    # --- when to run
    def reconcile(self, rt: ResourceType, obj: dict) -> float | None:
        meta = obj["metadata"]
        if rt.plural == "volumesnapshots" and meta.get("namespace") not in GOLDEN_NAMESPACES.values():
            return None  # project copies are ours; their changes need no pass
        if rt.plural == "namespaces" and PROJECT_LABEL not in (meta.get("labels") or {}):
            return None
        rv = int(meta.get("resourceVersion") or 0)
        with self._lock:
            fresh = rv <= self._synced_rv and time.monotonic() - self._synced_at < self.resync_seconds
            fresh = fresh and not self._unfinished
        if not fresh:
            self.sync()
        return UNFINISHED_RETRY_SECONDS if self._unfinished else None

    def deleted(self, rt: ResourceType, obj: dict) -> None:
        if rt.plural != "namespaces" and obj["metadata"].get("namespace") in GOLDEN_NAMESPACES.values():
            self.sync()

    # --- a full pass
    def sync(self) -> None:
        """Resolve every (family, mode) and seed every project; safe to call from any thread."""
        with self._lock:
            self._synced_rv = self.lab.store.resource_version
            self._synced_at = time.monotonic()
            self._unfinished = False
            vs_rt = self._rt(SNAPSHOT_GROUP, "volumesnapshots")
            ns_rt = self._rt(CORE, "namespaces")
            if vs_rt is None or ns_rt is None:
                return
            present = {n["metadata"]["name"] for n in self.lab.store.list(ns_rt)[0]}
            golden_spaces = {mode: ns for mode, ns in GOLDEN_NAMESPACES.items() if ns in present}
            if not golden_spaces:
                return
            projects = [
                n["metadata"]["name"]
                for n in self.lab.store.list(ns_rt, label_selector=PROJECT_LABEL)[0]
                if not n["metadata"].get("deletionTimestamp")
            ]
            selections = self._selections(golden_spaces)
            for sel in selections:
                raw = (sel.get("spec") or {}).get("mode")
                if _mode(raw) is None:
                    why = f"mode {raw!r} is neither Filesystem nor Block: this selection governs nothing"
                    self._selection_status(sel, False, why, None)
            for mode, namespace in golden_spaces.items():
                goldens = self.lab.store.list(vs_rt, namespace)[0]
                families = {f for f in map(_family, goldens) if f}
                families |= {
                    (s.get("spec") or {}).get("family")
                    for s in selections
                    if _mode((s.get("spec") or {}).get("mode")) == mode
                }
                for family in sorted(f for f in families if f):
                    try:
                        golden = self._resolve(family, mode, goldens, selections)
                    except _Skip:
                        continue
                    if golden is not None:
                        self._seed_all(projects, family, mode, golden)

    def _selections(self, golden_spaces: dict[str, str]) -> list[dict]:
        rt = self._rt(SELECTION_GROUP, "goldenimageselections")
        if rt is None:
            return []  # no CRD: the label path, exactly as before selections existed
        found = []
        for namespace in golden_spaces.values():
            found.extend(self.lab.store.list(rt, namespace)[0])
        return found

    # --- resolution
    def _resolve(self, family: str, mode: str, goldens: list[dict], selections: list[dict]) -> dict | None:
        mine = [
            s
            for s in selections
            if (s.get("spec") or {}).get("family") == family
            and _mode((s.get("spec") or {}).get("mode")) == mode
        ]
        if mine:
            return self._by_selection(family, mode, goldens, mine)
        return self._by_label(family, mode, goldens)

    def _by_selection(self, family: str, mode: str, goldens: list[dict], mine: list[dict]) -> dict:
        names = sorted({(s.get("spec") or {}).get("snapshotName") for s in mine})
        if len(names) > 1:
            listed = ", ".join(
                f"{s['metadata']['name']} -> {(s.get('spec') or {}).get('snapshotName')}" for s in mine
            )
            message = f"conflicting GoldenImageSelections for {family} ({mode}): {listed}; family not seeded"
            for sel in mine:
                self._selection_status(sel, False, message, None)
                record_event(self.lab.store, sel, "Warning", "GoldenSelectionConflict", message, COMPONENT)
            raise _Skip()
        name = names[0]
        golden = next((g for g in goldens if g["metadata"]["name"] == name), None)
        where = f"VolumeSnapshot {GOLDEN_NAMESPACES[mode]}/{name}"
        problem = None
        if golden is None:
            problem = f"{where} not found"
        elif not (golden.get("status") or {}).get("readyToUse"):
            problem = f"{where} is not ready to use"
        elif _family(golden) != family:
            problem = f"{where} is of family {_family(golden)!r}, not {family!r}"
        elif _carried_mode(golden) != mode:
            problem = f"{where} carries mode {_carried_mode(golden)}, not {mode}"
        handle = None if problem else self._handle(golden)
        if problem is None and handle is None:
            problem = f"{where} has no snapshot handle"
        if problem is not None:
            for sel in mine:
                self._selection_status(sel, False, f"{problem}; family {family} ({mode}) not seeded", None)
            raise _Skip()
        for sel in mine:
            self._selection_status(sel, True, f"serving {where}", handle)
        return golden

    def _by_label(self, family: str, mode: str, goldens: list[dict]) -> dict | None:
        candidates = [g for g in goldens if _family(g) == family and self._handle(g)]
        active = [g for g in candidates if (g["metadata"].get("labels") or {}).get(ACTIVE_LABEL) == "true"]
        ordered = sorted(candidates, key=lambda g: g not in active)  # stable: list order otherwise
        if len(active) > 1:
            names = ", ".join(g["metadata"]["name"] for g in active)
            message = (
                f"family {family} ({mode}) has {len(active)} goldens labelled {ACTIVE_LABEL}=true ({names}); "
                f"seeding from {ordered[0]['metadata']['name']}"
            )
            for obj in active:
                record_event(self.lab.store, obj, "Warning", "ActiveGoldenConflict", message, COMPONENT)
        return ordered[0] if ordered else None

    def _handle(self, golden: dict) -> str | None:
        status = golden.get("status") or {}
        if not status.get("readyToUse") or not status.get("boundVolumeSnapshotContentName"):
            return None
        rt = self._rt(SNAPSHOT_GROUP, "volumesnapshotcontents")
        try:
            content = self.lab.store.get(rt, None, status["boundVolumeSnapshotContentName"])
        except ApiError:
            return None
        return (content.get("status") or {}).get("snapshotHandle") or (
            ((content.get("spec") or {}).get("source") or {}).get("snapshotHandle")
        )

    def _selection_status(self, sel: dict, ready: bool, message: str, handle: str | None) -> None:
        rt = self._rt(SELECTION_GROUP, "goldenimageselections")
        meta = sel["metadata"]
        status = {"ready": ready, "message": message, "observedGeneration": meta.get("generation", 1)}
        if handle:
            status["snapshotHandle"] = handle
        if (sel.get("status") or {}) == status:
            return
        body = clone(sel)
        body["status"] = status
        try:
            self.lab.store.update(rt, body, subresource="status")
        except ApiError as exc:
            if exc.code not in (404, 409):  # a newer object gets its status on the next pass
                raise

    # --- seeding
    def _seed_all(self, projects: list[str], family: str, mode: str, golden: dict) -> None:
        handle = self._handle(golden)
        if not handle:
            return
        content_rt = self._rt(SNAPSHOT_GROUP, "volumesnapshotcontents")
        golden_content = self.lab.store.get(
            content_rt, None, golden["status"]["boundVolumeSnapshotContentName"]
        )
        for project in projects:
            try:
                self._seed(project, family, mode, golden, golden_content, handle)
            except ApiError as exc:
                if exc.code not in (404, 409):
                    raise
                self._unfinished = self._unfinished or exc.code == 409

    def _seed(
        self, project: str, family: str, mode: str, golden: dict, golden_content: dict, handle: str
    ) -> None:
        store = self.lab.store
        vs_rt = self._rt(SNAPSHOT_GROUP, "volumesnapshots")
        content_rt = self._rt(SNAPSHOT_GROUP, "volumesnapshotcontents")
        vs_name = project_snapshot_name(family, mode)
        content_name = project_content_name(project, family, mode)
        gmeta = golden["metadata"]
        notes = {
            CLONE_MIN_SIZE: str((golden.get("status") or {}).get("restoreSize") or ""),
            SEEDED_FROM: f"{gmeta['namespace']}/{gmeta['name']}",
        }
        current = store.get(vs_rt, project, vs_name) if store.exists(vs_rt, project, vs_name) else None
        if current is not None:
            seeded = self._seeded_handle(current)
            if seeded == handle:
                self._stamp(vs_rt, current, notes)
                return
            store.delete(vs_rt, project, vs_name)  # re-point: the copy is replaced, never edited
        if store.exists(content_rt, None, content_name):
            store.delete(content_rt, None, content_name)
        cspec = golden_content.get("spec") or {}
        content = {
            "apiVersion": f"{SNAPSHOT_GROUP}/v1",
            "kind": "VolumeSnapshotContent",
            "metadata": {"name": content_name, "labels": {FAMILY_LABEL: family}},
            "spec": {
                "deletionPolicy": "Retain",
                "driver": cspec.get("driver") or "",
                "source": {"snapshotHandle": handle},
                "sourceVolumeMode": mode,
                "volumeSnapshotRef": {
                    "apiVersion": f"{SNAPSHOT_GROUP}/v1",
                    "kind": "VolumeSnapshot",
                    "namespace": project,
                    "name": vs_name,
                },
            },
        }
        if cspec.get("volumeSnapshotClassName"):
            content["spec"]["volumeSnapshotClassName"] = cspec["volumeSnapshotClassName"]
        store.create(content_rt, content)
        snapshot = {
            "apiVersion": f"{SNAPSHOT_GROUP}/v1",
            "kind": "VolumeSnapshot",
            "metadata": {
                "name": vs_name,
                "namespace": project,
                "labels": {FAMILY_LABEL: family, MODE_KEY: mode},
                "annotations": notes,
            },
            "spec": {"source": {"volumeSnapshotContentName": content_name}},
        }
        if cspec.get("volumeSnapshotClassName"):
            snapshot["spec"]["volumeSnapshotClassName"] = cspec["volumeSnapshotClassName"]
        store.create(vs_rt, snapshot)

    def _seeded_handle(self, vs: dict) -> str | None:
        """The handle a project copy points at, through its content as a verifier would read it."""
        name = (vs.get("status") or {}).get("boundVolumeSnapshotContentName") or (
            ((vs.get("spec") or {}).get("source") or {}).get("volumeSnapshotContentName")
        )
        rt = self._rt(SNAPSHOT_GROUP, "volumesnapshotcontents")
        if not name or not self.lab.store.exists(rt, None, name):
            return None
        content = self.lab.store.get(rt, None, name)
        return ((content.get("spec") or {}).get("source") or {}).get("snapshotHandle") or (
            (content.get("status") or {}).get("snapshotHandle")
        )

    def _stamp(self, rt: ResourceType, vs: dict, notes: dict) -> None:
        have = vs["metadata"].get("annotations") or {}
        if all(have.get(k) == v for k, v in notes.items()):
            return
        body = clone(vs)
        body["metadata"].setdefault("annotations", {}).update(notes)
        self.lab.store.update(rt, body)


CONTROLLERS = [GoldenSeeder]

__all__ = [
    "CLONE_MIN_SIZE",
    "CONTROLLERS",
    "DEFAULT_RESYNC_SECONDS",
    "RESYNC_ENV",
    "SEEDED_FROM",
    "GoldenSeeder",
    "project_content_name",
    "project_snapshot_name",
    "resync_interval",
]
