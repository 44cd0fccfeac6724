"""clone_gate on one real boot: a Debian 12 golden built by debootstrap from Debian's packages
(tests/e2e/build_base.sh, cached by its content key) is imported into the lab and gated with the lab's
QEMU device on its VM (tests/lab/controllers/realboot.py). The verdict must come from the guest itself:
its qemu-guest-agent on virtio-serial (the hostname cloud-init set from the NoCloud seed, Debian's
os-release, the root filesystem grown by growpart), and its own sshd's banner through QEMU's forward.
QEMU goes with the VM (stopped, deleted) and with the lab (killed).

In the slow tier rather than tests/e2e: it runs the collection's module against the lab like the other
clone_gate tests, and only the gate VM boots for real. Needs root (the image build loop-mounts) and the
network to Debian's mirror on a cold cache; the boot time and the accelerator are written to
<cache>/realboot-results.json and printed."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid

import pytest

from tests.integration.modules.test_clone_gate import (  # noqa: F401  pylint: disable=unused-import
    GATE_LABEL,
    KV,
    SNAP,
    _projects_deleted,
    bound,
    leftovers,
    project_namespace,
    task,
    wait_ready,
)
from tests.lab.controllers.kubevirt import probe_template
from tests.lab.controllers.realboot import ACCEL_NOTE, BOOT_SECONDS_NOTE, DEVICE, HOSTNAME_NOTE
from tests.lab.objects import ApiError

pytestmark = [pytest.mark.lab_only, pytest.mark.slow]

REPO = pathlib.Path(__file__).resolve().parents[3]
CACHE = (
    pathlib.Path(
        os.environ.get("LAB_BIN_CACHE")
        or pathlib.Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "goldenimage-lab"
    )
    / "debian-base"
)
BASE_TIMEOUT = int(os.environ.get("LAB_REALBOOT_BASE_TIMEOUT", "1800"))
GOLDEN_SIZE = "3Gi"  # build_base.sh's disk, 3072 MiB
REAL = {
    "os": "linux",
    "port_probe": probe_template(22),
    "vm_annotations": {DEVICE: "true"},
    # A first boot under TCG on a loaded host takes minutes; under KVM seconds.
    "agent_timeout": 1500,
    "disk_timeout": 300,
    "port_timeout": 300,
    "provision_timeout": 300,
    "poll_interval": 2,
}


def debian_golden() -> pathlib.Path:
    """The Debian 12 base image, built once per content key (progress on stderr)."""
    if os.geteuid() != 0:
        pytest.fail("the real-boot golden is built with debootstrap and a loop mount: run as root")
    if shutil.which("qemu-system-x86_64") is None:
        pytest.fail(
            "qemu-system-x86_64 is missing: make e2e-deps (make slow runs it) installs qemu-system-x86"
        )
    argv = [
        "timeout",
        "--kill-after=30",
        str(BASE_TIMEOUT),
        str(REPO / "tests/e2e/build_base.sh"),
        str(CACHE),
    ]
    started = time.monotonic()
    proc = subprocess.run(argv, stdout=subprocess.PIPE, text=True, check=False)
    if proc.returncode != 0:
        pytest.fail(
            "tests/e2e/build_base.sh failed (exit %d after %.0fs; 124: over its %ds limit, "
            "LAB_REALBOOT_BASE_TIMEOUT)" % (proc.returncode, time.monotonic() - started, BASE_TIMEOUT)
        )
    return pathlib.Path(proc.stdout.strip().splitlines()[-1])


def alive(pid: int) -> bool:
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def gone(pid: int, seconds: float = 20) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end and alive(pid):
        time.sleep(0.2)
    return not alive(pid)


def banner(port: int) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.settimeout(30)
        return conn.recv(256).decode(errors="replace").strip()


@pytest.fixture(scope="module")
def base_image():
    return debian_golden()


@pytest.fixture(scope="module")
def real_golden(lab, kube_client, base_image):
    """The image in a golden namespace as CDI imports it: raw bytes in the claim, snapshotted."""
    from kubernetes import client

    from tests.lab.controllers.volumes import disk_image_path

    core = client.CoreV1Api(kube_client)
    custom = client.CustomObjectsApi(kube_client)
    namespace = "gold-" + uuid.uuid4().hex[:8]
    core.create_namespace({"metadata": {"name": namespace}})
    claim = {
        "metadata": {"name": "debian"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": GOLDEN_SIZE}}},
    }
    core.create_namespaced_persistent_volume_claim(namespace, claim)
    pvc = bound(lab, namespace, "debian")
    target = disk_image_path(lab.controller_manager.lab, pvc)
    subprocess.run(["qemu-img", "convert", "-O", "raw", "-S", "4k", str(base_image), str(target)], check=True)
    body = {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshot",
        "metadata": {"name": "golden-debian"},
        "spec": {"source": {"persistentVolumeClaimName": "debian"}},
    }
    custom.create_namespaced_custom_object(*SNAP, namespace, "volumesnapshots", body)
    wait_ready(custom, namespace, "golden-debian")
    yield namespace
    core.delete_namespace(namespace)


def qemu_records(lab) -> list[dict]:
    root = lab.controller_manager.lab.state_dir / "qemu"
    return [json.loads(p.read_text()) for p in sorted(root.glob("*/boot.json"))] if root.exists() else []


@pytest.fixture(scope="module")
def real_gate(lab, kube_client, real_golden):
    from kubernetes import client

    from tests.integration.support.runner import kube_play, run_playbook

    core = client.CoreV1Api(kube_client)
    project = project_namespace(core)
    common = {"snapshot": "golden-debian", "snapshot_namespace": real_golden, "project_namespace": project}
    before = {r["pid"] for r in qemu_records(lab)}
    vms = lab.store.resource(*KV, "virtualmachines")
    vmis = lab.store.resource(*KV, "virtualmachineinstances")
    started = time.monotonic()
    try:
        run = run_playbook(kube_play(task("real", keep=True, **REAL, **common)), env=lab.env(), timeout=2400)
        seconds = time.monotonic() - started
        (vm,) = [v for v in lab.store.list(vms, project)[0] if GATE_LABEL in v["metadata"].get("labels", {})]
        name = vm["metadata"]["name"]
        vmi = lab.store.get(vmis, project, name)
        (record,) = [r for r in qemu_records(lab) if r["pid"] not in before]
        forwarded = int(vmi["metadata"]["annotations"]["lab.goldenimage.io/forwarded-22"])
        seen = {
            "banner": banner(forwarded),
            "vmi": vmi,
            "record": dict(record),
            "alive": alive(record["pid"]),
        }
        # Stopped: the guest is powered off with its instance.
        lab.store.patch(vms, project, name, "merge", {"spec": {"runStrategy": "Halted"}})
        seen["stopped"] = gone(record["pid"])
    finally:
        # Nothing kept runs on: the kept objects go (the VM's deletion stops QEMU if the stop did not).
        kinds = {"virtualmachines": KV, "virtualmachineinstances": KV, "persistentvolumeclaims": ("", "v1")}
        for found in leftovers(lab, project):
            plural, obj_name = found.split("/")
            scope = None if plural == "volumesnapshotcontents" else project
            try:
                lab.store.delete(lab.store.resource(*kinds.get(plural, SNAP), plural), scope, obj_name)
            except ApiError as exc:
                if exc.code != 404:
                    raise
    seen["deleted"] = all(gone(r["pid"]) for r in qemu_records(lab) if r["pid"] not in before)
    result = run["real"]
    figures = {
        "accelerator": vmi["metadata"]["annotations"][ACCEL_NOTE],
        "boot_seconds": float(vmi["metadata"]["annotations"][BOOT_SECONDS_NOTE]),
        "gate_seconds": round(seconds, 1),
        "verdict": result.get("verdict"),
        "phases": result.get("phases"),
        "loadavg": list(os.getloadavg()),
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (CACHE / "realboot-results.json").write_text(json.dumps(figures, indent=1))
    print("real boot:", json.dumps(figures))
    return dict(seen, run=run, result=result, name=name, figures=figures)


def test_the_gate_passes_on_the_guests_own_agent_disk_and_port(real_gate):
    result = real_gate["result"]
    assert real_gate["run"].entry("real")["status"] == "ok", result["msg"]
    assert result["verdict"] == "passed" and result["proof"] == "guest-agent", result
    assert [p["name"] for p in result["phases"]] == ["provision", "start", "agent", "disk", "port"], result
    assert result["disk_check"]["name"] == "guest-agent-filesystems", result
    # growpart grew / past the 3 GiB golden on the 4 GiB clone: the guest's own figure, not the lab's.
    assert "clone of a 3.0 GiB golden" in result["disk_check"]["detail"], result["disk_check"]


def test_the_agent_that_answered_is_the_debian_guests(real_gate):
    vmi = real_gate["vmi"]
    info = vmi["status"]["guestOSInfo"]
    assert info["id"] == "debian" and info["versionId"] == "12", info
    assert "Debian GNU/Linux 12" in info["prettyName"] and info["kernelRelease"], info
    # cloud-init set the hostname from the seed's local-hostname, the VMI's name; the agent read it back.
    assert vmi["metadata"]["annotations"][HOSTNAME_NOTE] == real_gate["name"]
    assert real_gate["alive"]


def test_the_port_is_the_guests_own_sshd(real_gate):
    assert real_gate["banner"].startswith("SSH-2.0-OpenSSH_") and "Debian" in real_gate["banner"]


def test_the_boot_records_its_accelerator_and_time(real_gate):
    figures, record = real_gate["figures"], real_gate["record"]
    assert record["accelerator"] in ("kvm", "tcg") and figures["accelerator"].startswith(
        record["accelerator"]
    )
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        assert record["accelerator"] == "tcg" and "/dev/kvm cannot be opened" in record["accelerator_why"]
    elif record["accelerator"] == "tcg":  # KVM opened but could not run the guest: said, not hidden
        assert "KVM internal error" in record["accelerator_why"] or "QEMU exited" in record["accelerator_why"]
    assert 0 < figures["boot_seconds"] < REAL["agent_timeout"], figures


def test_qemu_stops_with_the_vm_and_none_is_left(real_gate):
    assert real_gate["stopped"], "QEMU still ran after the VM was halted"
    assert real_gate["deleted"], "a QEMU of this test still runs"


OWNER = r"""
import json, pathlib, sys, threading
from tests.lab.controllers.realboot import QemuGuest

folder, disk, out = (pathlib.Path(a) for a in sys.argv[1:4])
vmi = {"metadata": {"name": "owner", "namespace": "owner", "uid": "owner-uid"}, "spec": {}}
guest = QemuGuest(folder, vmi, disk, 512 * 2**20)
guest.start()
out.write_text(json.dumps({"pid": guest.proc.pid}))
threading.Event().wait()
"""


def test_qemu_dies_with_the_lab_process_that_started_it(tmp_path, base_image):
    """The lab killed with SIGKILL (no Lab.stop): the kernel's parent-death signal takes QEMU with it."""
    overlay = tmp_path / "overlay.qcow2"
    subprocess.run(
        ["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(base_image), str(overlay)],
        check=True,
    )
    out = tmp_path / "pid.json"
    (tmp_path / "guest").mkdir()
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tmp_path / "guest"), str(overlay), str(out)],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        start_new_session=True,  # nothing but the kernel's signal reaches QEMU
    )
    try:
        end = time.monotonic() + 60
        while not out.exists():
            assert owner.poll() is None and time.monotonic() < end, "the owner did not start QEMU"
            time.sleep(0.1)
        pid = json.loads(out.read_text())["pid"]
        assert alive(pid)
    finally:
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
    assert gone(pid, 10), "QEMU outlived the process that started it"
