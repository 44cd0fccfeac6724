"""A traceback the lab logs (a controller's reconcile or a server's handler raising) fails the test that
was running, with the traceback in the report; a warning does not."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[4]

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
    (tmp_path / "test_cases.py").write_text(CASES)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "tests.lab.fixtures",
            "-p",
            "no:cacheprovider",
            str(tmp_path),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = proc.stdout
    assert proc.returncode == 1, out
    assert "2 passed, 1 error" in out, out
    assert "ERROR at teardown of test_a_reconcile_raises" in out, out
    assert "the lab logged 1 traceback(s) while this test ran" in out and "KeyError: 'missing'" in out, out
