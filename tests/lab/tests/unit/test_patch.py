import copy
import json

import pytest

from tests.lab.patch import (
    ApplyConflict,
    PatchError,
    apply_patch,
    decode_apply_body,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)

# --- merge patch (RFC 7386 appendix A behaviour) ---


@pytest.mark.parametrize(
    ("target", "patch", "expected"),
    [
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        (["a", "b"], ["c", "d"], ["c", "d"]),
        ({"a": "b"}, ["c"], ["c"]),
        ({"a": "foo"}, None, None),
        ({"a": "foo"}, "bar", "bar"),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ],
)
def test_merge_patch(target, patch, expected):
    before = copy.deepcopy(target)
    assert merge_patch(target, patch) == expected
    assert target == before


# --- JSON patch (RFC 6902) ---


@pytest.mark.parametrize(
    ("doc", "ops", "expected"),
    [
        ({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux"}], {"foo": "bar", "baz": "qux"}),
        (
            {"foo": ["bar", "baz"]},
            [{"op": "add", "path": "/foo/1", "value": "qux"}],
            {"foo": ["bar", "qux", "baz"]},
        ),
        ({"foo": ["bar"]}, [{"op": "add", "path": "/foo/-", "value": "end"}], {"foo": ["bar", "end"]}),
        ({"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}], {"foo": "bar"}),
        ({"foo": ["bar", "qux", "baz"]}, [{"op": "remove", "path": "/foo/1"}], {"foo": ["bar", "baz"]}),
        ({"baz": "qux"}, [{"op": "replace", "path": "/baz", "value": "boo"}], {"baz": "boo"}),
        (
            {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
            [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
            {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}},
        ),
        (
            {"foo": ["all", "grass", "cows", "eat"]},
            [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
            {"foo": ["all", "cows", "eat", "grass"]},
        ),
        ({"a": {"b": 1}}, [{"op": "copy", "from": "/a", "path": "/c"}], {"a": {"b": 1}, "c": {"b": 1}}),
        ({"a": 1}, [{"op": "move", "from": "/a", "path": "/a"}], {"a": 1}),
        ({"a": 1}, [{"op": "add", "path": "", "value": {"b": 2}}], {"b": 2}),
        ({"a/b": 1, "m~n": 2}, [{"op": "remove", "path": "/a~1b"}, {"op": "remove", "path": "/m~0n"}], {}),
        (
            {"metadata": {"labels": {"kube-dc.com/golden-active": "true"}}},
            [{"op": "remove", "path": "/metadata/labels/kube-dc.com~1golden-active"}],
            {"metadata": {"labels": {}}},
        ),
        (
            {"baz": "qux", "foo": ["a", 2, "c"]},
            [{"op": "test", "path": "/foo", "value": ["a", 2, "c"]}],
            None,
        ),
        ({"n": 1}, [{"op": "test", "path": "/n", "value": 1.0}], None),
        ({"q": {"bar": 2}}, [{"op": "add", "path": "/q/bar", "value": [1]}], {"q": {"bar": [1]}}),
    ],
)
def test_json_patch(doc, ops, expected):
    before = copy.deepcopy(doc)
    result = json_patch(doc, ops)
    assert result == (before if expected is None else expected)
    assert doc == before


@pytest.mark.parametrize(
    ("doc", "ops"),
    [
        ({"foo": "bar"}, [{"op": "add", "path": "/baz/bat", "value": "qux"}]),
        ({"foo": "bar"}, [{"op": "remove", "path": "/nope"}]),
        ({"foo": "bar"}, [{"op": "replace", "path": "/nope", "value": 1}]),
        ({"foo": [1]}, [{"op": "add", "path": "/foo/5", "value": 1}]),
        ({"foo": [1]}, [{"op": "add", "path": "/foo/01", "value": 1}]),
        ({"foo": [1]}, [{"op": "remove", "path": "/foo/-"}]),
        ({"baz": "qux"}, [{"op": "test", "path": "/baz", "value": "bar"}]),
        ({"b": True}, [{"op": "test", "path": "/b", "value": 1}]),
        ({"baz": "qux"}, [{"op": "test", "path": "/nope", "value": "bar"}]),
        ({"a": {"b": 1}}, [{"op": "move", "from": "/a", "path": "/a/c"}]),
        ({"a": 1}, [{"op": "frobnicate", "path": "/a"}]),
        ({"a": 1}, [{"op": "add", "path": "/b"}]),
        ({"a": 1}, [{"op": "copy", "path": "/b"}]),
        ({"a": 1}, [{"op": "add", "path": "b", "value": 1}]),
        ({"a": 1}, [{"op": "add", "path": "/~2", "value": 1}]),
        ({"a": 1}, {"op": "add", "path": "/b", "value": 1}),
        ({"a": 1}, [{"path": "/a"}]),
        ({"a": 1}, [{"op": "remove", "path": ""}]),
    ],
)
def test_json_patch_failures(doc, ops):
    with pytest.raises(PatchError):
        json_patch(doc, ops)


def test_json_patch_is_atomic():
    doc = {"a": 1}
    with pytest.raises(PatchError):
        json_patch(doc, [{"op": "add", "path": "/b", "value": 2}, {"op": "test", "path": "/a", "value": 9}])
    assert doc == {"a": 1}


# --- strategic merge patch ---

POD = {
    "metadata": {"name": "p", "labels": {"app": "seal"}, "finalizers": ["a", "b"]},
    "spec": {
        "containers": [
            {
                "name": "main",
                "image": "qemu:1",
                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                "ports": [{"containerPort": 80}],
                "args": ["x", "y"],
            },
            {"name": "side", "image": "busybox"},
        ],
        "volumes": [{"name": "disk", "persistentVolumeClaim": {"claimName": "c"}}],
        "tolerations": [{"key": "a"}],
    },
    "status": {"conditions": [{"type": "Ready", "status": "False"}]},
}


def test_smp_merges_lists_by_key_and_replaces_the_rest():
    before = copy.deepcopy(POD)
    patch = {
        "spec": {
            "containers": [
                {"name": "main", "image": "qemu:2", "env": [{"name": "C", "value": "3"}], "args": ["z"]}
            ],
            "tolerations": [{"key": "b"}],
        },
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}]
        },
    }
    out = strategic_merge_patch(POD, patch)
    main = out["spec"]["containers"][0]
    assert main["image"] == "qemu:2"
    assert [e["name"] for e in main["env"]] == ["A", "B", "C"]
    assert main["args"] == ["z"]
    assert main["ports"] == [{"containerPort": 80}]
    assert out["spec"]["containers"][1] == {"name": "side", "image": "busybox"}
    assert out["spec"]["tolerations"] == [{"key": "b"}]
    assert out["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "Initialized", "status": "True"},
    ]
    assert before == POD


def test_smp_null_deletes_and_finalizers_merge_as_a_set():
    out = strategic_merge_patch(
        POD, {"metadata": {"labels": {"app": None, "x": "y"}, "finalizers": ["b", "c"]}}
    )
    assert out["metadata"]["labels"] == {"x": "y"}
    assert out["metadata"]["finalizers"] == ["a", "b", "c"]


def test_smp_delete_directives():
    patch = {
        "metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]},
        "spec": {"containers": [{"name": "side", "$patch": "delete"}], "volumes": [{"$patch": "replace"}]},
    }
    out = strategic_merge_patch(POD, patch)
    assert out["metadata"]["finalizers"] == ["b"]
    assert [c["name"] for c in out["spec"]["containers"]] == ["main"]
    assert out["spec"]["volumes"] == []


def test_smp_map_directives():
    out = strategic_merge_patch(POD, {"metadata": {"labels": {"$patch": "replace", "only": "this"}}})
    assert out["metadata"]["labels"] == {"only": "this"}
    out = strategic_merge_patch(POD, {"status": {"$patch": "delete"}})
    assert "status" not in out
    out = strategic_merge_patch(
        {"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}},
        {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}},
    )
    assert out == {"spec": {"strategy": {"type": "Recreate"}}}


def test_smp_set_element_order():
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "side"}, {"name": "main"}],
            "containers": [{"name": "side", "image": "busybox:2"}],
        },
        "metadata": {"$setElementOrder/finalizers": ["b", "a"]},
    }
    out = strategic_merge_patch(POD, patch)
    assert [c["name"] for c in out["spec"]["containers"]] == ["side", "main"]
    assert out["spec"]["containers"][0]["image"] == "busybox:2"
    assert out["metadata"]["finalizers"] == ["b", "a"]


def test_smp_new_items_and_service_ports():
    out = strategic_merge_patch(POD, {"spec": {"containers": [{"name": "new", "image": "x", "env": []}]}})
    assert out["spec"]["containers"][-1] == {"name": "new", "image": "x", "env": []}
    svc = {"spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]}}
    out = strategic_merge_patch(svc, {"spec": {"ports": [{"port": 443, "targetPort": 8443}]}})
    assert out["spec"]["ports"][1] == {"port": 443, "name": "https", "targetPort": 8443}


def test_smp_custom_merge_keys():
    obj = {"spec": {"disks": [{"name": "a", "bus": "virtio"}]}}
    patch = {"spec": {"disks": [{"name": "a", "bootOrder": 1}]}}
    assert strategic_merge_patch(obj, patch)["spec"]["disks"] == [{"name": "a", "bootOrder": 1}]
    merged = strategic_merge_patch(obj, patch, merge_keys={"disks": "name"})
    assert merged["spec"]["disks"] == [{"name": "a", "bus": "virtio", "bootOrder": 1}]


@pytest.mark.parametrize(
    "patch",
    [
        {"spec": {"containers": [{"image": "no-name"}]}},
        {"spec": {"containers": ["not-a-map"]}},
        {"metadata": {"$patch": "explode"}},
        {"$patch": "delete"},
        {"metadata": {"$unknownDirective": 1}},
        ["not", "an", "object"],
    ],
)
def test_smp_failures(patch):
    with pytest.raises(PatchError):
        strategic_merge_patch(POD, patch)


# --- server-side apply ---

CM = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "catalog", "namespace": "golden-images", "labels": {"app": "catalog"}},
    "data": {"ubuntu": "24.04", "windows": "11"},
}


def _fields(obj, manager):
    entry = next(e for e in obj["metadata"]["managedFields"] if e["manager"] == manager)
    return entry


def test_apply_creates_and_records_the_manager():
    out = apply_patch(None, CM, "goldenimage", False)
    assert out["data"] == CM["data"]
    entry = _fields(out, "goldenimage")
    assert entry["operation"] == "Apply"
    assert entry["apiVersion"] == "v1"
    assert entry["fieldsType"] == "FieldsV1"
    assert entry["fieldsV1"] == {
        "f:data": {"f:ubuntu": {}, "f:windows": {}},
        "f:metadata": {"f:labels": {"f:app": {}}},
    }
    assert "managedFields" not in CM["metadata"]


def test_apply_conflict_and_force():
    live = apply_patch(None, CM, "goldenimage", False)
    other = {**CM, "metadata": {"name": "catalog", "namespace": "golden-images"}, "data": {"ubuntu": "22.04"}}
    with pytest.raises(ApplyConflict) as err:
        apply_patch(live, other, "someone-else", False)
    assert 'conflict with "goldenimage" using v1: .data.ubuntu' in str(err.value)
    assert err.value.causes() == [
        {
            "reason": "FieldManagerConflict",
            "message": 'conflict with "goldenimage" using v1',
            "field": ".data.ubuntu",
        }
    ]
    assert isinstance(err.value, PatchError)
    forced = apply_patch(live, other, "someone-else", True)
    assert forced["data"] == {"ubuntu": "22.04", "windows": "11"}
    assert _fields(forced, "goldenimage")["fieldsV1"]["f:data"] == {"f:windows": {}}
    assert _fields(forced, "someone-else")["fieldsV1"] == {"f:data": {"f:ubuntu": {}}}


def test_apply_same_value_is_shared_not_a_conflict():
    live = apply_patch(None, CM, "goldenimage", False)
    same = {**CM, "metadata": {"name": "catalog"}, "data": {"ubuntu": "24.04"}}
    out = apply_patch(live, same, "other", False)
    assert out["data"] == CM["data"]
    assert "f:ubuntu" in _fields(out, "goldenimage")["fieldsV1"]["f:data"]
    assert "f:ubuntu" in _fields(out, "other")["fieldsV1"]["f:data"]


def test_apply_removes_fields_the_manager_stopped_applying():
    live = apply_patch(None, CM, "goldenimage", False)
    smaller = {
        **CM,
        "metadata": {"name": "catalog", "namespace": "golden-images"},
        "data": {"ubuntu": "24.04"},
    }
    out = apply_patch(live, smaller, "goldenimage", False)
    assert out["data"] == {"ubuntu": "24.04"}
    assert "labels" not in out["metadata"]


def test_apply_keeps_fields_others_changed_without_apply():
    live = apply_patch(None, CM, "goldenimage", False)
    live["data"]["extra"] = "kept"
    out = apply_patch(live, CM, "goldenimage", False)
    assert out["data"]["extra"] == "kept"


def test_apply_noop_returns_the_object_unchanged():
    live = apply_patch(None, CM, "goldenimage", False)
    live["metadata"]["managedFields"][0]["time"] = "2020-01-01T00:00:00Z"
    again = apply_patch(live, CM, "goldenimage", False)
    assert again == live


def test_apply_merges_keyed_lists_and_ignores_fields():
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "a", "image": "x"}]},
        "status": {"phase": "Running"},
    }
    live = apply_patch(None, pod, "one", False, ignore_fields=("status",))
    assert "status" not in live
    second = {**pod, "spec": {"containers": [{"name": "b", "image": "y"}]}}
    out = apply_patch(live, second, "two", False)
    assert [c["name"] for c in out["spec"]["containers"]] == ["a", "b"]
    fields = _fields(out, "two")["fieldsV1"]["f:spec"]["f:containers"]
    assert fields == {'k:{"name":"b"}': {".": {}, "f:image": {}, "f:name": {}}}


@pytest.mark.parametrize(
    "applied",
    [
        {"kind": "ConfigMap", "metadata": {"name": "x"}},
        {"apiVersion": "v1", "metadata": {"name": "x"}},
        "not an object",
    ],
)
def test_apply_rejects_incomplete_objects(applied):
    with pytest.raises(PatchError):
        apply_patch(None, applied, "m", False)


def test_apply_requires_a_field_manager():
    with pytest.raises(PatchError):
        apply_patch(None, CM, "", False)


def test_decode_apply_body_accepts_json_and_yaml():
    assert decode_apply_body(json.dumps(CM).encode()) == CM
    assert decode_apply_body("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")["kind"] == "ConfigMap"
    with pytest.raises(PatchError):
        decode_apply_body(b"- a\n- b\n")
    with pytest.raises(PatchError):
        decode_apply_body(b"a: [\n")
