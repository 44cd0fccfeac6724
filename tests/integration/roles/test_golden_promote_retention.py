"""roles/golden_promote with retention on: after the promotion, the unused older goldens go and the
served one, the one just replaced (the rollback target) and the newest stay. Deletes are counted from
the lab's audit log."""

from __future__ import annotations

import uuid

import pytest

from tests.integration.modules.test_golden_retention import deletes, golden_name
from tests.integration.modules.test_golden_snapshot import FS_NS, Cluster
from tests.integration.support.runner import kube_play, run_playbook

RETENTION = "Keep the most recent goldens of the family and delete the unused older ones"


@pytest.fixture
def cluster(kube_client):
    arranged = Cluster(kube_client, "t%s" % uuid.uuid4().hex[:8])
    arranged.ensure_namespace(FS_NS)
    arranged.ensure_namespace("golden-images-block")
    try:
        yield arranged
    finally:
        arranged.cleanup()


def promote(lab, family, snapshot, keep, check=False):
    role = {
        "name": "Promote",
        "ansible.builtin.include_role": {"name": "goldenimage.pipeline.golden_promote"},
        "vars": {
            "golden_promote_family": family,
            "golden_promote_snapshot": snapshot,
            "golden_promote_gate": False,
            "golden_promote_allow_ungated": True,
            "golden_promote_ungated_reason": "lab goldens are blank disks",
            "golden_promote_verify_projects": False,
            "golden_promote_retention_keep": keep,
        },
    }
    return run_playbook(kube_play(role), env=lab.env(), check=check)


@pytest.mark.lab_only
@pytest.mark.suite("data-loss")
def test_promotion_then_retention_keeps_the_rollback_target(lab, cluster):
    family = "%s-debian" % cluster.prefix
    disk = cluster.pvc(FS_NS, "%s-disk" % cluster.prefix)
    dates = ["20260101", "20260201", "20260301", "20260401"]
    made = [golden_name(family, d) for d in dates]
    for name in made:
        cluster.golden(name, disk, family)
    for name in made:
        cluster.wait_snapshot_ready(FS_NS, name)
    cluster.selection("%s-sel" % cluster.prefix, family, "Filesystem", made[2])

    off = promote(lab, family, made[3], 0, check=True)
    assert off.ok, off.log()
    assert off.results(RETENTION) == []  # 0 is off: the step does not run

    lab.clear_audit()
    run = promote(lab, family, made[3], 1)
    assert run.ok, run.log()
    result = run[RETENTION]
    assert sorted(d["name"] for d in result["deleted"]) == made[:2]
    assert deletes(lab) == made[:2]
    why = {k["name"]: k["reasons"] for k in result["kept"]}
    assert "served" in why[made[3]]
    assert "rollback target" in why[made[2]], why

    lab.clear_audit()
    again = promote(lab, family, made[3], 1)
    assert again.ok, again.log()
    assert again[RETENTION]["changed"] is False
    assert lab.mutating_requests() == []
