"""The bake wait's runner with parameters, a sequence of observed VMs and the screenshots it asked for."""

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal
from ansible_collections.goldenimage.pipeline.plugins.modules import bake_wait

from tests.unit.plugins.modules import support
from tests.unit.plugins.modules.support import Clock


def params(**overrides):
    base = {"name": "vm", "namespace": "ns", "wait_sleep": 1}
    return support.validated(bake_wait.argument_spec(), dict(base, **overrides))


def vm(status):
    return {"metadata": {"name": "vm"}, "status": {"printableStatus": status}} if status else None


def call(clock, statuses, **overrides):
    states = iter(vm(s) for s in statuses)
    last = [None]

    def fetch():
        last[0] = next(states, last[0])
        return last[0]

    return bake_wait.BakeWait(params(**overrides), fetch, clock=clock, sleeper=clock.sleep).run()


def test_each_status_once_then_done_on_stopped():
    clock = Clock()
    first = call(clock, ["Provisioning"])
    assert first["line"] == "VM ns/vm: Provisioning after 0s" and first["done"] is False
    second = call(clock, ["Provisioning", "Provisioning", "Running"], **first["resume"])
    assert second["line"] == "VM ns/vm: Running after 2s"
    done = call(clock, ["Stopped"], **second["resume"])
    assert done["done"] is True and done["line"].startswith("VM ns/vm: Stopped after ")


def test_the_console_is_followed_while_running_and_a_stop_error_fails():
    clock = Clock()
    running = call(clock, ["Running"], console=True, console_dir="/srv/c")
    assert running["screenshot"]["dest"] == "/srv/c/vm-000000s.png" and running["screenshot"]["move_cursor"]
    graphical = {"class": "setup", "base_class": "setup", "confidence": 0.9, "fingerprint": "ab" * 8}
    shown = call(
        clock, ["Running"], console=True, console_dir="/srv/c", screenshot=graphical, **running["resume"]
    )
    assert shown["line"] == "VM ns/vm: Running, console setup (0.9) after 0s"
    # The same screen again is no news: no line, the next screenshot of the same round.
    quiet = call(clock, ["Running"], console=True, screenshot=graphical, **shown["resume"])
    assert quiet["line"] is None and quiet["screenshot"]["previous_fingerprint"] == "ab" * 8
    crash = dict(graphical, **{"class": "stop-error", "base_class": "stop-error"})
    with pytest.raises(PipelineError, match="VM ns/vm shows a Windows stop error on its console"):
        call(clock, ["Running"], console=True, screenshot=crash, **quiet["resume"])


def test_a_status_that_does_not_recover_fails_at_once():
    with pytest.raises(PipelineError, match="VM ns/vm is ErrorUnschedulable after 0s"):
        call(Clock(), ["ErrorUnschedulable"])
    with pytest.raises(PipelineError, match="VM ns/vm is not found after 0s"):
        call(Clock(), [None])


def test_timeout_names_the_last_status():
    clock = Clock()
    first = call(clock, ["Running"], wait_timeout=5)
    with pytest.raises(PipelineError) as caught:
        call(clock, ["Running"], wait_timeout=5, timeout_hint="Raise it.", **first["resume"])
    assert caught.value.msg.startswith("timed out after 5s waiting for VM ns/vm to stop")
    assert caught.value.msg.endswith("last seen status Running. Raise it.")


def test_zero_timeout_is_refused_before_anything_is_read():
    with pytest.raises(Refusal, match="option wait_timeout"):
        bake_wait.BakeWait(params(wait_timeout=0), None).run()


@pytest.mark.parametrize("stuck_after", [0, -5])
def test_a_zero_or_negative_stuck_after_is_refused_before_anything_is_read(stuck_after):
    with pytest.raises(Refusal, match="option stuck_after"):
        bake_wait.BakeWait(params(stuck_after=stuck_after), None).run()
