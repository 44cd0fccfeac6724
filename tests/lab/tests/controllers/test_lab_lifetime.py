"""A lab never outlives its owner: a process that started a lab is killed with SIGKILL (no atexit, no
Lab.stop) and every child it started (etcd, kube-apiserver, kube-controller-manager, a Job's process)
is gone within seconds, killed by the kernel's parent-death signal (tests/lab/lifetime.py)."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

from tests.lab.lifetime import tied

REPO = pathlib.Path(__file__).resolve().parents[4]

OWNER = r"""
import json, pathlib, sys, time
from tests.lab import Lab

state, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
lab = Lab(state, with_s3=False).start()
store = lab.store
store.create(store.resource("", "v1", "namespaces"), {"metadata": {"name": "owner"}})
job = {
    "metadata": {"name": "sleeper", "namespace": "owner"},
    "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [
        {"name": "main", "image": "quay.io/lab/tools:1", "command": ["sleep", "300"]}]}}},
}
store.create(store.resource("batch", "v1", "jobs"), job)
pod_rt = store.resource("", "v1", "pods")
deadline = time.monotonic() + 60
while True:
    pods = store.list(pod_rt, "owner")[0]
    ids = [((p.get("status") or {}).get("containerStatuses") or [{}])[0].get("containerID", "") for p in pods]
    if any(ids) or time.monotonic() > deadline:
        break
    time.sleep(0.1)
pids = {name: proc.pid for name, proc in lab.apiserver._procs}
pids.update({"job": int(i.split("//")[1]) for i in ids if i})
out.write_text(json.dumps(pids))
time.sleep(3600)
"""


def _alive(pid: int) -> bool:
    """Running or sleeping; a zombie (killed, not yet reaped by whoever inherited it) is gone."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def test_children_die_with_the_process_that_started_the_lab(tmp_path):
    out = tmp_path / "pids.json"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with open(tmp_path / "owner.log", "wb") as log:
        owner = subprocess.Popen(
            [sys.executable, "-c", OWNER, str(tmp_path / "lab"), str(out)],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: nothing but the kernel's signal reaches the children
        )
    try:
        deadline = time.monotonic() + 240
        while not out.exists():
            assert owner.poll() is None, (tmp_path / "owner.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the lab did not start"
            time.sleep(0.2)
        pids = json.loads(out.read_text())
        assert {"etcd", "kube-apiserver", "kube-controller-manager", "job"} <= set(pids), pids
        assert all(_alive(pid) for pid in pids.values())
    finally:
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
    end = time.monotonic() + 5
    while time.monotonic() < end and any(_alive(pid) for pid in pids.values()):
        time.sleep(0.1)
    assert {name: pid for name, pid in pids.items() if _alive(pid)} == {}


def test_tied_runs_the_command_under_a_parent_death_signal():
    argv = tied(["sleep", "1"])
    assert (
        argv[-2:] == ["sleep", "1"]
        and "--pdeathsig" in argv
        and argv[argv.index("--pdeathsig") + 1] == "KILL"
    )
