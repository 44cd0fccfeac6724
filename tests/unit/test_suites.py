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


def test_make_test_selects_the_suites_of_roles_and_playbooks_but_not_their_fault_tests():
    """make test's marker expression over tests/integration: a role's or playbook's test in the data-loss,
    secrets, bad-input or idempotence suite is selected, one in the fault suite (or unmarked) is not."""
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[2]
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--collect-only"]
        + ["-m", "not faults and not slow", "tests/integration/roles", "tests/integration/playbooks"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    roles = "tests/integration/roles/"
    assert roles + "test_golden_namespaces.py::test_a_rerun_sends_zero_mutating_requests" in listed, listed
    assert roles + "test_golden_promote_retention.py::test_promotion_then_retention_keeps" in listed
    assert roles + "test_linux_golden.py::test_a_zero_timeout_is_refused_before_anything" in listed
    # In the fault suite (and the idempotence one): make slow, not make test.
    assert "test_one_run_converges_under_faults_and_lost_replies" not in listed
    # In no suite: make slow.
    assert roles + "test_linux_golden.py::test_refusals_write_nothing" not in listed
