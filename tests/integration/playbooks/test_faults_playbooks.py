"""Fault suite, playbook level: under conflict 0.2 + error 0.1 + drop 0.05 + commit-then-drop 0.05 on
every request of every task, ``playbooks/publish_linux_golden.yml`` converges in one run and leaves
exactly one golden, and ``playbooks/repave_dbinstances.yml`` rolls the fleet out in one run, each
instance repaved once, never more than max_unavailable down.

Run it on its own (``make faults``): it runs the real publish (CDI import, qemu-img Job, snapshot) and
the real roll-out (the lab's DBInstance operator).
"""

from __future__ import annotations

import pytest

from tests.integration.modules import test_dbinstance_repave as repave_suite
from tests.integration.roles import test_linux_golden as linux_golden
from tests.integration.roles.test_linux_golden import BLOCK_NS, golden_name, image, make_disk, publish
from tests.integration.support.runner import ROOT, run_playbook

pytestmark = [pytest.mark.lab_only, pytest.mark.faults]

RATES = {"conflict_rate": 0.2, "error_rate": 0.1, "drop_rate": 0.05, "commit_drop_rate": 0.05}


# The producer's own arrangement (a bucket, the golden namespaces, cleanup and a fault reset afterwards).
env = linux_golden.env
# The roll-out's arrangement: the operator's catalog and settings, one namespace of DBInstances.
operator_settings = repave_suite.operator_settings
fleet = repave_suite.fleet


def score_line(playbook, run, injected):
    """The suite's score line: converged or not, the faults injected, the tasks that failed."""
    failed = [t["task"] for t in run.tasks if t["status"] == "failed"]
    return "\nfault suite (%s): %s in one run; injected %s; failed tasks: %s" % (
        playbook,
        "converged" if run.ok else "did not converge",
        ", ".join("%s=%d" % kv for kv in sorted(injected.items())),
        failed or "none",
    )


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
        print(score_line("publish_linux_golden", run, injected))
    assert run.ok, run.log
    snap = env.snapshot(BLOCK_NS, name)
    assert snap["status"]["readyToUse"] is True
    assert env.golden_bytes(BLOCK_NS, name) == raw.read_bytes()
    snapshots = env.custom.list_namespaced_custom_object(
        "snapshot.storage.k8s.io", "v1", BLOCK_NS, "volumesnapshots"
    )
    assert [s["metadata"]["name"] for s in snapshots["items"] if family in s["metadata"]["name"]] == [name]
    assert env.datavolumes(BLOCK_NS) == []  # intermediates gone, no duplicate


def test_repave_playbook_rolls_the_fleet_out_in_one_run_under_faults(lab, fleet, capsys):
    names = ["db-%d" % i for i in range(6)]
    for i, name in enumerate(names):
        fleet.create(name, labels={"role": "standby" if i % 2 else "primary"})
    fleet.settle(names)
    extra = {
        "repave_namespace": fleet.namespace,
        "repave_catalog": fleet.catalog,
        "repave_max_unavailable": 2,
        "repave_batch_pause": 0,
        "repave_wait_timeout": 120,
        "repave_api_version": "%s/%s" % (fleet.group, fleet.version),
    }
    lab.faults.update(dict(RATES, seed=2027))
    try:
        run = run_playbook(ROOT / "playbooks" / "repave_dbinstances.yml", env=lab.env(), extra_vars=extra)
        injected = lab.faults.to_dict()["injected"]
    finally:
        lab.faults.reset()
    with capsys.disabled():
        print(score_line("repave_dbinstances", run, injected))
    assert run.ok, run.log
    fleet.settle(names)  # every instance Available, no trigger left behind
    assert {n: fleet.revision(n) for n in names} == {n: repave_suite.TIP for n in names}
    assert {n: fleet.repaves(n) for n in names} == {n: 1 for n in names}  # a lost reply never repaves twice
    assert fleet.operator.repaving_at_once(fleet.namespace) <= 2
