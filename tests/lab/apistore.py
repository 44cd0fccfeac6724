"""The controllers' API client: the store interface they are written against, served by kube-apiserver.

Controllers (and tests) call get, list, create, update, patch, delete and subscribe; ``ApiStore`` answers
them as an ordinary API client over HTTPS: discovery for the resource types, REST for reads and writes,
one watch per watched kind for subscriptions. No controller touches etcd; whatever the API server
refuses, it refuses here too, as an ``ApiError`` (objects.py) with the server's Status.
"""

from __future__ import annotations

import json
import logging
import queue
import socket
import threading
import time
import urllib.parse
from typing import Any

import urllib3

from .objects import ApiError, Event, ResourceType, clone

log = logging.getLogger(__name__)

PATCH_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}
WATCH_SECONDS = 300


class _Entry:
    __slots__ = ("obj",)

    def __init__(self, obj: dict):
        self.obj = obj


def _error(reply: urllib3.BaseHTTPResponse) -> ApiError:
    try:
        body = json.loads(reply.data or b"{}")
    except ValueError:
        body = {}
    if isinstance(body, dict) and body.get("kind") == "Status":
        return ApiError(
            reply.status, body.get("reason") or "", body.get("message") or "", body.get("details") or {}
        )
    return ApiError(reply.status, reply.reason or "", (reply.data or b"").decode("utf-8", "replace")[:500])


class ApiStore:
    def __init__(self, url: str, token: str, ca_path: str):
        self.url = url.rstrip("/")
        self._headers = {"Authorization": "Bearer " + token, "Accept": "application/json"}
        self._http = urllib3.PoolManager(
            maxsize=32, cert_reqs="CERT_REQUIRED", ca_certs=str(ca_path), retries=False
        )
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        self._kinds: dict[tuple[str, str], ResourceType] = {}
        self._types_lock = threading.Lock()
        self._discovered = 0.0
        self.type_listeners: list = []
        # TypeHooks controllers install (Harvester's and KubeVirt's webhooks): the API server calls them
        # through the lab's mutating admission webhook (front.py), as it calls a platform's webhooks.
        self.hooks: dict = {}
        self._logs: dict[tuple[str, str], str] = {}
        self._subs: list[ApiSubscription] = []

    # ------------------------------------------------------------------ HTTP
    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        query: dict | None = None,
        timeout: float = 60.0,
        preload: bool = True,
    ):
        url = self.url + path
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v not in (None, "")})
        headers = dict(self._headers)
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = content_type
        try:
            return self._http.request(
                method,
                url,
                body=data,
                headers=headers,
                preload_content=preload,
                timeout=urllib3.Timeout(connect=10, read=timeout),
            )
        except (urllib3.exceptions.TimeoutError, urllib3.exceptions.ProtocolError) as exc:
            # An API server too loaded to answer in time is a 5xx to a controller (retried later, as
            # client-go's workqueue does), not a crash of its loop.
            raise ApiError(
                504, "Timeout", "%s %s: no answer from the API server: %s" % (method, path, exc)
            ) from exc

    def _json(self, method: str, path: str, body: Any = None, **kw) -> dict:
        reply = self.request(method, path, body, **kw)
        if reply.status >= 400:
            raise _error(reply)
        return json.loads(reply.data or b"{}")

    # ------------------------------------------------------------- discovery
    def discover(self) -> None:
        found: dict[tuple[str, str, str], ResourceType] = {}
        paths = [("", "v1", "/api/v1")]
        for group in self._json("GET", "/apis").get("groups") or []:
            for version in group.get("versions") or []:
                paths.append((group["name"], version["version"], "/apis/" + version["groupVersion"]))
        for group, version, path in paths:
            try:
                resources = self._json("GET", path).get("resources") or []
            except ApiError as exc:
                if exc.code != 404:
                    # A loaded server's 503 is no removal: what was known of the version stays known.
                    found.update({k: v for k, v in self._types.items() if k[:2] == (group, version)})
                continue  # a group that went away between the two requests
            subresources: dict[str, list[str]] = {}
            for res in resources:
                base, _, sub = res["name"].partition("/")
                if sub:
                    subresources.setdefault(base, []).append(sub)
            for res in resources:
                if "/" in res["name"]:
                    continue
                rt = ResourceType(
                    group=group,
                    version=version,
                    kind=res["kind"],
                    plural=res["name"],
                    namespaced=res["namespaced"],
                    singular=res.get("singularName", ""),
                    short_names=list(res.get("shortNames") or []),
                    subresources=tuple(sorted(subresources.get(res["name"], []))),
                    verbs=tuple(res.get("verbs") or ()),
                    categories=list(res.get("categories") or []),
                    custom=group not in _BUILTIN_GROUPS,
                )
                found[(group, version, rt.plural)] = rt
        with self._types_lock:
            changed = set(found) != set(self._types)
            self._types = found
            self._kinds = {(rt.api_version, rt.kind): rt for rt in found.values()}
            self._discovered = time.monotonic()
        if changed:
            for listener in list(self.type_listeners):
                listener()

    def types(self) -> list[ResourceType]:
        if not self._types:
            self.discover()
        return list(self._types.values())

    def resource(self, group: str, version: str, plural: str) -> ResourceType:
        rt = self._types.get((group, version, plural))
        if rt is None and time.monotonic() - self._discovered > 0.5:
            self.discover()  # a CRD created since the last look
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
            self.discover()
            rt = self._kinds.get((api_version, kind))
        if rt is None:
            raise ApiError(404, "NotFound", f'no matches for kind "{kind}" in version "{api_version}"')
        return rt

    # ------------------------------------------------------------------ paths
    @staticmethod
    def path(
        rt: ResourceType,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> str:
        base = f"/apis/{rt.group}/{rt.version}" if rt.group else f"/api/{rt.version}"
        if rt.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{rt.plural}"
        if name:
            base += "/" + urllib.parse.quote(name, safe="")
        if subresource:
            base += "/" + subresource
        return base

    @staticmethod
    def _typed(rt: ResourceType, obj: dict) -> dict:
        obj.setdefault("apiVersion", rt.api_version)
        obj.setdefault("kind", rt.kind)
        return obj

    # ------------------------------------------------------------------ reads
    def get(self, rt: ResourceType, namespace: str | None, name: str) -> dict:
        return self._typed(rt, self._json("GET", self.path(rt, namespace, name)))

    def get_entry(self, rt: ResourceType, namespace: str | None, name: str) -> _Entry:
        return _Entry(self.get(rt, namespace, name))

    def exists(self, rt: ResourceType, namespace: str | None, name: str) -> bool:
        try:
            self.get(rt, namespace, name)
        except ApiError as exc:
            if exc.code == 404:
                return False
            raise
        return True

    def list_page(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 0,
        continue_token: str = "",
    ):
        query = {
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
            "limit": limit or None,
            "continue": continue_token,
        }
        body = self._json("GET", self.path(rt, namespace if rt.namespaced else None), query=query)
        meta = body.get("metadata") or {}
        items = [_Entry(self._typed(rt, item)) for item in body.get("items") or []]
        return (
            items,
            meta.get("resourceVersion", ""),
            meta.get("continue", ""),
            meta.get("remainingItemCount"),
        )

    def list(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
    ) -> tuple[list[dict], str]:
        items, rv, _, _ = self.list_page(rt, namespace, label_selector, field_selector)
        return [e.obj for e in items], rv

    @property
    def resource_version(self) -> int:
        """A current resourceVersion (of the Namespace list): moves whenever anything is written."""
        _, rv, _, _ = self.list_page(self.resource("", "v1", "namespaces"), limit=1)
        return int(rv or 0)

    # ----------------------------------------------------------------- writes
    def create(
        self, rt: ResourceType, obj: dict, dry_run: bool = False, keep_managed_fields: bool = False
    ) -> dict:
        obj = self._typed(rt, clone(obj))
        namespace = (obj.get("metadata") or {}).get("namespace") if rt.namespaced else None
        query = {"dryRun": "All" if dry_run else None}
        return self._typed(rt, self._json("POST", self.path(rt, namespace), obj, query=query))

    def update(
        self,
        rt: ResourceType,
        obj: dict,
        subresource: str | None = None,
        dry_run: bool = False,
        keep_managed_fields: bool = False,
    ) -> dict:
        obj = self._typed(rt, clone(obj))
        meta = obj.get("metadata") or {}
        if subresource and subresource not in rt.subresources:
            subresource = None  # the store's contract: status goes to the object when no subresource exists
        path = self.path(rt, meta.get("namespace"), meta["name"], subresource)
        return self._typed(rt, self._json("PUT", path, obj, query={"dryRun": "All" if dry_run else None}))

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
        content_type = PATCH_TYPES.get(patch_type, patch_type)
        query = {
            "dryRun": "All" if dry_run else None,
            "fieldManager": field_manager,
            "force": "true" if force else None,
        }
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        if isinstance(data, str):
            data = data.encode()
        reply = self.request(
            "PATCH", self.path(rt, namespace, name, subresource), data, content_type=content_type, query=query
        )
        if reply.status >= 400:
            raise _error(reply)
        return self._typed(rt, json.loads(reply.data))

    def delete(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        propagation: str | None = "Background",
        dry_run: bool = False,
        preconditions: dict | None = None,
        grace_period: int | None = None,
    ) -> dict:
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if propagation:
            options["propagationPolicy"] = propagation
        if grace_period is not None:
            options["gracePeriodSeconds"] = grace_period
        if dry_run:
            options["dryRun"] = ["All"]
        if preconditions:
            options["preconditions"] = preconditions
        return self._json("DELETE", self.path(rt, namespace, name), options)

    # ------------------------------------------------------------------- logs
    def set_pod_log(self, namespace: str, name: str, text: str) -> None:
        """What a container printed: the lab's kubelet endpoint (front.py) serves it to kube-apiserver."""
        self._logs[(namespace, name)] = text

    def pod_log(self, namespace: str, name: str) -> str:
        return self._logs.get((namespace, name), "")

    # ---------------------------------------------------------------- watches
    def subscribe(self, kinds: set[tuple[str, str]] | None = None) -> ApiSubscription:
        sub = ApiSubscription(self, set(kinds) if kinds is not None else None)
        self._subs.append(sub)
        sub.start()
        return sub

    def close(self) -> None:
        for sub in list(self._subs):
            sub.close()
        self._http.clear()


_BUILTIN_GROUPS = frozenset(
    {
        "",
        "apps",
        "batch",
        "autoscaling",
        "policy",
        "rbac.authorization.k8s.io",
        "storage.k8s.io",
        "apiextensions.k8s.io",
        "apiregistration.k8s.io",
        "admissionregistration.k8s.io",
        "authentication.k8s.io",
        "authorization.k8s.io",
        "certificates.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
        "flowcontrol.apiserver.k8s.io",
        "networking.k8s.io",
        "node.k8s.io",
        "scheduling.k8s.io",
        "resource.k8s.io",
        "internal.apiserver.k8s.io",
        "storagemigration.k8s.io",
    }
)


class ApiSubscription:
    """Watch events of some kinds (all namespaces), one watch per kind, re-listed when it expires."""

    def __init__(self, store: ApiStore, kinds: set[tuple[str, str]] | None):
        self._store = store
        self.kinds = kinds
        # Not SimpleQueue: on CPython 3.11 its get(timeout=) blocks until the next put when the deadline
        # passes between taking its free internal lock and re-checking (a preempted thread on a loaded
        # machine), which stalled a controller until some unrelated event arrived.
        self._queue: queue.Queue = queue.Queue()
        self.closed = False
        self._threads: dict[tuple[str, str], threading.Thread] = {}
        self._replies: list = []
        self._lock = threading.Lock()
        self._supervisor = threading.Thread(target=self._supervise, name="lab-watch-supervisor", daemon=True)

    def start(self) -> None:
        self._supervisor.start()

    def _wanted(self) -> list[ResourceType]:
        # One version per (group, plural): the preferred one discovery lists first is enough for events.
        seen: dict[tuple[str, str], ResourceType] = {}
        for rt in self._store.types():
            key = (rt.group, rt.plural)
            if (self.kinds is None or key in self.kinds) and "watch" in rt.verbs and key not in seen:
                seen[key] = rt
        return list(seen.values())

    def _supervise(self) -> None:
        while not self.closed:
            try:
                for rt in self._wanted():
                    key = (rt.group, rt.plural)
                    thread = self._threads.get(key)
                    if thread is None or not thread.is_alive():
                        thread = threading.Thread(
                            target=self._watch, args=(rt,), daemon=True, name=f"lab-watch-{rt.plural}"
                        )
                        self._threads[key] = thread
                        thread.start()
            except Exception:
                log.debug("watch supervisor: discovery failed", exc_info=True)
            missing = self.kinds is not None and len(self._threads) < len(self.kinds)
            for _ in range(10 if missing else 50):
                if self.closed:
                    return
                time.sleep(0.1)
            if missing:
                try:
                    self._store.discover()
                except Exception:
                    pass

    def _watch(self, rt: ResourceType) -> None:
        rv = ""
        while not self.closed:
            reply = None
            try:
                if not rv:
                    _, rv, _, _ = self._store.list_page(rt)
                reply = self._store.request(
                    "GET",
                    self._store.path(rt),
                    query={
                        "watch": "true",
                        "resourceVersion": rv,
                        "allowWatchBookmarks": "true",
                        "timeoutSeconds": WATCH_SECONDS,
                    },
                    timeout=WATCH_SECONDS + 30,
                    preload=False,
                )
                with self._lock:
                    self._replies.append(reply)
                    if self.closed:  # closed while this request was on its way
                        _hang_up(reply)
                if reply.status >= 400:
                    reply.read()
                    if reply.status == 404:
                        return  # the kind is gone; the supervisor starts a watch if it comes back
                    rv = ""
                    time.sleep(0.5)
                    continue
                buffer = b""
                for chunk in reply.stream(65536, decode_content=True):
                    buffer += chunk
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        if line.strip():
                            rv = self._event(rt, json.loads(line)) or rv
                    if self.closed:
                        break
            except _Expired:
                rv = ""
            except Exception:
                if self.closed:
                    return
                log.debug("watch of %s broke; resuming", rt.plural, exc_info=True)
                time.sleep(0.2)
            finally:
                if reply is not None:
                    with self._lock:
                        self._replies.remove(reply)
                    # Closed, not pooled: a half-read watch handed back would be the next request's reply.
                    reply.close()

    def _event(self, rt: ResourceType, event: dict) -> str | None:
        etype = event.get("type")
        obj = event.get("object") or {}
        if etype == "ERROR":
            if obj.get("code") == 410:
                raise _Expired()
            return None
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if etype == "BOOKMARK":
            return rv
        obj.setdefault("apiVersion", rt.api_version)
        obj.setdefault("kind", rt.kind)
        self._queue.put(Event(etype, rt, obj, int(rv or 0)))
        return rv

    def get_shared(self, timeout: float | None = None) -> Event | None:
        if self.closed:
            return None
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def get(self, timeout: float | None = None) -> Event | None:
        event = self.get_shared(timeout)
        return (
            None if event is None else Event(event.type, event.rt, clone(event.obj), event.resource_version)
        )

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        with self._lock:
            for reply in self._replies:
                _hang_up(reply)
        self._queue.put(None)
        if self in self._store._subs:
            self._store._subs.remove(self)


def _hang_up(reply) -> None:
    """End a watch from another thread: both directions, so its reader wakes and the API server sees
    the client leave (kube-apiserver's graceful shutdown waits for every watch still open)."""
    sock = getattr(reply.connection, "sock", None)
    try:
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class _Expired(Exception):
    pass
