"""golden_retention against the lab: what is in use stays, the rest goes, a rerun writes nothing.

Deletes are counted from the lab's audit log. Each test works under its own random family prefix and
removes what it made.
"""

from __future__ import annotations

import functools
import uuid

import pytest

from tests.integration.modules.test_golden_snapshot import FS_NS, GROUP, Cluster
from tests.integration.support.runner import kube_play, module_task, run_playbook

MODULE = "goldenimage.pipeline.golden_retention"
DIGEST12 = "0123456789ab"

task = functools.partial(module_task, MODULE)


@pytest.fixture
def cluster(kube_client):
    prefix = "t%s" % uuid.uuid4().hex[:8]
    arranged = Cluster(kube_client, prefix)
    arranged.ensure_namespace(FS_NS)
    arranged.ensure_namespace("golden-images-block")
    try:
        yield arranged
    finally:
        arranged.cleanup()


def golden_name(family, date):
    # Starts with the test's prefix (cleanup removes what matches it); the version date still ends it.
    return "%s-golden-%s-%s" % (family, date, DIGEST12)


def deletes(lab):
    return sorted(
        r["path"].rsplit("/", 1)[-1] for r in lab.audit() if r["verb"] in ("delete", "deletecollection")
    )


@pytest.mark.lab_only
@pytest.mark.suite("data-loss")
def test_retention_deletes_only_what_nothing_uses(lab, cluster):
    """keep 1 over seven goldens: the served one (older than the newest), the two newer than it, one a
    clone still restores from and one a selection records as its rollback target stay; only the two
    unused old ones are deleted, check mode deletes nothing, and a rerun writes nothing."""
    from kubernetes.client.rest import ApiException

    family = "%s-debian" % cluster.prefix
    disk = cluster.pvc(FS_NS, "%s-disk" % cluster.prefix)
    dates = ["20251101", "20251201", "20260101", "20260201", "20260301", "20260401", "20260501"]
    made = {d: golden_name(family, d) for d in dates}
    for date in dates:
        cluster.golden(made[date], disk, family)
    for date in dates:
        cluster.wait_snapshot_ready(FS_NS, made[date])
    served, rollback, cloned = made["20260301"], made["20260201"], made["20260101"]
    sel = "%s-sel" % cluster.prefix
    body = {
        "apiVersion": "kube-dc.com/v1",
        "kind": "GoldenImageSelection",
        "metadata": {"name": sel, "annotations": {"goldenimage.pipeline/previous-snapshot": rollback}},
        "spec": {"family": family, "mode": "Filesystem", "snapshotName": served},
    }
    cluster.custom.create_namespaced_custom_object("kube-dc.com", "v1", FS_NS, "goldenimageselections", body)
    clone = "%s-clone" % cluster.prefix
    claim = {
        "metadata": {"name": clone},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "4Mi"}},
            "dataSource": {"apiGroup": GROUP, "kind": "VolumeSnapshot", "name": cloned},
        },
    }
    cluster.core.create_namespaced_persistent_volume_claim(FS_NS, claim)
    try:
        args = {"family": family, "keep": 1}
        lab.clear_audit()
        run = run_playbook(kube_play(task("plan", check=True, diff=True, **args)), env=lab.env())
        assert lab.mutating_requests() == []
        plan = run["plan"]
        unused = sorted([made["20251101"], made["20251201"]])
        assert plan["changed"] is True and sorted(d["name"] for d in plan["deleted"]) == unused
        assert plan["served"] == served
        assert plan["diff"]["after"]["goldens"] == [made[d] for d in reversed(dates[2:])]

        lab.clear_audit()
        run = run_playbook(kube_play(task("retain", **args)), env=lab.env())
        assert deletes(lab) == unused
        retained = run["retain"]
        assert retained["changed"] is True and retained["refused"] == []
        why = {k["name"]: k["reasons"] for k in retained["kept"]}
        assert why[made["20260501"]] == ["staged", "within keep (1 most recent)"]
        assert why[made["20260401"]] == ["staged"]
        assert "served" in why[served]
        assert "GoldenImageSelection %s/%s names it in spec.snapshotName" % (FS_NS, sel) in why[served]
        assert why[rollback] == [
            "rollback target",
            "GoldenImageSelection %s/%s records it as the rollback target (annotation "
            "goldenimage.pipeline/previous-snapshot)" % (FS_NS, sel),
        ]
        assert why[cloned] == ["PersistentVolumeClaim %s/%s restores from it directly" % (FS_NS, clone)]
        for date in dates[2:]:
            assert cluster.get_snapshot(FS_NS, made[date]) is not None, date
        for name in unused:
            snap = cluster.get_snapshot(FS_NS, name)
            assert snap is None or snap["metadata"].get("deletionTimestamp"), name
    finally:
        try:
            cluster.core.delete_namespaced_persistent_volume_claim(clone, FS_NS)
        except ApiException as exc:
            if exc.status != 404:
                raise


@pytest.mark.lab_only
@pytest.mark.suite("idempotence")
def test_a_rerun_changes_nothing_and_sends_no_write(lab, cluster):
    family = "%s-debian" % cluster.prefix
    disk = cluster.pvc(FS_NS, "%s-disk" % cluster.prefix)
    made = [golden_name(family, d) for d in ("20260101", "20260201", "20260301")]
    for name in made:
        cluster.golden(name, disk, family)
        cluster.wait_snapshot_ready(FS_NS, name)
    cluster.selection("%s-sel" % cluster.prefix, family, "Filesystem", made[-1])
    args = {"family": family, "keep": 2}
    run = run_playbook(kube_play(task("first", **args)), env=lab.env())
    assert [d["name"] for d in run["first"]["deleted"]] == [made[0]]
    lab.clear_audit()
    run = run_playbook(
        kube_play(task("again", **args), task("again, checked", check=True, **args)), env=lab.env()
    )
    assert lab.mutating_requests() == []
    for name in ("again", "again, checked"):
        assert run[name]["changed"] is False and run[name]["deleted"] == [], run[name]
        assert [k["name"] for k in run[name]["kept"]] == [made[2], made[1]]


@pytest.mark.suite("bad-input")
@pytest.mark.lab_only
def test_a_zero_keep_is_refused_before_anything_is_read(lab, cluster):
    lab.clear_audit()
    run = run_playbook(
        kube_play(task("zero", family="%s-debian" % cluster.prefix, keep=0, ignore_errors=True)),
        env=lab.env(),
    )
    assert run["zero"]["refused"] is True
    assert run["zero"]["msg"].startswith("option keep: 0 is not a number of goldens to keep")
    assert lab.mutating_requests() == []
