"""The one retry layer: its rules (``retries``, pure) and its loop (``_retry.Policy.run``), run on a fake
clock and a recording sleeper; the registry's policy on a loopback registry speaking HTTP."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import _retry, retries
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import _kube_raw
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import is_transient
from ansible_collections.goldenimage.pipeline.plugins.module_utils.microvm import _oci
from hypothesis import given, settings
from hypothesis import strategies as st

# --- the rules --------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [429, 500, 502, 503, 504])
def test_throttling_and_busy_servers_are_transient(code):
    assert retries.transient_status(code)


@pytest.mark.parametrize("code", [None, 200, 400, 401, 403, 404, 409, 410, 413, 422, 501])
def test_other_answers_are_not(code):
    assert not retries.transient_status(code)


@pytest.mark.parametrize("code", [400, 401, 403, 404, 405, 409, 410, 412, 413, 415, 422, 429])
def test_the_kubernetes_client_retries_no_4xx_but_429(code):
    """409 is the writes' own rule (read back, re-apply), never a blind retry of the request."""
    assert is_transient(_kube_raw.ApiError(code, "x", None, {})) is (code == 429)


def test_a_registry_repeats_only_its_reads():
    assert retries.registry_repeats("GET", 503) and retries.registry_repeats("head", None)
    assert retries.registry_repeats("HEAD", 429)
    assert not retries.registry_repeats("GET", 404)
    for method in ("PUT", "PATCH", "POST", "DELETE"):
        assert not retries.registry_repeats(method, 503), method


def test_a_401_refreshes_the_credentials_as_often_as_allowed():
    assert retries.refreshes(401, 0, 1)
    assert not retries.refreshes(401, 1, 1)
    assert not retries.refreshes(403, 0, 1)
    assert not retries.refreshes(401, 0, 0)


@pytest.mark.parametrize(
    "value, seconds",
    [
        ("3", 3.0),
        ("0", 0.0),
        ("1.5", 1.5),
        (None, None),
        ("-1", None),
        ("Wed, 21 Oct 2015 07:28:00 GMT", None),
    ],
)
def test_retry_after_is_read_in_seconds(value, seconds):
    assert retries.retry_after(value) == seconds


@settings(deadline=None)  # a shared machine's load is not a failure
@given(
    tried=st.integers(1, 30),
    draw=st.floats(0, 1, exclude_max=True),
    base=st.floats(0.001, 2),
    cap=st.floats(0.01, 30),
)
def test_full_jitter_stays_within_zero_and_the_capped_exponential(tried, draw, base, cap):
    seconds = retries.pause(tried, draw, base, cap)
    assert 0 <= seconds <= min(cap, base * 2 ** (tried - 1))


def test_full_jitter_draws_from_zero():
    assert retries.pause(3, 0.0, 1, 8) == 0
    assert retries.pause(3, 0.5, 1, 8) == 2.0  # half of 1 * 2**2


def test_retry_after_is_honoured_up_to_the_cap_and_the_bound():
    assert retries.pause(1, 0.0, 0.2, 5, hinted=3) == 3
    assert retries.pause(1, 0.0, 0.2, 5, hinted=100) == 5  # never past the cap
    assert retries.pause(1, 0.0, 0.2, 5, hinted=3, left=1) == 1  # never past the time bound
    assert retries.pause(1, 0.9, 1, 5, hinted=0) == 0.9  # a shorter hint does not shorten the jitter


def test_each_backend_has_one_bound():
    assert retries.KUBERNETES["attempts"] == 8 and retries.KUBERNETES["seconds"] == 60.0
    assert retries.KUBERNETES["refreshes"] == 0 and retries.REGISTRY["refreshes"] == 1


# --- the loop ---------------------------------------------------------------------------------


class Clock:
    def __init__(self):
        self.now = 0.0
        self.pauses = []

    def sleep(self, seconds):
        self.pauses.append(seconds)
        self.now += seconds


def policy(clock, **changes):
    options = dict(attempts=5, seconds=100, base=1, cap=3, clock=lambda: clock.now, sleeper=clock.sleep)
    options.update(changes)
    return _retry.Policy(**options)


class Failing:
    """A call that raises ``errors`` in turn, then returns "ok"."""

    def __init__(self, *errors):
        self.errors = list(errors)
        self.calls = 0

    def __call__(self):
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def again(hinted=None):
    return lambda exc, _attempts: (_retry.AGAIN, type(exc).__name__, hinted)


def give_up(exc, attempts):
    raise RuntimeError("gave up on %s%s" % (exc, attempts.note()))


def test_a_transient_failure_is_ridden_out_with_jittered_exponential_pauses():
    clock = Clock()
    call = Failing(OSError("a"), OSError("b"), OSError("c"))
    assert policy(clock, rand=lambda: 1.0).run(call, again(), give_up) == "ok"
    assert clock.pauses == [1, 2, 3]  # base * 2**n, capped
    assert call.calls == 4


def test_the_bound_in_count_ends_with_the_adapters_error_naming_the_attempts():
    clock = Clock()
    call = Failing(*[OSError("x")] * 10)
    with pytest.raises(RuntimeError, match=r"gave up on x \(after 5 attempts; retried on: OSError, "):
        policy(clock, rand=lambda: 0.5).run(call, again(), give_up)
    assert call.calls == 5 and clock.pauses == [0.5, 1.0, 1.5, 1.5]


def test_the_bound_in_time_is_never_slept_past():
    clock = Clock()
    call = Failing(*[OSError("x")] * 100)
    with pytest.raises(RuntimeError):
        policy(clock, attempts=100, seconds=10, base=4, cap=8, rand=lambda: 1.0).run(call, again(), give_up)
    assert sum(clock.pauses) == 10 and call.calls < 100


def test_retry_after_is_honoured():
    clock = Clock()
    policy(clock, rand=lambda: 0.0).run(Failing(OSError("busy")), again(hinted=2.5), give_up)
    assert clock.pauses == [2.5]


def test_a_refresh_goes_again_at_once_and_only_as_often_as_allowed():
    clock = Clock()
    call = Failing(PermissionError("401"), PermissionError("401"))

    def refresh(_exc, _attempts):
        return (_retry.REFRESH,)

    with pytest.raises(RuntimeError, match=r"gave up on 401$"):
        policy(clock, refreshes=1).run(call, refresh, give_up)
    assert call.calls == 2 and clock.pauses == []  # refreshed once, without a pause, then refused


def test_an_answer_that_is_not_transient_is_not_retried():
    clock = Clock()
    call = Failing(ValueError("400"))
    with pytest.raises(RuntimeError, match="gave up on 400"):
        policy(clock).run(call, lambda exc, attempts: (_retry.FAIL,), give_up)
    assert call.calls == 1 and clock.pauses == []


def test_an_error_not_for_the_layer_passes_as_it_is():
    call = Failing(KeyError("mine"))
    with pytest.raises(KeyError):
        policy(Clock()).run(call, lambda exc, attempts: None, give_up)


def test_done_ends_with_the_value_the_adapter_found():
    call = Failing(OSError("lost reply"))
    assert policy(Clock()).run(call, lambda exc, attempts: (_retry.DONE, "read back"), give_up) == "read back"


def test_a_call_asks_for_another_attempt_with_the_again_signal():
    clock = Clock()
    tries = []

    def write():
        tries.append(1)
        if len(tries) < 3:
            raise _retry.Again("409 Conflict")
        return "written"

    assert policy(clock, rand=lambda: 0.0).run(write, lambda exc, attempts: None, give_up) == "written"
    assert len(tries) == 3 and clock.pauses == [0, 0]


# --- the registry's policy on the wire ---------------------------------------------------------


class Registry(BaseHTTPRequestHandler):
    """A registry that answers from a script: each entry (method, status) is the next answer to that
    method; anything else is 200. The token service at /token hands out "t1", "t2", ..."""

    protocol_version = "HTTP/1.1"
    script = []
    seen = []
    tokens = 0

    def log_message(self, *args):
        pass

    def _answer(self, code, headers=None, body=b""):
        self.send_response(code)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _handle(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        cls = type(self)
        if self.path.startswith("/token"):
            cls.tokens += 1
            return self._answer(200, body=json.dumps({"token": "t%d" % cls.tokens}).encode())
        cls.seen.append((self.command, self.headers.get("Authorization")))
        for index, (method, code) in enumerate(cls.script):
            if method == self.command:
                del cls.script[index]
                realm = "http://%s:%d/token" % self.server.server_address
                challenge = {"WWW-Authenticate": 'Bearer realm="%s",service="lab"' % realm}
                headers = challenge if code == 401 else {"Retry-After": "0"}
                return self._answer(code, headers)
        return self._answer(200, {"Docker-Content-Digest": "sha256:abc"})

    do_GET = do_HEAD = do_PUT = do_PATCH = do_POST = _handle


@pytest.fixture
def registry():
    Registry.script, Registry.seen, Registry.tokens = [], [], 0
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Registry)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    client = _oci.Registry("http", "127.0.0.1:%d" % httpd.server_address[1])
    client.retry = _retry.registry(base=0.001, cap=0.01)
    try:
        yield client
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_registry_read_rides_out_a_busy_registry(registry):
    Registry.script = [("HEAD", 503), ("HEAD", 429)]
    assert registry.has_blob("lm/ubuntu", "sha256:abc")
    assert [m for m, _auth in Registry.seen] == ["HEAD"] * 3


def test_a_registry_write_is_not_repeated(registry):
    Registry.script = [("PATCH", 503)]
    with pytest.raises(_oci.RegistryError, match=r"PATCH /v2/lm/ubuntu/blobs/uploads/x: HTTP 503") as err:
        registry.request("PATCH", "/v2/lm/ubuntu/blobs/uploads/x", "lm/ubuntu", data=b"chunk")
    assert err.value.fields["status"] == 503
    assert [m for m, _auth in Registry.seen] == ["PATCH"]


def test_a_401_fetches_a_token_once_and_a_second_401_is_the_answer(registry):
    Registry.script = [("HEAD", 401)]
    assert registry.has_blob("lm/ubuntu", "sha256:abc")
    assert Registry.seen == [("HEAD", None), ("HEAD", "Bearer t1")]
    Registry.script, Registry.seen = [("GET", 401), ("GET", 401)], []
    with pytest.raises(_oci.RegistryError, match="HTTP 401, anonymous access is not allowed"):
        registry.request("GET", "/v2/lm/ubuntu/manifests/1", "lm/ubuntu")
    assert Registry.seen == [("GET", "Bearer t1"), ("GET", "Bearer t2")]  # renewed once, then refused
    assert Registry.tokens == 2
