"""The Kubernetes adapter's retry layer, through the real client, against a scripted loopback API.

The server below serves discovery and ConfigMaps in one namespace, and takes a script of faults for the
next requests: ``conflict`` (409 before the write), ``commit-drop`` (write, then close without an
answer), ``drop`` (close without doing anything), ``503`` and ``429``. Nothing is mocked: the
``kubernetes`` client and kubernetes.core's client factory do the talking.
"""

import hashlib
import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import _retry, errors
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common._wait import WaitTimeout
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import _kube

NS = "ns"
BLOB_BYTES = 4 * 1024 * 1024
BASE = "/api/v1/namespaces/%s/configmaps" % NS


def status(code, reason, message):
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


RESOURCE_LIST = {
    "kind": "APIResourceList",
    "groupVersion": "v1",
    "resources": [
        {
            "name": "configmaps",
            "singularName": "configmap",
            "namespaced": True,
            "kind": "ConfigMap",
            "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
        }
    ],
}


class Api:
    def __init__(self):
        self.lock = threading.Lock()
        self.objects = {}
        self.version = 0
        self.script = []  # (verb, fault) for the next matching requests
        self.log = []  # (verb, name, outcome)

    def fault_for(self, verb):
        with self.lock:
            for index, (when, fault) in enumerate(self.script):
                if when in (verb, "*"):
                    del self.script[index]
                    return fault
        return None

    def bump(self, obj):
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        return obj


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    api = None

    def log_message(self, *args):
        pass

    def _send(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if code in (429, 503):
            self.send_header("Retry-After", "0")
        self.end_headers()
        self.wfile.write(data)

    def _drop(self):
        self.close_connection = True
        self.connection.shutdown(2)

    def _body(self):
        if self.path.startswith("/upload"):
            return None
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length)) if length else None

    def _upload(self):
        """Read the body in pieces and say what arrived: length, content type, sha256, the token."""
        length = int(self.headers.get("Content-Length") or 0)
        digest, received = hashlib.sha256(), 0
        while received < length:
            piece = self.rfile.read(min(65536, length - received))
            if not piece:
                break
            digest.update(piece)
            received += len(piece)
        self.api.log.append(("upload", self.path, received))
        self._send(
            200,
            {
                "bytes": received,
                "sha256": digest.hexdigest(),
                "content_type": self.headers.get("Content-Type"),
                "authorization": self.headers.get("Authorization"),
                "chunked": self.headers.get("Transfer-Encoding"),
            },
        )

    def _blob(self):
        fault = self.api.fault_for("blob")
        if fault == "500":
            return self._send(500, status(500, "InternalError", "injected"))
        if fault == "403":
            return self._send(403, status(403, "Forbidden", "may not read the blob"))
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(BLOB_BYTES))
        self.end_headers()
        block = b"\x89" * 65536
        for _block in range(BLOB_BYTES // len(block)):
            self.wfile.write(block)

    def _handle(self, method):
        api = self.api
        path = self.path.split("?")[0]
        body = self._body()
        if path == "/version":
            return self._send(200, {"major": "1", "minor": "31", "gitVersion": "v1.31.0"})
        if path == "/api":
            return self._send(200, {"kind": "APIVersions", "versions": ["v1"]})
        if path == "/apis":
            return self._send(200, {"kind": "APIGroupList", "groups": []})
        if path == "/api/v1":
            return self._send(200, RESOURCE_LIST)
        if path == "/upload":
            return self._upload()
        if path == "/blob":
            return self._blob()
        name = path[len(BASE) + 1 :] if path.startswith(BASE + "/") else ""
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method)
        verb = verb or ("get" if name else "list")
        fault = api.fault_for(verb)
        api.log.append((verb, name or (body or {}).get("metadata", {}).get("name"), fault or "ok"))
        if fault == "drop":
            return self._drop()
        if fault == "403":
            return self._send(403, status(403, "Forbidden", "may not read configmaps"))
        if fault in ("500", "503", "429"):
            reason = {"500": "InternalError", "503": "ServiceUnavailable", "429": "TooManyRequests"}[fault]
            return self._send(int(fault), status(int(fault), reason, "injected"))
        if fault == "expired":
            return self._send(410, status(410, "Expired", "the continue token is too old"))
        if fault == "conflict":
            return self._send(
                409, status(409, "Conflict", 'configmaps "%s": the object has been modified' % name)
            )
        code, answer = self._apply(verb, name, body)
        if verb == "list":
            answer = self._page(answer)
        if fault == "commit-drop" and code < 300:
            return self._drop()
        return self._send(code, answer)

    def _page(self, answer):
        """The page of a list that ``limit`` and ``continue`` ask for (the token is the next offset)."""
        query = parse_qs(urlsplit(self.path).query)
        if "limit" not in query:
            return answer
        start, limit = int(query.get("continue", ["0"])[0]), int(query["limit"][0])
        items = answer["items"]
        answer = dict(answer, items=items[start : start + limit])
        if start + limit < len(items):
            answer["metadata"] = {"continue": str(start + limit)}
        return answer

    def _apply(self, verb, name, body):
        api = self.api
        with api.lock:
            if verb == "list":
                return 200, {
                    "kind": "ConfigMapList",
                    "apiVersion": "v1",
                    "metadata": {},
                    "items": list(api.objects.values()),
                }
            if verb == "create":
                name = body["metadata"]["name"]
                if name in api.objects:
                    return 409, status(409, "AlreadyExists", 'configmaps "%s" already exists' % name)
                body["metadata"]["namespace"] = NS
                body["metadata"]["uid"] = "uid-" + name
                api.objects[name] = api.bump(body)
                return 201, body
            current = api.objects.get(name)
            if current is None:
                return 404, status(404, "NotFound", 'configmaps "%s" not found' % name)
            if verb == "get":
                return 200, current
            if verb == "delete":
                del api.objects[name]
                return 200, status(200, "", "")
            if verb == "update":
                if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                    return 409, status(
                        409, "Conflict", 'configmaps "%s": the object has been modified' % name
                    )
                api.objects[name] = api.bump(body)
                return 200, body
            if verb == "patch":
                guard = (body.get("metadata") or {}).get("resourceVersion")
                if guard and guard != current["metadata"]["resourceVersion"]:
                    return 409, status(
                        409, "Conflict", 'configmaps "%s": the object has been modified' % name
                    )
                api.objects[name] = api.bump(_kube.merge_patch(current, body))
                return 200, api.objects[name]
        return 405, status(405, "MethodNotAllowed", verb)

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


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    handler = type("ScriptedHandler", (Handler,), {"api": None})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    httpd.handle_error = lambda request, address: None  # a client that stops reading is a test case
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    kubeconfig = tmp_path_factory.mktemp("kube") / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "c", "cluster": {"server": "http://127.0.0.1:%d" % httpd.server_address[1]}}
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    try:
        yield handler, str(kubeconfig)
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def api(server):
    handler, kubeconfig = server
    handler.api = Api()
    handler.api.kubeconfig = kubeconfig
    return handler.api


@pytest.fixture
def module(api):
    with patch_module_args({"kubeconfig": api.kubeconfig}):
        m = _kube.KubeModule(argument_spec={}, supports_check_mode=True)
        m.backoff = _retry.kubernetes(base=0.001, cap=0.01)
        m.resource("v1", "ConfigMap")
        yield m


def cm(name, data, labels=None):
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS, "labels": labels or {"app": "x"}},
        "data": data,
    }


def writes(api, verb):
    return [entry for entry in api.log if entry[0] == verb]


# --- lists page by page ----------------------------------------------------------------------


def test_an_expired_continue_token_restarts_the_list_from_its_first_page(api, module):
    for index in range(3):
        module.create(cm("c%d" % index, {"k": "v"}))
    api.script = [("list", "ok"), ("list", "expired")]
    items = module.list("v1", "ConfigMap", NS, page=1)
    assert [i["metadata"]["name"] for i in items] == ["c0", "c1", "c2"]
    assert [entry[2] for entry in writes(api, "list")] == ["ok", "expired", "ok", "ok", "ok"]


def test_a_list_restarts_a_bounded_number_of_times(api, module):
    for index in range(2):
        module.create(cm("c%d" % index, {"k": "v"}))
    api.script = [("list", "ok"), ("list", "expired")] * (_kube.LIST_RESTARTS + 1)
    with pytest.raises(_kube.KubeError) as err:
        module.list("v1", "ConfigMap", NS, page=1)
    assert err.value.status == 410
    assert len(writes(api, "list")) == 2 * (_kube.LIST_RESTARTS + 1)
    assert module.retried == 0  # a restart is the list's own rule, not a retry of the request


# --- what a create recognises as its own ------------------------------------------------------


def test_differences_accept_what_the_server_adds():
    sent = {"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"l": [{"a": 1}], "s": "v"}}
    read = {
        "metadata": {"name": "a", "labels": {"x": "1"}, "uid": "u"},
        "spec": {"l": [{"a": 1, "d": 2}], "s": "v"},
    }
    assert _kube.differences(sent, read) == []
    other = {"metadata": {"name": "a", "labels": {"x": "2"}}, "spec": {"l": [], "s": "v"}}
    assert _kube.differences(sent, other) == ["metadata.labels.x", "spec.l"]


# --- reads -------------------------------------------------------------------------------------


def test_reads_ride_out_5xx_429_and_drops(api, module):
    api.objects["a"] = api.bump(cm("a", {"k": "v"}))
    # The client's own urllib3 retries take a few (a 503 or 429 with Retry-After, a drop on a GET); a
    # 500 is not retried there, so these reach the adapter's layer.
    api.script = [("get", "500"), ("get", "503"), ("get", "429"), ("get", "drop"), ("get", "500")]
    api.script += [("list", "500"), ("list", "500")]
    assert module.get("v1", "ConfigMap", "a", NS)["data"] == {"k": "v"}
    assert [i["metadata"]["name"] for i in module.list("v1", "ConfigMap", NS)] == ["a"]
    assert api.script == []
    assert module.retried >= 4


def test_a_read_gives_up_at_the_bound_and_says_so(api, module):
    module.backoff = _retry.kubernetes(attempts=3, base=0.001, cap=0.01)
    api.script = [("get", "500")] * 3
    with pytest.raises(_kube.KubeError) as err:
        module.get("v1", "ConfigMap", "a", NS)
    assert err.value.msg == (
        "get ConfigMap ns/a (after 3 attempts; retried on: InternalError, InternalError): injected "
        "(InternalError, 500)"
    )
    assert err.value.fields["status"] == 500 and err.value.fields["attempts"] == 3


# --- the raw read path: its answers are PipelineErrors that the retry layer still reads first -----------


@pytest.fixture
def raw_module(api):
    """A module whose reads go over the raw connection (no kubernetes client is built)."""
    with patch_module_args({"kubeconfig": api.kubeconfig}):
        m = _kube.KubeModule(argument_spec={}, supports_check_mode=True)
        m.backoff = _retry.kubernetes(base=0.001, cap=0.01)
        yield m
    assert m._kube_client is None


def test_the_raw_paths_errors_derive_from_the_one_base_and_are_still_retried(api, raw_module):
    assert issubclass(_kube.ApiError, errors.PipelineError)
    assert issubclass(_kube.ResourceNotFoundError, errors.PipelineError)
    api.objects["a"] = api.bump(cm("a", {"k": "v"}))
    api.script = [("get", "500"), ("get", "503"), ("get", "429")]
    assert raw_module.get("v1", "ConfigMap", "a", NS)["data"] == {"k": "v"}
    assert api.script == [] and raw_module.retried == 3
    assert raw_module.get("v1", "ConfigMap", "gone", NS) is None  # a 404 is "absent", not an error


def test_an_unserved_kind_on_the_raw_path_is_not_served_rather_than_an_error(api, raw_module):
    assert raw_module.served("v1", "Nothing") is False
    assert raw_module.served("v1", "ConfigMap") is True
    with pytest.raises(_kube.KubeError, match="find Nothing in v1: the API server does not serve this kind"):
        raw_module.get("v1", "Nothing", "a", NS)


def test_a_wait_whose_read_is_refused_fails_naming_the_object(api, raw_module):
    api.script = [("get", "503"), ("get", "403")]
    with pytest.raises(_kube.KubeError) as err:
        raw_module.wait("v1", "ConfigMap", "a", NS, lambda obj: (obj is not None, None), str, "a", 5, 0.01)
    assert err.value.msg == "get ConfigMap ns/a: may not read configmaps (Forbidden, 403)"
    assert isinstance(err.value.cause, _kube.ApiError)


# --- create ------------------------------------------------------------------------------------


def test_a_create_whose_reply_was_lost_is_recognised_as_ours(api, module):
    api.script = [("create", "commit-drop")]
    made = module.create(cm("a", {"k": "v"}))
    assert made["metadata"]["uid"] == "uid-a"
    assert [e[2] for e in writes(api, "create")] == ["commit-drop", "ok"]  # the retry met AlreadyExists
    assert list(api.objects) == ["a"]


def test_a_conflict_before_the_write_sends_the_create_again(api, module):
    api.script = [("create", "conflict"), ("create", "500"), ("create", "drop")]
    made = module.create(cm("a", {"k": "v"}))
    assert made["data"] == {"k": "v"}
    assert [e[2] for e in writes(api, "create")] == ["conflict", "500", "drop", "ok"]


def test_a_create_that_meets_someone_elses_object_fails_naming_the_difference(api, module):
    api.objects["a"] = api.bump(cm("a", {"k": "other"}, {"app": "y"}))
    with pytest.raises(_kube.KubeError) as err:
        module.create(cm("a", {"k": "v"}))
    assert err.value.msg.startswith(
        "create ConfigMap ns/a: it already exists and is not the object this run sent "
        "(it differs at metadata.labels.app, data.k)"
    )
    assert err.value.fields["status"] == 409 and err.value.fields["conflict"] == [
        "metadata.labels.app",
        "data.k",
    ]
    assert api.objects["a"]["data"] == {"k": "other"}


def test_a_create_conflict_that_never_clears_is_bounded(api, module):
    module.backoff = _retry.kubernetes(attempts=4, base=0.001, cap=0.01)
    api.script = [("create", "conflict")] * 4
    with pytest.raises(_kube.KubeError) as err:
        module.create(cm("a", {"k": "v"}))
    assert "(after 4 attempts; retried on: Conflict" in err.value.msg
    assert api.objects == {}


# --- patch -------------------------------------------------------------------------------------


def test_a_patch_conflict_rereads_and_reapplies(api, module):
    api.objects["a"] = api.bump(cm("a", {"k": "v"}))
    api.script = [("patch", "conflict"), ("patch", "500")]
    after, changed = module.patch("v1", "ConfigMap", "a", NS, {"data": {"n": "1"}})
    assert changed is True and after["data"] == {"k": "v", "n": "1"}
    assert [e[2] for e in writes(api, "patch")] == ["conflict", "500", "ok"]


def test_a_patch_whose_reply_was_lost_is_not_sent_again(api, module):
    api.objects["a"] = api.bump(cm("a", {"k": "v"}))
    api.script = [("patch", "commit-drop")]
    after, changed = module.patch("v1", "ConfigMap", "a", NS, {"data": {"n": "1"}})
    assert changed is True and after["data"] == {"k": "v", "n": "1"}
    assert len(writes(api, "patch")) == 1


def test_a_guarded_patch_on_an_object_that_moved_on_is_the_callers_409(api, module):
    api.objects["a"] = api.bump(cm("a", {"k": "v"}))
    stale = json.loads(json.dumps(api.objects["a"]))
    api.objects["a"] = api.bump(dict(api.objects["a"], data={"k": "w"}))
    with pytest.raises(_kube.KubeError) as err:
        module.patch(
            "v1",
            "ConfigMap",
            "a",
            NS,
            {"metadata": {"resourceVersion": stale["metadata"]["resourceVersion"]}, "data": {"n": "1"}},
            before=stale,
        )
    assert _kube.status_code(err.value) == 409
    assert api.objects["a"]["data"] == {"k": "w"}


# --- replace -----------------------------------------------------------------------------------


def test_a_replace_conflict_rereads_the_resource_version(api, module):
    api.objects["a"] = api.bump(cm("a", {"k": "v"}))
    before = json.loads(json.dumps(api.objects["a"]))
    api.objects["a"] = api.bump(dict(api.objects["a"], data={"k": "moved"}))  # someone wrote in between
    after, changed = module.replace(cm("a", {"k": "mine"}), before=before)
    assert changed is True and after["data"] == {"k": "mine"}
    assert [e[2] for e in writes(api, "update")] == ["ok", "ok"]  # 409 on the stale version, then sent again


def test_a_replace_whose_reply_was_lost_is_recognised(api, module):
    api.objects["a"] = api.bump(cm("a", {"k": "v"}))
    api.script = [("update", "commit-drop")]
    after, changed = module.replace(cm("a", {"k": "mine"}))
    assert changed is True and after["data"] == {"k": "mine"}
    assert api.objects["a"]["data"] == {"k": "mine"}


# --- delete ------------------------------------------------------------------------------------


def test_a_delete_whose_reply_was_lost_is_done(api, module):
    api.objects["a"] = api.bump(cm("a", {"k": "v"}))
    api.script = [("delete", "commit-drop")]
    assert module.delete("v1", "ConfigMap", "a", NS) is True
    assert api.objects == {}
    assert module.delete("v1", "ConfigMap", "a", NS) is False


def test_delete_and_wait_names_what_is_still_there(api, module):
    api.objects["a"] = api.bump(cm("a", {"k": "v"}))
    api.objects["a"]["metadata"]["finalizers"] = ["example.com/hold"]
    # The scripted server deletes at once; hold it by re-creating it, as a finalizer would keep it.
    original = Handler._apply

    def holding(self, verb, name, body):
        code, answer = original(self, verb, name, body)
        if verb == "delete":
            kept = cm("a", {"k": "v"})
            kept["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z", finalizers=["example.com/hold"])
            self.api.objects["a"] = self.api.bump(kept)
        return code, answer

    Handler._apply = holding
    try:
        with pytest.raises(WaitTimeout) as err:
            module.delete_and_wait("v1", "ConfigMap", "a", NS, timeout=0.3, sleep=0.1)
    finally:
        Handler._apply = original
    assert "waiting for ConfigMap ns/a to be deleted" in err.value.msg
    assert "finalizers: example.com/hold" in err.value.msg


def test_delete_and_wait_returns_when_gone(api, module):
    api.objects["a"] = api.bump(cm("a", {"k": "v"}))
    assert module.delete_and_wait("v1", "ConfigMap", "a", NS, timeout=5, sleep=0.1) is True
    assert module.delete_and_wait("v1", "ConfigMap", "a", NS, timeout=5, sleep=0.1) is False


# --- raw requests ------------------------------------------------------------------------------


def test_upload_streams_a_file_with_a_known_length(api, module, tmp_path):
    src = tmp_path / "disk.qcow2"
    data = bytes(range(256)) * 20000
    src.write_bytes(data)
    raw = module.upload("POST", "/upload", str(src), query=[("size", str(len(data)))])
    assert raw["bytes"] == len(data) and raw["sha256"] == hashlib.sha256(data).hexdigest()
    assert raw["authorization"] == "Bearer t" and raw["chunked"] is None
    form = module.upload("POST", "/upload", str(src), field="chunk")
    assert form["content_type"].startswith("multipart/form-data; boundary=")
    assert form["bytes"] > len(data)
    assert module.mutations == 2


def test_download_writes_chunks_and_rides_out_a_5xx(api, module):
    api.script = [("blob", "500")]
    out = io.BytesIO()
    assert module.download("/blob", out) == BLOB_BYTES
    assert out.getvalue()[:2] == b"\x89\x89" and len(out.getvalue()) == BLOB_BYTES
    assert module.mutations == 0


def test_download_stops_at_the_limit_and_names_the_action(api, module):
    with pytest.raises(errors.PipelineError, match="read the blob: the answer is larger than 1048576 bytes"):
        module.download("/blob", io.BytesIO(), limit=1024 * 1024, action="read the blob")
    api.script = [("blob", "403")]
    with pytest.raises(_kube.KubeError) as err:
        module.download("/blob", io.BytesIO(), action="read the blob")
    assert err.value.msg == "read the blob: may not read the blob (Forbidden, 403)"
