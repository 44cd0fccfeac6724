#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: packer_run
short_description: Run Packer in a work directory, a build printing its step while it runs
version_added: 0.1.0
description:
  - V(version) reads Packer's version and whether it has C(packer init) (1.7.0 and later).
  - V(init) installs the plugins the template declares; it reports a change when one was installed.
  - V(validate) checks the template with the variable file O(var_file); a template Packer refuses fails the
    task with Packer's output.
  - V(build) runs C(packer build). A build takes tens of minutes, so it runs detached, with its output in
    C(packer-build.log) in O(chdir); each call waits at most O(report_every) seconds and returns the build's
    last step (its last C(==>) line) and the elapsed time, and the action plugin of the same name calls it
    again and prints each line until Packer has exited or O(wait_timeout) has passed, when the build is
    stopped and the task fails naming its last step.
  - Runs on the controller (or wherever the task is delegated) and needs Packer there.
author:
  - goldenimage.pipeline maintainers (@goldenimage)
requirements:
  - packer
options:
  command:
    description: What to run.
    type: str
    choices: [version, init, validate, build]
    required: true
  chdir:
    description: The work directory holding the template; required for V(init), V(validate) and V(build).
    type: path
  var_file:
    description: Variable file passed as C(-var-file) to V(validate) and V(build).
    type: str
  binary:
    description: The Packer executable.
    type: str
    default: packer
  environment:
    description: Environment variables for Packer.
    type: dict
    default: {}
  job:
    description: The running build (its process id), from C(resume); set by the action plugin.
    type: int
  wait_timeout:
    description: Seconds a V(build) may take before it is stopped and the task fails.
    type: int
    default: 7200
extends_documentation_fragment:
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.wait_rounds
attributes:
  check_mode:
    support: partial
    details:
      - V(version) and V(validate) run in check mode (they change nothing); V(init) and V(build) report
        what they would do.
  diff_mode:
    support: none
  idempotent:
    support: partial
    details:
      - V(version) and V(validate) never report a change.
      - V(build) is not idempotent. Each call runs C(packer build) again and reports a change, and its
        C(packer-build.log) and C(packer-build.rc) in O(chdir) are replaced; what the template writes
        elsewhere is up to Packer (a builder whose output directory exists refuses to start without
        C(-force), which the module never passes). The packer_build role calls it only when the revision
        has no manifest yet.
"""

EXAMPLES = r"""
- name: Run Packer (boots the build VM, provisions and seals it), printing its step at least every 20 s
  goldenimage.pipeline.packer_run:
    command: build
    chdir: /srv/baked-images/.work-v20261201-2404
    var_file: build.pkrvars.json
    environment:
      CHECKPOINT_DISABLE: "1"
    wait_timeout: 7200
"""

RETURN = r"""
version:
  description: Packer's version (V(version)).
  returned: with O(command=version)
  type: str
  sample: 1.6.6
has_init:
  description: Whether this Packer has C(packer init) (V(version)).
  returned: with O(command=version)
  type: bool
stdout:
  description: Packer's output (V(version), V(init), V(validate)), or the end of a build's output.
  returned: always
  type: str
rc:
  description: Packer's exit status.
  returned: when Packer has exited
  type: int
done:
  description: Whether the build has finished (V(build)).
  returned: with O(command=build)
  type: bool
line:
  description: The build's progress line of the last round.
  returned: with O(command=build)
  type: str
  sample: "Packer build in /srv/work: qemu: Waiting for SSH to become available... after 95s"
resume:
  description: The options that continue the wait for the build in another call.
  returned: while the build runs
  type: dict
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import packer
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked._packer import Packer
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import rounds as rounds_
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common._wait import RoundRunner, Wait
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import (
    PipelineError,
    run_module,
)


def argument_spec():
    spec = rounds_.round_arg_spec(timeout=7200)
    spec.update(
        command={"type": "str", "choices": ["version", "init", "validate", "build"], "required": True},
        chdir={"type": "path"},
        var_file={"type": "str"},
        binary={"type": "str", "default": "packer"},
        environment={"type": "dict", "default": {}},
        job={"type": "int"},
    )
    return spec


class PackerRun(Wait):
    def __init__(self, params, tool, check_mode=False, clock=time.time, sleeper=None):
        self.p = params
        self.tool = tool
        self.check_mode = check_mode
        self.clock = clock
        self.sleeper = sleeper

    def run(self):
        return getattr(self, self.p["command"])()

    def short(self, args):
        rc, out, err = self.tool.run(args)
        if rc != 0:
            raise PipelineError(
                "packer %s failed (rc %d): %s" % (" ".join(args), rc, (err or out).strip()), rc=rc, stdout=out
            )
        return out

    def var_args(self):
        return ["-var-file=%s" % self.p["var_file"]] if self.p["var_file"] else []

    def version(self):
        out = self.short(["version"])
        semver = packer.version(out)
        return {
            "changed": False,
            "version": semver,
            "has_init": packer.has_init(semver),
            "stdout": out,
            "rc": 0,
        }

    def init(self):
        if self.check_mode:
            return {"changed": False, "stdout": "", "skipped_in_check_mode": True}
        out = self.short(["init", "."])
        return {"changed": "Installed plugin" in out, "stdout": out, "rc": 0}

    def validate(self):
        out = self.short(["validate"] + self.var_args() + ["."])
        return {"changed": False, "stdout": out, "rc": 0}

    def build(self):
        p = self.p
        now = self.clock()
        rounds = rounds_.from_params(p, now)
        if self.check_mode:
            return {
                "changed": True,
                "done": False,
                "line": "Packer build in %s: would run (check mode)" % p["chdir"],
            }
        job = p["job"]
        if job is None:
            job = self.tool.start(["build", "-color=false"] + self.var_args() + ["."])
        self.rounds, self.job = rounds, job
        return RoundRunner(rounds, p["wait_sleep"], self.clock, self.sleeper).run(self)

    # The hooks of the build's wait: the process's exit status and its output so far.
    def observe(self):
        return self.tool.state()

    def state(self, seen):
        return packer.phase(seen[1]) or ""

    def verdict(self, seen, now):
        rc, _log = seen
        if rc is None:
            return False, not self.tool.alive(self.job) and "gone"
        return rc == 0, rc != 0 and "failed"

    def line(self, seen, now):
        rc, log = seen
        return packer.line(self.p["chdir"], log, self.rounds.elapsed(now), running=rc is None)

    def failed(self, seen, failure, now):
        rc, log = seen
        if failure == "gone":
            return PipelineError(
                "packer build in %s stopped without an exit status (its process %d is gone); "
                "output ends with:\n%s" % (self.p["chdir"], self.job, packer.tail(log)),
                line=self.line(seen, now),
            )
        return PipelineError(
            packer.failed_message(self.p["chdir"], rc, log),
            rc=rc,
            line=self.line(seen, now),
            stdout=packer.tail(log),
        )

    def timed_out(self, seen, now, stuck, words):
        self.tool.stop(self.job)
        return PipelineError(
            packer.timeout_message(self.p["chdir"], self.p["wait_timeout"], words, seen[1]),
            line=self.line(seen, now),
            stdout=packer.tail(seen[1]),
        )

    def report(self, seen, now, done, going_on):
        if done:
            return {
                "changed": True,
                "done": True,
                "rc": 0,
                "line": self.line(seen, now),
                "stdout": packer.tail(seen[1]),
            }
        return {
            "changed": True,
            "done": False,
            "line": self.line(seen, now),
            "resume": dict(self.rounds.resume(), job=self.job),
        }


# Every command but version runs in the work directory, checked by Ansible before the runner starts.
ARGUMENT_RULES = dict(
    required_if=[("command", command, ("chdir",)) for command in ("init", "validate", "build")]
)


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True, **ARGUMENT_RULES)
    p = module.params
    tool = Packer(module, p["binary"], p["chdir"], p["environment"])
    run_module(module, lambda: PackerRun(p, tool, module.check_mode).run())


if __name__ == "__main__":
    main()
