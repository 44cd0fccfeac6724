"""The suites' score lines (tests/suites.py)."""

from __future__ import annotations

from tests.suites import SUITES, score_lines


def test_one_line_per_suite_that_ran_then_what_did_not_pass():
    outcomes = {
        "secrets": {"a::t1": "passed", "a::t2": "passed"},
        "data-loss": {"b::t1": "passed", "b::t2": "failed", "b::t3": "skipped"},
    }
    assert score_lines(outcomes) == [
        "suite data-loss: 1/3 passed",
        "  failed b::t2",
        "  skipped b::t3",
        "suite secrets: 2/2 passed",
    ]
    assert score_lines({}) == []
    assert SUITES == ("data-loss", "secrets", "faults", "bad-input", "idempotence")
