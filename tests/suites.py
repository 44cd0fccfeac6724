"""The cross-cutting suites and their score lines.

A test belongs to a suite by its marker, ``@pytest.mark.suite("data-loss")``; tests marked ``faults``
(the playbook-level fault suite) belong to the fault suite as well. At the end of a run, every suite
that had a test in it gets one line in the terminal summary:

    suite data-loss: 9/9 passed

followed by the ids of the tests that did not pass. ``-m suite`` selects every suite's tests
(``make suites``); ``-m faults`` the playbook-level fault tests.

- ``data-loss``: every destructive request that must be refused is, and the audit log counts zero
  deletes (and no write) for it.
- ``secrets``: a secret handed to a run is searched in its raw, quoted, base64 and escaped forms in
  everything the run leaves (output, objects, Events, files) and is never found.
- ``faults``: writes and whole playbooks converge in one run under conflicts, 5xx answers, dropped
  connections and replies lost after the commit.
- ``bad-input``: bad options are refused naming the object, the rule and the supported move, before
  any write.
- ``idempotence``: a second run of a mutation reports ``changed: false`` and sends no mutating request.
"""

from __future__ import annotations

import collections

import pytest

SUITES = ("data-loss", "secrets", "faults", "bad-input", "idempotence")
_KEY = "suite"
# nodeid -> outcome, per suite, for this session (on the xdist controller: the workers' reports).
_OUTCOMES: dict[str, dict[str, str]] = collections.defaultdict(dict)


def _suites_of(item):
    names = []
    for marker in item.iter_markers("suite"):
        if len(marker.args) != 1 or marker.args[0] not in SUITES:
            raise pytest.UsageError(
                "%s: @pytest.mark.suite takes one of %s, not %r"
                % (item.nodeid, ", ".join(SUITES), marker.args)
            )
        names.append(marker.args[0])
    if item.get_closest_marker("faults") is not None:
        names.append("faults")
    return sorted(set(names))


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "suite(name): the test belongs to the named suite (%s)" % ", ".join(SUITES)
    )
    _OUTCOMES.clear()


def pytest_collection_modifyitems(config, items):
    for item in items:
        for name in _suites_of(item):
            item.user_properties.append((_KEY, name))


def pytest_runtest_logreport(report):
    """One outcome per test and suite: a failed setup, call or teardown fails it; a skip skips it."""
    suites = [value for key, value in report.user_properties if key == _KEY]
    if not suites:
        return
    for name in suites:
        seen = _OUTCOMES[name].get(report.nodeid)
        if report.failed:
            _OUTCOMES[name][report.nodeid] = "failed"
        elif report.skipped and seen is None:
            _OUTCOMES[name][report.nodeid] = "skipped"
        elif report.when == "call" and report.passed and seen is None:
            _OUTCOMES[name][report.nodeid] = "passed"


def score_lines(outcomes):
    """``suite <name>: <passed>/<total> passed`` per suite that ran, then the ids that did not pass."""
    lines = []
    for name in SUITES:
        tests = outcomes.get(name)
        if not tests:
            continue
        passed = sum(1 for outcome in tests.values() if outcome == "passed")
        lines.append("suite %s: %d/%d passed" % (name, passed, len(tests)))
        lines.extend(
            "  %s %s" % (outcome, nodeid) for nodeid, outcome in sorted(tests.items()) if outcome != "passed"
        )
    return lines


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, config):
    lines = score_lines(_OUTCOMES)
    if lines:
        terminalreporter.section("suite scores")
        for line in lines:
            terminalreporter.write_line(line)
