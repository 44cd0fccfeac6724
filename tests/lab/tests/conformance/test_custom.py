"""CustomObjectsApi and DynamicClient against a CRD registered at runtime."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.rest import ApiException

from .conftest import WIDGET_GROUP, unique, wait_for


def _widget(name, **spec):
    return {"apiVersion": f"{WIDGET_GROUP}/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec}


def test_create_get_patch(custom, widget_crd, kube_namespace):
    args = (widget_crd, "v1", kube_namespace, "widgets")
    made = custom.create_namespaced_custom_object(*args, _widget("w", size=3, color="red"))
    assert made["metadata"]["uid"] and made["kind"] == "Widget"
    got = custom.get_namespaced_custom_object(*args, "w")
    assert got["spec"] == {"size": 3, "color": "red"}
    listed = custom.list_namespaced_custom_object(*args)
    assert listed["kind"] == "WidgetList" and [i["metadata"]["name"] for i in listed["items"]] == ["w"]

    merged = custom.patch_namespaced_custom_object(*args, "w", {"spec": {"color": "blue"}})
    assert merged["spec"] == {"size": 3, "color": "blue"}


def test_json_patch_and_strategic_merge_is_unsupported(kube_client, widget_crd, kube_namespace, custom):
    args = (widget_crd, "v1", kube_namespace, "widgets")
    custom.create_namespaced_custom_object(*args, _widget("j", size=1))
    path = f"/apis/{widget_crd}/v1/namespaces/{kube_namespace}/widgets/j"
    ops = [
        {"op": "replace", "path": "/spec/size", "value": 9},
        {"op": "add", "path": "/spec/label", "value": "x"},
    ]
    kube_client.call_api(
        path,
        "PATCH",
        header_params={"Content-Type": "application/json-patch+json", "Accept": "application/json"},
        body=ops,
        auth_settings=["BearerToken"],
        _preload_content=False,
    )
    assert custom.get_namespaced_custom_object(*args, "j")["spec"] == {"size": 9, "label": "x"}
    with pytest.raises(ApiException) as err:
        kube_client.call_api(
            path,
            "PATCH",
            header_params={
                "Content-Type": "application/strategic-merge-patch+json",
                "Accept": "application/json",
            },
            body={"spec": {"size": 2}},
            auth_settings=["BearerToken"],
            _preload_content=False,
        )
    assert err.value.status == 415


def test_status_subresource_is_separate(custom, widget_crd, kube_namespace):
    args = (widget_crd, "v1", kube_namespace, "widgets")
    body = _widget("s", size=1)
    body["status"] = {"phase": "Ignored"}
    made = custom.create_namespaced_custom_object(*args, body)
    assert "status" not in made

    made["status"] = {"phase": "Main"}
    made["spec"]["size"] = 2
    after = custom.replace_namespaced_custom_object(*args, "s", made)
    assert after["spec"]["size"] == 2 and "status" not in after

    after["status"] = {"phase": "Ready"}
    after["spec"]["size"] = 5
    status = custom.replace_namespaced_custom_object_status(*args, "s", after)
    assert status["status"] == {"phase": "Ready"} and status["spec"]["size"] == 2

    patched = custom.patch_namespaced_custom_object_status(*args, "s", {"status": {"ready": True}})
    assert patched["status"] == {"phase": "Ready", "ready": True}
    assert custom.get_namespaced_custom_object_status(*args, "s")["status"]["ready"] is True


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({}, "spec.size"),
        ({"size": "big"}, "spec.size"),
        ({"size": 1, "color": "purple"}, "spec.color"),
        ({"size": 1, "label": "Not-Lower"}, "spec.label"),
    ],
)
def test_schema_violations_are_invalid(custom, widget_crd, kube_namespace, spec, field):
    with pytest.raises(ApiException) as err:
        custom.create_namespaced_custom_object(
            widget_crd, "v1", kube_namespace, "widgets", _widget("bad", **spec)
        )
    body = json.loads(err.value.body)
    assert err.value.status == 422 and body["reason"] == "Invalid"
    assert any(c["field"] == field for c in body["details"]["causes"]), body


def test_dynamic_client_discovers_crd_registered_at_runtime(kube_client, kube_namespace):
    from kubernetes import client
    from kubernetes.dynamic import DynamicClient

    group = unique("gadgets") + ".lab.example"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"gadgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "shortNames": ["gdg"]},
            "versions": [
                {
                    "name": "v1beta1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
            ],
        },
    }
    dyn = DynamicClient(kube_client)
    ext = client.ApiextensionsV1Api(kube_client)
    ext.create_custom_resource_definition(crd)
    try:
        gadgets = wait_for(lambda: _find(dyn, f"{group}/v1beta1", "Gadget"))
        assert gadgets.namespaced and gadgets.short_names == ["gdg"]
        assert "status" in gadgets.subresources

        groups = kube_client.call_api("/apis", "GET", auth_settings=["BearerToken"], response_type="object")[
            0
        ]
        entry = next(g for g in groups["groups"] if g["name"] == group)
        assert entry["preferredVersion"] == {"groupVersion": f"{group}/v1beta1", "version": "v1beta1"}

        body = {
            "apiVersion": f"{group}/v1beta1",
            "kind": "Gadget",
            "metadata": {"name": "g1", "namespace": kube_namespace},
            "spec": {"a": 1, "b": [1, 2]},
        }
        applied = dyn.server_side_apply(
            gadgets, body=body, field_manager="conformance", namespace=kube_namespace
        )
        assert applied.spec.a == 1 and applied.metadata.managedFields[0].manager == "conformance"
        body["spec"] = {"a": 2}
        applied = dyn.server_side_apply(
            gadgets, body=body, field_manager="conformance", namespace=kube_namespace
        )
        assert applied.spec.a == 2 and applied.spec.b is None

        listed = dyn.get(gadgets, namespace=kube_namespace)
        assert [i.metadata.name for i in listed.items] == ["g1"]
    finally:
        ext.delete_custom_resource_definition(f"gadgets.{group}")


def _find(dyn, api_version, kind):
    from kubernetes.dynamic.exceptions import ResourceNotFoundError

    try:
        return dyn.resources.get(api_version=api_version, kind=kind)
    except ResourceNotFoundError:
        return None


def test_server_side_apply_conflicts_between_managers(kube_client, widget_crd, kube_namespace):
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import ConflictError

    dyn = DynamicClient(kube_client)
    widgets = dyn.resources.get(api_version=f"{widget_crd}/v1", kind="Widget")
    body = _widget("ssa", size=1, color="red")
    dyn.server_side_apply(widgets, body=body, field_manager="alice", namespace=kube_namespace)
    body["spec"]["color"] = "green"
    with pytest.raises(ConflictError):
        dyn.server_side_apply(widgets, body=body, field_manager="bob", namespace=kube_namespace)
    forced = dyn.server_side_apply(
        widgets, body=body, field_manager="bob", namespace=kube_namespace, force_conflicts=True
    )
    assert forced.spec.color == "green"
