# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Running a repave plan: batches through a driver, never more than max_unavailable down, inside the window.

The plan itself is pure (rollout.py); this file owns the clock and the waits. Before a batch starts the
scope is listed again and only as many instances are triggered as the budget allows right now (an
instance that failed or went down meanwhile counts), so the limit holds even when the world moved since
the plan was made. Instances already repaving (an interrupted run) are waited on, never triggered.

A roll-out runs in rounds: given ``round_end``, a wait that reaches it before its own deadline ends the
round (a ``round`` event with what the next round needs, ``carry()``), and the next call of the module
plans again from what the cluster shows, with that carried state: when each repave began, what was
last seen of it and when that changed, what finished. The clock is the wall clock, so it spans calls.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import time

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common._wait import (
    WaitTimeout,
    nap,
    wait_for,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.rounds import RoundOver, Rounds
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import FIRST_POLL, is_transient
from ansible_collections.goldenimage.pipeline.plugins.module_utils.repave import repave, rollout

FINISHED = ("done", "failed")
# A fleet line (counts, what is repaving and where, elapsed) at least this often while batches run.
FLEET_LINE_EVERY = 30.0


def iso(when):
    return when.astimezone(datetime.timezone.utc).isoformat().replace("+00:00", "Z") if when else None


def window_view(window, now):
    """What the result says about the window at ``now``."""
    if window is None:
        return None
    closes = window.closes_at(now)
    return {
        "spec": window.to_dict(),
        "describe": window.describe(),
        "open": closes is not None,
        "closes_at": iso(closes),
        "next_open": iso(window.next_open(now)),
    }


class RolloutHalted(PipelineError):
    """The roll-out stopped (a failed repave with halt_on_failure, a timeout, no room); ``events`` says
    what happened before it did."""

    def __init__(self, msg, events):
        super(RolloutHalted, self).__init__(msg)
        self.events = events


def entry(key, **fields):
    return {"event": "entry", "key": key, "fields": fields}


class Rollout:
    """Runs a plan through a driver and returns what happened as events, never writing into its caller.

    ``instances`` are the listed instances, ``key(inst)`` names one, ``scope()`` lists them again,
    ``targets`` maps a key to its target, ``in_flight`` are keys an earlier run started. Events (dicts
    with ``event``): ``entry`` (``key``, ``fields`` for its result entry), ``write`` (``key``: a write
    toward the target was made, or in check mode would be), ``opt-in`` (``key``, ``value``: the opt-in
    annotation changed), ``progress`` (``record``), ``warning`` (``text``) and ``result`` (``fields`` of
    the run's result), and ``round`` (``state``: the round ended, ``carry()`` for the next one). ``log``
    (optional) is called with each progress line as it happens. ``carried`` is an earlier round's
    ``carry()``; ``round_end`` (clock seconds) ends this round, None for no rounds.

    Whether a planned instance may start is asked of ``repave.apply_decision`` at the moment its batch
    comes up, with its own window (``windows``: key -> the instance's window, else the run's, else None)
    and its dates (``due``: key -> its drift entry); ``replication`` maps a key to its replication group.
    Every date is read from ``clock``, the one clock of the run."""

    def __init__(
        self,
        driver,
        params,
        instances,
        key,
        scope,
        targets,
        in_flight,
        limit,
        window,
        log=None,
        clock=time.time,
        round_end=None,
        carried=None,
        windows=None,
        due=None,
        replication=None,
        peers=None,
    ):
        self.driver = driver
        # Every instance of the namespaces, selected or not: a group member outside the selection that is
        # down still keeps its group's other members from starting.
        self.peers = peers
        self.p = params
        self.key = key
        self.scope = scope
        self.instances = {key(i): i for i in instances}
        self.targets = targets
        self.in_flight = set(in_flight)
        self.limit = limit
        self.shown_window = window
        self.windows = windows if windows is not None else {k: window for k in self.instances}
        self.due = due or {}
        self.replication = replication or {}
        self.named = set(params.get("names") or ())
        self.log = log
        self.clock = clock
        self.round_end = round_end
        carried = carried or {}
        self.resumed = bool(carried)
        self.started = float(carried.get("started") or params.get("started") or clock())
        self.durations = list(carried.get("durations") or [])
        self.done = int(carried.get("done") or 0)
        self.total = int(carried.get("total") or 0)
        self.last_seen = {k: tuple(v) for k, v in (carried.get("seen") or {}).items()}
        self.changed_at = dict(carried.get("changed_at") or {})
        # When each repave of this roll-out began, and which ended (key -> "done" or "failed").
        self.since = dict(carried.get("since") or {})
        self.finished = dict(carried.get("finished") or {})
        self.room_since = carried.get("room_since")
        self.pause_until = carried.get("pause_until")
        self.fleet_line_at = None
        self.line = None
        self.queue = []
        self.events = []
        adopt = getattr(driver, "adopt", None)
        for key_ in self.since:
            if adopt is not None and key_ in self.instances and key_ not in self.finished:
                adopt(self.instances[key_])

    def emit(self, event, **fields):
        fields["event"] = event
        self.events.append(fields)

    def set_entry(self, key, **fields):
        self.events.append(entry(key, **fields))

    def take(self):
        events, self.events = self.events, []
        return events

    # --- the plan

    def plan(self, candidates):
        """Batches of keys: instances in flight lead, other down instances shrink the first batch."""
        keyed = [dict(i, name=self.key(i)) for i in self.instances.values()]
        wanted = set(candidates) | self.in_flight
        targets = {k: t for k, t in self.targets.items() if k in wanted}
        scope = [i for i in keyed if i["name"] in wanted or i.get("available") is False]
        batches = rollout.plan(scope, targets, self.limit, self.p["order"] or None, self.replication)
        if not self.resumed:
            self.total = sum(len(b) for b in batches)
        return [b for b in batches if b]

    def carry(self):
        """What the next round of this roll-out needs (JSON: the action plugin hands it back)."""
        return {
            "started": self.started,
            "durations": self.durations,
            "done": self.done,
            "total": self.total,
            "seen": {k: list(v) for k, v in self.last_seen.items()},
            "changed_at": self.changed_at,
            "since": self.since,
            "finished": self.finished,
            "room_since": self.room_since,
            "pause_until": self.pause_until,
        }

    def landed(self, keys):
        """Repaves an earlier round started that ended between two rounds (found on their target)."""
        now = self.clock()
        for key in keys:
            state = {"state": "done", "phase": "Available", "message": "running its target", "step": None}
            seconds = now - float(self.since.get(key) or now)
            self.durations.append(seconds)
            self.finish(key, state, seconds)
            self.progress(key, state)

    def share(self, started, timeout):
        """This round's share of a wait that began at ``started`` (across rounds) and lasts ``timeout``."""
        return Rounds.span(started, timeout, self.round_end)

    def now(self):
        return datetime.datetime.fromtimestamp(self.clock(), datetime.timezone.utc)

    def decide(self, key, now):
        """``repave.apply_decision`` for one planned instance at ``now``."""
        estimate = rollout.estimate_batch_seconds(self.durations, self.p["batch_estimate"])
        window = self.windows.get(key)
        named = self.instances[key].get("name") in self.named
        # Planned means a repave is pending, also toward an explicit revision the drift report (which
        # compares with the tip) calls current.
        found = dict(self.due.get(key) or {}, action=repave.ACTION_REPAVE)
        decision = repave.apply_decision(found, self.p["opt_in"], named, window, now, estimate)
        if (
            decision["held"] == repave.CLOSED
            and window is not None
            and window.next_fit(now, estimate) is None
        ):
            self.emit(
                "warning",
                text="a batch is expected to take %ds, longer than the window %s is open: no batch will "
                "start in it; widen the window or lower batch_estimate" % (estimate, window.describe()),
            )
        return decision

    def sort_out(self, batch, now):
        """``(may start, held)`` of a batch at ``now``: instances in flight are always looked after;
        the others start only as ``repave.apply_decision`` allows, and each gets its reason."""
        start, held = [], {}
        for key in batch:
            if key in self.in_flight:
                start.append(key)
                continue
            decision = self.decide(key, now)
            if decision["start"]:
                start.append(key)
                self.set_entry(key, applied_by=decision["by"], held=None, held_why=None)
            else:
                held[key] = decision
                self.set_entry(
                    key,
                    result="pending",
                    applied_by=None,
                    held=decision["held"],
                    held_why=decision["why"],
                    current_apply=iso(decision["at"]),
                )
        return start, held

    def predict(self, batches):
        """Check mode: what would start now, and when the rest would. Returns the events."""
        now = self.now()
        starts_now, upcoming = [], []
        for index, batch in enumerate(batches):
            for key in batch:
                self.set_entry(key, batch=index)
            start, held = self.sort_out(batch, now)
            upcoming += [d["at"] for d in held.values() if d["at"] is not None]
            for key in start:
                if key in self.in_flight:
                    self.set_entry(key, result="in-flight")
                else:
                    self.set_entry(key, result="would-repave")
                    self.emit("write", key=key, predicted=True)
                    if index == 0:
                        starts_now.append(key)
        self.emit(
            "result",
            fields={
                "starts_now": starts_now,
                "next_window": iso(min(upcoming)) if upcoming else None,
                "window": window_view(self.shown_window, now),
            },
        )
        return self.take()

    # --- the run

    def run(self, batches):
        """Run every batch that may start; returns the events, the last a ``result`` with ``pending``
        (the keys left for the next window). Raises ``RolloutHalted`` (with the events) when it stops."""
        queue = self.queue = [list(b) for b in batches]
        if not self.resumed:
            for index, batch in enumerate(queue):
                for key in batch:
                    self.set_entry(key, batch=index)
        try:
            pending = self.run_queue(queue)
        except RoundOver:
            self.emit("round", state=self.carry())
            return self.take()
        self.line = self.fleet_text({})
        for key in pending:
            self.set_entry(key, result="pending")
        self.emit("result", fields={"window": window_view(self.shown_window, self.now()), "pending": pending})
        return self.take()

    def pause(self):
        """batch_pause between two batches, across rounds (``pause_until``)."""
        if self.pause_until is None:
            return
        now = self.clock()
        share = self.share(now, float(self.pause_until) - now)
        nap(share.pause(share.timeout, now))
        if not share.expired(self.clock()):
            self.line = self.fleet_text({}, "pausing %ss between batches" % self.p["batch_pause"])
            raise RoundOver()
        self.pause_until = None

    def run_queue(self, queue):
        pending = []
        upcoming = []
        first = True
        while queue:
            batch = queue.pop(0)
            if not first and self.p["batch_pause"]:
                self.pause_until = self.clock() + float(self.p["batch_pause"])
            first = False
            try:
                self.pause()
            except RoundOver:
                queue.insert(0, batch)
                raise
            # Nothing starts that apply_decision holds back; repaves an earlier run started are seen through.
            batch, held = self.sort_out(batch, self.now())
            pending += [k for k in held if k not in pending]
            upcoming += [d["at"] for d in held.values() if d["at"] is not None]
            self.emit("result", fields={"next_window": iso(min(upcoming)) if upcoming else None})
            if not batch:
                continue
            batch, deferred = self.admit(batch)
            if deferred:
                queue.insert(0, deferred)
            if not self.p.get("wait", True):
                # Start what may start now and return; a later run with the same options continues.
                self.start_batch(batch)
                pending += [k for b in queue for k in b if k not in pending]
                break
            try:
                self.run_batch(batch)
            except RoundOver:
                queue.insert(0, batch)
                raise
        return pending

    def down_now(self):
        fresh = self.scope()
        for inst in fresh:
            key = self.key(inst)
            if key in self.instances:
                self.instances[key] = inst
        down = [self.key(i) for i in fresh if not i.get("available")]
        if self.peers is not None:
            groups = {self.replication.get(k, k) for k in self.instances}
            for inst in self.peers():
                key, group = self.key(inst), rollout.replication_group(inst)
                if key not in self.instances and group in groups and not inst.get("available"):
                    self.replication[key] = group
                    down.append(key)
        return down

    def admit(self, batch):
        """``(start now, deferred)``: as many new triggers as the budget and the replication groups
        allow at this moment (``rollout.admit``); waits for room when none may start."""
        start, deferred = rollout.admit(batch, self.down_now(), self.in_flight, self.limit, self.replication)
        if not start and deferred:
            down = self.wait_for_room(batch)
            start, deferred = rollout.admit(batch, down, self.in_flight, self.limit, self.replication)
        return start, deferred

    def wait_for_room(self, batch):
        """Poll until an instance of ``batch`` may start (fewer than max_unavailable down, and no other
        member of its replication group down); halt naming what is down otherwise."""

        def describe(down):
            return "down: %s" % (", ".join(sorted(down or [])) or "none")

        if self.room_since is None:
            self.room_since = self.clock()
        try:
            down, seconds = wait_for(
                self.down_now,
                lambda down: (
                    bool(rollout.admit(batch, down, self.in_flight, self.limit, self.replication)[0]),
                    None,
                ),
                self.p["wait_timeout"],
                self.p["wait_sleep"],
                describe=describe,
                pending="fewer than %d instance(s) to be unavailable (max_unavailable), none of them in "
                "a replication group of %s" % (self.limit, ", ".join(batch)),
                clock=self.clock,
                transient=is_transient,
                first_sleep=FIRST_POLL,
                rounds=self.share(float(self.room_since), self.p["wait_timeout"]),
            )
        except WaitTimeout as exc:
            self.halt(
                "max_unavailable is %d and %d instance(s) stayed unavailable, so nothing more may start: %s"
                % (self.limit, len(exc.last or []), exc)
            )
        if seconds is None:
            self.line = self.fleet_text({}, "waiting for room: %s" % describe(down))
            raise RoundOver()
        self.room_since = None
        return down

    def run_batch(self, batch):
        if not batch:
            return
        insts = [self.instances[k] for k in batch]
        states = {}
        since = self.since
        now = self.clock()
        for key in batch:
            since.setdefault(key, now)
        share = self.share(rollout.batch_started(since, batch), self.p["wait_timeout"])
        self.fleet_line_at = None  # each batch opens with a fleet line

        def poll():
            for inst in insts:
                key = self.key(inst)
                if (states.get(key) or {}).get("state") in FINISHED:
                    continue
                since.setdefault(key, self.clock())
                state = self.driver.advance(inst, self.targets[key])
                if state.get("changed"):
                    self.emit("write", key=key, diff=state.get("diff"))
                if state["state"] in FINISHED:
                    seconds = self.clock() - since[key]
                    if state["state"] == "done":
                        self.durations.append(seconds)
                    self.finish(key, state, seconds)
                states[key] = state
                self.progress(key, state)
            self.fleet_progress(states)
            return states

        def describe(found):
            busy = [(k, s) for k, s in sorted((found or {}).items()) if s["state"] not in FINISHED]
            return "; ".join("%s: %s, %s" % (k, s["phase"], s["message"]) for k, s in busy) or "settled"

        try:
            _found, seconds = wait_for(
                poll,
                lambda found: (all(s["state"] in FINISHED for s in found.values()), None),
                self.p["wait_timeout"],
                self.p["wait_sleep"],
                describe=describe,
                pending="the repave of %s" % ", ".join(batch),
                clock=self.clock,
                transient=is_transient,
                first_sleep=FIRST_POLL,
                rounds=share,
            )
        except WaitTimeout as exc:
            self.timed_out(insts, states, exc)
        if seconds is None:
            self.line = self.fleet_text(states, "batch %s" % ", ".join(batch))
            raise RoundOver()
        failed = [k for k in batch if states[k]["state"] == "failed"]
        if failed and self.p["halt_on_failure"]:
            self.halt(
                "repave failed, halting the roll-out (halt_on_failure): %s"
                % "; ".join("%s: %s" % (k, states[k]["message"]) for k in failed)
            )
        for key in failed:
            self.emit("warning", text="repave of %s failed: %s" % (key, states[key]["message"]))

    def start_batch(self, batch):
        """wait=false: one step for each instance of the batch, no waiting."""
        failed = []
        for key in batch:
            state = self.driver.advance(self.instances[key], self.targets[key])
            if state.get("changed"):
                self.emit("write", key=key, diff=state.get("diff"))
            if state["state"] in FINISHED:
                self.finish(key, state, 0.0)
                if state["state"] == "failed":
                    failed.append(key)
            else:
                self.set_entry(key, result="in-flight", message=state["message"])
            self.progress(key, state)
        if failed and self.p["halt_on_failure"]:
            self.halt("repave failed (halt_on_failure): %s" % "; ".join(failed))

    def halt(self, msg):
        """Stop the roll-out; what had not started yet is reported pending."""
        for batch in self.queue:
            for key in batch:
                self.set_entry(key, result="pending")
        raise RolloutHalted(msg, self.take())

    def finish(self, key, state, seconds):
        self.finished[key] = state["state"]
        fields = {"duration": round(seconds, 3)}
        if state["state"] == "done":
            self.done += 1
            fields["result"] = "repaved"
            if state.get("phase"):
                fields["phase"] = state["phase"]
            inst = self.instances[key]
            if inst.get("opt_in") and self.driver.set_opt_in(inst, None):
                # The opt-in belonged to this pending repave, which is applied now (as RDS clears it).
                fields["opt_in"] = None
                self.emit("opt-in", key=key, value=None)
        else:
            fields.update(result="failed", message=state["message"])
        self.set_entry(key, **fields)

    def progress(self, key, state):
        seen = (state["state"], state["phase"], state.get("step"), state.get("message"))
        if self.last_seen.get(key) == seen:
            return
        self.last_seen[key] = seen
        self.changed_at[key] = self.clock()
        percent = int(100 * self.done / self.total) if self.total else 100
        record = {
            "seconds": round(self.clock() - self.started, 3),
            "name": key,
            "state": state["state"],
            "phase": state["phase"],
            "step": state.get("step"),
            "done": self.done,
            "total": self.total,
            "percent": percent,
        }
        self.emit("progress", record=record)
        if self.log is not None:
            self.log(
                "repave %s: %s, %s (step %s); fleet %d/%d done (%d%%)"
                % (key, state["state"], state["phase"], state.get("step"), self.done, self.total, percent)
            )

    def busy(self, states):
        return [
            "%s: %s%s" % (k, s["phase"], " (%s)" % s["step"] if s.get("step") else "")
            for k, s in sorted(states.items())
            if s["state"] not in FINISHED
        ]

    def fleet_text(self, states, phase=None):
        """The fleet line: counts, what is repaving (phase, step), what waits, elapsed."""
        failed = sum(1 for s in self.finished.values() if s == "failed")
        waiting = sum(len(b) for b in self.queue)
        return rollout.fleet_line(
            self.done,
            self.total,
            self.busy(states),
            failed,
            waiting,
            self.clock() - self.started,
            phase,
        )

    def fleet_progress(self, states):
        """Every FLEET_LINE_EVERY seconds: the fleet's counts, what is repaving (phase, step) and what
        waits, with the time since the roll-out started."""
        now = self.clock()
        if self.fleet_line_at is not None and now - self.fleet_line_at < FLEET_LINE_EVERY:
            return
        self.fleet_line_at = now
        busy = self.busy(states)
        failed = sum(1 for s in states.values() if s["state"] == "failed")
        waiting = sum(len(b) for b in self.queue)
        percent = int(100 * self.done / self.total) if self.total else 100
        elapsed = now - self.started
        record = {
            "seconds": round(elapsed, 3),
            "name": None,
            "state": "fleet",
            "phase": None,
            "step": None,
            "done": self.done,
            "total": self.total,
            "percent": percent,
            "repaving": busy,
            "failed": failed,
            "waiting": waiting,
        }
        self.emit("progress", record=record)
        if self.log is not None:
            self.log(rollout.fleet_line(self.done, self.total, busy, failed, waiting, elapsed))

    def timed_out(self, insts, states, exc):
        stuck = []
        verdicts = set()
        now = self.clock()
        for inst in insts:
            key = self.key(inst)
            state = states.get(key) or {"state": "working", "phase": "unknown", "message": "never observed"}
            if state["state"] in FINISHED:
                continue
            quiet = now - self.changed_at.get(key, self.started)
            verdict = rollout.stall_verdict(quiet, self.p["wait_timeout"], state.get("step"))
            verdicts.add(verdict.split(":")[0])
            self.set_entry(
                key, result="timed-out", message=state["message"], stuck=verdict.startswith("stuck")
            )
            text = "%s (target %s): phase %s, %s; %s" % (
                key,
                self.targets[key]["revision"],
                state["phase"],
                state["message"],
                verdict,
            )
            hint = getattr(self.driver, "failure_hint", None)
            if hint is not None:
                advice = hint(inst, self.targets[key])
                if advice:
                    text += "; %s" % advice
            stuck.append(text)
        waiting = [k for b in self.queue for k in b]
        self.halt(
            "timed out after %ss waiting for the repave of %d instance(s) (%s): %s%s"
            % (
                self.p["wait_timeout"],
                len(stuck),
                " and ".join(sorted(verdicts)) or "stuck",
                "; ".join(stuck),
                "; not started: %s" % ", ".join(waiting) if waiting else "",
            )
        )
