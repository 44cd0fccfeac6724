"""openAPIV3Schema handling for custom resources, as the apiextensions apiserver does it:
prune unknown fields, apply defaults, then validate and report Kubernetes-style causes.

The supported subset is what structural schemas use: type, nullable, enum, required, properties,
additionalProperties, items, string/number/array/object bounds, pattern, a few formats,
allOf/anyOf/oneOf/not, x-kubernetes-int-or-string, x-kubernetes-preserve-unknown-fields and
x-kubernetes-embedded-resource. CEL rules (x-kubernetes-validations) are not evaluated.
"""

from __future__ import annotations

import base64
import binascii
import copy
import datetime
import json
import re

from .objects import invalid_message

__all__ = ["apply_defaults", "invalid_message", "prune", "pruned_fields", "validate"]

REQUIRED = "FieldValueRequired"
NOT_SUPPORTED = "FieldValueNotSupported"
INVALID = "FieldValueInvalid"
TYPE_INVALID = "FieldValueTypeInvalid"
FORBIDDEN = "FieldValueForbidden"

# The envelope every object carries; the apiserver validates it itself, never prunes it.
_ENVELOPE = ("apiVersion", "kind", "metadata")


def _child(path: str, key: str) -> str:
    return "%s.%s" % (path, key) if path else key


def _type_name(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _show(value) -> str:
    """A value as the apiserver quotes it in a message."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if value is None:
        return '"null"'
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _is_type(value, wanted: str) -> bool:
    if wanted == "object":
        return isinstance(value, dict)
    if wanted == "array":
        return isinstance(value, list)
    if wanted == "string":
        return isinstance(value, str)
    if wanted == "boolean":
        return isinstance(value, bool)
    if wanted == "integer":
        if isinstance(value, bool):
            return False
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if wanted == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return True


def _cause(reason: str, field: str, message: str) -> dict:
    return {"reason": reason, "message": message, "field": field}


def _invalid(field: str, value, detail: str) -> dict:
    return _cause(INVALID, field, "Invalid value: %s: %s" % (_show(value), detail))


def _type_error(field: str, value, wanted: str) -> dict:
    found = _type_name(value)
    return _cause(
        TYPE_INVALID,
        field,
        'Invalid value: "%s": %s in body must be of type %s: "%s"' % (found, field or "body", wanted, found),
    )


def _format_error(value: str, fmt: str) -> bool:
    """True when `value` is not in a format the apiserver checks; unknown formats pass."""
    try:
        if fmt == "date-time":
            datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        elif fmt == "date":
            datetime.date.fromisoformat(value)
        elif fmt == "byte":
            base64.b64decode(value, validate=True)
        elif fmt == "uuid":
            return not re.fullmatch(r"[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}", value)
    except (ValueError, binascii.Error):
        return True
    return False


_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def _check_scalar(s: dict, value, field: str, out: list) -> None:
    where = field or "body"
    if isinstance(value, str):
        if "minLength" in s and len(value) < s["minLength"]:
            out.append(
                _invalid(
                    field, value, "%s in body should be at least %d chars long" % (where, s["minLength"])
                )
            )
        if "maxLength" in s and len(value) > s["maxLength"]:
            out.append(
                _invalid(field, value, "%s in body should be at most %d chars long" % (where, s["maxLength"]))
            )
        if "pattern" in s and not re.search(s["pattern"], value):
            out.append(_invalid(field, value, "%s in body should match '%s'" % (where, s["pattern"])))
        fmt = s.get("format")
        if fmt and _format_error(value, fmt):
            out.append(
                _invalid(field, value, "%s in body must be of type %s: %s" % (where, fmt, _show(value)))
            )
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if "minimum" in s:
        low, exclusive = s["minimum"], s.get("exclusiveMinimum") is True
        if value < low or (exclusive and value == low):
            relation = "greater than" if exclusive else "greater than or equal to"
            out.append(_invalid(field, value, "%s in body should be %s %s" % (where, relation, low)))
    if "maximum" in s:
        high, exclusive = s["maximum"], s.get("exclusiveMaximum") is True
        if value > high or (exclusive and value == high):
            relation = "less than" if exclusive else "less than or equal to"
            out.append(_invalid(field, value, "%s in body should be %s %s" % (where, relation, high)))
    if s.get("multipleOf") and value % s["multipleOf"]:
        out.append(_invalid(field, value, "%s in body should be a multiple of %s" % (where, s["multipleOf"])))
    bounds = _INT_RANGES.get(s.get("format", ""))
    if bounds and not bounds[0] <= value <= bounds[1]:
        out.append(_invalid(field, value, "%s in body must be of type %s: %s" % (where, s["format"], value)))


def _check_array(s: dict, value: list, field: str, out: list) -> None:
    where = field or "body"
    if "minItems" in s and len(value) < s["minItems"]:
        out.append(
            _invalid(field, value, "%s in body should have at least %d items" % (where, s["minItems"]))
        )
    if "maxItems" in s and len(value) > s["maxItems"]:
        out.append(
            _cause(
                "FieldValueTooMany",
                field,
                "Too many: %d: must have at most %d items" % (len(value), s["maxItems"]),
            )
        )
    if s.get("uniqueItems") or s.get("x-kubernetes-list-type") == "set":
        seen: list = []
        for i, item in enumerate(value):
            if item in seen:
                out.append(
                    _cause("FieldValueDuplicate", "%s[%d]" % (field, i), "Duplicate value: %s" % _show(item))
                )
            seen.append(item)
    items = s.get("items")
    if isinstance(items, dict):
        for i, item in enumerate(value):
            _validate(items, item, "%s[%d]" % (field, i), out)


def _check_object(s: dict, value: dict, field: str, out: list) -> None:
    where = field or "body"
    for key in s.get("required") or []:
        if key not in value or value[key] is None:
            out.append(_cause(REQUIRED, _child(field, key), "Required value"))
    if "minProperties" in s and len(value) < s["minProperties"]:
        out.append(
            _invalid(
                field, value, "%s in body should have at least %d properties" % (where, s["minProperties"])
            )
        )
    if "maxProperties" in s and len(value) > s["maxProperties"]:
        out.append(
            _invalid(
                field, value, "%s in body should have at most %d properties" % (where, s["maxProperties"])
            )
        )
    props = s.get("properties") or {}
    extra = s.get("additionalProperties")
    for key, item in value.items():
        if key in props:
            _validate(props[key], item, _child(field, key), out)
        elif isinstance(extra, dict):
            _validate(extra, item, "%s.%s" % (field, key), out)
        elif extra is False and not s.get("x-kubernetes-preserve-unknown-fields"):
            out.append(_cause(FORBIDDEN, _child(field, key), "Forbidden: %s is a forbidden property" % key))


def _passes(s: dict, value, field: str) -> bool:
    trial: list = []
    _validate(s, value, field, trial)
    return not trial


def _check_combinators(s: dict, value, field: str, out: list) -> None:
    where = field or "body"
    for sub in s.get("allOf") or []:
        _validate(sub, value, field, out)
    if s.get("anyOf") and not any(_passes(sub, value, field) for sub in s["anyOf"]):
        out.append(_invalid(field, value, "%s in body must validate at least one schema (anyOf)" % where))
    if s.get("oneOf"):
        count = sum(_passes(sub, value, field) for sub in s["oneOf"])
        if count != 1:
            found = "Found none valid" if count == 0 else "Found %d valid alternatives" % count
            out.append(
                _invalid(
                    field,
                    value,
                    "%s in body must validate one and only one schema (oneOf). %s" % (where, found),
                )
            )
    if isinstance(s.get("not"), dict) and _passes(s["not"], value, field):
        out.append(_invalid(field, value, "%s in body must not validate the schema (not)" % where))


def _validate(s: dict, value, field: str, out: list) -> None:
    if value is None:
        if s.get("nullable") or (not s.get("type") and not s.get("x-kubernetes-int-or-string")):
            return
        out.append(_type_error(field, value, s.get("type") or "integer,string"))
        return
    if s.get("x-kubernetes-int-or-string"):
        if not (isinstance(value, str) or _is_type(value, "integer")):
            out.append(_type_error(field, value, "integer,string"))
            return
    elif s.get("type") and not _is_type(value, s["type"]):
        out.append(_type_error(field, value, s["type"]))
        return
    if "enum" in s and not any(_same(value, e) for e in s["enum"]):
        supported = ", ".join(_show(e) for e in s["enum"])
        out.append(
            _cause(
                NOT_SUPPORTED,
                field,
                "Unsupported value: %s: supported values: %s" % (_show(value), supported),
            )
        )
    if isinstance(value, dict):
        _check_object(s, value, field, out)
    elif isinstance(value, list):
        _check_array(s, value, field, out)
    else:
        _check_scalar(s, value, field, out)
    _check_combinators(s, value, field, out)


def _same(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def validate(schema: dict, obj, path: str = "") -> list[dict]:
    """Validate `obj` against `schema`; an empty list means valid. `path` prefixes field names."""
    out: list[dict] = []
    _validate(schema or {}, obj, path, out)
    return out


def _default(s: dict, value):
    if isinstance(value, dict):
        props = s.get("properties") or {}
        for key, sub in props.items():
            current = value.get(key, _ABSENT)
            if current is None and not sub.get("nullable"):
                if "default" in sub:
                    value[key] = copy.deepcopy(sub["default"])
                else:
                    del value[key]
            elif current is _ABSENT and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if value.get(key) is not None:
                value[key] = _default(sub, value[key])
        extra = s.get("additionalProperties")
        if isinstance(extra, dict):
            for key in [k for k in value if k not in props]:
                if value[key] is not None:
                    value[key] = _default(extra, value[key])
    elif isinstance(value, list) and isinstance(s.get("items"), dict):
        return [_default(s["items"], item) if item is not None else item for item in value]
    return value


_ABSENT = object()


def apply_defaults(schema: dict, obj):
    """Fill `default` values in (recursively) and drop nulls of non-nullable fields, on a copy."""
    return _default(schema or {}, copy.deepcopy(obj))


def _prune(s: dict, value, field: str, dropped: list, root: bool) -> None:
    if isinstance(value, dict):
        props = s.get("properties") or {}
        extra = s.get("additionalProperties")
        keep_unknown = bool(s.get("x-kubernetes-preserve-unknown-fields")) or extra is True
        envelope = root or s.get("x-kubernetes-embedded-resource")
        for key in list(value):
            if envelope and key in _ENVELOPE:
                continue
            if key in props:
                _prune(props[key], value[key], _child(field, key), dropped, False)
            elif isinstance(extra, dict):
                _prune(extra, value[key], "%s[%s]" % (field, key), dropped, False)
            elif not keep_unknown:
                dropped.append(_child(field, key))
                del value[key]
    elif isinstance(value, list) and isinstance(s.get("items"), dict):
        for i, item in enumerate(value):
            _prune(s["items"], item, "%s[%d]" % (field, i), dropped, False)


def pruned_fields(schema: dict, obj) -> list[str]:
    """The paths `prune` would drop (the apiserver returns them as 'unknown field' warnings)."""
    dropped: list[str] = []
    _prune(schema or {}, copy.deepcopy(obj), "", dropped, True)
    return dropped


def prune(schema: dict, obj):
    """Drop fields the schema does not declare, unless x-kubernetes-preserve-unknown-fields."""
    result = copy.deepcopy(obj)
    _prune(schema or {}, result, "", [], True)
    return result
