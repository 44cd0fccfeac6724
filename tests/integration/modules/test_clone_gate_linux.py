"""clone_gate on a stock Linux cloud image in the lab: no guest agent, so the SSH banner is the boot proof
(the lab's guest serves it only when the gate's VM carries a NoCloud seed); without credentials the disk
cannot be read inside the guest (disk_unproven); with guest_credentials the gate logs in over SSH to a
real sshd on loopback standing in for the guest, and reads the root filesystem's size."""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time

import pytest

from tests.integration.modules.test_clone_gate import (  # noqa: F401  pylint: disable=unused-import
    _projects_deleted,
    goldens,
    project_namespace,
    task,
)
from tests.lab.controllers.kubevirt import probe_template

pytestmark = pytest.mark.lab_only

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
AGENT_DELAY = "LAB_KUBEVIRT_AGENT_DELAY_SECONDS"
FAST = {"agent_timeout": 6, "disk_timeout": 6, "port_timeout": 3, "provision_timeout": 90, "poll_interval": 1}
AGENTLESS = {"lab.goldenimage.io/guest-agent": "absent"}
LINUX = {"os": "linux", "port_probe": probe_template(22)}


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_sshd(folder, client_public, force_command=None):
    """A real OpenSSH server on a loopback port: a throw-away host key, one authorised key, no passwords."""
    folder.mkdir()
    host_key = folder / "host_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True)
    authorized = folder / "authorized_keys"
    authorized.write_text(client_public + "\n")
    authorized.chmod(0o600)
    port = free_port()
    config = folder / "sshd_config"
    lines = [
        "Port %d" % port,
        "ListenAddress 127.0.0.1",
        "HostKey %s" % host_key,
        "AuthorizedKeysFile %s" % authorized,
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PubkeyAuthentication yes",
        "PermitRootLogin prohibit-password",
        "StrictModes no",
        "UsePAM no",
        "PidFile %s" % (folder / "sshd.pid"),
    ]
    if force_command:
        lines.append("ForceCommand %s" % force_command)
    config.write_text("\n".join(lines) + "\n")
    os.makedirs("/run/sshd", exist_ok=True)
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=subprocess.PIPE)
    end = time.monotonic() + 10
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                if conn.recv(64).startswith(b"SSH-2.0-"):
                    return proc, port
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("sshd did not start: %s" % proc.stderr.read())


@pytest.fixture(scope="module")
def linux_gates(lab, goldens, kube_client, tmp_path_factory):  # noqa: F811
    if not os.path.exists(SSHD):
        raise AssertionError("sshd (openssh-server) is not installed; make setup installs it")
    from kubernetes import client

    folder = tmp_path_factory.mktemp("gate-ssh")
    key = folder / "client"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    public = (folder / "client.pub").read_text().strip()
    grown, grown_port = start_sshd(folder / "grown", public)
    # A guest whose root filesystem stayed at 64 MiB: the same real login, a command that says so.
    small, small_port = start_sshd(folder / "small", public, force_command="echo %d" % (64 * 2**20))
    core = client.CoreV1Api(kube_client)
    project = project_namespace(core)
    creds = {"username": getpass.getuser(), "private_key": key.read_text()}
    common = {"snapshot": "golden-linux", "snapshot_namespace": goldens, "project_namespace": project}
    # The golden was published with its release digest: the gate records its verdict for that digest.
    client.CustomObjectsApi(kube_client).patch_namespaced_custom_object(
        "snapshot.storage.k8s.io",
        "v1",
        goldens,
        "volumesnapshots",
        "golden-linux",
        {"metadata": {"annotations": {"goldenimage.pipeline/release-digest": "sha256:" + "ab" * 32}}},
    )
    old = os.environ.get(AGENT_DELAY)
    os.environ[AGENT_DELAY] = "0.3"
    from tests.integration.support.runner import kube_play, run_playbook

    try:
        run = run_playbook(
            kube_play(
                task("banner", grow_by="0", vm_annotations=AGENTLESS, **LINUX, **FAST, **common),
                task(
                    "banner, disk unread",
                    vm_annotations=AGENTLESS,
                    release_digest="sha256:" + "ab" * 32,
                    **LINUX,
                    **FAST,
                    **common,
                ),
                task(
                    "ssh grown",
                    vm_annotations=dict(AGENTLESS, **{"lab.goldenimage.io/guest-ssh": str(grown_port)}),
                    guest_credentials=creds,
                    **LINUX,
                    **FAST,
                    **common,
                ),
                task(
                    "ssh small",
                    vm_annotations=dict(AGENTLESS, **{"lab.goldenimage.io/guest-ssh": str(small_port)}),
                    guest_credentials=creds,
                    **LINUX,
                    **FAST,
                    **common,
                ),
                task(
                    "silent",
                    vm_annotations=dict(AGENTLESS, **{"lab.goldenimage.io/port-open": "false"}),
                    **LINUX,
                    **{**FAST, "agent_timeout": 3},
                    **common,
                ),
                task("windows creds", guest_credentials=creds, **{**common, "snapshot": "golden-windows"}),
            ),
            env=lab.env(),
        )
    finally:
        for proc in (grown, small):
            proc.terminate()
            proc.wait(timeout=10)
        if old is None:
            os.environ.pop(AGENT_DELAY, None)
        else:
            os.environ[AGENT_DELAY] = old
    vms = lab.store.resource("kubevirt.io", "v1", "virtualmachines")
    return {"run": run, "project": project, "key": key.read_text(), "vms": vms}


def test_a_linux_golden_without_an_agent_boots_by_its_ssh_banner(linux_gates):
    run = linux_gates["run"]
    result = run["banner"]
    assert run.entry("banner")["status"] == "ok", result["msg"]
    assert result["verdict"] == "passed" and result["proof"] == "ssh-banner", result
    assert [p["name"] for p in result["phases"]] == ["provision", "start", "boot", "port"]
    boot = result["phases"][2]
    assert boot["detail"].startswith("SSH-2.0-OpenSSH_9.6p1") and "no guest agent" in boot["detail"], boot
    assert "(SSH banner answered, no guest agent)" in result["msg"]
    assert result["gate_record"]["proof"] == "ssh-banner" and result["gate_record"]["passed"] is True


def test_without_credentials_the_disk_of_an_agentless_clone_is_unproven_not_passed(linux_gates):
    run = linux_gates["run"]
    result = run["banner, disk unread"]
    assert run.entry("banner, disk unread")["status"] == "ignored", result
    assert result["verdict"] == "disk_unproven" and result["proof"] == "ssh-banner", result
    assert "guest_credentials" in result["msg"]
    record = result["gate_record"]
    assert record["verdict"] == "disk_unproven" and record["passed"] is False
    assert record["release_digest"] == "sha256:" + "ab" * 32
    assert record["candidate"].endswith("/golden-linux") and record["run"] and record["at"].endswith("Z")
    assert record["snapshot_handle"]


def test_with_credentials_the_root_filesystem_is_read_over_ssh(linux_gates):
    run = linux_gates["run"]
    grown = run["ssh grown"]
    assert run.entry("ssh grown")["status"] == "ok", grown["msg"]
    assert grown["verdict"] == "passed" and grown["proof"] == "ssh-banner"
    assert grown["disk_check"]["name"] == "ssh-root-filesystem", grown
    assert "on a 2.0 GiB clone of a 1.0 GiB golden (read over SSH: findmnt" in grown["disk_check"]["detail"]
    assert grown["gate_record"]["disk_check"] == "ssh-root-filesystem"
    small = run["ssh small"]
    assert small["verdict"] == "disk_not_grown" and small["disk_check"]["name"] == "ssh-root-filesystem"
    assert "/ is 64.0 MiB on a 2.0 GiB clone of a 1.0 GiB golden" in small["msg"], small["msg"]
    # The private key is a secret: it is in no result.
    assert linux_gates["key"].strip().splitlines()[1] not in run.log


def test_the_gate_vm_carried_the_nocloud_seed(linux_gates):
    # Without the seed the lab's stock image starts no sshd; "banner" passing shows the module sent one.
    # And a guest that serves nothing is no boot, with the proof none.
    result = linux_gates["run"]["silent"]
    assert result["verdict"] == "no_boot" and result["proof"] == "none", result
    assert "no SSH banner answered" in result["msg"]


def test_windows_credentials_are_refused_before_anything_is_written(linux_gates):
    result = linux_gates["run"]["windows creds"]
    assert result.get("refused") is True and "WinRM" in result["msg"], result
    assert result["created"] == [] if "created" in result else True
