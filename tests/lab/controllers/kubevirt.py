"""KubeVirt of the lab: VirtualMachines start and stop VirtualMachineInstances that "boot" for real.

A VM whose run strategy wants it running (`Always`, `RerunOnFailure`, `Once`, or legacy `spec.running:
true`) gets a VMI of the same name that it controls; `Halted` (or `running: false`) deletes it. The VMI
goes Pending (its claims must exist and bind; a WaitForFirstConsumer claim binds now; its virt-launcher
pod must be admitted by the API server, whose PodSecurity admission refuses it in a namespace enforcing the
baseline level) -> Scheduled -> Running. Whether the guest then boots is decided from the boot disk's
real bytes by bootdisk.py and from its memory (`domain.memory.guest`, else `resources.requests.memory`).

A guest that does not boot looks as it does in KubeVirt: the VMI is Running and Ready (QEMU runs, the
firmware loops on "no bootable device"), but `AgentConnected` never appears. The lab adds a Warning Event
`GuestNotBooting` and the annotation `lab.goldenimage.io/boot` saying why, for diagnosis only. A guest
that boots gets `AgentConnected` after LAB_KUBEVIRT_AGENT_DELAY_SECONDS (default 0.5).

The remote port (3389 for Windows, 22 for Linux): `status.interfaces[0].ipAddress` is 127.0.0.1 and,
unless the VM (or its template) carries `lab.goldenimage.io/port-open: "false"` or the Windows disk's
SYSTEM hive leaves Remote Desktop off (bootdisk.py; the VMI annotation `lab.goldenimage.io/remote-access`
then says why), the lab opens a real
TCP listener on a free loopback port once the agent connects and records it in the VMI annotation
`lab.goldenimage.io/forwarded-<guest port>: "<host port>"`, the way a port-forward would. On a real
cluster the port is reached at the VMI's pod IP or through a Service instead. The collection knows
nothing of this annotation: a test hands the clone gate `probe_template(port)` as its `port_probe`,
a `host:port` template reading it, as an operator names the Service tenants use.

A Linux guest whose VM carries `lab.goldenimage.io/guest-agent: "absent"` is a stock cloud image: no
agent ever connects. Its SSH server starts only when the VM has a NoCloud seed (a `cloudInitNoCloud`
volume): without a datasource cloud-init makes no host keys and sshd does not start. With the seed, the
forward of port 22 serves an `SSH-2.0-` banner, or, when the VM names one in
`lab.goldenimage.io/guest-ssh: "<port>"`, points at a real sshd on that loopback port.

A VM carrying `lab.goldenimage.io/device-qemu: "true"` boots for real under QEMU instead (realboot.py):
its agent, OS, filesystems and forwarded SSH port are the guest's own.

Faults on `VirtualMachine/<ns>/<name>`: `stop-hangs` keeps the VMI Running when the VM is halted (its
`Stopping` condition says the shutdown hangs) until the fault is cleared; `no-agent` keeps
`AgentConnected` away from a guest that boots; `swap-conflict` answers 409 Conflict to every write that
changes the VM's spec other than its run strategy (a disk swap conflicts, stop and start go through).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from typing import TYPE_CHECKING

from ..faults import Faults
from ..objects import ApiError, ResourceType, TypeHooks, conflict, now_rfc3339
from . import Controller, LabContext
from .attach import COMPONENT as ATTACHER
from .attach import multi_attach_error, place, pod_claims
from .bootdisk import BootCheck, image_virtual_size, inspect
from .console import ConsoleController
from .guestagent import BOOT_NOTE, DISK_NOTE, LAB_PREFIX, VOLUME_NOTE, partition
from .kit import condition, modify, record_event
from .realboot import ACCEL_NOTE, BOOT_SECONDS_NOTE, FILESYSTEMS_NOTE, HOSTNAME_NOTE, QemuDevice
from .realboot import wanted as wants_qemu
from .storage import ensure_bound
from .volumes import core_types, disk_image_path, parse_quantity
from .winrm import PORT as WINRM_PORT
from .winrm import WinRMGuest

if TYPE_CHECKING:
    from ..apistore import ApiStore

GROUP = "kubevirt.io"
API_VERSION = "kubevirt.io/v1"
COMPONENT = "virt-controller"
HANDLER = "virt-handler"
NODE = "lab-node"
PORT_OPEN = LAB_PREFIX + "port-open"
FORWARDED = LAB_PREFIX + "forwarded-"
REMOTE_NOTE = LAB_PREFIX + "remote-access"
# A guest without qemu-guest-agent (a stock Linux cloud image): "absent" on the VM.
AGENT_NOTE = LAB_PREFIX + "guest-agent"
# A real SSH server on this host standing in for the guest's sshd: its loopback port, on the VM.
GUEST_SSH_NOTE = LAB_PREFIX + "guest-ssh"
# "<user>:<password>" on a Windows VM: its WinRM service (winrm.py) starts with the agent and accepts them.
GUEST_WINRM_NOTE = LAB_PREFIX + "guest-winrm"
SSH_BANNER = b"SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13 lab\r\n"
FILESYSTEM_OVERHEAD = 0.055  # CDI's default share of a Filesystem volume kept free of the disk image
AGENT_DELAY_ENV = "LAB_KUBEVIRT_AGENT_DELAY_SECONDS"
GUEST_PORTS = {"windows": 3389, "linux": 22}
GUEST_OS = {
    "windows": {"id": "mswindows", "name": "Microsoft Windows", "prettyName": "Windows (lab guest)"},
    "linux": {"id": "linux", "name": "Linux", "prettyName": "Linux (lab guest)"},
}
# Below this the guest does not get past early boot.
MIN_BOOT_MEMORY = {"windows": 2 * 2**30, "linux": 256 * 2**20}
RUNNING_STRATEGIES = ("Always", "RerunOnFailure", "Once")
LAUNCHER_IMAGE = "quay.io/kubevirt/virt-launcher:v1.8.2"
LAUNCHER_RETRY_SECONDS = 0.5  # virt-controller retries a refused pod create
AGENT_POLL_SECONDS = 2.0  # virt-handler reads a real guest's agent again after this
STOP_HANGS = "stopping hangs: the guest does not shut down (lab fault stop-hangs)"


def probe_template(guest_port: int) -> str:
    """The clone gate's `port_probe` that reaches the lab's forward of `guest_port` on a VMI."""
    return "{ip}:{annotations[%s%d]}" % (FORWARDED, guest_port)


def run_strategy(vm: dict) -> str:
    spec = vm.get("spec") or {}
    if spec.get("runStrategy"):
        return spec["runStrategy"]
    if spec.get("running") is True:
        return "Always"
    return "Halted"


def guest_memory(spec: dict) -> int:
    domain = spec.get("domain") or {}
    value = (domain.get("memory") or {}).get("guest")
    if value is None:
        value = ((domain.get("resources") or {}).get("requests") or {}).get("memory")
    try:
        return parse_quantity(value) if value is not None else 0
    except ValueError:
        return 0


def launcher_pod(vmi: dict) -> dict:
    """The virt-launcher pod of a VMI: owned by it (the garbage collector deletes it with the VMI),
    with the compute container's capabilities, which the baseline Pod Security level does not allow."""
    meta = vmi["metadata"]
    spec = vmi.get("spec") or {}
    # The launcher mounts the VMI's claims (a DataVolume's claim has its name), so the API server's
    # pvc-protection and the attach-detach rules see a running VM as the user of its disks.
    volumes = [
        {"name": "disk-%d" % i, "persistentVolumeClaim": {"claimName": claim}}
        for i, claim in enumerate(pod_claims(spec))
    ]
    pod_spec: dict = {}
    if spec.get("nodeSelector"):
        pod_spec["nodeSelector"] = dict(spec["nodeSelector"])
    if volumes:
        pod_spec["volumes"] = volumes
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "virt-launcher-%s-%s" % (meta["name"][:40], meta["uid"][:5]),
            "namespace": meta["namespace"],
            "labels": {"kubevirt.io": "virt-launcher", "vm.kubevirt.io/name": meta["name"]},
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": "VirtualMachineInstance",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            **pod_spec,
            "automountServiceAccountToken": False,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "compute",
                    "image": LAUNCHER_IMAGE,
                    "command": ["/usr/bin/virt-launcher-monitor"],
                    "securityContext": {
                        "capabilities": {"add": ["NET_BIND_SERVICE", "SYS_NICE"], "drop": ["NET_RAW"]}
                    },
                }
            ],
        },
    }


def _claim_of(volume: dict) -> str | None:
    if volume.get("persistentVolumeClaim"):
        return volume["persistentVolumeClaim"].get("claimName")
    if volume.get("dataVolume"):
        return volume["dataVolume"].get("name")  # a DataVolume's claim has its name
    return None


def _boot_volume(spec: dict) -> str | None:
    """The volume the firmware boots: the disk with the lowest bootOrder, else the first disk."""
    disks = ((spec.get("domain") or {}).get("devices") or {}).get("disks") or []
    ordered = sorted((d for d in disks if d.get("bootOrder") is not None), key=lambda d: d["bootOrder"])
    chosen = ordered[0] if ordered else (disks[0] if disks else None)
    if chosen is None:
        vols = spec.get("volumes") or []
        return vols[0]["name"] if vols else None
    return chosen.get("name")


def running_status(vmi: dict) -> dict:
    """The status fields of a running instance: its node and the one interface the lab gives it."""
    return {
        "nodeName": (vmi.get("status") or {}).get("nodeName") or NODE,
        "interfaces": [
            {
                "name": "default",
                "interfaceName": "eth0",
                "ipAddress": "127.0.0.1",
                "ipAddresses": ["127.0.0.1"],
                "infoSource": "domain",
            }
        ],
    }


class ChainedHooks(TypeHooks):
    """Hooks for a type that already may have some: the store keeps one per type, so they chain."""

    def __init__(self, inner: TypeHooks | None = None):
        self.inner = inner

    def prepare_create(self, store: ApiStore, rt: ResourceType, obj: dict) -> None:
        if self.inner:
            self.inner.prepare_create(store, rt, obj)

    def prepare_update(self, store: ApiStore, rt: ResourceType, old: dict, new: dict) -> None:
        if self.inner:
            self.inner.prepare_update(store, rt, old, new)

    def after_write(self, store: ApiStore, rt: ResourceType, obj: dict) -> None:
        if self.inner:
            self.inner.after_write(store, rt, obj)

    def after_delete(self, store: ApiStore, rt: ResourceType, obj: dict) -> None:
        if self.inner:
            self.inner.after_delete(store, rt, obj)


def install_hooks(store: ApiStore, group: str, plural: str, cls: type[ChainedHooks], **kwargs) -> None:
    """Put hooks of `cls` in front of those the type has, once per store."""
    current = store.hooks.get((group, plural))
    link = current
    while isinstance(link, ChainedHooks):
        if type(link) is cls:
            return
        link = link.inner
    store.hooks[(group, plural)] = cls(current, **kwargs)


def _spec_but_run_strategy(vm: dict) -> dict:
    spec = dict(vm.get("spec") or {})
    spec.pop("runStrategy", None)
    spec.pop("running", None)
    return spec


class VMFaultHooks(ChainedHooks):
    """The `swap-conflict` fault: the API refuses spec changes of that VM with 409 Conflict."""

    def __init__(self, inner: TypeHooks | None, faults: Faults):
        super().__init__(inner)
        self.faults = faults

    def prepare_update(self, store: ApiStore, rt: ResourceType, old: dict, new: dict) -> None:
        super().prepare_update(store, rt, old, new)
        meta = new.get("metadata") or {}
        fault = self.faults.object_fault("VirtualMachine", meta.get("namespace"), meta.get("name", ""))
        if fault == "swap-conflict" and _spec_but_run_strategy(old) != _spec_but_run_strategy(new):
            raise conflict(
                rt,
                meta.get("name", ""),
                "the object has been modified; please apply your changes to the latest version and try "
                "again (lab fault swap-conflict)",
            )


class _Listener:
    """A real TCP port on 127.0.0.1 standing for the guest's remote-access service."""

    def __init__(self, banner: bytes):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.banner = banner
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, name=f"lab-guest-port-{self.port}", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _addr = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            try:
                if self.banner:
                    conn.sendall(self.banner)
            except OSError:
                pass
            finally:
                conn.close()

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=2)
        self.sock.close()


class VirtController(Controller):
    """virt-controller and virt-handler in one: VM -> VMI lifecycle, boot decision, agent, guest port."""

    name = "virt-controller"
    watches = ((GROUP, "virtualmachines"), (GROUP, "virtualmachineinstances"))
    resync_seconds = 1.0

    def __init__(self, lab: LabContext):
        super().__init__(lab)
        self._listeners: dict[str, _Listener] = {}  # VMI uid -> listener
        self._running_since: dict[str, float] = {}  # VMI uid -> when the guest was powered on
        self._lock = threading.Lock()
        self._qemu = QemuDevice(lab.state_dir)
        install_hooks(lab.store, GROUP, "virtualmachines", VMFaultHooks, faults=lab.faults)

    def types(self) -> tuple[ResourceType, ResourceType]:
        store = self.lab.store
        return store.resource(GROUP, "v1", "virtualmachines"), store.resource(
            GROUP, "v1", "virtualmachineinstances"
        )

    def reconcile(self, rt: ResourceType, obj: dict) -> float | None:
        if rt.plural == "virtualmachines":
            return self._reconcile_vm(obj)
        requeue = self._reconcile_vmi(obj)
        for ref in obj["metadata"].get("ownerReferences") or ():
            if ref.get("kind") == "VirtualMachine" and ref.get("controller"):
                self._vm_by_name(obj["metadata"]["namespace"], ref["name"])
        return requeue

    def _vm_by_name(self, namespace: str, name: str) -> None:
        vm_rt = self.types()[0]
        try:
            self._reconcile_vm(self.lab.store.get(vm_rt, namespace, name))
        except ApiError as exc:
            if exc.code != 404 and "being terminated" not in str(exc):  # a namespace on its way out
                raise

    # --- VirtualMachine --------------------------------------------------------------------------

    def _reconcile_vm(self, vm: dict) -> float | None:
        vmi_rt = self.types()[1]
        meta = vm["metadata"]
        if meta.get("deletionTimestamp"):
            self._stop_owned_vmi(vm)
            return None
        namespace, name = meta["namespace"], meta["name"]
        strategy = run_strategy(vm)
        vmi = self._get(vmi_rt, namespace, name)
        if vmi is not None and not _owned_by(vmi, vm):
            vmi = None  # not ours: KubeVirt would not adopt it either
        phase = ((vmi or {}).get("status") or {}).get("phase")
        if strategy in RUNNING_STRATEGIES:
            finished = phase in ("Succeeded", "Failed")
            restart = finished and (
                strategy == "Always" or (strategy == "RerunOnFailure" and phase == "Failed")
            )
            if vmi is not None and restart and not vmi["metadata"].get("deletionTimestamp"):
                self._delete(vmi_rt, namespace, name)
            elif vmi is None and not (strategy == "Once" and (vm.get("status") or {}).get("created")):
                vmi = self._create_vmi(vm)
                record_event(
                    self.lab.store,
                    vm,
                    "Normal",
                    "SuccessfulCreate",
                    f"Started the virtual machine by creating the new virtual machine instance {name}",
                    COMPONENT,
                )
        elif strategy == "Halted" and vmi is not None and not vmi["metadata"].get("deletionTimestamp"):
            if self._fault(namespace, name) == "stop-hangs":
                self._hang(vmi)
                self._vm_status(vm, vmi, strategy)
                return None
            self._delete(vmi_rt, namespace, name)
            self._close(vmi["metadata"]["uid"])  # the guest is powered off with its instance
            vmi = self._get(vmi_rt, namespace, name)
            record_event(
                self.lab.store,
                vm,
                "Normal",
                "SuccessfulDelete",
                f"Stopped the virtual machine by deleting the virtual machine instance {meta['uid']}",
                COMPONENT,
            )
        self._vm_status(vm, vmi, strategy)
        return None

    def _fault(self, namespace: str, name: str) -> str | None:
        return self.lab.faults.object_fault("VirtualMachine", namespace, name)

    def _hang(self, vmi: dict) -> None:
        """A shutdown that never completes: the VMI keeps running and says so."""
        found = condition(vmi, "Stopping") or {}
        if found.get("status") == "True" and found.get("message") == STOP_HANGS:
            return
        cond = {"type": "Stopping", "status": "True", "reason": "ShutdownHangs", "message": STOP_HANGS}
        vmi = self._set_vmi(vmi, conditions=[cond])
        record_event(self.lab.store, vmi, "Warning", "ShutdownHangs", STOP_HANGS, HANDLER)

    def _create_vmi(self, vm: dict) -> dict:
        vmi_rt = self.types()[1]
        meta = vm["metadata"]
        template = (vm.get("spec") or {}).get("template") or {}
        tmeta = template.get("metadata") or {}
        labels = dict(tmeta.get("labels") or {})
        labels["kubevirt.io/vm"] = meta["name"]
        notes = {k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith(LAB_PREFIX)}
        notes.update(tmeta.get("annotations") or {})
        body = {
            "apiVersion": API_VERSION,
            "kind": "VirtualMachineInstance",
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "labels": labels,
                "annotations": notes,
                "ownerReferences": [
                    {
                        "apiVersion": API_VERSION,
                        "kind": "VirtualMachine",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": dict(template.get("spec") or {}),
        }
        try:
            return self.lab.store.create(vmi_rt, body)
        except ApiError as exc:
            if exc.code != 409:
                raise
            return self.lab.store.get(vmi_rt, meta["namespace"], meta["name"])

    def _vm_status(self, vm: dict, vmi: dict | None, strategy: str) -> None:
        vm_rt = self.types()[0]
        vstatus = (vmi or {}).get("status") or {}
        phase = vstatus.get("phase") or ""
        synced = condition(vmi or {}, "Synchronized") or {}
        ready = bool(vmi) and (condition(vmi, "Ready") or {}).get("status") == "True"
        if vmi is None:
            printable = "Starting" if strategy in RUNNING_STRATEGIES and strategy != "Once" else "Stopped"
        elif vmi["metadata"].get("deletionTimestamp") or strategy == "Halted":
            printable = "Stopping"
        elif synced.get("reason") == "FailedPvcNotFound":
            printable = "ErrorPvcNotFound"
        elif synced.get("reason") == "PvcNotBound":
            printable = "WaitingForVolumeBinding"
        elif phase == "Running":
            printable = "Running"
        elif phase == "Failed":
            printable = "CrashLoopBackOff" if strategy != "Once" else "Stopped"
        elif phase == "Succeeded":
            printable = "Stopped"
        else:
            printable = "Starting"
        now = now_rfc3339()
        reason = "" if ready else ("VMINotExists" if vmi is None else "VMINotReady")
        wanted = {"printableStatus": printable, "created": vmi is not None, "runStrategy": strategy}
        if ready:
            wanted["ready"] = True  # KubeVirt omits ready (and created) when false
        meta = vm["metadata"]

        def write(obj: dict) -> bool:
            status = obj.setdefault("status", {})
            old = condition(obj, "Ready") or {}
            same = (
                all(status.get(k) == v for k, v in wanted.items())
                and bool(status.get("ready")) == ready
                and old.get("status") == ("True" if ready else "False")
            )
            if same:
                return False
            status.update(wanted)
            if not ready:
                status.pop("ready", None)
            cond = {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": now}
            if reason:
                cond["reason"] = reason
            others = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"]
            status["conditions"] = [cond, *others]
            return True

        try:
            modify(self.lab.store, vm_rt, meta["namespace"], meta["name"], write, status=True)
        except ApiError as exc:
            if exc.code != 404:
                raise

    # --- VirtualMachineInstance -----------------------------------------------------------------

    def _reconcile_vmi(self, vmi: dict) -> float | None:
        meta = vmi["metadata"]
        if meta.get("deletionTimestamp"):
            self._close(meta["uid"])
            return None
        phase = (vmi.get("status") or {}).get("phase") or ""
        if phase == "":
            self._set_vmi(vmi, phase="Pending", conditions=[])
            return 0.0
        if phase in ("Pending", "Scheduling"):
            return self._schedule(vmi)
        if phase == "Scheduled":
            return self._start(vmi)
        if phase == "Running":
            return self._agent(vmi)
        return None

    def _set_vmi(self, vmi: dict, phase: str | None = None, conditions: list | None = None, **extra) -> dict:
        vmi_rt = self.types()[1]
        meta = vmi["metadata"]
        annotations = extra.pop("annotations", None)

        def write(obj: dict) -> bool:
            status = obj.setdefault("status", {})
            before = repr((status, obj["metadata"].get("annotations")))
            if phase is not None and status.get("phase") != phase:
                status["phase"] = phase
                stamps = status.setdefault("phaseTransitionTimestamps", [])
                stamps.append({"phase": phase, "phaseTransitionTimestamp": now_rfc3339()})
            for cond in conditions or ():
                kept = [c for c in status.get("conditions") or [] if c.get("type") != cond["type"]]
                status["conditions"] = [*kept, dict(cond, lastTransitionTime=now_rfc3339())]
            status.update(extra)
            if annotations:
                obj["metadata"].setdefault("annotations", {}).update(annotations)
            return repr((status, obj["metadata"].get("annotations"))) != before

        return modify(self.lab.store, vmi_rt, meta["namespace"], meta["name"], write)

    def _drop_condition(self, vmi: dict, ctype: str) -> dict:
        vmi_rt = self.types()[1]
        meta = vmi["metadata"]

        def write(obj: dict) -> bool:
            conds = (obj.get("status") or {}).get("conditions") or []
            kept = [c for c in conds if c.get("type") != ctype]
            if len(kept) == len(conds):
                return False
            obj["status"]["conditions"] = kept
            return True

        return modify(self.lab.store, vmi_rt, meta["namespace"], meta["name"], write)

    def _schedule(self, vmi: dict) -> float | None:
        namespace = vmi["metadata"]["namespace"]
        pvc_rt = core_types(self.lab)["pvc"]
        for volume in (vmi.get("spec") or {}).get("volumes") or []:
            claim = _claim_of(volume)
            if not claim:
                continue
            if not self.lab.store.exists(pvc_rt, namespace, claim):
                msg = f"PVC {namespace}/{claim} does not exist, waiting for it to appear"
                cond = {
                    "type": "Synchronized",
                    "status": "False",
                    "reason": "FailedPvcNotFound",
                    "message": msg,
                }
                vmi = self._set_vmi(vmi, conditions=[cond])
                record_event(self.lab.store, vmi, "Warning", "FailedPvcNotFound", msg, COMPONENT)
                return 1.0
            pvc = ensure_bound(self.lab, namespace, claim, consumer=True)
            if (pvc.get("status") or {}).get("phase") != "Bound":
                msg = f"PVC {namespace}/{claim} is not bound yet"
                cond = {"type": "Synchronized", "status": "False", "reason": "PvcNotBound", "message": msg}
                self._set_vmi(vmi, conditions=[cond])
                return 0.5
        refused, pod = self._launcher_pod(vmi)
        if refused is not None and "error looking up service account" in refused:
            return (
                LAUNCHER_RETRY_SECONDS  # a fresh namespace: the ServiceAccount controller is about to add it
            )
        if refused is not None:
            msg = "failed to create virtual machine pod: %s" % refused
            cond = {"type": "Synchronized", "status": "False", "reason": "FailedCreate", "message": msg}
            if (condition(vmi, "Synchronized") or {}).get("message") != msg:
                vmi = self._set_vmi(vmi, conditions=[cond])
                note = "Error creating pod: " + refused
                record_event(self.lab.store, vmi, "Warning", "FailedCreate", note, COMPONENT)
            return LAUNCHER_RETRY_SECONDS
        vmi = self._drop_condition(vmi, "Synchronized")
        node = (pod or {}).get("spec", {}).get("nodeName") or NODE
        blocked = multi_attach_error(self.lab, pod) if pod is not None else None
        if blocked is not None:
            # The launcher pod is scheduled but its disk is attached to another node: it stays
            # ContainerCreating and the VMI Scheduling until the holder lets go.
            self._attach_wait(pod, blocked)
            self._set_vmi(vmi, phase="Scheduling", nodeName=node)
            return 1.0
        if pod is not None:
            self._launcher_running(pod)
        self._set_vmi(vmi, phase="Scheduled", nodeName=node)
        return 0.0

    def _launcher_running(self, pod: dict) -> None:
        """The launcher's compute container runs (no process: the VMI's lifecycle stays this controller's)."""

        def running(obj: dict) -> bool:
            status = obj.setdefault("status", {})
            if status.get("phase") == "Running":
                return False
            now = now_rfc3339()
            status.update(
                phase="Running",
                startTime=status.get("startTime") or now,
                containerStatuses=[
                    {
                        "name": "compute",
                        "image": LAUNCHER_IMAGE,
                        "imageID": "",
                        "ready": True,
                        "restartCount": 0,
                        "started": True,
                        "state": {"running": {"startedAt": now}},
                    }
                ],
            )
            return True

        meta = pod["metadata"]
        try:
            modify(
                self.lab.store,
                core_types(self.lab)["pod"],
                meta["namespace"],
                meta["name"],
                running,
                status=True,
            )
        except ApiError as exc:
            if exc.code != 404:
                raise

    def _attach_wait(self, pod: dict, message: str) -> None:
        def waiting(obj: dict) -> bool:
            status = obj.setdefault("status", {})
            want = [
                {
                    "name": "compute",
                    "image": LAUNCHER_IMAGE,
                    "ready": False,
                    "restartCount": 0,
                    "started": False,
                    "state": {"waiting": {"reason": "ContainerCreating"}},
                }
            ]
            if status.get("phase") == "Pending" and status.get("containerStatuses") == want:
                return False
            status.update(phase="Pending", containerStatuses=want)
            return True

        pod_rt = core_types(self.lab)["pod"]
        meta = pod["metadata"]
        try:
            pod = modify(self.lab.store, pod_rt, meta["namespace"], meta["name"], waiting, status=True)
        except ApiError as exc:
            if exc.code != 404:
                raise
            return
        record_event(self.lab.store, pod, "Warning", "FailedAttachVolume", message, ATTACHER)

    def _launcher_pod(self, vmi: dict) -> tuple[str | None, dict | None]:
        """Create the VMI's virt-launcher pod through the API server, or say why it refused.

        The API server's own PodSecurity admission decides: the pod asks for what the launcher needs
        (a capability outside the baseline level), so a namespace enforcing baseline refuses it, as on a
        cluster. No process runs for it; the VMI's lifecycle stays this controller's.
        """
        meta = vmi["metadata"]
        pod_rt = core_types(self.lab)["pod"]
        body = launcher_pod(vmi)
        pod = self._get(pod_rt, meta["namespace"], body["metadata"]["name"])
        if pod is None:
            try:
                pod = self.lab.store.create(pod_rt, body)
            except ApiError as exc:
                if exc.code != 409:
                    return exc.message, None
                pod = self.lab.store.get(pod_rt, meta["namespace"], body["metadata"]["name"])
        if not (pod.get("spec") or {}).get("nodeName"):
            pod = self._bind_launcher(pod)
        return None, pod

    def _bind_launcher(self, pod: dict) -> dict:
        """Schedule the launcher pod as the scheduler would (pods/binding), on the node attach.place picks."""
        meta = pod["metadata"]
        node = place(self.lab, meta["namespace"], pod.get("spec") or {})
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        path = "/api/v1/namespaces/%s/pods/%s/binding" % (meta["namespace"], meta["name"])
        reply = self.lab.store.request("POST", path, binding)
        if reply.status >= 300 and reply.status != 409:  # 409: bound already
            raise ApiError(reply.status, reply.reason or "", (reply.data or b"").decode("utf-8", "replace"))
        return self.lab.store.get(core_types(self.lab)["pod"], meta["namespace"], meta["name"])

    def _start(self, vmi: dict) -> float | None:
        spec = vmi.get("spec") or {}
        namespace = vmi["metadata"]["namespace"]
        if wants_qemu(vmi):
            return self._start_qemu(vmi)
        boot, check, disk_bytes = self._boot_check(namespace, spec)
        memory = guest_memory(spec)
        status = dict(
            running_status(vmi),
            memory={
                "guestRequested": str(memory),
                "guestAtBoot": str(memory),
                "guestCurrent": str(memory),
            },
        )
        ready = {"type": "Ready", "status": "True"}
        notes = {BOOT_NOTE: boot}
        if check is not None and check.volume is not None:
            notes[VOLUME_NOTE] = ",".join(str(int(v)) for v in check.volume)
            notes[DISK_NOTE] = str(disk_bytes)
        vmi = self._set_vmi(vmi, phase="Running", conditions=[ready], annotations=notes, **status)
        self._running_since[vmi["metadata"]["uid"]] = time.monotonic()
        if not boot.startswith(("windows", "linux")):
            record_event(self.lab.store, vmi, "Warning", "GuestNotBooting", boot, HANDLER)
        return self._agent_delay()

    def _start_qemu(self, vmi: dict) -> float | None:
        """The lab device: QEMU boots the claim's disk; the guest's agent decides the rest."""
        spec = vmi.get("spec") or {}
        found = self._boot_image(vmi["metadata"]["namespace"], spec)
        if isinstance(found, str):
            return self._no_qemu(vmi, found)
        pvc, image = found
        try:
            notes = self._qemu.start(vmi, image, self._guest_disk_bytes(pvc, image), guest_memory(spec))
        except OSError as exc:  # QEMU or xorriso missing, the seed not written: said on the VMI
            return self._no_qemu(vmi, f"no boot: QEMU could not start: {exc}")
        notes[BOOT_NOTE] = "linux: booting under QEMU"
        self._set_vmi(
            vmi,
            phase="Running",
            conditions=[{"type": "Ready", "status": "True"}],
            annotations=notes,
            **running_status(vmi),
        )
        return 1.0

    def _no_qemu(self, vmi: dict, why: str) -> None:
        ready = {"type": "Ready", "status": "True"}
        vmi = self._set_vmi(vmi, phase="Running", conditions=[ready], annotations={BOOT_NOTE: why})
        record_event(self.lab.store, vmi, "Warning", "GuestNotBooting", why, HANDLER)

    def _qemu_agent(self, vmi: dict) -> float | None:
        """virt-handler's view of a real guest: the agent connected, its OS, hostname and filesystems."""
        guest = self._qemu.guest(vmi["metadata"]["uid"])
        if guest is None:
            return None
        if not guest.alive():
            message = guest.failure()
            if vmi["metadata"].get("annotations", {}).get(BOOT_NOTE) != message:
                vmi = self._set_vmi(vmi, annotations={BOOT_NOTE: message})
                record_event(self.lab.store, vmi, "Warning", "GuestNotBooting", message, HANDLER)
            return None
        state = guest.agent_state()
        if state:
            os_info = state["os"]
            info = {
                k: os_info.get(c, "")
                for k, c in (
                    ("id", "id"),
                    ("name", "name"),
                    ("prettyName", "pretty-name"),
                    ("version", "version"),
                    ("versionId", "version-id"),
                    ("kernelRelease", "kernel-release"),
                    ("machine", "machine"),
                )
            }
            notes = {
                BOOT_NOTE: "linux: booted under QEMU, the guest agent answers",
                BOOT_SECONDS_NOTE: str(state["boot_seconds"]),
                ACCEL_NOTE: guest.describe(),
                HOSTNAME_NOTE: state["hostname"],
                FILESYSTEMS_NOTE: json.dumps(state["filesystems"], sort_keys=True),
            }
            cond = {"type": "AgentConnected", "status": "True"}
            if (condition(vmi, "AgentConnected") or {}).get("status") == "True":
                self._set_vmi(vmi, guestOSInfo=info, annotations=notes)
            else:
                self._set_vmi(vmi, conditions=[cond], guestOSInfo=info, annotations=notes)
        return AGENT_POLL_SECONDS

    def _boot_image(self, namespace: str, spec: dict):
        """(the boot claim, its disk image), or why there is no bootable device."""
        name = _boot_volume(spec)
        volume = next((v for v in spec.get("volumes") or [] if v.get("name") == name), None)
        claim = _claim_of(volume) if volume else None
        if not claim:
            return "no bootable device: the boot disk is not a persistent volume"
        try:
            pvc = self.lab.store.get(core_types(self.lab)["pvc"], namespace, claim)
            image = disk_image_path(self.lab, pvc)
        except ApiError as exc:
            if exc.code != 404:
                raise  # a loaded API server's 5xx is no verdict on the disk: the runner comes back
            return f"no bootable device: claim {claim}: {exc}"
        except ValueError as exc:
            return f"no bootable device: claim {claim}: {exc}"
        if not image.exists() or image.is_dir():
            return f"no bootable device: claim {claim} holds no disk image"
        return pvc, image

    def _boot_check(self, namespace: str, spec: dict) -> tuple[str, BootCheck | None, int]:
        """ "windows: ..." / "linux: ..." when the guest boots, else why not; the disk check and the
        size of the disk the guest sees."""
        found = self._boot_image(namespace, spec)
        if isinstance(found, str):
            return found, None, 0
        pvc, image = found
        result = inspect(image)
        if not result.boots:
            return result.reason, result, 0
        disk_bytes = self._guest_disk_bytes(pvc, image)
        memory = guest_memory(spec)
        if memory < MIN_BOOT_MEMORY[result.guest]:
            return f"no boot: {memory} bytes of memory is too little for the {result.guest} guest", result, 0
        if result.remote_off:
            return (
                f"{result.guest}: {result.reason}; remote access off: {result.remote_off}",
                result,
                disk_bytes,
            )
        return f"{result.guest}: {result.reason}", result, disk_bytes

    def _guest_disk_bytes(self, pvc: dict, image) -> int:
        """A Block claim is the disk; a Filesystem claim's disk.img is grown to the claim (less the
        filesystem overhead) only when the KubeVirt CR has ExpandDisks, as virt-launcher does."""
        own = image_virtual_size(image)
        capacity = parse_quantity(((pvc.get("status") or {}).get("capacity") or {}).get("storage") or 0)
        if (pvc.get("spec") or {}).get("volumeMode") == "Block":
            return max(own, capacity)
        if not self._expand_disks():
            return own
        return max(own, int(capacity * (1 - FILESYSTEM_OVERHEAD)) // 2**20 * 2**20)

    def _expand_disks(self) -> bool:
        try:
            kubevirts, _ = self.lab.store.list(self.lab.store.resource(GROUP, "v1", "kubevirts"), None)
        except ApiError:
            return False
        for kubevirt in kubevirts:
            gates = ((kubevirt.get("spec") or {}).get("configuration") or {}).get(
                "developerConfiguration"
            ) or {}
            version = (kubevirt.get("status") or {}).get("observedKubeVirtVersion") or ""
            numbers = tuple(int(n) for n in version.lstrip("v").split(".")[:3] if n.isdigit())
            if "ExpandDisks" in (gates.get("featureGates") or []) or numbers >= (1, 9, 0):
                return True
        return False

    def _agent_delay(self) -> float:
        try:
            return max(0.0, float(os.environ.get(AGENT_DELAY_ENV, "0.5")))
        except ValueError:
            return 0.5

    def _agent(self, vmi: dict) -> float | None:
        meta = vmi["metadata"]
        if self._qemu.owns(meta["uid"]):
            return self._qemu_agent(vmi)
        boot = (meta.get("annotations") or {}).get(BOOT_NOTE, "")
        guest = boot.split(":", 1)[0]
        if guest not in GUEST_PORTS:
            return None  # the firmware loops; no agent will ever connect
        if (condition(vmi, "AgentConnected") or {}).get("status") == "True":
            return None
        if self._fault(meta["namespace"], meta["name"]) == "no-agent":
            return None  # the guest runs, its agent never reports; the resync looks again
        since = self._running_since.get(meta["uid"])
        wait = self._agent_delay() - (time.monotonic() - since) if since is not None else 0.0
        if wait > 0:
            return max(0.05, wait)
        notes = meta.get("annotations") or {}
        if notes.get(AGENT_NOTE) == "absent":
            return self._agentless(vmi, guest)
        annotations = {}
        remote_off = "; remote access off: " in boot
        if remote_off:
            annotations[REMOTE_NOTE] = boot.split("; remote access off: ", 1)[1]
        if not remote_off and (meta.get("annotations") or {}).get(PORT_OPEN, "true").lower() != "false":
            port = GUEST_PORTS[guest]
            listener = self._open(meta["uid"], b"SSH-2.0-lab\r\n" if guest == "linux" else b"")
            annotations[FORWARDED + str(port)] = str(listener.port)
        if guest == "windows" and notes.get(GUEST_WINRM_NOTE):
            winrm = self._open_winrm(vmi, notes[GUEST_WINRM_NOTE])
            annotations[FORWARDED + str(WINRM_PORT)] = str(winrm.port)
        cond = {"type": "AgentConnected", "status": "True"}
        self._set_vmi(vmi, conditions=[cond], guestOSInfo=dict(GUEST_OS[guest]), annotations=annotations)
        return None

    def _agentless(self, vmi: dict, guest: str) -> float | None:
        """A guest with no agent: only its SSH server (Linux, with a NoCloud seed) shows it booted."""
        meta = vmi["metadata"]
        notes = meta.get("annotations") or {}
        seeded = any(v.get("cloudInitNoCloud") for v in (vmi.get("spec") or {}).get("volumes") or [])
        if guest != "linux" or not seeded or FORWARDED + "22" in notes:
            return None
        if notes.get(PORT_OPEN, "true").lower() == "false":
            return None
        port = notes.get(GUEST_SSH_NOTE) or str(self._open(meta["uid"], SSH_BANNER).port)
        self._set_vmi(vmi, annotations={FORWARDED + "22": port})
        return None

    # --- guest ports ----------------------------------------------------------------------------

    def _open(self, uid: str, banner: bytes) -> _Listener:
        with self._lock:
            listener = self._listeners.get(uid)
            if listener is None:
                listener = self._listeners[uid] = _Listener(banner)
            return listener

    def _open_winrm(self, vmi: dict, credentials: str) -> WinRMGuest:
        uid = vmi["metadata"]["uid"]
        with self._lock:
            listener = self._listeners.get(uid + "/winrm")
            if listener is None:
                meta = vmi["metadata"]

                def sizes() -> tuple[int, int, int]:  # read at each request, as the guest would
                    return partition(self._get(self.types()[1], meta["namespace"], meta["name"]) or vmi)

                listener = self._listeners[uid + "/winrm"] = WinRMGuest(credentials, sizes)
            return listener

    def _close(self, uid: str) -> None:
        with self._lock:
            listeners = [self._listeners.pop(k, None) for k in (uid, uid + "/winrm")]
            self._running_since.pop(uid, None)
        self._qemu.stop(uid)  # the guest is powered off with its instance
        for listener in listeners:
            if listener is not None:
                listener.close()

    def _stop_owned_vmi(self, vm: dict) -> None:
        """virt-controller stops a deleted VM's instance itself, without waiting for the garbage collector."""
        meta = vm["metadata"]
        vmi_rt = self.types()[1]
        vmi = self._get(vmi_rt, meta["namespace"], meta["name"])
        if vmi is None or vmi["metadata"].get("deletionTimestamp"):
            return
        if _owned_by(vmi, vm):
            self._delete(vmi_rt, meta["namespace"], meta["name"])

    def deleted(self, rt: ResourceType, obj: dict) -> None:
        if rt.plural == "virtualmachines":
            self._stop_owned_vmi(obj)
        if rt.plural == "virtualmachineinstances":
            self._close(obj["metadata"]["uid"])
            # virt-controller removes the launcher pod with its instance (the garbage collector would,
            # later): a restarted VM's new pod must not find the old one still holding the disks.
            self._delete(
                core_types(self.lab)["pod"],
                obj["metadata"]["namespace"],
                launcher_pod(obj)["metadata"]["name"],
            )
            for ref in obj["metadata"].get("ownerReferences") or ():
                if ref.get("kind") == "VirtualMachine":
                    self._vm_by_name(obj["metadata"]["namespace"], ref["name"])

    def stop(self) -> None:
        with self._lock:
            listeners, self._listeners = list(self._listeners.values()), {}
        for listener in listeners:
            listener.close()
        self._qemu.stop_all()

    # --- store helpers --------------------------------------------------------------------------

    def _get(self, rt: ResourceType, namespace: str, name: str) -> dict | None:
        try:
            return self.lab.store.get(rt, namespace, name)
        except ApiError as exc:
            if exc.code != 404:
                raise
            return None

    def _delete(self, rt: ResourceType, namespace: str, name: str) -> None:
        try:
            self.lab.store.delete(rt, namespace, name)
        except ApiError as exc:
            if exc.code != 404:
                raise


def _owned_by(vmi: dict, vm: dict) -> bool:
    return any(r.get("uid") == vm["metadata"]["uid"] for r in vmi["metadata"].get("ownerReferences") or ())


# virt-api's VNC screenshot subresource (console.py) comes with KubeVirt.
CONTROLLERS = [VirtController, ConsoleController]

__all__ = [
    "CONTROLLERS",
    "FORWARDED",
    "PORT_OPEN",
    "STOP_HANGS",
    "ChainedHooks",
    "VMFaultHooks",
    "VirtController",
    "guest_memory",
    "install_hooks",
    "probe_template",
    "run_strategy",
]
