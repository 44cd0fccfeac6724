"""Fault suite, module level: create, patch, replace and delete through the Kubernetes adapter converge in
one run under conflicts, 5xx answers, dropped connections and replies lost after the commit, with no
duplicate object and every change applied exactly as asked.

The rates are the ones the pipeline must survive: conflict 0.2, error 0.1, drop 0.05, commit-then-drop
0.05. The audit log proves what the server committed; the score line says what was injected.
"""

from __future__ import annotations

import collections
import contextlib

import pytest
from ansible.module_utils.testing import patch_module_args

pytestmark = pytest.mark.lab_only

RATES = {"conflict_rate": 0.2, "error_rate": 0.1, "drop_rate": 0.05, "commit_drop_rate": 0.05}
OBJECTS = 24


@contextlib.contextmanager
def kube(lab):
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import _retry
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeModule

    # The fault knobs act on the fault proxy: every test here arms them.
    with patch_module_args({"kubeconfig": str(lab.fault_kubeconfig)}):
        module = KubeModule(argument_spec={}, supports_check_mode=True)
        # The product's bound, shorter pauses for the suite.
        module.backoff = _retry.kubernetes(base=0.05, cap=0.5)
        yield module


def config_map(namespace, name, data):
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": {"suite": "faults"}},
        "data": data,
    }


@pytest.fixture
def faults(lab):
    lab.faults.reset()
    yield lab.faults
    lab.faults.reset()


def committed(lab, namespace, verb):
    """Requests of ``verb`` in ``namespace`` the server applied (2xx), including lost replies, by name."""
    counts = collections.Counter()
    for record in lab.audit():
        if record["namespace"] == namespace and record["verb"] == verb and 200 <= record["code"] < 300:
            counts[record["name"] or "?"] += 1
    return counts


@pytest.mark.suite("faults")
@pytest.mark.suite("idempotence")
def test_writes_converge_in_one_run_under_faults(lab, kube_namespace, faults, capsys):
    names = ["cm-%02d" % i for i in range(OBJECTS)]
    with kube(lab) as m:
        m.resource("v1", "ConfigMap")
        lab.clear_audit()
        faults.update(dict(RATES, seed=2026))
        for name in names:
            m.create(config_map(kube_namespace, name, {"step": "created"}))
        for name in names:
            after, changed = m.patch("v1", "ConfigMap", name, kube_namespace, {"data": {"patched": "yes"}})
            assert changed and after["data"] == {"step": "created", "patched": "yes"}
        for name in names[: OBJECTS // 2]:
            after, changed = m.replace(config_map(kube_namespace, name, {"step": "replaced"}))
            assert changed and after["data"] == {"step": "replaced"}
        for name in names[OBJECTS // 2 :]:
            assert m.delete("v1", "ConfigMap", name, kube_namespace) is True
        # A second pass changes nothing and sends no write.
        writes_before = len(lab.mutating_requests())
        for name in names[: OBJECTS // 2]:
            assert (
                m.patch("v1", "ConfigMap", name, kube_namespace, {"data": {"step": "replaced"}})[1] is False
            )
            assert m.replace(config_map(kube_namespace, name, {"step": "replaced"}))[1] is False
        for name in names[OBJECTS // 2 :]:
            assert m.delete("v1", "ConfigMap", name, kube_namespace) is False
        second_pass_writes = len(lab.mutating_requests()) - writes_before
        injected = faults.to_dict()["injected"]
        faults.reset()
        retried = m.retried
        left = {
            i["metadata"]["name"]: i["data"]
            for i in m.list("v1", "ConfigMap", kube_namespace, "suite=faults")
        }

    assert left == {name: {"step": "replaced"} for name in names[: OBJECTS // 2]}
    creates = committed(lab, kube_namespace, "create")
    assert sum(creates.values()) == OBJECTS, creates  # each object created exactly once: no duplicate
    assert second_pass_writes == 0
    assert injected["conflict"] and injected["error"] and (injected["drop"] or injected["commit_drop"]), (
        injected
    )
    with capsys.disabled():
        print(
            "\nfault suite (adapter): %d objects, create/patch/replace/delete converged in one run; "
            "injected %s; %d retries; 0 duplicates; 0 writes on the second pass"
            % (OBJECTS, ", ".join("%s=%d" % kv for kv in sorted(injected.items())), retried)
        )


@pytest.mark.suite("faults")
def test_a_create_whose_reply_is_always_lost_is_still_one_object(lab, kube_namespace, faults):
    with kube(lab) as m:
        m.resource("v1", "ConfigMap")
        lab.clear_audit()
        faults.update({"commit_drop_rate": 1.0})
        made = m.create(config_map(kube_namespace, "lost", {"a": "1"}))
        faults.update({"commit_drop_rate": 0})
    assert made["metadata"]["name"] == "lost" and made["data"] == {"a": "1"}
    # one create committed (the retry met AlreadyExists: ours); the server names it, the old lab did not
    assert list(committed(lab, kube_namespace, "create").values()) == [1]


@pytest.mark.suite("faults")
def test_someone_elses_object_is_a_conflict_even_under_faults(lab, kube_namespace, faults):
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeError

    with kube(lab) as m:
        m.create(config_map(kube_namespace, "taken", {"owner": "other"}))
        faults.update(dict(RATES, seed=9))
        with pytest.raises(KubeError) as err:
            m.create(config_map(kube_namespace, "taken", {"owner": "me"}))
        faults.reset()
        assert m.get("v1", "ConfigMap", "taken", kube_namespace)["data"] == {"owner": "other"}
    assert "it already exists and is not the object this run sent (it differs at data.owner)" in err.value.msg


@pytest.mark.suite("faults")
def test_a_generated_name_is_created_once_when_its_reply_is_lost(lab, kube_namespace, faults):
    with kube(lab) as m:
        m.resource("v1", "ConfigMap")
        body = config_map(kube_namespace, None, {"a": "1"})
        del body["metadata"]["name"]
        body["metadata"]["generateName"] = "gen-"
        faults.update({"commit_drop_rate": 1.0})
        made = m.create(body)
        faults.update({"commit_drop_rate": 0, "conflict_rate": 0.5, "seed": 4})
        other = m.create(body)
        faults.reset()
        found = m.list("v1", "ConfigMap", kube_namespace, "suite=faults")
    assert (
        made["metadata"]["name"].startswith("gen-") and other["metadata"]["name"] != made["metadata"]["name"]
    )
    assert sorted(i["metadata"]["name"] for i in found) == sorted(
        [made["metadata"]["name"], other["metadata"]["name"]]
    )
