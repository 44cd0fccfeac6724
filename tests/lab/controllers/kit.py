"""Small helpers every lab controller needs: resource types, retried writes and core/v1 Events."""

from __future__ import annotations

import secrets
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..objects import ApiError, ResourceType, now_rfc3339

if TYPE_CHECKING:
    from ..apistore import ApiStore

CORE = ""
SNAPSHOT_GROUP = "snapshot.storage.k8s.io"

_event_lock = threading.Lock()
# store -> (involved uid, type, reason, message) -> Event name, so a repeated event bumps its count
_recent_events: weakref.WeakKeyDictionary[ApiStore, dict[tuple, str]] = weakref.WeakKeyDictionary()


def rtype(store: ApiStore, group: str, version: str, plural: str) -> ResourceType:
    return store.resource(group, version, plural)


def get_or_none(store: ApiStore, rt: ResourceType, namespace: str | None, name: str) -> dict | None:
    """The object, or None when the API answers 404; any other error is raised."""
    try:
        return store.get(rt, namespace, name)
    except ApiError as exc:
        if exc.code != 404:
            raise
        return None


def modify(
    store: ApiStore,
    rt: ResourceType,
    namespace: str | None,
    name: str,
    mutate: Callable[[dict], bool | None],
    status: bool = False,
    attempts: int = 20,
) -> dict:
    """Read, mutate and write back, retrying on conflicts as controllers do.

    `mutate` edits the object in place; returning False skips the write. With `status` the write goes to
    the status subresource when the type has one.
    """
    subresource = "status" if status and "status" in rt.subresources else None
    error: ApiError | None = None
    for _ in range(attempts):
        obj = store.get(rt, namespace, name)
        if mutate(obj) is False:
            return obj
        try:
            return store.update(rt, obj, subresource=subresource)
        except ApiError as exc:
            if exc.code != 409:
                raise
            error = exc
    assert error is not None
    raise error


def record_event(
    store: ApiStore, obj: dict, event_type: str, reason: str, message: str, component: str
) -> None:
    """Record a core/v1 Event about `obj`; a repeat of the same event increments its count.

    Events of cluster-scoped objects go to the "default" namespace, as the Kubernetes recorder does.
    An event that cannot be written (namespace gone) is dropped, never fatal.
    """
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    key = (meta.get("uid"), event_type, reason, message)
    try:
        ev_rt = store.resource(CORE, "v1", "events")
    except ApiError:
        return
    now = now_rfc3339()
    with _event_lock:
        seen = _recent_events.setdefault(store, {})
        name = seen.get(key)
        if name is not None:

            def bump(ev: dict) -> None:
                ev["count"] = int(ev.get("count") or 1) + 1
                ev["lastTimestamp"] = now

            try:
                modify(store, ev_rt, namespace, name, bump)
                return
            except ApiError:
                seen.pop(key, None)
        involved = {
            "apiVersion": obj.get("apiVersion", ""),
            "kind": obj.get("kind", ""),
            "name": meta.get("name", ""),
            "uid": meta.get("uid", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
        }
        if meta.get("namespace"):
            involved["namespace"] = meta["namespace"]
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta.get('name', 'object')}.{secrets.token_hex(8)}",
                "namespace": namespace,
            },
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": event_type,
            "source": {"component": component},
            "reportingComponent": component,
            "reportingInstance": f"{component}-lab",
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            created = store.create(ev_rt, event)
        except ApiError:
            return
        if len(seen) > 4096:
            seen.clear()
        seen[key] = created["metadata"]["name"]


def events_for(store: ApiStore, obj: dict) -> list[dict]:
    """Events whose involvedObject is `obj` (matched by uid), oldest first."""
    meta = obj.get("metadata") or {}
    ev_rt = store.resource(CORE, "v1", "events")
    items, _ = store.list(ev_rt, meta.get("namespace") or "default")
    mine = [e for e in items if (e.get("involvedObject") or {}).get("uid") == meta.get("uid")]
    return sorted(mine, key=lambda e: int(e["metadata"].get("resourceVersion") or 0))


def condition(obj: dict, ctype: str) -> dict | None:
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("type") == ctype:
            return cond
    return None


def is_gone(exc: ApiError) -> bool:
    return exc.code == 404
