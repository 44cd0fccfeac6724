"""kube_object's runner with the adapter's in-memory stand-in: create, patch only what differs, delete."""

from __future__ import annotations

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeError
from ansible_collections.goldenimage.pipeline.plugins.modules import kube_object, kube_object_info
from fake_kube import FakeKube, params_of


class Kube(FakeKube):
    """The stand-in with what kube_object uses besides: masked values, retries, deletes with a policy."""

    def __init__(self, params, objects=(), **kwargs):
        super().__init__(params, objects, **kwargs)
        self.no_log_values = set()
        self.retried = 0
        self.deleted = []

    def delete(self, api_version, kind, name, namespace=None, before=None, propagation=None):
        self.deleted.append((kind, name, propagation))
        return super().delete(api_version, kind, name, namespace, before)

    def delete_and_wait(
        self, api_version, kind, name, namespace, timeout, sleep, before=None, propagation=None
    ):
        return self.delete(api_version, kind, name, namespace, before, propagation)


def cm(name, data, labels=None):
    meta = {"name": name, "namespace": "ns"}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def run(kube):
    return kube_object.Apply(kube).run()


def params(**given):
    return params_of(kube_object.argument_spec(), **given)


def test_a_missing_object_is_created_an_equal_one_left_a_differing_one_patched():
    kube = Kube(
        params(definitions=[cm("new", {"a": "1"}), cm("same", {"a": "1"}), cm("old", {"a": "2"})]),
        [cm("same", {"a": "1"}, {"other": "x"}), cm("old", {"a": "1"})],
    )
    result = run(kube)
    assert [o["action"] for o in result["objects"]] == ["created", "unchanged", "patched"]
    assert result["changed"] is True and result["msg"] == "created 1, patched 1, unchanged 1"
    assert kube.writes == [("create", "ConfigMap", "ns", "new"), ("patch", "ConfigMap", "ns", "old")]
    assert [d["before_header"] for d in result["diff"]] == ["ConfigMap ns/new", "ConfigMap ns/old"]
    again = Kube(kube.params, kube.objects.values())
    assert run(again)["changed"] is False and again.writes == []


def test_check_mode_predicts_and_writes_nothing():
    kube = Kube(
        params(definitions=[cm("new", {"a": "1"}), cm("old", {"a": "2"})]),
        [cm("old", {"a": "1"})],
        check_mode=True,
    )
    result = run(kube)
    assert [o["action"] for o in result["objects"]] == ["created", "patched"]
    assert kube.writes == []
    assert result["diff"][1]["after"]["data"] == {"a": "2"}


def test_patched_does_not_create_and_warns():
    kube = Kube(params(state="patched", definitions=[cm("gone", {"a": "1"})]))
    result = run(kube)
    assert result["objects"][0]["action"] == "missing" and result["changed"] is False
    assert kube.writes == [] and "ConfigMap ns/gone does not exist" in kube.warnings[0]


def test_absent_deletes_with_its_policy_and_a_gone_object_is_done():
    ours = cm("a", {})
    ours["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "goldenimage.pipeline"}
    kube = Kube(
        params(state="absent", propagation="Foreground", definitions=[cm("a", {}), cm("b", {})]),
        [ours],
    )
    result = run(kube)
    assert [o["action"] for o in result["objects"]] == ["deleted", "absent"]
    assert kube.deleted == [("ConfigMap", "a", "Foreground")]


def test_absent_refuses_what_the_collection_did_not_make_before_any_delete():
    kube = Kube(params(state="absent", definitions=[cm("a", {})]), [cm("a", {})])
    with pytest.raises(PipelineError) as caught:
        run(kube)
    assert "not made by this collection" in caught.value.msg and kube.deleted == []


def test_an_object_being_deleted_is_refused():
    dying = cm("a", {"a": "1"})
    dying["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    with pytest.raises(PipelineError) as caught:
        run(Kube(params(definitions=[cm("a", {"a": "2"})]), [dying]))
    assert "ConfigMap ns/a: it is being deleted" in caught.value.msg


def test_a_namespaced_object_without_a_namespace_is_refused():
    nameless = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    with pytest.raises(PipelineError) as caught:
        run(Kube(params(definitions=[nameless])))
    assert "neither the definition nor option namespace names a namespace" in caught.value.msg


def test_a_create_read_back_in_canonical_form_is_ours():
    want = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "disk", "namespace": "ns"},
        "spec": {"resources": {"requests": {"storage": "8388608"}}},
    }
    existing = dict(want, spec={"resources": {"requests": {"storage": "8Mi"}}, "volumeName": "pv"})

    class Lost(Kube):
        def create(self, definition):
            raise KubeError(
                "create: it already exists", reason="AlreadyExists", status=409, existing=existing
            )

    result = run(Lost(params(definitions=[want])))
    assert result["objects"][0]["action"] == "created"
    assert result["objects"][0]["object"]["spec"]["volumeName"] == "pv"

    other = dict(want, spec={"resources": {"requests": {"storage": "1Gi"}}})

    class Taken(Kube):
        def create(self, definition):
            raise KubeError("create: not ours", reason="AlreadyExists", status=409, existing=other)

    with pytest.raises(KubeError):
        run(Taken(params(definitions=[want])))


def test_secret_values_are_masked_and_hidden():
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s", "namespace": "ns"},
        "stringData": {"password": "pa55word!"},
    }
    kube = Kube(params(definitions=[secret]))
    result = run(kube)
    assert "pa55word!" in kube.no_log_values
    assert result["objects"][0]["object"]["data"] == {"password": "<hidden>"}


def test_info_reads_one_or_lists_and_hides_secret_values():
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s", "namespace": "ns"},
        "data": {"k": "dg=="},
    }
    kube = Kube(
        params_of(kube_object_info.argument_spec(), kind="Secret", namespace="ns", name="s"), [secret]
    )
    found = kube_object_info.Read(kube).run()
    assert found["api_found"] is True and found["resources"][0]["data"] == {"k": "<hidden>"}
    kube = Kube(
        params_of(kube_object_info.argument_spec(), kind="Secret", namespace="ns", name="x"), [secret]
    )
    assert kube_object_info.Read(kube).run()["resources"] == []
    listed = Kube(params_of(kube_object_info.argument_spec(), kind="Secret", secret_data=True), [secret])
    assert kube_object_info.Read(listed).run()["resources"][0]["data"] == {"k": "dg=="}
