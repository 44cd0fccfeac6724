"""The lab's volume store: real files behind PersistentVolumes and VolumeSnapshotContents.

Volume data lives under <state_dir>/volumes: a Block volume is a sparse file `pvc-<uid>.img` of the
requested size, a Filesystem volume a directory `pvc-<uid>/` (a disk image inside is `disk.img`, the
layout CDI uses). Snapshots are copy-on-write (or at least sparse) copies under volumes/snapshots/,
next to a small JSON file recording the source's mode and size.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import re
import shutil
import subprocess
from fractions import Fraction

from ..objects import ResourceType, now_rfc3339
from . import LabContext
from .kit import CORE, SNAPSHOT_GROUP

# The CSI drivers the lab plays (PersistentVolume `spec.csi.driver`, VolumeSnapshotClass `driver`): lab-rbd's
# volumes always, lab-fs's and lab-wffc's when the upstream snapshot controller runs (it snapshots only CSI
# volumes). A CSI driver name has no "/", so it cannot be the StorageClasses' provisioner name.
RBD_CSI_DRIVER = "rbd.lab.goldenimage.io"
HOSTPATH_CSI_DRIVER = "hostpath.lab.goldenimage.io"
CSI_DRIVERS = (HOSTPATH_CSI_DRIVER, RBD_CSI_DRIVER)

# --------------------------------------------------------------------------- quantities

_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)([KMGTPE]i|[numkMGTPE])?$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": 1, "k": 10**3}
_DECIMAL.update({"M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18})


def parse_quantity(value: str | int | float) -> int:
    """Bytes in a Kubernetes quantity ("10Gi", "1.5G", "512", "1e3"), rounded up."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return math.ceil(value)
    match = _QUANTITY.match(str(value).strip())
    if not match:
        raise ValueError(f"quantities must match the regular expression '{_QUANTITY.pattern}': {value!r}")
    number, suffix = Fraction(match.group(1)), match.group(2) or ""
    factor = _BINARY.get(suffix) or _DECIMAL[suffix]
    return math.ceil(number * factor)


def format_quantity(size: int) -> str:
    """The canonical short form: the largest exact binary suffix, else decimal, else bytes."""
    for table in (_BINARY, {"E": 10**18, "P": 10**15, "T": 10**12, "G": 10**9, "M": 10**6, "k": 10**3}):
        for suffix, factor in sorted(table.items(), key=lambda kv: -kv[1]):
            if size >= factor and size % factor == 0:
                return f"{size // factor}{suffix}"
    return str(size)


# ------------------------------------------------------------------------- volume store


def volumes_dir(lab: LabContext) -> pathlib.Path:
    path = lab.state_dir / "volumes"
    path.mkdir(parents=True, exist_ok=True)
    return path


def snapshots_dir(lab: LabContext) -> pathlib.Path:
    path = volumes_dir(lab) / "snapshots"
    path.mkdir(parents=True, exist_ok=True)
    return path


def core_types(lab: LabContext) -> dict[str, ResourceType]:
    store = lab.store
    return {
        "pvc": store.resource(CORE, "v1", "persistentvolumeclaims"),
        "pv": store.resource(CORE, "v1", "persistentvolumes"),
        "pod": store.resource(CORE, "v1", "pods"),
        "sc": store.resource("storage.k8s.io", "v1", "storageclasses"),
    }


def snapshot_type(lab: LabContext, plural: str) -> ResourceType:
    return lab.store.resource(SNAPSHOT_GROUP, "v1", plural)


def volume_path(lab: LabContext, obj: dict) -> pathlib.Path:
    """The real file (Block) or directory (Filesystem) behind a PersistentVolume or a bound claim."""
    if obj.get("kind") == "PersistentVolumeClaim":
        meta = obj["metadata"]
        pv_name = (obj.get("spec") or {}).get("volumeName")
        if not pv_name:
            raise ValueError(f"PersistentVolumeClaim {meta.get('namespace')}/{meta['name']} is not bound")
        obj = lab.store.get(core_types(lab)["pv"], None, pv_name)
    spec = obj.get("spec") or {}
    path = (spec.get("hostPath") or {}).get("path") or (spec.get("local") or {}).get("path")
    if path:
        return pathlib.Path(path)
    suffix = ".img" if spec.get("volumeMode") == "Block" else ""
    return volumes_dir(lab) / f"{obj['metadata']['name']}{suffix}"


def disk_image_path(lab: LabContext, obj: dict) -> pathlib.Path:
    """Where a disk image lives: the Block file itself, or `disk.img` inside a Filesystem volume."""
    path = volume_path(lab, obj)
    return path / "disk.img" if path.is_dir() else path


def copy_data(src: pathlib.Path, dst: pathlib.Path) -> None:
    """Copy a volume file or directory as `cp --reflink=auto --sparse=always` does: shared extents
    where the filesystem can, holes kept otherwise."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    argv = ["cp", "--reflink=auto", "--sparse=always"]
    if src.is_dir():
        argv.append("-a")
    result = subprocess.run([*argv, str(src), str(dst)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise OSError(f"copying {src} to {dst} failed: {result.stderr.strip()}")


def remove_data(lab: LabContext, path: pathlib.Path) -> None:
    """Delete volume data, but never anything outside the lab's volume store."""
    root = volumes_dir(lab).resolve()
    target = path.resolve() if path.exists() or path.is_symlink() else path.absolute()
    if root not in target.parents:
        return
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target, ignore_errors=True)
    else:
        target.unlink(missing_ok=True)


def fill_volume(dst: pathlib.Path, mode: str, size: int, src: pathlib.Path | None) -> None:
    """Create the data of a new volume, optionally seeded from another volume or a snapshot."""
    if mode == "Block":
        if src is not None and src.is_dir():
            src = src / "disk.img" if (src / "disk.img").exists() else None
        if src is not None:
            copy_data(src, dst)
        else:
            dst.touch()
        if dst.stat().st_size < size:
            os.truncate(dst, size)  # grows sparsely, like expanding a thin volume
        return
    if src is None:
        dst.mkdir(parents=True)
    elif src.is_dir():
        copy_data(src, dst)
    else:
        dst.mkdir(parents=True)
        copy_data(src, dst / "disk.img")


# ---------------------------------------------------------------------------- snapshot data


def snapshot_data(lab: LabContext, handle: str) -> tuple[pathlib.Path, dict] | None:
    """The data of a snapshot handle and what is known about it ({volumeMode, size, source})."""
    if not handle or "/" in handle or handle.startswith("."):
        return None
    root = snapshots_dir(lab)
    info_file = root / f"{handle}.json"
    info = json.loads(info_file.read_text()) if info_file.exists() else {}
    for path in (root / f"{handle}.img", root / handle):
        if path.exists():
            if "size" not in info:
                image = path / "disk.img" if path.is_dir() else path
                info["size"] = image.stat().st_size if image.exists() else 0
            info.setdefault("volumeMode", "Filesystem" if path.is_dir() else "Block")
            return path, info
    return None


def take_snapshot(lab: LabContext, pv: dict, handle: str, size: int) -> None:
    mode = (pv.get("spec") or {}).get("volumeMode") or "Filesystem"
    root = snapshots_dir(lab)
    dst = root / (f"{handle}.img" if mode == "Block" else handle)
    drop_snapshot_data(lab, handle)
    copy_data(volume_path(lab, pv), dst)
    info = {"volumeMode": mode, "size": size, "source": pv["metadata"]["name"], "createdAt": now_rfc3339()}
    (root / f"{handle}.json").write_text(json.dumps(info))


def drop_snapshot_data(lab: LabContext, handle: str) -> None:
    if not handle or "/" in handle or handle.startswith("."):
        return
    root = snapshots_dir(lab)
    for path in (root / f"{handle}.img", root / handle, root / f"{handle}.json"):
        remove_data(lab, path)
