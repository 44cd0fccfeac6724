"""List identity for built-in kinds, and the field sets server-side apply records.

Strategic merge patch and server-side apply both need to know how a list's items are identified:
by a merge key (`containers` by `name`), as a set of primitives (`finalizers`), or not at all (the
list is atomic and replaced whole). The apiserver reads this from Go struct tags; the lab keys it by
field name, which is unambiguous for the kinds the collection touches.

A field set is a set of paths; each path is a tuple of fieldsV1 tokens: `f:<field>` for a map key,
`k:{"name":"x"}` for a keyed list item, `v:<json>` for a set member and `.` for "the item itself".
"""

from __future__ import annotations

import json

SET_MERGE = "$set"

# field name -> merge key, SET_MERGE for sets of primitives, None for atomic lists.
MERGE_KEYS: dict[str, str | None] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "env": "name",
    "envFrom": None,
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "conditions": "type",
    "ownerReferences": "uid",
    "tolerations": None,
    "finalizers": SET_MERGE,
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
}


def merge_key(table: dict, field: str | None, *lists: list) -> str | None:
    """The merge key for list `field`; `ports` falls back to `port` for Service ports."""
    if field is None:
        return None
    key = table.get(field)
    if field == "ports" and key == "containerPort":
        items = [i for seq in lists for i in seq if isinstance(i, dict)]
        if items and not any("containerPort" in i for i in items) and any("port" in i for i in items):
            return "port"
    return key


def _keyed(items: list, key: str | None) -> bool:
    return key not in (None, SET_MERGE) and all(isinstance(i, dict) and key in i for i in items)


def item_token(key: str, value) -> str:
    return "k:" + json.dumps({key: value}, separators=(",", ":"), sort_keys=True)


def value_token(value) -> str:
    return "v:" + json.dumps(value, separators=(",", ":"), sort_keys=True)


def paths_of(obj: dict, table: dict) -> set[tuple[str, ...]]:
    """Every leaf path an object sets (empty maps and atomic lists are leaves)."""
    paths: set[tuple[str, ...]] = set()

    def walk(value, prefix: tuple[str, ...], field: str | None) -> None:
        if isinstance(value, dict) and value:
            for k, v in value.items():
                walk(v, (*prefix, "f:" + k), k)
            return
        if isinstance(value, list) and value:
            key = merge_key(table, field, value)
            if key == SET_MERGE and all(not isinstance(i, (dict, list)) for i in value):
                paths.add((*prefix, "."))
                for item in value:
                    paths.add((*prefix, value_token(item)))
                return
            if _keyed(value, key):
                for item in value:
                    item_prefix = (*prefix, item_token(key, item[key]))
                    paths.add((*item_prefix, "."))
                    for k, v in item.items():
                        walk(v, (*item_prefix, "f:" + k), k)
                return
        paths.add(prefix)

    walk(obj, (), None)
    paths.discard(())
    return paths


def to_fields_v1(paths: set[tuple[str, ...]]) -> dict:
    tree: dict = {}
    for path in sorted(paths):
        node = tree
        for token in path:
            node = node.setdefault(token, {})
    return tree


def from_fields_v1(tree: dict | None) -> set[tuple[str, ...]]:
    paths: set[tuple[str, ...]] = set()

    def walk(node: dict, prefix: tuple[str, ...]) -> None:
        for token, child in node.items():
            path = (*prefix, token)
            if isinstance(child, dict) and child:
                walk(child, path)
            else:
                paths.add(path)

    walk(tree or {}, ())
    return paths


def _decode(token: str):
    return json.loads(token[2:])


def _find_item(items: list, token: str) -> int | None:
    ident = _decode(token)
    for i, item in enumerate(items):
        if isinstance(item, dict) and all(item.get(k) == v for k, v in ident.items()):
            return i
    return None


_MISSING = object()


def value_at(obj, path: tuple[str, ...]):
    """The value a path points to, or a private sentinel when absent (see `is_missing`)."""
    current = obj
    for token in path:
        if token == ".":
            return current
        if token.startswith("f:") and isinstance(current, dict):
            if token[2:] not in current:
                return _MISSING
            current = current[token[2:]]
        elif token.startswith("k:") and isinstance(current, list):
            index = _find_item(current, token)
            if index is None:
                return _MISSING
            current = current[index]
        elif token.startswith("v:") and isinstance(current, list):
            member = _decode(token)
            return member if member in current else _MISSING
        else:
            return _MISSING
    return current


def is_missing(value) -> bool:
    return value is _MISSING


def delete_at(obj, path: tuple[str, ...]) -> None:
    """Remove what a path names from `obj` in place; absent paths are ignored."""
    if not path:
        return
    if path[-1] == ".":
        path = path[:-1]
    parent = value_at(obj, path[:-1]) if len(path) > 1 else obj
    token = path[-1]
    if token.startswith("f:") and isinstance(parent, dict):
        parent.pop(token[2:], None)
    elif token.startswith("k:") and isinstance(parent, list):
        index = _find_item(parent, token)
        if index is not None:
            del parent[index]
    elif token.startswith("v:") and isinstance(parent, list):
        member = _decode(token)
        if member in parent:
            parent.remove(member)
