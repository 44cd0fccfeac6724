"""kube_object's decisions: which definitions are refused, what a read object must hold, the patch."""

from __future__ import annotations

import base64

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import objects


def cm(name="a", namespace="ns", **fields):
    return dict(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}},
        **fields,
    )


@pytest.mark.parametrize(
    ("definitions", "state", "says"),
    [
        ([], "present", "at least one object is needed"),
        (["x"], "present", "a definition is a mapping"),
        (
            [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "x-"}}],
            "present",
            "no metadata.name",
        ),
        ([{"kind": "ConfigMap", "metadata": {"name": "x"}}], "absent", "no apiVersion"),
        ([cm(), cm()], "present", "the same object is listed twice"),
        ([cm()], "replaced", "state is one of present, patched, absent"),
    ],
)
def test_bad_definitions_are_refused_naming_the_object(definitions, state, says):
    with pytest.raises(Refusal) as caught:
        objects.check_definitions(definitions, state)
    assert says in caught.value.msg


def test_desired_fills_the_namespace_drops_server_fields_and_sends_string_data_as_data():
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s", "resourceVersion": "7", "uid": "u"},
        "stringData": {"k": "välue"},
        "data": {"old": "b2xk"},
        "status": {},
    }
    want = objects.desired(secret, "ns")
    assert want["metadata"] == {"name": "s", "namespace": "ns"}
    assert want["data"] == {"old": "b2xk", "k": base64.b64encode("välue".encode()).decode()}
    assert "stringData" not in want and "status" not in want
    assert objects.desired(cm(namespace="given"), "other")["metadata"]["namespace"] == "given"


def test_pending_ignores_what_the_server_added_and_quantities_in_another_form():
    want = {
        "metadata": {"labels": {"a": "1"}},
        "spec": {
            "resources": {"requests": {"storage": "8388608"}},
            "memory": {"guest": "8Gi"},
            "list": [{"x": 1}],
        },
    }
    have = {
        "metadata": {"labels": {"a": "1", "other": "x"}, "uid": "u"},
        "spec": {
            "resources": {"requests": {"storage": "8Mi"}},
            "memory": {"guest": "8Gi"},
            "list": [{"x": 1, "default": True}],
            "volumeName": "pv-1",
        },
    }
    assert objects.pending(want, have) == []
    assert objects.pending({"spec": {"resources": {"requests": {"storage": "9Mi"}}}}, have) == [
        "spec.resources.requests.storage"
    ]
    assert objects.pending({"spec": {"list": [{"x": 1}, {"x": 2}]}}, have) == ["spec.list"]
    assert objects.pending({"metadata": {"labels": {"a": "2"}}}, have) == ["metadata.labels.a"]
    # A label value that looks like a quantity is compared as text.
    assert objects.pending(
        {"metadata": {"labels": {"size": "1024"}}}, {"metadata": {"labels": {"size": "1Ki"}}}
    )
    assert objects.pending({"spec": {"empty": {}}}, {"spec": {}}) == []


def test_the_patch_carries_the_fields_not_the_name_or_kind():
    assert objects.patch_of(cm(data={"a": "1"})) == {"data": {"a": "1"}}
    labelled = cm()
    labelled["metadata"]["labels"] = {"x": "y"}
    assert objects.patch_of(labelled) == {"metadata": {"labels": {"x": "y"}}}


def test_secret_values_are_hidden_and_collected_in_every_form():
    before = {"kind": "Secret", "data": {"a": "MQ==", "b": "Mg=="}}
    after = {"kind": "Secret", "data": {"a": "MQ==", "b": "Mw=="}}
    assert objects.hide_secret(after, before)["data"] == {"a": "<hidden>", "b": "<hidden: changed>"}
    assert objects.hide_secret(after)["data"] == {"a": "<hidden>", "b": "<hidden>"}
    assert objects.hide_secret(cm(data={"a": "1"}))["data"] == {"a": "1"}
    values = objects.secret_values(
        [{"kind": "Secret", "stringData": {"p": "pass-word", "flag": "0"}, "data": {"k": "c2VjcmV0LWtleQ=="}}]
    )
    assert {"pass-word", base64.b64encode(b"pass-word").decode(), "c2VjcmV0LWtleQ==", "secret-key"} <= values
    assert "0" not in values


def test_a_url_with_credentials_is_refused_naming_the_object_and_the_field():
    dv = {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": "d", "namespace": "ns"},
        "spec": {"source": {"http": {"url": "https://u:hunter2@h/k.img"}}},
    }
    with pytest.raises(Refusal) as caught:
        objects.check_urls([cm(data={"a": "https://h/k?token=t"}), dv])
    msg = caught.value.msg
    assert msg.startswith(
        "definitions[1] (DataVolume ns/d) field spec.source.http.url (https://REDACTED@h/k.img)"
    )
    assert "hunter2" not in msg and "secretRef" in msg and "presigned URL" in msg
    # A Secret is where credentials belong; a signed URL is not refused (it is masked where printed).
    objects.check_urls([dict(cm(stringData={"url": "https://u:p@h/"}), kind="Secret")])
    objects.check_urls([cm(data={"a": "https://h/k?X-Amz-Signature=s1g"})])


def test_an_object_is_shown_with_its_urls_redacted():
    shown = objects.entry(cm(), "created", cm(data={"a": "https://h/k?X-Amz-Signature=s1g&part=1"}))
    assert shown["object"]["data"]["a"] == "https://h/k?X-Amz-Signature=REDACTED&part=1"


def test_summary_and_selector():
    entries = [{"action": "created"}, {"action": "unchanged"}, {"action": "created"}]
    assert objects.summary(entries) == "created 2, unchanged 1"
    assert objects.summary([]) == "nothing to do"
    assert objects.selector(["a=b", " !c "]) == "a=b,!c"
    assert objects.selector([]) is None


OURS = {"app.kubernetes.io/managed-by": "goldenimage.pipeline"}


def obj(api_version, kind, labels=None, annotations=None):
    meta = {"name": "x", "namespace": "ns", "labels": labels or {}, "annotations": annotations or {}}
    return {"apiVersion": api_version, "kind": kind, "metadata": meta}


@pytest.mark.parametrize(
    "current",
    [
        obj("batch/v1", "Job", OURS),
        obj("v1", "PersistentVolumeClaim", dict(OURS, **{"app.kubernetes.io/part-of": "windows-export"})),
        obj("cdi.kubevirt.io/v1beta1", "DataVolume", OURS),
    ],
)
def test_the_collections_own_intermediate_objects_may_be_deleted(current):
    objects.check_delete(current)


@pytest.mark.parametrize(
    "current, says",
    [
        # Data the collection did not make: a database's volume, whatever its name.
        (obj("v1", "PersistentVolumeClaim"), "not made by this collection"),
        (
            obj("v1", "PersistentVolumeClaim", {"app.kubernetes.io/managed-by": "dbinstance-operator"}),
            "kubectl",
        ),
        # A golden is refused even when it carries the collection's label, by label or by annotation.
        (obj("snapshot.storage.k8s.io/v1", "VolumeSnapshot", OURS), "golden_snapshot with state=absent"),
        (
            obj("v1", "PersistentVolumeClaim", dict(OURS, **{"kube-dc.com/golden-os": "ubuntu"})),
            "golden_snapshot",
        ),
        (
            obj("cdi.kubevirt.io/v1beta1", "DataVolume", OURS, {"kube-dc.com/os-family-id": "ubuntu"}),
            "who uses it",
        ),
        (obj("harvesterhci.io/v1beta1", "VirtualMachineImage", OURS), "baked_image with state=absent"),
        # A namespace takes everything in it along, labelled or not.
        (obj("v1", "Namespace", OURS), "kube_object never deletes one"),
    ],
)
def test_deletes_the_guarded_modules_own_are_refused(current, says):
    with pytest.raises(Refusal) as caught:
        objects.check_delete(current)
    assert says in caught.value.result["msg"]


def test_a_namespaced_object_needs_a_namespace_from_the_definition_or_the_option():
    nameless = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    assert objects.namespace_of(nameless, "ConfigMap", "ns") == "ns"
    for missing in (None, ""):
        with pytest.raises(Refusal) as caught:
            objects.namespace_of(nameless, "ConfigMap", missing)
        assert caught.value.result["refused"] is True
        assert caught.value.move == "give metadata.namespace or namespace"


def test_an_object_the_server_is_deleting_is_not_written_over():
    objects.check_write(obj("v1", "ConfigMap"))
    objects.check_write(None)
    dying = obj("v1", "ConfigMap")
    dying["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    with pytest.raises(
        Refusal, match=r"being deleted \(since 2026-12-01T00:00:00Z\); nothing was written"
    ) as caught:
        objects.check_write(dying)
    assert caught.value.move == "run again once it is gone"


def test_a_write_never_makes_deletable_what_was_not():
    tenants = obj("db.goldenimage.io/v1alpha1", "DBInstance", {"team": "payments"})
    claim = {"metadata": {"labels": OURS}}
    with pytest.raises(Refusal, match="would let kube_object delete it; nothing was written") as caught:
        objects.check_write(tenants, claim)
    assert caught.value.move.startswith("name an object that does not exist yet")
    objects.check_write(obj("db.goldenimage.io/v1alpha1", "DBInstance", OURS), claim)  # ours already
    objects.check_write(tenants, {"metadata": {"labels": {"team": "payments"}}})  # no label added
    objects.check_write(obj("v1", "Namespace"), claim)  # never deletable, so labelling it changes nothing
