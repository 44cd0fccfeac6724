"""In-memory object store of the lab API server.

Objects are plain dicts shaped as the API returns them. A stored dict is never mutated after it is
stored: every write builds a new dict, so readers may serialize a stored object without holding the
lock and without copying it. Public read methods still return deep copies.
"""

from __future__ import annotations

import base64
import bisect
import json
import queue
import random
import re
import threading
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

from .objects import (
    ApiError,
    Event,
    ResourceType,
    TypeHooks,
    _details,
    already_exists,
    bad_request,
    clone,
    conflict,
    invalid,
    not_found,
    now_rfc3339,
)

EVENT_HISTORY = 20000  # events kept for watch resume; older resourceVersions get 410 Gone
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Kubernetes defaults some types to orphaning their dependents when no policy is given.
ORPHAN_BY_DEFAULT = {("batch", "jobs")}


class _Entry:
    """A stored object and its lazily cached JSON encoding."""

    __slots__ = ("_raw", "obj")

    def __init__(self, obj: dict):
        self.obj = obj
        self._raw: bytes | None = None

    def raw(self) -> bytes:
        if self._raw is None:
            self._raw = json.dumps(self.obj, separators=(",", ":")).encode()
        return self._raw


def _as_version(obj: dict, rt: ResourceType) -> dict:
    if obj.get("apiVersion") == rt.api_version:
        return obj
    return dict(obj, apiVersion=rt.api_version)


class Subscription:
    """A queue of store events for the kinds it asked for."""

    def __init__(self, store: Store, kinds: set[tuple[str, str]] | None):
        self._store = store
        self.kinds = kinds
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self.closed = False

    def _offer(self, event: Event) -> None:
        if self.kinds is None or (event.rt.group, event.rt.plural) in self.kinds:
            self._queue.put(event)

    def get_shared(self, timeout: float | None = None) -> Event | None:
        """Next event; its object is shared with the store and must not be mutated."""
        if self.closed:
            return None
        try:
            event = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        return event

    def get(self, timeout: float | None = None) -> Event | None:
        event = self.get_shared(timeout)
        if event is None:
            return None
        return Event(event.type, event.rt, clone(event.obj), event.resource_version)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._store._unsubscribe(self)
            self._queue.put(None)  # wake a blocked reader


class Store:
    def __init__(self, bootstrap: bool = True):
        self._lock = threading.RLock()
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        self._kinds: dict[tuple[str, str], ResourceType] = {}
        # (group, plural) -> namespace ("" when cluster scoped) -> name -> entry
        self._objs: dict[tuple[str, str], dict[str, dict[str, _Entry]]] = {}
        self._by_uid: dict[str, tuple[str, str, str, str]] = {}
        self._dependents: dict[str, set[tuple[str, str, str, str]]] = {}
        self._rv = 0
        self._events: deque[Event] = deque()
        self._compacted_rv = 0
        self._subs: list[Subscription] = []
        self._pod_logs: dict[tuple[str, str], str] = {}
        # (group, plural) -> (label key, label value) -> {(namespace, name)}: selective lists skip the scan
        self._labels: dict[tuple[str, str], dict[tuple[str, str], set[tuple[str, str]]]] = {}
        # (group, plural, label selector or None) -> sorted keys, kept until a key of the kind is added
        # or removed: a paged list seeks its continue key instead of sorting the kind on every page
        self._sorted_keys: dict[tuple[str, str, str | None], list[tuple[str, str]]] = {}
        self.hooks: dict[tuple[str, str], TypeHooks] = {}
        self.type_listeners: list[Callable[[], None]] = []
        if bootstrap:
            from . import builtin

            builtin.install(self)

    # ----------------------------------------------------------------- registry
    def register(self, rt: ResourceType) -> None:
        with self._lock:
            self._types[(rt.group, rt.version, rt.plural)] = rt
            self._kinds[(rt.api_version, rt.kind)] = rt
            self._objs.setdefault((rt.group, rt.plural), {})
        self._types_changed()

    def unregister(self, group: str, plural: str) -> None:
        with self._lock:
            gone = [k for k, rt in self._types.items() if rt.group == group and rt.plural == plural]
            if not gone:
                return
            rt = self._types[gone[0]]
            for namespace, names in list(self._objs.get((group, plural), {}).items()):
                for name in list(names):
                    self._remove(rt, namespace, name)
            for k in gone:
                removed = self._types.pop(k)
                self._kinds.pop((removed.api_version, removed.kind), None)
            self._objs.pop((group, plural), None)
        self._types_changed()

    def unregister_version(self, group: str, version: str, plural: str) -> None:
        """Stop serving one version; the objects stay (they are served by the other versions)."""
        with self._lock:
            rt = self._types.pop((group, version, plural), None)
            if rt is not None:
                self._kinds.pop((rt.api_version, rt.kind), None)
        self._types_changed()

    def _types_changed(self) -> None:
        for listener in list(self.type_listeners):
            listener()

    def types(self) -> list[ResourceType]:
        with self._lock:
            return list(self._types.values())

    def resource(self, group: str, version: str, plural: str) -> ResourceType:
        rt = self._types.get((group, version, plural))
        if rt is None:
            path = f"/apis/{group}/{version}" if group else f"/api/{version}"
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ({path} {plural})"
            )
        return rt

    def resource_for_kind(self, api_version: str, kind: str) -> ResourceType:
        rt = self._kinds.get((api_version, kind))
        if rt is None:
            raise ApiError(404, "NotFound", f'no matches for kind "{kind}" in version "{api_version}"')
        return rt

    # -------------------------------------------------------------------- reads
    @property
    def resource_version(self) -> int:
        return self._rv

    def _bucket(self, rt: ResourceType) -> dict[str, dict[str, _Entry]]:
        bucket = self._objs.get((rt.group, rt.plural))
        if bucket is None:
            self.resource(rt.group, rt.version, rt.plural)  # raises the Kubernetes 404 for unserved types
            raise ApiError(404, "NotFound", f"{rt.plural} is not served")
        return bucket

    def _ns(self, rt: ResourceType, namespace: str | None) -> str:
        return (namespace or "") if rt.namespaced else ""

    def get_entry(self, rt: ResourceType, namespace: str | None, name: str) -> _Entry:
        """The stored entry (shared, read only); ApiError 404 when absent."""
        entry = self._bucket(rt).get(self._ns(rt, namespace), {}).get(name)
        if entry is None:
            raise not_found(rt, name)
        return entry

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> dict:
        return clone(_as_version(self.get_entry(rt, namespace, name).obj, rt))

    def exists(self, rt: ResourceType, namespace: str | None, name: str) -> bool:
        return name in self._bucket(rt).get(self._ns(rt, namespace), {})

    def list_page(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 0,
        continue_token: str = "",
    ) -> tuple[list[_Entry], str, str, int | None]:
        """Entries (shared, read only), list resourceVersion, continue token, remaining count."""
        label_match = _label_matcher(label_selector)
        field_match = _field_matcher(field_selector)
        start = None
        with self._lock:
            list_rv = self._rv
            if continue_token:
                list_rv, start = _decode_continue(continue_token)
            bucket = self._bucket(rt)
            keys = self._keys(rt, bucket, label_selector if label_match is not None else "")
            lo, hi = 0, len(keys)
            if rt.namespaced and namespace:
                lo = bisect.bisect_left(keys, (namespace, ""))
                hi = bisect.bisect_left(keys, (namespace + "\x00", ""), lo)
            if start is not None:
                lo = max(lo, bisect.bisect_right(keys, start, lo, hi))
            out: list[_Entry] = []
            token = ""
            remaining = None
            for i in range(lo, hi):
                ns, name = keys[i]
                entry = bucket[ns][name]
                obj = entry.obj
                if label_match is not None and not label_match(obj.get("metadata", {}).get("labels") or {}):
                    continue
                if field_match is not None and not field_match(obj):
                    continue
                if limit and len(out) == limit:
                    last = out[-1].obj["metadata"]
                    token = _encode_continue(list_rv, (last.get("namespace", ""), last["name"]))
                    if label_match is None and field_match is None:
                        remaining = hi - i
                    break
                out.append(entry)
        return out, str(list_rv), token, remaining

    def _keys(self, rt: ResourceType, bucket: dict, label_selector: str) -> list[tuple[str, str]]:
        """Sorted (namespace, name) keys of the kind, or of the objects that can match the selector
        (narrowed through the label index), cached until a key of the kind is added or removed.
        Called under the lock."""
        candidates = self._label_candidates(rt, label_selector) if label_selector else None
        cache_key = (rt.group, rt.plural, label_selector if candidates is not None else None)
        keys = self._sorted_keys.get(cache_key)
        if keys is None:
            if candidates is not None:
                keys = sorted(candidates)
            else:
                keys = sorted((ns, name) for ns, names in bucket.items() for name in names)
            self._sorted_keys[cache_key] = keys
        return keys

    def _keys_changed(self, rt: ResourceType) -> None:
        for cache_key in [k for k in self._sorted_keys if k[:2] == (rt.group, rt.plural)]:
            del self._sorted_keys[cache_key]

    def _label_candidates(self, rt: ResourceType, label_selector: str) -> set[tuple[str, str]] | None:
        """Keys of objects that can match the selector, narrowed through the label index by its most
        selective `=`/`in` requirement; None when no requirement can use the index."""
        selector = _cached("l", _parse_label, label_selector)
        index = self._labels.get((rt.group, rt.plural), {})
        best: set[tuple[str, str]] | None = None
        for req in getattr(selector, "requirements", ()):
            if req.operator not in ("=", "in"):
                continue
            keys: set[tuple[str, str]] = set()
            for value in req.values:
                keys |= index.get((req.key, value), set())
            if best is None or len(keys) < len(best):
                best = keys
        return best

    def _index_labels(self, rt: ResourceType, obj: dict, add: bool) -> None:
        meta = obj["metadata"]
        labels = meta.get("labels")
        if not labels:
            return
        index = self._labels.setdefault((rt.group, rt.plural), {})
        key = (meta.get("namespace", "") if rt.namespaced else "", meta["name"])
        for pair in labels.items():
            if add:
                index.setdefault(pair, set()).add(key)
            else:
                keys = index.get(pair)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[pair]

    def list(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
    ) -> tuple[list[dict], str]:
        entries, rv, _, _ = self.list_page(rt, namespace, label_selector, field_selector)
        return [clone(_as_version(e.obj, rt)) for e in entries], rv

    # ------------------------------------------------------------------- events
    def _emit(self, etype: str, rt: ResourceType, obj: dict, rv: int) -> None:
        event = Event(etype, rt, obj, rv)
        self._events.append(event)
        if len(self._events) > EVENT_HISTORY:
            self._compacted_rv = self._events.popleft().resource_version
        for sub in self._subs:
            sub._offer(event)

    def compact(self, resource_version: int | None = None) -> None:
        """Forget events up to resource_version (default: all), as etcd compaction does; watches
        from an older resourceVersion then get 410 Gone."""
        with self._lock:
            upto = self._rv if resource_version is None else resource_version
            while self._events and self._events[0].resource_version <= upto:
                self._events.popleft()
            self._compacted_rv = max(self._compacted_rv, upto)

    def subscribe(self, kinds: set[tuple[str, str]] | None = None) -> Subscription:
        sub = Subscription(self, set(kinds) if kinds is not None else None)
        with self._lock:
            self._subs.append(sub)
        return sub

    def _unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            if sub in self._subs:
                self._subs.remove(sub)

    def events_since(self, rt: ResourceType, resource_version: int) -> list[Event]:
        with self._lock:
            return self._events_since(rt, resource_version)

    def _events_since(self, rt: ResourceType, resource_version: int) -> list[Event]:
        if resource_version < self._compacted_rv:
            raise ApiError(
                410, "Expired", f"too old resource version: {resource_version} ({self._compacted_rv + 1})"
            )
        kind = (rt.group, rt.plural)
        return [
            e
            for e in self._events
            if e.resource_version > resource_version and (e.rt.group, e.rt.plural) == kind
        ]

    def watch(self, rt: ResourceType, resource_version: int | None) -> tuple[list[Event], Subscription]:
        """Backlog and live subscription, taken atomically. resource_version None: synthetic ADDED
        events for every current object (the Kubernetes answer to a watch without a resourceVersion)."""
        with self._lock:
            if resource_version is None:
                backlog = [
                    Event("ADDED", rt, entry.obj, int(entry.obj["metadata"]["resourceVersion"]))
                    for names in self._bucket(rt).values()
                    for entry in names.values()
                ]
            else:
                backlog = self._events_since(rt, resource_version)
            sub = self.subscribe({(rt.group, rt.plural)})
        return backlog, sub

    # ------------------------------------------------------------------- writes
    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def _hooks(self, rt: ResourceType) -> TypeHooks | None:
        return self.hooks.get((rt.group, rt.plural))

    def _store(self, rt: ResourceType, obj: dict, etype: str) -> None:
        meta = obj["metadata"]
        ns = meta.get("namespace", "") if rt.namespaced else ""
        bucket = self._objs[(rt.group, rt.plural)]
        old = bucket.get(ns, {}).get(meta["name"])
        if old is not None:
            self._unindex(old.obj)
            self._index_labels(rt, old.obj, add=False)
            if old.obj["metadata"].get("labels") != meta.get("labels"):
                self._keys_changed(rt)
        else:
            self._keys_changed(rt)
        bucket.setdefault(ns, {})[meta["name"]] = _Entry(obj)
        self._index(rt, obj)
        self._index_labels(rt, obj, add=True)
        self._emit(etype, rt, obj, int(meta["resourceVersion"]))
        hooks = self._hooks(rt)
        if hooks:
            hooks.after_write(self, rt, obj)

    def _index(self, rt: ResourceType, obj: dict) -> None:
        meta = obj["metadata"]
        key = (rt.group, rt.plural, meta.get("namespace", ""), meta["name"])
        self._by_uid[meta["uid"]] = key
        for ref in meta.get("ownerReferences") or ():
            self._dependents.setdefault(ref.get("uid", ""), set()).add(key)

    def _unindex(self, obj: dict) -> None:
        meta = obj["metadata"]
        key_ns = meta.get("namespace", "")
        for ref in meta.get("ownerReferences") or ():
            deps = self._dependents.get(ref.get("uid", ""))
            if deps:
                deps.difference_update({k for k in deps if k[2] == key_ns and k[3] == meta["name"]})
                if not deps:
                    self._dependents.pop(ref.get("uid", ""), None)

    def _validate_schema(self, rt: ResourceType, obj: dict, name: str) -> dict:
        """The object pruned and defaulted by the type's schema; ApiError 422 when it is invalid."""
        if not rt.schema:
            return obj
        from .schema import apply_defaults, prune, validate

        obj = apply_defaults(rt.schema, prune(rt.schema, obj))
        causes = validate(rt.schema, obj)
        if causes:
            raise invalid(rt, name, causes)
        return obj

    def _check_name(self, rt: ResourceType, name: str) -> None:
        pattern, limit = (_LABEL, 63) if rt.plural == "namespaces" else (_SUBDOMAIN, 253)
        if len(name) > limit or not pattern.match(name):
            what = "RFC 1123 label" if pattern is _LABEL else "RFC 1123 subdomain"
            msg = (
                f"a lowercase {what} must consist of lower case alphanumeric characters, '-' or '.', "
                "and must start and end with an alphanumeric character"
            )
            raise invalid(
                rt,
                name,
                [
                    {
                        "reason": "FieldValueInvalid",
                        "message": f'Invalid value: "{name}": {msg}',
                        "field": "metadata.name",
                    }
                ],
            )

    def _check_namespace(self, rt: ResourceType, namespace: str, name: str) -> None:
        if not rt.namespaced:
            return
        if not namespace:
            raise bad_request("the server could not find the requested resource: a namespace is required")
        ns_rt = self._types[("", "v1", "namespaces")]
        entry = self._objs[("", "namespaces")].get("", {}).get(namespace)
        if entry is None:
            raise not_found(ns_rt, namespace)
        if entry.obj["metadata"].get("deletionTimestamp"):
            raise ApiError(
                403,
                "Forbidden",
                f'{rt.plural} "{name}" is forbidden: unable to create new content in namespace {namespace} '
                "because it is being terminated",
                {"name": namespace, "kind": "namespaces"},
            )

    def create(
        self, rt: ResourceType, obj: dict, dry_run: bool = False, keep_managed_fields: bool = False
    ) -> dict:
        obj = {"apiVersion": rt.api_version, "kind": rt.kind, "metadata": {}, **clone(obj)}
        obj["apiVersion"] = rt.api_version
        obj["kind"] = rt.kind
        meta = obj["metadata"] = obj["metadata"] or {}
        if not rt.namespaced:
            meta.pop("namespace", None)
        with self._lock:
            namespace = meta.get("namespace", "")
            name = meta.get("name", "")
            if not name and meta.get("generateName"):
                base = meta["generateName"][:58]
                name = base + "".join(random.choice(_NAME_CHARS) for _ in range(5))
                while self.exists(rt, namespace, name):
                    name = base + "".join(random.choice(_NAME_CHARS) for _ in range(5))
                meta["name"] = name
            if not name:
                cause = {
                    "reason": "FieldValueRequired",
                    "message": "Required value: name or generateName is required",
                    "field": "metadata.name",
                }
                raise invalid(rt, "", [cause])
            self._check_namespace(rt, namespace, name)
            if self.exists(rt, namespace, name):
                raise already_exists(rt, name)
            self._check_name(rt, name)
            if "status" in rt.subresources:
                obj.pop("status", None)
            for key in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
                meta.pop(key, None)
            if not keep_managed_fields:
                meta.pop("managedFields", None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            meta["generation"] = 1
            hooks = self._hooks(rt)
            if hooks:
                hooks.prepare_create(self, rt, obj)
            obj = self._validate_schema(rt, obj, name)
            meta = obj["metadata"]
            if dry_run:
                return obj
            meta["resourceVersion"] = str(self._next_rv())
            self._store(rt, obj, "ADDED")
            return clone(obj)

    def update(
        self,
        rt: ResourceType,
        obj: dict,
        subresource: str | None = None,
        dry_run: bool = False,
        keep_managed_fields: bool = False,
    ) -> dict:
        meta_in = obj.get("metadata") or {}
        name = meta_in.get("name", "")
        namespace = meta_in.get("namespace", "") if rt.namespaced else ""
        if subresource not in (None, "status"):
            raise ApiError(405, "MethodNotAllowed", f"the server does not allow this method on {subresource}")
        if subresource == "status" and "status" not in rt.subresources:
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ({rt.plural}/status)"
            )
        with self._lock:
            cur = self.get_entry(rt, namespace, name).obj
            cur_meta = cur["metadata"]
            rv = meta_in.get("resourceVersion")
            if rv and str(rv) != cur_meta["resourceVersion"]:
                raise conflict(rt, name)
            if subresource == "status":
                new = clone(cur)
                if "status" in obj:
                    new["status"] = clone(obj["status"])
                else:
                    new.pop("status", None)
            else:
                new = clone(obj)
                new["apiVersion"] = cur["apiVersion"]
                new["kind"] = rt.kind
                if "status" in rt.subresources:
                    if "status" in cur:
                        new["status"] = clone(cur["status"])
                    else:
                        new.pop("status", None)
                meta = new.setdefault("metadata", {})
                if not rt.namespaced:
                    meta.pop("namespace", None)
                for key in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"):
                    if key in cur_meta:
                        meta[key] = cur_meta[key]
                    else:
                        meta.pop(key, None)
                meta.pop("selfLink", None)
                if not keep_managed_fields:
                    if "managedFields" in cur_meta:
                        meta["managedFields"] = cur_meta["managedFields"]
                    else:
                        meta.pop("managedFields", None)
                meta["generation"] = cur_meta.get("generation", 1)
                hooks = self._hooks(rt)
                if hooks:
                    hooks.prepare_update(self, rt, cur, new)
            new["metadata"]["resourceVersion"] = cur_meta["resourceVersion"]
            new = self._validate_schema(rt, new, name)
            meta = new["metadata"]
            if cur_meta.get("deletionTimestamp"):
                added = set(meta.get("finalizers") or ()) - set(cur_meta.get("finalizers") or ())
                if added:
                    cause = {
                        "reason": "FieldValueForbidden",
                        "message": "Forbidden: no new finalizers can be added if the object is being deleted",
                        "field": "metadata.finalizers",
                    }
                    raise invalid(rt, name, [cause])
            if new == cur:
                return clone(
                    _as_version(cur, rt)
                )  # no-op writes keep the resourceVersion, as Kubernetes does
            if _spec_changed(cur, new):
                meta["generation"] = cur_meta.get("generation", 1) + 1
            if dry_run:
                return new
            meta["resourceVersion"] = str(self._next_rv())
            self._store(rt, new, "MODIFIED")
            if meta.get("deletionTimestamp") and not meta.get("finalizers"):
                self._remove(rt, namespace, name)
            return clone(_as_version(new, rt))

    def patch(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        patch_type: str,
        body: Any,
        subresource: str | None = None,
        dry_run: bool = False,
        field_manager: str | None = None,
        force: bool = False,
    ) -> dict:
        from . import patch as patchlib

        kind = _patch_kind(patch_type)
        if kind == "strategic" and rt.custom:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: "
                "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            )
        ns = self._ns(rt, namespace)
        ignore: tuple[str, ...] = ()
        if kind == "apply" and isinstance(body, dict):
            if subresource == "status":
                ignore = tuple(k for k in body if k not in ("apiVersion", "kind", "metadata", "status"))
            elif "status" in rt.subresources:
                ignore = ("status",)
            applied_meta = body.get("metadata") or {}
            if applied_meta.get("name") not in (None, name):
                raise bad_request("the name of the object does not match the name on the URL")
        with self._lock:
            if kind == "apply" and not self.exists(rt, ns, name):
                if subresource:
                    raise not_found(rt, name)
                try:
                    created = patchlib.apply_patch(
                        None, body, field_manager or "", force, ignore_fields=ignore
                    )
                except patchlib.PatchError as exc:
                    raise _patch_error(rt, name, exc) from exc
                meta = created.setdefault("metadata", {})
                meta["name"] = name
                if rt.namespaced:
                    meta["namespace"] = ns
                return self.create(rt, created, dry_run=dry_run, keep_managed_fields=True)
            live = clone(self.get_entry(rt, ns, name).obj)
            try:
                if kind == "merge":
                    new = patchlib.merge_patch(live, body)
                elif kind == "json":
                    new = patchlib.json_patch(live, body)
                elif kind == "strategic":
                    new = patchlib.strategic_merge_patch(live, body)
                else:
                    new = patchlib.apply_patch(live, body, field_manager or "", force, ignore_fields=ignore)
            except patchlib.PatchError as exc:
                raise _patch_error(rt, name, exc) from exc
            if not isinstance(new, dict):
                raise bad_request("the patch did not produce an object")
            meta = new.setdefault("metadata", {})
            if meta.get("name") != name or (rt.namespaced and meta.get("namespace") != ns):
                raise bad_request("metadata.name and metadata.namespace cannot be changed by a patch")
            return self.update(rt, new, subresource, dry_run=dry_run, keep_managed_fields=(kind == "apply"))

    def delete(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        propagation: str | None = "Background",
        dry_run: bool = False,
        preconditions: dict | None = None,
    ) -> dict:
        ns = self._ns(rt, namespace)
        if propagation is None:
            propagation = "Orphan" if (rt.group, rt.plural) in ORPHAN_BY_DEFAULT else "Background"
        if propagation not in ("Background", "Foreground", "Orphan"):
            raise bad_request(f"unsupported propagationPolicy {propagation!r}")
        with self._lock:
            cur = self.get_entry(rt, ns, name).obj
            meta = cur["metadata"]
            pre = preconditions or {}
            if pre.get("uid") and pre["uid"] != meta["uid"]:
                raise conflict(
                    rt,
                    name,
                    f"Precondition failed: UID in precondition: {pre['uid']}, "
                    f"UID in object meta: {meta['uid']}",
                )
            if pre.get("resourceVersion") and str(pre["resourceVersion"]) != meta["resourceVersion"]:
                raise conflict(
                    rt,
                    name,
                    f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
                    f"ResourceVersion in object meta: {meta['resourceVersion']}",
                )
            if dry_run:
                return clone(_as_version(cur, rt))
            if propagation == "Orphan":
                self._orphan_dependents(meta["uid"])
            finalizers = list(meta.get("finalizers") or ())
            has_dependents = bool(self._dependents.get(meta["uid"]))
            if propagation == "Foreground" and has_dependents and "foregroundDeletion" not in finalizers:
                finalizers.append("foregroundDeletion")
            if rt.plural == "namespaces":
                return self._delete_namespace(rt, cur)
            if finalizers:
                if not meta.get("deletionTimestamp") or finalizers != list(meta.get("finalizers") or ()):
                    new = dict(cur)
                    new_meta = dict(meta, finalizers=finalizers)
                    new_meta.setdefault("deletionTimestamp", now_rfc3339())
                    new_meta.setdefault("deletionGracePeriodSeconds", 0)
                    new_meta["resourceVersion"] = str(self._next_rv())
                    new["metadata"] = new_meta
                    self._store(rt, new, "MODIFIED")
                    cur = new
                if propagation == "Foreground":
                    self._delete_dependents(meta["uid"], "Foreground")
                    self._finish_foreground(meta["uid"])
                entry = self._bucket(rt).get(ns, {}).get(name)
                return clone(_as_version(entry.obj if entry else cur, rt))
            return clone(_as_version(self._remove(rt, ns, name), rt))

    def _delete_namespace(self, rt: ResourceType, cur: dict) -> dict:
        name = cur["metadata"]["name"]
        if not cur["metadata"].get("deletionTimestamp"):
            new = dict(cur)
            new["metadata"] = dict(
                cur["metadata"],
                deletionTimestamp=now_rfc3339(),
                deletionGracePeriodSeconds=0,
                resourceVersion=str(self._next_rv()),
            )
            new["status"] = dict(cur.get("status") or {}, phase="Terminating")
            self._store(rt, new, "MODIFIED")
            cur = new
        for (group, plural), bucket in list(self._objs.items()):
            names = bucket.get(name)
            if not names:
                continue
            member_rt = self._any_type(group, plural)
            for member in list(names):
                if self.exists(member_rt, name, member):
                    self.delete(member_rt, name, member, "Background")
        return clone(self._maybe_finish_namespace(name) or cur)

    def _maybe_finish_namespace(self, namespace: str) -> dict | None:
        entry = self._objs[("", "namespaces")].get("", {}).get(namespace)
        if entry is None or not entry.obj["metadata"].get("deletionTimestamp"):
            return None
        if any(bucket.get(namespace) for bucket in self._objs.values()):
            return None
        if entry.obj["metadata"].get("finalizers"):
            return None
        return self._remove(self._types[("", "v1", "namespaces")], "", namespace)

    def _any_type(self, group: str, plural: str) -> ResourceType:
        for rt in self._types.values():
            if rt.group == group and rt.plural == plural:
                return rt
        raise ApiError(404, "NotFound", f"{plural}.{group} is not served")

    def _remove(self, rt: ResourceType, namespace: str, name: str) -> dict:
        """Drop the object now: DELETED event, GC of dependents, namespace finalization."""
        bucket = self._objs[(rt.group, rt.plural)]
        entry = bucket.get(namespace, {}).pop(name, None)
        if entry is None:
            return {}
        self._keys_changed(rt)
        if not bucket.get(namespace):
            bucket.pop(namespace, None)
        obj = dict(entry.obj)
        obj["metadata"] = dict(obj["metadata"], resourceVersion=str(self._next_rv()))
        uid = obj["metadata"]["uid"]
        self._unindex(entry.obj)
        self._index_labels(rt, entry.obj, add=False)
        self._by_uid.pop(uid, None)
        if rt.plural == "pods" and rt.group == "":
            self._pod_logs.pop((namespace, name), None)
        self._emit("DELETED", rt, obj, int(obj["metadata"]["resourceVersion"]))
        hooks = self._hooks(rt)
        if hooks:
            hooks.after_delete(self, rt, obj)
        self._delete_dependents(uid, "Background")
        for ref in obj["metadata"].get("ownerReferences") or ():
            self._finish_foreground(ref.get("uid", ""))
        if namespace:
            self._maybe_finish_namespace(namespace)
        return obj

    def _dependent_entries(self, uid: str) -> list[tuple[ResourceType, dict]]:
        out = []
        for group, plural, ns, name in sorted(self._dependents.get(uid, ())):
            bucket = self._objs.get((group, plural))
            entry = bucket.get(ns, {}).get(name) if bucket is not None else None
            if entry is not None:
                out.append((self._any_type(group, plural), entry.obj))
        return out

    def _delete_dependents(self, uid: str, propagation: str) -> None:
        for dep_rt, dep in self._dependent_entries(uid):
            meta = dep["metadata"]
            refs = meta.get("ownerReferences") or []
            others = [r for r in refs if r.get("uid") != uid]
            if any(r.get("uid") in self._by_uid for r in others):
                new = dict(dep)
                new["metadata"] = dict(meta, ownerReferences=others, resourceVersion=str(self._next_rv()))
                self._store(dep_rt, new, "MODIFIED")
            elif not meta.get("deletionTimestamp"):
                self.delete(dep_rt, meta.get("namespace"), meta["name"], propagation)

    def _orphan_dependents(self, uid: str) -> None:
        for dep_rt, dep in self._dependent_entries(uid):
            meta = dep["metadata"]
            refs = [r for r in meta.get("ownerReferences") or [] if r.get("uid") != uid]
            new = dict(dep)
            new_meta = dict(meta, resourceVersion=str(self._next_rv()))
            if refs:
                new_meta["ownerReferences"] = refs
            else:
                new_meta.pop("ownerReferences", None)
            new["metadata"] = new_meta
            self._store(dep_rt, new, "MODIFIED")

    def _finish_foreground(self, uid: str) -> None:
        key = self._by_uid.get(uid)
        if key is None or self._dependent_entries(uid):
            return
        group, plural, ns, name = key
        rt = self._any_type(group, plural)
        cur = self._objs[(group, plural)].get(ns, {}).get(name)
        if cur is None:
            return
        meta = cur.obj["metadata"]
        if not meta.get("deletionTimestamp") or "foregroundDeletion" not in (meta.get("finalizers") or ()):
            return
        finalizers = [f for f in meta["finalizers"] if f != "foregroundDeletion"]
        new = dict(cur.obj)
        new["metadata"] = dict(meta, finalizers=finalizers, resourceVersion=str(self._next_rv()))
        if not finalizers:
            new["metadata"].pop("finalizers")
        self._store(rt, new, "MODIFIED")
        if not finalizers:
            self._remove(rt, ns, name)

    # ----------------------------------------------------------------- pod logs
    def set_pod_log(self, namespace: str, name: str, text: str) -> None:
        with self._lock:
            self._pod_logs[(namespace, name)] = text

    def pod_log(self, namespace: str, name: str) -> str:
        with self._lock:
            self.get_entry(self._types[("", "v1", "pods")], namespace, name)
            return self._pod_logs.get((namespace, name), "")


def _spec_changed(old: dict, new: dict) -> bool:
    keys = (set(old) | set(new)) - {"metadata", "status", "apiVersion", "kind"}
    return any(old.get(k) != new.get(k) for k in keys)


def _patch_kind(patch_type: str) -> str:
    t = patch_type.split(";")[0].strip().lower()
    kinds = {
        "application/merge-patch+json": "merge",
        "merge": "merge",
        "application/json-patch+json": "json",
        "json": "json",
        "application/strategic-merge-patch+json": "strategic",
        "strategic": "strategic",
        "application/apply-patch+yaml": "apply",
        "application/apply-patch+json": "apply",
        "apply": "apply",
    }
    if t not in kinds:
        raise ApiError(
            415, "UnsupportedMediaType", f"the body of the request was in an unknown format - {patch_type}"
        )
    return kinds[t]


def _patch_error(rt: ResourceType, name: str, exc: Exception) -> ApiError:
    from .patch import ApplyConflict

    if isinstance(exc, ApplyConflict):
        return ApiError(409, "Conflict", str(exc), dict(_details(rt, name), causes=exc.causes()))
    return ApiError(422, "Invalid", f'{rt.kind} "{name}" is invalid: {exc}', _details(rt, name))


def _parse_label(text: str) -> Any:
    from .selectors import parse_label_selector

    return parse_label_selector(text)


def _label_matcher(text: str) -> Callable[[dict], bool] | None:
    if not text:
        return None
    from .selectors import SelectorError

    try:
        return _cached("l", _parse_label, text).matches
    except SelectorError as exc:
        raise bad_request(str(exc)) from exc


def _field_matcher(text: str) -> Callable[[dict], bool] | None:
    if not text:
        return None
    from .selectors import SelectorError, parse_field_selector

    try:
        return _cached_field(parse_field_selector, text).matches
    except SelectorError as exc:
        raise bad_request(str(exc)) from exc


_SELECTOR_CACHE: dict[tuple[str, str], Any] = {}


def _cached_field(parse: Callable[[str], Any], text: str) -> Any:
    return _cached("f", parse, text)


def _cached(kind: str, parse: Callable[[str], Any], text: str) -> Any:
    hit = _SELECTOR_CACHE.get((kind, text))
    if hit is None:
        if len(_SELECTOR_CACHE) > 512:
            _SELECTOR_CACHE.clear()
        hit = _SELECTOR_CACHE[(kind, text)] = parse(text)
    return hit


def _encode_continue(rv: int, start: tuple[str, str]) -> str:
    raw = json.dumps({"rv": rv, "ns": start[0], "name": start[1]}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(data["rv"]), (data["ns"], data["name"])
    except (ValueError, KeyError, TypeError) as exc:
        raise bad_request("continue key is not valid: incorrect encoded start resourceVersion") from exc


__all__ = [
    "ApiError",
    "Event",
    "ResourceType",
    "Store",
    "Subscription",
    "TypeHooks",
    "already_exists",
    "clone",
    "conflict",
    "invalid",
    "not_found",
]
