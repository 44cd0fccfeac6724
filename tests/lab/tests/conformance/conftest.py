"""Shared pieces of the conformance tests: API objects and a CRD registered at runtime."""

from __future__ import annotations

import time
import uuid

import pytest

WIDGET_GROUP = "conformance.lab.example"
WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{WIDGET_GROUP}"},
    "spec": {
        "group": WIDGET_GROUP,
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wdg"]},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {
                                    "size": {"type": "integer"},
                                    "color": {"type": "string", "enum": ["red", "green", "blue"]},
                                    "label": {"type": "string", "pattern": "^[a-z]+$"},
                                },
                            },
                            "status": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            },
                        },
                    }
                },
            }
        ],
    },
}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


@pytest.fixture(scope="session")
def core(kube_client):
    from kubernetes import client

    return client.CoreV1Api(kube_client)


@pytest.fixture(scope="session")
def custom(kube_client):
    from kubernetes import client

    return client.CustomObjectsApi(kube_client)


@pytest.fixture(scope="session")
def widget_crd(kube_client):
    """The Widget CRD, created through the API like any CRD; it is served once Established."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    ext = client.ApiextensionsV1Api(kube_client)
    try:
        ext.create_custom_resource_definition(WIDGET_CRD)
    except ApiException as exc:
        if exc.status != 409:
            raise

    def established():
        crd = ext.read_custom_resource_definition(WIDGET_CRD["metadata"]["name"])
        return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))

    wait_for(established)
    return WIDGET_GROUP
