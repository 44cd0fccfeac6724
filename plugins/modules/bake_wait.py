#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: bake_wait
short_description: Wait for a Windows bake's VM to seal itself and stop, following its console
version_added: 0.1.0
description:
  - Waits until the KubeVirt C(VirtualMachine) O(namespace)/O(name) is C(Stopped), which sysprep does when it
    has sealed the disk (whether it is sealed is M(goldenimage.pipeline.seal_verify)'s question).
  - A status the VM does not come back from by itself (C(ErrorUnschedulable), C(ErrImagePull),
    C(ImagePullBackOff), C(ErrorPvcNotFound), C(ErrorDataVolumeNotFound), C(DataVolumeError),
    C(CrashLoopBackOff), C(Unknown)), or a VM that is gone, fails the wait at once.
  - With O(console=true), while the VM is C(Running) the wait follows its console in rounds, one
    screenshot (M(goldenimage.pipeline.console_screenshot), taken by the action plugin) every O(wait_sleep)
    seconds until there is news (a new class, a screenshot that failed, a fatal screen, a first unchanged
    notice, a new picture after half of O(stuck_after)). A Windows stop error fails the bake, and so does
    console text in two screenshots in a row after Windows had drawn its screens (the installer CD booting
    before the disk). After 3 failed screenshots in a row, or 100 rounds, the wait goes on with the VM's
    status only.
  - Long waits talk. Each call waits at most O(report_every) seconds, and returns a progress C(line) (the
    status, what the console showed, the elapsed time) on news or when the round is over; the action plugin
    calls it again with C(resume) and prints each line.
  - The time-out names the last status and says whether the VM was C(stuck) or C(still working).
  - Never writes anything to the cluster; screenshots that ended a round are saved under O(console_dir).
author:
  - goldenimage.pipeline maintainers (@goldenimage)
requirements:
  - Pillow (on the controller, with O(console=true))
options:
  name:
    description: Name of the VirtualMachine.
    type: str
    required: true
  namespace:
    description: Namespace of the VirtualMachine.
    type: str
    required: true
  console:
    description: Follow the console with screenshots while the VM runs.
    type: bool
    default: false
  console_dir:
    description:
      - Directory on the controller for the screenshot that ended each console round, named
        C(<name>-<elapsed seconds>s.png); empty keeps none.
    type: str
    default: ""
  stuck_after:
    description: Seconds of an unchanged screen after which the progress says so (0 never).
    type: int
    default: 1800
  references:
    description:
      - Reference screenshots, a name to a PNG on the controller; a screen like one reads C(match:<name>).
    type: dict
    default: {}
  timeout_hint:
    description: Sentence appended to the time-out message (what to do next).
    type: str
    default: ""
  seen:
    description: The status the previous round showed (from C(resume)); set by the action plugin.
    type: str
  memory:
    description: What the previous rounds remember of the console (from C(resume)); set by the action plugin.
    type: dict
  screenshot:
    description:
      - What the screenshot the previous round asked for showed (class, fingerprint, ...), or C(msg) when it
        failed; set by the action plugin.
    type: dict
  wait_timeout:
    description: Seconds to wait in total for the VM to stop (a bake takes hours).
    type: int
    default: 14400
  wait_sleep:
    description: Seconds between two reads of the VM, and between two screenshots.
    type: float
    default: 30
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.actiongroup_k8s
  - goldenimage.pipeline.wait_rounds
  - goldenimage.pipeline.attributes.wait_only
seealso:
  - module: goldenimage.pipeline.console_screenshot
  - module: goldenimage.pipeline.seal_verify
"""

EXAMPLES = r"""
- name: Wait for the VM to seal itself and stop, following its console
  goldenimage.pipeline.bake_wait:
    name: win11-bake
    namespace: golden-images-build
    console: true
    console_dir: /srv/bake-console
    wait_timeout: 14400
    wait_sleep: 30
  register: bake
"""

RETURN = r"""
done:
  description: Whether the VM is C(Stopped).
  returned: always
  type: bool
status:
  description: The VM's last printableStatus.
  returned: always
  type: str
  sample: Stopped
line:
  description: The progress line of the last round.
  returned: always
  type: str
  sample: "VM golden-images-build/win11-bake: Running, console setup (0.93) after 5400s"
lines:
  description: Every line printed while the task waited (progress, and the notice when screenshots stop).
  returned: always
  type: list
  elements: str
elapsed:
  description: Seconds since the wait began.
  returned: always
  type: int
screenshot:
  description: The options of the screenshot the next round needs (the action plugin takes it).
  returned: when the console is followed and the wait is not over
  type: dict
resume:
  description: The options that continue this wait in another call.
  returned: when the wait is not over
  type: dict
"""

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import rounds as rounds_
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common._object_wait import (
    ObjectWait,
    run_object_wait,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeModule
from ansible_collections.goldenimage.pipeline.plugins.module_utils.windows import bake, console

API_VERSION = "kubevirt.io/v1"


def argument_spec():
    return rounds_.object_arg_spec(
        timeout=14400,
        sleep=30,
        console={"type": "bool", "default": False},
        console_dir={"type": "str", "default": ""},
        stuck_after={"type": "int", "default": 1800},
        references={"type": "dict", "default": {}},
        timeout_hint={"type": "str", "default": ""},
        seen={"type": "str"},
        memory={"type": "dict"},
        screenshot={"type": "dict"},
    )


class BakeWait(ObjectWait):
    """One round; ``fetch()`` reads the VM (None when absent)."""

    @property
    def ref(self):
        return "%s/%s" % (self.p["namespace"], self.p["name"])

    def run(self):
        p = self.p
        now = self.clock()
        self.rounds = rounds_.from_params(p, now, ("stuck_after",))
        memory = dict(p["memory"] or console.bake_memory(p["console"]))
        seen = p["seen"] if p["seen"] is not None else ""
        vm = self.read(None)
        if self.check_mode or not p["wait"]:
            return self.finish(vm, memory, seen, now, bake.line(self.ref, vm, self.rounds.elapsed(now)))
        shot = p["screenshot"]
        if memory["enabled"] and seen == bake.RUNNING:
            if shot is None:
                return self.ask(vm, memory, seen, now)
            if not console.shot_news(memory, shot, now, p["stuck_after"], self.rounds.deadline):
                # No news from the console: a line anyway once report_every has passed since the last.
                line = None
                if now - (memory.get("reported_at") or self.rounds.started) >= p["report_every"]:
                    still = "the console still shows %s" % (memory["class"] or "nothing yet")
                    line = bake.line(self.ref, vm, self.rounds.elapsed(now), still)
                    memory["reported_at"] = now
                self.runner(self.rounds).nap(min(float(p["wait_sleep"]), self.rounds.deadline - now))
                return self.ask(vm, memory, seen, self.clock(), line=line)
            return self.console_round(vm, memory, shot, now)
        return self.status_round(vm, memory, seen, now)

    def console_round(self, vm, memory, shot, now):
        running = bake.status(vm) == bake.RUNNING
        elapsed = self.rounds.elapsed(now)
        line = bake.line(self.ref, vm, elapsed, console.note(shot, memory, running))
        fatal = console.shot_fatal(memory, shot)
        if fatal == "stop-error":
            raise PipelineError(
                console.stop_error_message(self.ref, elapsed, self.p["console_dir"]), line=line
            )
        if fatal == "reinstall":
            raise PipelineError(console.reinstall_message(self.ref, elapsed), line=line)
        memory = console.remember(memory, shot, running)
        memory["round_started"] = None
        notes = []
        why = console.give_up(memory)
        if why:
            memory["enabled"] = False
            notes.append(
                "VM %s: no more console screenshots, %s; waiting for the VM's status only" % (self.ref, why)
            )
        return self.finish(vm, memory, bake.status(vm), now, line, notes)

    def status_round(self, vm, memory, seen, now):
        """Poll the VM's status until it changes, stops or dies, or the round ends."""
        self.first, self.memory = vm, memory
        return self.runner(self.rounds).run(self, vm)

    def state(self, seen):
        return "%s/%s" % (bake.status(seen), self.memory["class"])

    def verdict(self, seen, now):
        return bake.status(seen) == bake.STOPPED, bake.dead(seen)

    def failed(self, seen, failure, now):
        elapsed = self.rounds.elapsed(now)
        return PipelineError(bake.dead_message(self.ref, failure, elapsed), **self.fields(seen, now))

    def timed_out(self, vm, now, stuck, words):
        return PipelineError(
            bake.timeout_message(self.ref, vm, self.p["wait_timeout"], words, self.p["timeout_hint"]),
            stuck=stuck,
            **self.fields(vm, now),
        )

    def report(self, vm, now, done, going_on):
        return self.finish(vm, self.memory, bake.status(vm), now, self.fields(vm, now)["line"])

    def fields(self, vm, now, line=None, notes=()):
        elapsed = self.rounds.elapsed(now)
        return {
            "line": line or bake.line(self.ref, vm, elapsed),
            "notes": list(notes),
            "status": bake.status(vm),
            "elapsed": int(elapsed),
        }

    def finish(self, vm, memory, seen, now, line, notes=()):
        """After a line: stop on what does not recover, on Stopped, on the deadline; else go on."""
        status = bake.status(vm)
        self.rounds.see("%s/%s" % (status, memory["class"]), now)
        memory = dict(memory, reported_at=now)
        fields = self.fields(vm, now, line, notes)
        what = bake.dead(vm)
        if what and not self.check_mode:
            raise self.failed(vm, what, now)
        if status == bake.STOPPED:
            return dict(fields, changed=False, done=True)
        if self.check_mode or not self.p["wait"]:
            return dict(fields, changed=False, done=False)
        if self.rounds.expired(now):
            raise self.timed_out(vm, now, *self.rounds.verdict(now))
        if memory["enabled"] and status == bake.RUNNING:
            return self.ask(vm, memory, status, now, line=line, notes=notes)
        return dict(fields, changed=False, done=False, resume=self.resume(memory, seen))

    def ask(self, vm, memory, seen, now, line=None, notes=()):
        """Go on with a screenshot: a new console round starts unless one is under way."""
        memory = dict(memory)
        if memory["round_started"] is None:
            memory["round_started"] = now
            memory["round_dest"] = (
                "%s/%s-%06ds.png"
                % (self.p["console_dir"].rstrip("/"), self.p["name"], int(self.rounds.elapsed(now)))
                if self.p["console_dir"]
                else None
            )
        request = {
            "name": self.p["name"],
            "namespace": self.p["namespace"],
            # A display Windows put to sleep would read as blank.
            "move_cursor": True,
            "stuck_after": self.p["stuck_after"],
            "references": self.p["references"],
        }
        if memory["print"]:
            request.update(previous_fingerprint=memory["print"], previous_time=memory["since"])
        if memory["round_dest"]:
            request["dest"] = memory["round_dest"]
        return {
            "changed": False,
            "done": False,
            "line": line,
            "notes": list(notes),
            "status": bake.status(vm),
            "elapsed": int(self.rounds.elapsed(now)),
            "screenshot": request,
            "resume": self.resume(memory, seen),
        }

    def resume(self, memory, seen):
        return dict(self.rounds.resume(), memory=memory, seen=seen)


def main():
    module = KubeModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_object_wait(module, BakeWait, API_VERSION, "VirtualMachine")


if __name__ == "__main__":
    main()
