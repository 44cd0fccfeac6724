"""The Kubernetes adapter's pure parts and its single error path, with real client exceptions.

API errors come from the real ``kubernetes`` client talking to a loopback HTTP server that answers
with Status objects the way an API server does; nothing is mocked.
"""

import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import errors
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import _kube, _kube_auth
from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC

COLLECTIONS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".collections"))


def status(code, reason, message):
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _send(self, code, body, content_type="application/json"):
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.endswith("/persistentvolumeclaims/missing"):
            self._send(404, status(404, "NotFound", 'persistentvolumeclaims "missing" not found'))
        elif self.path.endswith("/persistentvolumeclaims/forbidden"):
            msg = 'persistentvolumeclaims "forbidden" is forbidden: User "viewer" cannot get resource'
            self._send(403, status(403, "Forbidden", msg))
        else:
            self._send(502, "<html>bad gateway</html>", "text/html")

    def do_POST(self):
        self._send(409, status(409, "AlreadyExists", 'persistentvolumeclaims "disk" already exists'))


@pytest.fixture(scope="module")
def api():
    from kubernetes import client

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    config = client.Configuration(host="http://127.0.0.1:%d" % server.server_address[1])
    api_client = client.ApiClient(config)
    try:
        yield client.CoreV1Api(api_client)
    finally:
        api_client.close()
        server.shutdown()
        server.server_close()
        thread.join()


def raised(call):
    try:
        call()
    except Exception as exc:
        return exc
    raise AssertionError("no exception")


def test_not_found_reads_the_status_object(api):
    exc = raised(lambda: api.read_namespaced_persistent_volume_claim("missing", "ns"))
    msg, details = _kube.failure_message("get PersistentVolumeClaim ns/missing", exc)
    assert (
        msg
        == 'get PersistentVolumeClaim ns/missing: persistentvolumeclaims "missing" not found (NotFound, 404)'
    )
    assert details["reason"] == "NotFound"
    assert details["status"] == 404
    assert details["body"]["kind"] == "Status"


def test_dynamic_client_errors_read_the_same(api):
    from kubernetes.dynamic.exceptions import api_exception

    exc = api_exception(raised(lambda: api.read_namespaced_persistent_volume_claim("forbidden", "ns")))
    assert type(exc).__name__ == "ForbiddenError"
    msg, details = _kube.failure_message("get PersistentVolumeClaim ns/forbidden", exc)
    assert msg.endswith('User "viewer" cannot get resource (Forbidden, 403)')
    assert (details["reason"], details["status"]) == ("Forbidden", 403)


def test_conflict_on_create(api):
    exc = raised(lambda: api.create_namespaced_persistent_volume_claim("ns", {"metadata": {"name": "disk"}}))
    msg = _kube.failure_message("create PersistentVolumeClaim ns/disk", exc)[0]
    assert msg == (
        "create PersistentVolumeClaim ns/disk: "
        'persistentvolumeclaims "disk" already exists (AlreadyExists, 409)'
    )


def test_a_body_that_is_not_a_status(api):
    exc = raised(lambda: api.read_namespaced_persistent_volume_claim("proxy", "ns"))
    msg, details = _kube.failure_message("get PersistentVolumeClaim ns/proxy", exc)
    assert (
        msg == "get PersistentVolumeClaim ns/proxy: Bad Gateway: <html>bad gateway</html> (Bad Gateway, 502)"
    )
    assert _kube.is_transient(exc)
    assert details["body"] == "<html>bad gateway</html>"


def test_connection_refused():
    from kubernetes import client

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    config = client.Configuration(host="http://127.0.0.1:%d" % port)
    config.retries = 0
    with client.ApiClient(config) as api_client:
        exc = raised(lambda: client.CoreV1Api(api_client).list_namespace())
    msg, details = _kube.failure_message("list Namespace", exc)
    assert msg.startswith("list Namespace: cannot reach the API server: ")
    assert "Connection refused" in msg
    assert msg.endswith("(ConnectionError)")
    assert details["status"] is None
    assert _kube.is_transient(exc)


def test_other_errors_keep_their_text():
    msg, details = _kube.failure_message("load kubeconfig", ValueError("no context named lab"))
    assert msg == "load kubeconfig: no context named lab (ValueError)"
    assert details["reason"] == "ValueError"


def test_strip_server_fields():
    obj = {
        "metadata": {
            "name": "x",
            "uid": "u",
            "resourceVersion": "7",
            "generation": 2,
            "creationTimestamp": "t",
            "managedFields": [{}],
            "selfLink": "/x",
            "labels": {},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
        },
        "spec": {"a": 1},
        "status": {"readyToUse": True},
    }
    assert _kube.strip_server_fields(obj) == {"metadata": {"name": "x"}, "spec": {"a": 1}}
    assert _kube.strip_server_fields(obj, include_status=True)["status"] == {"readyToUse": True}
    assert obj["metadata"]["uid"] == "u"  # the input is left alone


def test_merge_patch_follows_rfc_7386():
    target = {"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]}
    patch = {"a": "z", "c": {"f": None}, "l": [3], "n": {"x": None}}
    assert _kube.merge_patch(target, patch) == {"a": "z", "c": {"d": "e"}, "l": [3], "n": {}}
    assert _kube.merge_patch(None, {"a": 1}) == {"a": 1}


def test_diff_ignores_what_the_server_fills_in():
    before = {"metadata": {"name": "x", "resourceVersion": "1"}, "status": {"readyToUse": False}}
    after = {"metadata": {"name": "x", "resourceVersion": "2"}, "status": {"readyToUse": True}}
    assert _kube.same_object(before, after)
    assert not _kube.same_object(before, after, include_status=True)
    assert _kube.object_diff(None, after) == {"before": {}, "after": {"metadata": {"name": "x"}}}


def test_auth_options_are_kubernetes_core_s():
    spec = _kube_auth.auth_argument_spec()
    assert spec == AUTH_ARG_SPEC
    assert spec is not AUTH_ARG_SPEC
    assert spec["proxy_headers"]["options"]["basic_auth"]["no_log"] is True


def test_fail_from_exception_raises_the_status_and_the_one_exit_reports_it(api, capsys):
    exc = raised(lambda: api.read_namespaced_persistent_volume_claim("missing", "ns"))
    with patch_module_args({}):
        module = _kube.KubeModule(argument_spec={}, supports_check_mode=True)
        with pytest.raises(_kube.KubeError) as error:
            module.fail_from_exception("get PersistentVolumeClaim ns/missing", exc, snapshot={})
        assert error.value.cause is exc
        with pytest.raises(SystemExit):
            errors.run_module(
                module,
                lambda: module.fail_from_exception("get PersistentVolumeClaim ns/missing", exc, snapshot={}),
            )
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] is True
    assert result["msg"].endswith("(NotFound, 404)")
    assert result["reason"] == "NotFound"
    assert result["status"] == 404
    assert result["body"]["message"] == 'persistentvolumeclaims "missing" not found'
    assert result["snapshot"] == {}


def test_a_failure_returns_what_the_run_wrote_and_a_403_says_it(capsys):
    def failing(status):
        def runner():
            raise errors.PipelineError("boom", status=status)

        return runner

    results = []
    with patch_module_args({}):
        module = _kube.KubeModule(argument_spec={}, supports_check_mode=True)
        module.written = ["created ConfigMap ns/a", "patched Secret ns/b"]
        for status in (403, 500):
            with pytest.raises(SystemExit):
                errors.run_module(module, failing(status))
            results.append(json.loads(capsys.readouterr().out))
    forbidden, other = results
    assert forbidden["written"] == other["written"] == module.written
    assert forbidden["msg"] == (
        "boom. Written by this run before the refusal: created ConfigMap ns/a, patched Secret ns/b"
    )
    assert other["msg"] == "boom"  # not a 403: the failure's own message; written says what exists


def test_bad_options_fail_before_anything_is_written(capsys):
    with patch_module_args({"wait_timeout": "soon"}), pytest.raises(SystemExit):
        _kube.KubeModule(argument_spec={"wait_timeout": {"type": "int"}})
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] is True and "wait_timeout" in result["msg"] and "written" not in result


def _python(code):
    env = dict(os.environ, PYTHONPATH=COLLECTIONS)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)


def test_a_missing_kubeconfig_is_named_by_its_path_before_any_request(tmp_path):
    missing = str(tmp_path / "nowhere" / "lab.kubeconfig")
    with patch_module_args({"kubeconfig": missing}):
        module = _kube.KubeModule(argument_spec={}, supports_check_mode=True)
        with pytest.raises(errors.Refusal) as error:
            module.get("v1", "Namespace", "default")
    assert error.value.msg == (
        "kubeconfig %s (option kubeconfig or K8S_AUTH_KUBECONFIG): the file does not exist; point it at a "
        "kubeconfig file, or leave it unset to use ~/.kube/config or the in-cluster service account" % missing
    )
    assert module.retried == 0


def test_modules_load_without_importing_kubernetes():
    proc = _python(
        "import sys\n"
        "import ansible_collections.goldenimage.pipeline.plugins.modules.golden_snapshot\n"
        "print('kubernetes' in sys.modules, 'boto3' in sys.modules)\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False False"


def test_missing_kubernetes_gives_the_standard_message():
    proc = _python(
        "import sys\n"
        "sys.modules['kubernetes'] = None  # what an interpreter without the library sees\n"
        "from ansible.module_utils.testing import patch_module_args\n"
        "from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeModule\n"
        "from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import run_module\n"
        "with patch_module_args({}):\n"
        "    module = KubeModule(argument_spec={})\n"
        "    run_module(module, lambda: module.client)\n"
    )
    result = json.loads(proc.stdout)
    assert result["failed"] is True
    assert "Failed to import the required Python library (kubernetes)" in result["msg"]
    assert "delegate_to: localhost" in result["msg"]
