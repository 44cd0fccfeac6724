"""A stateful property test of the fleet roll-out: windows open and close (the clock moves, the run's
window and instances' own windows change), roll-outs run with every opt-in, runs are killed and resumed,
auto-apply and forced-apply dates pass. The decisions are the collection's own pure rules
(``rollout.plan``, ``rollout.admit``, ``repave.apply_decision``, and for each repave in flight the direct
strategy's ``repave_steps.next_step``); the model plays the cluster: it applies each step's write to a
Harvester VM and its claims (a merge patch, a claim delete) and reacts as KubeVirt and Harvester do (a
halted VM loses its instance, a running one boots the disk its volume names, a declared claim is made).

After every step:
- nothing was repaved outside its window unless apply-immediately was recorded for it (or its
  forced-apply date had come), judged from the clock and the window at the moment it started;
- a primary and its standby are never repaving together;
- an instance repaving is never triggered again (a resumed run waits on it);
- pgdata is never detached or deleted, and every claim a VM's volumes name exists: a repave replaces the
  OS disk only, and never deletes the one a VM boots.
"""

from __future__ import annotations

import copy
import datetime
import json

from ansible_collections.goldenimage.pipeline.plugins.module_utils.repave import repave, repave_steps, rollout
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

UTC = datetime.UTC
START = datetime.datetime(2026, 12, 1, 0, 0, tzinfo=UTC)  # a Tuesday
BUILT = datetime.date(2026, 11, 20)  # the tip's build date
WINDOWS = [
    None,
    "22:00-02:00",
    "sat,sun 01:00-05:00 Europe/Berlin",
    "tue,wed 09:00-10:00",
    "12:00-13:00 America/New_York",
]
GROUPS = {"p1": ["s1a", "s1b"], "p2": ["s2a"], "p3": []}
IMAGES = {
    "images/old": {"status": {"storageClassName": "lh"}},
    "images/tip": {"status": {"storageClassName": "lh"}},
}
TARGET = {"revision": "tip", "image": {"namespace": "images", "name": "tip"}, "storage_class": "lh"}


def claim_template(name, image=None):
    meta = {"name": name, "annotations": {repave.IMAGE_ID: image}} if image else {"name": name}
    return {
        "metadata": meta,
        "spec": {"storageClassName": "lh", "resources": {"requests": {"storage": "1Gi"}}},
    }


def harvester_vm(name):
    """A Harvester VM on the old image: its OS disk and pgdata declared in volumeClaimTemplates."""
    os_disk, pgdata = repave_steps.os_disk_name(name, "old"), "%s-pgdata" % name
    templates = [claim_template(os_disk, "images/old"), claim_template(pgdata)]
    volumes = [
        {"name": "rootdisk", "persistentVolumeClaim": {"claimName": os_disk}},
        {"name": "pgdata", "persistentVolumeClaim": {"claimName": pgdata}},
    ]
    return {
        "metadata": {
            "name": name,
            "namespace": "db",
            "resourceVersion": "1",
            "annotations": {repave.TEMPLATES: json.dumps(templates), repave_steps.REVISION: "old"},
        },
        "spec": {
            "runStrategy": "Always",
            "template": {
                "spec": {
                    "domain": {
                        "devices": {"disks": [{"name": "rootdisk", "bootOrder": 1}, {"name": "pgdata"}]}
                    },
                    "volumes": volumes,
                }
            },
        },
    }


def merge_patch(target, patch):
    """RFC 7386: objects merge, None removes, anything else replaces."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge_patch(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def policy_dates(auto_days, forced_days):
    def day(days):
        return (BUILT + datetime.timedelta(days=days)).isoformat() if days is not None else None

    return {
        "action": repave.ACTION_REPAVE,
        "auto_apply_after": day(auto_days),
        "forced_apply": day(forced_days),
    }


class FleetMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.now = START
        self.run_window = None
        self.instances = {}
        for primary, standbys in GROUPS.items():
            for name in [primary] + standbys:
                self.instances[name] = {
                    "name": name,
                    "namespace": "db",
                    "labels": {rollout.STANDBY_OF_LABEL: primary} if name != primary else {},
                    "annotations": {},
                    "revision": "old",
                    "available": True,
                    "repaving": False,
                    "vm": harvester_vm(name),
                    "vmi": None,
                }
        self.claims = {}
        for inst in self.instances.values():
            self.cluster_reacts(inst)
        self.due = policy_dates(None, None)
        self.starts = []  # (name, decision, now, window, opt_in, names)
        self.triggered_while_repaving = []

    # --- the world
    @rule(hours=st.integers(min_value=1, max_value=60))
    def clock_moves(self, hours):
        self.now += datetime.timedelta(hours=hours)

    @rule(window=st.sampled_from(WINDOWS))
    def run_window_changes(self, window):
        self.run_window = window

    @rule(
        name=st.sampled_from(sorted(["p1", "s1a", "s1b", "p2", "s2a", "p3"])), window=st.sampled_from(WINDOWS)
    )
    def instance_window_changes(self, name, window):
        notes = self.instances[name]["annotations"]
        if window is None:
            notes.pop(rollout.WINDOW_ANNOTATION, None)
        else:
            notes[rollout.WINDOW_ANNOTATION] = window

    @rule(
        auto=st.one_of(st.none(), st.integers(min_value=0, max_value=40)),
        forced=st.one_of(st.none(), st.integers(min_value=5, max_value=60)),
    )
    def maintenance_policy_changes(self, auto, forced):
        self.due = policy_dates(auto, forced)

    @rule()
    def repaves_progress(self):
        """One look of the direct strategy at every repave in flight: ``next_step`` on what the cluster
        shows, its write applied, then the cluster reacts."""
        for inst in self.instances.values():
            if not inst["repaving"]:
                continue
            vm = inst["vm"]
            observed = {
                "name": inst["name"],
                "namespace": "db",
                "vm": vm,
                "vmi": inst["vmi"],
                "claims": self.claims_of_namespace(),
                "images": IMAGES,
            }
            step = repave_steps.next_step(observed, TARGET, "rootdisk")
            assert step["state"] != "failed", step
            write = step.get("write") or {}
            for claim in write.get("delete") or ():
                self.claims.pop(claim, None)
            if write.get("patch"):
                merge_patch(vm, write["patch"])
                vm["metadata"]["resourceVersion"] = str(int(vm["metadata"]["resourceVersion"]) + 1)
            self.cluster_reacts(inst)
            if step["state"] == "done":
                inst.update(revision="tip", available=True, repaving=False)

    def claims_of_namespace(self):
        return {name: copy.deepcopy(body) for name, body in self.claims.items()}

    def cluster_reacts(self, inst):
        vm = inst["vm"]
        for template in repave.claim_templates(vm):  # Harvester makes each declared claim
            self.claims.setdefault(template["metadata"]["name"], copy.deepcopy(template))
        if vm["spec"].get("runStrategy") == "Halted":
            inst["vmi"] = None
        elif inst["vmi"] is None:  # KubeVirt boots the disks the volumes name, the agent connects
            volumes = copy.deepcopy(vm["spec"]["template"]["spec"]["volumes"])
            inst["vmi"] = {
                "metadata": {"name": inst["name"]},
                "spec": {"volumes": volumes},
                "status": {"phase": "Running", "conditions": [{"type": "AgentConnected", "status": "True"}]},
            }

    # --- a roll-out: one round of it. Each round knows only what the cluster shows, as a run resumed
    # after a kill does: instances repaving are in flight, to be waited on, never triggered again.
    def window_of(self, inst):
        return rollout.own_window(inst) or (
            rollout.parse_window_text(self.run_window) if self.run_window else None
        )

    @rule(
        opt_in=st.sampled_from([None, "next-maintenance", "immediate"]),
        names=st.sets(st.sampled_from(["p1", "s1a", "s1b", "p2", "s2a", "p3"])),
        max_unavailable=st.integers(min_value=1, max_value=6),
    )
    def roll_out(self, opt_in, names, max_unavailable):
        if opt_in == "immediate" and not names:
            return  # refused up front (check_request)
        listed = [dict(i) for i in self.instances.values() if not names or i["name"] in names]
        targets = {i["name"]: {"revision": "tip"} for i in listed if i["revision"] != "tip"}
        replication = {i["name"]: rollout.replication_group(i) for i in self.instances.values()}
        in_flight = {i["name"] for i in listed if i["repaving"]}
        batches = [b for b in rollout.plan(listed, targets, max_unavailable, None, replication) if b]
        for batch in batches:
            startable = []
            for key in batch:
                if key in in_flight:
                    startable.append(key)
                    continue
                window = self.window_of(self.instances[key])
                decision = repave.apply_decision(self.due, opt_in, key in names, window, self.now, 0)
                if decision["start"]:
                    startable.append(key)
                    self.starts.append((key, decision, self.now, window, opt_in, set(names), dict(self.due)))
            down = {n for n, i in self.instances.items() if not i["available"]}
            start, _deferred = rollout.admit(startable, down, in_flight, max_unavailable, replication)
            for key in start:
                inst = self.instances[key]
                if key in in_flight:
                    continue
                if inst["repaving"]:
                    self.triggered_while_repaving.append(key)
                inst.update(repaving=True, available=False)
            break  # one batch per round; the next round (or a rerun after a kill) plans again

    # --- invariants
    @invariant()
    def nothing_outside_a_window_without_intent(self):
        for key, decision, when, window, opt_in, names, due in self.starts:
            forced = due["forced_apply"] and datetime.datetime.fromisoformat(due["forced_apply"]).replace(
                tzinfo=UTC
            )
            if opt_in == "immediate" and key in names:
                assert decision["by"] == repave.BY_IMMEDIATE
            elif decision["by"] == repave.BY_FORCED:
                assert forced is not None and when >= forced, (key, decision, when)
            else:
                assert window is not None and window.contains(when), (key, decision, when, window)

    @invariant()
    def a_primary_and_its_standby_never_repave_together(self):
        busy = {}
        for inst in self.instances.values():
            if not inst["available"]:
                group = rollout.replication_group(inst)
                assert group not in busy, (inst["name"], busy.get(group))
                busy[group] = inst["name"]

    @invariant()
    def no_instance_is_triggered_twice(self):
        assert self.triggered_while_repaving == []

    @invariant()
    def pgdata_never_detached_or_deleted(self):
        for inst in self.instances.values():
            pgdata = "%s-pgdata" % inst["name"]
            named = repave.claims_of(inst["vm"])
            assert named.get("pgdata") == pgdata and pgdata in self.claims, (inst["name"], named)
            assert all(claim in self.claims for claim in named.values()), (inst["name"], named)


# Pure and fast: 200 sequences of up to 30 steps in a few seconds, in the normal unit tier.
test_fleet_state_machine = FleetMachine.TestCase
test_fleet_state_machine.settings = settings(max_examples=200, stateful_step_count=30, deadline=None)
