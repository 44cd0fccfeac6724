"""The lab's listener: kube-apiserver's fault proxy, and the servers a cluster has beside its API server.

kube-apiserver is what the default kubeconfig points at. This loopback HTTPS listener answers what a
cluster's other servers answer, each reached the way the platform reaches it:

- as KubeVirt's virt-api behind the aggregation layer (the APIService ``v1.subresources.kubevirt.io``):
  requests from kube-apiserver's aggregator, authenticated by its front-proxy client certificate, with
  the user in X-Remote-User/X-Remote-Group (as an extension API server takes it);
- as the kubelet of the lab's Node: ``/containerLogs/<ns>/<pod>/<container>``, for kube-apiserver's
  kubelet client certificate only (kube-apiserver did RBAC for ``pods/log`` before it asked);
- as Harvester's API: ``/v1/harvester/...`` (the upload action), bearer tokens authenticated by the
  API server;
- kube-apiserver's token and admission webhooks and the lab's control endpoints (``/lab/...``).

Every other request is an API request from a client given the fault kubeconfig (``Lab.fault_kubeconfig``):
it is forwarded to kube-apiserver unchanged and its answer streamed back (watches included), with the
fault knobs in between (409 on writes, 500/503, latency, connections dropped without an answer, and
writes committed by the API server whose answer is then dropped). The API server's own audit log is the
record of what reached it; requests answered here (an injected fault, a Harvester route) are recorded
here and merged into ``Lab.audit()``.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

from .access import MUTATING_VERBS
from .extensions import route_for
from .faults import Faults
from .objects import ApiError
from .tls import FRONT_PROXY_CA_NAME, FRONT_PROXY_CLIENT, KUBELET_CLIENT, LAB_CA_NAME, peer_names

HOP_HEADERS = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}
)
ROUTE_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def request_verb(method: str, path: str, query: dict) -> tuple[str, dict]:
    """The Kubernetes verb and object reference of an API path (what the audit log names)."""
    parts = [p for p in path.split("/") if p]
    ref = {"namespace": "", "group": "", "resource": "", "subresource": "", "name": ""}
    if parts[:1] == ["api"] and len(parts) >= 2:
        rest = parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        ref["group"] = parts[1]
        rest = parts[3:]
    else:
        return "get", ref
    # Kubernetes' request-info rule: /namespaces/<ns>/<resource>... is namespaced, except a
    # namespace's own status and finalize subresources.
    if rest[:1] == ["namespaces"] and len(rest) >= 2:
        ref["namespace"] = rest[1]
        if len(rest) > 2 and rest[2] not in ("status", "finalize"):
            rest = rest[2:]
    if rest:
        ref["resource"] = rest[0]
    if len(rest) >= 2:
        ref["name"] = rest[1]
    if len(rest) >= 3:
        ref["subresource"] = "/".join(rest[2:])
    if method == "GET":
        verb = "get" if ref["name"] else ("watch" if query.get("watch") in ("1", "true") else "list")
    elif method == "DELETE":
        verb = "delete" if ref["name"] else "deletecollection"
    else:
        verb = ROUTE_VERBS.get(method, method.lower())
    return verb, ref


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Without TCP_NODELAY the last small write of an answer (the chunked terminator) waits for the
    # client's delayed ACK: about 40 ms a request that a real API server does not add.
    disable_nagle_algorithm = True
    server: FrontServer

    def log_message(self, fmt, *args):  # quiet: the audit log is the record
        pass

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

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _reply(self, code: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _status(self, code: int, reason: str, message: str, details: dict | None = None) -> None:
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        }
        if details:
            body["details"] = details
        self._reply(code, json.dumps(body).encode())

    def _drop(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _handle(self, method: str) -> None:
        front = self.server
        split = urlsplit(self.path)
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        raw = self._body()
        parts = [p for p in split.path.split("/") if p]
        try:
            if parts[:1] == ["lab"]:
                self._lab(method, parts, raw)
                return
            caller = peer_names(self.connection.getpeercert())
            if caller == (FRONT_PROXY_CLIENT, FRONT_PROXY_CA_NAME):
                self._aggregated(method, split.path, query, raw)
                return
            if parts[:1] == ["containerLogs"]:
                self._container_logs(method, caller, parts, query)
                return
            route = route_for(front.store, split.path)
            # Routes under /apis/ are an aggregated API's: a client reaches them through kube-apiserver.
            if route is not None and not split.path.startswith("/apis/"):
                self._route(route, method, split.path, query, raw)
                return
            front.count_forwarded()
            verb, ref = request_verb(method, split.path, query)
            if self._inject(method, verb, ref, raw):
                return
            commit_drop = (
                verb in MUTATING_VERBS and "dryRun=" not in self.path and front.faults.should_commit_drop()
            )
            counted = front.forwarding_write() if verb in MUTATING_VERBS else contextlib.nullcontext()
            with counted:
                self._forward(method, raw, verb, ref, commit_drop)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except ApiError as exc:  # a platform route refused (the VMI is missing, not running, ...)
            self._status(exc.code, exc.reason, exc.message, exc.details or None)
        except Exception as exc:  # an answer beats a connection closed without one
            self._status(500, "InternalError", "Internal error occurred: %r" % exc)

    def _aggregated(self, method: str, path: str, query: dict, raw: bytes) -> None:
        """A request kube-apiserver's aggregator proxied (its front-proxy certificate verified): the user
        is the one it names in X-Remote-User and X-Remote-Group, as an extension API server takes it."""
        user = self.headers.get("X-Remote-User")
        route = route_for(self.server.store, path)
        if not user:
            self._status(401, "Unauthorized", "Unauthorized")
            return
        if route is None or not path.startswith("/apis/"):
            self._status(404, "NotFound", "the server could not find the requested resource")
            return
        identity = RemoteIdentity(user, self.headers.get_all("X-Remote-Group") or [], self.server.store)
        code, content_type, answer = route(method, path, query, self.headers, raw, identity)
        self._reply(code, answer, content_type)

    def _container_logs(self, method: str, caller: tuple[str, str], parts: list[str], query: dict) -> None:
        """The kubelet's ``/containerLogs/<ns>/<pod>/<container>``, for kube-apiserver's kubelet client
        certificate (the kubelet's x509 authentication); the log is what the lab's Job runner recorded."""
        if caller != (KUBELET_CLIENT, LAB_CA_NAME):
            self._reply(401, b"Unauthorized\n", "text/plain")
            return
        if method != "GET" or len(parts) != 4:
            self._reply(404, b"404 page not found\n", "text/plain")
            return
        try:
            text = container_log(self.server.store.pod_log(parts[1], parts[2]), parts[3], query)
        except ValueError as exc:
            self._reply(400, str(exc).encode(), "text/plain")
            return
        self._reply(200, text.encode(), "text/plain")

    def _route(self, route, method: str, path: str, query: dict, raw: bytes) -> None:
        """Harvester's API (a server of its own beside the API server; extensions.py): it fails like the
        API under the fault knobs and is audited here (the API server never sees it), resource = its path."""
        self.server.count_forwarded()
        verb = ROUTE_VERBS.get(method, "get")
        ref = {"namespace": "", "group": "", "resource": path, "subresource": "", "name": ""}
        if self._inject(method, verb, ref, raw):
            return
        record = dict(ref, verb=verb, path=self.path, user="", dry_run=False)
        user = self.server.authenticate(self.headers.get("Authorization"))
        if user is None:
            self.server.record(dict(record, code=401))
            self._status(401, "Unauthorized", "Unauthorized")
            return
        record["user"] = user.user
        try:
            code, content_type, answer = route(method, path, query, self.headers, raw, user)
        except ApiError as exc:
            self.server.record(dict(record, code=exc.code))
            raise
        self.server.record(dict(record, code=code))
        self._reply(code, answer, content_type)

    def _inject(self, method: str, verb: str, ref: dict, raw: bytes) -> bool:
        """Answer with an injected fault, or return False to let the request through."""
        faults: Faults = self.server.faults
        if not ref["resource"]:
            return False
        if faults.latency_ms:
            time.sleep(faults.latency_ms / 1000.0)
        record = dict(ref, verb=verb, path=self.path, user="", dry_run="dryRun=" in self.path, injected=True)
        if faults.should_drop():
            self.server.record(dict(record, code=0, dropped=True))
            self._drop()
            return True
        code = faults.error_code()
        if code:
            self.server.record(dict(record, code=code))
            self._status(
                code,
                "InternalError" if code == 500 else "ServiceUnavailable",
                "Internal error occurred: injected fault",
            )
            return True
        if verb in MUTATING_VERBS and faults.should_conflict():
            self.server.record(dict(record, code=409))
            kind = "%s.%s" % (ref["resource"], ref["group"]) if ref["group"] else ref["resource"]
            self._status(
                409,
                "Conflict",
                'Operation cannot be fulfilled on %s "%s": the object has been modified; please '
                "apply your changes to the latest version and try again" % (kind, ref["name"]),
                {"name": ref["name"], "group": ref["group"], "kind": ref["resource"]},
            )
            return True
        return False

    def _forward(self, method: str, raw: bytes, verb: str, ref: dict, commit_drop: bool = False) -> None:
        front = self.server
        headers = {
            k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS and k.lower() != "host"
        }
        headers["Host"] = "127.0.0.1:%d" % front.upstream_port
        conn, reply = front.send_upstream(method, self.path, raw or None, headers)
        kept = False
        try:
            if commit_drop and 200 <= reply.status < 300:
                # The API server committed the write; its answer is lost on the way back.
                answer = reply.read()
                front.faults.count("commit_drop")
                record = dict(ref, verb=verb, path=self.path, user="", dry_run=False, injected=True)
                if not record["name"]:
                    try:
                        record["name"] = json.loads(answer)["metadata"]["name"]
                    except (ValueError, KeyError, TypeError):
                        pass
                # The API server audited this request: Lab.audit() marks its record (by Audit-Id)
                # dropped and committed instead of counting the write twice.
                audit_id = reply.getheader("Audit-Id") or ""
                front.record(dict(record, code=reply.status, dropped=True, committed=True, audit_id=audit_id))
                self._drop()
                return
            # A write's answer is read whole before it is relayed: however the client fares (killed
            # mid-reply), the API server has finished and audited the request once this returns.
            whole = verb in MUTATING_VERBS or reply.getheader("Content-Length") is not None
            body = reply.read() if whole else None
            self.send_response(reply.status, reply.reason)
            for key, value in reply.getheaders():
                if key.lower() not in HOP_HEADERS and key.lower() != "content-length":
                    self.send_header(key, value)
            if body is None:
                self.send_header("Transfer-Encoding", "chunked")
            else:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if body is not None:
                kept = not reply.will_close
                self.wfile.write(body)
                return
            while True:
                chunk = reply.read1(65536)
                if not chunk:
                    break
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            kept = not reply.will_close
        finally:
            front.done_upstream(conn, kept)

    def _lab(self, method: str, parts: list[str], raw: bytes) -> None:
        front = self.server
        if parts[1:2] == ["authenticate"] and method == "POST":
            self._reply(200, json.dumps(front.token_review(json.loads(raw or b"{}"))).encode())
            return
        if parts[1:2] == ["mutate"] and len(parts) == 4 and method == "POST":
            group = "" if parts[2] == "core" else parts[2]
            self._reply(200, json.dumps(front.mutation_review(group, parts[3], json.loads(raw))).encode())
            return
        if parts[1:2] == ["admission"] and len(parts) == 4 and method == "POST":
            group = "" if parts[2] == "core" else parts[2]
            self._reply(200, json.dumps(front.admission_review(group, parts[3], json.loads(raw))).encode())
            return
        identity = front.authenticate(self.headers.get("Authorization"))
        if identity is None or identity.user != "lab-admin":
            self._status(403, "Forbidden", "only the lab's admin may use the lab control endpoints")
            return
        what = parts[1] if len(parts) == 2 else ""
        if what == "faults" and method == "GET":
            self._reply(200, json.dumps(front.faults.to_dict()).encode())
        elif what == "faults" and method in ("PUT", "PATCH", "POST"):
            try:
                front.faults.update(json.loads(raw or b"{}"))
            except ValueError as exc:
                self._status(400, "BadRequest", str(exc))
                return
            self._reply(200, json.dumps(front.faults.to_dict()).encode())
        elif what == "audit" and method == "GET":
            self._reply(200, json.dumps({"items": front.audit_records()}).encode())
        elif what == "audit" and method == "DELETE":
            front.clear_audit()
            self._reply(200, b'{"items": []}')
        else:
            self._status(404, "NotFound", "the server could not find the requested resource")


def container_log(text: str, container: str, query: dict) -> str:
    """What a kubelet answers for a container's log with the query kube-apiserver passes on
    (``tailLines``, ``limitBytes``, ``follow``); ValueError for what the lab does not keep."""
    for unkept in ("timestamps", "sinceSeconds", "sinceTime"):
        if query.get(unkept) not in (None, "", "false"):
            raise ValueError("lab: container logs keep no time: %s is not supported" % unkept)
    if query.get("previous") == "true":
        raise ValueError('previous terminated container "%s" not found' % container)
    if query.get("stream") not in (None, "", "All"):
        raise ValueError("lab: container logs keep one stream: stream=%s is not supported" % query["stream"])
    # follow: the log is whole once the lab recorded it, so it is answered and the stream ends.
    tail = query.get("tailLines")
    if tail:
        lines = text.splitlines(keepends=True)
        text = "".join(lines[-int(tail) :]) if int(tail) > 0 else ""
    limit = query.get("limitBytes")
    if limit:
        text = text.encode()[: int(limit)].decode(errors="ignore")
    return text


class RemoteIdentity:
    """Who called a front route, and what RBAC lets them do (a SubjectAccessReview per question)."""

    def __init__(self, user: str, groups: list[str], store):
        self.user = user
        self.groups = groups
        self._store = store

    @property
    def is_admin(self) -> bool:
        return "system:masters" in self.groups

    def allows(self, verb: str, group: str, resource: str, namespace: str) -> bool:
        if self.is_admin:
            return True
        plural, _, sub = resource.partition("/")
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": self.user,
                "groups": self.groups,
                "resourceAttributes": {
                    "verb": verb,
                    "group": group,
                    "resource": plural,
                    "subresource": sub,
                    "namespace": namespace,
                },
            },
        }
        rt = self._store.resource("authorization.k8s.io", "v1", "subjectaccessreviews")
        return bool((self._store.create(rt, review).get("status") or {}).get("allowed"))


class FrontServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        store,
        faults: Faults,
        upstream_port: int,
        ca_path,
        tls_context: ssl.SSLContext,
        authenticate,
        audit_records,
        clear_audit,
        port: int = 0,
        tokens=None,
    ):
        super().__init__(("127.0.0.1", port), _Handler)
        self.socket = tls_context.wrap_socket(self.socket, server_side=True)
        self.store = store
        self.faults = faults
        self.upstream_port = upstream_port
        self.upstream_tls = ssl.create_default_context(cafile=str(ca_path))
        self.authenticate = authenticate
        self.audit_records = audit_records
        self.clear_audit = clear_audit
        self.tokens = tokens
        self.injected: list[dict] = []
        self.forwarded = 0  # API requests that came through the fault proxy
        self._lock = threading.Lock()
        self._writes = 0  # writes being forwarded now
        self._last_write = 0.0  # monotonic time the last one began or ended
        self._writes_changed = threading.Condition(self._lock)
        self._idle: list[http.client.HTTPSConnection] = []
        self._thread = threading.Thread(target=self.serve_forever, name="lab-front", daemon=True)

    # Connections to kube-apiserver are kept between requests: a TLS handshake per request cost more than
    # the request itself on a loaded machine.
    IDLE_CONNECTIONS = 16
    IDLE_SECONDS = 20  # a connection idle longer is closed rather than risked

    def _connect(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            "127.0.0.1", self.upstream_port, context=self.upstream_tls, timeout=600
        )

    def send_upstream(self, method: str, path: str, body, headers: dict):
        """``(connection, response)`` of one request to kube-apiserver on a kept connection, or a new one
        when the kept one turns out closed by the server (it had not read the request: sent again)."""
        conn = None
        with self._lock:
            while self._idle and conn is None:
                conn, kept_at = self._idle.pop()
                if time.monotonic() - kept_at > self.IDLE_SECONDS:
                    conn.close()
                    conn = None
        if conn is not None:
            try:
                conn.request(method, path, body=body, headers=headers)
                return conn, conn.getresponse()
            except TimeoutError:
                conn.close()
                raise
            except (http.client.HTTPException, OSError):
                # Closed by the server while it sat idle (a reset, an EOF in the TLS layer): the request
                # was not read, so it goes again on a new connection.
                conn.close()
        conn = self._connect()
        try:
            conn.request(method, path, body=body, headers=headers)
            return conn, conn.getresponse()
        except BaseException:
            conn.close()
            raise

    def done_upstream(self, conn: http.client.HTTPSConnection, reusable: bool) -> None:
        """Keep ``conn`` for the next request when its answer was read to the end, else close it."""
        if reusable:
            with self._lock:
                if len(self._idle) < self.IDLE_CONNECTIONS:
                    self._idle.append((conn, time.monotonic()))
                    return
        conn.close()

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def url(self) -> str:
        return "https://127.0.0.1:%d" % self.port

    def token_review(self, review: dict) -> dict:
        """The API server's token webhook: tokens ``Lab.add_token`` handed out, by the user they name."""
        token = (review.get("spec") or {}).get("token", "")
        identity = self.tokens.identify("Bearer " + token) if self.tokens else None
        status = {"authenticated": False}
        if identity is not None and not identity.is_admin:
            status = {
                "authenticated": True,
                "user": {"username": identity.user, "groups": ["system:authenticated"]},
            }
        return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "status": status}

    def mutation_review(self, group: str, plural: str, review: dict) -> dict:
        """A mutating webhook call: the TypeHooks a controller installed for the kind, as a JSON patch."""
        import base64
        import copy

        request = review.get("request") or {}
        response = {"uid": request.get("uid"), "allowed": True}
        hooks = self.store.hooks.get((group, plural))
        operation = request.get("operation")
        if hooks is None or operation not in ("CREATE", "UPDATE"):
            return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        obj = request.get("object") or {}
        new = copy.deepcopy(obj)
        try:
            rt = self.store.resource(group, (request.get("resource") or {}).get("version", ""), plural)
            if operation == "CREATE":
                hooks.prepare_create(self.store, rt, new)
            else:
                hooks.prepare_update(self.store, rt, request.get("oldObject") or {}, new)
        except ApiError as exc:
            response = {
                "uid": request.get("uid"),
                "allowed": False,
                "status": {
                    "code": exc.code,
                    "reason": exc.reason,
                    "message": exc.message,
                    "details": exc.details,
                },
            }
            return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        patch = []
        for key in sorted(set(obj) | set(new)):
            if key not in new:
                patch.append({"op": "remove", "path": "/" + key})
            elif obj.get(key) != new[key]:
                patch.append({"op": "replace" if key in obj else "add", "path": "/" + key, "value": new[key]})
        if patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}

    def admission_review(self, group: str, plural: str, review: dict) -> dict:
        """A validating webhook call: run the admission checks controllers registered for the kind."""
        from .extensions import admit

        request = review.get("request") or {}
        verb = {"CREATE": "create", "UPDATE": "update", "DELETE": "delete"}.get(request.get("operation"), "")
        resource = request.get("resource") or {}
        response = {"uid": request.get("uid"), "allowed": True}
        try:
            rt = self.store.resource(group, resource.get("version", ""), plural)
            body = request.get("object") if verb != "delete" else request.get("options")
            admit(
                self.store,
                verb,
                rt,
                request.get("namespace") or "",
                request.get("name") or "",
                body,
                bool(request.get("dryRun")),
            )
        except ApiError as exc:
            response = {
                "uid": request.get("uid"),
                "allowed": False,
                "status": {"code": exc.code, "reason": exc.reason, "message": exc.message},
            }
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}

    def count_forwarded(self) -> None:
        with self._lock:
            self.forwarded += 1

    @contextlib.contextmanager
    def forwarding_write(self):
        with self._lock:
            self._writes += 1
            self._last_write = time.monotonic()
        try:
            yield
        finally:
            with self._lock:
                self._writes -= 1
                self._last_write = time.monotonic()
                self._writes_changed.notify_all()

    def wait_writes(self, quiet: float = 0.5, timeout: float = 60.0) -> None:
        """Return once no write is being forwarded and none began or ended for `quiet` seconds.

        A killed client's last request can still be in the socket buffers or on its way to the API
        server; what it commits is in the audit log once this returns.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                now = time.monotonic()
                settled = self._writes == 0 and now - self._last_write >= quiet
                if settled:
                    return
                if now >= deadline:
                    raise TimeoutError(
                        "%d write(s) still being forwarded after %.0f s" % (self._writes, timeout)
                    )
                self._writes_changed.wait(min(quiet, deadline - now))

    def record(self, record: dict) -> None:
        record.setdefault("time", time.time())
        with self._lock:
            self.injected.append(record)

    def start(self) -> FrontServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        with self._lock:
            idle, self._idle = self._idle, []
        for conn, _kept_at in idle:
            conn.close()
