"""clone_gate proves a Windows clone's disk grew inside the guest over WinRM (pywinrm, the client Ansible's
winrm connection uses, against the lab guest's WS-Management listener): the seed's
`Get-PartitionSupportedSize -DriveLetter C` with C:'s and its disk's sizes, read from the real disk the
guest booted, names the link that broke - WinRE after C: (link 2), a C: nobody extended (link 3)."""

from __future__ import annotations

import pytest

from tests.integration.modules.test_clone_gate import (  # noqa: F401  pylint: disable=unused-import
    FAST,
    WINDOWS,
    _projects_deleted,
    goldens,
    leftovers,
    project_namespace,
    task,
)
from tests.integration.support.runner import kube_play, run_playbook
from tests.lab.controllers.guestagent import EXTEND_NOTE
from tests.lab.controllers.kubevirt import GUEST_WINRM_NOTE, probe_template

pytestmark = pytest.mark.lab_only

PASSWORD = "Gate-S3cret!winrm"
LISTENER = {GUEST_WINRM_NOTE: "gate:" + PASSWORD}
CREDS = {
    "username": "gate",
    "password": PASSWORD,
    "transport": "basic",
    "address": probe_template(5986),
}


@pytest.fixture(scope="module")
def winrm_gates(lab, goldens, kube_client):  # noqa: F811
    from kubernetes import client

    project = project_namespace(client.CoreV1Api(kube_client))
    common = {"snapshot_namespace": goldens, "project_namespace": project, **WINDOWS, **FAST}

    def gate(name, snapshot="golden-windows", notes=None, creds=None, **extra):
        return task(
            name,
            snapshot=snapshot,
            vm_annotations=dict(LISTENER, **(notes or {})),
            guest_credentials=dict(CREDS, **(creds or {})),
            **common,
            **extra,
        )

    lab.clear_audit()
    refused = run_playbook(
        kube_play(
            gate("basic over http", creds={"scheme": "http"}), gate("a key", creds={"private_key": "k"})
        ),
        env=lab.env(),
    )
    writes = [r for r in lab.mutating_requests() if project in (r.get("namespace"), r.get("name") or "")]
    run = run_playbook(
        kube_play(
            gate("grown"),
            gate("winre", snapshot="golden-windows-winre"),
            gate("not extended", notes={EXTEND_NOTE: "false"}),
            gate("wrong password", creds={"password": "not-it"}),
        ),
        env=lab.env(),
    )
    return {"refused": refused, "writes": writes, "run": run, "project": project}


def test_a_grown_c_drive_passes_on_the_partition_read_over_winrm(lab, winrm_gates):
    run = winrm_gates["run"]
    grown = run["grown"]
    assert run.entry("grown")["status"] == "ok", grown["msg"]
    assert grown["verdict"] == "passed" and grown["proof"] == "guest-agent", grown
    check = grown["disk_check"]
    assert check["name"] == "winrm-partition", check
    assert "disk; a 2.0 GiB clone of a 1.0 GiB golden" in check["detail"], check
    assert "(read over WinRM: Get-PartitionSupportedSize -DriveLetter C)" in check["detail"], check
    assert grown["gate_record"]["disk_check"] == "winrm-partition"
    assert leftovers(lab, winrm_gates["project"]) == []


def test_the_partition_figures_name_the_broken_link(winrm_gates):
    run = winrm_gates["run"]
    winre = run["winre"]
    assert winre["verdict"] == "disk_not_grown", winre
    assert "a partition after C: strands the space" in winre["msg"] and "(link 2)" in winre["msg"], winre[
        "msg"
    ]
    flat = run["not extended"]
    assert flat["verdict"] == "disk_not_grown", flat
    assert "nothing extended it" in flat["msg"] and "(link 3)" in flat["msg"], flat["msg"]
    assert "(Get-PartitionSupportedSize SizeMax)" in flat["msg"]


def test_a_login_that_fails_leaves_the_disk_unproven_and_the_password_in_no_result(winrm_gates):
    run = winrm_gates["run"]
    result = run["wrong password"]
    assert result["verdict"] == "disk_unproven", result
    assert "credentials were rejected" in result["msg"] and "WinRM gate@127.0.0.1" in result["msg"], result
    assert PASSWORD not in run.log and "not-it" not in run.log


def test_credentials_that_cannot_log_in_safely_are_refused_before_any_write(winrm_gates):
    refused = winrm_gates["refused"]
    clear = refused["basic over http"]
    assert refused.entry("basic over http")["status"] == "ignored", clear
    assert "basic over scheme http sends the password readable" in clear["msg"], clear
    assert "WinRM logs in with a password" in refused["a key"]["msg"], refused["a key"]
    assert winrm_gates["writes"] == []
