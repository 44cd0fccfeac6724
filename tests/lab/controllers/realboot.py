"""A lab device: one VM booted for real under QEMU, the way virt-launcher and virt-handler run it.

Every other VM of the lab keeps the simulated boot (kubevirt.py, bootdisk.py). A VM (or its template)
that carries `lab.goldenimage.io/device-qemu: "true"` is opted in: when its instance starts, the lab runs
`qemu-system-x86_64` on the boot claim's own disk image (the bytes the claim holds, raw or qcow2) with

- KVM when /dev/kvm opens, TCG otherwise, and TCG again when a nested KVM stops the guest ("KVM internal
  error", as bench/boot_to_ready.py's probe finds on some hosts); the VMI annotation
  `lab.goldenimage.io/qemu-accel` says which, with the CPU model and why;
- the disk grown to what the guest sees (a raw Filesystem disk.img to the claim less CDI's overhead when
  ExpandDisks is on, as virt-launcher does);
- a NoCloud seed (an ISO labelled `cidata`) made from the VMI's `cloudInitNoCloud` volume, with
  `instance-id` and `local-hostname` as KubeVirt writes them;
- qemu-guest-agent's virtio-serial channel `org.qemu.guest_agent.0` on a unix socket. A thread reads it as
  virt-handler does: once the agent answers, the VMI gets `AgentConnected`, `guestOSInfo` (from
  guest-get-osinfo) and the guest's hostname, and the agent's filesystem list (guest-get-fsinfo) serves the
  `filesystemlist` subresource; `lab.goldenimage.io/qemu-boot-seconds` is QEMU's start to the first answer;
- the guest's SSH port forwarded by QEMU's user network to a loopback port, recorded as
  `lab.goldenimage.io/forwarded-22` like the simulated forward (kubevirt.probe_template reads it).

QEMU is started through lifetime.tied by the controller's own thread, so it dies with the lab even when the
lab is killed; it is stopped when the instance goes (the VM halted or deleted) and when the lab stops. What
each boot did is kept in `<lab state>/qemu/<VMI uid>/` (console.log, qemu.stderr, boot.json with the pid,
accelerator and boot time); the disk stays the claim's.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import subprocess
import threading
import time

from bench.boot_to_ready import KVM_CPU_MODELS, GuestAgent

from ..lifetime import tied
from .guestagent import AGENT_FILESYSTEMS_NOTE, LAB_PREFIX

DEVICE = LAB_PREFIX + "device-qemu"
ACCEL_NOTE = LAB_PREFIX + "qemu-accel"
BOOT_SECONDS_NOTE = LAB_PREFIX + "qemu-boot-seconds"
HOSTNAME_NOTE = LAB_PREFIX + "guest-hostname"
# The agent's filesystem list as KubeVirt's filesystemlist subresource items (guestagent.filesystems).
FILESYSTEMS_NOTE = AGENT_FILESYSTEMS_NOTE
GUEST_SSH_PORT = 22
AGENT_POLL_SECONDS = 2.0
STOP_SECONDS = 10.0
# A KVM that refuses the host CPU model aborts QEMU within this long; the next model is tried.
KVM_ABORT_SECONDS = 3.0


def wanted(obj: dict) -> bool:
    """True when the VM or VMI opted in to the real boot."""
    notes = (obj.get("metadata") or {}).get("annotations") or {}
    return notes.get(DEVICE, "").lower() == "true"


def accelerator() -> tuple[str, str]:
    """("kvm", why) when /dev/kvm opens for read and write, else ("tcg", why)."""
    try:
        os.close(os.open("/dev/kvm", os.O_RDWR))
    except OSError as exc:
        return "tcg", f"/dev/kvm cannot be opened: {exc.strerror}"
    return "kvm", "/dev/kvm opens"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def disk_format(path: pathlib.Path) -> str:
    with open(path, "rb") as handle:
        return "qcow2" if handle.read(4) == b"QFI\xfb" else "raw"


def nocloud_seed(folder: pathlib.Path, vmi: dict) -> pathlib.Path | None:
    """The VMI's cloudInitNoCloud volume as the ISO virt-launcher attaches (volume label cidata)."""
    import base64

    spec = vmi.get("spec") or {}
    found = next(
        (v["cloudInitNoCloud"] for v in spec.get("volumes") or [] if v.get("cloudInitNoCloud")), None
    )
    if found is None:
        return None
    meta = vmi["metadata"]
    tree = folder / "cidata"
    tree.mkdir(parents=True, exist_ok=True)
    user = found.get("userData")
    if user is None and found.get("userDataBase64"):
        user = base64.b64decode(found["userDataBase64"]).decode()
    network = found.get("networkData")
    if network is None and found.get("networkDataBase64"):
        network = base64.b64decode(found["networkDataBase64"]).decode()
    hostname = spec.get("hostname") or meta["name"]
    (tree / "meta-data").write_text(
        json.dumps({"instance-id": "%s.%s" % (meta["name"], meta["namespace"]), "local-hostname": hostname})
    )
    (tree / "user-data").write_text(user or "")
    if network:
        (tree / "network-config").write_text(network)
    iso = folder / "cidata.iso"
    argv = ["xorriso", "-as", "mkisofs", "-quiet", "-V", "cidata", "-J", "-r", "-o", str(iso), str(tree)]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise OSError(f"making the NoCloud seed failed: {result.stderr.strip()}")
    return iso


def fs_items(fsinfo: list[dict]) -> list[dict]:
    """guest-get-fsinfo as virt-handler turns it into VirtualMachineInstanceFileSystemList items."""
    items = []
    for fs in fsinfo:
        item = {
            "diskName": fs.get("name", ""),
            "mountPoint": fs.get("mountpoint", ""),
            "fileSystemType": fs.get("type", ""),
        }
        if "total-bytes" in fs:
            item["totalBytes"] = fs["total-bytes"]
        if "used-bytes" in fs:
            item["usedBytes"] = fs["used-bytes"]
        disks = [
            {"busType": d.get("bus-type", ""), "serial": d.get("serial", "")} for d in fs.get("disk") or []
        ]
        if disks:
            item["disk"] = disks
        items.append(item)
    return items


class QemuGuest:
    """One QEMU process booting a claim's disk, and the thread reading its guest agent."""

    def __init__(self, folder: pathlib.Path, vmi: dict, disk: pathlib.Path, memory: int):
        self.folder = folder
        self.uid = vmi["metadata"]["uid"]
        self.disk = disk
        self.format = disk_format(disk)
        self.memory_mib = max(256, memory // 2**20)
        self.accel, self.accel_why = accelerator()
        self.cpu_model = ""
        self.ssh_port = free_port()
        self.qga = folder / "qga.sock"
        self.seed = nocloud_seed(folder, vmi)
        self.proc: subprocess.Popen | None = None
        self.started = 0.0
        self.lock = threading.Lock()
        self.state: dict = {}  # what the agent said: os, hostname, filesystems, boot_seconds
        self.stopping = threading.Event()
        self.reader: threading.Thread | None = None

    def argv(self, cpu: str) -> list[str]:
        netdev = "user,id=net0,hostfwd=tcp:127.0.0.1:%d-:%d" % (self.ssh_port, GUEST_SSH_PORT)
        argv = [
            "qemu-system-x86_64",
            "-name", "guest=%s" % self.uid,
            "-accel", self.accel,
            "-cpu", cpu,
            "-m", str(self.memory_mib),
            "-smp", "1",
            "-nodefaults",
            "-display", "none",
            "-vga", "none",
            "-serial", "file:%s" % (self.folder / "console.log"),
            "-drive", "file=%s,if=none,id=disk0,format=%s,discard=unmap" % (self.disk, self.format),
            "-device", "virtio-blk-pci,drive=disk0,bootindex=0",
            "-netdev", netdev,
            "-device", "virtio-net-pci,netdev=net0",
            "-chardev", "socket,id=qga0,path=%s,server=on,wait=off" % self.qga,
            "-device", "virtio-serial",
            "-device", "virtserialport,chardev=qga0,name=org.qemu.guest_agent.0",
        ]  # fmt: skip
        if self.seed is not None:
            argv += ["-drive", "file=%s,if=virtio,format=raw,readonly=on" % self.seed]
        return argv

    def start(self) -> None:
        """Start QEMU (from the calling thread: its parent-death signal follows it) and the agent reader."""
        self._launch()
        self.reader = threading.Thread(target=self._read_agent, name=f"lab-qga-{self.uid[:8]}", daemon=True)
        self.reader.start()

    def _launch(self) -> None:
        models = KVM_CPU_MODELS if self.accel == "kvm" else ("qemu64,-svm",)
        for model in models:
            with self.lock:
                if self.stopping.is_set():
                    return
                self.qga.unlink(missing_ok=True)
                stderr = open(self.folder / "qemu.stderr", "wb")  # noqa: SIM115  (QEMU holds it)
                try:
                    argv = tied(self.argv(model))
                    self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr)
                finally:
                    stderr.close()
                self.started = time.monotonic()
                self.cpu_model = model
            try:
                self.proc.wait(KVM_ABORT_SECONDS if self.accel == "kvm" else 0.5)
            except subprocess.TimeoutExpired:
                break  # running
            self.accel_why += "; -cpu %s: %s" % (model, self.failure())
        self._record()

    def _kvm_failed(self) -> bool:
        """A nested KVM that cannot emulate an instruction stops the guest (QEMU runs on): TCG then."""
        if self.accel != "kvm" or self.state:
            return False
        text = (self.folder / "qemu.stderr").read_text(errors="replace")
        if "KVM internal error" not in text:
            return False
        first = text.strip().splitlines()[0]
        self.proc.kill()
        self.proc.wait()
        self.accel = "tcg"
        self.accel_why += "; the guest stopped %.0fs after start under KVM (%s)" % (
            time.monotonic() - self.started,
            first,
        )
        self._launch()
        return True

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def failure(self) -> str:
        text = (self.folder / "qemu.stderr").read_text(errors="replace").strip()
        return "QEMU exited (%s): %s" % (self.proc.returncode if self.proc else "?", text[-400:])

    def _read_agent(self) -> None:
        agent = None
        while not self.stopping.is_set() and self.alive():
            try:
                if self._kvm_failed() and agent is not None:
                    agent.close()
                    agent = None
                if agent is None:
                    agent = GuestAgent(self.qga, 5, alive=self.alive)
                if agent.sync(2.0):
                    found = {
                        "os": agent.call("guest-get-osinfo", 5),
                        "hostname": agent.call("guest-get-host-name", 5).get("host-name", ""),
                        "filesystems": fs_items(agent.call("guest-get-fsinfo", 10)),
                    }
                    with self.lock:
                        found["boot_seconds"] = self.state.get("boot_seconds") or round(
                            time.monotonic() - self.started, 1
                        )
                        first = not self.state
                        self.state = found
                    if first:
                        self._record()
            except Exception:  # the agent restarting or QEMU going: the next turn tries again
                if agent is not None:
                    agent.close()
                agent = None
            self.stopping.wait(AGENT_POLL_SECONDS)
        if agent is not None:
            agent.close()

    def agent_state(self) -> dict:
        with self.lock:
            return dict(self.state)

    def _record(self) -> None:
        record = {
            "pid": self.proc.pid if self.proc else None,
            "accelerator": self.accel,
            "accelerator_why": self.accel_why,
            "cpu_model": self.cpu_model,
            "ssh_port": self.ssh_port,
            "disk": str(self.disk),
            "boot_seconds": self.agent_state().get("boot_seconds"),
        }
        (self.folder / "boot.json").write_text(json.dumps(record, indent=1))

    def describe(self) -> str:
        return f"{self.accel} (-cpu {self.cpu_model}; {self.accel_why})"

    def stop(self) -> None:
        with self.lock:
            self.stopping.set()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.reader is not None:
            self.reader.join(timeout=STOP_SECONDS)
        self.qga.unlink(missing_ok=True)
        shutil.rmtree(self.folder / "cidata", ignore_errors=True)


class QemuDevice:
    """The real boots of one lab, by VMI uid."""

    def __init__(self, state_dir: pathlib.Path):
        self.root = state_dir / "qemu"
        self.guests: dict[str, QemuGuest] = {}
        self.lock = threading.Lock()

    def owns(self, uid: str) -> bool:
        with self.lock:
            return uid in self.guests

    def start(self, vmi: dict, disk: pathlib.Path, disk_bytes: int, memory: int) -> dict:
        """Boot `disk` (grown to `disk_bytes` when it is raw and smaller); the VMI's annotations."""
        uid = vmi["metadata"]["uid"]
        with self.lock:
            guest = self.guests.get(uid)
        if guest is None:
            if disk_format(disk) == "raw" and disk.stat().st_size < disk_bytes:
                os.truncate(disk, disk_bytes)  # virt-launcher's ExpandDisks grows the image in place
            folder = self.root / uid
            folder.mkdir(parents=True, exist_ok=True)
            guest = QemuGuest(folder, vmi, disk, memory)
            guest.start()
            with self.lock:
                self.guests[uid] = guest
        return {
            ACCEL_NOTE: guest.describe(),
            LAB_PREFIX + "forwarded-%d" % GUEST_SSH_PORT: str(guest.ssh_port),
        }

    def guest(self, uid: str) -> QemuGuest | None:
        with self.lock:
            return self.guests.get(uid)

    def stop(self, uid: str) -> None:
        with self.lock:
            guest = self.guests.pop(uid, None)
        if guest is not None:
            guest.stop()

    def stop_all(self) -> None:
        with self.lock:
            guests, self.guests = list(self.guests.values()), {}
        for guest in guests:
            guest.stop()


__all__ = [
    "ACCEL_NOTE",
    "BOOT_SECONDS_NOTE",
    "DEVICE",
    "FILESYSTEMS_NOTE",
    "HOSTNAME_NOTE",
    "QemuDevice",
    "QemuGuest",
    "wanted",
]
