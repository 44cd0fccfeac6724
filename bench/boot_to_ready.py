#!/usr/bin/env python3
"""Boot-to-ready and copy-on-write delta of a baked PostgreSQL image against install-at-first-boot.

Boots two VMs with QEMU, one after the other, each on a fresh qcow2 overlay (the way Harvester gives
each VM a copy-on-write delta on a shared backing image) with a cloud-init NoCloud seed and a second,
blank virtio disk for the database (serial ``pgdata``, as the seed's VMs get a pgdata volume beside the
OS disk): the first boot formats and mounts it at /var/lib/postgresql before PostgreSQL starts. The baked
artifact is compressed for transfer; a VM on KubeVirt boots from it as CDI imports it, decompressed, so
it is converted once (``qemu-img convert``, as the import does) and the overlays sit on that copy, an
uncompressed qcow2 like the base image:

  baked  the baked image; first boot activates only the requested PostgreSQL major, whose cluster
         the image ships empty: its first start initializes it on the pgdata disk
         (tests/e2e/seeds/baked.user-data), nothing is downloaded;
  apt    the plain base image; first boot runs ``apt-get install postgresql``
         (tests/e2e/seeds/apt.user-data) from a local repository (``--apt-mirror``, filled before the
         boots by tests/e2e/apt_mirror.sh) that this process serves on 127.0.0.1.

Neither VM reaches any network: QEMU's user network runs with ``restrict=on``; the forwarded ports
reach into the guest, and the apt VM's one way out, http://10.0.2.100/, is relayed (``guestfwd``,
socat) to the repository on the host's loopback.

Boot-to-ready is the time from starting QEMU until PostgreSQL answers a startup message on the
forwarded port the way ``pg_isready`` counts it (an authentication request or refusal, not "the
database system is starting up"). After that the guest is shut down through its guest agent and
the overlay's allocated size is the COW delta. No VM outlives this process: each one is stopped
in a ``finally`` and dies with its parent (PR_SET_PDEATHSIG).

    .venv/bin/python bench/boot_to_ready.py --base BASE.qcow2 --baked BAKED.qcow2 --apt-mirror DIR \\
        [--engine-version 15] [--accel auto|kvm|tcg] [--cpu-model host] [--results .cache/e2e/results.json]
    .venv/bin/python bench/boot_to_ready.py --probe-kvm BASE.qcow2
        prints "kvm <cpu model>" or "tcg" on its last line, and why on the lines before
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import ctypes
import datetime
import functools
import http.server
import json
import os
import pathlib
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.verdict import verdict  # noqa: E402

SEEDS = ROOT / "tests" / "e2e" / "seeds"
PR_SET_PDEATHSIG = 1
PG_PROTOCOL_3 = 196608
PG_STARTING_UP = "57P03"
# Where the apt VM finds the local repository: an address of QEMU's user network that guestfwd relays.
MIRROR_GUEST_ADDRESS = "10.0.2.100"
PGDATA_SERIAL = "pgdata"
# KVM's CPU models tried in order: the host's own, then without IA32_ARCH_CAPABILITIES (MSR 0x10a), which
# some nested hosts refuse to set ("failed to set MSR 0x10a"), aborting QEMU at start.
KVM_CPU_MODELS = ("host", "host,-arch-capabilities")


class BenchError(RuntimeError):
    pass


def _die_with_parent():
    # Runs in the child before exec: the VM is killed if this process dies, even by SIGKILL.
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _recv_exact(sock, size):
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def postgres_state(port, timeout):
    """'ready' when PostgreSQL answers a startup message, 'starting' while it refuses as starting up."""
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    except OSError:
        return None
    with sock:
        sock.settimeout(timeout)
        body = struct.pack("!I", PG_PROTOCOL_3) + b"user\0postgres\0database\0postgres\0\0"
        try:
            sock.sendall(struct.pack("!I", len(body) + 4) + body)
            kind, length = struct.unpack("!cI", _recv_exact(sock, 5))
            payload = _recv_exact(sock, min(length - 4, 4096)) if kind == b"E" else b""
        except (OSError, ConnectionError, struct.error):
            # QEMU's user network accepts and then drops the connection while nothing listens.
            return None
    if kind == b"R":
        return "ready"
    if kind == b"E":
        fields = {f[:1]: f[1:].decode(errors="replace") for f in payload.split(b"\0") if f}
        # A refusal for any other reason (pg_hba, auth) still means the server accepts connections.
        return "starting" if fields.get(b"C") == PG_STARTING_UP else "ready"
    return None


def ssh_banner(port, timeout):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            return sock.recv(4) == b"SSH-"
    except OSError:
        return False


# While the guest has no address yet, QEMU's user network accepts a probe's connection on the host and
# retransmits its SYN to the guest seconds apart; once it has one, PostgreSQL's answer may take a while
# under emulation (a backend is forked). A probe that waits therefore sees the answer late, and probes
# asked one after the other delay each other (up to 5 s a round with 2 s and 3 s waits). So each kind of
# probe runs on its own thread and sends a fresh one every PROBE_INTERVAL_S while earlier ones still
# wait: the first answer is timed within about an interval of when the guest could give it.
PROBE_INTERVAL_S = 0.25


class FirstAnswer(threading.Thread):
    """Sends ``probe`` every ``interval`` seconds, up to ``in_flight`` at once, until a reply is
    ``answered``; ``at`` is the VM's elapsed time at the first such reply, ``last`` the latest reply.
    ``halt()`` stops it and returns once no probe runs."""

    def __init__(self, vm, probe, answered, interval=PROBE_INTERVAL_S, in_flight=12):
        super().__init__(daemon=True)
        self.vm, self.probe, self.answered = vm, probe, answered
        self.interval, self.in_flight = interval, in_flight
        self.at = self.last = None
        self._halted = threading.Event()

    def _ask(self):
        reply = self.probe()
        return reply, round(self.vm.elapsed(), 1)

    def run(self):
        with concurrent.futures.ThreadPoolExecutor(self.in_flight) as pool:
            pending, next_ask = set(), 0.0
            while self.at is None and not self._halted.is_set() and self.vm.alive():
                if time.monotonic() >= next_ask and len(pending) < self.in_flight:
                    pending.add(pool.submit(self._ask))
                    next_ask = time.monotonic() + self.interval
                wait = max(0.0, next_ask - time.monotonic())
                if not pending:
                    self._halted.wait(wait)
                    continue
                done, pending = concurrent.futures.wait(pending, wait, concurrent.futures.FIRST_COMPLETED)
                for reply, at in sorted((future.result() for future in done), key=lambda answer: answer[1]):
                    self.last = reply
                    if self.at is None and self.answered(reply):
                        self.at = at

    def halt(self):
        self._halted.set()
        self.join()


class JsonSocket:
    """A line-oriented JSON connection to QEMU's monitor (QMP) or to the guest agent (QGA)."""

    def __init__(self, path, timeout, alive=lambda: True):
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.connect(str(path))
                break
            except OSError:
                self.sock.close()
                if not alive():
                    raise BenchError("QEMU exited before opening %s" % path) from None
                if time.monotonic() > deadline:
                    raise BenchError("QEMU did not open %s within %ds" % (path, timeout)) from None
                time.sleep(0.1)
        self.buf = b""

    def send(self, command, **arguments):
        message = {"execute": command}
        if arguments:
            message["arguments"] = arguments
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def read(self, timeout):
        """The next JSON message, or None when nothing complete arrives in time."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                return None
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        line = line.strip(b"\xff").strip()
        return json.loads(line) if line else self.read(max(deadline - time.monotonic(), 0))

    def close(self):
        self.sock.close()


class GuestAgent(JsonSocket):
    def sync(self, timeout=2.0):
        """True once the agent in the guest answers (stale replies from earlier tries are skipped)."""
        token = int.from_bytes(os.urandom(4), "big") >> 1
        try:
            self.send("guest-sync", id=token)
        except (TimeoutError, OSError):
            # Nothing reads the channel until the agent runs; QEMU's buffer is full.
            return False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            reply = self.read(deadline - time.monotonic())
            if reply is None:
                return False
            if reply.get("return") == token:
                return True
        return False

    def call(self, command, timeout=10.0, **arguments):
        if not self.sync(timeout):
            raise BenchError("guest agent did not answer before %s" % command)
        self.send(command, **arguments)
        reply = self.read(timeout)
        if reply is None or "error" in reply:
            raise BenchError("guest agent %s failed: %s" % (command, reply))
        return reply["return"]

    def run(self, argv, timeout=30.0, stderr=False):
        """Runs a program in the guest; returns (exit code, stdout, and stderr after it when asked)."""
        pid = self.call("guest-exec", path=argv[0], arg=argv[1:], **{"capture-output": True})["pid"]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.call("guest-exec-status", pid=pid)
            if status.get("exited"):
                out = base64.b64decode(status.get("out-data", "")).decode(errors="replace")
                if stderr:
                    out += base64.b64decode(status.get("err-data", "")).decode(errors="replace")
                return status.get("exitcode"), out
            time.sleep(0.5)
        raise BenchError("%s did not finish in the guest within %ds" % (" ".join(argv), timeout))


# The devices that put the boot disk (drive disk0) on each bus a KubeVirt VM may use.
DISK_BUSES = {
    "virtio": ["-device", "virtio-blk-pci,drive=disk0,bootindex=0"],
    "sata": ["-device", "ahci,id=ahci0", "-device", "ide-hd,drive=disk0,bus=ahci0.0,bootindex=0"],
    "scsi": ["-device", "virtio-scsi-pci,id=scsi0", "-device", "scsi-hd,drive=disk0,bus=scsi0.0,bootindex=0"],
}


class Vm:
    """One QEMU process on a qcow2 overlay of ``backing``; always stopped by ``stop()``."""

    def __init__(
        self, workdir, name, backing, accel, memory, cpus, seed=None, disk_bus="virtio", cpu_model="host",
        data_disk_gib=None, mirror_port=None,
    ):  # fmt: skip
        self.dir = workdir / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.overlay = self.dir / "overlay.qcow2"
        self.data_disk = self.dir / "pgdata.qcow2" if data_disk_gib else None
        self.console = self.dir / "console.log"
        self.qmp_path = self.dir / "qmp.sock"
        self.qga_path = self.dir / "qga.sock"
        self.pg_port = free_port()
        self.ssh_port = free_port()
        subprocess.run(
            ["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(backing), str(self.overlay)],
            check=True,
        )
        if self.data_disk:
            subprocess.run(
                ["qemu-img", "create", "-q", "-f", "qcow2", str(self.data_disk), "%dG" % data_disk_gib],
                check=True,
            )
        # TCG: the default model without SVM, so the guest does not load nested-virtualisation modules.
        cpu = cpu_model if accel == "kvm" else "qemu64,-svm"
        # No way out but the forwarded ports in and, for the apt VM, the relay to the local repository.
        netdev = "user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:%d-:5432,hostfwd=tcp:127.0.0.1:%d-:22" % (
            self.pg_port,
            self.ssh_port,
        )
        if mirror_port:
            netdev += ",guestfwd=tcp:%s:80-cmd:socat - TCP:127.0.0.1:%d" % (MIRROR_GUEST_ADDRESS, mirror_port)
        self.argv = [
            "qemu-system-x86_64",
            "-name", name,
            "-accel", accel,
            "-cpu", cpu,
            "-m", str(memory),
            "-smp", str(cpus),
            "-nodefaults",
            "-display", "none",
            "-vga", "none",
            "-serial", "file:%s" % self.console,
            "-qmp", "unix:%s,server=on,wait=off" % self.qmp_path,
            "-drive", "file=%s,if=none,id=disk0,format=qcow2,cache=unsafe,discard=unmap" % self.overlay,
            *DISK_BUSES[disk_bus],
            "-netdev", netdev,
            "-device", "virtio-net-pci,netdev=net0",
            "-chardev", "socket,id=qga0,path=%s,server=on,wait=off" % self.qga_path,
            "-device", "virtio-serial",
            "-device", "virtserialport,chardev=qga0,name=org.qemu.guest_agent.0",
        ]  # fmt: skip
        if self.data_disk:
            self.argv += [
                "-drive", "file=%s,if=none,id=disk1,format=qcow2,cache=unsafe,discard=unmap" % self.data_disk,
                "-device", "virtio-blk-pci,drive=disk1,serial=%s" % PGDATA_SERIAL,
            ]  # fmt: skip
        if seed:
            self.argv += ["-drive", "file=%s,if=virtio,format=raw,readonly=on" % seed]
        self.proc = None
        self.started = None
        self.agent = None

    def start(self):
        # The previous VM's overlay (650 MiB after an apt boot) and the decompressed artifact are still
        # dirty in the host's page cache: written back now, not by the kernel's flusher during this boot.
        os.sync()
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(self.dir / "qemu.stderr", "wb"),  # noqa: SIM115 - lives as long as the VM
            preexec_fn=_die_with_parent,
        )
        self.agent = GuestAgent(self.qga_path, timeout=20, alive=self.alive)

    def elapsed(self):
        return time.monotonic() - self.started

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def diagnostics(self, lines=25):
        parts = []
        stderr = (self.dir / "qemu.stderr").read_text(errors="replace").strip()
        if stderr:
            parts.append("qemu stderr:\n" + stderr[-2000:])
        if self.console.exists():
            tail = self.console.read_text(errors="replace").splitlines()[-lines:]
            parts.append("last console lines (%s):\n%s" % (self.console, "\n".join(tail)))
        return "\n".join(parts)

    def shutdown(self, timeout):
        """Powers the guest off through its agent (then ACPI); True when it stopped by itself."""
        if not self.alive():
            return False
        try:
            self.agent.sync(5)
            self.agent.send("guest-shutdown", mode="powerdown")
        except (OSError, ConnectionError):
            pass
        deadline = time.monotonic() + timeout
        acpi_sent = False
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return True
            if not acpi_sent and time.monotonic() > deadline - timeout / 2:
                self._qmp("system_powerdown")
                acpi_sent = True
            time.sleep(0.5)
        return False

    def _qmp(self, command):
        try:
            qmp = JsonSocket(self.qmp_path, timeout=2)
            qmp.read(5)
            qmp.send("qmp_capabilities")
            qmp.read(5)
            qmp.send(command)
            qmp.read(5)
            qmp.close()
        except (OSError, ConnectionError, BenchError, ValueError):
            pass

    def stop(self):
        if self.agent:
            self.agent.close()
        if self.alive():
            self._qmp("quit")
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def overlay_bytes(self, path=None):
        info = subprocess.run(
            ["qemu-img", "info", "-U", "--output=json", str(path or self.overlay)],
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(info.stdout)["actual-size"]


def imported(artifact, workdir):
    """The artifact as CDI's import leaves it: decompressed (an uncompressed qcow2 here, like the base)."""
    target = workdir / "baked-imported.qcow2"
    print("==> decompressing %s as CDI's import does" % artifact.name, flush=True)
    subprocess.run(["qemu-img", "convert", "-O", "qcow2", str(artifact), str(target)], check=True)
    return target


def seed_iso(directory, user_data, instance):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "user-data").write_text(user_data)
    (directory / "meta-data").write_text("instance-id: %s\nlocal-hostname: %s\n" % (instance, instance))
    iso = directory / "seed.iso"
    if shutil.which("cloud-localds"):
        argv = ["cloud-localds", str(iso), str(directory / "user-data"), str(directory / "meta-data")]
    elif shutil.which("genisoimage"):
        argv = ["genisoimage", "-quiet", "-output", str(iso), "-volid", "cidata", "-joliet", "-rock"]
        argv += [str(directory / "user-data"), str(directory / "meta-data")]
    else:
        raise BenchError("cloud-localds or genisoimage is required (apt-get install cloud-image-utils)")
    subprocess.run(argv, check=True, capture_output=True)
    return iso


def user_data(template, engine_version, pubkey):
    text = (SEEDS / template).read_text()
    text = text.replace("@APT_MIRROR@", "http://%s/" % MIRROR_GUEST_ADDRESS)
    return text.replace("@ENGINE_VERSION@", engine_version).replace("@SSH_AUTHORIZED_KEY@", pubkey)


class LocalMirror:
    """The local apt repository served over HTTP on 127.0.0.1 from a thread of this process; counts the
    requests and bytes each VM read from it (``take()`` returns and resets them)."""

    def __init__(self, directory):
        self.directory = pathlib.Path(directory).resolve()
        if not (self.directory / "Release").is_file():
            raise BenchError("%s is no apt repository (no Release); run tests/e2e/apt_mirror.sh" % directory)
        self.requests, self.bytes, self.missing = 0, 0, []
        self._lock = threading.Lock()
        mirror = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def send_head(self):
                found = super().send_head()
                with mirror._lock:
                    mirror.requests += 1
                    if found is None:
                        mirror.missing.append(self.path)
                    elif hasattr(found, "fileno"):
                        mirror.bytes += os.fstat(found.fileno()).st_size
                return found

        handler = functools.partial(Handler, directory=str(self.directory))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def take(self):
        with self._lock:
            found = {"requests": self.requests, "bytes": self.bytes, "not_found": self.missing}
            self.requests, self.bytes, self.missing = 0, 0, []
        return found

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def describe(self):
        debs = sorted(path.name for path in self.directory.glob("*.deb"))
        return {
            "directory": str(self.directory),
            "packages": len(debs),
            "bytes": sum((self.directory / name).stat().st_size for name in debs),
            "served_on": "127.0.0.1:%d, relayed to the guest as http://%s/"
            % (self.port, MIRROR_GUEST_ADDRESS),
        }


def measure(workdir, name, backing, template, args, pubkey, timeout, disk_bus="virtio", mirror=None):
    """Boots ``backing`` with a first-boot seed and a blank pgdata disk; returns its figures. The VM is gone
    when it returns. ``mirror``: the LocalMirror the VM may read (the apt VM), None for no way out."""
    instance = "bench-%s-%s" % (name, uuid.uuid4().hex[:8])
    iso = seed_iso(workdir / name / "seed", user_data(template, args.engine_version, pubkey), instance)
    vm = Vm(
        workdir, name, backing, args.accel, args.memory, args.cpus, seed=iso, disk_bus=disk_bus,
        cpu_model=args.cpu_model, data_disk_gib=args.pgdata_gib, mirror_port=mirror.port if mirror else None,
    )  # fmt: skip
    if mirror:
        mirror.take()
    figures = {
        "backing_image": str(backing),
        "seed": str(SEEDS / template),
        "timeout_s": timeout,
        "disk_bus": disk_bus,
        # Emulated boots follow the host's speed: what the shared host was doing when this one started.
        "host_loadavg_at_start": list(os.getloadavg()),
    }
    print(
        "==> %s: booting %s (%s, disk on %s, timeout %ds)"
        % (name, backing.name, args.accel, disk_bus, timeout),
        flush=True,
    )
    try:
        vm.start()
        ready = FirstAnswer(vm, lambda: postgres_state(vm.pg_port, 3.0), lambda reply: reply == "ready")
        ssh = FirstAnswer(vm, lambda: ssh_banner(vm.ssh_port, 2.0), bool)
        # One channel, and unanswered syncs queue up in it until the agent starts: one at a time, seldom.
        agent = FirstAnswer(vm, lambda: vm.agent.sync(0.3), bool, interval=5, in_flight=1)
        watches = (ready, ssh, agent)
        for watch in watches:
            watch.start()
        try:
            while ready.at is None:
                if not vm.alive():
                    raise BenchError(
                        "%s: QEMU exited (rc %s)\n%s" % (name, vm.proc.returncode, vm.diagnostics())
                    )
                if vm.elapsed() > timeout:
                    raise BenchError(
                        "%s: PostgreSQL did not accept connections within %ds of VM start (guest agent %s, "
                        "ssh %s, last answer %s)\n%s"
                        % (name, timeout, agent.at, ssh.at, ready.last, vm.diagnostics())
                    )
                time.sleep(0.1)
        finally:
            for watch in watches:
                watch.halt()
        ready_s, agent_s, ssh_s = ready.at, agent.at, ssh.at
        print("    PostgreSQL ready %.1fs after VM start" % ready_s, flush=True)
        rc, clusters = vm.agent.run(["/usr/bin/pg_lsclusters", "--no-header"])
        figures.update(
            boot_to_ready_s=ready_s,
            guest_agent_s=agent_s,
            ssh_s=ssh_s,
            clusters=[line.split()[:4] for line in clusters.splitlines() if line.strip()] if rc == 0 else [],
            pgdata=pgdata_facts(vm, args.engine_version),
            analysis=analyse(vm, args.engine_version),
        )
        if mirror:
            figures["mirror"] = mirror.take()
        clean = vm.shutdown(args.shutdown_timeout)
        if not clean:
            raise BenchError(
                "%s: the guest did not power off within %ds\n%s"
                % (name, args.shutdown_timeout, vm.diagnostics())
            )
        figures["cow_delta_bytes"] = vm.overlay_bytes()
        figures["pgdata_disk_bytes"] = vm.overlay_bytes(vm.data_disk)
        print(
            "    overlay after first boot: %s; pgdata disk: %s, cluster %s"
            % (human(figures["cow_delta_bytes"]), human(figures["pgdata_disk_bytes"]), figures["pgdata"]),
            flush=True,
        )
        return figures
    finally:
        vm.stop()


def pgdata_facts(vm, engine_version):
    """Where the cluster's data lives and whose it is: the device under its data directory, the database
    system identifier initdb gave it and the fingerprint of the TLS certificate the VM serves."""
    datadir = "/var/lib/postgresql/%s/main" % engine_version
    steps = {
        "source": ["/usr/bin/findmnt", "-n", "-o", "SOURCE,LABEL", "--target", datadir],
        "system_identifier": [
            "/bin/sh", "-c",
            "/usr/lib/postgresql/%s/bin/pg_controldata %s | sed -n 's/^Database system identifier: *//p'"
            % (engine_version, datadir),
        ],
        "snakeoil_sha256": [
            "/bin/sh", "-c",
            "openssl x509 -noout -fingerprint -sha256 -in /etc/ssl/certs/ssl-cert-snakeoil.pem | cut -d= -f2",
        ],
    }  # fmt: skip
    found = {}
    for name, argv in steps.items():
        try:
            rc, out = vm.agent.run(argv, timeout=60)
            found[name] = out.strip() if rc == 0 and out.strip() else None
        except (BenchError, OSError, ConnectionError):
            found[name] = None
    return found


# What the guest says its boot spent, read once PostgreSQL is ready (the time is already taken).
ANALYSIS = {
    "kernel_cmdline": ["/bin/cat", "/proc/cmdline"],
    "systemd": ["/usr/bin/systemd-analyze"],
    "critical_chain": ["/usr/bin/systemd-analyze", "critical-chain", "postgresql@{v}-main.service"],
    "blame": ["/usr/bin/systemd-analyze", "blame"],
    "cloud_init": ["/usr/bin/cloud-init", "analyze", "blame"],
    "ssh_host_keys": ["/bin/sh", "-c", "ls /etc/ssh/ssh_host_*_key.pub"],
    "postgresql_unit": ["/usr/bin/systemctl", "show", "-p", "Type,ExecStart", "postgresql@{v}-main.service"],
    "initramfs": ["/bin/sh", "-c", "du -h /boot/initrd.img-*"],
    "cloud_init_local_share": [
        "/usr/bin/systemctl",
        "show",
        "-p",
        "StartupCPUWeight,Nice",
        "cloud-init-local.service",
    ],
    # What cloud-init's start-up imports cost (page cache warm by now): the largest cumulative times.
    "cloud_init_imports": [
        "/bin/sh",
        "-c",
        "python3 -X importtime -c 'import cloudinit.cmd.main' 2>&1 | sort -t'|' -k2 -n -r | head -25",
    ],
}


def analyse(vm, engine_version, lines=25):
    """``{name: first lines of its output}`` of each ANALYSIS command run in the guest (or its error).

    systemd-analyze answers only once the boot has finished (cloud-init's final stage included), which
    under emulation is well after PostgreSQL is ready: wait for that first."""
    found = {}
    try:
        vm.agent.run(["/usr/bin/systemctl", "is-system-running", "--wait"], timeout=300)
    except (BenchError, OSError, ConnectionError) as exc:
        return {name: ["not read: the boot did not finish: %s" % exc] for name in ANALYSIS}
    for name, argv in ANALYSIS.items():
        argv = [part.replace("{v}", engine_version) for part in argv]
        try:
            rc, out = vm.agent.run(argv, timeout=120, stderr=True)
        except (BenchError, OSError, ConnectionError) as exc:
            found[name] = ["not read: %s" % exc]
            continue
        text = [line.rstrip() for line in out.splitlines() if line.strip()][:lines]
        found[name] = text if rc == 0 else ["exit %s" % rc] + text
    return found


def missing_from_mirror(served):
    """What an apt VM asked the local repository for and did not find, but for the signatures apt looks
    for first (the repository is unsigned and trusted as such)."""
    return [path for path in served["not_found"] if not path.endswith(("/InRelease", "/Release.gpg"))]


def fresh_clusters(runs):
    """True when every run's cluster lives on its pgdata disk and no two runs share a database system
    identifier or a TLS certificate."""
    found = [run["pgdata"] for run in runs]
    if not all(f["source"] and f["source"].split()[-1] == PGDATA_SERIAL for f in found):
        return False
    for key in ("system_identifier", "snakeoil_sha256"):
        values = [f[key] for f in found]
        if None in values or len(set(values)) != len(values):
            return False
    return True


def spread(values):
    """``{median, min, max}`` of a list of figures."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summary(runs):
    """One scenario's runs: median and spread of each figure, and every run kept as measured."""
    agent = [r["guest_agent_s"] for r in runs if r["guest_agent_s"] is not None]
    return {
        "boot_to_ready_s": spread([r["boot_to_ready_s"] for r in runs]),
        "cow_delta_bytes": spread([r["cow_delta_bytes"] for r in runs]),
        # Watched only until PostgreSQL answers: None when no run's agent answered before that.
        "guest_agent_s": spread(agent) if agent else None,
        "runs": runs,
    }


# The goals: the baked image ready 8x sooner than apt at first boot, and a COW delta of 64 MiB
# or less per VM.
GOAL_BOOT_RATIO = 8.0
GOAL_COW_MIB = 64.0


def goal_lines(results):
    ratios = results["ratios"]
    baked_cow = results["scenarios"]["baked"]["cow_delta_bytes"]["median"] / (1024 * 1024)
    boot = ratios["boot_to_ready"]
    return [
        verdict("boot-to-ready, apt at first boot / baked (medians)", boot, GOAL_BOOT_RATIO, "x", ">="),
        verdict("COW delta of the baked VM (median)", baked_cow, GOAL_COW_MIB, "MiB"),
    ]


def kvm_error(stderr):
    """QEMU's report of a KVM internal error in one line: its first line, what failed and where."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    picked = [lines[0]] if lines else []
    picked += [
        line
        for line in lines[1:]
        if line == "emulation failure" or line.startswith(("EIP=", "CR0=", "Code="))
    ]
    return "; ".join(picked)


def probe_kvm(image, workdir, timeout):
    """``("kvm", cpu model, why)`` when a guest really boots under KVM (its agent answers) with one of
    KVM_CPU_MODELS, else ``("tcg", None, why)``; ``why`` says what each try found."""
    try:
        os.close(os.open("/dev/kvm", os.O_RDWR))
    except OSError as exc:
        return "tcg", None, ["/dev/kvm cannot be opened: %s" % exc]
    why = []
    for model in KVM_CPU_MODELS:
        vm = Vm(workdir, "kvm-probe", image, "kvm", 512, 1, cpu_model=model)
        try:
            vm.start()
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if not vm.alive():
                    stderr = (vm.dir / "qemu.stderr").read_text(errors="replace").strip().splitlines()
                    why.append("-cpu %s: QEMU exited under KVM: %s" % (model, " ".join(stderr[:2])))
                    break
                if vm.agent.sync(1.0):
                    why.append("-cpu %s: the guest agent answered %.1fs after start" % (model, vm.elapsed()))
                    return "kvm", model, why
                # A nested KVM that cannot emulate an instruction stops the guest and says so.
                stderr = (vm.dir / "qemu.stderr").read_text(errors="replace")
                if "KVM internal error" in stderr:
                    why.append(
                        "-cpu %s: the guest stopped %.1fs after start: %s"
                        % (model, vm.elapsed(), kvm_error(stderr))
                    )
                    break
                time.sleep(2)
            else:
                why.append("-cpu %s: no guest agent answer within %ds under KVM" % (model, timeout))
        except (BenchError, OSError, ConnectionError) as exc:
            # QEMU aborting right after start closes the agent's socket under the probe.
            if vm.proc is not None:
                try:
                    vm.proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass
            stderr = (vm.dir / "qemu.stderr").read_text(errors="replace").strip().splitlines()
            why.append("-cpu %s: %s%s" % (model, exc, ": " + stderr[0] if stderr else ""))
        finally:
            vm.stop()
    return "tcg", None, why


def human(size):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            return "%.1f %s" % (size, unit) if unit != "B" else "%d B" % size
        size /= 1024
    return str(size)


def table(results):
    baked, apt = results["scenarios"]["baked"], results["scenarios"]["apt"]
    ratio = results["ratios"]

    def seconds(figure):
        if figure is None:
            return "after ready"
        return "%.1f (%.1f-%.1f)" % (figure["median"], figure["min"], figure["max"])

    def sizes(figure):
        return "%s (%s-%s)" % (human(figure["median"]), human(figure["min"]), human(figure["max"]))

    rows = [
        ("median (min-max) of %d runs" % len(baked["runs"]), "baked image", "apt at first boot", "ratio"),
        (
            "boot-to-ready (s)",
            seconds(baked["boot_to_ready_s"]),
            seconds(apt["boot_to_ready_s"]),
            "%.1fx" % ratio["boot_to_ready"],
        ),
        (
            "COW delta",
            sizes(baked["cow_delta_bytes"]),
            sizes(apt["cow_delta_bytes"]),
            "%.1fx" % ratio["cow_delta"],
        ),
        (
            "pgdata disk",
            sizes(spread([r["pgdata_disk_bytes"] for r in baked["runs"]])),
            sizes(spread([r["pgdata_disk_bytes"] for r in apt["runs"]])),
            "",
        ),
        ("guest agent up (s)", seconds(baked["guest_agent_s"]), seconds(apt["guest_agent_s"]), ""),
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=pathlib.Path, help="plain base image (qcow2)")
    parser.add_argument("--baked", type=pathlib.Path, help="baked image (qcow2)")
    parser.add_argument("--engine-version", default="15", help="PostgreSQL major the baked VM activates")
    parser.add_argument("--accel", default="auto", choices=["auto", "kvm", "tcg"])
    parser.add_argument("--cpu-model", default="host", help="QEMU CPU model under KVM (see --probe-kvm)")
    parser.add_argument("--accel-why", default="", help="why this accelerator (recorded with the figures)")
    parser.add_argument("--apt-mirror", type=pathlib.Path, help="the local apt repository (apt_mirror.sh)")
    parser.add_argument("--pgdata-gib", type=int, default=2, help="size of each VM's blank pgdata disk")
    parser.add_argument("--memory", type=int, default=2048, help="MiB per VM")
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument(
        "--timeout-baked", type=int, default=300, help="seconds until the baked VM must be ready"
    )
    parser.add_argument(
        "--timeout-apt", type=int, default=1200, help="seconds until the apt VM must be ready"
    )
    parser.add_argument("--shutdown-timeout", type=int, default=180)
    parser.add_argument("--repeat", type=int, default=5, help="runs of each scenario, interleaved")
    parser.add_argument(
        "--bus-check",
        nargs="*",
        default=[],
        choices=sorted(set(DISK_BUSES) - {"virtio"}),
        help="after the runs, boot the baked image once with its disk on each of these buses (not timed)",
    )
    parser.add_argument("--kvm-probe-timeout", type=int, default=90)
    parser.add_argument("--results", type=pathlib.Path, default=ROOT / ".cache" / "e2e" / "results.json")
    parser.add_argument("--workdir", type=pathlib.Path, help="kept after the run (default: a temporary one)")
    parser.add_argument("--probe-kvm", type=pathlib.Path, metavar="IMAGE", help="only print kvm or tcg")
    args = parser.parse_args(argv)

    # SIGTERM unwinds like Ctrl-C so every ``finally`` stops its VM.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    for tool in ("qemu-system-x86_64", "qemu-img", "ssh-keygen"):
        if not shutil.which(tool):
            raise SystemExit(
                "boot_to_ready: %s is required (apt-get install qemu-system-x86 qemu-utils)" % tool
            )

    load_start = list(os.getloadavg())
    workdir = args.workdir or pathlib.Path(tempfile.mkdtemp(prefix="boot-to-ready-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        if args.probe_kvm:
            accel, model, why = probe_kvm(args.probe_kvm.resolve(), workdir, args.kvm_probe_timeout)
            print("\n".join(why))
            print("%s %s" % (accel, model) if model else accel)
            return 0
        if not (args.base and args.baked and args.apt_mirror):
            parser.error("--base, --baked and --apt-mirror are required")
        if args.accel == "auto":
            args.accel, model, why = probe_kvm(args.base.resolve(), workdir, args.kvm_probe_timeout)
            args.cpu_model = model or args.cpu_model
            args.accel_why = "; ".join(why)
            print("==> accelerator: %s (%s)" % (args.accel, args.accel_why), flush=True)
        mirror = LocalMirror(args.apt_mirror)
        key = workdir / "id_ed25519"
        if not key.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        pubkey = key.with_suffix(".pub").read_text().strip()
        baked_disk = imported(args.baked.resolve(), workdir)

        runs = {"baked": [], "apt": []}
        # Interleaved (baked, apt, baked, ...): a swing of the host's load hits both scenarios alike.
        for number in range(1, args.repeat + 1):
            print("==> run %d of %d" % (number, args.repeat), flush=True)
            runs["baked"].append(
                measure(
                    workdir,
                    "baked",
                    baked_disk,
                    "baked.user-data",
                    args,
                    pubkey,
                    args.timeout_baked,
                )
            )
            runs["apt"].append(
                measure(
                    workdir, "apt", args.base.resolve(), "apt.user-data", args, pubkey, args.timeout_apt,
                    mirror=mirror,
                )
            )  # fmt: skip
            # Kept after every pair, so a run stopped early still leaves the boots it measured.
            partial = args.results.with_suffix(".partial.json")
            partial.parent.mkdir(parents=True, exist_ok=True)
            partial.write_text(json.dumps({"accelerator": args.accel, "runs": runs}, indent=2) + "\n")
        scenarios = {name: summary(found) for name, found in runs.items()}
        # The baked initramfs must still boot a VM whose disk is not virtio.
        bus_checks = {}
        for bus in args.bus_check:
            found = measure(
                workdir, "baked-" + bus, baked_disk, "baked.user-data", args, pubkey,
                args.timeout_baked, disk_bus=bus,
            )  # fmt: skip
            bus_checks[bus] = {key: found[key] for key in ("boot_to_ready_s", "clusters", "cow_delta_bytes")}
    except BenchError as exc:
        print("boot_to_ready: %s" % exc, file=sys.stderr)
        return 1
    finally:
        if "mirror" in locals():
            mirror.close()
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)

    baked, apt = scenarios["baked"], scenarios["apt"]
    online = [c for c in baked["runs"][0]["clusters"] if len(c) > 3 and c[3] == "online"]
    results = {
        "measured_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "accelerator": args.accel,
        "cpu_model": args.cpu_model if args.accel == "kvm" else "qemu64,-svm",
        "accelerator_why": args.accel_why,
        "network": "QEMU user network with restrict=on: no way out of either VM; the apt VM reaches only "
        "http://%s/, relayed to the local repository on 127.0.0.1" % MIRROR_GUEST_ADDRESS,
        "apt_mirror": mirror.describe(),
        "pgdata_disk": "a blank %d GiB virtio disk (serial %s) per VM, formatted and mounted at "
        "/var/lib/postgresql by the first boot" % (args.pgdata_gib, PGDATA_SERIAL),
        "baked_artifact": str(args.baked.resolve()),
        "baked_disk": "the artifact decompressed as CDI imports it (qemu-img convert -O qcow2)",
        "engine_version": args.engine_version,
        "vm": {"memory_mib": args.memory, "cpus": args.cpus},
        # Emulated guests slow down with the host's load; the figures are comparable within one run.
        "host": {"cpus": os.cpu_count(), "loadavg_start": load_start, "loadavg_end": list(os.getloadavg())},
        "scenarios": scenarios,
        "repeat": args.repeat,
        "bus_checks": bus_checks,
        "ratios": {
            "boot_to_ready": round(apt["boot_to_ready_s"]["median"] / baked["boot_to_ready_s"]["median"], 2),
            "cow_delta": round(
                apt["cow_delta_bytes"]["median"] / max(baked["cow_delta_bytes"]["median"], 1), 2
            ),
        },
        "baked_activates_only_requested": all(
            [c[0] for c in run["clusters"] if len(c) > 3 and c[3] == "online"] == [args.engine_version]
            for run in baked["runs"]
        ),
        # packer_build's drop-in: systemd runs the postmaster itself (it reports readiness), no pg_ctlcluster.
        "baked_supervised_directly": all(
            "Type=notify" in (run["analysis"].get("postgresql_unit") or []) for run in baked["runs"]
        ),
        # The image ships the cluster empty: each VM's first start initializes its own on its pgdata disk.
        "baked_fresh_cluster_per_vm": fresh_clusters(baked["runs"]),
        "apt_read_only_the_mirror": all(
            run["mirror"]["requests"] > 0 and not missing_from_mirror(run["mirror"]) for run in apt["runs"]
        ),
        "reference": {"boot_to_ready": "~3 min -> 30-60 s", "cow_delta": "1-2 GB -> ~200 MB per VM"},
    }
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(results, indent=2) + "\n")
    print()
    print(table(results))
    print("\nclusters online in the baked VM: %s" % ([" ".join(c) for c in online] or "none"))
    for bus, found in bus_checks.items():
        print("baked image, disk on %s: PostgreSQL ready after %.1fs" % (bus, found["boot_to_ready_s"]))
    for name in ("baked", "apt"):
        first = results["scenarios"][name]["runs"][0]["analysis"]
        print("\n%s, first run: %s" % (name, " ".join(first.get("systemd") or [])))
        print("\n".join("  " + line for line in first.get("critical_chain") or []))
    print()
    print("\n".join(goal_lines(results)))
    print("results: %s" % args.results)
    print("baked clusters: %s" % [run["pgdata"] for run in baked["runs"]])
    if not results["baked_fresh_cluster_per_vm"]:
        print(
            "boot_to_ready: a baked VM's cluster was not its own, initialized on its pgdata disk",
            file=sys.stderr,
        )
        return 1
    if not results["apt_read_only_the_mirror"]:
        print("boot_to_ready: an apt VM did not install from the local repository alone", file=sys.stderr)
        return 1
    if not results["baked_supervised_directly"]:
        print("boot_to_ready: the baked VM's cluster did not run under systemd directly", file=sys.stderr)
        return 1
    if not results["baked_activates_only_requested"]:
        print(
            "boot_to_ready: the baked VM did not run exactly PostgreSQL %s" % args.engine_version,
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
