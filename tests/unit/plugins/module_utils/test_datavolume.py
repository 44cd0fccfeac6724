"""The DataVolume wait's rules: only Failed is terminal, an absence that persists fails, the words used."""

from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import datavolume


def dv(phase=None, progress=None, restarts=0, conditions=None):
    status = {"restartCount": restarts}
    if phase:
        status["phase"] = phase
    if progress:
        status["progress"] = progress
    if conditions:
        status["conditions"] = conditions
    return {"metadata": {"name": "x", "namespace": "ns"}, "status": status}


def test_observe_reads_phase_progress_restarts_and_the_running_reason():
    seen = datavolume.observe(
        dv(
            "ImportInProgress",
            "45.20%",
            2,
            [
                {"type": "Bound", "status": "True", "message": "PVC x Bound"},
                {"type": "Running", "status": "False", "message": "Unable to connect to http data source"},
            ],
        )
    )
    assert seen == {
        "exists": True,
        "phase": "ImportInProgress",
        "progress": "45.20%",
        "restarts": 2,
        "message": "Unable to connect to http data source",
    }


def test_a_missing_dataVolume_reads_as_absent():
    seen = datavolume.observe(None)
    assert seen["exists"] is False and datavolume.state_key(seen) == "absent"


def test_only_failed_is_terminal():
    for phase in ("", "Pending", "ImportScheduled", "ImportInProgress", "Paused", "Unknown"):
        assert datavolume.verdict(datavolume.observe(dv(phase)), 0) == (False, None), phase
    assert datavolume.verdict(datavolume.observe(dv("Succeeded")), 0) == (True, None)
    assert datavolume.verdict(datavolume.observe(dv("Failed")), 0) == (False, "failed")


def test_an_absence_fails_only_once_it_persists():
    absent = datavolume.observe(None)
    assert datavolume.verdict(absent, 3, absent_grace=10) == (False, None)
    assert datavolume.verdict(absent, 10, absent_grace=10) == (False, "absent")


def test_a_restart_or_new_percent_is_news_a_message_alone_is_not():
    first = datavolume.observe(dv("ImportInProgress", "10.00%", 0, [{"type": "Running", "message": "a"}]))
    same = datavolume.observe(dv("ImportInProgress", "10.00%", 0, [{"type": "Running", "message": "b"}]))
    restarted = datavolume.observe(dv("ImportInProgress", "10.00%", 1))
    assert datavolume.state_key(first) == datavolume.state_key(same)
    assert datavolume.state_key(first) != datavolume.state_key(restarted)


def test_line_and_messages():
    seen = datavolume.observe(
        dv("ImportInProgress", "45.20%", 0, [{"type": "Running", "message": "Import is running"}])
    )
    assert datavolume.line("ns", "x", seen, 12.34, "ISO sha256 0123") == (
        "DataVolume ns/x (ISO sha256 0123): phase ImportInProgress, progress 45.20%, restarts 0 after 12.3s"
    )
    assert datavolume.line("ns", "x", datavolume.observe(None), 1) == "DataVolume ns/x: not found after 1.0s"
    msg = datavolume.timeout_message(
        "ns", "x", seen, 30, "stuck: the state did not change in 30s", "Raise it."
    )
    assert msg == (
        "timed out after 30s waiting for DataVolume ns/x to reach phase Succeeded (stuck: the state did not "
        "change in 30s): last seen phase ImportInProgress, progress 45.20%, restartCount 0 "
        "(Import is running). "
        "Raise it."
    )
    failed = datavolume.observe(
        dv("Failed", "0.00%", 3, [{"type": "Running", "message": "checksum mismatch"}])
    )
    assert datavolume.failed_message("ns", "x", failed, "Fix it.") == (
        "DataVolume ns/x failed to import (phase Failed, progress 0.00%, restartCount 3): "
        "checksum mismatch. Fix it."
    )
    assert datavolume.absent_message("ns", "x", 10).startswith(
        "DataVolume ns/x does not exist (read as absent for 10s)"
    )


def test_only_a_failed_dataVolume_blocks_a_rerun():
    assert datavolume.blocks_rerun(None) is False
    for phase in (None, "Pending", "ImportInProgress", "Succeeded", "Paused", "Unknown"):
        assert datavolume.blocks_rerun(dv(phase)) is False, phase
        assert datavolume.rerun_refusal(dv(phase), "replace_it") == "", phase
    assert datavolume.rerun_refusal(None, "replace_it") == ""
    assert datavolume.blocks_rerun(dv("Failed")) is True


def test_the_refusal_names_the_dataVolume_its_last_failure_and_the_fix():
    failed = dv(
        "Failed",
        "N/A",
        3,
        [
            {"type": "Bound", "status": "True", "message": "PVC x Bound"},
            {"type": "Running", "status": "False", "message": "expected status code 200, got 404"},
        ],
    )
    assert datavolume.rerun_refusal(failed, "linux_golden_replace_failed") == (
        "DataVolume ns/x is Failed from an earlier import (progress N/A, restartCount 3): expected status "
        "code 200, got 404. Nothing was written: patching it would not import again, and the wait would "
        "report that failure as this run's. Fix the source if it is wrong, then delete the Failed DataVolume "
        "ns/x first, or set linux_golden_replace_failed: true to have it deleted and created anew."
    )


def test_the_refusal_falls_back_to_any_condition_message():
    bound_only = dv("Failed", conditions=[{"type": "Bound", "message": "PVC x Bound"}])
    assert "restartCount 0): PVC x Bound." in datavolume.rerun_refusal(bound_only, "r")
    bare = dv("Failed")
    assert "): no condition message." in datavolume.rerun_refusal(bare, "r")
