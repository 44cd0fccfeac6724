"""The runners of golden_snapshot, golden_selection, golden_info and clone_gate, called with parameters
and an observed state: they return a result or raise a PipelineError, and never exit."""

from __future__ import annotations

import copy
import json

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import (
    _clone_gate,
    gate,
    selection,
    serving,
)
from ansible_collections.goldenimage.pipeline.plugins.modules import (
    clone_gate,
    golden_info,
    golden_selection,
    golden_snapshot,
)

from tests.unit.plugins.modules.support import list_each

# An in-memory stand-in for the Kubernetes adapter (KubeModule): objects as dicts, every write recorded.


def defaults(argument_spec, **params):
    """Module parameters as AnsibleModule would fill them from ``argument_spec`` and ``params``."""
    values = {name: spec.get("default") for name, spec in argument_spec.items()}
    values.update(params)
    return values


class FakeKube:
    list_each = list_each

    def __init__(self, params, objects=(), served=None, check_mode=False):
        self.params = params
        self.check_mode = check_mode
        self._diff = False
        self.objects = [copy.deepcopy(o) for o in objects]
        self.writes = []
        self.warnings = []
        self._served = served

    @staticmethod
    def _key(obj):
        meta = obj.get("metadata") or {}
        return obj.get("kind"), meta.get("namespace"), meta.get("name")

    def warn(self, text):
        self.warnings.append(text)

    def served(self, api_version, kind):
        return True if self._served is None else kind in self._served

    def get(self, api_version, kind, name, namespace=None):
        for obj in self.objects:
            if self._key(obj) in ((kind, namespace, name), (kind, None, name)):
                return copy.deepcopy(obj)
        return None

    fetch = get

    def list(self, api_version, kind, namespace=None, label_selector=None, field_selector=None):
        found = []
        for obj in self.objects:
            if obj.get("kind") != kind or (
                namespace and (obj.get("metadata") or {}).get("namespace") != namespace
            ):
                continue
            labels = (obj.get("metadata") or {}).get("labels") or {}
            if label_selector and not all(
                _matches(labels, term) for term in label_selector.split(",") if term
            ):
                continue
            found.append(copy.deepcopy(obj))
        return found

    def create(self, definition):
        self.writes.append(("create",) + self._key(definition))
        if not self.check_mode:
            self.objects.append(copy.deepcopy(definition))
        return copy.deepcopy(definition)

    def patch(self, api_version, kind, name, namespace, patch, before=None):
        self.writes.append(("patch", kind, namespace, name))
        return before, True

    def delete(self, api_version, kind, name, namespace=None, before=None):
        self.writes.append(("delete", kind, namespace, name))
        self.objects = [o for o in self.objects if self._key(o) != (kind, namespace, name)]
        return True

    def wait(
        self, api_version, kind, name, namespace, predicate, describe, pending, timeout, sleep, progress=None
    ):
        return self.get(api_version, kind, name, namespace), 0.0


def _matches(labels, term):
    if term.startswith("!"):
        return term[1:] not in labels
    if "=" in term:
        key, value = term.split("=", 1)
        return labels.get(key) == value
    return term in labels


FS = "golden-images"
FAMILY = "deb"


def golden(name, content=None, **annotations):
    return {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshot",
        "metadata": {
            "name": name,
            "namespace": FS,
            "labels": {"kube-dc.com/golden-os": FAMILY, "kube-dc.com/golden-mode": "Filesystem"},
            "annotations": dict(
                {
                    "kube-dc.com/os-family-id": FAMILY,
                    "kube-dc.com/os-name": "Debian",
                    "kube-dc.com/golden-mode": "Filesystem",
                },
                **annotations,
            ),
        },
        "spec": {"source": {"persistentVolumeClaimName": "disk"}},
        "status": {
            "readyToUse": True,
            "restoreSize": "1Gi",
            "boundVolumeSnapshotContentName": content or "c-" + name,
        },
    }


def content(name, handle):
    return {
        "kind": "VolumeSnapshotContent",
        "metadata": {"name": name},
        "spec": {"source": {"snapshotHandle": handle}},
    }


def claim(namespace, name, source):
    return {
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "dataSource": {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": source}
        },
    }


def sel(snapshot, **annotations):
    return {
        "apiVersion": selection.SELECTION_API_VERSION,
        "kind": selection.SELECTION_KIND,
        "metadata": {"name": "deb-filesystem", "namespace": FS, "annotations": annotations},
        "spec": {"family": FAMILY, "mode": "Filesystem", "snapshotName": snapshot},
    }


# golden_snapshot ------------------------------------------------------------------------------------


def snapshot_params(**params):
    return defaults(golden_snapshot.argument_spec(), **params)


@pytest.mark.parametrize("option,value", [("wait_timeout", 0), ("wait_timeout", -1), ("wait_sleep", 0)])
def test_golden_snapshot_refuses_a_duration_that_is_not_one_before_any_read(option, value):
    kube = FakeKube(
        snapshot_params(family=FAMILY, os_name="Debian", name="g1", pvc="disk", **{option: value})
    )
    with pytest.raises(Refusal, match="^option %s: %s is not a duration" % (option, value)):
        golden_snapshot.Golden(kube).run()
    assert kube.writes == []


def test_golden_snapshot_absent_refuses_a_golden_a_clone_restores_from():
    kube = FakeKube(
        snapshot_params(state="absent", name="g1", force=True),
        [golden("g1"), content("c-g1", "h1"), claim(FS, "vm-root", "g1")],
    )
    with pytest.raises(Refusal) as refused:
        golden_snapshot.Golden(kube).run()
    assert "PersistentVolumeClaim golden-images/vm-root restores from it directly" in refused.value.msg
    assert refused.value.result["consumers"][0]["name"] == "vm-root"
    assert kube.writes == []


def test_golden_snapshot_absent_deletes_an_unused_golden_and_returns():
    """g1 is served, g2 was served before it and nothing records or clones it: g2 goes. The lone golden of
    a label-path family is served (the seeder serves it silently), so it stays."""
    observed = [golden("g1"), golden("g2"), content("c-g1", "h1"), sel("g1")]
    observed[1]["metadata"]["name"] = "g0"
    kube = FakeKube(snapshot_params(state="absent", name="g0"), observed)
    result = golden_snapshot.Golden(kube).run()
    assert result["changed"] is True and result["action"] == "delete" and result["consumers"] == []
    assert kube.writes == [("delete", "VolumeSnapshot", FS, "g0")]
    alone = FakeKube(snapshot_params(state="absent", name="g1", force=True), [golden("g1")])
    with pytest.raises(Refusal, match=r"it is served for deb/Filesystem \(g1 is the only golden"):
        golden_snapshot.Golden(alone).run()
    assert alone.writes == []


def test_golden_snapshot_absent_force_withdraws_a_staged_candidate_but_never_a_rollback_target():
    observed = [
        golden("g1"),
        golden("g2"),
        golden("g3"),
        content("c-g1", "h1"),
        sel("g2", **{selection.PREVIOUS_SNAPSHOT: "g1"}),
    ]
    for force in (False, True):
        refused = FakeKube(snapshot_params(state="absent", name="g1", force=force), observed)
        with pytest.raises(Refusal, match="it is the recorded rollback target"):
            golden_snapshot.Golden(refused).run()
        assert refused.writes == []
    staged = FakeKube(snapshot_params(state="absent", name="g3"), observed)
    with pytest.raises(Refusal, match=r"it is staged.*set force: true to withdraw it"):
        golden_snapshot.Golden(staged).run()
    forced = FakeKube(snapshot_params(state="absent", name="g3", force=True), observed)
    assert golden_snapshot.Golden(forced).run()["changed"] is True
    assert forced.warnings and "force: deleting" in forced.warnings[0]


# golden_selection ------------------------------------------------------------------------------------


def selection_params(**params):
    return defaults(golden_selection.argument_spec(), family=FAMILY, **params)


def test_golden_selection_refuses_a_zero_wait_and_a_promotion_without_snapshot():
    with pytest.raises(Refusal, match=r"^option wait_sleep: 0 is not a duration"):
        golden_selection.Promotion(FakeKube(selection_params(snapshot="g1", wait_sleep=0))).run()
    with pytest.raises(Refusal, match=r"^option snapshot: a promotion names the golden to serve") as refused:
        golden_selection.Promotion(FakeKube(selection_params())).run()
    assert refused.value.result["changed"] is False  # the runner's result fields come with the refusal


def record_of(obj, handle=None):
    """What clone_gate writes on a golden it passed (gate.gate_record as JSON), for its storage snapshot."""
    meta = obj["metadata"]
    where = "%s/%s" % (meta["namespace"], meta["name"])
    return json.dumps(gate.gate_record({"verdict": "passed"}, where, None, handle, "r1", "T", "acme"))


def gated(name, handle=None):
    """A golden on which clone_gate recorded a pass (it carries no release digest, nor does the record)."""
    found = golden(name)
    found["metadata"]["annotations"][serving.GATE_RECORD] = record_of(found, handle)
    return found


def test_golden_selection_serves_only_a_golden_the_gate_passed_or_an_override_on_the_record():
    kube = FakeKube(selection_params(snapshot="g2"), [golden("g1"), gated("g2")])
    assert golden_selection.Promotion(kube).run()["changed"] is True
    assert kube.writes == [("create", "GoldenImageSelection", FS, "deb-filesystem")]
    refused = FakeKube(selection_params(snapshot="g1"), [golden("g1"), gated("g2")])
    with pytest.raises(
        Refusal, match=r"^VolumeSnapshot golden-images/g1: refusing to serve it .* no clone gate"
    ):
        golden_selection.Promotion(refused).run()
    assert refused.writes == []
    params = selection_params(snapshot="g1", allow_ungated=True, ungated_reason="hotfix", ungated_by="ops")
    allowed = FakeKube(params, [golden("g1"), gated("g2")])
    result = golden_selection.Promotion(allowed).run()
    assert result["ungated"]["by"] == "ops" and result["ungated"]["why"] == "hotfix"
    assert allowed.writes == [
        ("patch", "VolumeSnapshot", FS, "g1"),  # the override on the record first, then the selection
        ("create", "GoldenImageSelection", FS, "deb-filesystem"),
    ]


def test_golden_selection_rollback_to_an_ungated_golden_writes_nothing():
    objects = [golden("g1"), gated("g2"), sel("g2", **{selection.PREVIOUS_SNAPSHOT: "g1"})]
    kube = FakeKube(selection_params(rollback=True), objects)
    with pytest.raises(
        Refusal, match=r"^VolumeSnapshot golden-images/g1: refusing to serve it .* no clone gate"
    ):
        golden_selection.Promotion(kube).run()
    assert kube.writes == []
    allowed = FakeKube(selection_params(rollback=True, allow_ungated=True, ungated_reason="r"), objects)
    assert golden_selection.Promotion(allowed).run()["selected"]["snapshot"] == "g1"
    assert allowed.writes == [
        ("patch", "VolumeSnapshot", FS, "g1"),
        ("patch", "GoldenImageSelection", FS, "deb-filesystem"),
    ]


def test_golden_selection_rollback_run_twice_writes_once():
    promoted = sel("g2", **{selection.PREVIOUS_SNAPSHOT: "g1"})
    goldens = [gated("g1"), gated("g2")]
    first = FakeKube(selection_params(rollback=True), goldens + [promoted])
    result = golden_selection.Promotion(first).run()
    assert result["selected"]["snapshot"] == "g1"
    assert first.writes == [("patch", "GoldenImageSelection", FS, "deb-filesystem")]
    rolled = sel("g1", **{selection.PREVIOUS_SNAPSHOT: "g2", selection.ROLLED_BACK: "true"})
    again = FakeKube(selection_params(rollback=True), goldens + [rolled])
    result = golden_selection.Promotion(again).run()
    assert result["changed"] is False and result["rollback"]["noop"] is True and again.writes == []


def block_golden(name):
    found = golden(name)
    found["metadata"]["namespace"] = "golden-images-block"
    found["metadata"]["labels"]["kube-dc.com/golden-mode"] = "Block"
    found["metadata"]["annotations"]["kube-dc.com/golden-mode"] = "Block"
    return found


def gated_block(name):
    found = block_golden(name)
    found["metadata"]["annotations"][serving.GATE_RECORD] = record_of(found)
    return found


def test_golden_selection_of_a_block_golden_is_made_in_golden_images():
    """The guide's layout: one selection per family and mode, all in golden-images, Block included."""
    params = selection_params(snapshot="b1", mode="Block", wait=False)
    kube = FakeKube(params, [gated_block("b1")])
    golden_selection.Promotion(kube).run()
    assert kube.writes == [("create", "GoldenImageSelection", FS, "deb-block")]


def test_golden_selection_writes_an_existing_block_selection_where_it_is():
    old = sel("b1")
    old["metadata"].update(name="deb-block", namespace="golden-images-block")
    old["spec"]["mode"] = "Block"
    params = selection_params(snapshot="b2", mode="Block", wait=False)
    kube = FakeKube(params, [block_golden("b1"), gated_block("b2"), old])
    golden_selection.Promotion(kube).run()
    assert kube.writes == [("patch", "GoldenImageSelection", "golden-images-block", "deb-block")]


def test_golden_selection_without_the_crd_refuses_the_selection_method():
    kube = FakeKube(selection_params(snapshot="g1"), [golden("g1")], served=())
    with pytest.raises(Refusal, match="install it, or use method: label"):
        golden_selection.Promotion(kube).run()


class Clock:
    """A fake clock; its ``sleep`` advances it and may change the cluster (``on_sleep``)."""

    def __init__(self, now=1000.0, on_sleep=None):
        self.now = now
        self.slept = []
        self.on_sleep = on_sleep

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds
        if self.on_sleep:
            self.on_sleep(len(self.slept))


def project(namespace, handle):
    """A project namespace, its seeded snapshot (ready: the driver confirmed its handle) and the content
    that snapshot is bound to."""
    bound = content("c-" + namespace, handle)
    bound["spec"]["volumeSnapshotRef"] = {"uid": "u-" + namespace}  # bound back to the snapshot below
    return [
        {"kind": "Namespace", "metadata": {"name": namespace, "labels": {"kube-dc.com/project": "x"}}},
        {
            "kind": "VolumeSnapshot",
            "metadata": {
                "name": "golden-deb",
                "namespace": namespace,
                "uid": "u-" + namespace,
                "labels": {"kube-dc.com/golden-os": "deb"},
            },
            "status": {"boundVolumeSnapshotContentName": "c-" + namespace, "readyToUse": True},
        },
        bound,
    ]


def verifying(*projects, **params):
    objects = [golden("g1"), gated("g2", "h2"), content("c-g1", "h1"), content("c-g2", "h2"), sel("g1")]
    for namespace, handle in projects:
        objects += project(namespace, handle)
    return FakeKube(selection_params(snapshot="g2", verify_projects=True, **params), objects)


def test_golden_selection_verification_returns_a_line_after_report_every_with_counts_and_pending():
    kube, clock = verifying(("team-a", "h2"), ("team-b", "h1")), Clock()
    result = golden_selection.Promotion(kube, clock=clock, sleeper=clock.sleep).run()
    assert kube.writes == [("patch", "GoldenImageSelection", FS, "deb-filesystem")]
    assert result["done"] is False and result["unresolved"] == ["team-b"]
    assert result["line"] == "Projects: 1 of 2 resolved to h2 (snapshot g2); waiting for team-b after 20.0s"
    assert clock.slept[0] == 0.25 and sum(clock.slept) == 20.0 and max(clock.slept) <= 15
    resume = result["resume"]
    assert (resume["verify_handle"], resume["verify_snapshot"], resume["started"]) == ("h2", "g2", 1000.0)
    assert "team-b: resolved to h1, not the intended h2" in resume["last_state"]


def test_golden_selection_verification_round_ends_at_the_first_change_and_is_done_when_all_resolved():
    kube = verifying(("team-a", "h2"), ("team-b", "h1"), ("team-c", "h1"))

    def seed(sleeps):
        # The seeder re-points one project per sleep.
        namespace = {1: "team-b", 2: "team-c"}.get(sleeps)
        for obj in kube.objects:
            if namespace and obj["metadata"]["name"] == "c-" + namespace:
                obj["spec"]["source"]["snapshotHandle"] = "h2"

    clock = Clock(on_sleep=seed)
    first = golden_selection.Promotion(kube, clock=clock, sleeper=clock.sleep).run()
    assert first["done"] is False and first["unresolved"] == ["team-c"]
    assert first["line"] == "Projects: 2 of 3 resolved to h2 (snapshot g2); waiting for team-c after 0.2s"
    kube.params.update(first["resume"])
    kube.writes = []
    later = golden_selection.Promotion(kube, clock=clock, sleeper=clock.sleep).run()
    assert later["done"] is True and later["unresolved"] == [] and "resume" not in later
    assert later["line"].startswith("Projects: 3 of 3 resolved to h2 (snapshot g2) after ")
    assert kube.writes == []  # a later round only checks the projects


def test_golden_selection_verification_times_out_naming_each_pending_project_and_stuck():
    kube, clock = verifying(("team-a", "h2"), ("team-b", "h1")), Clock()
    state = selection.verification_state(
        selection.project_resolutions(
            ["team-a", "team-b"],
            [o for o in kube.objects if o["metadata"]["name"] == "golden-deb"],
            [o for o in kube.objects if o["kind"] == "VolumeSnapshotContent"],
            FAMILY,
            "Filesystem",
            "h2",
        )
    )
    kube.params.update(verify_handle="h2", verify_snapshot="g2", started=clock.now - 1195, last_state=state)
    with pytest.raises(PipelineError) as timed_out:
        golden_selection.Promotion(kube, clock=clock, sleeper=clock.sleep).run()
    msg = timed_out.value.msg
    assert msg.startswith("1 project(s) did not resolve to h2 (snapshot g2) within 1200s (stuck: ")
    assert msg.endswith("team-b: resolved to h1, not the intended h2 (seeded from unknown)")
    assert "team-a" not in msg
    assert timed_out.value.result["stuck"] is True and timed_out.value.result["unresolved"] == ["team-b"]
    assert kube.writes == []


# golden_info -----------------------------------------------------------------------------------------


def test_golden_info_returns_the_report_with_clones():
    kube = FakeKube(
        defaults(golden_info.argument_spec()),
        [golden("g1"), content("c-g1", "h1"), claim(FS, "vm-root", "g1")],
    )
    result = golden_info.run(kube)
    assert result["changed"] is False and result["summary"]["clones"] == 1


def test_golden_info_returns_a_summary_above_the_detail_limit(monkeypatch):
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import details

    objects = [golden("g1"), content("c-g1", "h1"), claim(FS, "vm-root", "g1"), claim(FS, "vm-2", "g1")]
    full = golden_info.run(FakeKube(defaults(golden_info.argument_spec()), objects))
    assert full["details"] == "full" and len(full["clones"][0]["pvcs"]) == 2
    monkeypatch.setattr(details, "DETAIL_LIMIT", -1)
    auto = golden_info.run(FakeKube(defaults(golden_info.argument_spec()), objects))
    assert auto["details"] == "summary" and auto["clones"][0]["pvcs"] == []
    assert auto["consumers_omitted"] == 2 and auto["summary"] == full["summary"]
    asked = golden_info.run(FakeKube(defaults(golden_info.argument_spec(), details="full"), objects))
    assert asked["details"] == "full" and len(asked["clones"][0]["pvcs"]) == 2


def test_golden_info_refuses_a_bad_mode_as_a_pipeline_error():
    with pytest.raises(PipelineError, match="not a golden mode"):
        golden_info.run(FakeKube(defaults(golden_info.argument_spec(), mode="sideways")))


# clone_gate ------------------------------------------------------------------------------------------


KUBEVIRT = {
    "apiVersion": "kubevirt.io/v1",
    "kind": "KubeVirt",
    "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
    "spec": {"configuration": {"developerConfiguration": {"featureGates": ["ExpandDisks"]}}},
}


def gate_params(**params):
    return defaults(clone_gate.argument_spec(), snapshot="g1", **params)


@pytest.mark.parametrize("project", ["golden-images", "golden-images-block", "gold"])
def test_clone_gate_refuses_a_golden_namespace_before_any_read(project):
    kube = FakeKube(gate_params(project_namespace=project, snapshot_namespace="gold"))
    with pytest.raises(Refusal, match=r"^option project_namespace \(%s\): a clone gate runs" % project):
        clone_gate.Gate(kube).run()
    assert kube.writes == []


@pytest.mark.parametrize("option", _clone_gate.DURATIONS)
def test_clone_gate_refuses_zero_durations(option):
    kube = FakeKube(gate_params(project_namespace="acme", **{option: 0}))
    with pytest.raises(Refusal, match="^option %s: 0 is not a duration" % option):
        clone_gate.Gate(kube).run()
    assert kube.writes == []


def test_clone_gate_check_mode_predicts_the_sweep_of_an_earlier_run():
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import gate

    cid = gate.candidate_id(FS, "g1")
    left = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {
            "name": "gate-old",
            "namespace": "acme",
            "labels": gate.gate_labels("old", candidate=cid),
        },
    }
    kept = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {
            "name": "gate-kept",
            "namespace": "acme",
            "labels": gate.gate_labels("k", candidate=cid, kept=True),
        },
    }
    namespace = {"kind": "Namespace", "metadata": {"name": "acme", "labels": {"kube-dc.com/project": "acme"}}}
    kube = FakeKube(
        gate_params(project_namespace="acme", snapshot_namespace=FS),
        [golden("g1"), content("c-g1", "h1"), namespace, left, kept, KUBEVIRT],
        check_mode=True,
    )
    result = clone_gate.Gate(kube).run()
    assert result["skipped"] is True and kube.writes == []
    assert [(o["kind"], o["name"], o["run"]) for o in result["would_sweep"]] == [
        ("VirtualMachine", "gate-old", "old")
    ]


PROJECT = {"kind": "Namespace", "metadata": {"name": "acme", "labels": {"kube-dc.com/project": "acme"}}}


@pytest.mark.parametrize("memory", ["4Gi", "6Gi", "8000Mi"])
def test_clone_gate_windows_below_8gi_is_inconclusive_before_any_read(memory):
    kube = FakeKube(gate_params(project_namespace="acme", snapshot_namespace=FS, memory=memory))
    with pytest.raises(PipelineError) as failed:
        clone_gate.Gate(kube).run()
    result = failed.value.result
    assert result["verdict"] == "inconclusive" and result["verdict"] != "no_boot"
    assert (result["memory"], result["min_memory"]) == (memory, "8Gi")
    assert "below the catalog minimum 8Gi" in result["msg"]
    assert kube.writes == [] and result["created"] == []


def test_clone_gate_windows_memory_defaults_to_the_catalog_minimum():
    kube = FakeKube(
        gate_params(project_namespace="acme", snapshot_namespace=FS),
        [golden("g1"), content("c-g1", "h1"), PROJECT, KUBEVIRT],
        check_mode=True,
    )
    result = clone_gate.Gate(kube).run()
    assert result["skipped"] is True
    assert kube.writes == []
    gated = clone_gate.Gate(kube)
    gated.run()
    assert (gated.result["memory"], gated.result["min_memory"]) == ("8Gi", "8Gi")


@pytest.mark.parametrize(
    "namespace, selector, words",
    [
        ({"kind": "Namespace", "metadata": {"name": "acme"}}, None, "its labels (none) do not match"),
        (
            {"kind": "Namespace", "metadata": {"name": "acme", "labels": {"team": "a"}}},
            None,
            "its labels (team=a) do not match kube-dc.com/project",
        ),
        (PROJECT, "tenant.example.com/project", "do not match tenant.example.com/project"),
        (None, None, "the namespace does not exist"),
        (PROJECT, "", "an empty selector matches every namespace"),
    ],
)
def test_clone_gate_refuses_a_namespace_that_is_not_a_project_before_any_write(namespace, selector, words):
    params = gate_params(project_namespace="acme", snapshot_namespace=FS)
    if selector is not None:
        params["project_selector"] = selector
    objects = [golden("g1"), content("c-g1", "h1")] + ([namespace] if namespace else [])
    kube = FakeKube(params, objects)
    with pytest.raises(Refusal) as refused:
        clone_gate.Gate(kube).run()
    assert words in refused.value.msg
    assert refused.value.result["verdict"] == "inconclusive"
    assert kube.writes == []


def test_clone_gate_a_project_recognised_by_another_convention_passes_the_namespace_rule():
    namespace = {
        "kind": "Namespace",
        "metadata": {"name": "acme", "labels": {"tenant.example.com/kind": "project"}},
    }
    kube = FakeKube(
        gate_params(
            project_namespace="acme",
            snapshot_namespace=FS,
            project_selector="tenant.example.com/kind=project",
        ),
        [golden("g1"), content("c-g1", "h1"), namespace, KUBEVIRT],
        check_mode=True,
    )
    assert clone_gate.Gate(kube).run()["skipped"] is True


@pytest.mark.parametrize("port", [0, 70000, -1])
def test_clone_gate_refuses_a_port_that_is_not_one(port):
    kube = FakeKube(gate_params(project_namespace="acme", snapshot_namespace=FS, port=port))
    with pytest.raises(Refusal, match=r"^option port \(%s\): a TCP port is a number" % port):
        clone_gate.Gate(kube).run()
    assert kube.writes == []


class SlowKube(FakeKube):
    """Waits as the adapter does: done when the predicate holds, else a time-out after ``timeout``."""

    def wait(
        self, api_version, kind, name, namespace, predicate, describe, pending, timeout, sleep, progress=None
    ):
        from ansible_collections.goldenimage.pipeline.plugins.module_utils.common._wait import WaitTimeout

        obj = self.get(api_version, kind, name, namespace)
        done, _failed = predicate(obj)
        if done:
            return obj, 0.0
        raise WaitTimeout("timed out", last=obj, state=describe(obj), elapsed=timeout)

    def wait_round(
        self, rounds, api_version, kind, name, namespace, predicate, describe, pending, sleep, progress=None
    ):
        """Nothing changes while it waits: the round ends first, or, when the round's share reaches the
        deadline, the whole wait times out."""
        obj = self.get(api_version, kind, name, namespace)
        if predicate(obj)[0]:
            return obj, True
        if rounds.round_end < rounds.deadline:
            return obj, False
        return self.wait(
            api_version, kind, name, namespace, predicate, describe, pending, rounds.timeout, sleep
        )


def seeded_copy():
    vs = golden("copy", content="c-copy")
    vs["metadata"]["namespace"] = "acme"
    return [vs, content("c-copy", "h1")]


def test_clone_gate_waits_in_rounds_with_a_progress_line_and_resumes():
    now = [1000.0]
    params = gate_params(project_namespace="acme", snapshot_namespace=FS, report_every=20)
    kube = SlowKube(params, [golden("g1"), content("c-g1", "h1"), PROJECT, KUBEVIRT] + seeded_copy())
    first = clone_gate.Gate(kube, run_id="r1", clock=lambda: now[0]).run()
    assert first["done"] is False and first["changed"] is True
    assert "phase start, waiting for the VM instance to run (no VirtualMachineInstance yet)" in first["line"]
    assert "in acme" in first["line"] and "0s elapsed" in first["line"]
    state = first["resume"]["gate_state"]
    assert state["stage"] == "start" and state["run_id"] == "r1"
    assert [o["kind"] for o in first["created"]] == ["PersistentVolumeClaim", "VirtualMachine"]

    # The next round goes on from the state it was handed: same run, nothing created twice.
    now[0] += 25
    vmi = {
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "gate-r1", "namespace": "acme"},
        "status": {"phase": "Running", "conditions": []},
    }
    kube.objects.append(vmi)
    writes = len(kube.writes)
    params.update(gate_state=state, started=1000.0)
    second = clone_gate.Gate(kube, clock=lambda: now[0]).run()
    assert second["done"] is False
    assert "phase agent, waiting for the guest agent to connect (AgentConnected)" in second["line"]
    assert "25s elapsed, 0s of 1200s in this phase" in second["line"]
    assert [p["name"] for p in second["phases"]] == ["provision", "start"]
    assert not [w for w in kube.writes[writes:] if w[0] == "create"]


def test_clone_gate_timeout_names_what_was_pending():
    now = [1000.0]
    params = gate_params(project_namespace="acme", snapshot_namespace=FS, wait_timeout=600)
    kube = SlowKube(params, [golden("g1"), content("c-g1", "h1"), PROJECT, KUBEVIRT] + seeded_copy())
    state = clone_gate.Gate(kube, run_id="r2", clock=lambda: now[0]).run()["resume"]["gate_state"]
    now[0] += 601
    params.update(gate_state=state, started=1000.0)
    with pytest.raises(PipelineError) as failed:
        clone_gate.Gate(kube, clock=lambda: now[0]).run()
    result = failed.value.result
    assert result["verdict"] == "inconclusive"
    assert "timed out after 601s, still pending: the VM instance to run" in result["msg"]
    assert "last observed: no VirtualMachineInstance yet" in result["msg"]
    # What the run created was removed, as on every end.
    assert ("delete", "VirtualMachine", "acme", "gate-r2") in kube.writes


def test_clone_gate_sends_a_failed_request_once_the_adapter_owns_the_retries():
    """The Kubernetes adapter retried and gave up: the gate adds no retry loop of its own, and what it
    tried to create (recorded before the request: the reply may have been lost) is still removed."""
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeError

    class Unavailable(SlowKube):
        def create(self, definition):
            self.writes.append(("create",) + self._key(definition))
            if definition["kind"] == "VirtualMachine":
                error = KubeError("create VirtualMachine acme/gate-r3: ServiceUnavailable (503)", status=503)
                error.cause = error  # as the adapter gives up on a 503: the cause is transient
                raise error
            return super().create(definition)

    params = gate_params(project_namespace="acme", snapshot_namespace=FS)
    kube = Unavailable(params, [golden("g1"), content("c-g1", "h1"), PROJECT, KUBEVIRT] + seeded_copy())
    with pytest.raises(PipelineError, match=r"ServiceUnavailable \(503\)") as failed:
        clone_gate.Gate(kube, run_id="r3", clock=lambda: 1000.0).run()
    assert [w for w in kube.writes if w[:2] == ("create", "VirtualMachine")] == [
        ("create", "VirtualMachine", "acme", "gate-r3")
    ]
    assert ("delete", "VirtualMachine", "acme", "gate-r3") in kube.writes
    assert failed.value.result["kept"] is False


@pytest.mark.parametrize(
    "kubevirts, words",
    [
        ([], "no KubeVirt CR (kubevirt.io/v1 KubeVirt) was found"),
        ([dict(KUBEVIRT, spec={})], "KubeVirt kubevirt/kubevirt (version not reported) does not have"),
    ],
)
def test_clone_gate_without_expand_disks_is_refused_before_any_write(kubevirts, words):
    kube = FakeKube(
        gate_params(project_namespace="acme", snapshot_namespace=FS),
        [golden("g1"), content("c-g1", "h1"), PROJECT] + kubevirts,
    )
    with pytest.raises(PipelineError) as failed:
        clone_gate.Gate(kube).run()
    assert words in failed.value.msg and failed.value.result["verdict"] == "inconclusive"
    assert kube.writes == []
    waived = FakeKube(
        gate_params(project_namespace="acme", snapshot_namespace=FS, grow_by="0"),
        [golden("g1"), content("c-g1", "h1"), PROJECT] + kubevirts,
        check_mode=True,
    )
    assert clone_gate.Gate(waived).run()["skipped"] is True
