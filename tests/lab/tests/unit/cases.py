"""Runs a file of test cases in a pytest of its own with the lab's fixtures plugin, for tests of what that
plugin does to a test (fail it at teardown, let it pass)."""

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[4]


def run_cases(tmp_path, cases):
    """``(returncode, stdout)`` of pytest on ``cases`` written as ``test_cases.py`` under ``tmp_path``."""
    (tmp_path / "test_cases.py").write_text(cases)
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
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return proc.returncode, proc.stdout
