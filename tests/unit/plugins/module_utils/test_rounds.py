"""A long wait in short rounds: the deadline, the round's end, news, and stuck versus still working."""

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils import inputs, rounds
from ansible_collections.goldenimage.pipeline.plugins.module_utils.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.rounds import Rounds


def test_a_round_ends_at_report_every_or_the_deadline():
    rounds = Rounds(now=100.0, timeout=60, report_every=20)
    assert rounds.deadline == 160.0 and rounds.round_end == 120.0
    assert rounds.pause(5, 118.0) == 2.0
    late = Rounds(now=150.0, timeout=60, started=100.0, report_every=20)
    assert late.round_end == 160.0 and not late.expired(159.9) and late.expired(160.0)


def test_news_and_the_verdict():
    rounds = Rounds(now=0.0, timeout=100)
    assert rounds.see("a", 0.0) is True  # the first state is shown
    assert rounds.see("a", 5.0) is False
    assert rounds.verdict(100.0) == (True, "stuck: the state did not change in 100s")
    assert rounds.see("b", 40.0) is True
    assert rounds.verdict(100.0) == (False, "still working: the state last changed 60.0s ago")
    resumed = Rounds(now=50.0, timeout=100, **rounds.resume())
    assert resumed.started == 0.0 and resumed.see("b", 50.0) is False and resumed.changed_at == 40.0


def test_the_time_out_of_the_whole_wait_counts_from_its_first_round():
    later = Rounds(now=90.0, timeout=60, started=30.0, last_state="readyToUse=false")
    assert later.timeout_message("VolumeSnapshot a/b to be readyToUse", "readyToUse=false", 91.5) == (
        "timed out after 61.5s waiting for VolumeSnapshot a/b to be readyToUse (stuck: the state did not "
        "change in 61s); last observed: readyToUse=false"
    )


@pytest.mark.parametrize("timeout", [0, -5])
def test_zero_and_negative_timeouts_are_refused(timeout):
    with pytest.raises(Refusal, match="option wait_timeout"):
        Rounds(now=0.0, timeout=timeout)


def test_object_arg_spec_adds_the_object_and_lets_a_module_set_its_wait_defaults():
    spec = rounds.object_arg_spec(timeout=14400, sleep=30, label={"type": "str"})
    assert spec["name"] == spec["namespace"] == {"type": "str", "required": True}
    assert spec["wait_timeout"] == {"type": "int", "default": 14400}
    assert spec["wait_sleep"] == {"type": "float", "default": 30} and spec["label"] == {"type": "str"}
    assert set(rounds.ROUND_ARG_SPEC) < set(spec) and rounds.ROUND_ARG_SPEC["wait_timeout"]["default"] == 1800


def test_the_rounds_wait_options_are_the_shared_ones_with_their_own_defaults():
    shared = inputs.WAIT_ARG_SPEC
    for option in shared:
        assert dict(rounds.ROUND_ARG_SPEC[option], default=None) == dict(shared[option], default=None)
    assert (
        rounds.ROUND_ARG_SPEC["wait_timeout"]["default"],
        rounds.ROUND_ARG_SPEC["wait_sleep"]["default"],
    ) == (
        1800,
        5,
    )


def test_a_wait_that_cannot_return_reports_each_new_state_and_repeats_one_every_report_every():
    reporter = rounds.Reporter(every=20)
    assert reporter.due("active=1", 0.0) is True
    assert reporter.due("active=1", 19.9) is False
    assert reporter.due("active=1", 20.0) is True
    assert reporter.due("succeeded=1", 21.0) is True
