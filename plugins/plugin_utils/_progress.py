# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Controller side of the long waits: call a wait module in short rounds and print a line after each.

ansible-core shows a module's output only when the module has returned, so a module that waits for
half an hour is silent for half an hour. A wait module of this collection therefore waits at most
O(report_every) seconds per call and returns ``done``, a progress ``line`` and ``resume`` (the options
that continue the same wait: when it started, what it saw last, when that last changed). The action
plugin of the same name calls it again with ``resume`` until it is done or fails, and prints each line
as it comes, so every wait longer than a round prints a line at least every O(report_every) seconds.

I/O (it runs modules and prints); it decides nothing: done, failed and the timeout are the module's.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()


class PollingAction(ActionBase):
    """Run ``MODULE`` round after round, printing each round's ``line``; return the last round's result."""

    MODULE = None
    # True when the first round does the task's work and the later ones only wait for its effect: the
    # result is then the first round's, updated with the last round's.
    KEEP_FIRST = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        result = super(PollingAction, self).run(tmp, task_vars)
        args = dict(self._task.args)
        # The wait's clock starts when the task does, not when the first module call has started up.
        args.setdefault("started", time.time())
        lines = []
        rounds = 0
        changed, diff = False, None
        first = None
        try:
            while True:
                rounds += 1
                out = self._execute_module(module_name=self.MODULE, module_args=args, task_vars=task_vars)
                first = out if first is None else first
                # The first round may create what the later ones wait for: keep its change and diff.
                changed = changed or bool(out.get("changed"))
                diff = diff or out.get("diff")
                for line in [out.get("line")] + list(out.get("notes") or []):
                    if line:
                        lines.append(line)
                        display.display(line)
                if out.get("failed") or out.get("done") or out.get("skipped") or self._task.check_mode:
                    break
                resume = out.get("resume")
                if not isinstance(resume, dict):
                    break
                args.update(resume)
                self.between(out, args, task_vars)
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        if self.KEEP_FIRST and first is not out:
            result.update((key, value) for key, value in first.items() if key != "resume")
        result.update(out)
        result["changed"] = changed
        if diff:
            result["diff"] = diff
        result["lines"] = lines
        result["rounds"] = rounds
        return result

    def between(self, out, args, task_vars):
        """What runs between two rounds, changing ``args`` of the next (nothing by default)."""
