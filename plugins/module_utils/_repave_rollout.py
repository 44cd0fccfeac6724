# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Running a repave plan: batches through a driver, never more than max_unavailable down, inside the window.

The plan itself is pure (rollout.py); this file owns the clock and the waits. Before a batch starts the
scope is listed again and only as many instances are triggered as the budget allows right now (an
instance that failed or went down meanwhile counts), so the limit holds even when the world moved since
the plan was made. Instances already repaving (an interrupted run) are waited on, never triggered.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import time

from ansible_collections.goldenimage.pipeline.plugins.module_utils import rollout
from ansible_collections.goldenimage.pipeline.plugins.module_utils._kube import FIRST_POLL, is_transient
from ansible_collections.goldenimage.pipeline.plugins.module_utils._wait import WaitTimeout, wait_for
from ansible_collections.goldenimage.pipeline.plugins.module_utils.errors import PipelineError

FINISHED = ("done", "failed")
# A fleet line (counts, what is repaving and where, elapsed) at least this often while batches run.
FLEET_LINE_EVERY = 30.0


def utcnow():
    return datetime.datetime.now(datetime.timezone.utc)


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
    the run's result). ``log`` (optional) is called with each progress line as it happens."""

    def __init__(self, driver, params, instances, key, scope, targets, in_flight, limit, window, log=None):
        self.driver = driver
        self.p = params
        self.key = key
        self.scope = scope
        self.instances = {key(i): i for i in instances}
        self.targets = targets
        self.in_flight = set(in_flight)
        self.limit = limit
        self.shown_window = window
        # opt_in immediate applies now, outside any window (RDS's immediate does the same).
        self.window = window if self.p["opt_in"] != "immediate" else None
        self.log = log
        self.durations = []
        self.started = time.monotonic()
        self.done = 0
        self.total = 0
        self.last_seen = {}
        self.changed_at = {}
        self.fleet_line_at = None
        self.queue = []
        self.events = []

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
        batches = rollout.plan(scope, targets, self.limit, self.p["order"] or None)
        self.total = sum(len(b) for b in batches)
        return [b for b in batches if b]

    def fits_now(self, now):
        """``(True, None)`` when a batch may start now, else ``(False, next opening)``."""
        if self.window is None:
            return True, None
        estimate = rollout.estimate_batch_seconds(self.durations, self.p["batch_estimate"])
        if self.window.fits(now, estimate):
            return True, None
        following = self.window.next_fit(now, estimate)
        if following is None:
            self.emit(
                "warning",
                text="a batch is expected to take %ds, longer than the window %s is open: no batch will "
                "start in it; widen the window or lower batch_estimate" % (estimate, self.window.describe()),
            )
            return False, self.window.next_open(now)
        return False, following

    def predict(self, batches):
        """Check mode: what would start now, and when the rest would. Returns the events."""
        now = utcnow()
        fits, next_window = self.fits_now(now)
        first = batches[0] if batches else []
        self.emit(
            "result",
            fields={
                "starts_now": [k for k in first if k not in self.in_flight] if fits else [],
                "next_window": iso(next_window),
                "window": window_view(self.shown_window, now),
            },
        )
        for index, batch in enumerate(batches):
            for key in batch:
                if key in self.in_flight:
                    self.set_entry(key, batch=index, result="in-flight")
                else:
                    self.set_entry(key, batch=index, result="would-repave" if fits else "pending")
                    self.emit("write", key=key, predicted=True)
        return self.take()

    # --- the run

    def run(self, batches):
        """Run every batch that may start; returns the events, the last a ``result`` with ``pending``
        (the keys left for the next window). Raises ``RolloutHalted`` (with the events) when it stops."""
        queue = self.queue = [list(b) for b in batches]
        for index, batch in enumerate(queue):
            for key in batch:
                self.set_entry(key, batch=index)
        pending = []
        first = True
        while queue:
            batch = queue.pop(0)
            if not first and self.p["batch_pause"]:
                time.sleep(self.p["batch_pause"])
            first = False
            fits, next_window = self.fits_now(utcnow())
            if not fits:
                # Nothing new starts; repaves an earlier run started are still seen through.
                rest = batch + [k for b in queue for k in b]
                self.run_batch([k for k in rest if k in self.in_flight])
                pending = [k for k in rest if k not in self.in_flight]
                self.emit("result", fields={"next_window": iso(next_window)})
                break
            batch, deferred = self.admit(batch)
            if deferred:
                queue.insert(0, deferred)
            if not self.p.get("wait", True):
                # Start what may start now and return; a later run with the same options continues.
                self.start_batch(batch)
                pending = [k for b in queue for k in b]
                break
            self.run_batch(batch)
        for key in pending:
            self.set_entry(key, result="pending")
        self.emit("result", fields={"window": window_view(self.shown_window, utcnow()), "pending": pending})
        return self.take()

    def down_now(self):
        fresh = self.scope()
        for inst in fresh:
            key = self.key(inst)
            if key in self.instances:
                self.instances[key] = inst
        return [self.key(i) for i in fresh if not i.get("available")]

    def admit(self, batch):
        """``(start now, deferred)``: as many new triggers as the budget allows at this moment."""
        down = set(self.down_now())
        new = [k for k in batch if k not in self.in_flight and k not in down]
        room = self.limit - len(down)
        if len(new) <= room:
            return batch, []
        if room < 1 and len(new) == len(batch):
            down = set(self.wait_for_room())
            room = self.limit - len(down)
            new = [k for k in batch if k not in down]
        keep = set(new[: max(room, 0)])
        return [k for k in batch if k not in new or k in keep], [k for k in new if k not in keep]

    def wait_for_room(self):
        """Poll until fewer than max_unavailable instances are down; halt naming them otherwise."""

        def describe(down):
            return "down: %s" % (", ".join(sorted(down or [])) or "none")

        try:
            down = wait_for(
                self.down_now,
                lambda down: (len(down) < self.limit, None),
                self.p["wait_timeout"],
                self.p["wait_sleep"],
                describe=describe,
                pending="fewer than %d instance(s) to be unavailable (max_unavailable)" % self.limit,
                transient=is_transient,
                first_sleep=FIRST_POLL,
            )
        except WaitTimeout as exc:
            self.halt(
                "max_unavailable is %d and %d instance(s) stayed unavailable, so nothing more may start: %s"
                % (self.limit, len(exc.last or []), exc)
            )
        return down

    def run_batch(self, batch):
        if not batch:
            return
        insts = [self.instances[k] for k in batch]
        states = {}
        since = {}
        self.fleet_line_at = None  # each batch opens with a fleet line

        def poll():
            for inst in insts:
                key = self.key(inst)
                if (states.get(key) or {}).get("state") in FINISHED:
                    continue
                since.setdefault(key, time.monotonic())
                state = self.driver.advance(inst, self.targets[key])
                if state.get("changed"):
                    self.emit("write", key=key)
                if state["state"] in FINISHED:
                    seconds = time.monotonic() - since[key]
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
            wait_for(
                poll,
                lambda found: (all(s["state"] in FINISHED for s in found.values()), None),
                self.p["wait_timeout"],
                self.p["wait_sleep"],
                describe=describe,
                pending="the repave of %s" % ", ".join(batch),
                transient=is_transient,
                first_sleep=FIRST_POLL,
            )
        except WaitTimeout as exc:
            self.timed_out(insts, states, exc)
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
                self.emit("write", key=key)
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
        self.changed_at[key] = time.monotonic()
        percent = int(100 * self.done / self.total) if self.total else 100
        record = {
            "seconds": round(time.monotonic() - self.started, 3),
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

    def fleet_progress(self, states):
        """Every FLEET_LINE_EVERY seconds: the fleet's counts, what is repaving (phase, step) and what
        waits, with the time since the roll-out started."""
        now = time.monotonic()
        if self.fleet_line_at is not None and now - self.fleet_line_at < FLEET_LINE_EVERY:
            return
        self.fleet_line_at = now
        busy = sorted((k, s) for k, s in states.items() if s["state"] not in FINISHED)
        failed = sum(1 for s in states.values() if s["state"] == "failed")
        waiting = sum(len(b) for b in self.queue)
        percent = int(100 * self.done / self.total) if self.total else 100
        elapsed = time.monotonic() - self.started
        record = {
            "seconds": round(elapsed, 3),
            "name": None,
            "state": "fleet",
            "phase": None,
            "step": None,
            "done": self.done,
            "total": self.total,
            "percent": percent,
            "repaving": [
                "%s: %s%s" % (k, s["phase"], " (%s)" % s["step"] if s.get("step") else "") for k, s in busy
            ],
            "failed": failed,
            "waiting": waiting,
        }
        self.emit("progress", record=record)
        if self.log is not None:
            self.log(
                "fleet: %d/%d repaved (%d%%), %d repaving%s, %d failed, %d not started; elapsed %ds"
                % (
                    self.done,
                    self.total,
                    percent,
                    len(busy),
                    " (%s)" % "; ".join(record["repaving"]) if busy else "",
                    failed,
                    waiting,
                    round(elapsed),
                )
            )

    def timed_out(self, insts, states, exc):
        stuck = []
        verdicts = set()
        now = time.monotonic()
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
