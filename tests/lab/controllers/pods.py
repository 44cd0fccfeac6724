"""From a Pod spec to a process on this machine: the container's argv, environment and volumes.

Only allow-listed executables run. Volumes become real paths: a claim's file or directory from the
volume store, emptyDir and projected configMap/secret files in the pod's scratch directory. Arguments,
environment values and the working directory under a mountPath or devicePath are rewritten to them.
"""

from __future__ import annotations

import base64
import json
import os
import pathlib
import re
import shutil
import tempfile
from dataclasses import dataclass, field

from ..objects import ApiError
from . import LabContext
from .kit import CORE
from .storage import ensure_bound, volume_path

# Executables a Job may run; extend it (or set `allowed_commands` on the LabContext) for new tools.
ALLOWED_COMMANDS: set[str] = {
    "qemu-img",
    "sha256sum",
    "sha512sum",
    "dd",
    "cp",
    "ls",
    "cat",
    "stat",
    "truncate",
    "true",
    "false",
    "echo",
    "sleep",
    "python3",  # the seal verifier (module_utils/disk/_seal_cli.py), shipped to the pod in a ConfigMap
}
NODE_NAME = "lab-node"
_VAR_REF = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")


def allowed_commands(lab: LabContext) -> set[str]:
    return ALLOWED_COMMANDS | set(lab.allowed_commands)


class PodNotReady(Exception):
    """The pod cannot start yet (unbound claim, missing Secret); it stays Pending."""

    def __init__(self, reason: str, message: str, scheduling: bool):
        super().__init__(message)
        self.reason, self.message, self.scheduling = reason, message, scheduling


class StartError(Exception):
    """The container cannot run at all; the pod fails as a container that failed to start does."""


@dataclass
class Plan:
    argv: list[str]
    env: dict[str, str]
    cwd: pathlib.Path
    scratch: pathlib.Path
    timeout: float
    mounts: list[tuple[str, pathlib.Path]] = field(default_factory=list)

    def as_seen_in_pod(self, text: str) -> str:
        """Output with real volume paths shown as the container paths the command was given."""
        for inner, real in sorted(self.mounts, key=lambda m: -len(str(m[1]))):
            text = text.replace(str(real), inner.rstrip("/") or "/")
        return text


def _expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: defined variables are substituted, `$$` escapes a dollar."""

    def sub(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _VAR_REF.sub(sub, text)


def _key_ref(lab: LabContext, namespace: str, ref: dict, plural: str) -> str | None:
    rt = lab.store.resource(CORE, "v1", plural)
    try:
        obj = lab.store.get(rt, namespace, ref.get("name", ""))
    except ApiError as exc:
        if ref.get("optional"):
            return None
        msg = f'{rt.singular or plural} "{ref.get("name")}" not found'
        raise PodNotReady("CreateContainerConfigError", msg, False) from exc
    if plural == "secrets":
        raw = (obj.get("data") or {}).get(ref.get("key", ""))
        value = base64.b64decode(raw).decode(errors="replace") if raw is not None else None
    else:
        value = (obj.get("data") or {}).get(ref.get("key", ""))
    if value is None and not ref.get("optional"):
        msg = f"couldn't find key {ref.get('key')} in {plural[:-1]} {namespace}/{ref.get('name')}"
        raise PodNotReady("CreateContainerConfigError", msg, False)
    return value


def _field_ref(pod: dict, path: str) -> str:
    meta = pod["metadata"]
    values = {
        "metadata.name": meta["name"],
        "metadata.namespace": meta["namespace"],
        "metadata.uid": meta["uid"],
        "spec.nodeName": (pod.get("spec") or {}).get("nodeName") or NODE_NAME,
        "spec.serviceAccountName": (pod.get("spec") or {}).get("serviceAccountName", "default"),
        "status.podIP": "127.0.0.1",
        "status.hostIP": "127.0.0.1",
    }
    if path in values:
        return values[path]
    match = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if match:
        return (meta.get(match.group(1)) or {}).get(match.group(2), "")
    return ""


def _container_env(lab: LabContext, pod: dict, container: dict) -> dict[str, str]:
    namespace = pod["metadata"]["namespace"]
    env: dict[str, str] = {}
    for source in container.get("envFrom") or ():
        prefix = source.get("prefix", "")
        for ref_key, plural in (("secretRef", "secrets"), ("configMapRef", "configmaps")):
            ref = source.get(ref_key)
            if not ref:
                continue
            rt = lab.store.resource(CORE, "v1", plural)
            try:
                data = lab.store.get(rt, namespace, ref.get("name", "")).get("data") or {}
            except ApiError as exc:
                if ref.get("optional"):
                    continue
                msg = f'{plural[:-1]} "{ref.get("name")}" not found'
                raise PodNotReady("CreateContainerConfigError", msg, False) from exc
            for key, value in data.items():
                env[prefix + key] = (
                    base64.b64decode(value).decode(errors="replace") if plural == "secrets" else value
                )
    for item in container.get("env") or ():
        name = item.get("name", "")
        source = item.get("valueFrom")
        if source is None:
            env[name] = _expand(str(item.get("value", "")), env)
        elif source.get("secretKeyRef"):
            value = _key_ref(lab, namespace, source["secretKeyRef"], "secrets")
            if value is not None:
                env[name] = value
        elif source.get("configMapKeyRef"):
            value = _key_ref(lab, namespace, source["configMapKeyRef"], "configmaps")
            if value is not None:
                env[name] = value
        elif source.get("fieldRef"):
            env[name] = _field_ref(pod, source["fieldRef"].get("fieldPath", ""))
    return env


def _write_projection(lab: LabContext, namespace: str, volume: dict, kind: str, dst: pathlib.Path) -> None:
    """Files of a configMap or secret volume, one per key (or per `items` entry)."""
    spec = volume[kind]
    plural = "secrets" if kind == "secret" else "configmaps"
    name = spec.get("secretName") if kind == "secret" else spec.get("name")
    rt = lab.store.resource(CORE, "v1", plural)
    try:
        obj = lab.store.get(rt, namespace, name or "")
    except ApiError as exc:
        if spec.get("optional"):
            dst.mkdir(parents=True, exist_ok=True)
            return
        msg = f'MountVolume.SetUp failed for volume "{volume["name"]}" : {plural[:-1]} "{name}" not found'
        raise PodNotReady("FailedMount", msg, False) from exc
    if kind == "secret":
        data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    else:
        data = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
        data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    items = spec.get("items") or [{"key": k, "path": k} for k in data]
    dst.mkdir(parents=True, exist_ok=True)
    for item in items:
        if item["key"] in data:
            target = dst / item["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data[item["key"]])


def _write_projected(lab: LabContext, pod: dict, projected: dict, dst: pathlib.Path) -> None:
    """Files of a projected volume: configMap, secret, downwardAPI and serviceAccountToken sources."""
    namespace = pod["metadata"]["namespace"]
    dst.mkdir(parents=True, exist_ok=True)
    for source in projected.get("sources") or ():
        for kind in ("configMap", "secret"):
            if source.get(kind) is not None:
                spec = dict(source[kind])
                if kind == "secret":
                    spec["secretName"] = spec.get("name")
                _write_projection(lab, namespace, {"name": "projected", kind: spec}, kind, dst)
        for item in (source.get("downwardAPI") or {}).get("items") or ():
            value = _field_ref(pod, (item.get("fieldRef") or {}).get("fieldPath", ""))
            (dst / item["path"]).write_text(value)
        token = source.get("serviceAccountToken")
        if token is not None:
            account = (pod.get("spec") or {}).get("serviceAccountName") or "default"
            path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token"
            body = {"spec": {"expirationSeconds": token.get("expirationSeconds") or 3600}}
            reply = lab.store.request("POST", path, body)
            if reply.status >= 300:
                msg = f'MountVolume.SetUp failed: token for serviceaccount "{account}": HTTP {reply.status}'
                raise PodNotReady("FailedMount", msg, False)
            (dst / (token.get("path") or "token")).write_text(json.loads(reply.data)["status"]["token"])


def _volume_sources(lab: LabContext, pod: dict, scratch: pathlib.Path) -> dict[str, tuple[str, pathlib.Path]]:
    """Volume name -> (volumeMode-like kind, real path), binding claims on the way."""
    namespace = pod["metadata"]["namespace"]
    out: dict[str, tuple[str, pathlib.Path]] = {}
    for volume in (pod.get("spec") or {}).get("volumes") or ():
        name = volume.get("name", "")
        if volume.get("persistentVolumeClaim"):
            claim = volume["persistentVolumeClaim"].get("claimName", "")
            try:
                pvc = ensure_bound(lab, namespace, claim, consumer=True)
            except ApiError as exc:
                msg = f'0/1 nodes are available: persistentvolumeclaim "{claim}" not found.'
                raise PodNotReady("Unschedulable", msg, True) from exc
            if (pvc.get("status") or {}).get("phase") != "Bound":
                msg = "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims."
                raise PodNotReady("Unschedulable", msg, True)
            mode = (pvc.get("spec") or {}).get("volumeMode") or "Filesystem"
            out[name] = (mode, volume_path(lab, pvc))
        elif "emptyDir" in volume:
            path = scratch / "volumes" / name
            path.mkdir(parents=True, exist_ok=True)
            out[name] = ("Filesystem", path)
        elif volume.get("configMap") is not None or volume.get("secret") is not None:
            kind = "secret" if volume.get("secret") is not None else "configMap"
            path = scratch / "volumes" / name
            _write_projection(lab, namespace, volume, kind, path)
            out[name] = ("Filesystem", path)
        elif volume.get("projected") is not None:
            # What the API server's ServiceAccount admission adds to every Pod (kube-api-access-*): a
            # token, the cluster CA (kube-root-ca.crt) and the namespace, as a kubelet projects them.
            path = scratch / "volumes" / name
            _write_projected(lab, pod, volume["projected"], path)
            out[name] = ("Filesystem", path)
        elif volume.get("hostPath"):
            # The lab's only node is this machine, so a hostPath is the path itself.
            host = pathlib.Path(volume["hostPath"].get("path", ""))
            if not host.exists():
                raise StartError(f'volume "{name}": hostPath {host} does not exist')
            out[name] = ("Filesystem", host)
        else:
            supported = "persistentVolumeClaim, emptyDir, hostPath, configMap and secret"
            raise StartError(f'volume "{name}": the lab supports only {supported} volumes')
    return out


def _mounts(container: dict, sources: dict[str, tuple[str, pathlib.Path]]) -> list[tuple[str, pathlib.Path]]:
    """(path in the container, real path), longest container path first."""
    mounts: list[tuple[str, pathlib.Path]] = []
    for mount in container.get("volumeMounts") or ():
        kind, path = _source(sources, mount.get("name", ""))
        if kind == "Block":
            raise StartError(
                f'volume "{mount.get("name")}" has volumeMode Block: use volumeDevices, not volumeMounts'
            )
        if mount.get("subPath"):
            path = path / mount["subPath"]
            path.mkdir(parents=True, exist_ok=True)
        mounts.append((mount.get("mountPath", ""), path))
    for device in container.get("volumeDevices") or ():
        kind, path = _source(sources, device.get("name", ""))
        if kind != "Block":
            raise StartError(
                f'volume "{device.get("name")}" has volumeMode {kind}: use volumeMounts, not volumeDevices'
            )
        mounts.append((device.get("devicePath", ""), path))
    return sorted(mounts, key=lambda m: -len(m[0]))


def _source(sources: dict[str, tuple[str, pathlib.Path]], name: str) -> tuple[str, pathlib.Path]:
    if name not in sources:
        raise StartError(f'volume "{name}" is mounted but not defined in the pod')
    return sources[name]


def _map_path(value: str, mounts: list[tuple[str, pathlib.Path]]) -> str | None:
    for inner, real in mounts:
        base = inner.rstrip("/")
        if value in (inner, base) or value.startswith(base + "/"):
            return str(real) + value[len(base) :]
    return None


def rewrite_arg(value: str, mounts: list[tuple[str, pathlib.Path]]) -> str:
    """A path under a mount (also as the value of `key=value`, as dd takes it) -> the real path."""
    mapped = _map_path(value, mounts)
    if mapped is not None:
        return mapped
    key, sep, rest = value.partition("=")
    if sep and rest:
        mapped = _map_path(rest, mounts)
        if mapped is not None:
            return f"{key}={mapped}"
    return value


def plan_pod(lab: LabContext, pod: dict, timeout: float) -> Plan:
    spec = pod.get("spec") or {}
    containers = spec.get("containers") or []
    if len(containers) != 1 or spec.get("initContainers"):
        raise StartError("the lab runs pods with exactly one container and no initContainers")
    container = containers[0]
    scratch = pathlib.Path(tempfile.mkdtemp(prefix=f"{pod['metadata']['name']}-", dir=_pods_dir(lab)))
    try:
        sources = _volume_sources(lab, pod, scratch)
        env = _container_env(lab, pod, container)
        mounts = _mounts(container, sources)
        argv = [
            _expand(str(a), env) for a in (container.get("command") or []) + (container.get("args") or [])
        ]
        if not argv:
            raise StartError("the container sets no command; the lab runs explicit commands only")
        executable = os.path.basename(argv[0])
        allowed = allowed_commands(lab)
        if executable not in allowed:
            raise StartError(
                f'command "{executable}" is not allowed in the lab (allowed: {", ".join(sorted(allowed))})'
            )
        host_path = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
        found = shutil.which(executable, path=host_path)
        if found is None:
            raise StartError(f'exec: "{executable}": executable file not found in $PATH')
        argv = [found] + [rewrite_arg(a, mounts) for a in argv[1:]]
        env = {k: rewrite_arg(v, mounts) for k, v in env.items()}
        workdir = container.get("workingDir")
        cwd = pathlib.Path(_map_path(workdir, mounts) or scratch / "work") if workdir else scratch / "work"
        cwd.mkdir(parents=True, exist_ok=True)
        base_env = {
            "PATH": host_path,
            "HOME": str(scratch / "work"),
            "LANG": "C.UTF-8",
            "TMPDIR": str(scratch),
        }
        base_env["HOSTNAME"] = pod["metadata"]["name"]
        return Plan(argv, {**base_env, **env}, cwd, scratch, timeout, mounts)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise


def _pods_dir(lab: LabContext) -> pathlib.Path:
    path = lab.state_dir / "pods"
    path.mkdir(parents=True, exist_ok=True)
    return path


__all__ = [
    "ALLOWED_COMMANDS",
    "Plan",
    "PodNotReady",
    "StartError",
    "allowed_commands",
    "plan_pod",
    "rewrite_arg",
]
