"""Discovery documents (/version, /api, /apis, APIResourceLists) built from the store's types."""

from __future__ import annotations

import json
import re
import threading

from .store import ResourceType, Store

VERSION_INFO = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0-lab",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2024-08-13T00:00:00Z",
    "goVersion": "go1.22.5",
    "compiler": "gc",
    "platform": "linux/amd64",
}
_KUBE_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")
_SUB_VERBS = {"status": ["get", "patch", "update"], "log": ["get"]}


def version_priority(version: str) -> tuple:
    """Sort key putting the version Kubernetes prefers first (v2 > v1 > v1beta2 > v1alpha1 > other)."""
    m = _KUBE_VERSION.match(version)
    if not m:
        return (3, version)
    major, stage, minor = int(m.group(1)), m.group(2), int(m.group(3) or 0)
    rank = {None: 0, "beta": 1, "alpha": 2}[stage]
    return (rank, -major, -minor)


def _dump(doc: dict) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def resource_entries(types: list[ResourceType]) -> list[dict]:
    out = []
    for rt in sorted(types, key=lambda t: t.plural):
        entry = {
            "name": rt.plural,
            "singularName": rt.singular or rt.kind.lower(),
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": sorted(rt.verbs),
        }
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        if rt.categories:
            entry["categories"] = list(rt.categories)
        out.append(entry)
        for sub in rt.subresources:
            if sub in _SUB_VERBS:
                out.append(
                    {
                        "name": f"{rt.plural}/{sub}",
                        "singularName": "",
                        "namespaced": rt.namespaced,
                        "kind": rt.kind,
                        "verbs": _SUB_VERBS[sub],
                    }
                )
    return out


class Discovery:
    """Serialized discovery documents, rebuilt when the set of types changes."""

    def __init__(self, store: Store, server_address: str = "127.0.0.1:0"):
        self.store = store
        self.server_address = server_address
        self._lock = threading.Lock()
        self._cache: dict[str, bytes] = {}
        store.type_listeners.append(self.invalidate)

    def invalidate(self) -> None:
        with self._lock:
            self._cache = {}

    def _groups(self) -> dict[str, dict[str, list[ResourceType]]]:
        groups: dict[str, dict[str, list[ResourceType]]] = {}
        for rt in self.store.types():
            groups.setdefault(rt.group, {}).setdefault(rt.version, []).append(rt)
        return groups

    def _group_doc(self, name: str, versions: list[str]) -> dict:
        ordered = sorted(versions, key=version_priority)
        entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in ordered]
        return {"name": name, "versions": entries, "preferredVersion": dict(entries[0])}

    def document(self, path: str) -> bytes | None:
        """The discovery document for path, or None when path is not a discovery path."""
        with self._lock:
            hit = self._cache.get(path)
        if hit is not None:
            return hit
        doc = self._build(path)
        if doc is None:
            return None
        raw = _dump(doc)
        with self._lock:
            self._cache[path] = raw
        return raw

    def _build(self, path: str) -> dict | None:
        parts = [p for p in path.split("/") if p]
        groups = self._groups()
        if parts == ["version"]:
            return VERSION_INFO
        if parts == ["api"]:
            return {
                "kind": "APIVersions",
                "versions": sorted(groups.get("", {}), key=version_priority),
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": self.server_address}
                ],
            }
        if len(parts) == 2 and parts[0] == "api" and parts[1] in groups.get("", {}):
            return {
                "kind": "APIResourceList",
                "groupVersion": parts[1],
                "resources": resource_entries(groups[""][parts[1]]),
            }
        if parts == ["apis"]:
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [self._group_doc(g, list(v)) for g, v in sorted(groups.items()) if g],
            }
        if len(parts) == 2 and parts[0] == "apis" and parts[1] in groups and parts[1]:
            return dict(self._group_doc(parts[1], list(groups[parts[1]])), kind="APIGroup", apiVersion="v1")
        if len(parts) == 3 and parts[0] == "apis" and parts[2] in groups.get(parts[1], {}) and parts[1]:
            return {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"{parts[1]}/{parts[2]}",
                "resources": resource_entries(groups[parts[1]][parts[2]]),
            }
        return None
