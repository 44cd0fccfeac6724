"""Fault injection knobs: conflicts, 5xx answers, latency, dropped connections, determinism.

The knobs act on the fault proxy, the lab's listener that ``lab.fault_kubeconfig`` points at; the clients
here use it."""

from __future__ import annotations

import http.client
import json
import time

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

pytestmark = pytest.mark.lab_only


@pytest.fixture
def faults(lab):
    lab.faults.reset()
    yield lab.faults
    lab.faults.reset()


@pytest.fixture
def no_retry_core(lab):
    """A client of the fault proxy that does not retry, so every injected fault reaches the test."""
    from kubernetes import config

    api = config.new_client_from_config(str(lab.fault_kubeconfig))
    api.configuration.retries = 0
    api.rest_client.pool_manager.connection_pool_kw["retries"] = False
    with api:
        yield client.CoreV1Api(api)


def _http(lab, method, path, body=None):
    conn = lab.connection(faults=True)
    headers = {"Authorization": f"Bearer {lab.admin_token}", "Content-Type": "application/json"}
    conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
    resp = conn.getresponse()
    data = json.loads(resp.read() or b"{}")
    conn.close()
    return resp.status, data


def test_conflict_rate(kube_namespace, faults, no_retry_core):
    no_retry_core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "c"}})
    faults.update({"conflict_rate": 1.0})
    with pytest.raises(ApiException) as err:
        no_retry_core.patch_namespaced_config_map("c", kube_namespace, {"data": {"a": "b"}})
    assert err.value.status == 409 and json.loads(err.value.body)["reason"] == "Conflict"
    assert (
        no_retry_core.read_namespaced_config_map("c", kube_namespace).data is None
    )  # reads are not affected


def test_error_rate_alternates_500_and_503(faults, no_retry_core):
    faults.update({"error_rate": 1.0})
    codes = []
    for _ in range(4):
        with pytest.raises(ApiException) as err:
            no_retry_core.read_namespace("default")
        codes.append(err.value.status)
    assert codes == [500, 503, 500, 503]


def test_latency(faults, no_retry_core):
    faults.update({"latency_ms": 150})
    started = time.monotonic()
    no_retry_core.read_namespace("default")
    assert time.monotonic() - started >= 0.15


def test_dropped_connections(lab, faults):
    faults.update({"drop_rate": 1.0})
    conn = lab.connection(faults=True)
    conn.request("GET", "/api/v1/namespaces", headers={"Authorization": f"Bearer {lab.admin_token}"})
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
        conn.getresponse()
    conn.close()


def test_seeded_rates_are_deterministic(faults, no_retry_core):
    def sequence():
        faults.update({"error_rate": 0.5, "seed": 7})
        out = []
        for _ in range(20):
            try:
                no_retry_core.read_namespace("default")
                out.append(200)
            except ApiException as exc:
                out.append(exc.status)
        return out

    first, second = sequence(), sequence()
    assert first == second and 200 in first and (500 in first or 503 in first)


@pytest.mark.fault_knobs_only
def test_faults_over_http_need_the_admin_token(lab, faults):
    status, body = _http(lab, "PUT", "/lab/faults", {"latency_ms": 5, "objects": {"Job/ns/j": "fail"}})
    assert status == 200 and body["latency_ms"] == 5
    assert lab.faults.object_fault("Job", "ns", "j") == "fail"
    status, body = _http(lab, "GET", "/lab/faults")
    assert body["objects"] == {"job/ns/j": "fail"}
    status, body = _http(lab, "PUT", "/lab/faults", {"conflict_rate": 3})
    assert status == 400


def test_audit_over_http(lab, faults, no_retry_core):
    status, _ = _http(lab, "DELETE", "/lab/audit")
    assert status == 200
    no_retry_core.read_namespace("default")
    status, body = _http(lab, "GET", "/lab/audit")
    assert status == 200
    (record,) = body["items"]
    assert record["verb"] == "get" and record["resource"] == "namespaces" and record["name"] == "default"
    assert record["code"] == 200 and record["user"] == "lab-admin" and record["dry_run"] is False


def test_commit_then_drop_applies_the_write_and_loses_the_reply(lab, kube_namespace, faults):
    faults.update({"commit_drop_rate": 1.0})
    headers = {"Authorization": f"Bearer {lab.admin_token}", "Content-Type": "application/json"}
    conn = lab.connection(faults=True)
    body = {"metadata": {"name": "lost-reply"}, "data": {"a": "1"}}
    conn.request("POST", f"/api/v1/namespaces/{kube_namespace}/configmaps", json.dumps(body), headers)
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
        conn.getresponse()
    conn.close()
    assert faults.to_dict()["injected"]["commit_drop"] == 1
    faults.update({"commit_drop_rate": 0})
    status, obj = _http(lab, "GET", f"/api/v1/namespaces/{kube_namespace}/configmaps/lost-reply")
    assert status == 200 and obj["data"] == {"a": "1"}  # committed although no answer came
    (record,) = [
        r for r in lab.audit() if r["verb"] == "create" and r["name"] == "lost-reply" and r.get("committed")
    ]
    assert record["code"] == 201 and record["dropped"] is True


def test_commit_then_drop_spares_reads_dry_runs_and_refused_writes(
    lab, kube_namespace, faults, no_retry_core
):
    no_retry_core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "c"}})
    faults.update({"commit_drop_rate": 1.0})
    assert no_retry_core.read_namespaced_config_map("c", kube_namespace).metadata.name == "c"
    dry = no_retry_core.create_namespaced_config_map(
        kube_namespace, {"metadata": {"name": "d"}}, dry_run="All"
    )
    assert dry.metadata.name == "d"
    with pytest.raises(ApiException) as err:  # a write the server refuses is answered: nothing committed
        no_retry_core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "c"}})
    assert err.value.status == 409
    assert faults.to_dict()["injected"]["commit_drop"] == 0


@pytest.mark.fault_knobs_only
def test_commit_drop_rate_is_a_knob_like_the_others(lab, faults):
    status, body = _http(lab, "PUT", "/lab/faults", {"commit_drop_rate": 0.05, "seed": 3})
    assert status == 200 and body["commit_drop_rate"] == 0.05 and body["injected"]["commit_drop"] == 0
    status, _ = _http(lab, "PUT", "/lab/faults", {"commit_drop_rate": 1.5})
    assert status == 400
    faults.reset()
    assert faults.to_dict()["commit_drop_rate"] == 0


@pytest.mark.fault_knobs_only
def test_the_faults_command_sets_and_shows_the_knobs(tmp_path):
    import subprocess
    import sys

    from tests.lab import Lab
    from tests.lab.__main__ import REPO

    state = tmp_path / "state"
    with Lab(state, with_s3=False) as other:
        info = {
            "pid": __import__("os").getpid(),
            "url": other.url,
            "front_url": other.front_url,
            "port": other.port,
            "token": other.admin_token,
        }
        (state / "lab.json").write_text(json.dumps(info))
        run = [sys.executable, "-m", "tests.lab", "faults", "--state-dir", str(state)]
        proc = subprocess.run(
            [*run, "commit_drop_rate=0.25", "seed=9"], cwd=REPO, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["commit_drop_rate"] == 0.25
        # It says where the knobs act: the fault proxy's address and kubeconfig, not kube-apiserver's.
        assert other.front_url in proc.stderr and "kubeconfig-faults" in proc.stderr, proc.stderr
        assert "own address %s" % other.url in proc.stderr and proc.stderr.rstrip().endswith("has none")
        assert other.faults.commit_drop_rate == 0.25 and other.faults.seed == 9
        proc = subprocess.run([*run, "--reset"], cwd=REPO, capture_output=True, text=True)
        assert proc.returncode == 0 and other.faults.commit_drop_rate == 0
        proc = subprocess.run([*run, "drop_rate=2"], cwd=REPO, capture_output=True, text=True)
        assert proc.returncode == 1 and "between 0 and 1" in proc.stderr
