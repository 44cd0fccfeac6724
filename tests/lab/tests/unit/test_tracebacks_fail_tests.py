"""A traceback the lab logs (a controller's reconcile or a server's handler raising) fails the test that
was running, with the traceback in the report; a warning does not."""

from __future__ import annotations

from tests.lab.tests.unit.cases import run_cases

CASES = """
import logging

def test_a_reconcile_raises():
    try:
        {}["missing"]
    except KeyError:
        logging.getLogger("tests.lab.controllers").exception("reconcile of Job ns/x failed")

def test_a_conflict_is_retried():
    logging.getLogger("tests.lab.controllers").warning("Job ns/x: 409, retried")
"""


def test_a_logged_traceback_fails_its_test_and_a_warning_does_not(tmp_path):
    code, out = run_cases(tmp_path, CASES)
    assert code == 1, out
    assert "2 passed, 1 error" in out, out
    assert "ERROR at teardown of test_a_reconcile_raises" in out, out
    assert "the lab logged 1 traceback(s) while this test ran" in out and "KeyError: 'missing'" in out, out
