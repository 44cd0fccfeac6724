"""Fault suite, playbook level: under conflict 0.2 + error 0.1 + drop 0.05 + commit-then-drop 0.05 on
every request of every task, ``playbooks/publish_linux_golden.yml`` converges in one run and leaves
exactly one golden, ``playbooks/promote_golden.yml`` gates the candidate (the clone gate boots a
tenant-style clone in a project namespace) and serves it to every project in one run, leaving no gate
object behind, and ``playbooks/repave_dbinstances.yml`` rolls the fleet out in one run, each instance
repaved once, never more than max_unavailable down.

Run it on its own (``make faults``): it runs the real publish (CDI import, qemu-img Job, snapshot), the
real promotion (the lab's KubeVirt boots the clone, its port is probed) and the real roll-out (the
lab's DBInstance operator).
"""

from __future__ import annotations

import pytest

from tests.integration.modules import test_dbinstance_repave as repave_suite
from tests.integration.playbooks import test_promote_playbooks as promote_suite
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


def under_faults(lab, seed, playbook, capsys, start):
    """``start()``, a playbook run, under the suite's rates from ``seed``; prints the score line."""
    lab.faults.update(dict(RATES, seed=seed))
    try:
        with lab.through_faults():  # the helpers' playbooks go through the fault proxy
            run = start()
        injected = lab.faults.to_dict()["injected"]
    finally:
        lab.faults.reset()
    with capsys.disabled():
        print(score_line(playbook, run, injected))
    # A run that met no fault proves nothing: 5xx and dropped replies at least (a run that writes little
    # may draw no conflict).
    missing = [kind for kind in ("error", "drop") if not injected.get(kind)]
    assert not missing, "no %s was injected during %s: %s" % ("/".join(missing), playbook, injected)
    return run


def test_publish_linux_golden_converges_in_one_run_under_faults(env, capsys):
    family = "%s-flt" % env.prefix
    raw, qcow2 = make_disk(env.tmp, 7)
    url, digest = env.upload(qcow2, family)
    images = [image(env, family, {"http": {"url": url, "checksum": "sha256:" + digest}})]
    name = golden_name(family, digest)
    # The role's own waits are shortened so a run that lost track of its object ends in minutes.
    # Seed 9 injects lost replies after commits on the role's kubernetes.core creates, which a bound of
    # three attempts did not ride out.
    run = under_faults(
        env.lab,
        9,
        "publish_linux_golden",
        capsys,
        lambda: publish(
            env,
            images,
            linux_golden_import_timeout=150,
            linux_golden_convert_timeout=150,
            linux_golden_snapshot_timeout=150,
        ),
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


def gate_objects(kube_client, project):
    """What the clone gate leaves: objects with its label in the project namespace and cluster-scoped
    contents, and any VM or VM instance in the project (the gate's namespace runs no other)."""
    from kubernetes import client

    custom, core = client.CustomObjectsApi(kube_client), client.CoreV1Api(kube_client)
    label = "goldenimage.pipeline/clone-gate"
    found = []
    for plural in ("virtualmachines", "virtualmachineinstances"):
        for item in custom.list_namespaced_custom_object("kubevirt.io", "v1", project, plural)["items"]:
            found.append("%s/%s" % (plural, item["metadata"]["name"]))
    snapshots = custom.list_namespaced_custom_object(
        "snapshot.storage.k8s.io", "v1", project, "volumesnapshots", label_selector=label
    )
    found.extend("volumesnapshots/%s" % i["metadata"]["name"] for i in snapshots["items"])
    claims = core.list_namespaced_persistent_volume_claim(project, label_selector=label).items
    found.extend("persistentvolumeclaims/%s" % c.metadata.name for c in claims)
    contents = custom.list_cluster_custom_object(
        "snapshot.storage.k8s.io", "v1", "volumesnapshotcontents", label_selector=label
    )
    found.extend("volumesnapshotcontents/%s" % i["metadata"]["name"] for i in contents["items"])
    return sorted(found)


def test_promote_with_the_gate_converges_in_one_run_under_faults(lab, kube_client, tmp_path, capsys):
    stage = promote_suite.Stage(lab, kube_client, tmp_path)
    try:
        stage.ensure_golden_namespace()
        stage.make_projects()
        stage.make_goldens()
        run = under_faults(
            lab, 2028, "promote_golden + clone_gate", capsys, lambda: stage.promote("candidate")
        )
        assert run.ok, run.log
        gate = run[promote_suite.GATE]
        assert gate["verdict"] == "passed", gate
        assert [p["name"] for p in gate["phases"]] == ["provision", "start", "agent", "disk", "port"]
        assert gate["kept"] is False and "left_behind" not in gate, gate
        # Served: the one selection names the candidate, and every project resolved to it.
        selection = stage.selection()
        assert selection["spec"]["snapshotName"] == stage.goldens["candidate"]
        assert selection["spec"]["releaseDigest"] == stage.digests["candidate"]
        assert (
            selection["metadata"]["annotations"]["goldenimage.pipeline/previous-snapshot"]
            == stage.goldens["incumbent"]
        )
        promote_suite.assert_projects_served(run, stage, "candidate")
        # Nothing of the gate stays in the tenant's namespace, nor its published content.
        assert gate_objects(kube_client, stage.gate_project) == []
    finally:
        stage.cleanup()


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
        # The intent: a maintenance window open for the whole run (without one nothing is repaved).
        "repave_window": repave_suite.open_window(60),
    }
    playbook = ROOT / "playbooks" / "repave_dbinstances.yml"
    run = under_faults(
        lab,
        2027,
        "repave_dbinstances",
        capsys,
        lambda: run_playbook(playbook, env=lab.env(), extra_vars=extra),
    )
    assert run.ok, run.log
    assert sorted(run["Repave the fleet"]["intent"]["applied_by"]) == names  # started by the window
    fleet.settle(names)  # every instance Available, no trigger left behind
    assert {n: fleet.revision(n) for n in names} == {n: repave_suite.TIP for n in names}
    assert {n: fleet.repaves(n) for n in names} == {n: 1 for n in names}  # a lost reply never repaves twice
    assert fleet.operator.repaving_at_once(fleet.namespace) <= 2
