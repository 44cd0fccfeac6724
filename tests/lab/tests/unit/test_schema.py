import copy

import pytest

from tests.lab.schema import apply_defaults, invalid_message, prune, pruned_fields, validate

SCHEMA = {
    "type": "object",
    "required": ["spec"],
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["sourceType", "displayName"],
            "properties": {
                "displayName": {"type": "string", "minLength": 1, "maxLength": 63},
                "sourceType": {"type": "string", "enum": ["download", "upload"]},
                "retry": {"type": "integer", "default": 3, "minimum": 0, "maximum": 10},
                "ratio": {"type": "number", "minimum": 0, "maximum": 1, "exclusiveMaximum": True},
                "enabled": {"type": "boolean"},
                "checksum": {"type": "string", "pattern": "^[0-9a-f]{128}$"},
                "size": {"x-kubernetes-int-or-string": True},
                "params": {"type": "object", "additionalProperties": {"type": "string"}},
                "tags": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "string"}},
                "note": {"type": "string", "nullable": True},
                "when": {"type": "string", "format": "date-time"},
                "tuning": {"type": "string", "format": "made-up-format"},
                "blob": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "mode": {"type": "string", "default": "Filesystem"},
                "nested": {
                    "type": "object",
                    "default": {},
                    "properties": {"depth": {"type": "integer", "default": 1}},
                },
            },
        },
    },
}

GOOD = {
    "apiVersion": "harvesterhci.io/v1beta1",
    "kind": "VirtualMachineImage",
    "metadata": {"name": "ubuntu", "labels": {"a": "b"}},
    "spec": {
        "displayName": "ubuntu-24.04",
        "sourceType": "download",
        "retry": 10,
        "ratio": 0.5,
        "enabled": True,
        "checksum": "a" * 128,
        "size": "10Gi",
        "params": {"numberOfReplicas": "3"},
        "tags": ["lts"],
        "note": None,
        "when": "2026-08-28T10:00:00Z",
        "tuning": "anything",
        "blob": {"free": {"form": [1, 2]}},
    },
}


def _with(**spec):
    obj = copy.deepcopy(GOOD)
    obj["spec"].update(spec)
    return obj


def test_good_object_is_valid():
    assert validate(SCHEMA, GOOD) == []
    assert validate(SCHEMA, _with(size=10)) == []
    assert validate(SCHEMA, _with(retry=3.0)) == []


def test_enum_message_matches_the_apiserver():
    causes = validate(SCHEMA, _with(sourceType="ftp"))
    assert causes == [
        {
            "reason": "FieldValueNotSupported",
            "message": 'Unsupported value: "ftp": supported values: "download", "upload"',
            "field": "spec.sourceType",
        }
    ]


def test_required_fields():
    obj = copy.deepcopy(GOOD)
    del obj["spec"]["displayName"]
    assert validate(SCHEMA, obj) == [
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.displayName"}
    ]
    assert validate(SCHEMA, {"apiVersion": "v1", "kind": "X", "metadata": {}}) == [
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec"}
    ]


@pytest.mark.parametrize(
    ("spec", "field", "reason", "fragment"),
    [
        (
            {"retry": 11},
            "spec.retry",
            "FieldValueInvalid",
            "spec.retry in body should be less than or equal to 10",
        ),
        ({"retry": -1}, "spec.retry", "FieldValueInvalid", "should be greater than or equal to 0"),
        (
            {"retry": "3"},
            "spec.retry",
            "FieldValueTypeInvalid",
            'spec.retry in body must be of type integer: "string"',
        ),
        ({"retry": True}, "spec.retry", "FieldValueTypeInvalid", "must be of type integer"),
        ({"retry": 2.5}, "spec.retry", "FieldValueTypeInvalid", "must be of type integer"),
        ({"ratio": 1}, "spec.ratio", "FieldValueInvalid", "should be less than 1"),
        ({"enabled": "yes"}, "spec.enabled", "FieldValueTypeInvalid", "must be of type boolean"),
        ({"displayName": ""}, "spec.displayName", "FieldValueInvalid", "should be at least 1 chars long"),
        (
            {"displayName": "x" * 64},
            "spec.displayName",
            "FieldValueInvalid",
            "should be at most 63 chars long",
        ),
        ({"checksum": "abc"}, "spec.checksum", "FieldValueInvalid", "should match '^[0-9a-f]{128}$'"),
        ({"size": True}, "spec.size", "FieldValueTypeInvalid", "integer,string"),
        (
            {"params": {"numberOfReplicas": 3}},
            "spec.params.numberOfReplicas",
            "FieldValueTypeInvalid",
            "string",
        ),
        ({"params": "x"}, "spec.params", "FieldValueTypeInvalid", "must be of type object"),
        ({"tags": []}, "spec.tags", "FieldValueInvalid", "should have at least 1 items"),
        ({"tags": ["a", "b", "c"]}, "spec.tags", "FieldValueTooMany", "must have at most 2 items"),
        ({"tags": ["a", 1]}, "spec.tags[1]", "FieldValueTypeInvalid", "must be of type string"),
        ({"when": "yesterday"}, "spec.when", "FieldValueInvalid", "must be of type date-time"),
        ({"enabled": None}, "spec.enabled", "FieldValueTypeInvalid", '"null"'),
    ],
)
def test_value_constraints(spec, field, reason, fragment):
    causes = validate(SCHEMA, _with(**spec))
    assert len(causes) == 1, causes
    assert causes[0]["field"] == field
    assert causes[0]["reason"] == reason
    assert fragment in causes[0]["message"]


def test_several_causes_and_path_prefix():
    causes = validate(SCHEMA["properties"]["spec"], {"sourceType": "x", "retry": 99}, "spec")
    assert {c["field"] for c in causes} == {"spec.displayName", "spec.sourceType", "spec.retry"}


def test_combinators():
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
    }
    assert validate(schema, {"a": "x"}) == []
    (none,) = validate(schema, {})
    assert "Found none valid" in none["message"]
    (both,) = validate(schema, {"a": "x", "b": "y"})
    assert "Found 2 valid alternatives" in both["message"]
    any_of = {"anyOf": [{"type": "string"}, {"type": "integer"}]}
    assert validate(any_of, 3) == []
    assert "anyOf" in validate(any_of, [])[0]["message"]
    assert validate({"not": {"type": "string"}}, "s")[0]["reason"] == "FieldValueInvalid"
    assert validate({"allOf": [{"minimum": 1}, {"maximum": 5}]}, 9)[0]["field"] == ""


def test_unique_items_and_forbidden_properties():
    assert validate({"type": "array", "x-kubernetes-list-type": "set"}, ["a", "a"])[0]["reason"] == (
        "FieldValueDuplicate"
    )
    schema = {"type": "object", "properties": {"a": {}}, "additionalProperties": False}
    assert validate(schema, {"a": 1, "b": 2})[0]["field"] == "b"


def test_defaults_fill_missing_fields_on_a_copy():
    obj = copy.deepcopy(GOOD)
    del obj["spec"]["retry"]
    out = apply_defaults(SCHEMA, obj)
    assert out["spec"]["retry"] == 3
    assert out["spec"]["mode"] == "Filesystem"
    assert out["spec"]["nested"] == {"depth": 1}
    assert "retry" not in obj["spec"]
    assert out["spec"]["note"] is None  # nullable nulls stay


def test_defaults_replace_non_nullable_nulls_and_drop_the_rest():
    out = apply_defaults(SCHEMA, _with(retry=None, enabled=None))
    assert out["spec"]["retry"] == 3
    assert "enabled" not in out["spec"]


def test_defaults_reach_array_items_and_maps():
    schema = {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "items": {"type": "object", "properties": {"x": {"type": "integer", "default": 7}}},
            },
            "map": {
                "type": "object",
                "additionalProperties": {"type": "object", "properties": {"y": {"default": "d"}}},
            },
        },
    }
    out = apply_defaults(schema, {"items": [{}, {"x": 1}], "map": {"k": {}}})
    assert out == {"items": [{"x": 7}, {"x": 1}], "map": {"k": {"y": "d"}}}


def test_prune_drops_unknown_fields_but_keeps_the_envelope_and_preserved_parts():
    obj = _with(surprise=1)
    obj["extraTop"] = {"x": 1}
    obj["metadata"]["annotations"] = {"a": "b"}
    out = prune(SCHEMA, obj)
    assert "surprise" not in out["spec"]
    assert "extraTop" not in out
    assert out["metadata"] == obj["metadata"]
    assert out["spec"]["blob"] == {"free": {"form": [1, 2]}}
    assert out["spec"]["params"] == {"numberOfReplicas": "3"}
    assert "surprise" in obj["spec"]
    assert sorted(pruned_fields(SCHEMA, obj)) == ["extraTop", "spec.surprise"]


def test_prune_inside_arrays_and_embedded_resources():
    schema = {
        "type": "object",
        "properties": {
            "list": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}},
            "embedded": {
                "type": "object",
                "x-kubernetes-embedded-resource": True,
                "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            },
            "empty": {"type": "object"},
        },
    }
    obj = {
        "list": [{"a": "x", "b": "y"}],
        "embedded": {
            "apiVersion": "v1",
            "kind": "PVC",
            "metadata": {"name": "n"},
            "spec": {"k": 1},
            "junk": 1,
        },
        "empty": {"gone": True},
    }
    assert prune(schema, obj) == {
        "list": [{"a": "x"}],
        "embedded": {"apiVersion": "v1", "kind": "PVC", "metadata": {"name": "n"}, "spec": {"k": 1}},
        "empty": {},
    }


def test_invalid_message_formats_like_the_apiserver():
    cause = validate(SCHEMA, _with(sourceType="ftp"))
    assert invalid_message("VirtualMachineImage.harvesterhci.io", "x", cause) == (
        'VirtualMachineImage.harvesterhci.io "x" is invalid: spec.sourceType: Unsupported value: "ftp": '
        'supported values: "download", "upload"'
    )
    assert invalid_message("VirtualMachineImage", "x", cause, group="harvesterhci.io").startswith(
        'VirtualMachineImage.harvesterhci.io "x" is invalid: spec.sourceType'
    )
    two = [
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.a"},
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.b"},
    ]
    assert invalid_message("Thing", "t", two) == (
        'Thing "t" is invalid: [spec.a: Required value, spec.b: Required value]'
    )
