"""The DataVolume wait's runner, called with parameters and a sequence of observed DataVolumes."""

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal
from ansible_collections.goldenimage.pipeline.plugins.modules import datavolume_wait

from tests.unit.plugins.modules import support


def Clock():
    return support.Clock(1000.0)


def params(**overrides):
    return support.validated(
        datavolume_wait.argument_spec(), dict({"name": "x", "namespace": "ns"}, **overrides)
    )


def dv(phase, progress="N/A", restarts=0, message=None):
    status = {"phase": phase, "progress": progress, "restartCount": restarts}
    if message:
        status["conditions"] = [{"type": "Running", "status": "False", "message": message}]
    return {"metadata": {"name": "x", "namespace": "ns"}, "status": status}


def runner(seq, clock, check_mode=False, **overrides):
    states = iter(seq)
    last = [None]

    def fetch():
        last[0] = next(states, last[0])
        return last[0]

    return datavolume_wait.DataVolumeWait(
        params(**overrides), fetch, check_mode, clock=clock, sleeper=clock.sleep
    )


def test_rounds_until_succeeded_carry_the_wait():
    clock = Clock()
    first = runner([dv("ImportInProgress", "10.00%")], clock, wait_sleep=5).run()
    assert first["done"] is False and first["changed"] is False
    # The first state is not news by itself: the round runs its 20 s and then reports it.
    assert first["line"] == "DataVolume ns/x: phase ImportInProgress, progress 10.00%, restarts 0 after 20.0s"
    resume = first["resume"]
    # Nothing moves for a round: the call returns after report_every with the same line.
    second = runner([dv("ImportInProgress", "10.00%")], clock, wait_sleep=5, report_every=20, **resume).run()
    assert second["done"] is False and clock.now == 1040.0
    done = runner([dv("Succeeded", "100.0%")], clock, **second["resume"]).run()
    assert done["done"] is True and "phase Succeeded, progress 100.0%" in done["line"]
    assert "resume" not in done


def test_failed_is_terminal_with_the_importer_reason():
    clock = Clock()
    with pytest.raises(PipelineError) as caught:
        runner([dv("Failed", "0.00%", 2, "checksum mismatch")], clock, failed_hint="Fix the source.").run()
    assert caught.value.msg == (
        "DataVolume ns/x failed to import (phase Failed, progress 0.00%, restartCount 2): checksum mismatch. "
        "Fix the source."
    )


def test_a_dataVolume_that_stays_absent_fails_fast_naming_it():
    clock = Clock()
    with pytest.raises(PipelineError, match=r"DataVolume ns/x does not exist \(read as absent for 10s\)"):
        result = runner([None], clock, wait_sleep=1, absent_timeout=10).run()
        runner([None], clock, wait_sleep=1, absent_timeout=10, **result["resume"]).run()
    assert clock.now - 1000.0 < 30  # not the 30 minutes of the import timeout


def test_timeout_says_stuck_or_still_working():
    clock = Clock()
    first = runner([dv("ImportInProgress", "5.00%")], clock).run()
    with pytest.raises(PipelineError) as caught:
        runner(
            [dv("ImportInProgress", "5.00%")], clock, wait_timeout=10, wait_sleep=5, **first["resume"]
        ).run()
    assert (
        "timed out after 10s waiting for DataVolume ns/x to reach phase Succeeded (stuck:" in caught.value.msg
    )
    assert caught.value.result["stuck"] is True
    clock = Clock()
    first = runner([dv("ImportInProgress", "5.00%")], clock).run()
    moving = [dv("ImportInProgress", "%d.00%%" % n) for n in range(6, 40)]
    result = first
    with pytest.raises(PipelineError) as caught:
        for _round in range(10):
            clock.sleep(3)  # the time between two calls
            result = runner(moving, clock, wait_timeout=10, wait_sleep=2, **result["resume"]).run()
            moving = moving[1:]
    assert "(still working: the state last changed" in caught.value.msg
    assert caught.value.result["stuck"] is False


def test_check_mode_reads_once_and_never_waits():
    clock = Clock()
    result = runner([None], clock, check_mode=True).run()
    assert result["done"] is False and clock.now == 1000.0


@pytest.mark.parametrize("option", ["wait_timeout", "wait_sleep", "report_every"])
def test_zero_durations_are_refused_before_any_read(option):
    def fetch():
        raise AssertionError("read before the inputs were checked")

    wait = datavolume_wait.DataVolumeWait(params(**{option: 0}), fetch)
    with pytest.raises(Refusal, match="option %s" % option):
        wait.run()
