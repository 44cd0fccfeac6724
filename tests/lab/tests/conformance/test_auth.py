"""Authentication (bearer tokens) and the rules Lab.add_token grants, at the API (pod logs and KubeVirt's
subresources included: kube-apiserver decides before it asks the lab's kubelet or virt-api) and at
Harvester's endpoint and the lab's control endpoints on the lab's listener."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

pytestmark = pytest.mark.lab_only


def _raw(lab, path, token=None, method="GET", base=None):
    request = urllib.request.Request(
        (base or lab.url) + path, method=method, data=b"" if method == "POST" else None
    )
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=lab.ssl_context()) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def _platform_paths(namespace: str) -> list[str]:
    """API paths answered by the lab's servers behind kube-apiserver: a pod's log (the lab's kubelet) and
    KubeVirt's screenshot (the lab's virt-api, through the aggregation layer)."""
    return [
        f"/api/v1/namespaces/{namespace}/pods/p/log",
        f"/apis/subresources.kubevirt.io/v1/namespaces/{namespace}/virtualmachineinstances/v/vnc/screenshot",
    ]


def _upload_path(namespace: str) -> str:
    return f"/v1/harvester/harvesterhci.io.virtualmachineimages/{namespace}/img?action=upload"


def test_requests_without_a_valid_token_are_unauthorized(lab, kube_namespace):
    """The lab turns anonymous requests off, its token webhook knows only the tokens it handed out, and
    Harvester's endpoint authenticates the same way."""
    for path in ("/version", "/api/v1/namespaces", *_platform_paths(kube_namespace)):
        for token in (None, "not-a-token"):
            code, body = _raw(lab, path, token=token)
            assert (code, body.get("reason")) == (401, "Unauthorized"), (path, token, body)
    for token in (None, "not-a-token"):
        code, body = _raw(lab, _upload_path(kube_namespace), token, "POST", lab.harvester_url)
        assert (code, body.get("reason")) == (401, "Unauthorized"), (token, body)


def test_add_token_grants_only_its_rules(lab, tmp_path, kube_namespace):
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
    code, _ = _raw(lab, "/lab/audit", token=token, base=lab.front_url)
    assert code == 403
    for path in _platform_paths(kube_namespace):  # RBAC decides before kube-apiserver asks the lab
        code, body = _raw(lab, path, token=token)
        assert (code, body.get("reason")) == (403, "Forbidden"), (path, body)
    # Harvester's endpoint asks RBAC (a SubjectAccessReview) for an update of the image.
    code, body = _raw(lab, _upload_path(kube_namespace), token, "POST", lab.harvester_url)
    assert (code, body.get("reason")) == (403, "Forbidden"), body
    forbidden = [r for r in lab.audit() if r["user"] == "reader" and r["code"] == 403]
    upload = _upload_path(kube_namespace).split("?")[0]
    assert {(r["verb"], r["resource"], r["subresource"]) for r in forbidden} == {
        ("list", "secrets", ""),
        ("create", "configmaps", ""),
        ("list", "configmaps", ""),
        ("get", "pods", "log"),
        ("get", "virtualmachineinstances", "vnc"),
        ("create", upload, ""),  # Harvester's endpoint is audited by the lab, by path
    }
