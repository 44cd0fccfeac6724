"""The serving truth and its guards, as examples and as a stateful property test.

The state machine drives the pure rules in the order the modules apply them (golden_snapshot publishes,
clone_gate records, golden_selection promotes and rolls back, golden_retention and golden_snapshot delete,
the seeder copies, worker_image deletes a worker golden) over any sequence of steps, and checks after
every step what the guards promise: nothing served, staged, recorded as a rollback target, cloned or
declared by a pool is deleted; nothing is served without a recorded gate pass or a recorded override; no
family is left conflicted by a step that reported success.
"""

import json

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import (
    gate,
    golden,
    retention,
    selection,
    serving,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.workers import worker
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

FAMILY = "debian-12"
FS = "golden-images"
BLOCK_NS = "golden-images-block"
PROJECTS = ("p1", "p2")


def digest(n):
    return "sha256:%064x" % (n + 1)


def golden_name(n):
    return "golden-%s-2026%02d%02d-%s" % (FAMILY, 1 + n // 28, 1 + n % 28, digest(n)[7:19])


def make_golden(n, **annotations):
    name = golden_name(n)
    notes = {
        "kube-dc.com/os-family-id": FAMILY,
        "kube-dc.com/os-name": "Debian 12",
        "kube-dc.com/golden-mode": "Filesystem",
        serving.RELEASE_DIGEST: digest(n),
    }
    notes.update(annotations)
    return {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshot",
        "metadata": {
            "name": name,
            "namespace": FS,
            "labels": {"kube-dc.com/golden-os": FAMILY, "kube-dc.com/golden-mode": "Filesystem"},
            "annotations": notes,
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "status": {"readyToUse": True, "boundVolumeSnapshotContentName": "c-" + name},
    }


def content(name, handle):
    return {"metadata": {"name": name}, "spec": {"source": {"snapshotHandle": handle}}}


def project_copy(project, handle):
    return {
        "metadata": {
            "name": "golden-" + FAMILY,
            "namespace": project,
            "uid": "u-" + project,
            "labels": {"kube-dc.com/golden-os": FAMILY, "kube-dc.com/golden-mode": "Filesystem"},
        },
        "status": {"readyToUse": True, "boundVolumeSnapshotContentName": "pc-%s-%s" % (project, handle)},
    }


def annotate(obj, key, value):
    obj["metadata"].setdefault("annotations", {})[key] = value


def passed(obj, verdict="passed", digest_of=None, candidate=None):
    """What clone_gate writes on a golden it gated (gate.gate_record, as JSON)."""
    name = obj["metadata"]["name"]
    record = gate.gate_record(
        {"verdict": verdict, "proof": "guest-agent"},
        candidate or "%s/%s" % (FS, name),
        digest_of or golden.release_digest(obj),
        "h-" + name,
        "r1",
        "T",
        "p1",
    )
    annotate(obj, serving.GATE_RECORD, json.dumps(record))
    return obj


class World:
    """What the cluster holds, as plain objects (the observation every guard reads)."""

    def __init__(self):
        self.goldens = {}
        self.selections = {}
        self.copies = {}
        self.clones = {}
        self.next = 0

    def observed(self):
        contents = [content("c-" + n, "h-" + n) for n in self.goldens]
        contents += [content("pc-%s-%s" % (p, h), h) for p, h in self.copies.items()]
        return {
            "snapshots": list(self.goldens.values()) + [project_copy(p, h) for p, h in self.copies.items()],
            "contents": contents,
            "pvcs": [
                {
                    "metadata": {"name": c, "namespace": FS},
                    "spec": {
                        "dataSource": {
                            "apiGroup": "snapshot.storage.k8s.io",
                            "kind": "VolumeSnapshot",
                            "name": g,
                        }
                    },
                }
                for c, g in self.clones.items()
            ],
            "projects": [{"metadata": {"name": p}} for p in PROJECTS],
            "selections": list(self.selections.values()),
            "datavolumes": [],
        }

    def truth(self):
        return serving.truth(self.observed(), FAMILY, "Filesystem")


# Examples ----------------------------------------------------------------------------------------


def world_with(*numbers, selected=None, previous=None):
    w = World()
    for n in numbers:
        w.goldens[golden_name(n)] = passed(make_golden(n))
    if selected is not None:
        sel = selection.selection_definition(
            "debian-12-filesystem", FS, FAMILY, "Filesystem", golden_name(selected)
        )
        if previous is not None:
            annotate(sel, selection.PREVIOUS_SNAPSHOT, golden_name(previous))
        w.selections["debian-12-filesystem"] = sel
    return w


def test_the_truth_names_served_staged_and_rollback_target_from_one_observation():
    w = world_with(0, 1, 2, 3, selected=1, previous=0)
    w.copies = {"p1": "h-" + golden_name(1), "p2": "h-" + golden_name(1)}
    state = w.truth()
    assert state["served"] == golden_name(1) and state["path"] == "selection" and not state["held"]
    assert state["staged"] == [golden_name(3), golden_name(2)]
    assert state["rollback_target"] == golden_name(0)
    assert state["projects_hold"] == {golden_name(1): 2}
    assert serving.keep_reasons(state, golden_name(1))[0][0] == serving.SERVED
    assert serving.keep_reasons(state, golden_name(0))[0][0] == serving.ROLLBACK
    assert serving.keep_reasons(state, golden_name(3))[0][0] == serving.STAGED


def test_a_candidate_published_after_the_served_golden_is_staged_whatever_its_build_date():
    w = world_with(2, 5, selected=5)
    late = make_golden(1)  # an older build date, published after golden 5
    late["metadata"]["creationTimestamp"] = "2026-03-01T00:00:00Z"
    w.goldens[golden_name(1)] = late
    state = w.truth()
    assert state["staged"] == [golden_name(1)]
    assert serving.STAGED in [reason for reason, _why in serving.keep_reasons(state, golden_name(1))]
    assert serving.keep_reasons(state, golden_name(2)) == []


def test_what_is_served_without_intent_is_a_conflict_of_the_report():
    w = world_with(0, selected=0)
    assert serving.unintended(w.truth()) is None
    # No promotion: the seeder serves the only golden by list order (a deleted hold, a hand-made snapshot).
    w.selections.clear()
    found = serving.unintended(w.truth())
    assert found["type"] == serving.SERVED_UNINTENDED and "served by list order" in found["message"]
    # Selected on purpose, but neither gated nor overridden.
    w = world_with(0, selected=0)
    del w.goldens[golden_name(0)]["metadata"]["annotations"][serving.GATE_RECORD]
    assert "neither a gate pass nor a recorded override" in serving.unintended(w.truth())["message"]


def test_a_selection_in_the_block_namespace_governs_too():
    """golden_selection may write a selection anywhere the consumer reads; retention used to read one."""
    w = world_with(0, 1)
    sel = selection.selection_definition("x", BLOCK_NS, FAMILY, "Filesystem", golden_name(0))
    w.selections["x"] = sel
    state = w.truth()
    assert state["served"] == golden_name(0)
    planned = retention.plan(w.observed(), FAMILY, "Filesystem", 1)
    assert [e["name"] for e in planned["delete"]] == []
    assert serving.STAGED in next(e for e in planned["kept"] if e["name"] == golden_name(1))["reasons"]


def test_force_withdraws_a_candidate_but_never_what_is_served_recorded_or_cloned():
    w = world_with(0, 1, 2, selected=1, previous=0)
    w.clones["vm-root"] = golden_name(2)
    state = w.truth()
    for n, why in ((1, "served"), (0, "rollback target"), (2, "restores from it")):
        refusal = serving.delete_refusal(state, golden_name(n), "VolumeSnapshot x", force=True)
        assert refusal is not None and why in refusal.msg, refusal
    del w.clones["vm-root"]
    state = w.truth()
    assert serving.delete_refusal(state, golden_name(2), "x", force=False) is not None
    assert serving.delete_refusal(state, golden_name(2), "x", force=True) is None


def test_a_family_published_for_the_first_time_is_held_until_promoted():
    w = World()
    state = w.truth()
    assert serving.publish_plan(state, selection_kind_served=True) == "hold"
    with pytest.raises(Refusal, match="first golden: the cluster serves no GoldenImageSelection"):
        serving.publish_plan(state, selection_kind_served=False)
    w.selections["h"] = serving.holding_selection(FAMILY, "Filesystem")
    w.goldens[golden_name(0)] = make_golden(0)
    state = w.truth()
    assert state["served"] is None and state["held"] and "first promotion" in state["why"]
    assert state["staged"] == [golden_name(0)]
    assert serving.publish_plan(state, True) == "none"


def test_the_label_path_with_nothing_active_refuses_a_new_golden():
    w = world_with(0)  # the seeder serves it silently: it is the only one
    state = w.truth()
    assert state["path"] == "label" and state["served"] == golden_name(0)
    with pytest.raises(Refusal, match="could be served by list order"):
        serving.publish_plan(state, True)
    annotate(w.goldens[golden_name(0)], "x", "y")
    w.goldens[golden_name(0)]["metadata"]["labels"]["kube-dc.com/golden-active"] = "true"
    assert serving.publish_plan(w.truth(), False) == "none"


@pytest.mark.parametrize(
    "record,why",
    [
        (None, "no clone gate ever recorded a pass"),
        ("no_boot", "the clone gate's verdict recorded for it is no_boot"),
        ("other-digest", "its recorded gate pass is for release digest sha256:"),
        ("garbage", "no clone gate ever recorded a pass"),
        ("other-golden", "its recorded gate pass names golden golden-images/other"),
        ("other-handle", "its recorded gate pass is for storage snapshot h-"),
    ],
)
def test_only_the_gates_pass_for_the_goldens_own_digest_lets_it_serve(record, why):
    obj = make_golden(0)
    if record == "no_boot":
        passed(obj, verdict="no_boot")
    elif record == "other-digest":
        passed(obj, digest_of=digest(9))
    elif record == "garbage":
        annotate(obj, serving.GATE_RECORD, "[1]")
    elif record == "other-golden":
        passed(obj, candidate="golden-images/other")  # copied from another golden's record
    handle = "h-elsewhere" if record == "other-handle" else None
    if record == "other-handle":
        passed(obj)
    with pytest.raises(Refusal) as refused:
        serving.refuse_ungated(
            obj, golden_name(0), "GoldenImageSelection golden-images/s", "Filesystem", handle=handle
        )
    assert why in refused.value.msg and "allow_ungated: true and ungated_reason" in refused.value.msg
    for blank in (None, "", "   "):
        with pytest.raises(Refusal, match=r"option allow_ungated: .* no reason was given"):
            serving.refuse_ungated(obj, golden_name(0), "s", "Filesystem", True, blank, handle)
    assert serving.refuse_ungated(obj, golden_name(0), "s", "Filesystem", True, "hotfix", handle) == "ungated"
    assert serving.refuse_ungated(passed(make_golden(0)), golden_name(0), "s", "Filesystem") is None


def test_the_rollback_target_recorded_is_what_the_projects_hold():
    w = world_with(0, 1, 2, selected=2)
    w.copies = {"p1": "h-" + golden_name(1), "p2": "h-" + golden_name(1)}
    assert serving.rollback_previous(w.truth()) == (golden_name(1), digest(1))
    w.copies["p2"] = "h-" + golden_name(0)
    assert serving.rollback_previous(w.truth()) == (golden_name(2), digest(2))


def test_a_declared_pool_of_any_size_keeps_its_worker_golden():
    golden_dv = {"metadata": {"name": "talos-abc-v1-10-0", "namespace": "cozy-public"}}
    pools = [{"name": "md0", "namespace": "tenant-a"}, {"name": "md1", "namespace": "tenant-a"}]
    found = serving.worker_users(
        golden_dv, [], pools, lambda pool: "talos-abc-v1-10-0" if pool["name"] == "md0" else None
    )
    assert [(u["kind"], u["name"]) for u in found] == [("Pool", "md0")]


# Every path that deletes a golden asks the serving truth ------------------------------------------

# Files that send deletes of objects that are never goldens, each with the reason.
NEVER_GOLDENS = {
    "plugins/modules/baked_image.py": "Harvester VirtualMachineImages of a baked stream (their own guard)",
    "plugins/modules/golden_export_job.py": "the export's own Job, Pod, staging object and claims",
    "plugins/module_utils/windows/_export_job.py": "the export Job's own objects (its cleanup)",
    "plugins/module_utils/golden/_clone_gate.py": "the gate's own VM, claim and snapshot copy",
    "plugins/module_utils/repave/_repave_direct.py": "a database VM's root claim, after its checks",
    "plugins/module_utils/disk/_seal_job.py": "the seal Job's own Pod and ConfigMap",
    "plugins/module_utils/bucket/_mirror_transfer.py": "the mirror's own staging object",
    "plugins/module_utils/kube/_kube.py": "the delete primitive itself",
    "plugins/module_utils/s3/_s3.py": "the exposure proof's own canary object under the destination prefix",
    "plugins/module_utils/windows/_export_cli.py": "the export's own staging object, and its key when "
    "the object stored there fails the check right after the export wrote it",
    "plugins/modules/golden_export_object.py": "its own upload, when the probe after it finds it public",
    "plugins/modules/kube_object.py": "refuses any golden outright (objects.check_delete), naming its module",
}
# Files that may delete a golden: each asks the serving truth before it does.
GOLDEN_DELETERS = {
    "plugins/modules/golden_snapshot.py": "serving.delete_refusal",
    "plugins/modules/golden_retention.py": "serving.delete_refusal",
    "plugins/modules/worker_image.py": 'worker.refuse_delete_in_use(dv, observed, self.p["pools"])',
}


def _deleting_files(root):
    import ast
    import pathlib

    found = set()
    for path in sorted(pathlib.Path(root, "plugins").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            if call and node.func.attr in ("delete", "delete_and_wait", "delete_object"):
                found.add(str(path.relative_to(root)))
    return found


def test_every_delete_path_asks_the_serving_truth():
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[4]
    deleting = _deleting_files(root)
    unclassified = deleting - set(NEVER_GOLDENS) - set(GOLDEN_DELETERS)
    assert not unclassified, "a new delete path must ask serving or say why it never deletes a golden: %s" % (
        sorted(unclassified)
    )
    for path, call in GOLDEN_DELETERS.items():
        assert call in (root / path).read_text(), "%s deletes goldens without asking %s" % (path, call)
    objects_py = (root / "plugins/module_utils/kube/objects.py").read_text()
    assert "if guarded or golden.observed_family(current):" in objects_py
    # The worker golden's guard is the serving truth's: its declared pools and its disks.
    assert "serving.worker_users(" in (root / "plugins/module_utils/workers/worker.py").read_text()


# The stateful property test ---------------------------------------------------------------------


SCHEMATIC = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"


def worker_golden(n):
    return worker.golden_name(SCHEMATIC, "v1.%d.0" % n)


def worker_pool(name, golden_dv):
    version = golden_dv.rsplit("-", 1)[1]
    builtin = {"schematicID": SCHEMATIC, "version": version}
    return {"name": name, "namespace": "t", "osImage": {"builtin": builtin}}


def worker_disk(name, golden_dv):
    """A worker disk of pool md0 cloned from ``golden_dv``, as the chart renders it."""
    notes = {worker.GOLDEN_ANNOTATION: golden_dv, worker.POOL_ANNOTATION: "md0"}
    return {
        "kind": "DataVolume",
        "metadata": {"name": name, "namespace": "t", "annotations": notes},
        "spec": {"source": {"pvc": {"namespace": worker.NAMESPACE, "name": golden_dv}}},
    }


class ServingMachine(RuleBasedStateMachine):
    """Any sequence of the collection's steps keeps the guards' promises."""

    def __init__(self):
        super().__init__()
        self.w = World()
        self.pools = {}  # pool -> worker golden it names
        self.worker_goldens = set()
        self.worker_disks = {}  # disk -> [worker golden it was cloned from, whether only its claim is left]
        self.protected = set()
        self.withdrawn = set()
        self.promoted = set()
        self.succeeded = False

    @initialize(start=st.sampled_from(["empty", "label", "selection"]))
    def begin(self, start):
        """Empty; a family on the label path (one golden labelled active, promoted with its gate); or one
        served by a selection, with a gated candidate staged beside it."""
        if start == "empty":
            return
        self.w.goldens[golden_name(0)] = passed(make_golden(0))
        self.promoted.add(golden_name(0))
        if start == "label":
            self.w.goldens[golden_name(0)]["metadata"]["labels"]["kube-dc.com/golden-active"] = "true"
            self.w.next = 1
            return
        sel = selection.selection_definition("debian-12-filesystem", FS, FAMILY, "Filesystem", golden_name(0))
        self.w.selections["debian-12-filesystem"] = sel
        self.w.goldens[golden_name(1)] = passed(make_golden(1))
        self.w.next = 2

    # What must survive the next step, computed the way the guards compute it.
    def snapshot_protection(self):
        """What the next step must not delete, computed here from the world itself, not by the rules under
        test: the golden the consumer serves (selection.resolve_serving is the seeder's rule), every golden
        newer than it (all while nothing is served), every rollback target recorded, every golden cloned,
        every worker golden a declared pool names."""
        goldens = list(self.w.goldens.values())
        served = selection.resolve_serving(goldens, list(self.w.selections.values()), FAMILY, "Filesystem")
        order = sorted(self.w.goldens)  # names sort by date, which is publish order
        served_name = served["snapshot"] if served["snapshot"] in self.w.goldens else None
        keep = {served_name} if served_name else set()
        keep |= {n for n in order if served_name is None or n > served_name}
        recorders = list(self.w.selections.values()) + goldens
        keep |= {selection.recorded_previous(obj)[0] for obj in recorders} - {None}
        keep |= set(self.w.clones.values())
        keep |= {g for g in self.pools.values() if g}
        keep |= {golden for golden, _claim_only in self.worker_disks.values()}
        self.protected = keep & (set(self.w.goldens) | self.worker_goldens)
        self.succeeded = False

    def names(self):
        return sorted(self.w.goldens)

    @rule()
    def publish(self):
        self.snapshot_protection()
        state = self.w.truth()
        try:
            action = serving.publish_plan(state, selection_kind_served=True)
        except Refusal:
            return
        if action == "hold":
            held = serving.holding_selection(FAMILY, "Filesystem")
            self.w.selections[held["metadata"]["name"]] = held
        n = self.w.next
        self.w.next += 1
        self.w.goldens[golden_name(n)] = make_golden(n)
        self.succeeded = True

    @precondition(lambda self: self.w.goldens)
    @rule(data=st.data(), verdict=st.sampled_from(["passed", "no_boot", "port_unreachable"]))
    def gate(self, data, verdict):
        self.snapshot_protection()
        name = data.draw(st.sampled_from(self.names()))
        passed(self.w.goldens[name], verdict=verdict)

    def serve_check(self, name, allow_ungated):
        obj = self.w.goldens.get(name)
        if obj is None or selection.candidate_problems(obj, FAMILY, "Filesystem"):
            return None
        try:
            how = serving.refuse_ungated(
                obj, name, "s", "Filesystem", allow_ungated, "on purpose" if allow_ungated else None
            )
        except Refusal:
            return None
        if how == "ungated":
            annotate(obj, serving.UNGATED, serving.ungated_record("ops", "on purpose", "T"))
        self.promoted.add(name)
        return obj

    @precondition(lambda self: self.w.goldens)
    @rule(data=st.data(), allow_ungated=st.booleans())
    def promote_by_selection(self, data, allow_ungated):
        self.snapshot_protection()
        name = data.draw(st.sampled_from(self.names()))
        state = self.w.truth()
        sels = selection.selections_for(list(self.w.selections.values()), FAMILY, "Filesystem")
        try:
            selection.governing_selection(sels, FAMILY, "Filesystem")
        except selection.SelectionError:
            return
        if self.serve_check(name, allow_ungated) is None:
            return
        previous = serving.rollback_previous(state)
        previous = previous if previous[0] and previous[0] != name else None
        if not sels:
            body = selection.selection_definition(
                "debian-12-filesystem", FS, FAMILY, "Filesystem", name, None, previous
            )
            self.w.selections[body["metadata"]["name"]] = body
        for sel in sels:  # every governing selection moves in the one run
            patch = selection.plan_selection(sel, FAMILY, "Filesystem", name, None, previous)
            if patch:
                sel["spec"].update({k: v for k, v in patch.get("spec", {}).items() if v is not None})
                for k, v in (patch.get("metadata") or {}).get("annotations", {}).items():
                    sel["metadata"].setdefault("annotations", {})[k] = v
        self.succeeded = True

    @precondition(lambda self: self.w.goldens)
    @rule(data=st.data(), allow_ungated=st.booleans())
    def promote_by_label(self, data, allow_ungated):
        self.snapshot_protection()
        name = data.draw(st.sampled_from(self.names()))
        goldens = list(self.w.goldens.values())
        if selection.selections_for(list(self.w.selections.values()), FAMILY, "Filesystem"):
            return  # refused: a selection governs, the label has no effect
        if self.serve_check(name, allow_ungated) is None:
            return
        previous = serving.rollback_previous(self.w.truth())[0]
        plan = selection.label_plan(goldens, FAMILY, "Filesystem", name)
        for other in plan["remove"]:
            self.w.goldens[other]["metadata"]["labels"].pop("kube-dc.com/golden-active", None)
        if plan["add"]:
            self.w.goldens[name]["metadata"]["labels"]["kube-dc.com/golden-active"] = "true"
            if previous and previous != name:
                annotate(self.w.goldens[name], selection.PREVIOUS_SNAPSHOT, previous)
        self.succeeded = True

    @precondition(lambda self: self.w.truth()["served"] and self.w.truth()["path"] == "selection")
    @rule()
    def second_selection(self):
        """An old run left a second selection, in the other golden namespace, agreeing with the first: a
        promotion that moved only one of them would leave the family conflicted."""
        self.snapshot_protection()
        body = selection.selection_definition(
            "second", BLOCK_NS, FAMILY, "Filesystem", self.w.truth()["served"]
        )
        self.w.selections["second"] = body

    @rule(allow_ungated=st.booleans())
    def rollback(self, allow_ungated):
        self.snapshot_protection()
        sels = selection.selections_for(list(self.w.selections.values()), FAMILY, "Filesystem")
        try:
            existing = selection.governing_selection(sels, FAMILY, "Filesystem")
            plan = selection.rollback_plan(
                existing, "s", (existing or {}).get("spec", {}).get("snapshotName")
            )
        except (Refusal, selection.SelectionError):
            return
        if plan["noop"] or self.serve_check(plan["target"], allow_ungated) is None:
            return
        for sel in sels:
            patch = selection.mark_change(
                selection.plan_selection(sel, FAMILY, "Filesystem", plan["target"], plan["digest"]), sel, True
            )
            sel["spec"]["snapshotName"] = plan["target"]
            for k, v in (patch.get("metadata") or {}).get("annotations", {}).items():
                sel["metadata"].setdefault("annotations", {})[k] = v
        self.succeeded = True

    @rule(keep=st.integers(min_value=1, max_value=4))
    def retention(self, keep):
        self.snapshot_protection()
        planned = retention.plan(self.w.observed(), FAMILY, "Filesystem", keep)
        for entry in planned["delete"]:
            # golden_retention asks the guard again right before each delete
            if serving.delete_refusal(self.w.truth(), entry["name"], "x") is None:
                del self.w.goldens[entry["name"]]

    @precondition(lambda self: self.w.goldens)
    @rule(data=st.data(), force=st.booleans())
    def delete(self, data, force):
        self.snapshot_protection()
        name = data.draw(st.sampled_from(self.names()))
        state = self.w.truth()
        if serving.delete_refusal(state, name, "x", force) is None:
            if force and serving.keep_reasons(state, name):
                self.withdrawn.add(name)
            del self.w.goldens[name]

    @precondition(lambda self: self.w.goldens)
    @rule(data=st.data())
    def clone(self, data):
        self.snapshot_protection()
        self.w.clones["c%d" % len(self.w.clones)] = data.draw(st.sampled_from(self.names()))

    @precondition(lambda self: self.w.clones)
    @rule()
    def clone_done(self):
        self.snapshot_protection()
        self.w.clones.pop(sorted(self.w.clones)[0])

    @rule()
    def seeder(self):
        """Kube-DC's seeder: every project copies what the truth says is served, unless held."""
        self.snapshot_protection()
        state = self.w.truth()
        if state["served"] and not state["held"]:
            for p in PROJECTS:
                self.w.copies[p] = "h-" + state["served"]

    # Worker goldens and pools (Cozystack): a declared pool keeps its golden whatever its size, and so does
    # every disk cloned from it, a DataVolume or a claim whose DataVolume CDI garbage-collected.
    @rule(n=st.integers(min_value=0, max_value=2))
    def worker_import(self, n):
        self.snapshot_protection()
        self.worker_goldens.add(worker_golden(n))

    @precondition(lambda self: self.worker_goldens)
    @rule(data=st.data())
    def pool_declare(self, data):
        self.snapshot_protection()
        self.pools["md%d" % len(self.pools)] = data.draw(st.sampled_from(sorted(self.worker_goldens)))

    @precondition(lambda self: self.pools)
    @rule()
    def pool_undeclare(self):
        self.snapshot_protection()
        self.pools.pop(sorted(self.pools)[0])

    @precondition(lambda self: self.worker_goldens)
    @rule(data=st.data(), claim_only=st.booleans())
    def worker_clone(self, data, claim_only):
        """A worker disk cloned from a golden; made outside the chart it may be a claim from the start."""
        self.snapshot_protection()
        golden_dv = data.draw(st.sampled_from(sorted(self.worker_goldens)))
        self.worker_disks["disk-%d" % len(self.worker_disks)] = [golden_dv, claim_only]

    @precondition(lambda self: self.worker_disks)
    @rule(data=st.data())
    def cdi_collects_a_datavolume(self, data):
        """CDI garbage-collects a finished DataVolume: its claim stays, annotated with the golden."""
        self.snapshot_protection()
        self.worker_disks[data.draw(st.sampled_from(sorted(self.worker_disks)))][1] = True

    @precondition(lambda self: self.worker_disks)
    @rule(data=st.data())
    def worker_disk_delete(self, data):
        self.snapshot_protection()
        self.worker_disks.pop(data.draw(st.sampled_from(sorted(self.worker_disks))))

    @precondition(lambda self: self.worker_goldens)
    @rule(data=st.data())
    def worker_delete(self, data):
        """worker_image state=absent: the guard asks worker.refuse_delete_in_use with what is listed."""
        self.snapshot_protection()
        name = data.draw(st.sampled_from(sorted(self.worker_goldens)))
        pools = [worker_pool(p, g) for p, g in self.pools.items()]
        observed = {"datavolumes": [], "pvcs": []}
        for disk, (golden_dv, claim_only) in self.worker_disks.items():
            made = worker_disk(disk, golden_dv)
            if not claim_only:
                observed["datavolumes"].append(made)
            observed["pvcs"].append(dict(made, kind="PersistentVolumeClaim", spec={}))
        golden_dv = {"kind": "DataVolume", "metadata": {"name": name, "namespace": worker.NAMESPACE}}
        try:
            worker.refuse_delete_in_use(golden_dv, observed, pools)
        except Refusal:
            return
        self.worker_goldens.discard(name)

    @precondition(lambda self: self.pools)
    @rule()
    def worker_render(self):
        """A pool's next scale-up renders a clone of its golden: the golden must still be there."""
        for name in self.pools.values():
            assert name in self.worker_goldens, "pool names %s, which was deleted" % name

    # Invariants ---------------------------------------------------------------------------------

    @invariant()
    def nothing_protected_was_deleted(self):
        present = set(self.w.goldens) | self.worker_goldens
        lost = self.protected - present - self.withdrawn
        assert not lost, "deleted although protected: %s" % sorted(lost)

    @invariant()
    def nothing_served_without_intent(self):
        """Publishing never serves: only a promotion that found a gate pass (or recorded an override) does."""
        served = self.w.truth()["served"]
        assert served is None or served in self.promoted, "%s is served but was never promoted" % served

    @invariant()
    def no_conflict_after_success(self):
        if self.succeeded:
            assert not self.w.truth()["conflicts"], self.w.truth()["conflicts"]


ServingMachine.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_serving_state_machine = ServingMachine.TestCase


def test_only_what_serves_on_purpose_skips_the_gate_on_a_rerun():
    w = world_with(0, 1)  # the label path, nothing active: the seeder serves by list order
    state = w.truth()
    assert state["served"] == golden_name(0) and not serving.serves_on_purpose(state, golden_name(0))
    w.goldens[golden_name(0)]["metadata"]["labels"]["kube-dc.com/golden-active"] = "true"
    assert serving.serves_on_purpose(w.truth(), golden_name(0))
    w = world_with(0, 1, selected=1)
    assert serving.serves_on_purpose(w.truth(), golden_name(1))
    assert not serving.serves_on_purpose(w.truth(), golden_name(0))
