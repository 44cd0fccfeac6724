"""VolumeSnapshots of the lab.

`CsiSnapshotDriver` is the driver side only: what a CSI driver and its csi-snapshotter sidecar
(external-snapshotter v8.7.0, pkg/sidecar-controller) do for the VolumeSnapshotContents the real snapshot
controller creates or an admin pre-provisions. It cuts the snapshot (a copy-on-write copy of the volume's
data), fills the content's status, and on deletion drops the data and releases the content's finalizer.
The lab runs it next to the upstream snapshot controller (`Lab(snapshot_controller="upstream")`).

`SnapshotController` is the older simulation of both sides in one: a VolumeSnapshot of a bound claim gets
a VolumeSnapshotContent `snapcontent-<uid>`; a pre-provisioned content is adopted by the snapshot it
names; deleting a snapshot deletes or keeps its content and data by the content's deletionPolicy.
"""

from __future__ import annotations

import time

from ..objects import ApiError, ResourceType, now_rfc3339
from . import Controller
from .kit import SNAPSHOT_GROUP, modify, record_event
from .volumes import (
    CSI_DRIVERS,
    core_types,
    drop_snapshot_data,
    format_quantity,
    parse_quantity,
    snapshot_data,
    snapshot_type,
    take_snapshot,
)

COMPONENT = "snapshot-controller"
DEFAULT_SNAPSHOT_CLASS_ANNOTATION = "snapshot.storage.kubernetes.io/is-default-class"


class _SnapshotError(Exception):
    def __init__(self, reason: str, message: str, retry: float | None = 2.0):
        super().__init__(message)
        self.reason, self.message, self.retry = reason, message, retry


class SnapshotController(Controller):
    """The CSI snapshotter and snapshot controller together: VolumeSnapshot <-> VolumeSnapshotContent."""

    name = "snapshot-controller"
    watches = ((SNAPSHOT_GROUP, "volumesnapshots"), (SNAPSHOT_GROUP, "volumesnapshotcontents"))

    def reconcile(self, rt: ResourceType, obj: dict) -> float | None:
        if rt.plural == "volumesnapshotcontents":
            return self._reconcile_content(obj)
        if obj["metadata"].get("deletionTimestamp"):
            return None
        meta = obj["metadata"]
        status = obj.get("status") or {}
        try:
            if status.get("readyToUse") and status.get("boundVolumeSnapshotContentName"):
                return self._check_content(obj)
            if self.lab.faults.object_fault("VolumeSnapshot", meta["namespace"], meta["name"]) == "fail":
                raise _SnapshotError(
                    "SnapshotCreationFailed", "Failed to create snapshot: injected failure", None
                )
            source = (obj.get("spec") or {}).get("source") or {}
            if source.get("persistentVolumeClaimName"):
                self._dynamic(obj, source["persistentVolumeClaimName"])
            elif source.get("volumeSnapshotContentName"):
                self._pre_provisioned(obj, source["volumeSnapshotContentName"])
            else:
                raise _SnapshotError(
                    "SnapshotValidationError", "exactly one of source fields must be set", None
                )
        except _SnapshotError as err:
            self._fail(obj, err)
            return err.retry
        return None

    # --- VolumeSnapshot side
    def _fail(self, vs: dict, err: _SnapshotError) -> None:
        meta = vs["metadata"]

        changed = []

        def set_error(obj: dict) -> bool:
            status = obj.setdefault("status", {})
            if (status.get("error") or {}).get("message") == err.message and status.get(
                "readyToUse"
            ) is False:
                return False
            status["error"] = {"message": err.message, "time": now_rfc3339()}
            status["readyToUse"] = False
            changed.append(True)
            return True

        rt = snapshot_type(self.lab, "volumesnapshots")
        vs = modify(self.lab.store, rt, meta["namespace"], meta["name"], set_error, status=True)
        if changed:  # one Event per distinct error, not one per resync
            record_event(self.lab.store, vs, "Warning", err.reason, err.message, COMPONENT)

    def _snapshot_class(self, vs: dict, driver: str) -> dict:
        rt = snapshot_type(self.lab, "volumesnapshotclasses")
        name = (vs.get("spec") or {}).get("volumeSnapshotClassName")
        prefix = f"failed to get input parameters to create snapshot {vs['metadata']['name']}"
        if name:
            try:
                return self.lab.store.get(rt, None, name)
            except ApiError as exc:
                raise _SnapshotError("SnapshotContentCreationFailed", f"{prefix}: {exc.message}") from exc
        defaults = [
            c
            for c in self.lab.store.list(rt)[0]
            if (c["metadata"].get("annotations") or {}).get(DEFAULT_SNAPSHOT_CLASS_ANNOTATION) == "true"
            and c.get("driver") == driver
        ]
        if len(defaults) != 1:
            problem = "cannot find default snapshot class" if not defaults else f"{len(defaults)} default "
            problem += "" if not defaults else f"snapshot classes exist for the driver {driver}"
            raise _SnapshotError("SnapshotContentCreationFailed", f"{prefix}: {problem}")
        chosen = defaults[0]
        meta = vs["metadata"]

        def adopt(obj: dict) -> None:
            obj["spec"]["volumeSnapshotClassName"] = chosen["metadata"]["name"]

        modify(
            self.lab.store,
            snapshot_type(self.lab, "volumesnapshots"),
            meta["namespace"],
            meta["name"],
            adopt,
        )
        return chosen

    def _dynamic(self, vs: dict, claim: str) -> None:
        store, rts = self.lab.store, core_types(self.lab)
        meta = vs["metadata"]
        content_name = f"snapcontent-{meta['uid']}"
        content_rt = snapshot_type(self.lab, "volumesnapshotcontents")
        if store.exists(content_rt, None, content_name):
            self._bind_to_content(vs, store.get(content_rt, None, content_name))
            return
        prefix = f"failed to get input parameters to create snapshot {meta['name']}"
        try:
            pvc = store.get(rts["pvc"], meta["namespace"], claim)
        except ApiError as exc:
            msg = f'{prefix}: "failed to retrieve PVC {claim} from the lister: "{exc.message}""'
            raise _SnapshotError("SnapshotContentCreationFailed", msg) from exc
        if (pvc.get("status") or {}).get("phase") != "Bound":
            msg = f"the PVC {claim} is not yet bound to a PV, will not attempt to take a snapshot"
            raise _SnapshotError("SnapshotContentCreationFailed", msg)
        pv = store.get(rts["pv"], None, pvc["spec"]["volumeName"])
        driver = (pv["metadata"].get("annotations") or {}).get("pv.kubernetes.io/provisioned-by", "")
        snap_class = self._snapshot_class(vs, driver)
        ref = f"{meta['namespace']}/{meta['name']}"
        msg = f"Waiting for a snapshot {ref} to be created by the CSI driver."
        record_event(store, vs, "Normal", "CreatingSnapshot", msg, COMPONENT)
        size = parse_quantity(((pvc.get("status") or {}).get("capacity") or {}).get("storage", "0"))
        handle = f"snapshot-{meta['uid']}"
        try:
            take_snapshot(self.lab, pv, handle, size)
        except OSError as exc:
            raise _SnapshotError("SnapshotCreationFailed", f"Failed to create snapshot: {exc}", 5.0) from exc
        content = {
            "apiVersion": f"{SNAPSHOT_GROUP}/v1",
            "kind": "VolumeSnapshotContent",
            "metadata": {"name": content_name},
            "spec": {
                "deletionPolicy": snap_class.get("deletionPolicy") or "Delete",
                "driver": snap_class.get("driver") or driver,
                "source": {"volumeHandle": pv["metadata"]["name"]},
                "sourceVolumeMode": (pv.get("spec") or {}).get("volumeMode") or "Filesystem",
                "volumeSnapshotClassName": snap_class["metadata"]["name"],
                "volumeSnapshotRef": {
                    "apiVersion": f"{SNAPSHOT_GROUP}/v1",
                    "kind": "VolumeSnapshot",
                    "name": meta["name"],
                    "namespace": meta["namespace"],
                    "uid": meta["uid"],
                    "resourceVersion": meta.get("resourceVersion", ""),
                },
            },
        }
        content = store.create(content_rt, content)
        content = self._content_ready(content, handle, size)
        msg = f"Snapshot {ref} was successfully created by the CSI driver."
        record_event(store, vs, "Normal", "SnapshotCreated", msg, COMPONENT)
        self._bind_to_content(vs, content)

    def _content_ready(self, content: dict, handle: str, size: int) -> dict:
        def ready(obj: dict) -> None:
            status = obj.setdefault("status", {})
            status.update(snapshotHandle=handle, readyToUse=True, restoreSize=size)
            status.setdefault("creationTime", time.time_ns())
            status.pop("error", None)

        rt = snapshot_type(self.lab, "volumesnapshotcontents")
        return modify(self.lab.store, rt, None, content["metadata"]["name"], ready, status=True)

    def _bind_to_content(self, vs: dict, content: dict) -> None:
        cstatus = content.get("status") or {}
        if not cstatus.get("readyToUse"):
            raise _SnapshotError(
                "SnapshotNotReady", f"VolumeSnapshotContent {content['metadata']['name']} is not ready"
            )
        created = cstatus.get("creationTime")
        when = (
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created / 1e9))
            if isinstance(created, int)
            else now_rfc3339()
        )
        meta = vs["metadata"]

        def bound(obj: dict) -> None:
            status = obj.setdefault("status", {})
            status.update(
                boundVolumeSnapshotContentName=content["metadata"]["name"],
                creationTime=when,
                readyToUse=True,
                restoreSize=format_quantity(int(cstatus.get("restoreSize") or 0)),
            )
            status.pop("error", None)

        rt = snapshot_type(self.lab, "volumesnapshots")
        vs = modify(self.lab.store, rt, meta["namespace"], meta["name"], bound, status=True)
        msg = f"Snapshot {meta['namespace']}/{meta['name']} is ready to use."
        record_event(self.lab.store, vs, "Normal", "SnapshotReady", msg, COMPONENT)

    def _pre_provisioned(self, vs: dict, content_name: str) -> None:
        store = self.lab.store
        meta = vs["metadata"]
        rt = snapshot_type(self.lab, "volumesnapshotcontents")
        try:
            content = store.get(rt, None, content_name)
        except ApiError as exc:
            raise _SnapshotError(
                "SnapshotContentMissing", f"VolumeSnapshotContent is missing: {exc.message}"
            ) from exc
        ref = (content.get("spec") or {}).get("volumeSnapshotRef") or {}
        if (ref.get("namespace"), ref.get("name")) != (meta["namespace"], meta["name"]) or (
            ref.get("uid") and ref["uid"] != meta["uid"]
        ):
            msg = (
                f"VolumeSnapshotContent {content_name} is bound to a different snapshot "
                f"{ref.get('namespace')}/{ref.get('name')}"
            )
            raise _SnapshotError("SnapshotContentMisbound", msg, 5.0)
        if not ref.get("uid"):

            def claim(obj: dict) -> None:
                obj["spec"]["volumeSnapshotRef"]["uid"] = meta["uid"]
                obj["spec"]["volumeSnapshotRef"]["resourceVersion"] = meta.get("resourceVersion", "")

            content = modify(store, rt, None, content_name, claim)
        cspec = content.get("spec") or {}
        handle = (cspec.get("source") or {}).get("snapshotHandle") or (content.get("status") or {}).get(
            "snapshotHandle", ""
        )
        found = snapshot_data(self.lab, handle)
        if found is None:
            msg = f"snapshot data for handle {handle!r} does not exist"

            def not_ready(obj: dict) -> None:
                obj["status"] = {"readyToUse": False, "error": {"message": msg, "time": now_rfc3339()}}

            modify(store, rt, None, content_name, not_ready, status=True)
            raise _SnapshotError("SnapshotContentCheckandUpdateFailed", msg, 5.0)
        _, info = found
        content = self._content_ready(content, handle, int(info.get("size") or 0))
        self._bind_to_content(vs, content)

    def _check_content(self, vs: dict) -> float | None:
        """A ready snapshot whose content disappeared is no longer ready."""
        name = vs["status"]["boundVolumeSnapshotContentName"]
        if self.lab.store.exists(snapshot_type(self.lab, "volumesnapshotcontents"), None, name):
            return None
        raise _SnapshotError("SnapshotContentMissing", f"VolumeSnapshotContent {name} is missing", None)

    # --- VolumeSnapshotContent side
    def _reconcile_content(self, content: dict) -> float | None:
        """Content whose snapshot is gone is deleted with its data (Delete) or kept (Retain)."""
        spec = content.get("spec") or {}
        ref = spec.get("volumeSnapshotRef") or {}
        if not ref.get("uid") or content["metadata"].get("deletionTimestamp"):
            return None
        try:
            vs = self.lab.store.get(
                snapshot_type(self.lab, "volumesnapshots"), ref.get("namespace"), ref["name"]
            )
            if vs["metadata"]["uid"] == ref["uid"]:
                return None
        except ApiError as exc:
            if exc.code != 404:
                raise
        if spec.get("deletionPolicy") == "Delete":
            # The backend snapshot goes before its content, as the CSI sidecar deletes it before it lets
            # the content go: no reader sees the content gone and its data still there.
            self._drop_data(content)
            try:
                self.lab.store.delete(
                    snapshot_type(self.lab, "volumesnapshotcontents"), None, content["metadata"]["name"]
                )
            except ApiError as exc:
                if exc.code != 404:
                    raise
        return None

    def deleted(self, rt: ResourceType, obj: dict) -> None:
        store = self.lab.store
        content_rt = snapshot_type(self.lab, "volumesnapshotcontents")
        if rt.plural == "volumesnapshots":
            status, source = obj.get("status") or {}, (obj.get("spec") or {}).get("source") or {}
            name = status.get("boundVolumeSnapshotContentName") or source.get("volumeSnapshotContentName")
            name = name or f"snapcontent-{obj['metadata']['uid']}"
            if store.exists(content_rt, None, name):
                self._reconcile_content(store.get(content_rt, None, name))
            return
        if (obj.get("spec") or {}).get("deletionPolicy") == "Delete":
            self._drop_data(obj)

    def _drop_data(self, content: dict) -> None:
        _drop_unshared(self.lab, content)


# --------------------------------------------------------------------------------------------- driver side
# The names external-snapshotter v8.7.0 uses (pkg/utils/util.go).
BEING_CREATED = "snapshot.storage.kubernetes.io/volumesnapshot-being-created"
BEING_DELETED = "snapshot.storage.kubernetes.io/volumesnapshot-being-deleted"
CONTENT_FINALIZER = "snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection"
SIDECAR = "csi-snapshotter"
# How soon a content whose snapshot a fault holds (`stuck`) is looked at again.
HELD_RETRY_SECONDS = 1.0


class CsiSnapshotDriver(Controller):
    """The lab's CSI drivers with their csi-snapshotter sidecar, for the contents that name one of them.

    As the sidecar: a dynamic content (``spec.source.volumeHandle``, no status yet) is marked
    ``volumesnapshot-being-created``, the driver cuts the snapshot (CreateSnapshot), the status gets
    ``snapshotHandle``, ``readyToUse``, ``creationTime`` (ns) and ``restoreSize`` (bytes), and the mark is
    removed. A pre-provisioned content (``spec.source.snapshotHandle``) gets its status from the handle's
    data (ListSnapshots), or an error when no data is behind the handle. A content being deleted that the
    controller marked ``volumesnapshot-being-deleted`` (or a pre-provisioned one never bound) has its data
    dropped when its policy is Delete, its status cleared, then the content finalizer removed.

    Object faults are read on the VolumeSnapshot the content names: ``stuck`` leaves its content
    unanswered (uncut, or a pre-provisioned one unchecked: the snapshot stays not ready), ``fail`` makes
    CreateSnapshot fail.
    """

    name = "csi-snapshotter"
    watches = ((SNAPSHOT_GROUP, "volumesnapshotcontents"),)

    def reconcile(self, rt: ResourceType, obj: dict) -> float | None:
        spec = obj.get("spec") or {}
        source = spec.get("source") or {}
        if spec.get("driver") not in CSI_DRIVERS or not (
            source.get("volumeHandle") or source.get("snapshotHandle")
        ):
            return None
        if obj["metadata"].get("deletionTimestamp"):
            self._delete(obj)
            return None
        status = obj.get("status") or {}
        if source.get("volumeHandle") and not status.get("snapshotHandle"):
            return self._create(obj)  # the first time, and again after a failed cut, as the sidecar retries
        if status.get("readyToUse"):
            self._unmark(obj)
            return None
        if source.get("snapshotHandle"):
            return self._check(obj)
        return None

    def _held(self, content: dict) -> str | None:
        """The object fault set on the VolumeSnapshot the content names."""
        ref = content["spec"].get("volumeSnapshotRef") or {}
        return self.lab.faults.object_fault("VolumeSnapshot", ref.get("namespace"), ref.get("name", ""))

    # --- CreateSnapshot
    def _create(self, content: dict) -> float | None:
        ref = content["spec"].get("volumeSnapshotRef") or {}
        fault = self._held(content)
        if fault == "stuck":
            return HELD_RETRY_SECONDS
        name = content["metadata"]["name"]
        if not content["spec"].get("volumeSnapshotClassName"):
            return self._error(
                content, "SnapshotCreationFailed", f"failed to take snapshot {name} without a snapshot class"
            )
        # A final error (the storage answered) leaves no being-created mark; checked before marking, so a
        # retry that meets the same error writes nothing.
        if fault == "fail":
            return self._error(
                content, "SnapshotCreationFailed", "Failed to create snapshot: injected failure"
            )
        handle = content["spec"]["source"]["volumeHandle"]
        pv = self._volume(handle)
        if pv is None:
            msg = "Failed to create snapshot: failed to take snapshot of the volume %s: %s" % (
                handle,
                '"volume not found"',
            )
            return self._error(content, "SnapshotCreationFailed", msg)
        content = self._mark(content)
        size = parse_quantity(((pv.get("spec") or {}).get("capacity") or {}).get("storage", "0"))
        snapshot_handle = f"snapshot-{ref.get('uid') or content['metadata']['uid']}"
        try:
            take_snapshot(self.lab, pv, snapshot_handle, size)
        except OSError as exc:  # not final: the mark stays, as after a timeout
            return self._error(content, "SnapshotCreationFailed", f"Failed to create snapshot: {exc}")
        content = self._set_status(content, snapshot_handle, size)
        self._unmark(content)
        return None

    def _volume(self, handle: str) -> dict | None:
        for pv in self.lab.store.list(core_types(self.lab)["pv"])[0]:
            if ((pv.get("spec") or {}).get("csi") or {}).get("volumeHandle") == handle:
                return pv
        return None

    # --- ListSnapshots, for a pre-provisioned content
    def _check(self, content: dict) -> float | None:
        if self._held(content) == "stuck":
            return HELD_RETRY_SECONDS
        handle = content["spec"]["source"]["snapshotHandle"]
        found = snapshot_data(self.lab, handle)
        if found is None:
            msg = (
                "Failed to check and update snapshot content: failed to list snapshot for content "
                f'{content["metadata"]["name"]}: "snapshot {handle} not found"'
            )
            return self._error(content, "SnapshotContentCheckandUpdateFailed", msg)
        self._set_status(content, handle, int(found[1].get("size") or 0))
        return None

    def _set_status(self, content: dict, handle: str, size: int) -> dict:
        def fill(obj: dict) -> bool:
            status = obj.get("status") or {}
            before = dict(status)
            status.setdefault("snapshotHandle", handle)
            status["readyToUse"] = True
            status.pop("error", None)
            status.setdefault("creationTime", time.time_ns())
            if size > 0:
                status.setdefault("restoreSize", size)
            obj["status"] = status
            return status != before

        rt = snapshot_type(self.lab, "volumesnapshotcontents")
        return modify(self.lab.store, rt, None, content["metadata"]["name"], fill, status=True)

    def _error(self, content: dict, reason: str, message: str, retry: float = 2.0) -> float:
        """The sidecar's error status (readyToUse false) and one Event per distinct message."""
        changed = []

        def set_error(obj: dict) -> bool:
            status = obj.get("status") or {}
            if (status.get("error") or {}).get("message") == message:
                return False
            status.update(error={"message": message, "time": now_rfc3339()}, readyToUse=False)
            obj["status"] = status
            changed.append(True)
            return True

        rt = snapshot_type(self.lab, "volumesnapshotcontents")
        content = modify(self.lab.store, rt, None, content["metadata"]["name"], set_error, status=True)
        if changed:
            record_event(self.lab.store, content, "Warning", reason, message, SIDECAR)
        return retry

    # --- the being-created mark
    def _mark(self, content: dict) -> dict:
        return self._annotate(content, {BEING_CREATED: "yes"})

    def _unmark(self, content: dict) -> dict:
        return self._annotate(content, {BEING_CREATED: None})

    def _annotate(self, content: dict, change: dict) -> dict:
        notes = content["metadata"].get("annotations") or {}
        if all(notes.get(k) == v for k, v in change.items()):
            return content
        rt = snapshot_type(self.lab, "volumesnapshotcontents")
        body = {"metadata": {"annotations": change}}
        return self.lab.store.patch(rt, None, content["metadata"]["name"], "merge", body)

    # --- DeleteSnapshot
    def _delete(self, content: dict) -> None:
        meta, spec = content["metadata"], content["spec"]
        notes = meta.get("annotations") or {}
        unbound_import = spec["source"].get("snapshotHandle") and not (
            spec.get("volumeSnapshotRef") or {}
        ).get("uid")
        if not unbound_import and (BEING_CREATED in notes or BEING_DELETED not in notes):
            return
        rt = snapshot_type(self.lab, "volumesnapshotcontents")
        status = content.get("status") or {}
        if spec.get("deletionPolicy") == "Delete" and status.get("snapshotHandle"):
            _drop_unshared(self.lab, content)

            def clear(obj: dict) -> bool:
                kept = obj.get("status") or {}
                for field in ("snapshotHandle", "readyToUse", "creationTime", "restoreSize"):
                    kept.pop(field, None)
                obj["status"] = kept
                return True

            content = modify(self.lab.store, rt, None, meta["name"], clear, status=True)
        if CONTENT_FINALIZER in (content["metadata"].get("finalizers") or []):

            def release(obj: dict) -> bool:
                finalizers = obj["metadata"].get("finalizers") or []
                if CONTENT_FINALIZER not in finalizers:
                    return False
                obj["metadata"]["finalizers"] = [f for f in finalizers if f != CONTENT_FINALIZER]
                return True

            try:
                modify(self.lab.store, rt, None, meta["name"], release)
            except ApiError as exc:
                if exc.code != 404:
                    raise


def _drop_unshared(lab, content: dict) -> None:
    """Drop the data behind ``content``'s snapshot handle unless another content still refers to it."""
    store = lab.store
    handle = (content.get("status") or {}).get("snapshotHandle") or (
        ((content.get("spec") or {}).get("source") or {}).get("snapshotHandle", "")
    )
    for other in store.list(snapshot_type(lab, "volumesnapshotcontents"))[0]:
        if other["metadata"]["name"] == content["metadata"]["name"]:
            continue
        other_handle = (other.get("status") or {}).get("snapshotHandle") or (
            ((other.get("spec") or {}).get("source") or {}).get("snapshotHandle")
        )
        if other_handle == handle:
            return  # still referenced by another content
    drop_snapshot_data(lab, handle)


__all__ = ["CsiSnapshotDriver", "SnapshotController"]
