"""Test-only callback: append every task result, as JSON lines, to $GOLDEN_TEST_RESULTS.

The stdout callback stays the default one (its text goes to the test's log on failure); this one
gives the tests structured results, diff and invocation included.
"""

import json
import os

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: task_results
type: aggregate
short_description: write task results as JSON lines for the integration tests
description: Appends one JSON object per task result to the file named by E(GOLDEN_TEST_RESULTS).
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "task_results"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._path = os.environ.get("GOLDEN_TEST_RESULTS")

    def _record(self, result, status):
        if not self._path:
            return
        # result.result is already plain Python (tags removed); internal keys are not part of it.
        data = {k: v for k, v in result.result.items() if not k.startswith("_ansible")}
        entry = {
            "task": result.task_name,
            "host": result.host.get_name(),
            "status": status,
            "changed": bool(data.get("changed")),
            "result": data,
        }
        with open(self._path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry, default=str) + "\n")

    def v2_runner_on_ok(self, result):
        self._record(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, "ignored" if ignore_errors else "failed")

    def v2_runner_on_skipped(self, result):
        self._record(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._record(result, "unreachable")
