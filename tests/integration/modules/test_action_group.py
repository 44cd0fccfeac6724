"""One ``module_defaults`` entry, ``group/goldenimage.pipeline.k8s``, configures this collection's cluster
modules and kubernetes.core's: the group extends ``kubernetes.core.k8s`` (meta/runtime.yml)."""

from __future__ import annotations

import pytest

from tests.integration.support.runner import module_task, play, run_playbook

pytestmark = pytest.mark.quick


def test_one_group_entry_configures_both_collections(lab, kube_namespace, tmp_path, monkeypatch):
    # Nothing else points at the cluster: no K8S_AUTH_* or KUBECONFIG variable, no ~/.kube/config.
    for name in (
        "K8S_AUTH_KUBECONFIG",
        "K8S_AUTH_HOST",
        "K8S_AUTH_API_KEY",
        "K8S_AUTH_CONTEXT",
        "KUBECONFIG",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    defaults = {"group/goldenimage.pipeline.k8s": {"kubeconfig": str(lab.kubeconfig)}}
    run = run_playbook(
        play(
            module_task("kubernetes.core.k8s_info", "core", kind="Namespace", name=kube_namespace),
            module_task(
                "goldenimage.pipeline.kube_object_info", "ours", kind="Namespace", name=kube_namespace
            ),
            module_defaults=defaults,
        )
    )
    assert run.ok, run.log
    assert [r["metadata"]["name"] for r in run["core"]["resources"]] == [kube_namespace]
    assert [r["metadata"]["name"] for r in run["ours"]["resources"]] == [kube_namespace]
