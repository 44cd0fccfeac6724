"""golden_selection against a cluster and its per-project seeder (the lab's, or Kube-DC's own).

Both promotion paths run check mode, real and again; each refusal is shown to write nothing; the label
path's two broken intermediate states are arranged by hand so the seeder acts on them, and our
verification must catch what the seeder does silently. Each test labels its own project namespaces
``kube-dc.com/project=<prefix>`` and verifies only those.
"""

from __future__ import annotations

import functools
import json
import time
import uuid

import pytest

from tests.integration.modules.test_golden_snapshot import DIGEST, FS_NS, GROUP, VERSION
from tests.integration.modules.test_golden_snapshot import Cluster as SnapshotCluster
from tests.integration.support import SETTLE_SECONDS
from tests.integration.support.runner import module_task, play, run_playbook

MODULE = "goldenimage.pipeline.golden_selection"
SEL_GROUP, SEL_PLURAL = "kube-dc.com", "goldenimageselections"
OTHER_DIGEST = "sha256:" + "fedcba9876543210" * 4
GATE_PASSED = "goldenimage.pipeline/gate"
# What clone_gate writes on a golden it passed (these goldens carry no release digest, nor does the record).
PASSED = '{"at":"2026-01-01T00:00:00Z","release_digest":"","run":"r1","verdict":"passed"}'


task = functools.partial(module_task, MODULE)


class Cluster(SnapshotCluster):
    """Goldens of one family, project namespaces of this test, and what the seeder made of them."""

    def __init__(self, api_client, prefix):
        super().__init__(api_client, prefix)
        self.family = "%s-deb" % prefix
        self.selector = "kube-dc.com/project=%s" % prefix
        self.projects = []
        self.disk = None

    def ready_golden(self, suffix, active=False, family=None, gated=True):
        """A Ready golden; ``gated`` ones record a passing clone gate, as a promoted golden does."""
        if self.disk is None:
            self.disk = self.pvc(FS_NS, "%s-disk" % self.prefix)
        name = "%s-%s" % (self.prefix, suffix)
        self.golden(name, self.disk, family or self.family, active=active)
        if gated:
            record = dict(json.loads(PASSED), candidate="%s/%s" % (FS_NS, name))
            body = {"metadata": {"annotations": {GATE_PASSED: json.dumps(record)}}}
            self.custom.patch_namespaced_custom_object(GROUP, VERSION, FS_NS, "volumesnapshots", name, body)
        self.wait_snapshot_ready(FS_NS, name)
        return name

    def project(self, suffix):
        name = "%s-%s" % (self.prefix, suffix)
        self.core.create_namespace(
            {"metadata": {"name": name, "labels": {"kube-dc.com/project": self.prefix}}}
        )
        self.projects.append(name)
        return name

    def set_active(self, name, active):
        body = {"metadata": {"labels": {"kube-dc.com/golden-active": "true" if active else None}}}
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, FS_NS, "volumesnapshots", name, body)

    def listed_goldens(self):
        """Goldens of the family in the API's list order (the order the label path falls back to)."""
        items = self.custom.list_namespaced_custom_object(GROUP, VERSION, FS_NS, "volumesnapshots")["items"]
        return [
            i["metadata"]["name"]
            for i in items
            if (i["metadata"].get("labels") or {}).get("kube-dc.com/golden-os") == self.family
        ]

    def handle(self, name):
        golden = self.get_snapshot(FS_NS, name)
        content = self.custom.get_cluster_custom_object(
            GROUP, VERSION, "volumesnapshotcontents", golden["status"]["boundVolumeSnapshotContentName"]
        )
        return (content.get("status") or {}).get("snapshotHandle") or content["spec"]["source"][
            "snapshotHandle"
        ]

    def seeded_from(self, project):
        obj = self.get_snapshot(project, "golden-%s" % self.family) or {}
        if not (obj.get("status") or {}).get("boundVolumeSnapshotContentName"):
            return None
        return (obj["metadata"].get("annotations") or {}).get("kube-dc.com/seeded-from")

    def wait_seeded(self, project, golden, timeout=SETTLE_SECONDS):
        want = "%s/%s" % (FS_NS, golden)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.seeded_from(project) == want:
                return
            time.sleep(0.2)
        raise AssertionError("%s was not seeded from %s: %s" % (project, want, self.seeded_from(project)))

    def selection_obj(self, name, namespace=FS_NS):
        from kubernetes.client.rest import ApiException

        try:
            return self.custom.get_namespaced_custom_object(SEL_GROUP, "v1", namespace, SEL_PLURAL, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def wait_selection_status(self, name, ready, timeout=SETTLE_SECONDS):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = (self.selection_obj(name) or {}).get("status") or {}
            if status.get("ready") is ready:
                return status
            time.sleep(0.2)
        raise AssertionError("selection %s never had status.ready %s" % (name, ready))

    def events(self, reason, namespace=FS_NS):
        items = self.core.list_namespaced_event(namespace).items
        return [e for e in items if e.reason == reason and e.involved_object.name.startswith(self.prefix)]

    def cleanup(self):
        from kubernetes.client.rest import ApiException

        super().cleanup()
        for name in self.projects:
            try:
                self.core.delete_namespace(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        contents = self.custom.list_cluster_custom_object(GROUP, VERSION, "volumesnapshotcontents")["items"]
        for content in contents:
            name = content["metadata"]["name"]
            if any(name.startswith("kdc-%s-" % project) for project in self.projects):
                self.custom.delete_cluster_custom_object(GROUP, VERSION, "volumesnapshotcontents", name)


@pytest.fixture
def promo(kube_client):
    arranged = Cluster(kube_client, "t%s" % uuid.uuid4().hex[:8])
    arranged.ensure_namespace(FS_NS)
    try:
        yield arranged
    finally:
        arranged.cleanup()


def args(cluster, **extra):
    base = {
        "family": cluster.family,
        "project_selector": cluster.selector,
        "verify_timeout": 30,
        "verify_interval": 1,
    }
    base.update(extra)
    return base


@pytest.mark.suite("idempotence")
def test_promote_predict_real_again_and_roll_back(lab, promo):
    old, new = promo.ready_golden("old"), promo.ready_golden("new")
    projects = [promo.project("p1"), promo.project("p2")]
    promote_old = args(
        promo, snapshot=old, release_digest=OTHER_DIGEST, mode="filesystem", verify_projects=True
    )
    promote_new = args(promo, snapshot=new, release_digest=DIGEST, verify_projects=True)
    run = run_playbook(
        play(task("predict", check=True, diff=True, **promote_old), task("promote old", **promote_old)),
        env=lab.env(),
    )
    assert run.ok, run.log
    # The same promotion again, alone, so the audit log holds only its requests.
    lab.clear_audit()
    rerun = run_playbook(play(task("again", diff=True, **promote_old)), env=lab.env())
    assert rerun.ok, rerun.log
    again_writes = lab.mutating_requests()
    later = run_playbook(
        play(
            task("promote new", diff=True, **promote_new),
            task("roll back", **args(promo, rollback=True, verify_projects=True)),
        ),
        env=lab.env(),
    )
    assert later.ok, later.log
    name = "%s-filesystem" % promo.family

    predicted = run["predict"]
    assert predicted["changed"] is True
    assert predicted["diff"]["before"] == {}
    assert predicted["diff"]["after"]["spec"] == {
        "family": promo.family,
        "mode": "Filesystem",
        "snapshotName": old,
        "releaseDigest": OTHER_DIGEST,
    }
    assert predicted["selected"]["handle"] == promo.handle(old)
    assert sorted(p["namespace"] for p in predicted["projects"]) == projects  # reported, not waited for

    first = run["promote old"]
    assert first["changed"] is True
    assert first["selected"]["selection"] == "%s/%s" % (FS_NS, name)
    assert first["previous"]["path"] == "label"  # the label path served before any selection existed
    assert [p["match"] for p in first["projects"]] == [True, True]
    assert {p["handle"] for p in first["projects"]} == {promo.handle(old)}
    assert first["unresolved"] == []

    again = rerun["again"]
    assert again["changed"] is False
    assert again["diff"]["before"] == again["diff"]["after"]
    assert again_writes == [], again_writes

    second = later["promote new"]
    assert second["changed"] is True
    assert second["previous"] == {"snapshot": old, "release_digest": OTHER_DIGEST, "path": "selection"}
    assert second["selected"]["release_digest"] == DIGEST
    assert second["diff"]["after"]["metadata"]["annotations"] == {
        "goldenimage.pipeline/previous-snapshot": old,
        "goldenimage.pipeline/previous-release-digest": OTHER_DIGEST,
    }
    assert {p["handle"] for p in second["projects"]} == {promo.handle(new)}

    back = later["roll back"]
    assert back["changed"] is True
    assert back["selected"]["snapshot"] == old
    assert back["selected"]["release_digest"] == OTHER_DIGEST
    assert {p["handle"] for p in back["projects"]} == {promo.handle(old)}
    live = promo.selection_obj(name)
    assert live["spec"]["snapshotName"] == old
    assert live["metadata"]["annotations"]["goldenimage.pipeline/previous-snapshot"] == new
    assert promo.wait_selection_status(name, True)["snapshotHandle"] == promo.handle(old)
    assert all(promo.seeded_from(p) == "%s/%s" % (FS_NS, old) for p in projects)


def test_nothing_is_served_without_the_gates_recorded_pass_unless_overridden_on_the_record(lab, promo):
    """old records clone_gate's pass; new records none, then a rejection. Promoting or rolling back to new is
    refused on both paths, writing nothing, until allow_ungated with a reason serves it on the record."""
    old, new = promo.ready_golden("old"), promo.ready_golden("new", gated=False)
    name = "%s-filesystem" % promo.family
    run = run_playbook(play(task("promote old", **args(promo, snapshot=old))), env=lab.env())
    assert run.ok, run.log
    lab.clear_audit()
    refused = run_playbook(
        play(
            task("promote new, never gated", ignore_errors=True, **args(promo, snapshot=new)),
            task(
                "no reason given",
                ignore_errors=True,
                **args(promo, snapshot=new, allow_ungated=True),
            ),
        ),
        env=lab.env(),
    )
    rejected = '{"release_digest":"","run":"r2","verdict":"port_unreachable"}'
    body = {"metadata": {"annotations": {GATE_PASSED: rejected}}}
    promo.custom.patch_namespaced_custom_object(GROUP, VERSION, FS_NS, "volumesnapshots", new, body)
    lab.clear_audit()
    again = run_playbook(
        play(task("promote new, rejected", ignore_errors=True, **args(promo, snapshot=new))), env=lab.env()
    )
    writes = lab.mutating_requests()
    assert refused.ok and again.ok, refused.log + again.log
    msg = refused["promote new, never gated"]["msg"]
    assert msg.startswith(
        "VolumeSnapshot %s/%s: refusing to serve it through GoldenImageSelection" % (FS_NS, new)
    )
    assert "no clone gate ever recorded a pass for it (annotation %s)" % GATE_PASSED in msg
    assert "allow_ungated: true and ungated_reason" in msg and refused["promote new, never gated"]["refused"]
    assert "no reason was given" in refused["no reason given"]["msg"]
    assert "verdict recorded for it is port_unreachable" in again["promote new, rejected"]["msg"]
    assert writes == []
    assert run["promote old"]["gate_passed"]["verdict"] == "passed"

    allowed = run_playbook(
        play(
            task(
                "promote new, ungated on purpose",
                **args(
                    promo, snapshot=new, allow_ungated=True, ungated_reason="hotfix CHG-1", ungated_by="ops"
                ),
            ),
            task("roll back to old", **args(promo, rollback=True)),
        ),
        env=lab.env(),
    )
    assert allowed.ok, allowed.log
    forced = allowed["promote new, ungated on purpose"]
    assert forced["changed"] is True and forced["gate_passed"] is None
    assert forced["ungated"]["by"] == "ops" and forced["ungated"]["why"] == "hotfix CHG-1"
    notes = promo.get_snapshot(FS_NS, new)["metadata"]["annotations"]
    assert '"why":"hotfix CHG-1"' in notes["goldenimage.pipeline/ungated"]
    assert allowed["roll back to old"]["selected"]["snapshot"] == old
    assert promo.selection_obj(name)["spec"]["snapshotName"] == old


@pytest.mark.lab_only
def test_check_mode_and_every_refusal_send_no_mutating_request(lab, promo):
    good = promo.ready_golden("good")
    other = promo.ready_golden("other", family="%s-arch" % promo.prefix)
    blockish = "%s-blockish" % promo.prefix
    promo.snapshot(
        FS_NS,
        blockish,
        promo.disk,
        labels={"kube-dc.com/golden-os": promo.family, "kube-dc.com/golden-mode": "Block"},
        annotations={
            "kube-dc.com/os-family-id": promo.family,
            "kube-dc.com/os-name": "Debian",
            "kube-dc.com/golden-mode": "Block",
        },
    )
    unready = "%s-unready" % promo.prefix
    held = "%s-held" % promo.prefix
    promo.selection("%s-one" % promo.prefix, held, "Filesystem", good)
    promo.selection("%s-two" % promo.prefix, held, "filesystem", other)
    lab.faults.set_object("VolumeSnapshot/%s/%s" % (FS_NS, unready), "stuck")
    try:
        promo.golden(unready, promo.disk, promo.family)
        lab.clear_audit()
        run = run_playbook(
            play(
                task("predict", check=True, diff=True, **args(promo, snapshot=good)),
                task("predict label", check=True, **args(promo, snapshot=good, method="label")),
                task("missing", ignore_errors=True, **args(promo, snapshot="%s-nope" % promo.prefix)),
                task("unready", ignore_errors=True, **args(promo, snapshot=unready)),
                task("wrong family", ignore_errors=True, **args(promo, snapshot=other)),
                task("wrong mode", ignore_errors=True, **args(promo, snapshot=blockish)),
                task("nothing to roll back", ignore_errors=True, **args(promo, rollback=True)),
                task(
                    "no label to roll back", ignore_errors=True, **args(promo, rollback=True, method="label")
                ),
                task("conflict", ignore_errors=True, family=held, snapshot=good),
                task(
                    "label under a selection", ignore_errors=True, family=held, snapshot=good, method="label"
                ),
            ),
            env=lab.env(),
        )
        writes = lab.mutating_requests()
    finally:
        lab.faults.set_object("VolumeSnapshot/%s/%s" % (FS_NS, unready), None)
    assert run.ok, run.log
    assert writes == []
    assert run["predict"]["changed"] is True
    assert run["predict"]["diff"]["after"]["metadata"]["name"] == "%s-filesystem" % promo.family
    assert run["predict label"]["changed"] is True
    assert run["predict label"]["labels"] == {"removed": [], "added": good}
    assert promo.selection_obj("%s-filesystem" % promo.family) is None
    assert "kube-dc.com/golden-active" not in promo.get_snapshot(FS_NS, good)["metadata"]["labels"]

    failed = [name for name in run.task_names() if not name.startswith("predict")]
    assert all(run.entry(name)["status"] == "ignored" for name in failed)
    assert all(run[name]["changed"] is False for name in failed)
    assert "VolumeSnapshot golden-images/%s-nope not found" % promo.prefix in run["missing"]["msg"]
    assert "writing nothing (fail closed, no sibling is picked)" in run["missing"]["msg"]
    assert "not Ready" in run["unready"]["msg"]
    assert "family is %s-arch, expected %s" % (promo.prefix, promo.family) in run["wrong family"]["msg"]
    assert "mode is Block, expected Filesystem" in run["wrong mode"]["msg"]
    assert (
        "no GoldenImageSelection governs %s/Filesystem" % promo.family in run["nothing to roll back"]["msg"]
    )
    assert "no single active golden" in run["no label to roll back"]["msg"]
    conflict = run["conflict"]["msg"]
    assert conflict.startswith("refusing to write: 2 GoldenImageSelections govern %s/Filesystem" % held)
    assert "golden-images/%s-one names %s" % (promo.prefix, good) in conflict
    assert "golden-images/%s-two names %s" % (promo.prefix, other) in conflict
    assert "the label has no effect" in run["label under a selection"]["msg"]


def test_conflict_is_held_casing_is_normalized_and_idle_selections_reported(lab, promo):
    old, new = promo.ready_golden("old"), promo.ready_golden("new")
    project = promo.project("p1")
    lower, typo = "%s-lower" % promo.prefix, "%s-typo" % promo.prefix
    promo.selection(lower, promo.family, "filesystem", old)
    promo.selection(typo, promo.family, "fs", new)
    promo.wait_seeded(project, old)
    run = run_playbook(
        play(task("promote", diff=True, **args(promo, snapshot=new, verify_projects=True))), env=lab.env()
    )
    assert run.ok, run.log
    promoted = run["promote"]
    assert promoted["selected"]["selection"] == "%s/%s" % (FS_NS, lower)  # the governing one, not a new one
    assert promoted["diff"]["before"]["spec"]["mode"] == "filesystem"
    assert promoted["diff"]["after"]["spec"]["mode"] == "Filesystem"
    assert promoted["governs_nothing"][0]["name"] == typo
    assert "governs nothing" in promoted["governs_nothing"][0]["message"]
    assert any("%s governs nothing" % typo in w for w in promoted.get("warnings", []))
    assert promoted["projects"][0]["match"] is True
    assert promo.selection_obj("%s-filesystem" % promo.family) is None
    assert promo.wait_selection_status(typo, False)

    # A second selection naming another snapshot: the seeder holds the family, and so do we.
    rival = "%s-rival" % promo.prefix
    promo.selection(rival, promo.family, "Filesystem", old)
    assert "conflicting GoldenImageSelections" in promo.wait_selection_status(rival, False)["message"]
    deadline = time.monotonic() + 10
    while not promo.events("GoldenSelectionConflict") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert promo.events("GoldenSelectionConflict")
    held = run_playbook(
        play(task("promote old", ignore_errors=True, **args(promo, snapshot=old))), env=lab.env()
    )
    assert held.ok, held.log
    refused = held["promote old"]
    assert "%s names %s" % (lower, new) in refused["msg"] and "%s names %s" % (rival, old) in refused["msg"]
    assert refused["conflicts"][0]["type"] == "two_selections"
    assert promo.selection_obj(lower)["spec"]["snapshotName"] == new
    assert promo.seeded_from(project) == "%s/%s" % (FS_NS, new)  # projects keep what they have


def test_label_path_zero_active_is_silent_and_caught(lab, promo):
    promo.ready_golden("a")
    promo.ready_golden("b")
    first, intended = promo.listed_goldens()
    project = promo.project("p1")
    # Neither labelled: the seeder takes the API's first, and says nothing.
    promo.wait_seeded(project, first)
    assert promo.events("ActiveGoldenConflict") == []
    label = args(promo, method="label", verify_projects=True)
    run = run_playbook(
        play(
            task("inspect", check=True, **dict(label, snapshot=intended)),
            task("promote", diff=True, **dict(label, snapshot=intended)),
            task("again", **dict(label, snapshot=intended)),
            task("swap", **dict(label, snapshot=first)),
            task("roll back", **dict(label, rollback=True)),
        ),
        env=lab.env(),
    )
    assert run.ok, run.log
    inspect = run["inspect"]
    assert [c["type"] for c in inspect["conflicts"]] == ["zero_active"]
    assert "arbitrary and silent" in inspect["conflicts"][0]["message"]
    assert inspect["previous"] == {"snapshot": first, "release_digest": None, "path": "label"}
    assert inspect["projects"][0]["match"] is False
    assert inspect["projects"][0]["handle"] == promo.handle(first)
    assert inspect["unresolved"] == [project]

    promoted = run["promote"]
    assert promoted["labels"] == {"removed": [], "added": intended}
    assert promoted["window_seconds"] == 0.0
    assert "neither intermediate state is safe" in promoted["explanation"]
    assert any("Prefer method: selection" in w for w in promoted["warnings"])
    assert promoted["projects"][0]["match"] is True
    assert promoted["projects"][0]["handle"] == promo.handle(intended)
    assert run["again"]["changed"] is False

    swap = run["swap"]
    assert swap["labels"] == {"removed": [intended], "added": first}
    assert swap["window_seconds"] > 0
    assert swap["conflicts"] == []
    back = run["roll back"]
    assert back["labels"] == {"removed": [first], "added": intended}
    assert back["projects"][0]["handle"] == promo.handle(intended)
    active = [
        n
        for n in (first, intended)
        if promo.get_snapshot(FS_NS, n)["metadata"]["labels"].get("kube-dc.com/golden-active")
    ]
    assert active == [intended]


def test_label_path_two_active_is_a_conflict_and_resolved(lab, promo):
    promo.ready_golden("a", active=True)
    promo.ready_golden("b", active=True)
    first, intended = promo.listed_goldens()
    project = promo.project("p1")
    promo.wait_seeded(project, first)
    deadline = time.monotonic() + 10
    while not promo.events("ActiveGoldenConflict") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert promo.events("ActiveGoldenConflict")  # logged, and seeding went ahead anyway
    label = args(promo, method="label", snapshot=intended, verify_projects=True)
    run = run_playbook(play(task("inspect", check=True, **label), task("promote", **label)), env=lab.env())
    assert run.ok, run.log
    inspect = run["inspect"]
    assert inspect["conflicts"][0]["type"] == "two_active"
    assert inspect["conflicts"][0]["names"] == [first, intended]
    assert inspect["projects"][0]["match"] is False
    promoted = run["promote"]
    assert promoted["labels"] == {"removed": [first], "added": None}
    assert promoted["window_seconds"] == 0.0
    assert promoted["projects"][0]["match"] is True
    assert "kube-dc.com/golden-active" not in promo.get_snapshot(FS_NS, first)["metadata"]["labels"]


@pytest.mark.lab_only
def test_verification_times_out_naming_the_projects_that_did_not_resolve(lab, promo):
    old, new = promo.ready_golden("old"), promo.ready_golden("new")
    fine, stuck = promo.project("fine"), promo.project("stuck")
    promo.selection("%s-filesystem" % promo.family, promo.family, "Filesystem", old)
    promo.wait_seeded(fine, old)
    promo.wait_seeded(stuck, old)
    # The snapshot controller ignores the stuck project's copy: the seeder re-points it, nothing binds it.
    key = "VolumeSnapshot/%s/golden-%s" % (stuck, promo.family)
    lab.faults.set_object(key, "stuck")
    try:
        wrote = run_playbook(play(task("promote", **args(promo, snapshot=new))), env=lab.env())
        assert wrote.ok, wrote.log
        assert wrote["promote"]["changed"] is True
        # The fine project resolves before the verification starts: how long the seeder takes on a
        # loaded machine decides nothing, only that the stuck project never resolves.
        promo.wait_seeded(fine, new)
        run = run_playbook(
            play(
                task(
                    "verify",
                    ignore_errors=True,
                    **args(promo, snapshot=new, verify_projects=True, verify_timeout=15, verify_interval=1),
                )
            ),
            env=lab.env(),
        )
    finally:
        lab.faults.set_object(key, None)
    assert run.ok, run.log
    result = run["verify"]
    assert run.entry("verify")["status"] == "ignored"
    assert result["changed"] is False  # the selection already names it; only the projects lag
    assert result["unresolved"] == [stuck]
    assert result["msg"].startswith("1 project(s) did not resolve to %s" % promo.handle(new))
    assert "%s: " % stuck in result["msg"] and fine not in result["msg"]
    by_ns = {p["namespace"]: p for p in result["projects"]}
    assert by_ns[fine]["match"] is True
    assert by_ns[stuck]["match"] is False
