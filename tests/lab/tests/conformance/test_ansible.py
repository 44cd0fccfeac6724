"""kubernetes.core.k8s / k8s_info through ansible-playbook against the lab's CRDs, controllers and audit."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.lab_only
PLAYBOOKS = pathlib.Path(__file__).with_name("playbooks")
COLLECTIONS = pathlib.Path(__file__).resolve().parents[4] / ".collections"


def _run(lab, playbook: str, *extra: str, **variables: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, **lab.env())
    env["ANSIBLE_COLLECTIONS_PATH"] = str(COLLECTIONS)
    env["ANSIBLE_NOCOLOR"] = "1"
    env.setdefault("ANSIBLE_LOCALHOST_WARNING", "false")
    env.setdefault("ANSIBLE_INVENTORY_UNPARSED_WARNING", "false")
    args = [
        str(pathlib.Path(sys.executable).with_name("ansible-playbook")),
        "-i",
        "localhost,",
        "-c",
        "local",
        "-e",
        f"ansible_python_interpreter={sys.executable}",
        *[a for k, v in variables.items() for a in ("-e", f"{k}={v}")],
        *extra,
        str(PLAYBOOKS / playbook),
    ]
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)


def test_k8s_modules_on_the_lab_cdi(lab, kube_namespace):
    """kubernetes.core creates a DataVolume from the lab's CRD, waits on the Ready condition the lab's
    CDI sets, reads the claim CDI made (owned by the DataVolume), and deletes both."""
    result = _run(lab, "k8s.yml", ns=kube_namespace)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_check_mode_sends_no_mutating_request(lab, kube_namespace):
    lab.clear_audit()
    result = _run(lab, "check_mode.yml", "--check", ns=kube_namespace)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    records = lab.audit()
    assert records, "the playbook talked to the lab"
    assert lab.mutating_requests() == []
    assert any(r["verb"] == "create" and r["dry_run"] for r in records)
