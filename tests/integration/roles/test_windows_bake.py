"""The Windows bake: remaster a real UDF/ISO9660 hybrid ISO, render and check the answer file, and run
the role against the lab's KubeVirt, playing the guest's part (sysprep's power-off) through the API.

A real Windows install cannot run here. What the guest would do is reduced to what the role can see:
the VMI ending (phase Succeeded, so the VM reads Stopped) and the disk it leaves behind, a real NTFS
disk made by tests/integration/support/disks.py.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import pathlib
import re
import subprocess
import threading
import time
import urllib.parse
import uuid
import xml.etree.ElementTree as ET

import jinja2
import pytest
import yaml
from ansible_collections.goldenimage.pipeline.plugins.module_utils.windows import _iso

from tests.integration.support import disks
from tests.integration.support.runner import ROOT, run_playbook
from tests.lab.s3 import s3_client

ROLE_DIR = ROOT / "roles" / "windows_bake"
ROLE = "goldenimage.pipeline.windows_bake"
MIB = 1024 * 1024
# Microsoft's ISO9660 side carries this kind of notice where UDF carries the files.
STUB = (
    b'This disc contains a "UDF" file system and requires an operating system that supports the '
    b'ISO-13346 "UDF" file system specification. \r\n'
)
PASSWORD = "Bake-Pw<&>'\"-7f3a9c1e"
NS = {"u": "urn:schemas-microsoft-com:unattend"}
WCM = "{http://schemas.microsoft.com/WMIConfig/2002/State}action"


# The ISO --------------------------------------------------------------------------------------------


def hybrid_iso(path: pathlib.Path, wim_size: int) -> pathlib.Path:
    """A UDF 2.60 + ISO9660 hybrid laid out like a Windows installer: the ISO9660 side holds the README
    stub, also under the install image's name; the UDF side holds the real tree."""
    import pycdlib

    image = pycdlib.PyCdlib()
    image.new(interchange_level=3, joliet=3, udf="2.60", vol_ident="CCCOMA_X64FRE")
    image.add_fp(io.BytesIO(STUB), len(STUB), iso_path="/README.TXT;1", joliet_path="/README.TXT")
    image.add_directory(iso_path="/SOURCES", joliet_path="/sources")
    image.add_fp(
        io.BytesIO(STUB), len(STUB), iso_path="/SOURCES/INSTALL.WIM;1", joliet_path="/sources/install.wim"
    )
    for folder in ("/sources", "/boot", "/efi", "/efi/microsoft", "/efi/microsoft/boot"):
        image.add_directory(udf_path=folder)
    files = {
        "/sources/install.wim": b"MSWIM\0\0\0" + os.urandom(64) + b"\0" * (wim_size - 72),
        "/boot/etfsboot.com": b"\xfa" * 4096,
        "/efi/microsoft/boot/efisys_noprompt.bin": b"\0" * 1474560,
        "/efi/microsoft/boot/efisys.bin": b"\1" * 1474560,
        "/setup.exe": b"MZ" + b"\0" * 1022,
    }
    for name, data in files.items():
        image.add_fp(io.BytesIO(data), len(data), udf_path=name)
    image.write(str(path))
    image.close()
    return path


@pytest.fixture(scope="module")
def source_iso(tmp_path_factory):
    return hybrid_iso(tmp_path_factory.mktemp("iso") / "win11.iso", 2 * MIB)


def test_xorriso_extract_yields_the_stub_where_udf_holds_the_image(source_iso, tmp_path):
    iso9660 = tmp_path / "iso9660"
    subprocess.run(
        ["xorriso", "-osirrox", "on", "-indev", str(source_iso), "-extract", "/", str(iso9660)],
        check=True,
        capture_output=True,
    )
    assert (iso9660 / "sources" / "install.wim").stat().st_size == 135
    for reader in ("pycdlib", "7z"):
        udf = tmp_path / reader
        udf.mkdir()
        _iso.extract(str(source_iso), str(udf), reader)
        assert (udf / "sources" / "install.wim").stat().st_size == 2 * MIB, reader
        assert (udf / "efi" / "microsoft" / "boot" / "efisys_noprompt.bin").is_file()


def plain_iso(tmp_path):
    """An ISO9660-only image with the stub as its install image."""
    flat = tmp_path / "flat"
    (flat / "sources").mkdir(parents=True)
    (flat / "sources" / "install.wim").write_bytes(STUB)
    plain = tmp_path / "plain.iso"
    subprocess.run(
        ["xorriso", "-as", "mkisofs", "-o", str(plain), str(flat)], check=True, capture_output=True
    )
    return plain


def _remaster(name, **args):
    return {"name": name, "goldenimage.pipeline.windows_iso": args}


def test_remaster_module(source_iso, tmp_path):
    out, refused = tmp_path / "noprompt.iso", tmp_path / "refused.iso"
    common = {"src": str(source_iso), "min_image_size": MIB}
    tasks = [
        dict(_remaster("predict", dest=str(out), **common), check_mode=True),
        _remaster("remaster", dest=str(out), **common),
        _remaster("again", dest=str(out), **common),
        dict(_remaster("default threshold", src=str(source_iso), dest=str(refused)), ignore_errors=True),
        dict(_remaster("iso9660 only", src=str(plain_iso(tmp_path)), dest=str(refused)), ignore_errors=True),
    ]
    run = run_playbook([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}])
    assert run.entry("remaster")["status"] == "ok", run.log

    assert run["predict"]["changed"] is True and "would be rebuilt" in run["predict"]["msg"]
    first = run["remaster"]
    assert first["changed"] is True
    assert first["install_image"] == {"path": "sources/install.wim", "size": 2 * MIB}
    assert first["sha256"] == _iso.sha256_file(str(out))
    assert first["source_sha256"] == _iso.sha256_file(str(source_iso))
    assert run["again"]["changed"] is False and run["again"]["sha256"] == first["sha256"]

    report = subprocess.run(
        ["xorriso", "-indev", str(out), "-report_el_torito", "plain"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    boot_lines = [line.split() for line in report.splitlines() if line.startswith("El Torito boot img")]
    assert [(fields[6], fields[7], fields[8]) for fields in boot_lines] == [
        ("BIOS", "y", "none"),
        ("UEFI", "y", "none"),
    ], report
    assert "/efi/microsoft/boot/efisys_noprompt.bin" in report and "/boot/etfsboot.com" in report
    assert [e["platform"] for e in first["el_torito"]] == ["BIOS", "UEFI"]
    # The rebuilt ISO9660 side now holds the real image: the trap is gone for every later reader.
    again = tmp_path / "rebuilt"
    subprocess.run(
        ["xorriso", "-osirrox", "on", "-indev", str(out), "-extract", "/sources", str(again)],
        check=True,
        capture_output=True,
    )
    assert (again / "install.wim").stat().st_size == 2 * MIB

    denied = run["default threshold"]
    assert run.entry("default threshold")["status"] == "ignored"
    assert "sources/install.wim is 2097152 bytes, below the 104857600 bytes" in denied["msg"]
    assert "UDF/ISO9660 hybrid" in denied["msg"]
    assert "has no UDF file system" in run["iso9660 only"]["msg"]
    assert not refused.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".windows-iso-")) == []


@pytest.mark.suite("idempotence")
def test_a_second_remaster_rewrites_nothing(source_iso, tmp_path):
    out = tmp_path / "noprompt.iso"
    task = _remaster("remaster", src=str(source_iso), dest=str(out), min_image_size=MIB)

    def files():
        return {
            p.name: (p.stat().st_ino, p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(tmp_path.iterdir())
        }

    first = run_playbook([{"hosts": "localhost", "gather_facts": False, "tasks": [task]}])
    assert first.ok, first.log
    assert first["remaster"]["changed"] is True
    written = files()
    assert sorted(written) == ["noprompt.iso", "noprompt.iso.remaster.json"]
    again = run_playbook([{"hosts": "localhost", "gather_facts": False, "tasks": [task]}])
    assert again.ok, again.log
    # Same source checksum, same settings, the ISO still has the recorded checksum: nothing rebuilt.
    assert again["remaster"]["changed"] is False
    assert again["remaster"]["sha256"] == first["remaster"]["sha256"]
    assert files() == written


# The answer file -----------------------------------------------------------------------------------


def role_vars(**overrides) -> dict:
    values = yaml.safe_load((ROLE_DIR / "defaults" / "main.yml").read_text())
    values.update(yaml.safe_load((ROLE_DIR / "vars" / "main.yml").read_text()))
    values.update(windows_bake_admin_password=PASSWORD, **overrides)
    return values


def render(**overrides) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(ROLE_DIR / "templates")), undefined=jinja2.StrictUndefined
    )
    return env.get_template("autounattend.xml.j2").render(**role_vars(**overrides))


def check_answer_file(text: str, apply_updates: bool) -> None:
    root = ET.fromstring(text.encode())
    assert root.tag == "{urn:schemas-microsoft-com:unattend}unattend"
    passes = {s.get("pass"): s for s in root.findall("u:settings", NS)}
    assert list(passes) == ["windowsPE", "specialize", "oobeSystem"]
    for component in root.iter("{urn:schemas-microsoft-com:unattend}component"):
        assert {"name", "processorArchitecture", "publicKeyToken", "language", "versionScope"} <= set(
            component.attrib
        )
    # BYOL: no key anywhere.
    assert not [el for el in root.iter() if el.tag.endswith("ProductKey")]
    assert "ProductKey" not in text

    setup = passes["windowsPE"].find("u:component[@name='Microsoft-Windows-Setup']", NS)
    assert setup.find("u:ImageInstall/u:OSImage/u:InstallTo/u:PartitionID", NS).text == "3"
    assert setup.find("u:UserData/u:AcceptEula", NS).text == "true"
    for item in setup.iter():
        if item.tag.endswith(("}Disk", "}CreatePartition", "}ModifyPartition", "}MetaData")):
            assert item.get(WCM) == "add"

    special = passes["specialize"].find("u:component[@name='Microsoft-Windows-Deployment']", NS)
    sync = [
        c.find("u:Path", NS).text for c in special.findall("u:RunSynchronous/u:RunSynchronousCommand", NS)
    ]
    assert any(
        "HKLM\\SYSTEM\\CurrentControlSet\\Control\\BitLocker" in p
        and "/v PreventDeviceEncryption /t REG_DWORD /d 1" in p
        for p in sync
    ), sync

    # Remote Desktop, what the clone gate probes: on, with its rule group open on every profile.
    rdp = passes["specialize"].find(
        "u:component[@name='Microsoft-Windows-TerminalServices-LocalSessionManager']", NS
    )
    assert rdp.find("u:fDenyTSConnections", NS).text == "false"
    mpssvc = passes["specialize"].find("u:component[@name='Networking-MPSSVC-Svc']", NS)
    group = mpssvc.find("u:FirewallGroups/u:FirewallGroup", NS)
    assert group.get(WCM) == "add" and group.get(
        "{http://schemas.microsoft.com/WMIConfig/2002/State}keyValue"
    )
    assert (
        group.find("u:Active", NS).text,
        group.find("u:Group", NS).text,
        group.find("u:Profile", NS).text,
    ) == (
        "true",
        "@FirewallAPI.dll,-28752",
        "all",
    )

    shell = passes["oobeSystem"].find("u:component[@name='Microsoft-Windows-Shell-Setup']", NS)
    assert shell.find("u:UserAccounts/u:AdministratorPassword/u:Value", NS).text == PASSWORD
    assert shell.find("u:AutoLogon/u:Password/u:Value", NS).text == PASSWORD
    commands = shell.findall("u:FirstLogonCommands/u:SynchronousCommand", NS)
    assert [int(c.find("u:Order", NS).text) for c in commands] == list(range(1, len(commands) + 1))
    lines = [c.find("u:CommandLine", NS).text for c in commands]
    joined = "\n".join(lines)

    def first(needle):
        return next(i for i, line in enumerate(lines) if needle in line)

    assert first("qemu-ga-x86_64.msi") < first("reagentc.exe /disable")
    assert first("OpenSSH-Win64.msi") < first("reagentc.exe /disable")
    assert first("reagentc.exe /disable") < first("Remove-Partition") < first("sysprep.exe") == len(lines) - 1
    enable = lines[first("fDenyTSConnections -Type DWord -Value 0")]
    assert "Enable-NetFirewallRule -Group '@FirewallAPI.dll,-28752'" in enable
    assert "Set-Service TermService -StartupType Automatic" in enable
    assert first("fDenyTSConnections -Type DWord -Value 0") < first("sysprep.exe")
    assert "{de94bba4-06d1-4d40-a16a-bfd50179d6ac}" in lines[first("Remove-Partition")]
    plugins = lines[first("cloudbase-init-unattend.conf")]
    assert "'cloudbase-init-unattend.conf', 'cloudbase-init.conf'" in plugins
    assert "cloudbaseinit.plugins.windows.extendvolumes.ExtendVolumesPlugin" in plugins
    assert "RUN_SERVICE_AS_LOCAL_SYSTEM=1" in lines[first("CloudbaseInitSetup_x64.msi")]
    assert ("Install-WindowsUpdate" in joined) is apply_updates
    # Every step leaves the failure marker and powers off on error; the seal's log line comes last.
    assert all("New-Item -ItemType File -Force C:\\BUILD_FAILED" in line for line in lines[:-1])
    assert "sysprep /generalize /oobe /shutdown')" in lines[-1]
    # Bodies sit inside -Command "...": only the outer pair of double quotes.
    assert all(line.count('"') == 2 for line in lines)
    assert PASSWORD not in joined


@pytest.mark.quick
@pytest.mark.parametrize("apply_updates", [False, True])
def test_answer_file_renders_valid(apply_updates):
    check_answer_file(render(windows_bake_apply_updates=apply_updates), apply_updates)


@pytest.mark.quick
def test_updates_are_off_by_default():
    defaults = yaml.safe_load((ROLE_DIR / "defaults" / "main.yml").read_text())
    assert defaults["windows_bake_apply_updates"] is False
    assert "ExtendVolumesPlugin" in " ".join(defaults["windows_bake_cloudbase_plugins"])


# The role in the lab -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def windows_disks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bake-disks")
    return {
        "sealed": disks.windows_disk(folder / "sealed.raw", disks.sealed_windows_files())["path"],
        "failed": disks.windows_disk(
            folder / "failed.raw", disks.sealed_windows_files({"BUILD_FAILED": "step failed\r\n"})
        )["path"],
    }


class Cluster:
    def __init__(self, lab, api_client, namespace):
        from kubernetes import client

        self.lab, self.namespace = lab, namespace
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.storage = client.StorageV1Api(api_client)
        for claim in ("win11-noprompt-iso", "win11-bake-tools"):
            self.claim(claim)

    def claim(self, name, labels=None):
        body = {
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        }
        self.core.create_namespaced_persistent_volume_claim(self.namespace, body)

    def vmi(self, name):
        from kubernetes.client.rest import ApiException

        try:
            return self.custom.get_namespaced_custom_object(
                "kubevirt.io", "v1", self.namespace, "virtualmachineinstances", name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def vm_or_none(self, name):
        from kubernetes.client.rest import ApiException

        try:
            return self.vm(name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def vm(self, name):
        return self.custom.get_namespaced_custom_object(
            "kubevirt.io", "v1", self.namespace, "virtualmachines", name
        )

    def guest_seals(self, name, disk: pathlib.Path, errors: list, timeout=180.0, screenshot=False):
        """Play the guest: once the VMI runs, leave ``disk`` on the build claim and power off (with
        ``screenshot``, only after the role has read the console)."""
        from tests.lab.controllers.volumes import disk_image_path

        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                vm = self.vm_or_none(name)
                if vm and (vm.get("status") or {}).get("printableStatus") == "Running":
                    break
                time.sleep(0.2)
            else:
                raise AssertionError("VM %s never ran" % name)
            running_since = time.time()
            # Power off only after the role has read the VM as Running, so its progress shows it.
            while time.monotonic() < deadline and screenshot and not self.screenshots(name):
                time.sleep(0.2)
            while time.monotonic() < deadline and not any(
                r["resource"] == "virtualmachines"
                and r["namespace"] == self.namespace
                and r["verb"] in ("get", "list")
                and r["time"] > running_since
                for r in self.lab.audit()
            ):
                time.sleep(0.2)
            store = self.lab.controller_manager.lab.store
            pvc = store.get(
                store.resource("", "v1", "persistentvolumeclaims"), self.namespace, name + "-disk"
            )
            target = disk_image_path(self.lab.controller_manager.lab, pvc)
            target.parent.mkdir(parents=True, exist_ok=True)
            disks.run("cp", "--sparse=always", disk, target)
            # VMIs have no status subresource: the guest's end is written on the object itself.
            self.custom.patch_namespaced_custom_object(
                "kubevirt.io",
                "v1",
                self.namespace,
                "virtualmachineinstances",
                name,
                {"status": {"phase": "Succeeded"}},
            )
        except Exception as exc:  # reported by the test
            errors.append(exc)

    def screenshots(self, name):
        """Screenshots of VM ``name`` the lab has served so far."""
        path = "/virtualmachineinstances/%s/vnc/screenshot" % name
        return sum(1 for r in self.lab.audit() if r["resource"].endswith(path) and r["code"] == 200)

    def console_shows(self, name, screens, errors, timeout=120.0):
        """Play the guest's screen: show each of ``screens`` once the role has taken a new screenshot."""
        from tests.lab.controllers.console import CONSOLE

        try:
            deadline = time.monotonic() + timeout
            for screen in screens:
                seen = self.screenshots(name)
                while self.screenshots(name) <= seen:
                    if time.monotonic() > deadline:
                        raise AssertionError("no new screenshot of %s before showing %s" % (name, screen))
                    time.sleep(0.1)
                self.custom.patch_namespaced_custom_object(
                    "kubevirt.io",
                    "v1",
                    self.namespace,
                    "virtualmachines",
                    name,
                    {"metadata": {"annotations": {CONSOLE: screen}}},
                )
        except Exception as exc:  # reported by the test
            errors.append(exc)

    def console_breaks(self, name, errors, timeout=60.0):
        """Make the lab's console answer errors as soon as the role has created VM ``name``."""
        from tests.lab.controllers.console import CONSOLE

        try:
            deadline = time.monotonic() + timeout
            while self.vm_or_none(name) is None:
                if time.monotonic() > deadline:
                    raise AssertionError("VM %s never created" % name)
                time.sleep(0.1)
            self.custom.patch_namespaced_custom_object(
                "kubevirt.io",
                "v1",
                self.namespace,
                "virtualmachines",
                name,
                {"metadata": {"annotations": {CONSOLE: "garbled"}}},
            )
        except Exception as exc:  # reported by the test
            errors.append(exc)


def bake_play(namespace, tasks_from="main", **overrides):
    role_vars_ = {
        "windows_bake_namespace": namespace,
        "windows_bake_admin_password": PASSWORD,
        "windows_bake_poll_interval": 1,
        "windows_bake_timeout": 90,
        "windows_bake_seal_verifier_image": "registry.example.com/tools/seal-verifier:1",
        "windows_bake_seal_verify_options": {"wait_timeout": 60, "wait_sleep": 1},
    }
    role_vars_.update(overrides)
    kubeconfig = {"kubeconfig": "{{ lookup('env', 'KUBECONFIG') }}"}
    return {
        "hosts": "localhost",
        "gather_facts": False,
        "module_defaults": {
            "group/kubernetes.core.k8s": kubeconfig,
            "group/goldenimage.pipeline.k8s": kubeconfig,
        },
        "tasks": [
            {
                "name": "bake",
                "ansible.builtin.include_role": {"name": ROLE, "tasks_from": tasks_from},
                "vars": role_vars_,
            },
            {
                "name": "result",
                "ansible.builtin.debug": {"var": "windows_bake_result | default(windows_bake_cleaned)"},
            },
        ],
    }


def bake_progress(run):
    """The lines the bake wait printed while it ran (its result keeps them, failed or not)."""
    return [
        line
        for entry in run.tasks
        if entry["task"].startswith("Wait for the VM to stop, ")
        for line in entry["result"].get("lines", [])
    ]


def assert_password_never_shown(run):
    everything = run.stdout + run.stderr + json.dumps(run.tasks)
    for form in (PASSWORD, PASSWORD.replace("<", "&lt;").replace("&", "&amp;")):
        assert form not in everything


@pytest.mark.lab_only
def test_bake_seals_in_the_lab(
    lab, kube_client, kube_namespace, windows_disks, venv_python_first, source_iso, iso_bucket, tmp_path
):
    cluster = Cluster(lab, kube_client, kube_namespace)
    errors: list = []
    guest = threading.Thread(target=cluster.guest_seals, args=("bake-ok", windows_disks["sealed"], errors))
    guest.start()
    # The whole role: remaster, the remastered ISO imported into its claim, answer file, VM, wait, seal.
    remastered = tmp_path / "noprompt.iso"
    play = bake_play(
        kube_namespace,
        windows_bake_name="bake-ok",
        windows_bake_iso_src=str(source_iso),
        windows_bake_iso_dest=str(remastered),
        windows_bake_iso_min_image_size=MIB,
        windows_bake_iso_pvc="bake-ok-iso",
        **iso_vars(iso_bucket[1], iso_bucket[2]),
    )
    run = run_playbook([play], env=lab.env(), args=["-v"])
    guest.join()
    assert not errors, errors
    assert run.ok, run.log
    assert_password_never_shown(run)
    assert_bucket_secrets_never_shown(run, lab, kube_namespace, "bake-ok-iso")

    # The remaster's digest is the one imported (the ISO is not hashed again), and the VM boots the claim.
    digest = sha256_of(remastered)
    imported = run["Record the ISO's claim"]["ansible_facts"]["windows_bake_iso_import"]
    assert imported["action"] == "imported" and imported["sha256"] == digest
    assert "checksum" not in run["Read the ISO %s" % remastered]["stat"]
    assert (
        claim_data(lab, kube_namespace, "bake-ok-iso")[: remastered.stat().st_size] == remastered.read_bytes()
    )
    iso_claim = cluster.core.read_namespaced_persistent_volume_claim("bake-ok-iso", kube_namespace)
    assert iso_claim.metadata.annotations["goldenimage.pipeline/iso-sha256"] == digest
    shown = [r["msg"] for r in run.results("Show the ISO import's phase and progress")]
    assert shown[-1].startswith(
        "DataVolume %s/bake-ok-iso (ISO sha256 %s): phase Succeeded, progress 100.0%%"
        % (kube_namespace, digest[:12])
    ), shown

    result = run["result"]["windows_bake_result | default(windows_bake_cleaned)"]
    assert result["sealed"] is True and result["disk"] == "bake-ok-disk"
    assert {c["name"] for c in result["checks"] if c["passed"]} >= {"ntfs_boot_sector", "build_failed_absent"}
    # Progress was shown from what is observable: each status once, with the elapsed time.
    progress = bake_progress(run)
    assert progress[-1].startswith("VM %s/bake-ok: Stopped after " % kube_namespace), progress
    assert any(": Running after " in line for line in progress), progress

    vm = cluster.vm("bake-ok")
    assert vm["metadata"]["labels"]["goldenimage.pipeline/bake-state"] == "sealed"
    spec = vm["spec"]["template"]["spec"]
    boot = {d["name"]: d.get("bootOrder") for d in spec["domain"]["devices"]["disks"]}
    assert boot["rootdisk"] == 1 and boot["installer"] == 2
    assert (
        "disk" in spec["domain"]["devices"]["disks"][0] and "cdrom" in spec["domain"]["devices"]["disks"][1]
    )
    assert spec["domain"]["memory"]["guest"] == "8Gi"
    assert {"name": "sysprep", "sysprep": {"secret": {"name": "bake-ok-sysprep"}}} in spec["volumes"]
    assert {"name": "installer", "persistentVolumeClaim": {"claimName": "bake-ok-iso"}} in spec["volumes"]

    secret = cluster.core.read_namespaced_secret("bake-ok-sysprep", kube_namespace)
    text = base64.b64decode(secret.data["autounattend.xml"]).decode()
    check_answer_file(text, apply_updates=False)
    assert base64.b64decode(secret.data["apply-updates.enabled"]) == b"0"
    annotations = secret.metadata.annotations or {}
    assert not any(PASSWORD in value for value in annotations.values())


@pytest.mark.lab_only
def test_unsealed_bake_keeps_the_disk_then_cleanup(
    lab, kube_client, kube_namespace, windows_disks, venv_python_first
):
    cluster = Cluster(lab, kube_client, kube_namespace)
    # A golden's source claim and an unrelated claim must survive the cleanup.
    cluster.claim(
        "keep-golden",
        {
            "app.kubernetes.io/part-of": "windows-bake",
            "goldenimage.pipeline/bake-state": "failed",
            "kube-dc.com/golden-os": "w11",
        },
    )
    cluster.claim("keep-other", {"goldenimage.pipeline/bake-state": "failed"})
    errors: list = []
    guest = threading.Thread(
        target=cluster.guest_seals,
        args=("bake-bad", windows_disks["failed"], errors),
        kwargs={"screenshot": True},
    )
    guest.start()
    # With console screenshots: the VM's power-off ends the console's watch, and the seal is checked.
    play = bake_play(kube_namespace, windows_bake_name="bake-bad", windows_bake_console_screenshots=True)
    run = run_playbook([play], env=lab.env())
    guest.join()
    assert not errors, errors
    assert not run.ok
    assert_password_never_shown(run)
    message = run["Report the failed bake"]["msg"]
    assert "stopped but its disk is not sealed" in message and "BUILD_FAILED" in message.upper()
    assert "%s/bake-bad-disk" % kube_namespace in message and "kept for diagnosis" in message
    progress = bake_progress(run)
    assert any(", console setup (" in line for line in progress), progress
    assert progress[-1].startswith("VM %s/bake-bad: Stopped" % kube_namespace), progress
    pvc = cluster.core.read_namespaced_persistent_volume_claim("bake-bad-disk", kube_namespace)
    assert pvc.metadata.labels["goldenimage.pipeline/bake-state"] == "failed"
    assert cluster.vm("bake-bad")["metadata"]["labels"]["goldenimage.pipeline/bake-state"] == "failed"

    clean = run_playbook([bake_play(kube_namespace, tasks_from="cleanup_failed")], env=lab.env())
    assert clean.ok, clean.log
    cleaned = clean["result"]["windows_bake_result | default(windows_bake_cleaned)"]
    assert sorted(cleaned) == ["PersistentVolumeClaim/bake-bad-disk", "VirtualMachine/bake-bad"]
    left = {
        p.metadata.name
        for p in cluster.core.list_namespaced_persistent_volume_claim(kube_namespace).items
        if not p.metadata.deletion_timestamp
    }
    assert {"keep-golden", "keep-other", "win11-noprompt-iso", "win11-bake-tools"} <= left
    assert "bake-bad-disk" not in left


@pytest.mark.lab_only
def test_wait_times_out_naming_the_last_status(lab, kube_client, kube_namespace):
    cluster = Cluster(lab, kube_client, kube_namespace)
    run = run_playbook(
        [bake_play(kube_namespace, windows_bake_name="bake-slow", windows_bake_timeout=4)], env=lab.env()
    )
    assert not run.ok
    message = run["Report the failed bake"]["msg"]
    assert "timed out after 4s waiting for VM %s/bake-slow to stop" % kube_namespace in message, message
    assert "last seen status Running" in message and "kept for diagnosis" in message

    # The VM still runs: the cleanup deletes it (and waits until its instance and launcher pod are gone,
    # which hold the disk on a real cluster) before the disk, which nothing uses any more by then.
    assert cluster.vm("bake-slow")["metadata"]["labels"]["goldenimage.pipeline/bake-state"] == "failed"
    clean = run_playbook([bake_play(kube_namespace, tasks_from="cleanup_failed")], env=lab.env())
    assert clean.ok, clean.log
    cleaned = clean["result"]["windows_bake_result | default(windows_bake_cleaned)"]
    assert "PersistentVolumeClaim/bake-slow-disk" in cleaned and "VirtualMachine/bake-slow" in cleaned


@pytest.mark.lab_only
def test_refusals_before_anything_is_written(lab, kube_client, kube_namespace):
    cluster = Cluster(lab, kube_client, kube_namespace)
    slow = "slow-%s" % kube_namespace
    cluster.storage.create_storage_class(
        {
            "metadata": {"name": slow, "annotations": {"goldenimage.pipeline/slow": "true"}},
            "provisioner": "hostpath.lab.goldenimage.io",
        }
    )
    try:
        cases = {
            "low memory": {"windows_bake_memory": "4Gi"},
            "slow class": {"windows_bake_storage_class": slow},
            "no password": {"windows_bake_admin_password": ""},
            "no verifier image": {"windows_bake_seal_verifier_image": ""},
            "missing class": {"windows_bake_storage_class": "nope"},
        }
        play = bake_play(kube_namespace)
        bake = play["tasks"][0]
        play["tasks"] = [
            {
                "name": "case %s" % name,
                "block": [dict(bake, vars=dict(bake["vars"], **extra))],
                "rescue": [
                    {"name": name, "ansible.builtin.debug": {"msg": "{{ ansible_failed_result.msg }}"}}
                ],
            }
            for name, extra in cases.items()
        ]
        run = run_playbook([play], env=lab.env())
        assert run.ok, run.log
        assert "windows_bake_memory 4Gi is below the catalog minimum 8Gi" in run["low memory"]["msg"]
        assert (
            "StorageClass %s is marked slow (goldenimage.pipeline/slow=true)" % slow
            in run["slow class"]["msg"]
        )
        assert "windows_bake_admin_password" in run["no password"]["msg"]
        assert "images/seal-verifier/Containerfile" in run["no verifier image"]["msg"]
        assert "StorageClass nope does not exist" in run["missing class"]["msg"]
        assert cluster.core.list_namespaced_secret(kube_namespace).items == []
        assert (
            cluster.custom.list_namespaced_custom_object(
                "kubevirt.io", "v1", kube_namespace, "virtualmachines"
            )["items"]
            == []
        )

        allowed = bake_play(
            kube_namespace, windows_bake_storage_class=slow, windows_bake_allow_slow_storage=True
        )
        allowed["tasks"][0]["ansible.builtin.include_role"]["tasks_from"] = "preflight"
        run = run_playbook([allowed], env=lab.env())
        assert run.ok, run.log
    finally:
        cluster.storage.delete_storage_class(slow, _preload_content=False)


def console_bake(lab, cluster, name, screens, tmp_path):
    """A bake with console screenshots while the guest's screen goes through ``screens``."""
    errors: list = []
    guest = threading.Thread(target=cluster.console_shows, args=(name, screens, errors))
    guest.start()
    play = bake_play(
        cluster.namespace,
        windows_bake_name=name,
        windows_bake_console_screenshots=True,
        windows_bake_console_dir=str(tmp_path / "console"),
    )
    run = run_playbook([play], env=lab.env())
    guest.join()
    assert not errors, errors
    assert not run.ok, run.log
    progress = bake_progress(run)
    message = run["Report the failed bake"]["msg"]
    assert "%s/%s-disk" % (cluster.namespace, name) in message and "kept for diagnosis" in message
    assert "Verify the seal of the disk" not in run.task_names()
    pvc = cluster.core.read_namespaced_persistent_volume_claim(name + "-disk", cluster.namespace)
    assert pvc.metadata.labels["goldenimage.pipeline/bake-state"] == "failed"
    return progress, message


@pytest.mark.lab_only
def test_a_stop_error_on_the_console_fails_the_bake(lab, kube_client, kube_namespace, tmp_path):
    from tests.lab.controllers.console import render

    cluster = Cluster(lab, kube_client, kube_namespace)
    progress, message = console_bake(lab, cluster, "bake-crash", ["stop-error"], tmp_path)
    assert "bake-crash shows a Windows stop error on its console" in message
    assert "the stop code is on the screen, saved in %s" % (tmp_path / "console") in message
    prefix = "VM %s/bake-crash: Running, console " % kube_namespace
    assert [line.split(" (")[0] for line in progress if line.startswith(prefix)] == [
        prefix + "setup",
        prefix + "stop-error",
    ], progress
    assert progress[0].startswith("VM %s/bake-crash: " % kube_namespace) and "console" not in progress[0]
    saved = sorted((tmp_path / "console").glob("bake-crash-*s.png"))
    assert len(saved) == 2 and saved[-1].read_bytes() == render("stop-error"), saved


@pytest.mark.lab_only
def test_console_text_after_a_reboot_fails_the_bake(lab, kube_client, kube_namespace, tmp_path):
    cluster = Cluster(lab, kube_client, kube_namespace)
    progress, message = console_bake(lab, cluster, "bake-loop", ["blank", "text"], tmp_path)
    assert "bake-loop shows console text again after a reboot" in message
    assert "the installer CD is booting before the disk" in message and "bootOrder 1" in message
    classes = [line.split(", console ")[1].split(" (")[0] for line in progress if ", console " in line]
    assert classes == ["setup", "blank", "bootprompt", "bootprompt"], progress


@pytest.mark.lab_only
def test_an_unreadable_console_leaves_the_status_watch(lab, kube_client, kube_namespace):
    cluster = Cluster(lab, kube_client, kube_namespace)
    errors: list = []
    guest = threading.Thread(target=cluster.console_breaks, args=("bake-dark", errors))
    guest.start()
    play = bake_play(
        kube_namespace,
        windows_bake_name="bake-dark",
        windows_bake_console_screenshots=True,
        # Room for three failed screenshots, each after the adapter's retries, on a loaded machine.
        windows_bake_timeout=75,
    )
    run = run_playbook([play], env=lab.env())
    guest.join()
    assert not errors, errors
    progress = bake_progress(run)
    unreadable = [line for line in progress if ", console unreadable (" in line]
    assert [line.split(", console unreadable (")[1][:6] for line in unreadable] == [
        "1 of 3",
        "2 of 3",
        "3 of 3",
    ]
    # The adapter rides out the 500s first; the message names the object, the retries and the server's cause.
    assert "read the console of VirtualMachineInstance %s/bake-dark" % kube_namespace in unreadable[0]
    assert "lab: lab.goldenimage.io/console='garbled'" in unreadable[0]
    [notice] = [line for line in progress if "no more console screenshots" in line]
    assert notice.endswith("no more console screenshots, the last 3 failed; waiting for the VM's status only")
    # Then the status alone is watched, to the timeout, which fails the bake as usual.
    message = run["Report the failed bake"]["msg"]
    assert "timed out after 75s waiting for VM %s/bake-dark to stop" % kube_namespace in message
    assert "kept for diagnosis" in message


# The ISO's import ------------------------------------------------------------------------------------

ISO_CLAIM = "bake-iso"
# Keys a Secret hands CDI for basic auth, which S3 (and the lab's) refuses; the role presigns instead.
READER_KEY = "iso-reader-key"
READER_SECRET = "iso-reader-Secret-5d1c9e0b"


def tiny_iso(path: pathlib.Path, text: str) -> pathlib.Path:
    """A small real ISO9660 image holding one file."""
    tree = path.parent / (path.stem + "-tree")
    tree.mkdir(parents=True)
    (tree / "README.TXT").write_text(text)
    subprocess.run(
        ["xorriso", "-as", "mkisofs", "-quiet", "-V", "BAKEISO", "-o", str(path), str(tree)],
        check=True,
        capture_output=True,
    )
    return path


@pytest.fixture
def iso_bucket(lab):
    """A private bucket on the lab's S3 endpoint: (client, name, endpoint)."""
    env = lab.env()
    s3 = s3_client(env)
    name = "isos-%s" % uuid.uuid4().hex[:8]
    s3.create_bucket(Bucket=name)
    return s3, name, env["AWS_ENDPOINT_URL"]


def iso_vars(bucket, endpoint, **overrides) -> dict:
    """The import from a private bucket, as CDI can read one: a presigned URL (the keys: AWS_*)."""
    values = {
        "windows_bake_iso_bucket": bucket,
        "windows_bake_iso_endpoint_url": endpoint,
        "windows_bake_iso_presign": True,
        "windows_bake_iso_presign_expiry": 600,
        "windows_bake_iso_poll_interval": 1,
    }
    values.update(overrides)
    return values


def iso_steps(namespace, iso_bucket, steps) -> dict:
    """One play running the role's iso_import once per step ``(name, iso, overrides)``. A failing step
    leaves its message in the task ``<name> failed``; every step ends with the task ``<name>`` showing
    windows_bake_iso_import."""
    bucket, endpoint = iso_bucket[1:]
    play = bake_play(namespace)
    base = play["tasks"][0]["vars"]
    play["tasks"] = []
    for name, iso, overrides in steps:
        role_vars_ = dict(base, **iso_vars(bucket, endpoint, windows_bake_iso_pvc=ISO_CLAIM))
        role_vars_.update(windows_bake_iso_dest=str(iso), **overrides)
        include = {
            "name": "iso import",
            "ansible.builtin.include_role": {"name": ROLE, "tasks_from": "iso_import"},
        }
        play["tasks"].append(
            {
                "name": "step %s" % name,
                "block": [dict(include, vars=role_vars_)],
                "rescue": [
                    {
                        "name": name + " failed",
                        "ansible.builtin.debug": {"msg": "{{ ansible_failed_result.msg }}"},
                    }
                ],
                "always": [{"name": name, "ansible.builtin.debug": {"var": "windows_bake_iso_import"}}],
            }
        )
    return play


def step_entries(run, name) -> list:
    """The task entries of step ``name``, its closing task excluded."""
    entries = []
    for entry in run.tasks:
        if "windows_bake_iso_import" in entry["result"]:  # the task closing a step
            if entry["task"] == name:
                return entries
            entries = []
        else:
            entries.append(entry)
    raise KeyError(name)


def claim_data(lab, namespace, name) -> bytes:
    from tests.lab.controllers.volumes import disk_image_path

    store = lab.controller_manager.lab.store
    pvc = store.get(store.resource("", "v1", "persistentvolumeclaims"), namespace, name)
    return disk_image_path(lab.controller_manager.lab, pvc).read_bytes()


def sha256_of(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def writes_since(lab, namespace, since) -> list:
    return [
        "%s %s" % (r["verb"], r["resource"])
        for r in lab.mutating_requests()
        if r["namespace"] == namespace and r["time"] > since
    ]


def keys_in(iso_bucket) -> list:
    s3, bucket = iso_bucket[:2]
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]


def assert_bucket_secrets_never_shown(run, lab, namespace, datavolume):
    """Neither key reaches the output or a task's result, and the signature of the presigned URL the
    DataVolume imports from (a bearer credential) is not printed, at any verbosity the run used."""
    everything = run.stdout + run.stderr + json.dumps(run.tasks)
    assert READER_SECRET not in everything and lab.s3.secret_key not in everything
    store = lab.store
    dv = store.get(store.resource("cdi.kubevirt.io", "v1beta1", "datavolumes"), namespace, datavolume)
    query = urllib.parse.urlsplit(dv["spec"]["source"]["http"]["url"]).query
    (signature,) = urllib.parse.parse_qs(query)["X-Amz-Signature"]
    assert signature not in run.stdout + run.stderr


@pytest.mark.lab_only
def test_iso_import_into_the_claim(lab, kube_client, kube_namespace, iso_bucket, tmp_path, monkeypatch):
    from kubernetes import client

    core, custom = client.CoreV1Api(kube_client), client.CustomObjectsApi(kube_client)
    iso = tiny_iso(tmp_path / "noprompt.iso", "first remaster\n")
    digest = sha256_of(iso)
    key = "windows/iso/%s/noprompt.iso" % digest
    upload_task = "Upload the ISO to s3://%s/%s" % (iso_bucket[1], key)
    create_task = "Create the DataVolume that imports the ISO, %s" % ISO_CLAIM
    # Twenty seconds for the import: a 1 s timeout catches it halfway, and the next step sees it finish. (The
    # steps between the DataVolume's creation and the wait take seconds each on a loaded machine.)
    monkeypatch.setenv("LAB_CDI_IMPORT_BYTES_PER_SECOND", str(iso.stat().st_size // 20))

    # Check mode predicts the upload and the DataVolume, and writes nothing.
    since = time.time()
    run = run_playbook(
        [iso_steps(kube_namespace, iso_bucket, [("predict", iso, {})])], env=lab.env(), check=True
    )
    assert run.ok, run.log
    assert run["predict"]["windows_bake_iso_import"]["action"] == "predicted"
    assert run[upload_task]["changed"] is True and run[upload_task]["action"] == "upload"
    assert run[create_task]["changed"] is True
    assert writes_since(lab, kube_namespace, since) == [] and keys_in(iso_bucket) == []

    # The import outlives a timeout, which names its phase and progress, and the next run waits for it.
    # Then the same ISO again: reused, nothing changes. Then another ISO for the same claim: refused
    # before anything is uploaded.
    other = tiny_iso(tmp_path / "other" / "noprompt.iso", "second remaster\n")
    steps = [
        ("timeout", iso, {"windows_bake_iso_import_timeout": 1}),
        ("import", iso, {}),
        ("again", iso, {}),
        ("other", other, {}),
    ]
    since = time.time()
    run = run_playbook([iso_steps(kube_namespace, iso_bucket, steps)], env=lab.env())
    assert run.ok, run.log
    # The only writes: the DataVolume, the digest on the claim it made.
    assert writes_since(lab, kube_namespace, since) == [
        "create datavolumes",
        "patch persistentvolumeclaims",
    ]
    assert keys_in(iso_bucket) == [key]
    assert_bucket_secrets_never_shown(run, lab, kube_namespace, ISO_CLAIM)
    message = run["timeout failed"]["msg"]
    assert "timed out after 1s waiting for DataVolume %s/%s" % (kube_namespace, ISO_CLAIM) in message
    assert re.search(r"last seen phase ImportInProgress, progress [0-9.]+%, restartCount 0", message), message
    assert "The import goes on: run again" in message
    shown = "Show the ISO import's phase and progress"
    progress = [e["result"]["msg"] for e in step_entries(run, "timeout") if e["task"] == shown]
    assert re.search(r": phase ImportInProgress, progress [0-9.]+%, restarts 0 after [0-9.]+s$", progress[-1])
    assert [e["status"] for e in step_entries(run, "timeout") if e["task"] in (upload_task, create_task)] == [
        "ok",
        "ok",
    ]

    result = run["import"]["windows_bake_iso_import"]
    assert result["action"] == "reused" and result["sha256"] == digest and result["key"] == key
    # Found importing (or, on a slow machine, already done): nothing is uploaded or created again, and
    # the import is waited for until it has Succeeded.
    entries = step_entries(run, "import")
    assert [e["status"] for e in entries if e["task"] in (upload_task, create_task)] == ["skipped", "skipped"]
    # The wait (and the line it shows) is skipped when the import was found done.
    progress = [e["result"]["msg"] for e in entries if e["task"] == shown and e["status"] != "skipped"]
    found = run.results("Look for the DataVolume that fills it")[1]["resources"][0]
    assert progress or found["status"]["phase"] == "Succeeded", found
    assert not progress or progress[-1].startswith(
        "DataVolume %s/%s (ISO sha256 %s): phase Succeeded, progress 100.0%%"
        % (kube_namespace, ISO_CLAIM, digest[:12])
    ), progress

    # After all four steps the claim holds the first ISO's bytes (CDI pads a raw image with zeros to the
    # volume's size) and digest: the refused ISO changed nothing.
    data = claim_data(lab, kube_namespace, ISO_CLAIM)
    assert data[: iso.stat().st_size] == iso.read_bytes()
    assert data[iso.stat().st_size :].strip(b"\0") == b""
    pvc = core.read_namespaced_persistent_volume_claim(ISO_CLAIM, kube_namespace)
    assert pvc.metadata.annotations["goldenimage.pipeline/iso-sha256"] == digest
    dv = custom.get_namespaced_custom_object(
        "cdi.kubevirt.io", "v1beta1", kube_namespace, "datavolumes", ISO_CLAIM
    )
    assert dv["spec"]["contentType"] == "kubevirt"
    http = dv["spec"]["source"]["http"]
    assert sorted(http) == ["checksum", "url"] and http["checksum"] == "sha256:" + digest
    assert http["url"].startswith("%s/%s/%s?" % (iso_bucket[2], iso_bucket[1], key))
    assert dv["metadata"]["annotations"]["goldenimage.pipeline/iso-sha256"] == digest
    head = iso_bucket[0].head_object(Bucket=iso_bucket[1], Key=key)
    assert head["Metadata"]["sha256"] == digest and head["ContentLength"] == iso.stat().st_size

    # Again and another ISO: no task changed anything.
    assert run["again"]["windows_bake_iso_import"]["action"] == "reused"
    assert [e["task"] for e in step_entries(run, "again") + step_entries(run, "other") if e["changed"]] == []
    message = run["other failed"]["msg"]
    assert (
        "already holds an ISO with sha256 %s, not the remastered noprompt.iso with sha256 %s"
        % (digest, sha256_of(other))
        in message
    ), message
    assert (
        "never overwritten: delete it (and its DataVolume) or choose another windows_bake_iso_pvc" in message
    )


@pytest.mark.lab_only
def test_iso_import_from_a_private_s3_bucket_with_a_presigned_url(
    lab, kube_client, kube_namespace, iso_bucket, tmp_path
):
    """The lab's S3 verifies the URL's signature as S3 does and refuses basic auth, so only the presigned
    import fills the claim; the Secret of a secretRef is written, and CDI's import with it fails."""
    from kubernetes import client

    _s3, bucket, endpoint = iso_bucket
    iso = tiny_iso(tmp_path / "noprompt.iso", "presigned remaster\n")
    signed = {
        "windows_bake_iso_access_key": lab.s3.access_key,
        "windows_bake_iso_secret_key": lab.s3.secret_key,
    }
    basic = {
        "windows_bake_iso_presign": False,
        "windows_bake_iso_secret_ref": "iso-reader",
        "windows_bake_iso_import_access_key_id": READER_KEY,
        "windows_bake_iso_import_secret_key": READER_SECRET,
        "windows_bake_iso_pvc": "bake-iso-basic",
    }
    steps = [
        ("both", iso, dict(signed, windows_bake_iso_secret_ref="iso-reader")),
        ("signed", iso, signed),
        ("basic", iso, basic),
    ]
    run = run_playbook([iso_steps(kube_namespace, iso_bucket, steps)], env=lab.env())
    assert run.ok, run.log
    assert "windows_bake_iso_presign and windows_bake_iso_secret_ref" in run["both failed"]["msg"]
    assert_bucket_secrets_never_shown(run, lab, kube_namespace, ISO_CLAIM)

    assert run["signed"]["windows_bake_iso_import"]["action"] == "imported"
    data = claim_data(lab, kube_namespace, ISO_CLAIM)
    assert data[: iso.stat().st_size] == iso.read_bytes()
    custom, core = client.CustomObjectsApi(kube_client), client.CoreV1Api(kube_client)
    dv = custom.get_namespaced_custom_object(
        "cdi.kubevirt.io", "v1beta1", kube_namespace, "datavolumes", ISO_CLAIM
    )
    http = dv["spec"]["source"]["http"]
    assert sorted(http) == ["checksum", "url"] and http["checksum"] == "sha256:" + sha256_of(iso)
    plain = "%s/%s/windows/iso/%s/noprompt.iso" % (endpoint, bucket, sha256_of(iso))
    assert http["url"].startswith(plain + "?") and "X-Amz-Expires=600" in http["url"]

    # CDI sends the Secret's keys as basic auth: S3 answers 400 and the import fails, naming it.
    secret = core.read_namespaced_secret("iso-reader", kube_namespace)
    assert base64.b64decode(secret.data["secretKey"]).decode() == READER_SECRET
    failed = custom.get_namespaced_custom_object(
        "cdi.kubevirt.io", "v1beta1", kube_namespace, "datavolumes", "bake-iso-basic"
    )
    assert failed["spec"]["source"]["http"] == {
        "url": plain,
        "checksum": http["checksum"],
        "secretRef": "iso-reader",
    }
    assert failed["status"]["phase"] == "Failed"
    assert "got 400" in run["basic failed"]["msg"], run["basic failed"]["msg"]


FAULTS = {"conflict_rate": 0.2, "error_rate": 0.1, "drop_rate": 0.05, "commit_drop_rate": 0.05}


def committed(lab, namespace, since):
    """(verb, resource) of every mutating request the server applied in ``namespace`` since ``since``,
    lost replies included, sorted."""
    return sorted(
        (r["verb"], r["resource"])
        for r in lab.mutating_requests()
        if r["namespace"] == namespace and r["time"] > since and 200 <= r["code"] < 300
    )


def steps_play(namespace, steps, **overrides):
    """One play including the role's ``steps`` (tasks_from names) in order, with the same variables."""
    play = bake_play(namespace, **overrides)
    include = play["tasks"][0]
    play["tasks"] = [
        dict(
            include,
            name="bake %s" % step,
            **{"ansible.builtin.include_role": {"name": ROLE, "tasks_from": step}},
        )
        for step in steps
    ]
    return play


@pytest.mark.lab_only
@pytest.mark.suite("faults")
@pytest.mark.suite("idempotence")
def test_the_bake_objects_converge_in_one_run_under_faults(
    lab, kube_client, kube_namespace, iso_bucket, tmp_path
):
    """Conflicts, 5xx answers, dropped connections and replies lost after the commit on every API request:
    the ISO import, the answer file, the build disk and VM are each written once (counted from the audit log)
    in one run; a rerun changes nothing and sends no mutating request; the cleanup of a failed bake converges
    under the same faults."""
    cluster = Cluster(lab, kube_client, kube_namespace)
    iso = tiny_iso(tmp_path / "noprompt.iso", "faulty network\n")
    play = steps_play(
        kube_namespace,
        ["preflight", "iso_import", "answer_file", "build_vm"],
        windows_bake_name="bake-faults",
        windows_bake_iso_dest=str(iso),
        windows_bake_iso_pvc="bake-faults-iso",
        **iso_vars(iso_bucket[1], iso_bucket[2]),
    )
    since = time.time()
    lab.faults.update(dict(FAULTS, seed=12))
    try:
        run = run_playbook([play], env=lab.env(faults=True))
        injected = lab.faults.to_dict()["injected"]
    finally:
        lab.faults.reset()
    assert run.ok, run.log
    assert_password_never_shown(run)
    assert_bucket_secrets_never_shown(run, lab, kube_namespace, "bake-faults-iso")
    assert injected["conflict"] and injected["error"] and (injected["drop"] or injected["commit_drop"]), (
        injected
    )
    # Each object written once: no duplicate, no re-send of what a lost reply had already committed.
    assert committed(lab, kube_namespace, since) == [
        ("create", "datavolumes"),
        ("create", "persistentvolumeclaims"),
        ("create", "secrets"),
        ("create", "virtualmachines"),
        ("patch", "persistentvolumeclaims"),
    ]
    vm = cluster.vm("bake-faults")
    assert {"name": "installer", "persistentVolumeClaim": {"claimName": "bake-faults-iso"}} in vm["spec"][
        "template"
    ]["spec"]["volumes"]
    iso_claim = cluster.core.read_namespaced_persistent_volume_claim("bake-faults-iso", kube_namespace)
    assert iso_claim.metadata.annotations["goldenimage.pipeline/iso-sha256"] == sha256_of(iso)

    since = time.time()
    again = run_playbook([play], env=lab.env())
    assert again.ok, again.log
    assert [t["task"] for t in again.tasks if t["changed"]] == []
    assert committed(lab, kube_namespace, since) == []

    # A failed bake's leftovers, deleted under the same faults.
    for kind, name in (("virtualmachines", "bake-faults"),):
        cluster.custom.patch_namespaced_custom_object(
            "kubevirt.io",
            "v1",
            kube_namespace,
            kind,
            name,
            {"metadata": {"labels": {"goldenimage.pipeline/bake-state": "failed"}}},
        )
    cluster.core.patch_namespaced_persistent_volume_claim(
        "bake-faults-disk",
        kube_namespace,
        {"metadata": {"labels": {"goldenimage.pipeline/bake-state": "failed"}}},
    )
    lab.faults.update(dict(FAULTS, seed=78))
    try:
        clean = run_playbook(
            [bake_play(kube_namespace, tasks_from="cleanup_failed")], env=lab.env(faults=True)
        )
    finally:
        lab.faults.reset()
    assert clean.ok, clean.log
    cleaned = clean["result"]["windows_bake_result | default(windows_bake_cleaned)"]
    assert sorted(cleaned) == ["PersistentVolumeClaim/bake-faults-disk", "VirtualMachine/bake-faults"]
    assert cluster.vm_or_none("bake-faults") is None or cluster.vm("bake-faults")["metadata"].get(
        "deletionTimestamp"
    )
