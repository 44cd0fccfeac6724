import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common._wait import (
    WaitFailed,
    WaitTimeout,
    wait_for,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.rounds import Rounds


class FakeTime:
    """A clock that only moves when the code under test sleeps."""

    def __init__(self):
        self.now = 100.0
        self.sleeps = []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def states(*values):
    """fetch() returning each value in turn, then the last one for ever."""
    seq = list(values)

    def fetch():
        return seq.pop(0) if len(seq) > 1 else seq[0]

    return fetch


def ready(obj):
    if obj and obj.get("error"):
        return False, obj["error"]
    return bool(obj and obj.get("ready")), None


def describe(obj):
    return "not found" if obj is None else "ready=%s, phase=%s" % (obj.get("ready"), obj.get("phase"))


def run(fetch, t, timeout=10, sleep=2, **kwargs):
    return wait_for(fetch, ready, timeout, sleep, describe, clock=t.clock, sleeper=t.sleep, **kwargs)


def test_returns_the_object_and_the_time_it_took():
    t = FakeTime()
    seen = []
    obj, duration = run(
        states(None, {"phase": "Pending"}, {"ready": True, "phase": "Ready"}),
        t,
        progress=lambda o: seen.append(o and o.get("phase")),
    )
    assert obj == {"ready": True, "phase": "Ready"}
    assert duration == 4
    assert t.sleeps == [2, 2]
    assert seen == [None, "Pending", "Ready"]


def test_done_at_once_does_not_sleep():
    t = FakeTime()
    assert run(states({"ready": True}), t) == ({"ready": True}, 0)
    assert t.sleeps == []


def test_a_stuck_object_times_out_naming_the_condition_and_the_last_state():
    t = FakeTime()
    with pytest.raises(WaitTimeout) as err:
        run(
            states({"ready": False, "phase": "Pending"}),
            t,
            timeout=5,
            pending="VolumeSnapshot g/x to be readyToUse",
        )
    exc = err.value
    assert exc.stuck is True
    assert exc.state == "ready=False, phase=Pending"
    assert exc.elapsed == 5
    assert str(exc) == (
        "timed out after 5.0s waiting for VolumeSnapshot g/x to be readyToUse "
        "(stuck: the state did not change in 4 polls); last observed: ready=False, phase=Pending"
    )
    # The last sleep is trimmed so the wait ends on the deadline, not after it.
    assert t.sleeps == [2, 2, 1]


def test_a_moving_object_times_out_as_still_working():
    t = FakeTime()
    fetch = states(
        {"phase": "Pending"},
        {"phase": "Bound"},
        {"phase": "Copying 10%"},
        {"phase": "Copying 20%"},
        {"phase": "x"},
    )
    with pytest.raises(WaitTimeout) as err:
        run(fetch, t, timeout=6, sleep=2)
    assert err.value.stuck is False
    assert "still working: the state last changed 0.0s ago" in str(err.value)
    assert err.value.last == {"phase": "Copying 20%"}


def test_a_failed_object_stops_the_wait_at_once():
    t = FakeTime()
    with pytest.raises(WaitFailed) as err:
        run(
            states({"phase": "Pending"}, {"error": "snapshot failed", "phase": "Failed"}),
            t,
            pending="the snapshot",
        )
    assert err.value.reason == "snapshot failed"
    assert t.sleeps == [2]
    assert str(err.value) == (
        "failed while waiting for the snapshot after 2.0s: snapshot failed; "
        "last observed: ready=None, phase=Failed"
    )


def test_transient_fetch_errors_are_ridden_out():
    t = FakeTime()
    calls = []

    def fetch():
        calls.append(1)
        if len(calls) < 3:
            raise OSError("503 Service Unavailable")
        return {"ready": True}

    obj, duration = run(fetch, t, transient=lambda exc: isinstance(exc, OSError))
    assert obj == {"ready": True}
    assert duration == 4


def test_a_transient_error_at_the_deadline_is_named():
    t = FakeTime()

    def fetch():
        raise OSError("connection reset")

    with pytest.raises(WaitTimeout, match=r"last observed: not found \(last poll failed: connection reset\)"):
        run(fetch, t, timeout=3, transient=lambda exc: True)


def test_other_fetch_errors_propagate():
    t = FakeTime()

    def fetch():
        raise KeyError("boom")

    with pytest.raises(KeyError):
        run(fetch, t, transient=lambda exc: isinstance(exc, OSError))


def test_zero_timeout_polls_once():
    t = FakeTime()
    with pytest.raises(WaitTimeout, match="in 1 polls"):
        run(states(None), t, timeout=0)
    assert t.sleeps == []


def test_polling_starts_fast_and_backs_off_to_the_sleep():
    t = FakeTime()
    with pytest.raises(WaitTimeout):
        run(states({"phase": "Pending"}), t, timeout=6, sleep=2, first_sleep=0.25)
    assert t.sleeps == [0.25, 0.5, 1, 2, 2, 0.25]


# One round's share of a longer wait (``rounds``): the round's end returns, the deadline raises.


def test_a_share_returns_at_the_round_end_with_no_duration():
    t = FakeTime()
    rounds = Rounds.span(90.0, 30, round_end=105.0)
    obj, duration = run(states({"phase": "Pending"}), t, timeout=30, rounds=rounds)
    assert (obj, duration) == ({"phase": "Pending"}, None)
    assert t.now == 105.0 and sum(t.sleeps) == 5.0


def test_a_share_times_out_at_the_deadline_of_the_whole_wait_counted_from_its_start():
    t = FakeTime()
    with pytest.raises(WaitTimeout) as err:
        run(states({"phase": "Pending"}), t, timeout=14, rounds=Rounds.span(90.0, 14, round_end=200.0))
    assert t.now == 104.0 and err.value.elapsed == 14.0


def test_an_answer_at_the_deadline_still_counts():
    t = FakeTime()
    fetch = states({"phase": "Pending"}, {"phase": "Pending"}, {"ready": True})
    assert run(fetch, t, timeout=4, sleep=2) == ({"ready": True}, 4)
