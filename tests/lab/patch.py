"""The four ways the apiserver changes an object in place: merge patch (RFC 7386), JSON patch
(RFC 6902), strategic merge patch, and server-side apply. None of them mutates its inputs.
"""

from __future__ import annotations

import copy
import datetime
import json

import yaml

from .fieldset import (
    MERGE_KEYS,
    SET_MERGE,
    delete_at,
    from_fields_v1,
    is_missing,
    merge_key,
    paths_of,
    to_fields_v1,
    value_at,
)

__all__ = [
    "MERGE_KEYS",
    "ApplyConflict",
    "PatchError",
    "apply_patch",
    "decode_apply_body",
    "json_patch",
    "merge_patch",
    "strategic_merge_patch",
]


class PatchError(ValueError):
    """A patch that cannot be applied; the server answers it with 422 (or 400 for a bad body)."""


class ApplyConflict(PatchError):
    """Server-side apply touched fields another applier owns with a different value."""

    def __init__(self, conflicts: list[tuple[str, str]], api_version: str):
        self.conflicts = conflicts
        self.api_version = api_version
        managers = sorted({m for m, _ in conflicts})
        count = len(conflicts)
        noun = "conflict" if count == 1 else "conflicts"
        if count == 1:
            manager, field = conflicts[0]
            text = 'Apply failed with 1 conflict: conflict with "%s" using %s: %s' % (
                manager,
                api_version,
                field,
            )
        else:
            lines = []
            for manager in managers:
                lines.append('conflicts with "%s" using %s:' % (manager, api_version))
                lines.extend("- " + f for m, f in conflicts if m == manager)
            text = "Apply failed with %d %s: %s" % (count, noun, "\n".join(lines))
        super().__init__(text)

    def causes(self) -> list[dict]:
        return [
            {
                "reason": "FieldManagerConflict",
                "message": 'conflict with "%s" using %s' % (manager, self.api_version),
                "field": field,
            }
            for manager, field in self.conflicts
        ]


# --- RFC 7386 -----------------------------------------------------------------------------------


def merge_patch(target, patch):
    """JSON merge patch: maps merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --- RFC 6902 -----------------------------------------------------------------------------------


def _tokens(pointer) -> list[str]:
    if not isinstance(pointer, str):
        raise PatchError("JSON pointer must be a string, got %r" % (pointer,))
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PatchError('JSON pointer "%s" must start with "/"' % pointer)
    tokens = []
    for raw in pointer[1:].split("/"):
        stripped = raw.replace("~0", "").replace("~1", "")
        if "~" in stripped:
            raise PatchError('invalid escape in JSON pointer "%s"' % pointer)
        tokens.append(raw.replace("~1", "/").replace("~0", "~"))
    return tokens


def _index(token: str, length: int, pointer: str, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return length
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise PatchError('invalid array index "%s" in "%s"' % (token, pointer))
    index = int(token)
    if index > length or (index == length and not allow_end):
        raise PatchError('array index %d out of bounds in "%s"' % (index, pointer))
    return index


def _get(doc, tokens: list[str], pointer: str):
    current = doc
    for token in tokens:
        if isinstance(current, dict):
            if token not in current:
                raise PatchError('doc is missing path: "%s"' % pointer)
            current = current[token]
        elif isinstance(current, list):
            current = current[_index(token, len(current), pointer, allow_end=False)]
        else:
            raise PatchError('doc is missing path: "%s"' % pointer)
    return current


def _add(doc, tokens: list[str], value, pointer: str):
    if not tokens:
        return value
    parent = _get(doc, tokens[:-1], pointer)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(last, len(parent), pointer, allow_end=True), value)
    else:
        raise PatchError('add operation does not apply: doc is missing path: "%s"' % pointer)
    return doc


def _remove(doc, tokens: list[str], pointer: str):
    if not tokens:
        raise PatchError("remove operation does not apply to the whole document")
    parent = _get(doc, tokens[:-1], pointer)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError('remove operation does not apply: doc is missing path: "%s"' % pointer)
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(last, len(parent), pointer, allow_end=False))
    raise PatchError('remove operation does not apply: doc is missing path: "%s"' % pointer)


def _json_equal(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def json_patch(target, ops):
    """Apply an RFC 6902 operation list; any failing operation rejects the whole patch."""
    if not isinstance(ops, list):
        raise PatchError("a JSON patch must be a list of operations")
    doc = copy.deepcopy(target)
    for number, op in enumerate(ops):
        if not isinstance(op, dict) or "op" not in op:
            raise PatchError("operation %d has no 'op'" % number)
        name = op["op"]
        if "path" not in op:
            raise PatchError("operation %d (%s) has no 'path'" % (number, name))
        pointer = op["path"]
        tokens = _tokens(pointer)
        if name in ("add", "replace", "test") and "value" not in op:
            raise PatchError("operation %d (%s) has no 'value'" % (number, name))
        if name == "add":
            doc = _add(doc, tokens, copy.deepcopy(op["value"]), pointer)
        elif name == "remove":
            _remove(doc, tokens, pointer)
        elif name == "replace":
            if tokens:
                _remove(doc, tokens, pointer)
            doc = _add(doc, tokens, copy.deepcopy(op["value"]), pointer)
        elif name in ("move", "copy"):
            if "from" not in op:
                raise PatchError("operation %d (%s) has no 'from'" % (number, name))
            source = _tokens(op["from"])
            if name == "move":
                if len(tokens) > len(source) and tokens[: len(source)] == source:
                    raise PatchError('cannot move "%s" into its own child "%s"' % (op["from"], pointer))
                if source == tokens:
                    _get(doc, source, op["from"])
                    continue
                value = _remove(doc, source, op["from"])
            else:
                value = copy.deepcopy(_get(doc, source, op["from"]))
            doc = _add(doc, tokens, value, pointer)
        elif name == "test":
            try:
                actual = _get(doc, tokens, pointer)
            except PatchError:
                raise PatchError('testing value "%s" failed: path is missing' % pointer) from None
            if not _json_equal(actual, op["value"]):
                raise PatchError('testing value "%s" failed' % pointer)
        else:
            raise PatchError('unexpected kind of operation: "%s"' % name)
    return doc


# --- strategic merge patch -------------------------------------------------------------------------

_DELETE = object()
_ORDER = "$setElementOrder/"
_DELETE_PRIMITIVES = "$deleteFromPrimitiveList/"


def _smp_value(target, patch, field, table):
    if isinstance(patch, dict):
        return _smp_map(target if isinstance(target, dict) else {}, patch, table)
    if isinstance(patch, list):
        return _smp_list(target if isinstance(target, list) else [], patch, field, table)
    return copy.deepcopy(patch)


def _fresh(patch, field, table):
    """A patch value placed where nothing was: directives are processed against emptiness."""
    return _smp_value(None, patch, field, table)


def _fresh_list(items: list, table: dict) -> list:
    fresh = (_fresh(item, None, table) for item in items)
    return [item for item in fresh if item is not _DELETE]


def _smp_map(target: dict, patch: dict, table: dict):
    directive = patch.get("$patch")
    if directive == "delete":
        return _DELETE
    if directive == "replace":
        rest = {k: v for k, v in patch.items() if k != "$patch"}
        return _smp_map({}, rest, table)
    if directive not in (None, "merge"):
        raise PatchError("Unknown patch type: %s in map: %r" % (directive, patch))
    result = copy.deepcopy(target)
    orders: dict[str, list] = {}
    for key, value in patch.items():
        if key.startswith(_DELETE_PRIMITIVES):
            name = key[len(_DELETE_PRIMITIVES) :]
            if not isinstance(value, list):
                raise PatchError("%s must be a list" % key)
            if isinstance(result.get(name), list):
                result[name] = [item for item in result[name] if item not in value]
        elif key.startswith(_ORDER):
            if not isinstance(value, list):
                raise PatchError("%s must be a list" % key)
            orders[key[len(_ORDER) :]] = value
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith((_DELETE_PRIMITIVES, _ORDER)):
            continue
        if key.startswith("$"):
            raise PatchError("unknown strategic merge patch directive %r" % key)
        if value is None:
            result.pop(key, None)
            continue
        merged = _smp_value(result.get(key), value, key, table)
        if merged is _DELETE:
            result.pop(key, None)
        else:
            result[key] = merged
    for name, order in orders.items():
        if isinstance(result.get(name), list):
            result[name] = _reorder(result[name], order, merge_key(table, name, result[name]))
    if "$retainKeys" in patch:
        keep = patch["$retainKeys"]
        if not isinstance(keep, list):
            raise PatchError("$retainKeys must be a list")
        result = {k: v for k, v in result.items() if k in keep}
    return result


def _reorder(items: list, order: list, key) -> list:
    def ident(x):
        if key not in (None, SET_MERGE) and isinstance(x, dict):
            return x.get(key)
        return x

    wanted = [ident(o) for o in order]
    placed = []
    for want in wanted:
        placed.extend(item for item in items if ident(item) == want and item not in placed)
    rest = [item for item in items if ident(item) not in wanted]
    return placed + rest


def _smp_list(target: list, patch: list, field, table: dict) -> list:
    def is_replace(item):
        return isinstance(item, dict) and item.get("$patch") == "replace"

    if any(is_replace(item) for item in patch):
        return _fresh_list([item for item in patch if not is_replace(item)], table)
    key = merge_key(table, field, target, patch)
    if key is None:
        return _fresh_list(patch, table)
    if key == SET_MERGE:
        result = copy.deepcopy(target)
        result.extend(copy.deepcopy(item) for item in patch if item not in result)
        return result
    result = copy.deepcopy(target)
    for item in patch:
        if not isinstance(item, dict):
            raise PatchError("%s: list item %r is not a map with merge key %s" % (field, item, key))
        if key not in item:
            raise PatchError("map: %r does not contain declared merge key: %s" % (item, key))
        index = next(
            (i for i, x in enumerate(result) if isinstance(x, dict) and x.get(key) == item[key]), None
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del result[index]
            continue
        if index is None:
            merged = _smp_map({}, item, table)
            if merged is not _DELETE:
                result.append(merged)
        else:
            merged = _smp_map(result[index], item, table)
            if merged is _DELETE:
                del result[index]
            else:
                result[index] = merged
    return result


def strategic_merge_patch(target, patch, merge_keys=None):
    """Kubernetes strategic merge patch for built-in kinds (lists merged by MERGE_KEYS)."""
    if not isinstance(patch, dict):
        raise PatchError("a strategic merge patch must be a JSON object")
    table = dict(MERGE_KEYS)
    table.update(merge_keys or {})
    result = _smp_map(target if isinstance(target, dict) else {}, patch, table)
    if result is _DELETE:
        raise PatchError("$patch: delete is not allowed on the whole object")
    return result


# --- server-side apply ---------------------------------------------------------------------------

# What the apiserver leaves out of an applier's field set (identity and server-owned fields).
_UNOWNED_META = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
)


def decode_apply_body(raw) -> dict:
    """Decode an `application/apply-patch+yaml` body, which clients send as YAML or JSON."""
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8")
    try:
        obj = json.loads(raw)
    except ValueError:
        try:
            obj = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise PatchError("error decoding YAML: %s" % exc) from None
    if not isinstance(obj, dict):
        raise PatchError("an apply patch must be a single object")
    return obj


def _owned_view(applied: dict) -> dict:
    view = {k: v for k, v in applied.items() if k not in ("apiVersion", "kind")}
    meta = {k: v for k, v in (view.get("metadata") or {}).items() if k not in _UNOWNED_META}
    if meta:
        view["metadata"] = meta
    else:
        view.pop("metadata", None)
    return view


def _ssa_merge(live, applied, field, table):
    if isinstance(applied, dict) and isinstance(live, dict):
        result = copy.deepcopy(live)
        for key, value in applied.items():
            if value is None:
                result.pop(key, None)
            else:
                result[key] = _ssa_merge(live.get(key), value, key, table)
        return result
    if isinstance(applied, list) and isinstance(live, list):
        key = merge_key(table, field, live, applied)
        if key == SET_MERGE:
            return copy.deepcopy(live) + [copy.deepcopy(i) for i in applied if i not in live]
        keyed = key is not None and all(isinstance(i, dict) and key in i for i in live + applied)
        if keyed:
            result = copy.deepcopy(live)
            for item in applied:
                index = next((i for i, x in enumerate(result) if x[key] == item[key]), None)
                if index is None:
                    result.append(copy.deepcopy(item))
                else:
                    result[index] = _ssa_merge(result[index], item, None, table)
            return result
    return copy.deepcopy(applied)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _render(path: tuple[str, ...]) -> str:
    """fieldsV1 path as the apiserver prints it in conflicts: `.spec.containers[name="x"].image`."""
    out = ""
    for token in path:
        if token.startswith("f:"):
            out += "." + token[2:]
        elif token.startswith("k:"):
            ident = json.loads(token[2:])
            out += "[" + ",".join("%s=%s" % (k, json.dumps(v)) for k, v in ident.items()) + "]"
        elif token.startswith("v:"):
            out += "[=" + token[2:] + "]"
    return out


def _content(obj: dict) -> dict:
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return {**obj, "metadata": meta}


def _drop_emptied_parents(obj: dict, prefix: tuple[str, ...], kept: set) -> None:
    """Remove maps a removal left empty, unless someone owns them (as the apiserver does)."""
    while prefix and prefix[-1].startswith("f:") and prefix not in kept:
        if value_at(obj, prefix) != {}:
            return
        delete_at(obj, prefix)
        prefix = prefix[:-1]


def apply_patch(
    live: dict | None,
    applied: dict,
    field_manager: str,
    force: bool,
    *,
    ignore_fields: tuple[str, ...] = (),
) -> dict:
    """Simplified server-side apply.

    The result is `live` with `applied` merged in (applied values win; maps merge; keyed lists merge
    by key; other lists are replaced). Fields this manager applied before and no longer applies are
    removed unless someone else owns them. Another Apply manager owning a field with a different
    value is a conflict (ApplyConflict) unless `force`, which takes the field over.
    `ignore_fields` names top-level fields the request may not change (e.g. `status` on the main
    resource of a kind with a status subresource); their applied values are dropped.
    """
    if not isinstance(applied, dict):
        raise PatchError("an apply patch must be a single object")
    if not applied.get("apiVersion") or not applied.get("kind"):
        raise PatchError("apiVersion and kind must be set in an apply patch")
    if not field_manager:
        raise PatchError("fieldManager is required for apply requests")
    table = MERGE_KEYS
    applied = {k: copy.deepcopy(v) for k, v in applied.items() if k not in ignore_fields}
    applied.get("metadata", {}).pop("managedFields", None)
    api_version = applied["apiVersion"]
    new_paths = paths_of(_owned_view(applied), table)

    live = copy.deepcopy(live) if live else None
    entries = list(((live or {}).get("metadata") or {}).get("managedFields") or [])
    mine = [e for e in entries if e.get("manager") == field_manager and e.get("operation") == "Apply"]
    others = [e for e in entries if e not in mine]
    old_paths: set = set()
    for entry in mine:
        old_paths |= from_fields_v1(entry.get("fieldsV1"))
    other_sets = [(entry, from_fields_v1(entry.get("fieldsV1"))) for entry in others]

    conflicts: list[tuple[str, str]] = []
    taken: dict[int, set] = {}
    if live is not None:
        for index, (entry, paths) in enumerate(other_sets):
            if entry.get("operation") != "Apply":
                continue
            for path in sorted(new_paths & paths):
                if path[-1] == ".":
                    continue
                have, want = value_at(live, path), value_at(applied, path)
                if is_missing(have) or have == want:
                    continue
                conflicts.append((entry.get("manager", ""), _render(path)))
                taken.setdefault(index, set()).add(path)
    if conflicts and not force:
        raise ApplyConflict(conflicts, api_version)

    result = _ssa_merge(live, applied, None, table) if live is not None else applied
    kept = set(new_paths)
    for index, (_entry, paths) in enumerate(other_sets):
        paths.difference_update(taken.get(index, set()))
        kept |= paths
    for path in sorted(old_paths - new_paths, key=len, reverse=True):
        prefix = path[:-1] if path[-1] == "." else path
        if any(k[: len(prefix)] == prefix for k in kept):
            continue
        delete_at(result, path)
        _drop_emptied_parents(result, prefix[:-1], kept)

    if live is not None and not taken and old_paths == new_paths and _content(result) == _content(live):
        # A no-op apply leaves the object, timestamps included, exactly as it was.
        return live

    managed = []
    for entry, paths in other_sets:
        if not paths:
            continue
        entry = copy.deepcopy(entry)
        if entry.get("fieldsType", "FieldsV1") == "FieldsV1":
            entry["fieldsV1"] = to_fields_v1(paths)
        managed.append(entry)
    managed.append(
        {
            "manager": field_manager,
            "operation": "Apply",
            "apiVersion": api_version,
            "time": _now(),
            "fieldsType": "FieldsV1",
            "fieldsV1": to_fields_v1(new_paths),
        }
    )
    result.setdefault("metadata", {})["managedFields"] = managed
    return result
