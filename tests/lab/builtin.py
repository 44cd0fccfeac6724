"""Built-in resource types of the lab and their type-specific behaviour.

core/v1, storage.k8s.io/v1, batch/v1 and apiextensions.k8s.io/v1. Creating a CustomResourceDefinition
registers its served versions in the store at once, as an API server with a fast apiextensions
controller would.
"""

from __future__ import annotations

import base64

from .store import ApiError, ResourceType, Store, TypeHooks, invalid, now_rfc3339

DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
_ALL = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


def _rt(group, version, kind, plural, namespaced, short=(), sub=(), verbs=_ALL) -> ResourceType:
    return ResourceType(
        group=group,
        version=version,
        kind=kind,
        plural=plural,
        namespaced=namespaced,
        singular=kind.lower(),
        short_names=list(short),
        subresources=tuple(sub),
        verbs=verbs,
    )


BUILTIN_TYPES = [
    _rt(
        "",
        "v1",
        "Namespace",
        "namespaces",
        False,
        ["ns"],
        ["status"],
        tuple(v for v in _ALL if v != "deletecollection"),
    ),
    _rt("", "v1", "ConfigMap", "configmaps", True, ["cm"]),
    _rt("", "v1", "Secret", "secrets", True),
    _rt("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", True, ["pvc"], ["status"]),
    _rt("", "v1", "PersistentVolume", "persistentvolumes", False, ["pv"], ["status"]),
    _rt("", "v1", "Pod", "pods", True, ["po"], ["status", "log"]),
    _rt("", "v1", "Event", "events", True, ["ev"]),
    _rt("", "v1", "ServiceAccount", "serviceaccounts", True, ["sa"]),
    _rt("storage.k8s.io", "v1", "StorageClass", "storageclasses", False, ["sc"]),
    _rt("batch", "v1", "Job", "jobs", True, (), ["status"]),
    _rt("apps", "v1", "Deployment", "deployments", True, ["deploy"], ["status"]),
    _rt("", "v1", "Node", "nodes", False, ["no"], ["status"]),
    _rt(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        False,
        ["crd", "crds"],
        ["status"],
    ),
]


class NamespaceHooks(TypeHooks):
    def prepare_create(self, store, rt, obj):
        meta = obj["metadata"]
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj["status"] = {"phase": "Active"}

    def prepare_update(self, store, rt, old, new):
        new["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = new["metadata"]["name"]


class SecretHooks(TypeHooks):
    """stringData is write-only: merged into data as base64."""

    def prepare_create(self, store, rt, obj):
        self._fold(obj)
        obj.setdefault("type", "Opaque")

    def prepare_update(self, store, rt, old, new):
        self._fold(new)
        new.setdefault("type", old.get("type", "Opaque"))

    @staticmethod
    def _fold(obj):
        string_data = obj.pop("stringData", None)
        if string_data:
            data = obj.setdefault("data", {})
            for key, value in string_data.items():
                data[key] = base64.b64encode(str(value).encode()).decode()


class PodHooks(TypeHooks):
    def prepare_create(self, store, rt, obj):
        spec = obj.setdefault("spec", {})
        spec.setdefault("restartPolicy", "Always")
        obj["status"] = {"phase": "Pending"}


class PersistentVolumeClaimHooks(TypeHooks):
    def prepare_create(self, store, rt, obj):
        spec = obj.setdefault("spec", {})
        spec.setdefault("volumeMode", "Filesystem")
        if "storageClassName" not in spec:
            default = default_storage_class(store)
            if default:
                spec["storageClassName"] = default  # the DefaultStorageClass admission plugin does this
        obj["status"] = {"phase": "Pending"}


class PersistentVolumeHooks(TypeHooks):
    def prepare_create(self, store, rt, obj):
        spec = obj.setdefault("spec", {})
        spec.setdefault("volumeMode", "Filesystem")
        spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
        obj["status"] = {"phase": "Pending"}


class JobHooks(TypeHooks):
    def prepare_create(self, store, rt, obj):
        meta = obj["metadata"]
        spec = obj.setdefault("spec", {})
        for key, value in (("backoffLimit", 6), ("completions", 1), ("parallelism", 1), ("suspend", False)):
            spec.setdefault(key, value)
        template = spec.setdefault("template", {})
        if not spec.get("manualSelector"):
            labels = {
                "batch.kubernetes.io/controller-uid": meta["uid"],
                "batch.kubernetes.io/job-name": meta["name"],
            }
            labels.update({"controller-uid": meta["uid"], "job-name": meta["name"]})
            spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": meta["uid"]}}
            template.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
        pod_spec = template.get("spec") or {}
        if pod_spec.get("restartPolicy") not in ("Never", "OnFailure"):
            cause = {
                "reason": "FieldValueNotSupported",
                "message": f'Unsupported value: "{pod_spec.get("restartPolicy", "Always")}": '
                'supported values: "OnFailure", "Never"',
                "field": "spec.template.spec.restartPolicy",
            }
            raise invalid(rt, meta["name"], [cause])
        obj["status"] = {}


class CustomResourceDefinitionHooks(TypeHooks):
    def prepare_create(self, store, rt, obj):
        self._check(rt, obj)
        spec = obj["spec"]
        now = now_rfc3339()
        storage = [v["name"] for v in spec.get("versions", []) if v.get("storage")]
        obj["status"] = {
            "acceptedNames": dict(spec["names"]),
            "storedVersions": storage,
            "conditions": [
                {
                    "type": "NamesAccepted",
                    "status": "True",
                    "reason": "NoConflicts",
                    "message": "no conflicts found",
                    "lastTransitionTime": now,
                },
                {
                    "type": "Established",
                    "status": "True",
                    "reason": "InitialNamesAccepted",
                    "message": "the initial names have been accepted",
                    "lastTransitionTime": now,
                },
            ],
        }
        obj["status"]["acceptedNames"].setdefault("singular", spec["names"]["kind"].lower())
        obj["status"]["acceptedNames"].setdefault("listKind", spec["names"]["kind"] + "List")

    def prepare_update(self, store, rt, old, new):
        self._check(rt, new)

    @staticmethod
    def _check(rt, obj):
        name = obj["metadata"]["name"]
        spec = obj.get("spec") or {}
        names = spec.get("names") or {}
        causes = []
        if not spec.get("group"):
            causes.append(_cause("spec.group", "Required value"))
        if not names.get("plural") or not names.get("kind"):
            causes.append(_cause("spec.names", "Required value: plural and kind are required"))
        elif name != f"{names['plural']}.{spec.get('group', '')}":
            causes.append(
                _cause("metadata.name", f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group')
            )
        if spec.get("scope") not in ("Namespaced", "Cluster"):
            causes.append(
                _cause("spec.scope", 'Unsupported value: supported values: "Cluster", "Namespaced"')
            )
        versions = spec.get("versions") or []
        if not versions:
            causes.append(
                _cause("spec.versions", "Required value: must have exactly one version marked as storage")
            )
        elif sum(1 for v in versions if v.get("storage")) != 1:
            causes.append(
                _cause("spec.versions", "Invalid value: must have exactly one version marked as storage")
            )
        if causes:
            raise invalid(rt, name, causes)

    def after_write(self, store, rt, obj):
        spec = obj["spec"]
        names = spec["names"]
        served = set()
        for version in spec["versions"]:
            if not version.get("served", True):
                continue
            served.add(version["name"])
            subresources = version.get("subresources") or {}
            store.register(
                ResourceType(
                    group=spec["group"],
                    version=version["name"],
                    kind=names["kind"],
                    plural=names["plural"],
                    namespaced=spec["scope"] == "Namespaced",
                    singular=names.get("singular") or names["kind"].lower(),
                    short_names=list(names.get("shortNames") or []),
                    subresources=tuple(s for s in ("status", "scale") if s in subresources),
                    schema=(version.get("schema") or {}).get("openAPIV3Schema"),
                    categories=list(names.get("categories") or []),
                    custom=True,
                )
            )
        for old in store.types():
            if (old.group, old.plural) == (spec["group"], names["plural"]) and old.version not in served:
                store.unregister_version(old.group, old.version, old.plural)

    def after_delete(self, store, rt, obj):
        spec = obj.get("spec") or {}
        store.unregister(spec.get("group", ""), (spec.get("names") or {}).get("plural", ""))


def _cause(field: str, message: str) -> dict:
    reason = "FieldValueRequired" if message.startswith("Required") else "FieldValueInvalid"
    return {"reason": reason, "message": message, "field": field}


def default_storage_class(store: Store) -> str | None:
    try:
        rt = store.resource("storage.k8s.io", "v1", "storageclasses")
    except ApiError:
        return None
    entries, _, _, _ = store.list_page(rt)
    for entry in entries:
        annotations = entry.obj["metadata"].get("annotations") or {}
        if annotations.get(DEFAULT_CLASS_ANNOTATION) == "true":
            return entry.obj["metadata"]["name"]
    return None


HOOKS = {
    ("", "namespaces"): NamespaceHooks(),
    ("", "secrets"): SecretHooks(),
    ("", "pods"): PodHooks(),
    ("", "persistentvolumeclaims"): PersistentVolumeClaimHooks(),
    ("", "persistentvolumes"): PersistentVolumeHooks(),
    ("batch", "jobs"): JobHooks(),
    ("apiextensions.k8s.io", "customresourcedefinitions"): CustomResourceDefinitionHooks(),
}

BOOT_NAMESPACES = ("default", "kube-system")


def install(store: Store) -> None:
    """Register the built-in types and hooks, and create the namespaces every cluster has."""
    for rt in BUILTIN_TYPES:
        store.register(rt)
    store.hooks.update(HOOKS)
    ns_rt = store.resource("", "v1", "namespaces")
    for name in BOOT_NAMESPACES:
        if not store.exists(ns_rt, None, name):
            store.create(ns_rt, {"metadata": {"name": name}})
