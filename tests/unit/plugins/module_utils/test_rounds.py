"""A long wait in short rounds: the deadline, the round's end, news, and stuck versus still working."""

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import inputs, rounds
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.rounds import Rounds


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


def test_transfer_progress_reports_every_ten_percent_and_every_thirty_seconds():
    report = rounds.TransferProgress("big.img", 1000)
    lines = [report.seen(sent, 1000, sent / 100.0) for sent in range(0, 1001, 20)]
    said = [line for line in lines if line]
    assert said[0] == "upload big.img: 0% (0 of 1000 bytes) after 0.0s"
    assert [pair[0] for pair in report.reported] == [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    slow = rounds.TransferProgress("big.img", 10**9)
    assert slow.seen(0, 10**9, 0.0)
    assert slow.seen(1, 10**9, 10.0) is None
    assert "0% (2 of" in slow.seen(2, 10**9, 31.0)  # no percent gained, but 30 s passed
    assert slow.record()["bytes_sent"] == 2 and slow.record()["percent"] == 0


def test_transfer_progress_of_an_unknown_size_and_of_a_new_phase():
    report = rounds.TransferProgress("https://mirror/x.img")
    assert report.seen(0, None, 0.0, "hash") == "hash https://mirror/x.img: 0 bytes after 0.0s"
    assert report.seen(10**6, None, 29.0, "hash") is None
    assert (
        report.seen(2 * 10**6, None, 30.0, "hash") == "hash https://mirror/x.img: 2000000 bytes after 30.0s"
    )
    # The upload that follows reports its own start at once, and its percent from there.
    assert (
        report.seen(0, 100, 31.0, "upload") == "upload https://mirror/x.img: 0% (0 of 100 bytes) after 31.0s"
    )
    assert report.seen(5, 100, 32.0, "upload") is None
    assert report.record()["reported"] == [[0, 31.0]]


def test_a_share_of_a_wait_ends_at_its_round_or_at_the_whole_wait_whichever_comes_first():
    # a round of 20 s from 1000 within a wait of 1800 s from 1000: the round ends first
    share = Rounds.span(1000.0, 1800, round_end=1020.0)
    assert share.pause(60, 1000.5) == 19.5 and not share.expired(1020.0) and share.over(1020.0)
    # a second wait in the same round gets what the first left
    assert share.pause(60, 1015.0) == 5.0
    # the last round: the whole wait ends before the round would
    last = Rounds.span(1000.0, 1800, round_end=2800.0 + 20)
    assert last.pause(60, 2790.0) == 10.0 and last.expired(2800.0)
    # a share already spent still polls once, then the round is over (or the wait, at its deadline)
    spent = Rounds.span(1000.0, 1800, round_end=1020.0)
    assert spent.pause(60, 1030.0) == 0.0 and spent.over(1030.0) and not spent.expired(1030.0)
