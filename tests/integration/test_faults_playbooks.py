"""Fault suite, playbook level: ``playbooks/publish_linux_golden.yml`` converges in one run under
conflict 0.2 + error 0.1 + drop 0.05 + commit-then-drop 0.05, and leaves exactly one golden.

Run it on its own (``make faults``): it runs the real publish (CDI import, qemu-img Job, snapshot)
with faults on every request of every task.
"""

from __future__ import annotations

import pytest

from tests.integration import test_linux_golden as linux_golden
from tests.integration.test_linux_golden import BLOCK_NS, golden_name, image, make_disk, publish

pytestmark = [pytest.mark.lab_only, pytest.mark.faults]

RATES = {"conflict_rate": 0.2, "error_rate": 0.1, "drop_rate": 0.05, "commit_drop_rate": 0.05}


# The producer's own arrangement (a bucket, the golden namespaces, cleanup and a fault reset afterwards).
env = linux_golden.env


def test_publish_linux_golden_converges_in_one_run_under_faults(env, capsys):
    family = "%s-flt" % env.prefix
    raw, qcow2 = make_disk(env.tmp, 7)
    url, digest = env.upload(qcow2, family)
    images = [image(env, family, {"http": {"url": url, "checksum": "sha256:" + digest}})]
    name = golden_name(family, digest)
    env.lab.faults.update(dict(RATES, seed=2026))
    try:
        # The role's own waits are shortened so a run that lost track of its object ends in minutes.
        run = publish(
            env,
            images,
            linux_golden_import_timeout=150,
            linux_golden_convert_timeout=150,
            linux_golden_snapshot_timeout=150,
        )
        injected = env.lab.faults.to_dict()["injected"]
    finally:
        env.lab.faults.reset()
    with capsys.disabled():
        failed = [t["task"] for t in run.tasks if t["status"] == "failed"]
        print(
            "\nfault suite (publish_linux_golden): %s in one run; injected %s; failed tasks: %s"
            % (
                "converged" if run.ok else "did not converge",
                ", ".join("%s=%d" % kv for kv in sorted(injected.items())),
                failed or "none",
            )
        )
    assert run.ok, run.log
    snap = env.snapshot(BLOCK_NS, name)
    assert snap["status"]["readyToUse"] is True
    assert env.golden_bytes(BLOCK_NS, name) == raw.read_bytes()
    snapshots = env.custom.list_namespaced_custom_object(
        "snapshot.storage.k8s.io", "v1", BLOCK_NS, "volumesnapshots"
    )
    assert [s["metadata"]["name"] for s in snapshots["items"] if family in s["metadata"]["name"]] == [name]
    assert env.datavolumes(BLOCK_NS) == []  # intermediates gone, no duplicate
