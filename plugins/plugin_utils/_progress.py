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

import base64
import secrets
import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common._wait import (
    RoundRunner,
    Wait,
    WaitTimeout,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.rounds import Rounds

display = Display()


class PollingAction(ActionBase):
    """Run ``MODULE`` round after round, printing each round's ``line``; return the last round's result."""

    MODULE = None
    # True when the first round does the task's work and the later ones only wait for its effect: the
    # result is then the first round's, updated with the last round's.
    KEEP_FIRST = False
    # False for a module that does its work in one call (perhaps as an async job): no ``started`` to pass.
    ROUNDS = True
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        result = super(PollingAction, self).run(tmp, task_vars)
        args = dict(self._task.args)
        if self.ROUNDS:
            # The wait's clock starts when the task does, not when the first module call has started up.
            args.setdefault("started", time.time())
        lines = []
        rounds = 0
        changed, diff = False, None
        first = None
        try:
            while True:
                rounds += 1
                if self._task.check_mode or not self.in_background(args):
                    out = self._execute_module(module_name=self.MODULE, module_args=args, task_vars=task_vars)
                else:
                    out = self._background_round(args, task_vars, lines)
                self.seen_round(out)
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

    # A round whose one step cannot be split (an upload is a single request) runs as an async job; its
    # module appends progress lines to ``progress_file``, printed as they come.
    BACKGROUND_POLL = 5.0
    BACKGROUND_LIMIT = 86400
    SILENCE = 30.0  # longest a background round stays silent

    def in_background(self, args):
        """Whether the next round runs as an async job reporting into a progress file (never by default)."""
        return False

    def _background_round(self, args, task_vars, lines):
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))
        progress = self._connection._shell.join_path(
            async_dir, "goldenimage-%s.progress" % secrets.token_hex(8)
        )
        # A backstop only: the module's waits end at its wait_timeout, and a transfer at the size it sends.
        limit = int(args.get("wait_timeout") or 0) + self.BACKGROUND_LIMIT
        # The job's directory holds its module file, arguments included. async_wrapper removes it up to
        # 5 s after writing the result async_status reads, so the task removes it itself once the job has
        # finished: nothing the task was given stays on disk after it.
        jobdir = self._connection._shell.tmpdir or self._make_tmp_path()
        saved, self._task.async_val = self._task.async_val, limit
        try:
            job = self._execute_module(
                module_name=self.MODULE,
                module_args=dict(args, progress_file=progress),
                task_vars=task_vars,
                wrap_async=True,
            )
        finally:
            self._task.async_val = saved
        if job.get("failed") or "ansible_job_id" not in job:
            self._remove_job_dir(jobdir)  # no job runs from it
            return job
        poll = _BackgroundJob(
            self, {"jid": job["ansible_job_id"], "_async_dir": async_dir}, progress, lines, task_vars
        )
        # The job's own limit ends it (async_wrapper kills it, and async_status says so); the deadline here
        # is a backstop SILENCE seconds past that limit.
        rounds = Rounds.span(time.monotonic(), limit + self.SILENCE)
        try:
            status = RoundRunner(rounds, self.BACKGROUND_POLL, time.monotonic, news_ends=False).run(poll)
            # Only a job that has ended: a running one still reads its module file.
            self._remove_job_dir(jobdir)
        except WaitTimeout as exc:
            status = {"failed": True, "msg": exc.msg}
        finally:
            self._execute_module(
                module_name="ansible.legacy.async_status",
                module_args=dict(poll.status_args, mode="cleanup"),
                task_vars=task_vars,
            )
            self._execute_module(
                module_name="ansible.legacy.file",
                module_args={"path": progress, "state": "absent"},
                task_vars=task_vars,
            )
        for key in ("ansible_job_id", "started", "finished", "results_file"):
            status.pop(key, None)
        return status

    def _remove_job_dir(self, path):
        """Remove a job's directory, leaving the directory the other module calls share alone (which
        ``_remove_tmp_path`` would forget)."""
        if self._should_remove_tmp_path(path):
            done = self._low_level_execute_command(
                self._connection._shell.remove(path, recurse=True), sudoable=False
            )
            if done.get("rc", 0) != 0:
                display.warning("Could not remove the job directory %s: %s" % (path, done.get("stderr", "")))

    def _print_progress(self, path, printed, lines, task_vars):
        """Print the progress lines not printed yet; only whole lines, the last may still be written."""
        read = self._execute_module(
            module_name="ansible.legacy.slurp", module_args={"src": path}, task_vars=task_vars
        )
        if read.get("failed"):  # not written yet
            return printed
        text = base64.b64decode(read["content"]).decode("utf-8", "replace")
        whole = text.split("\n")[:-1]
        for line in whole[printed:]:
            lines.append(line)
            display.display(line)
        return max(printed, len(whole))

    def seen_round(self, out):
        """Called with each round's result (nothing by default)."""

    def between(self, out, args, task_vars):
        """What runs between two rounds, changing ``args`` of the next (nothing by default)."""


class BackgroundAction(PollingAction):
    """A module that does its work in one call, run as an async job whose progress lines are printed as
    they come (a multi-GiB transfer is one call, and ansible-core shows a module's output only at its end)."""

    ROUNDS = False

    def in_background(self, args):
        return True


class _BackgroundJob(Wait):
    """The hooks of the poll of a background round's async job: each poll reads its status and prints the
    progress lines it wrote since; a transfer that stalls reports nothing itself, so ``SILENCE`` seconds
    without a line print one saying it is still running. Done when async_status says finished or failed."""

    def __init__(self, action, status_args, progress, lines, task_vars):
        self.action, self.status_args, self.progress = action, status_args, progress
        self.lines, self.task_vars = lines, task_vars
        self.printed = 0
        self.started = self.last = time.monotonic()

    def observe(self):
        action = self.action
        status = action._execute_module(
            module_name="ansible.legacy.async_status", module_args=self.status_args, task_vars=self.task_vars
        )
        printed = action._print_progress(self.progress, self.printed, self.lines, self.task_vars)
        now = time.monotonic()
        if printed > self.printed:
            self.last = now
        elif now - self.last >= action.SILENCE and not status.get("finished"):
            line = "%s: no progress reported for %.0fs, still running after %.1fs" % (
                action.MODULE.rsplit(".", 1)[-1],
                now - self.last,
                now - self.started,
            )
            self.lines.append(line)
            display.display(line)
            self.last = now
        self.printed = printed
        return status

    def state(self, seen):
        return str(self.printed)

    def verdict(self, seen, now):
        return bool(seen.get("finished") or seen.get("failed")), None

    def report(self, seen, now, done, going_on):
        return seen

    def timed_out(self, seen, now, stuck, words):
        return WaitTimeout(
            "%s: background job %s still not finished after %.0fs, past its async limit (%s); last status: %s"
            % (self.action.MODULE, self.status_args["jid"], now - self.started, words, seen),
            last=seen,
            elapsed=now - self.started,
            stuck=stuck,
        )
