"""Harvester's image handling in the lab: VirtualMachineImages become real files and a StorageClass.

What Harvester (with Longhorn backing images) does, on the lab's volume store:
- admission: the mutating webhook merges `spec.storageClassParameters` with a template StorageClass
  (the Longhorn class named by the annotation `harvesterhci.io/storageClassName`, else the cluster
  default when it is a Longhorn class): the template's parameters replace the request's for the merged
  keys. The validating webhook keeps displayName unique, makes the source and the parameters immutable
  and refuses to delete an image whose StorageClass a PVC uses.
- the controller creates the image's Longhorn BackingImage (see `longhorn.py`: its copies, one per disk)
  and StorageClass `lh-<image uid>` and records the class in
  `status.storageClassName`; `sourceType: download` really downloads `spec.url` (HTTP, or the lab's S3
  endpoint) with `status.progress`, checks `spec.checksum` (SHA-512, as Longhorn does) and reads the
  sizes with `qemu-img info`; failures count in `status.failed` until `RetryLimitExceeded`.
- `sourceType: upload` waits for `POST /v1/harvester/harvesterhci.io.virtualmachineimages/<ns>/<name>
  ?action=upload` (multipart field `chunk`, or the raw file as the body).
Faults: `stuck` freezes an image (also mid-download), `fail` makes every attempt fail.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING

from ..extensions import add_admission, add_route
from ..objects import ApiError, ResourceType, TypeHooks, bad_request, conflict, invalid, now_rfc3339
from . import Controller, LabContext
from .kit import CORE, condition, modify, record_event
from .longhorn import delete_backing_image, ensure_backing_image
from .storage import DEFAULT_CLASS_ANNOTATION
from .volumes import remove_data, volumes_dir

if TYPE_CHECKING:
    from ..apistore import ApiStore

GROUP = "harvesterhci.io"
VERSION = "v1beta1"
PLURAL = "virtualmachineimages"
KIND = "VirtualMachineImage"
COMPONENT = "harvester-vm-image-controller"
LONGHORN = "driver.longhorn.io"
SC_ANNOTATION = "harvesterhci.io/storageClassName"
IMAGE_ID_ANNOTATION = "harvesterhci.io/imageId"
DISPLAY_NAME_LABEL = "harvesterhci.io/imageDisplayName"
UPLOAD_PREFIX = "/v1/harvester/harvesterhci.io.virtualmachineimages/"
WEBHOOK = 'admission webhook "validator.harvesterhci.io" denied the request: '
DEFAULT_PARAMETERS = {"numberOfReplicas": "3", "staleReplicaTimeout": "30", "migratable": "true"}
# The only keys the mutating webhook takes from the template class (or from the request without one).
MERGED_KEYS = (
    "nodeSelector",
    "diskSelector",
    "numberOfReplicas",
    "staleReplicaTimeout",
    "dataLocality",
    "encrypted",
    "csi.storage.k8s.io/provisioner-secret-name",
    "csi.storage.k8s.io/provisioner-secret-namespace",
    "csi.storage.k8s.io/node-stage-secret-name",
    "csi.storage.k8s.io/node-stage-secret-namespace",
    "csi.storage.k8s.io/node-publish-secret-name",
    "csi.storage.k8s.io/node-publish-secret-namespace",
)
IMMUTABLE = ("displayName", "url", "sourceType", "storageClassParameters")
RATE_ENV = "LAB_HARVESTER_IMPORT_BYTES_PER_SECOND"  # throttles downloads so tests can watch progress
RETRY_BACKOFF_SECONDS = 0.2
PROGRESS_INTERVAL_SECONDS = 0.1
CHUNK = 256 * 1024
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


class _ImportFailed(Exception):
    """One failed import attempt, worded as the Longhorn backing image reports it."""


# ------------------------------------------------------------------------- the merge rule


def template_class(store: ApiStore, image: dict) -> dict | None:
    """The StorageClass whose parameters win over the request, as Harvester's mutator picks it."""
    sc_rt = store.resource("storage.k8s.io", "v1", "storageclasses")
    named = ((image.get("metadata") or {}).get("annotations") or {}).get(SC_ANNOTATION)
    if named:
        try:
            found = store.get(sc_rt, None, named)
        except ApiError as exc:
            raise bad_request(f'{WEBHOOK}storageclasses.storage.k8s.io "{named}" not found') from exc
        if found.get("provisioner") != LONGHORN:
            return None  # Harvester logs a warning and falls back to the default parameters
        if (found.get("parameters") or {}).get("backingImage"):
            raise bad_request(
                f"{WEBHOOK}can not use a backing image storageClass as the base storageClass template"
            )
        return found
    classes, _ = store.list(sc_rt)
    for sc in classes:
        if ((sc.get("metadata") or {}).get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION) == "true":
            return sc if sc.get("provisioner") == LONGHORN else None
    raise bad_request(f"{WEBHOOK}no default storageClass found for backingImage")


def merge_parameters(requested: dict | None, template: dict | None) -> dict:
    """Defaults, then the merged keys of the template class, or of the request when there is none."""
    source = (template.get("parameters") or {}) if template is not None else (requested or {})
    merged = dict(DEFAULT_PARAMETERS)
    merged.update({k: str(v) for k, v in source.items() if k in MERGED_KEYS})
    return merged


class ImageWebhooks(TypeHooks):
    """Harvester's mutating and validating webhooks for VirtualMachineImage create and update."""

    def prepare_create(self, store: ApiStore, rt: ResourceType, obj: dict) -> None:
        meta, spec = obj["metadata"], obj.setdefault("spec", {})
        display = spec.get("displayName") or ""
        cause = {"field": "spec.displayName", "reason": "FieldValueInvalid"}
        if not display:
            raise invalid(rt, meta["name"], [dict(cause, message=f"{WEBHOOK}displayName is required")])
        if len(display) > 63 or not _LABEL_VALUE.match(display):
            message = f"{WEBHOOK}displayName is not a valid Kubernetes label value: {display!r}"
            raise invalid(rt, meta["name"], [dict(cause, message=message)])
        images, _ = store.list(rt, meta.get("namespace"))
        if any((i.get("spec") or {}).get("displayName") == display for i in images):
            raise conflict(rt, meta["name"], f"{WEBHOOK}A resource with the same name exists")
        source = spec.get("sourceType")
        if source in ("download", "restore") and not spec.get("url"):
            raise invalid(rt, meta["name"], [{"field": "spec.url", "message": f"{WEBHOOK}url is required"}])
        if source not in ("download", "restore") and spec.get("url"):
            message = f'{WEBHOOK}url should be empty when image source type is "{source}"'
            raise invalid(rt, meta["name"], [{"field": "spec.url", "message": message}])
        meta.setdefault("labels", {})[DISPLAY_NAME_LABEL] = display
        spec["storageClassParameters"] = merge_parameters(
            spec.get("storageClassParameters"), template_class(store, obj)
        )

    def prepare_update(self, store: ApiStore, rt: ResourceType, old: dict, new: dict) -> None:
        before, after = old.get("spec") or {}, new.get("spec") or {}
        for key in IMMUTABLE:
            if before.get(key) != after.get(key):
                message = f"{WEBHOOK}{key} cannot be modified"
                if key == "storageClassParameters":
                    message = f"{WEBHOOK}storageClassParameters of the VM Image cannot be modified"
                raise invalid(rt, new["metadata"]["name"], [{"field": f"spec.{key}", "message": message}])


def pvcs_using(store: ApiStore, storage_class: str) -> list[str]:
    pvc_rt = store.resource(CORE, "v1", "persistentvolumeclaims")
    claims, _ = store.list(pvc_rt)
    return sorted(
        f"{c['metadata']['namespace']}/{c['metadata']['name']}"
        for c in claims
        if (c.get("spec") or {}).get("storageClassName") == storage_class
    )


# --------------------------------------------------------------------------- status helpers


def set_condition(status: dict, ctype: str, value: str, reason: str = "", message: str = "") -> None:
    now = now_rfc3339()
    conditions = status.setdefault("conditions", [])
    for cond in conditions:
        if cond.get("type") == ctype:
            if cond.get("status") != value:
                cond["lastTransitionTime"] = now
            cond.update(status=value, reason=reason, message=message, lastUpdateTime=now)
            return
    conditions.append(
        {
            "type": ctype,
            "status": value,
            "reason": reason,
            "message": message,
            "lastUpdateTime": now,
            "lastTransitionTime": now,
        }
    )


def is_true(obj: dict, ctype: str) -> bool:
    cond = condition(obj, ctype)
    return bool(cond) and cond.get("status") == "True"


def image_info(path: pathlib.Path) -> dict:
    """`qemu-img info` of a file: its format and virtual size; refuses what is not a disk image."""
    result = subprocess.run(
        ["qemu-img", "info", "--output=json", str(path)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise _ImportFailed(f"failed to inspect the image file: {result.stderr.strip()}")
    info = json.loads(result.stdout)
    if info.get("format") not in ("qcow2", "raw"):
        raise _ImportFailed(f"unsupported image format {info.get('format')!r}: want qcow2 or raw")
    return info


def _expected_checksum(spec: dict) -> str:
    text = (spec.get("checksum") or "").strip().lower()
    return text.split(":", 1)[1] if text.startswith("sha512:") else text


def upload_payload(headers, raw: bytes) -> bytes:
    """The file of an upload: the multipart field `chunk` (what Harvester's UI sends) or the raw body."""
    content_type = headers.get("Content-Type") or ""
    if not content_type.startswith("multipart/form-data"):
        return raw
    match = re.search(r'boundary="?([^";]+)"?', content_type)
    if not match:
        raise bad_request("the multipart upload has no boundary")
    for part in raw.split(b"--" + match.group(1).encode()):
        head, sep, body = part.partition(b"\r\n\r\n")
        if sep and re.search(rb'name="chunk"', head):
            return body[:-2] if body.endswith(b"\r\n") else body
    raise bad_request('the multipart upload has no "chunk" field')


# ------------------------------------------------------------------------------ controller


def backing_image_path(lab: LabContext, image: dict) -> pathlib.Path:
    """Where the data of an image's backing image lives in the volume store."""
    root = volumes_dir(lab) / "backingimages"
    root.mkdir(parents=True, exist_ok=True)
    return root / f"{image['metadata']['uid']}.img"


class HarvesterImageController(Controller):
    name = "harvester-image"
    watches = ((GROUP, PLURAL),)
    resync_seconds = 2.0

    def __init__(self, lab: LabContext):
        super().__init__(lab)
        self._runs: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        lab.store.hooks[(GROUP, PLURAL)] = ImageWebhooks()
        add_admission(lab.store, GROUP, PLURAL, self.refuse_delete_in_use)
        add_route(lab.store, UPLOAD_PREFIX, self.upload)

    # --- plumbing
    @property
    def rt(self) -> ResourceType:
        return self.lab.store.resource(GROUP, VERSION, PLURAL)

    def data_path(self, image: dict) -> pathlib.Path:
        return backing_image_path(self.lab, image)

    def _fault(self, namespace: str, name: str) -> str | None:
        return self.lab.faults.object_fault(KIND, namespace, name)

    def _status(self, namespace: str, name: str, uid: str, change) -> dict | None:
        def apply(obj: dict) -> bool | None:
            if obj["metadata"].get("uid") != uid or obj["metadata"].get("deletionTimestamp"):
                return False
            return change(obj.setdefault("status", {}))

        try:
            return modify(self.lab.store, self.rt, namespace, name, apply, status=True)
        except ApiError as exc:
            if exc.code == 404:
                return None
            raise

    def stop(self) -> None:
        with self._lock:
            for cancel in self._runs.values():
                cancel.set()

    # --- webhook and removal
    def refuse_delete_in_use(self, verb, rt, namespace, name, body, dry_run) -> None:
        if verb != "delete":
            return
        try:
            image = self.lab.store.get(rt, namespace, name)
        except ApiError:
            return  # the store answers 404 itself
        storage_class = (image.get("status") or {}).get("storageClassName")
        users = pvcs_using(self.lab.store, storage_class) if storage_class else []
        if users:
            display = (image.get("spec") or {}).get("displayName") or name
            raise ApiError(
                422,
                "Invalid",
                f"{WEBHOOK}Cannot delete image {namespace}/{display}: "
                f"being used by volume {', '.join(users)}",
                {"name": name, "group": GROUP, "kind": PLURAL},
            )

    def deleted(self, rt: ResourceType, obj: dict) -> None:
        uid = obj["metadata"].get("uid", "")
        with self._lock:
            cancel = self._runs.pop(uid, None)
        if cancel is not None:
            cancel.set()
        remove_data(self.lab, self.data_path(obj))
        meta = obj["metadata"]
        delete_backing_image(self.lab.store, f"{meta['namespace']}-{meta['name']}")
        storage_class = (obj.get("status") or {}).get("storageClassName")
        if storage_class:
            try:
                self.lab.store.delete(
                    self.lab.store.resource("storage.k8s.io", "v1", "storageclasses"), None, storage_class
                )
            except ApiError:
                pass

    # --- reconcile
    def reconcile(self, rt: ResourceType, obj: dict) -> float | None:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        if meta.get("deletionTimestamp") or is_true(obj, "RetryLimitExceeded"):
            return None
        if not is_true(obj, "Initialized"):
            self.initialize(obj)
            return 0.0
        if is_true(obj, "Imported"):
            return None
        source = spec.get("sourceType")
        if source == "download":
            self._start(obj)
        elif source != "upload":
            self._fail_attempt(obj, f"sourceType {source} is not supported by the lab (download, upload)")
        return None

    def initialize(self, image: dict) -> dict | None:
        """Create the image's StorageClass and mark the image Initialized, as Harvester does first."""
        meta, spec = image["metadata"], image.get("spec") or {}
        sc_name = f"lh-{meta['uid']}"
        parameters = dict(spec.get("storageClassParameters") or DEFAULT_PARAMETERS)
        parameters.update(
            backingImage=f"{meta['namespace']}-{meta['name']}",
            backingImageDataSourceType=spec.get("sourceType") or "",
        )
        storage_class = {
            "metadata": {
                "name": sc_name,
                "annotations": {IMAGE_ID_ANNOTATION: f"{meta['namespace']}/{meta['name']}"},
            },
            "provisioner": LONGHORN,
            "parameters": parameters,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate",
            "allowVolumeExpansion": True,
        }
        sc_rt = self.lab.store.resource("storage.k8s.io", "v1", "storageclasses")
        # Harvester's backing image backend creates the BackingImage, then the class naming it.
        ensure_backing_image(
            self.lab.store, image, parameters["backingImage"], parameters.get("numberOfReplicas") or "3"
        )
        if not self.lab.store.exists(sc_rt, None, sc_name):
            try:
                self.lab.store.create(sc_rt, storage_class)
            except ApiError as exc:
                if exc.code != 409:
                    raise

        def initialized(status: dict) -> bool:
            if is_true({"status": status}, "Initialized"):
                # Initialized meanwhile (an upload initializes the image first and may have finished it):
                # writing "Importing" again would undo that upload for good.
                return False
            status.update(appliedUrl=spec.get("url") or "", storageClassName=sc_name, progress=0)
            status.setdefault("failed", 0)
            set_condition(status, "Imported", "Unknown", "Importing")
            set_condition(status, "Initialized", "True", "Initialized")
            return True

        return self._status(meta["namespace"], meta["name"], meta["uid"], initialized)

    # --- failures
    def _fail_attempt(self, image: dict, message: str, progress: int = 0) -> bool:
        """Count a failed attempt; True when the retry limit is now exceeded (Harvester stops then)."""
        meta = image["metadata"]
        exceeded = []

        def failed(status: dict) -> None:
            retry = int((image.get("spec") or {}).get("retry", 3))
            status["failed"] = int(status.get("failed") or 0) + 1
            status["lastFailedTime"] = now_rfc3339()
            status["progress"] = progress
            text = f"failed due to error: {message}"
            if status["failed"] > 1:
                text = f"retry attempted {status['failed'] - 1}/{retry} {text}"
            if status["failed"] > retry:
                set_condition(status, "RetryLimitExceeded", "True", "", text)
                set_condition(status, "Imported", "False", "", text)
                exceeded.append(True)
            else:
                set_condition(status, "RetryLimitExceeded", "False", "", text)

        current = self._status(meta["namespace"], meta["name"], meta["uid"], failed)
        if current is not None:
            record_event(self.lab.store, current, "Warning", "ImportFailed", message, COMPONENT)
        return bool(exceeded)

    # --- download
    def _start(self, image: dict) -> None:
        uid = image["metadata"]["uid"]
        with self._lock:
            if uid in self._runs:
                return
            cancel = self._runs[uid] = threading.Event()
        meta = image["metadata"]
        thread = threading.Thread(
            target=self._download_loop,
            args=(meta["namespace"], meta["name"], uid, cancel),
            name=f"lab-harvester-import-{meta['name']}",
            daemon=True,
        )
        thread.start()

    def _download_loop(self, namespace: str, name: str, uid: str, cancel: threading.Event) -> None:
        try:
            while not cancel.is_set():
                try:
                    image = self.lab.store.get(self.rt, namespace, name)
                except ApiError:
                    return
                if image["metadata"]["uid"] != uid or is_true(image, "RetryLimitExceeded"):
                    return
                try:
                    self._download(image, cancel)
                    return
                except _ImportFailed as exc:
                    progress = int((image.get("status") or {}).get("progress") or 0)
                    if self._fail_attempt(image, str(exc), progress):
                        return
                    cancel.wait(RETRY_BACKOFF_SECONDS)
        except Exception as exc:  # an image must not stay importing for ever
            try:
                image = self.lab.store.get(self.rt, namespace, name)
                self._fail_attempt(image, f"internal error: {exc!r}")
            except ApiError:
                pass
        finally:
            with self._lock:
                if self._runs.get(uid) is cancel:
                    del self._runs[uid]

    def _hold_while_stuck(self, namespace: str, name: str, cancel: threading.Event) -> None:
        while self._fault(namespace, name) == "stuck" and not cancel.is_set():
            cancel.wait(0.1)

    def _download(self, image: dict, cancel: threading.Event) -> None:
        meta, spec = image["metadata"], image.get("spec") or {}
        namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
        if self._fault(namespace, name) == "fail":
            raise _ImportFailed(f"failed to download {spec.get('url')}: injected fault (lab)")
        try:
            response = urllib.request.urlopen(spec.get("url") or "", timeout=30)
        except urllib.error.HTTPError as exc:
            exc.close()
            raise _ImportFailed(f"failed to download {spec.get('url')}: got {exc.code} status code") from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise _ImportFailed(f"failed to download {spec.get('url')}: {reason}") from exc
        total = response.length
        rate = float(os.environ.get(RATE_ENV) or 0)
        digest = hashlib.sha512()
        done, started, last = 0, time.monotonic(), 0.0
        target = self.data_path(image)
        with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as out:
            scratch = pathlib.Path(out.name)
            try:
                while True:
                    self._hold_while_stuck(namespace, name, cancel)
                    if cancel.is_set():
                        return
                    chunk = response.read(min(CHUNK, max(1024, int(rate / 10))) if rate else CHUNK)
                    if not chunk:
                        break
                    out.write(chunk)
                    digest.update(chunk)
                    done += len(chunk)
                    if rate:
                        ahead = done / rate - (time.monotonic() - started)
                        if ahead > 0 and cancel.wait(ahead):
                            return
                    if total and time.monotonic() - last >= PROGRESS_INTERVAL_SECONDS:
                        last = time.monotonic()
                        self._progress(namespace, name, uid, min(99, done * 100 // total), done, total)
                out.flush()
                if total is not None and done != total:
                    raise _ImportFailed(f"failed to download {spec.get('url')}: got {done} of {total} bytes")
                self._finish(image, scratch, digest.hexdigest(), done)
            finally:
                response.close()
                scratch.unlink(missing_ok=True)

    def _progress(self, namespace: str, name: str, uid: str, percent: int, done: int, total: int) -> None:
        def importing(status: dict) -> bool | None:
            if status.get("progress") == percent:
                return False
            status["progress"] = percent
            set_condition(status, "Imported", "Unknown", "Importing", f"{done} of {total} bytes")
            return None

        self._status(namespace, name, uid, importing)

    def _finish(self, image: dict, scratch: pathlib.Path, sha512: str, size: int) -> None:
        """Verify and keep the file, then mark the image Imported (also the end of an upload)."""
        meta, spec = image["metadata"], image.get("spec") or {}
        expected = _expected_checksum(spec)
        if expected and expected != sha512:
            raise _ImportFailed(f"checksum mismatch: expected SHA-512 {expected}, the file has {sha512}")
        info = image_info(scratch)
        target = self.data_path(image)
        os.replace(scratch, target)

        def imported(status: dict) -> None:
            status.update(progress=100, size=size, virtualSize=int(info.get("virtual-size") or size))
            set_condition(status, "Imported", "True", "Imported")
            set_condition(status, "RetryLimitExceeded", "False", "", "")

        current = self._status(meta["namespace"], meta["name"], meta["uid"], imported)
        if current is not None:
            record_event(
                self.lab.store, current, "Normal", "Imported", f"image {meta['name']} imported", COMPONENT
            )

    # --- upload
    def upload(self, method, path, query, headers, raw, identity) -> tuple[int, str, bytes]:
        parts = [p for p in path[len(UPLOAD_PREFIX) :].split("/") if p]
        if method != "POST" or len(parts) != 2 or query.get("action") != "upload":
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        namespace, name = parts
        if not identity.allows("update", GROUP, PLURAL, namespace):
            raise ApiError(
                403,
                "Forbidden",
                f'{PLURAL}.{GROUP} "{name}" is forbidden: User "{identity.user}" cannot upload to '
                f'resource "{PLURAL}" in API group "{GROUP}" in the namespace "{namespace}"',
            )
        image = self.lab.store.get(self.rt, namespace, name)
        spec = image.get("spec") or {}
        if spec.get("sourceType") != "upload":
            raise bad_request(f"image {namespace}/{name} has sourceType {spec.get('sourceType')}, not upload")
        if is_true(image, "Imported"):
            raise conflict(self.rt, name, f"image {namespace}/{name} is already imported")
        data = upload_payload(headers, raw)
        if not is_true(image, "Initialized"):
            image = self.initialize(image) or image
        root = self.data_path(image).parent
        with tempfile.NamedTemporaryFile(dir=root, delete=False) as out:
            out.write(data)
            scratch = pathlib.Path(out.name)
        try:
            if self._fault(namespace, name) == "fail":
                raise _ImportFailed("upload failed: injected fault (lab)")
            self._finish(image, scratch, hashlib.sha512(data).hexdigest(), len(data))
        except _ImportFailed as exc:
            self._fail_upload(image, str(exc))
            raise ApiError(400, "BadRequest", f"upload of {namespace}/{name} failed: {exc}") from exc
        finally:
            scratch.unlink(missing_ok=True)
        return 200, "application/json", json.dumps({"uploaded": len(data)}).encode()

    def _fail_upload(self, image: dict, message: str) -> None:
        meta = image["metadata"]

        def failed(status: dict) -> None:
            set_condition(status, "Imported", "False", "UploadFailed", message)

        self._status(meta["namespace"], meta["name"], meta["uid"], failed)


CONTROLLERS = [HarvesterImageController]

__all__ = [
    "CONTROLLERS",
    "DEFAULT_PARAMETERS",
    "LONGHORN",
    "SC_ANNOTATION",
    "UPLOAD_PREFIX",
    "HarvesterImageController",
    "merge_parameters",
    "pvcs_using",
    "template_class",
]
