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


def test_make_test_selects_the_suites_of_modules_and_leaves_role_and_playbook_stories_to_make_slow():
    """make test's marker expression over tests/integration: a module test in a suite (the module-level
    fault suite included) is selected, one in no suite is not; a role's or playbook's test is selected
    only when marked quick, whatever its suite."""
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[2]
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--collect-only"]
        + ["-m", "not faults and not slow", "tests/unit/test_suites.py", "tests/integration"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    modules, roles = "tests/integration/modules/", "tests/integration/roles/"
    # The tiers are the integration tests': a unit test collected in the same run stays in make test.
    assert "tests/unit/test_suites.py::test_make_test_selects" in listed, listed
    assert modules + "test_golden_snapshot.py::test_absent_asks_who_uses_the_golden" in listed, listed
    assert modules + "test_faults_kube.py::" in listed
    assert modules + "test_golden_snapshot.py::test_make_a_golden_three_times" not in listed  # no suite
    assert roles + "test_windows_bake.py::test_answer_file_renders_valid" in listed  # quick
    assert roles + "test_golden_namespaces.py::test_a_rerun_sends_zero_mutating_requests" not in listed
    assert "test_one_run_converges_under_faults_and_lost_replies" not in listed
