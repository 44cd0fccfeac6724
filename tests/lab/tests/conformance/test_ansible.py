"""kubernetes.core.k8s / k8s_info run through ansible-playbook against the target."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import threading

import pytest

from .conftest import unique

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


def _set_ready_when_created(custom, group: str, namespace: str, stop: threading.Event) -> None:
    """Plays the Widget's controller: marks it Ready a moment after it appears."""
    from kubernetes.client.rest import ApiException

    while not stop.wait(0.3):
        try:
            custom.get_namespaced_custom_object(group, "v1", namespace, "widgets", "waited")
        except ApiException:
            continue
        stop.wait(1.0)
        status = {"conditions": [{"type": "Ready", "status": "True", "reason": "Built", "message": "done"}]}
        custom.patch_namespaced_custom_object_status(
            group, "v1", namespace, "widgets", "waited", {"status": status}
        )
        return


def test_k8s_modules(lab, custom, core, widget_crd):
    ns = unique("ansible")
    stop = threading.Event()
    helper = threading.Thread(
        target=_set_ready_when_created, args=(custom, widget_crd, ns, stop), daemon=True
    )
    helper.start()
    try:
        result = _run(lab, "k8s.yml", ns=ns, widget_group=widget_crd)
    finally:
        stop.set()
        helper.join(timeout=10)
        core.delete_namespace(ns)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


@pytest.mark.lab_only
def test_check_mode_sends_no_mutating_request(lab, kube_namespace):
    lab.clear_audit()
    result = _run(lab, "check_mode.yml", "--check", ns=kube_namespace)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    records = lab.audit()
    assert records, "the playbook talked to the lab"
    assert lab.mutating_requests() == []
    assert any(r["verb"] == "create" and r["dry_run"] for r in records)
