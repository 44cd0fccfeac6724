"""packer_run's build rounds with a stand-in for the Packer adapter and a fake clock."""

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.modules import packer_run

from tests.unit.plugins.modules import support
from tests.unit.plugins.modules.support import Clock


class Build:
    """A build whose output grows one step per read; it exits with ``rc`` after the last."""

    def __init__(self, steps, rc=0):
        self.steps, self.rc, self.reads, self.started, self.stopped = steps, rc, 0, [], []

    def start(self, args):
        self.started.append(args)
        return 4242

    def state(self):
        self.reads += 1
        shown = self.steps[: self.reads]
        log = "".join("==> %s\n" % s for s in shown)
        return (self.rc if self.reads > len(self.steps) else None), log

    def alive(self, pid):
        return True

    def stop(self, pid):
        self.stopped.append(pid)


def params(**overrides):
    base = {"command": "build", "chdir": "/w", "var_file": "v.json", "wait_sleep": 1}
    return support.validated(packer_run.argument_spec(), dict(base, **overrides))


def test_a_build_reports_each_step_then_done():
    clock, build = Clock(), Build(["qemu: Starting VM", "qemu: Waiting for SSH"])
    first = packer_run.PackerRun(params(), build, clock=clock, sleeper=clock.sleep).run()
    assert build.started == [["build", "-color=false", "-var-file=v.json", "."]]
    assert first["done"] is False and first["line"] == "Packer build in /w: qemu: Starting VM after 0s"
    second = packer_run.PackerRun(params(**first["resume"]), build, clock=clock, sleeper=clock.sleep).run()
    assert "qemu: Waiting for SSH" in second["line"] and len(build.started) == 1
    done = packer_run.PackerRun(params(**second["resume"]), build, clock=clock, sleeper=clock.sleep).run()
    assert done["done"] is True and done["rc"] == 0


def test_a_failed_build_names_its_last_step():
    clock, build = Clock(), Build(["qemu: Provisioning"], rc=1)
    first = packer_run.PackerRun(params(), build, clock=clock, sleeper=clock.sleep).run()
    with pytest.raises(PipelineError, match=r"failed \(rc 1\) at qemu: Provisioning"):
        packer_run.PackerRun(params(**first["resume"]), build, clock=clock, sleeper=clock.sleep).run()


def test_a_build_past_its_timeout_is_stopped():
    clock, build = Clock(), Build(["qemu: Waiting for SSH"] * 1000)
    build.state = lambda: (None, "==> qemu: Waiting for SSH\n")
    first = packer_run.PackerRun(params(wait_timeout=30), build, clock=clock, sleeper=clock.sleep).run()
    with pytest.raises(PipelineError, match="timed out after 30s waiting for packer build in /w"):
        result = first
        for _round in range(5):
            result = packer_run.PackerRun(
                params(wait_timeout=30, **result["resume"]), build, clock=clock, sleeper=clock.sleep
            ).run()
    assert build.stopped == [4242]


def test_every_command_but_version_needs_the_work_directory():
    spec, rules = packer_run.argument_spec(), packer_run.ARGUMENT_RULES
    assert support.rejected(spec, rules, {"command": "version"}) == []
    for command in ("init", "validate", "build"):
        assert support.rejected(spec, rules, {"command": command}) == [
            "command is %s but all of the following are missing: chdir" % command
        ]
        assert support.rejected(spec, rules, {"command": command, "chdir": "/w"}) == []
