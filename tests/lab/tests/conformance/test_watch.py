"""Watches through kubernetes.watch.Watch: initial state, resume from a resourceVersion, timeouts."""

from __future__ import annotations

import threading
import time

import pytest
from kubernetes import watch
from kubernetes.client.rest import ApiException


def _events(core, namespace, **kwargs):
    w = watch.Watch()
    return [
        (e["type"], e["object"].metadata.name)
        for e in w.stream(core.list_namespaced_config_map, namespace, **kwargs)
    ]


def test_watch_resumes_from_resource_version(core, kube_namespace):
    listed = core.list_namespaced_config_map(kube_namespace)
    rv = listed.metadata.resource_version
    core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "w1"}})
    core.patch_namespaced_config_map("w1", kube_namespace, {"data": {"a": "b"}})
    core.delete_namespaced_config_map("w1", kube_namespace)
    events = _events(core, kube_namespace, resource_version=rv, timeout_seconds=1)
    assert events == [("ADDED", "w1"), ("MODIFIED", "w1"), ("DELETED", "w1")]


def test_watch_without_resource_version_lists_current_state(core, kube_namespace):
    core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "present"}})
    assert _events(core, kube_namespace, timeout_seconds=1) == [("ADDED", "present")]


def test_watch_streams_live_events_and_honours_timeout(core, kube_namespace):
    rv = core.list_namespaced_config_map(kube_namespace).metadata.resource_version

    def later():
        time.sleep(0.3)
        core.create_namespaced_config_map(
            kube_namespace, {"metadata": {"name": "live", "labels": {"w": "yes"}}}
        )
        core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "other"}})

    thread = threading.Thread(target=later)
    started = time.monotonic()
    thread.start()
    events = _events(core, kube_namespace, resource_version=rv, timeout_seconds=2, label_selector="w=yes")
    thread.join()
    elapsed = time.monotonic() - started
    assert events == [("ADDED", "live")]
    assert 1.5 <= elapsed < 6


def test_watch_stop_from_consumer(core, kube_namespace):
    w = watch.Watch()
    rv = core.list_namespaced_config_map(kube_namespace).metadata.resource_version
    core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "stopper"}})
    for event in w.stream(
        core.list_namespaced_config_map, kube_namespace, resource_version=rv, timeout_seconds=30
    ):
        assert event["object"].metadata.name == "stopper"
        w.stop()
    # reaching here quickly proves the consumer could stop a long watch


@pytest.mark.lab_only
def test_too_old_resource_version_is_gone(lab, core, kube_namespace):
    rv = core.list_namespaced_config_map(kube_namespace).metadata.resource_version
    core.create_namespaced_config_map(kube_namespace, {"metadata": {"name": "old"}})
    lab.store.compact()
    with pytest.raises(ApiException) as err:
        _events(core, kube_namespace, resource_version=rv, timeout_seconds=1)
    assert err.value.status == 410


@pytest.mark.lab_only
def test_bookmarks(lab, kube_client, kube_namespace):
    from kubernetes.dynamic import DynamicClient

    from tests.lab import server

    old = server.BOOKMARK_SECONDS
    server.BOOKMARK_SECONDS = 0.2
    try:
        dyn = DynamicClient(kube_client)
        configmaps = dyn.resources.get(api_version="v1", kind="ConfigMap")
        types = [
            e["type"]
            for e in dyn.watch(configmaps, namespace=kube_namespace, timeout=1, allow_watch_bookmarks=True)
        ]
    finally:
        server.BOOKMARK_SECONDS = old
    assert "BOOKMARK" in types
