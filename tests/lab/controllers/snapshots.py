"""VolumeSnapshots of the lab: the CSI driver side.

The snapshot controller is the real one (external-snapshotter v8.7.0's cmd/snapshot-controller, a child
process the lab starts, apiserver.py): binding, readiness, deletion and finalizers are its behaviour.
`CsiSnapshotDriver` is what a CSI driver and its csi-snapshotter sidecar (pkg/sidecar-controller of the same
release) do for the VolumeSnapshotContents the controller creates or an admin pre-provisions: it cuts the
snapshot (a copy-on-write copy of the volume's data), fills the content's status, and on deletion drops the
data and releases the content's finalizer.
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
    parse_quantity,
    snapshot_data,
    snapshot_type,
    take_snapshot,
)

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


__all__ = ["CsiSnapshotDriver"]
