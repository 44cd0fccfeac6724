"""The Kubernetes adapter (module_utils/kube/_kube.py) in-process against the lab.

Real requests and real Status errors.

Faster than a playbook per case, and it reads the audit log to prove what was and was not sent.
"""

from __future__ import annotations

import contextlib
import json

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import errors

from tests.integration.support.runner import COLLECTIONS


@pytest.fixture(scope="module", autouse=True)
def _collection_path():
    import sys

    path = str(COLLECTIONS)
    if path not in sys.path:
        sys.path.insert(0, path)


@contextlib.contextmanager
def module(lab, check=False, diff=False, faults=False):
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeModule

    kubeconfig = lab.fault_kubeconfig if faults else lab.kubeconfig
    args = {"kubeconfig": str(kubeconfig), "_ansible_check_mode": check, "_ansible_diff": diff}
    with patch_module_args(args):
        yield KubeModule(argument_spec={}, supports_check_mode=True)


def config_map(namespace, name, data, labels=None):
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "data": data,
    }


def failure(call, capsys):
    with pytest.raises(SystemExit):
        call()
    return json.loads(capsys.readouterr().out)


@pytest.mark.lab_only
def test_writes_are_skipped_when_nothing_would_change(lab, kube_namespace):
    with module(lab) as m:
        made = m.create(config_map(kube_namespace, "cm", {"a": "1"}, {"app": "x"}))
        assert made["metadata"]["uid"]
        lab.clear_audit()
        changed = m.patch("v1", "ConfigMap", "cm", kube_namespace, {"data": {"a": "1"}})[1]
        assert changed is False
        changed = m.replace(config_map(kube_namespace, "cm", {"a": "1"}, {"app": "x"}))[1]
        assert changed is False
        assert lab.mutating_requests() == []

        patched, changed = m.patch("v1", "ConfigMap", "cm", kube_namespace, {"data": {"b": "2"}})
        assert changed is True
        assert patched["data"] == {"a": "1", "b": "2"}
        replaced, changed = m.replace(config_map(kube_namespace, "cm", {"c": "3"}, {"app": "x"}))
        assert changed is True
        assert replaced["data"] == {"c": "3"}
        assert [r["verb"] for r in lab.mutating_requests()] == ["patch", "update"]

        assert [i["metadata"]["name"] for i in m.list("v1", "ConfigMap", kube_namespace, "app=x")] == ["cm"]
        assert m.list("v1", "ConfigMap", kube_namespace, "app=y") == []
        assert m.delete("v1", "ConfigMap", "cm", kube_namespace) is True
        assert m.delete("v1", "ConfigMap", "cm", kube_namespace) is False
        assert m.get("v1", "ConfigMap", "cm", kube_namespace) is None


@pytest.mark.lab_only
def test_check_mode_predicts_and_sends_nothing(lab, kube_namespace):
    with module(lab) as m:
        m.create(config_map(kube_namespace, "cm", {"a": "1"}))
    lab.clear_audit()
    with module(lab, check=True) as m:
        new = m.create(config_map(kube_namespace, "new", {"x": "y"}))
        assert new["data"] == {"x": "y"}
        predicted, changed = m.patch("v1", "ConfigMap", "cm", kube_namespace, {"data": {"a": None, "b": "2"}})
        assert (changed, predicted["data"]) == (True, {"b": "2"})
        replaced, changed = m.replace(config_map(kube_namespace, "cm", {"c": "3"}))
        assert (changed, replaced["data"]) == (True, {"c": "3"})
        assert m.delete("v1", "ConfigMap", "cm", kube_namespace) is True
        assert m.mutations == 0
    assert lab.mutating_requests() == []
    assert {r["verb"] for r in lab.audit()} <= {"get", "list"}
    with module(lab) as m:
        assert m.get("v1", "ConfigMap", "cm", kube_namespace)["data"] == {"a": "1"}
        assert m.get("v1", "ConfigMap", "new", kube_namespace) is None


def test_api_errors_fail_with_the_status(lab, kube_namespace, capsys):
    with module(lab) as m:
        result = failure(
            lambda: errors.run_module(m, lambda: m.create(config_map("absent-ns", "cm", {}))), capsys
        )
    assert result["failed"] is True
    assert result["msg"] == 'create ConfigMap absent-ns/cm: namespaces "absent-ns" not found (NotFound, 404)'
    assert (result["reason"], result["status"]) == ("NotFound", 404)
    assert result["body"]["kind"] == "Status"


def test_a_create_that_meets_another_object_names_the_difference(lab, kube_namespace, capsys):
    with module(lab) as m:
        m.create(config_map(kube_namespace, "cm", {"a": "1"}))
        again = m.create(config_map(kube_namespace, "cm", {"a": "1"}))  # the same object: it is the result
        assert again["data"] == {"a": "1"}
        result = failure(
            lambda: errors.run_module(m, lambda: m.create(config_map(kube_namespace, "cm", {"a": "2"}))),
            capsys,
        )
    assert result["msg"] == (
        "create ConfigMap %s/cm: it already exists and is not the object this run sent "
        "(it differs at data.a); it was made by something else: remove it or choose another name"
        % kube_namespace
    )
    assert (result["reason"], result["status"], result["conflict"]) == ("AlreadyExists", 409, ["data.a"])


def test_an_unserved_kind_is_named(lab, capsys):
    with module(lab) as m:
        assert m.served("example.com/v1", "Nothing") is False
        assert m.served("snapshot.storage.k8s.io/v1", "VolumeSnapshot") is True
        result = failure(
            lambda: errors.run_module(m, lambda: m.resource("example.com/v1", "Nothing")), capsys
        )
    assert result["msg"].startswith("find Nothing in example.com/v1: the API server does not serve this kind")


@pytest.mark.lab_only
def test_each_kind_is_discovered_once_per_run(lab, kube_namespace):
    with module(lab) as m:
        lab.clear_audit()
        for _attempt in range(3):
            m.get("v1", "ConfigMap", "absent", kube_namespace)
            m.get("snapshot.storage.k8s.io/v1", "VolumeSnapshot", "absent", kube_namespace)
    paths = [r["path"] for r in lab.audit()]
    discovery = [p for p in paths if p in ("/api/v1", "/apis/snapshot.storage.k8s.io/v1")]
    assert len(discovery) <= 2, paths
    assert len([p for p in paths if "/configmaps/" in p]) == 3


@pytest.mark.lab_only
def test_a_wait_rides_out_server_errors(lab, kube_namespace):
    with module(lab, faults=True) as m:
        m.create(config_map(kube_namespace, "cm", {"a": "1"}))
        m.resource("v1", "ConfigMap")  # discovered before the faults start
        lab.clear_audit()
        lab.faults.update({"error_rate": 0.6, "seed": 7})
        try:
            obj, _duration = m.wait(
                "v1",
                "ConfigMap",
                "cm",
                kube_namespace,
                lambda o: (o is not None, None),
                lambda o: "present" if o else "absent",
                "ConfigMap cm",
                timeout=20,
                sleep=1,
            )
        finally:
            injected = lab.faults.to_dict()["injected"]["error"]
            lab.faults.reset()
    assert obj["data"] == {"a": "1"}
    assert injected >= 1
    # The wait ended on the condition, not the timeout: its reads of the ConfigMap are server errors
    # followed by the one read that succeeded, and nothing was read after it.
    reads = [r["code"] for r in lab.audit() if r["verb"] == "get" and r["name"] == "cm"]
    assert reads[-1] == 200 and reads.count(200) == 1, reads
    assert len(reads) >= 2 and set(reads[:-1]) <= {500, 503}, reads


def _old_list(m, api_version, kind, namespace=None, **params):
    """What KubeModule.list returned before it read raw pages: the dynamic client's objects, to_dict."""
    res = m.resource(api_version, kind)
    items = res.get(namespace=namespace if res.namespaced else None, **params).to_dict().get("items") or []
    for item in items:
        item.setdefault("apiVersion", api_version)
        item.setdefault("kind", kind)
    return items


@pytest.mark.lab_only
def test_list_reads_every_page_and_matches_the_dynamic_client(lab, kube_namespace):
    with module(lab) as m:
        for i in range(7):
            m.create(config_map(kube_namespace, "cm-%d" % i, {"i": str(i)}, {"set": "a" if i % 2 else "b"}))
        m.create(config_map(kube_namespace, "other", {"x": "y"}))
        lab.clear_audit()
        # With managedFields, which lists drop by default (test_kube_raw_reads), for a like-for-like compare.
        paged = m.list("v1", "ConfigMap", kube_namespace, "set", page=3, managed_fields=True)
        lists = [r for r in lab.audit() if r["verb"] == "list"]
        assert len(lists) == 3  # 7 objects at 3 a page: the continue token was followed to the end
        assert sorted(i["metadata"]["name"] for i in paged) == ["cm-%d" % i for i in range(7)]
        assert paged == _old_list(m, "v1", "ConfigMap", kube_namespace, label_selector="set")

        odd = m.list("v1", "ConfigMap", kube_namespace, "set=a", page=1, managed_fields=True)
        assert [i["metadata"]["name"] for i in odd] == ["cm-1", "cm-3", "cm-5"]
        assert odd == _old_list(m, "v1", "ConfigMap", kube_namespace, label_selector="set=a")

        named = m.list("v1", "ConfigMap", kube_namespace, field_selector="metadata.name=other", page=2)
        assert [i["metadata"]["name"] for i in named] == ["other"]

        everywhere = m.list("v1", "Namespace", page=2, managed_fields=True)
        # Namespaces of earlier tests may finish terminating between the two lists: compare the stable ones.
        stable = ("default", "kube-system", "kube-public", kube_namespace)

        def settled(items):
            return {i["metadata"]["name"]: i for i in items if i["metadata"]["name"] in stable}

        assert len(settled(everywhere)) == len(stable)
        assert settled(everywhere) == settled(_old_list(m, "v1", "Namespace"))
        assert {"apiVersion": "v1", "kind": "Namespace"}.items() <= everywhere[0].items()

        # One page when it fits; an absent namespace lists as empty; a read is the dynamic client's dict.
        lab.clear_audit()
        # The API server puts its CA bundle (kube-root-ca.crt) into every namespace.
        names = {i["metadata"]["name"] for i in m.list("v1", "ConfigMap", kube_namespace)}
        assert names - {"kube-root-ca.crt"} == {"cm-%d" % i for i in range(7)} | {"other"}
        assert len([r for r in lab.audit() if r["verb"] == "list"]) == 1
        assert m.list("v1", "ConfigMap", "no-such-namespace") == []
        res = m.resource("v1", "ConfigMap")
        assert (
            m.get("v1", "ConfigMap", "cm-3", kube_namespace)
            == res.get(name="cm-3", namespace=kube_namespace).to_dict()
        )
        assert m.get("v1", "ConfigMap", "absent", kube_namespace) is None


@pytest.mark.lab_only
def test_list_errors_keep_the_server_status(lab, kube_namespace):
    with module(lab) as m:
        with pytest.raises(errors.PipelineError) as caught:
            m.list("v1", "ConfigMap", kube_namespace, "a in (", page=2)
        assert caught.value.result["msg"].startswith("list ConfigMap in %s: " % kube_namespace)
        assert caught.value.result["status"] == 400
