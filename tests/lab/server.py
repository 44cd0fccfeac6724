"""HTTP front of the lab: the Kubernetes REST protocol over the in-memory store.

Routing, authentication and the RBAC table, fault injection, the audit log and watch streaming.
HTTP/1.1 with keep-alive; every answer is written with a single send so small responses are not
delayed by Nagle's algorithm.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

from .access import AuditLog, Identity, Tokens, forbidden_message
from .discovery import Discovery
from .extensions import admit, route_for
from .faults import Faults
from .store import ApiError, ResourceType, Store, bad_request

WATCH_DEFAULT_SECONDS = 1800
BOOKMARK_SECONDS = 5.0
LOG_FOLLOW_POLL = 0.2
_REASONS = {
    200: "OK",
    201: "Created",
    202: "Accepted",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    410: "Gone",
    415: "Unsupported Media Type",
    422: "Unprocessable Entity",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
_NAMESPACE_SUBRESOURCES = {"status", "finalize"}
_ROUTE_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


class _Dropped(Exception):
    """The fault injector closed the connection without an answer."""


_WRITES = ("create", "update", "patch", "delete", "deletecollection")


class _Request:
    """What a request addresses, parsed from its path and query."""

    __slots__ = ("group", "name", "namespace", "plural", "query", "subresource", "verb", "version", "watch")

    def __init__(self):
        self.group = ""
        self.version = ""
        self.plural = ""
        self.namespace = ""
        self.name = ""
        self.subresource = ""
        self.verb = ""
        self.watch = False
        self.query: dict[str, str] = {}

    @property
    def resource(self) -> str:
        return f"{self.plural}/{self.subresource}" if self.subresource else self.plural


def parse_resource_path(parts: list[str]) -> _Request | None:
    req = _Request()
    if len(parts) >= 2 and parts[0] == "api":
        req.version, rest = parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        req.group, req.version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if rest and rest[0] == "watch":
        req.watch, rest = True, rest[1:]
    if (
        len(rest) >= 3
        and rest[0] == "namespaces"
        and not (len(rest) == 3 and rest[2] in _NAMESPACE_SUBRESOURCES)
    ):
        req.namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        return None
    req.plural = rest[0]
    req.name = rest[1] if len(rest) > 1 else ""
    req.subresource = rest[2] if len(rest) > 2 else ""
    return req


def _truthy(value: str | None) -> bool:
    return bool(value) and value.lower() in ("true", "1", "t")


def _dry_run(query: dict[str, str], body: dict | None = None) -> bool:
    if query.get("dryRun") == "All":
        return True
    return bool(body and isinstance(body, dict) and "All" in (body.get("dryRun") or []))


class LabHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address, lab: LabServer):
        self.lab = lab
        super().__init__(address, LabRequestHandler)


class LabRequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "lab-apiserver"
    sys_version = ""
    server: LabHTTPServer

    def log_message(self, format, *args):
        """Quiet: the audit log records requests."""

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.lab._track(self.connection, threading.current_thread(), True)

    def finish(self):
        try:
            super().finish()
        finally:
            self.server.lab._track(self.connection, threading.current_thread(), False)

    def do_GET(self):
        self._handle("GET")

    def do_POST(self):
        self._handle("POST")

    def do_PUT(self):
        self._handle("PUT")

    def do_PATCH(self):
        self._handle("PATCH")

    def do_DELETE(self):
        self._handle("DELETE")

    # ------------------------------------------------------------------ output
    def _send(self, code: int, body: bytes, content_type: str = "application/json", extra: str = "") -> None:
        head = (
            f"HTTP/1.1 {code} {_REASONS.get(code, 'Unknown')}\r\n"
            f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            f"Cache-Control: no-cache, private\r\n{extra}\r\n"
        )
        if self._commit_drop and 200 <= code < 300:
            # The write is committed; the answer is lost (what a client sees when the server or a proxy
            # dies between commit and reply). The audit log records the code and the lost reply.
            self._commit_drop = False
            self.server.lab.faults.count("commit_drop")
            if self._record is not None:
                self._record.update(dropped=True, committed=True)
            self._audit(code)
            raise _Dropped()
        self._audit(code)
        self.wfile.write(head.encode() + body)

    def _audit(self, code: int) -> None:
        """Record the request before answering, so a client that got its answer sees it audited."""
        record, self._record = self._record, None
        if record is not None:
            record["code"] = code
            self.server.lab.audit.append(record)

    def _send_json(self, code: int, obj) -> None:
        self._send(code, json.dumps(obj, separators=(",", ":")).encode())

    def _send_error(self, err: ApiError) -> None:
        extra = "Retry-After: 1\r\n" if err.code in (429, 503) else ""
        if err.code == 401:
            extra += 'WWW-Authenticate: Bearer realm="lab"\r\n'
        self._send(err.code, json.dumps(err.status(), separators=(",", ":")).encode(), extra=extra)

    def _start_chunked(self, content_type: str) -> None:
        head = (
            f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nTransfer-Encoding: chunked\r\n"
            "Cache-Control: no-cache, private\r\n\r\n"
        )
        self._audit(200)
        self.wfile.write(head.encode())

    def _chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _end_chunked(self) -> None:
        self.wfile.write(b"0\r\n\r\n")

    # ------------------------------------------------------------------- input
    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _json_body(self, raw: bytes):
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise bad_request(f"error decoding request body: {exc}") from exc

    # ---------------------------------------------------------------- dispatch
    def _handle(self, method: str) -> None:
        lab = self.server.lab
        split = urlsplit(self.path)
        path = split.path
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        record = {
            "verb": "get",
            "path": self.path,
            "user": "",
            "dry_run": False,
            "code": 0,
            "namespace": "",
            "group": "",
            "resource": "",
            "subresource": "",
            "name": "",
        }
        self._record = record
        self._commit_drop = False
        raw = b""
        try:
            raw = self._read_body()
            identity = lab.tokens.identify(self.headers.get("Authorization"))
            if identity is None:
                raise ApiError(401, "Unauthorized", "Unauthorized")
            record["user"] = identity.user
            parts = [p for p in path.split("/") if p]
            if parts and parts[0] == "lab":
                self._record = None  # the lab's own control endpoints are not API traffic
                self._lab_endpoint(method, parts, raw, identity)
                return
            route = route_for(lab.store, path)
            if route is not None:  # a platform endpoint a controller added (extensions.py)
                record.update(verb=_ROUTE_VERBS.get(method, "get"), resource=path)
                endpoint = _Request()
                endpoint.verb, endpoint.plural = record["verb"], path
                self._inject_faults(endpoint)  # platform endpoints fail like the rest of the API
                code, content_type, answer = route(method, path, query, self.headers, raw, identity)
                self._send(code, answer, content_type)
                return
            if parts and parts[0] in ("healthz", "livez", "readyz"):
                record["verb"] = "get"
                self._send(200, b"ok", "text/plain")
                return
            doc = lab.discovery.document(path) if method == "GET" else None
            if doc is not None:
                record["verb"] = "get"
                self._send(200, doc)
                return
            req = parse_resource_path(parts)
            if req is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            req.query = query
            req.verb = self._verb(method, req)
            record.update(
                verb=req.verb,
                namespace=req.namespace,
                group=req.group,
                resource=req.plural,
                subresource=req.subresource,
                name=req.name,
            )
            self._inject_faults(req)
            if not identity.allows(req.verb, req.group, req.resource, req.namespace):
                raise ApiError(
                    403,
                    "Forbidden",
                    forbidden_message(
                        identity.user, req.verb, req.group, req.resource, req.namespace, req.name
                    ),
                    {"name": req.name, "group": req.group, "kind": req.plural},
                )
            body = None
            if req.verb in ("create", "update", "delete", "deletecollection"):
                body = self._json_body(raw)
            record["dry_run"] = _dry_run(query, body)
            if req.verb in ("create", "update", "patch", "delete"):
                admit(
                    lab.store,
                    req.verb,
                    lab.store.resource(req.group, req.version, req.plural),
                    req.namespace,
                    req.name,
                    body,
                    record["dry_run"],
                )
            self._resource(req, body, raw)
        except _Dropped:
            self.close_connection = True
            if self._record is not None:
                self._record["dropped"] = True
            self._audit(0)
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        except ApiError as err:
            self._send_error(err)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # an answer beats a hung client
            lab.errors.append(repr(exc))
            self._send_error(ApiError(500, "InternalError", f"Internal error occurred: {exc!r}"))
        finally:
            self._audit(0)  # no answer was written (the client went away)

    def _verb(self, method: str, req: _Request) -> str:
        if method == "GET":
            if req.name:
                return "get"
            return "watch" if req.watch or _truthy(req.query.get("watch")) else "list"
        if req.watch:
            raise ApiError(
                405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
            )
        verbs = {"POST": "create", "PUT": "update", "PATCH": "patch"}
        if method == "DELETE":
            return "delete" if req.name else "deletecollection"
        if method == "POST" and req.name:
            raise ApiError(
                405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
            )
        if method in ("PUT", "PATCH") and not req.name:
            raise ApiError(
                405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
            )
        return verbs[method]

    def _inject_faults(self, req: _Request) -> None:
        faults = self.server.lab.faults
        if faults.latency_ms:
            time.sleep(faults.latency_ms / 1000.0)
        if faults.should_drop():
            raise _Dropped()
        code = faults.error_code()
        if code == 500:
            raise ApiError(500, "InternalError", "Internal error occurred: injected fault")
        if code == 503:
            raise ApiError(503, "ServiceUnavailable", "the server is currently unable to handle the request")
        if req.verb in _WRITES and faults.should_conflict():
            rt_name = f"{req.plural}.{req.group}" if req.group else req.plural
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {rt_name} "{req.name}": the object has been modified; '
                "please apply your changes to the latest version and try again",
                {"name": req.name, "group": req.group, "kind": req.plural},
            )
        if req.verb in _WRITES and not _dry_run(req.query) and faults.should_commit_drop():
            self._commit_drop = True

    # ----------------------------------------------------------- lab endpoints
    def _lab_endpoint(self, method: str, parts: list[str], raw: bytes, identity: Identity) -> None:
        lab = self.server.lab
        if not identity.is_admin:
            raise ApiError(403, "Forbidden", f'User "{identity.user}" cannot use the lab control endpoints')
        what = parts[1] if len(parts) == 2 else ""
        if what == "faults" and method == "GET":
            self._send_json(200, lab.faults.to_dict())
        elif what == "faults" and method in ("PUT", "PATCH", "POST"):
            try:
                lab.faults.update(self._json_body(raw) or {})
            except ValueError as exc:
                raise bad_request(str(exc)) from exc
            self._send_json(200, lab.faults.to_dict())
        elif what == "audit" and method == "GET":
            self._send_json(200, {"items": lab.audit.records()})
        elif what == "audit" and method == "DELETE":
            lab.audit.clear()
            self._send_json(200, {"items": []})
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")

    # -------------------------------------------------------------- resources
    def _resource(self, req: _Request, body, raw: bytes) -> None:
        store = self.server.lab.store
        rt = store.resource(req.group, req.version, req.plural)
        if req.namespace and not rt.namespaced:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if req.verb not in rt.verbs:
            raise ApiError(405, "MethodNotAllowed", f"{req.verb} is not supported on {req.plural}")
        sub = req.subresource
        if sub and sub not in rt.subresources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if sub == "log":
            if req.verb != "get":
                raise ApiError(405, "MethodNotAllowed", "only get is supported on pods/log")
            self._pod_log(req)
            return
        handler = getattr(self, "_" + req.verb)
        handler(store, rt, req, body, raw)

    def _get(self, store: Store, rt: ResourceType, req: _Request, body, raw) -> None:
        entry = store.get_entry(rt, req.namespace, req.name)
        if entry.obj.get("apiVersion") == rt.api_version:
            self._send(200, entry.raw())
        else:
            self._send_json(200, dict(entry.obj, apiVersion=rt.api_version))

    def _list(self, store: Store, rt: ResourceType, req: _Request, body, raw) -> None:
        q = req.query
        try:
            limit = int(q.get("limit") or 0)
        except ValueError as exc:
            raise bad_request("limit must be an integer") from exc
        entries, rv, token, remaining = store.list_page(
            rt,
            req.namespace,
            q.get("labelSelector", ""),
            q.get("fieldSelector", ""),
            limit,
            q.get("continue", ""),
        )
        meta = {"resourceVersion": rv}
        if token:
            meta["continue"] = token
            if remaining is not None:
                meta["remainingItemCount"] = remaining
        items = []
        for entry in entries:
            if entry.obj.get("apiVersion") == rt.api_version:
                items.append(entry.raw())
            else:
                items.append(
                    json.dumps(dict(entry.obj, apiVersion=rt.api_version), separators=(",", ":")).encode()
                )
        head = json.dumps({"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta})[:-1]
        self._send(200, head.encode() + b',"items":[' + b",".join(items) + b"]}")

    def _create(self, store: Store, rt: ResourceType, req: _Request, body, raw) -> None:
        if req.subresource:
            raise ApiError(405, "MethodNotAllowed", "create is not supported on subresources")
        if not isinstance(body, dict):
            raise bad_request("the request body must be an object")
        meta = body.setdefault("metadata", {}) or {}
        body["metadata"] = meta
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != req.namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = req.namespace
        self._check_kind(rt, body)
        obj = store.create(rt, body, dry_run=_dry_run(req.query, body))
        self._send_json(201, obj)

    def _update(self, store: Store, rt: ResourceType, req: _Request, body, raw) -> None:
        if not isinstance(body, dict):
            raise bad_request("the request body must be an object")
        meta = body.setdefault("metadata", {}) or {}
        body["metadata"] = meta
        if meta.get("name") != req.name:
            raise bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({req.name})"
            )
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != req.namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = req.namespace
        self._check_kind(rt, body)
        obj = store.update(rt, body, req.subresource or None, dry_run=_dry_run(req.query))
        self._send_json(200, obj)

    def _patch(self, store: Store, rt: ResourceType, req: _Request, body, raw) -> None:
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if content_type.startswith("application/apply-patch"):
            from .patch import PatchError, decode_apply_body

            try:
                patch_body = decode_apply_body(raw)
            except PatchError as exc:
                raise bad_request(str(exc)) from exc
            if not req.query.get("fieldManager"):
                raise bad_request("PATCH, application/apply-patch+yaml requires fieldManager to be set")
        else:
            patch_body = self._json_body(raw)
            if patch_body is None:
                raise bad_request("the patch body is empty")
        exists = store.exists(rt, req.namespace, req.name)
        obj = store.patch(
            rt,
            req.namespace,
            req.name,
            content_type,
            patch_body,
            req.subresource or None,
            dry_run=_dry_run(req.query),
            field_manager=req.query.get("fieldManager"),
            force=_truthy(req.query.get("force")),
        )
        self._send_json(200 if exists else 201, obj)

    def _delete_options(self, req: _Request, body) -> tuple[str | None, dict | None, bool]:
        options = body if isinstance(body, dict) else {}
        policy = req.query.get("propagationPolicy") or options.get("propagationPolicy")
        if policy is None and "orphanDependents" in options:
            policy = "Orphan" if options["orphanDependents"] else "Background"
        if policy is None and "orphanDependents" in req.query:
            policy = "Orphan" if _truthy(req.query["orphanDependents"]) else "Background"
        return policy, options.get("preconditions"), _dry_run(req.query, options)

    def _delete(self, store: Store, rt: ResourceType, req: _Request, body, raw) -> None:
        policy, preconditions, dry_run = self._delete_options(req, body)
        obj = store.delete(rt, req.namespace, req.name, policy, dry_run=dry_run, preconditions=preconditions)
        still_there = store.exists(rt, req.namespace, req.name)
        if still_there or rt.custom or rt.plural in ("namespaces", "pods", "persistentvolumeclaims", "jobs"):
            self._send_json(202 if still_there and not dry_run else 200, obj)  # 202: deletion pending
            return
        details = {"name": req.name, "kind": rt.plural, "uid": obj.get("metadata", {}).get("uid", "")}
        if rt.group:
            details["group"] = rt.group
        self._send_json(
            200,
            {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details},
        )

    def _deletecollection(self, store: Store, rt: ResourceType, req: _Request, body, raw) -> None:
        policy, _, dry_run = self._delete_options(req, body)
        q = req.query
        entries, rv, _, _ = store.list_page(
            rt, req.namespace, q.get("labelSelector", ""), q.get("fieldSelector", "")
        )
        deleted = []
        for entry in entries:
            meta = entry.obj["metadata"]
            try:
                deleted.append(store.delete(rt, meta.get("namespace"), meta["name"], policy, dry_run=dry_run))
            except ApiError as err:
                if err.code != 404:
                    raise
        self._send_json(
            200,
            {
                "kind": rt.list_kind,
                "apiVersion": rt.api_version,
                "metadata": {"resourceVersion": rv},
                "items": deleted,
            },
        )

    @staticmethod
    def _check_kind(rt: ResourceType, body: dict) -> None:
        kind = body.get("kind")
        if kind and kind != rt.kind:
            raise bad_request(
                f"the kind of the object ({kind}) does not match the kind of the URL ({rt.kind})"
            )

    # ------------------------------------------------------------------ logs
    def _pod_log(self, req: _Request) -> None:
        store = self.server.lab.store
        text = store.pod_log(req.namespace, req.name)
        tail = req.query.get("tailLines")
        if not _truthy(req.query.get("follow")):
            self._send(200, _tail(text, tail).encode(), "text/plain")
            return
        self._start_chunked("text/plain")
        sent = _tail(text, tail)
        self._chunk(sent.encode())
        offset = len(text)
        pods = store.resource("", "v1", "pods")
        while not self.server.lab.stopping.is_set():
            try:
                pod = store.get_entry(pods, req.namespace, req.name).obj
                text = store.pod_log(req.namespace, req.name)
            except ApiError:
                break
            if len(text) > offset:
                self._chunk(text[offset:].encode())
                offset = len(text)
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                break
            time.sleep(LOG_FOLLOW_POLL)
        self._end_chunked()

    # ----------------------------------------------------------------- watch
    def _watch(self, store: Store, rt: ResourceType, req: _Request, body, raw) -> None:
        q = req.query
        from .store import _field_matcher, _label_matcher

        label_match = _label_matcher(q.get("labelSelector", ""))
        field_match = _field_matcher(q.get("fieldSelector", ""))
        try:
            timeout = float(q.get("timeoutSeconds") or WATCH_DEFAULT_SECONDS)
        except ValueError as exc:
            raise bad_request("timeoutSeconds must be a number") from exc
        bookmarks = _truthy(q.get("allowWatchBookmarks"))
        rv_text = q.get("resourceVersion", "")
        try:
            since = None if rv_text in ("", "0") else int(rv_text)
        except ValueError as exc:
            raise bad_request(f"invalid resource version: {rv_text}") from exc
        namespace = req.namespace if rt.namespaced else ""
        try:
            backlog, sub = store.watch(rt, since)
        except ApiError as err:
            self._start_chunked("application/json")
            self._chunk(json.dumps({"type": "ERROR", "object": err.status()}).encode() + b"\n")
            self._end_chunked()
            return

        def wanted(obj: dict) -> bool:
            meta = obj.get("metadata", {})
            if namespace and meta.get("namespace") != namespace:
                return False
            if label_match is not None and not label_match(meta.get("labels") or {}):
                return False
            return field_match is None or field_match(obj)

        def line(etype: str, obj: dict) -> bytes:
            if obj.get("apiVersion") != rt.api_version:
                obj = dict(obj, apiVersion=rt.api_version)
            return b'{"type":"%s","object":%s}\n' % (
                etype.encode(),
                json.dumps(obj, separators=(",", ":")).encode(),
            )

        lab = self.server.lab
        deadline = time.monotonic() + timeout
        last_rv = since or store.resource_version
        last_bookmark = time.monotonic()
        try:
            self._start_chunked("application/json")
            self._chunk(b"".join(line(e.type, e.obj) for e in backlog if wanted(e.obj)))
            for e in backlog:
                last_rv = max(last_rv, e.resource_version)
            while not lab.stopping.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                event = sub.get_shared(timeout=min(left, 0.5))
                if event is not None:
                    last_rv = event.resource_version
                    if wanted(event.obj):
                        self._chunk(line(event.type, event.obj))
                if bookmarks and time.monotonic() - last_bookmark >= BOOKMARK_SECONDS:
                    mark = {
                        "kind": rt.kind,
                        "apiVersion": rt.api_version,
                        "metadata": {"resourceVersion": str(last_rv)},
                    }
                    self._chunk(line("BOOKMARK", mark))
                    last_bookmark = time.monotonic()
            self._end_chunked()
        finally:
            sub.close()


def _tail(text: str, tail: str | None) -> str:
    if not tail:
        return text
    lines = text.splitlines(keepends=True)
    return "".join(lines[-int(tail) :]) if int(tail) > 0 else ""


class LabServer:
    """The API server: store + tokens + audit + faults behind an HTTP(S) listener."""

    def __init__(
        self,
        store: Store,
        faults: Faults | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        tokens: Tokens | None = None,
        ssl_context=None,
    ):
        self.store = store
        self.faults = faults or Faults()
        self.tokens = tokens or Tokens()
        self.audit = AuditLog()
        self.errors: list[str] = []
        self.stopping = threading.Event()
        self._conn_lock = threading.Lock()
        self._conns: dict[socket.socket, threading.Thread] = {}
        self.httpd = LabHTTPServer((host, port), self)
        if ssl_context is not None:
            # The handshake happens on first read, in the connection's thread, not in the accept loop.
            self.httpd.socket = ssl_context.wrap_socket(
                self.httpd.socket, server_side=True, do_handshake_on_connect=False
            )
        self.host, self.port = self.httpd.server_address[:2]
        self.scheme = "https" if ssl_context is not None else "http"
        self.discovery = Discovery(store, f"{self.host}:{self.port}")
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def _track(self, conn: socket.socket, thread: threading.Thread, alive: bool) -> None:
        with self._conn_lock:
            if alive:
                self._conns[conn] = thread
            else:
                self._conns.pop(conn, None)

    def start(self) -> LabServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="lab-apiserver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        with self._conn_lock:
            conns = dict(self._conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in conns.values():
            thread.join(timeout=5)
        if self._thread is not None:
            self._thread.join(timeout=5)


__all__ = ["LabServer", "parse_resource_path"]
