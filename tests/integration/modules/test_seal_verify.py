"""seal_verify on real disks: NTFS and ext4 images made in the test, raw, qcow2, compressed qcow2, a
backing chain, and a PersistentVolumeClaim read by the verifier Job in the lab.

Every case runs through the verifier the module runs; the module itself runs once per path kind.
"""

from __future__ import annotations

import codecs
import functools
import os
import pathlib
import sys
import time

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import _seal_cli as seal_cli

from tests.integration.support import disks, hives
from tests.integration.support.runner import module_task, play, run_playbook

MODULE = "goldenimage.pipeline.seal_verify"
OTHER_LAST_LINE = "2026-08-09 10:02:40 bootstrap: cloudbase-init installed\r\n\r\n"
UTF16_LOG = codecs.BOM_UTF16_LE + disks.SEALED_LOG.encode("utf-16-le")

# name -> (files changed on C:, windows_disk options, failing checks)
WINDOWS_CASES = {
    "sealed": ({}, {}, []),
    "bitlocker": (
        {},
        {"bitlocker": True},
        [
            "ntfs_boot_sector",
            "build_failed_absent",
            "bootstrap_script_absent",
            "bootstrap_log_final_line",
            "image_state_generalized",
            "credentials_absent",
            "remote_desktop_enabled",
        ],
    ),
    "build_failed_lowercase": (
        {"build_Failed": "Setup failed at specialize\r\n"},
        {},
        ["build_failed_absent"],
    ),
    "bootstrap_script_left": (
        {"Kube-DC-Bootstrap.ps1": "Restart-Computer\r\n"},
        {},
        ["bootstrap_script_absent"],
    ),
    "log_other_line": (
        {"bootstrap.log": disks.SEALED_LOG.split("\r\n", maxsplit=1)[0] + "\r\n" + OTHER_LAST_LINE},
        {},
        ["bootstrap_log_final_line"],
    ),
    "log_absent": ({"bootstrap.log": None}, {}, ["bootstrap_log_final_line"]),
    "log_utf16le": ({"bootstrap.log": UTF16_LOG}, {}, []),
    "log_utf8_bom": (
        {"BOOTSTRAP.LOG": codecs.BOM_UTF8 + disks.SEALED_LOG.encode(), "bootstrap.log": None},
        {},
        [],
    ),
    "recovery_after_c": ({}, {"recovery_after": True}, ["nothing_after_windows_partition"]),
    # The remote-access contract, read from the SYSTEM hive hivexsh wrote: what the clone gate probes.
    "rdp_denied": (
        {"Windows/System32/config/SYSTEM": disks.system_hive(deny=1)},
        {},
        ["remote_desktop_enabled"],
    ),
    "rdp_never_enabled": (
        {"Windows/System32/config/SYSTEM": disks.system_hive(deny=None)},
        {},
        ["remote_desktop_enabled"],
    ),
    "rdp_rule_disabled": (
        {
            "Windows/System32/config/SYSTEM": disks.system_hive(
                rules={"RemoteDesktop-UserMode-In-TCP": hives.RDP_RULE_OFF}
            )
        },
        {},
        ["remote_desktop_enabled"],
    ),
    "rdp_other_port": (
        {"Windows/System32/config/SYSTEM": disks.system_hive(port_number=3390)},
        {},
        ["remote_desktop_enabled"],
    ),
    "rdp_current_control_set_2": (
        {"Windows/System32/config/SYSTEM": disks.system_hive(current=2)},
        {},
        [],
    ),
    "system_hive_absent": ({"Windows/System32/config/SYSTEM": None}, {}, ["remote_desktop_enabled"]),
}

LINUX_CASES = {
    "sealed": ({}, []),
    "machine_id_set": ({"etc/machine-id": "4b1d0f6a2c9e4e7f8a3b5c6d7e8f9a0b\n"}, ["machine_id_empty"]),
    "host_keys": (
        {"etc/ssh/ssh_host_ed25519_key": "key\n", "etc/ssh/ssh_host_ed25519_key.pub": "pub\n"},
        ["ssh_host_keys_absent"],
    ),
    "cloud_init_instance": (
        {"var/lib/cloud/data/instance-id": "i-0123\n", "var/lib/cloud/instances/i-0123/": b""},
        ["cloud_init_instance_absent"],
    ),
    "build_authorized_keys": (
        {"home/debian/.ssh/authorized_keys": "ssh-ed25519 AAAA packer\n"},
        ["build_authorized_keys_absent"],
    ),
    "core_dump": ({"var/crash/_usr_bin_true.0.crash": "core\n"}, ["core_dumps_absent"]),
    "big_var_log": ({"var/log/syslog": b"x" * (2 * disks.MIB)}, ["var_log_small"]),
}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """Every test disk, built once: ``made[case]`` is the raw disk, plus qcow2 forms of the sealed one."""
    folder = tmp_path_factory.mktemp("seal-disks")
    out: dict[str, pathlib.Path] = {}
    for case, (changes, options, _failing) in WINDOWS_CASES.items():
        files = disks.sealed_windows_files(changes)
        out["windows-" + case] = disks.windows_disk(folder / ("windows-%s.raw" % case), files, **options)[
            "path"
        ]
    for case, (changes, _failing) in LINUX_CASES.items():
        tree = disks.ext4_tree(folder / ("linux-%s.tree" % case), changes)
        out["linux-" + case] = disks.linux_disk(folder / ("linux-%s.raw" % case), tree)["path"]
    whole = disks.ext4_tree(folder / "whole.tree")
    out["linux-whole-disk"] = disks.ext4_image(folder / "linux-whole-disk.raw", whole)
    sealed = out["windows-sealed"]
    out["qcow2"] = disks.qcow2(sealed, folder / "sealed.qcow2")
    out["qcow2-compressed"] = disks.qcow2(sealed, folder / "sealed-compressed.qcow2", compressed=True)
    chain = folder / "chain"
    chain.mkdir()
    out["chain-top"] = disks.overlay_chain(out["windows-build_failed_lowercase"], sealed, chain)
    out["chain-base"] = chain / "base.qcow2"
    return out


def failing(result):
    return [c["name"] for c in result["checks"] if not c["passed"]]


@pytest.mark.parametrize("case", sorted(WINDOWS_CASES))
def test_windows_cases(made, case):
    result = seal_cli.verify(str(made["windows-" + case]))
    expected = WINDOWS_CASES[case][2]
    assert result["os"] == "windows"
    assert result["partition"] == 3
    assert failing(result) == expected, result["checks"]
    assert result["sealed"] is (not expected)
    assert [c["name"] for c in result["checks"]] == [
        "ntfs_boot_sector",
        "build_failed_absent",
        "bootstrap_script_absent",
        "bootstrap_log_final_line",
        "image_state_generalized",
        "credentials_absent",
        "nothing_after_windows_partition",
        "remote_desktop_enabled",
    ]
    assert all(c["evidence"] for c in result["checks"])
    assert result["bytes_read"] < 2 * disks.MIB


@pytest.mark.parametrize("case", sorted(LINUX_CASES))
def test_linux_cases(made, case):
    result = seal_cli.verify(str(made["linux-" + case]))
    assert result["os"] == "linux"
    assert result["partition"] == 2
    assert failing(result) == LINUX_CASES[case][1], result["checks"]


def test_evidence_names_what_was_found(made):
    checks = {c["name"]: c for c in seal_cli.verify(str(made["windows-build_failed_lowercase"]))["checks"]}
    assert "C:\\build_Failed" in checks["build_failed_absent"]["evidence"]
    checks = {c["name"]: c for c in seal_cli.verify(str(made["windows-bitlocker"]))["checks"]}
    assert "-FVE-FS-" in checks["ntfs_boot_sector"]["evidence"]
    checks = {c["name"]: c for c in seal_cli.verify(str(made["windows-recovery_after_c"]))["checks"]}
    assert "'Recovery'" in checks["nothing_after_windows_partition"]["evidence"]
    assert "16.0 MiB" in checks["nothing_after_windows_partition"]["evidence"]
    checks = {c["name"]: c for c in seal_cli.verify(str(made["windows-log_other_line"]))["checks"]}
    assert "cloudbase-init installed" in checks["bootstrap_log_final_line"]["evidence"]


def test_remote_desktop_evidence_names_the_setting(made):
    def evidence(case):
        checks = seal_cli.verify(str(made["windows-" + case]))["checks"]
        return {c["name"]: c for c in checks}["remote_desktop_enabled"]["evidence"]

    assert "fDenyTSConnections is 0, RDP listens on 3389" in evidence("sealed")
    assert "RemoteDesktop-UserMode-In-TCP" in evidence("sealed")
    assert "fDenyTSConnections is 1: Remote Desktop is off" in evidence("rdp_denied")
    assert "fDenyTSConnections is not set" in evidence("rdp_never_enabled")
    assert "no enabled inbound firewall rule allows TCP 3389" in evidence("rdp_rule_disabled")
    assert "port 3390, not on 3389" in evidence("rdp_other_port")
    assert "ControlSet002" in evidence("rdp_current_control_set_2")
    assert "the hive is not on the volume" in evidence("system_hive_absent")
    # The port is the gate's: a golden checked for another port than the one it opens is refused.
    other = seal_cli.verify(str(made["windows-sealed"]), remote_desktop_port=5986)
    assert failing(other) == ["remote_desktop_enabled"]
    left_out = seal_cli.verify(str(made["windows-rdp_denied"]), remote_desktop_port=0)
    assert left_out["sealed"] is True
    assert "remote_desktop_enabled" not in [c["name"] for c in left_out["checks"]]


def test_formats_and_chain(made):
    for key in ("qcow2", "qcow2-compressed", "chain-top"):
        result = seal_cli.verify(str(made[key]))
        assert result["format"] == "qcow2"
        assert result["sealed"] is True, (key, result["checks"])
    top = seal_cli.verify(str(made["chain-top"]))
    assert [pathlib.Path(c["path"]).name for c in top["chain"]] == ["top.qcow2", "mid.qcow2", "base.qcow2"]
    # The base alone is the failed build that the overlay repaired.
    assert failing(seal_cli.verify(str(made["chain-base"]))) == ["build_failed_absent"]


def test_whole_disk_filesystem_and_explicit_partition(made):
    result = seal_cli.verify(str(made["linux-whole-disk"]))
    assert result["partition"] == 0
    assert result["sealed"] is True
    assert seal_cli.verify(str(made["windows-sealed"]), partition=3)["sealed"] is True
    with pytest.raises(seal_cli.seal.SealError, match="no partition 9"):
        seal_cli.verify(str(made["windows-sealed"]), partition=9)


def test_options_change_the_rules(made):
    result = seal_cli.verify(str(made["windows-sealed"]), final_line="shutdown /s /t 0")
    assert failing(result) == ["bootstrap_log_final_line"]
    result = seal_cli.verify(str(made["windows-bootstrap_script_left"]), bootstrap_script="C:\\other.ps1")
    assert result["sealed"] is True
    result = seal_cli.verify(str(made["linux-big_var_log"]), max_log_bytes=4 * disks.MIB)
    assert result["sealed"] is True


task = functools.partial(module_task, MODULE)
# The lab runs a pod's command on this host (python3 from PATH): any image name does.
IMAGE = "registry.example.com/tools/seal-verifier:1"
claim_task = functools.partial(task, verifier_image=IMAGE)


def test_module_on_files(made):
    run = run_playbook(
        play(
            task("raw", path=str(made["windows-sealed"])),
            task("chain in check mode", path=str(made["chain-top"]), os="windows", check=True),
            task("unsealed", path=str(made["windows-recovery_after_c"]), ignore_errors=True),
            task("linux", path=str(made["linux-host_keys"]), fail_on_unsealed=False),
        )
    )
    assert run.entry("raw")["status"] == "ok", run.log
    raw = run["raw"]
    assert raw["sealed"] is True and raw["changed"] is False
    assert raw["bytes_read"] > 0 and raw["seconds"] >= 0
    assert [p["number"] for p in raw["partitions"]] == [1, 2, 3]
    chain = run["chain in check mode"]
    assert chain["sealed"] is True and chain["format"] == "qcow2" and len(chain["chain"]) == 3
    assert run.entry("unsealed")["status"] == "ignored"
    unsealed = run["unsealed"]
    assert "nothing_after_windows_partition" in unsealed["msg"] and "Recovery" in unsealed["msg"]
    assert unsealed["sealed"] is False
    assert run.entry("linux")["status"] == "ok"
    assert run["linux"]["os"] == "linux" and run["linux"]["failed_checks"] == ["ssh_host_keys_absent"]


def test_unreadable_file_is_refused(made, tmp_path):
    with pytest.raises(seal_cli._disk.DiskError, match="does not exist"):
        seal_cli.verify(str(tmp_path / "missing.qcow2"))
    blank = tmp_path / "blank.raw"
    disks.run("truncate", "-s", "4M", blank)
    with pytest.raises(seal_cli.seal.SealError, match="no GPT or MBR partition table and no filesystem"):
        seal_cli.verify(str(blank))


# The PersistentVolumeClaim path: the verifier Job runs next to the volume ------------------------


def _claim(kube_client, lab, namespace, name, mode, content: pathlib.Path):
    from kubernetes import client

    from tests.lab.controllers.volumes import volume_path

    core = client.CoreV1Api(kube_client)
    body = {
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "volumeMode": mode,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    core.create_namespaced_persistent_volume_claim(namespace, body)
    # The lab's storage controller binds the claim asynchronously, as a real provisioner does.
    deadline = time.monotonic() + 30
    while True:
        claim = core.read_namespaced_persistent_volume_claim(name, namespace).to_dict()
        if claim["spec"]["volume_name"]:
            break
        assert time.monotonic() < deadline, "PVC %s/%s did not bind" % (namespace, name)
        time.sleep(0.1)
    claim = {
        "kind": "PersistentVolumeClaim",
        "metadata": claim["metadata"],
        "spec": {"volumeName": claim["spec"]["volume_name"]},
    }
    real = volume_path(lab.controller_manager.lab, claim)
    target = real / "disk.img" if mode == "Filesystem" else real
    target.parent.mkdir(parents=True, exist_ok=True)
    disks.run("cp", "--sparse=always", content, target)


@pytest.mark.lab_only
def test_module_on_claims(lab, kube_client, kube_namespace, made, venv_python_first):
    from kubernetes import client

    _claim(kube_client, lab, kube_namespace, "golden-fs", "Filesystem", made["qcow2-compressed"])
    _claim(kube_client, lab, kube_namespace, "golden-block", "Block", made["windows-recovery_after_c"])
    lab.clear_audit()
    run = run_playbook(
        [
            {
                "name": "seal_verify on claims",
                "hosts": "localhost",
                "gather_facts": False,
                "module_defaults": {
                    "group/goldenimage.pipeline.k8s": {"kubeconfig": "{{ lookup('env', 'KUBECONFIG') }}"}
                },
                "tasks": [
                    claim_task("predict", pvc="golden-fs", namespace=kube_namespace, check=True),
                    claim_task(
                        "filesystem", pvc="golden-fs", namespace=kube_namespace, wait_timeout=60, wait_sleep=1
                    ),
                    claim_task(
                        "block",
                        pvc="golden-block",
                        namespace=kube_namespace,
                        fail_on_unsealed=False,
                        wait_timeout=60,
                        wait_sleep=1,
                    ),
                ],
            }
        ],
        env=lab.env(),
    )
    assert run.entry("filesystem")["status"] == "ok", run.log
    assert run.entry("predict")["status"] == "skipped"
    assert "check mode" in run["predict"]["msg"]
    fs = run["filesystem"]
    assert fs["sealed"] is True and fs["changed"] is False
    assert fs["format"] == "qcow2" and fs["chain"][0]["path"] == "/disk/disk.img"
    # The Job reads the image facts with the same rules (image_facts ships in its ConfigMap).
    assert fs["facts"]["image_state"]["generalized"] is True and fs["exposure_reasons"] == []
    assert fs["job"]["name"].startswith("seal-verify-") and fs["job"]["pod"]
    # The claim's verification ran as an async job and printed the Job's progress as it came.
    assert fs["lines"] and all(
        line.startswith(
            "seal_verify: Job %s/%s verifying PersistentVolumeClaim golden-fs: "
            % (kube_namespace, fs["job"]["name"])
        )
        for line in fs["lines"]
    ), fs["lines"]
    assert fs["lines"][0].endswith("(0s)"), fs["lines"]
    block = run["block"]
    assert block["sealed"] is False and block["failed_checks"] == ["nothing_after_windows_partition"]
    assert block["format"] == "raw"

    # Nothing is left behind: a finished pod would still hold the claim.
    batch, core = client.BatchV1Api(kube_client), client.CoreV1Api(kube_client)
    assert batch.list_namespaced_job(kube_namespace).items == []
    assert core.list_namespaced_pod(kube_namespace).items == []
    assert [
        c.metadata.name
        for c in core.list_namespaced_config_map(kube_namespace).items
        if c.metadata.name.startswith("seal-verify-")
    ] == []
    # Check mode sent nothing that mutates: the first mutation is the filesystem task's ConfigMap.
    first = next(r for r in lab.mutating_requests() if r["namespace"] == kube_namespace)
    assert first["resource"] == "configmaps", first


@pytest.mark.lab_only
@pytest.mark.suite("idempotence")
def test_a_second_verification_changes_nothing_and_leaves_nothing(
    lab, kube_client, kube_namespace, made, venv_python_first
):
    """A claim's disk can change without its object changing, so every run reads it again, in a Job: a
    second run reports changed=false and the same verdict, and its only requests that write are the create
    and delete of its own scratch ConfigMap and Job (and the Job's pod): each object it creates it deletes,
    and nothing else (the claim above all) is written."""
    from kubernetes import client

    _claim(kube_client, lab, kube_namespace, "golden-fs", "Filesystem", made["qcow2-compressed"])
    first = run_playbook(_claim_play(kube_namespace), env=lab.env())
    assert first.entry("claim")["status"] == "ok", first.log
    lab.clear_audit()
    second = run_playbook(_claim_play(kube_namespace), env=lab.env())
    assert second.entry("claim")["status"] == "ok", second.log
    again = second["claim"]
    assert again["changed"] is False and again["sealed"] is True
    assert again["checks"] == first["claim"]["checks"]
    writes = lab.mutating_requests()
    scratch = again["job"]["name"]
    assert writes and all(r["name"].startswith(scratch) for r in writes), writes
    assert {r["resource"] for r in writes} <= {"configmaps", "jobs", "pods"}, writes
    for resource in ("configmaps", "jobs"):
        made_names = {r["name"] for r in writes if r["resource"] == resource and r["verb"] == "create"}
        gone = {r["name"] for r in writes if r["resource"] == resource and r["verb"] == "delete"}
        assert made_names == gone == {scratch}, writes
    core, batch = client.CoreV1Api(kube_client), client.BatchV1Api(kube_client)
    assert batch.list_namespaced_job(kube_namespace).items == []
    assert core.list_namespaced_pod(kube_namespace).items == []
    assert [
        c.metadata.name
        for c in core.list_namespaced_config_map(kube_namespace).items
        if c.metadata.name.startswith("seal-verify-")
    ] == []


def _claim_play(namespace, kubeconfig="{{ lookup('env', 'KUBECONFIG') }}", **args):
    return [
        {
            "name": "seal_verify on a claim",
            "hosts": "localhost",
            "gather_facts": False,
            "module_defaults": {"group/goldenimage.pipeline.k8s": {"kubeconfig": kubeconfig}},
            "tasks": [
                claim_task(
                    "claim", pvc="golden-fs", namespace=namespace, wait_timeout=60, wait_sleep=1, **args
                )
            ],
        }
    ]


@pytest.mark.lab_only
def test_a_claim_is_verified_under_faults_and_nothing_is_left(
    lab, kube_client, kube_namespace, made, venv_python_first
):
    from kubernetes import client

    _claim(kube_client, lab, kube_namespace, "golden-fs", "Filesystem", made["qcow2-compressed"])
    lab.faults.update(
        {"conflict_rate": 0.2, "error_rate": 0.1, "drop_rate": 0.05, "commit_drop_rate": 0.1, "seed": 5}
    )
    try:
        run = run_playbook(_claim_play(kube_namespace), env=lab.env(faults=True))
        injected = lab.faults.to_dict()["injected"]
    finally:
        lab.faults.reset()
    assert run.entry("claim")["status"] == "ok", run.log
    assert run["claim"]["sealed"] is True
    assert sum(injected.values()) >= 1, injected
    core, batch = client.CoreV1Api(kube_client), client.BatchV1Api(kube_client)
    assert batch.list_namespaced_job(kube_namespace).items == []
    assert core.list_namespaced_pod(kube_namespace).items == []
    assert [
        c.metadata.name
        for c in core.list_namespaced_config_map(kube_namespace).items
        if c.metadata.name.startswith("seal-verify-")
    ] == []


@pytest.mark.lab_only
def test_a_token_that_cannot_delete_reports_what_it_left(
    lab, kube_client, kube_namespace, made, tmp_path, venv_python_first
):
    _claim(kube_client, lab, kube_namespace, "golden-fs", "Filesystem", made["qcow2-compressed"])
    rules = [
        {
            "verbs": ["get", "list", "watch", "create"],
            "groups": ["", "batch"],
            "resources": ["persistentvolumeclaims", "configmaps", "jobs", "pods", "pods/log"],
        },
    ]
    token = lab.add_token("no-delete", rules)
    kubeconfig = lab.write_kubeconfig(tmp_path / "no-delete.kubeconfig", token, "no-delete")
    run = run_playbook(_claim_play(kube_namespace, str(kubeconfig), ignore_errors=True), env=lab.env())
    result = run["claim"]
    assert "job" in result, result
    name = result["job"]["name"]
    assert result["sealed"] is True  # the verdict is there, and so is what could not be removed
    assert {(i["kind"], i["name"]) for i in result["left_behind"]} >= {("Job", name), ("ConfigMap", name)}
    assert "could not delete Job %s/%s" % (kube_namespace, name) in result["msg"]
    assert "kubectl -n %s delete job/%s" % (kube_namespace, name) in result["msg"]


@pytest.mark.lab_only
def test_an_image_without_dissect_fails_naming_the_fix_and_installs_nothing(
    lab, kube_client, kube_namespace, made, tmp_path, monkeypatch
):
    """The Job's python3 is a stock one here (no site-packages): the verifier does not reach for a package
    index by default, it fails naming the missing package, the image to build and the opt-in."""
    from kubernetes import client

    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "python3").write_text('#!/bin/sh\nexec %s -S "$@"\n' % sys.executable)
    (bare / "python3").chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bare, os.environ.get("PATH", "")))
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/no-index")
    _claim(kube_client, lab, kube_namespace, "golden-fs", "Filesystem", made["qcow2-compressed"])
    run = run_playbook(_claim_play(kube_namespace, ignore_errors=True), env=lab.env())
    result = run["claim"]
    assert run.entry("claim")["status"] == "ignored", result
    assert "lacks dissect." in result["msg"] and IMAGE in result["msg"], result["msg"]
    assert "images/seal-verifier/Containerfile" in result["msg"] and "install_missing=true" in result["msg"]
    assert "Collecting" not in result.get("log", "")
    core = client.CoreV1Api(kube_client)
    assert core.list_namespaced_pod(kube_namespace).items == []
