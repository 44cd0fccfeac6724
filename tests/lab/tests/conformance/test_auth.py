"""Authentication (bearer tokens) and the RBAC rule table."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException


def _raw(lab, path, token=None, method="GET"):
    request = urllib.request.Request(lab.url + path, method=method)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=lab.ssl_context()) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


@pytest.mark.lab_only
def test_requests_without_token_are_unauthorized(lab):
    for path in ("/version", "/api/v1/namespaces", "/apis"):
        code, body = _raw(lab, path)
        assert code == 401 and body["reason"] == "Unauthorized"
    code, _ = _raw(lab, "/api/v1/namespaces", token="not-a-token")
    assert code == 401


@pytest.mark.lab_only
def test_official_client_without_token_gets_401(lab):
    cfg = client.Configuration()
    cfg.host = lab.url
    cfg.ssl_ca_cert = str(lab.ca_path) if lab.ca_path else None
    with client.ApiClient(cfg) as api, pytest.raises(ApiException) as err:
        client.CoreV1Api(api).list_namespace()
    assert err.value.status == 401


@pytest.mark.lab_only
def test_rule_table_forbids_what_it_does_not_allow(lab, tmp_path, kube_namespace):
    token = lab.add_token(
        "reader",
        [
            {
                "verbs": ["get", "list", "watch"],
                "groups": [""],
                "resources": ["configmaps"],
                "namespaces": [kube_namespace],
            }
        ],
    )
    path = lab.write_kubeconfig(tmp_path / "reader.kubeconfig", token=token, user="reader")
    with config.new_client_from_config(str(path)) as api:
        core = client.CoreV1Api(api)
        listed = [c.metadata.name for c in core.list_namespaced_config_map(kube_namespace).items]
        assert "nope" not in listed  # a namespace holds only what the cluster put there (kube-root-ca.crt)
        with pytest.raises(ApiException) as err:
            core.list_namespaced_secret(kube_namespace)
        body = json.loads(err.value.body)
        assert err.value.status == 403 and body["reason"] == "Forbidden"
        assert (
            'User "reader" cannot list resource "secrets" in API group "" in the namespace' in body["message"]
        )
        with pytest.raises(ApiException) as err:
            core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "nope"}})
        assert err.value.status == 403
        with pytest.raises(ApiException) as err:
            core.list_namespaced_config_map("default")
        assert err.value.status == 403
    code, _ = _raw(lab, "/lab/audit", token=token)
    assert code == 403
    forbidden = [r for r in lab.audit() if r["user"] == "reader" and r["code"] == 403]
    assert {r["verb"] for r in forbidden} == {"list", "create"}
