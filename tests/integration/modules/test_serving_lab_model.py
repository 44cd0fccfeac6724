"""The serving model's invariants against the lab: the modules themselves (golden_snapshot, golden_selection,
golden_retention) drive a real API server, with the seeder and the snapshot controller running, through
random steps - publish, gate pass, promote by selection with and without the recorded override, rollback,
retention with any keep, delete with and without force, clone and unclone. After every step:

- nothing served, recorded as the rollback target or cloned before the step is gone after it (nor a staged
  candidate, unless a forced delete withdrew it on purpose);
- what the family serves carries a gate pass for its own digest or a recorded override;
- a step a module reported as successful leaves no conflict.

The pure model (tests/unit/plugins/module_utils/test_serving_model.py) runs hundreds of examples; this is the
slow tier's few dozen steps on the real parts.
"""

from __future__ import annotations

import hashlib
import json
import uuid

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import gate, selection, serving
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.integration.support.runner import kube_play, module_task, run_playbook

pytestmark = pytest.mark.lab_only

FS_NS = "golden-images"
SNAP = ("snapshot.storage.k8s.io", "v1")
KUBE_DC = ("kube-dc.com", "v1")


class LabServing(RuleBasedStateMachine):
    lab = None
    api = None

    def __init__(self):
        super().__init__()
        from kubernetes import client

        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.prefix = "m%s" % uuid.uuid4().hex[:6]
        self.family = self.prefix + "-deb"
        self.published = []
        self.clones = []
        self.disk = self.prefix + "-disk"
        self.core.create_namespaced_persistent_volume_claim(
            FS_NS,
            {
                "metadata": {"name": self.disk},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "4Mi"}}},
            },
        )
        self.protected = set()

    # ------------------------------------------------------------------ reads
    def observed(self):
        def items(call, *args, **kwargs):
            return call(*args, **kwargs)["items"]

        snapshots = items(self.custom.list_namespaced_custom_object, *SNAP, FS_NS, "volumesnapshots")
        return {
            "snapshots": snapshots,
            "contents": items(self.custom.list_cluster_custom_object, *SNAP, "volumesnapshotcontents"),
            "pvcs": self.api.sanitize_for_serialization(
                self.core.list_persistent_volume_claim_for_all_namespaces().items
            ),
            "projects": [],
            "selections": items(self.custom.list_cluster_custom_object, *KUBE_DC, "goldenimageselections"),
            "datavolumes": [],
        }

    def truth(self):
        return serving.truth(self.observed(), self.family, "Filesystem")

    def exists(self):
        return {s["metadata"]["name"] for s in self.observed()["snapshots"]}

    def run(self, *tasks):
        return run_playbook(kube_play(*tasks), env=self.lab.env(), timeout=300)

    def step(self, module, force=False, **params):
        """Run one module; remember what must survive it; a success must leave no conflict."""
        state = self.truth()
        keep = {state["served"], state["rollback_target"]} - {None}
        keep |= {name for name, users in state["users"].items() if users}
        if not force:
            keep |= set(state["staged"])
        self.protected = keep
        run = self.run(module_task(module, "step", ignore_errors=True, **params))
        ok = run.entry("step")["status"] in ("ok", "changed")
        if ok:
            after = self.truth()
            assert after["conflicts"] == [], (module, params, after["conflicts"])
        return run["step"]

    # ------------------------------------------------------------------ rules
    @rule()
    def publish(self):
        number = len(self.published)
        digest = "sha256:" + hashlib.sha256(("%s-%d" % (self.prefix, number)).encode()).hexdigest()
        result = self.step(
            "goldenimage.pipeline.golden_snapshot",
            family=self.family,
            os_name="Debian 12",
            pvc=self.disk,
            date="2026%02d%02d" % (1 + number // 28, 1 + number % 28),
            digest=digest,
            wait_timeout=60,
            wait_sleep=1,
        )
        if result.get("golden"):
            self.published.append(result["golden"]["name"])

    @precondition(lambda self: self.published)
    @rule(data=st.data())
    def gate_pass(self, data):
        """What clone_gate records on a golden whose clone booted and grew."""
        name = data.draw(st.sampled_from(self.published))
        obj = next((s for s in self.observed()["snapshots"] if s["metadata"]["name"] == name), None)
        if obj is None:
            return
        contents = {c["metadata"]["name"]: c for c in self.observed()["contents"]}
        record = gate.gate_record(
            {"verdict": gate.PASSED, "proof": gate.PROOF_AGENT},
            "%s/%s" % (FS_NS, name),
            obj["metadata"]["annotations"].get(serving.RELEASE_DIGEST),
            selection.golden_handle(obj, contents),
            "run-" + name[-6:],
            "2026-12-06T00:00:00Z",
            "p1",
        )
        patch = {"metadata": {"annotations": {serving.GATE_RECORD: json.dumps(record)}}}
        self.custom.patch_namespaced_custom_object(*SNAP, FS_NS, "volumesnapshots", name, patch)
        self.protected = set()

    @precondition(lambda self: self.published)
    @rule(data=st.data(), ungated=st.booleans())
    def promote(self, data, ungated):
        name = data.draw(st.sampled_from(self.published))
        extra = {"allow_ungated": True, "ungated_reason": "emergency fix"} if ungated else {}
        self.step("goldenimage.pipeline.golden_selection", family=self.family, snapshot=name, **extra)

    @precondition(lambda self: self.published)
    @rule()
    def rollback(self):
        self.step("goldenimage.pipeline.golden_selection", family=self.family, rollback=True)

    @precondition(lambda self: self.published)
    @rule(keep=st.integers(min_value=1, max_value=3))
    def retention(self, keep):
        self.step("goldenimage.pipeline.golden_retention", family=self.family, keep=keep)

    @precondition(lambda self: self.published)
    @rule(data=st.data(), force=st.booleans())
    def delete(self, data, force):
        name = data.draw(st.sampled_from(self.published))
        self.step(
            "goldenimage.pipeline.golden_snapshot",
            force=force,
            state="absent",
            name=name,
            mode="Filesystem",
            wait_timeout=30,
            wait_sleep=1,
        )

    @precondition(lambda self: self.published)
    @rule(data=st.data())
    def clone(self, data):
        name = data.draw(st.sampled_from(self.published))
        if name not in self.exists():
            return
        claim = "%s-clone-%d" % (self.prefix, len(self.clones))
        source = {"apiGroup": SNAP[0], "kind": "VolumeSnapshot", "name": name}
        spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "4Mi"}}}
        body = {"metadata": {"name": claim}, "spec": dict(spec, dataSource=source)}
        self.core.create_namespaced_persistent_volume_claim(FS_NS, body)
        self.clones.append(claim)
        self.protected = set()

    @precondition(lambda self: self.clones)
    @rule()
    def unclone(self):
        self.core.delete_namespaced_persistent_volume_claim(self.clones.pop(0), FS_NS)
        self.protected = set()

    # ------------------------------------------------------------------ invariants
    @invariant()
    def nothing_kept_was_deleted(self):
        gone = self.protected - self.exists()
        assert not gone, "deleted although served, a rollback target, staged or cloned: %s" % sorted(gone)

    @invariant()
    def what_serves_was_gated_or_overridden(self):
        state = self.truth()
        served = state["served"]
        if served:
            assert state["gate"].get(served) or state["ungated"].get(served), (served, state["path"])

    def teardown(self):
        for claim in self.clones:
            self.core.delete_namespaced_persistent_volume_claim(claim, FS_NS)
        for sel in self.observed()["selections"]:
            if (sel.get("spec") or {}).get("family") == self.family:
                self.custom.delete_namespaced_custom_object(
                    *KUBE_DC, sel["metadata"]["namespace"], "goldenimageselections", sel["metadata"]["name"]
                )
        for name in self.exists():
            if name.startswith("golden-%s-" % self.family):
                self.custom.delete_namespaced_custom_object(*SNAP, FS_NS, "volumesnapshots", name)
        self.core.delete_namespaced_persistent_volume_claim(self.disk, FS_NS)


def test_the_serving_invariants_hold_on_the_lab(lab, kube_client):
    from kubernetes import client

    try:
        client.CoreV1Api(kube_client).create_namespace({"metadata": {"name": FS_NS}})
    except client.rest.ApiException as exc:
        if exc.status != 409:
            raise
    LabServing.lab, LabServing.api = lab, kube_client
    run_state_machine_as_test(
        LabServing,
        settings=settings(
            max_examples=2,
            stateful_step_count=15,
            deadline=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        ),
    )
