"""A background round leaves nothing it was given on disk: the job's directory (its module file holds the
task's arguments) is gone when the task returns, however late async_wrapper's own clean-up comes.

The action plugin runs against ansible-core's real ``sh`` shell plugin, and its commands really run here;
what stands in for the host is the job itself: ``_execute_module`` writes the module file into the job's
directory and, like async_wrapper, never removes it within the test.
"""

from __future__ import annotations

import subprocess

import pytest
from ansible.plugins.loader import shell_loader
from ansible_collections.goldenimage.pipeline.plugins.plugin_utils._progress import BackgroundAction

SECRET_URL = "https://upstream.example/noble.qcow2?token=tok-secret"


class Task:
    def __init__(self):
        self.args = {"url": SECRET_URL}
        self.async_val = 0
        self.check_mode = False


class Connection:
    def __init__(self):
        self._shell = shell_loader.get("sh")
        self._shell.set_options()


class Host(BackgroundAction):
    """The action with a host simulated in a directory: async jobs whose status says ``finished`` after
    ``rounds`` polls (or never, when an async_status call raises ``fail_on``)."""

    MODULE = "goldenimage.pipeline.os_mirror_object"
    BACKGROUND_POLL = 0

    def __init__(self, root, rounds=2, fail_on=None):
        super().__init__(Task(), Connection(), None, None, None)
        self.root, self.rounds, self.fail_on = root, rounds, fail_on
        self.jobdirs, self.polls, self.made = [], 0, 0

    def _make_tmp_path(self, remote_user=None):
        self.made += 1
        path = self.root / ("ansible-tmp-%d" % self.made)
        path.mkdir()
        self._connection._shell.tmpdir = str(path)
        self._cleanup_remote_tmp = True
        return str(path)

    def _remote_expand_user(self, path, sudoable=True, pathsep=None):
        return str(self.root / "async")

    def _low_level_execute_command(
        self, cmd, sudoable=True, in_data=None, executable=None, encoding_errors=None, chdir=None
    ):
        done = subprocess.run(cmd, shell=True, capture_output=True, text=True, check=False)
        return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}

    def _execute_module(self, module_name=None, module_args=None, task_vars=None, wrap_async=False, **kwargs):
        tmpdir = self._connection._shell.tmpdir or self._make_tmp_path()
        if wrap_async:
            # The job: its module file, arguments included, in the directory; async_wrapper removes it
            # itself only later, and the controller forgets the directory.
            (self.root / tmpdir / "AnsiballZ_os_mirror_object.py").write_text(repr(module_args))
            self.jobdirs.append(tmpdir)
            self._connection._shell.tmpdir = None
            return {"ansible_job_id": "j1", "started": 1, "finished": 0}
        if module_name == "ansible.legacy.async_status" and module_args.get("mode") != "cleanup":
            self.polls += 1
            if self.fail_on == self.polls:
                raise RuntimeError("connection lost")
            return {"finished": int(self.polls >= self.rounds), "changed": True, "key": "debian-12/1"}
        if module_name == "ansible.legacy.slurp":
            return {"failed": True}
        return {}

    def leftovers(self):
        return sorted(p.name for p in self.root.rglob("AnsiballZ_*") if SECRET_URL in p.read_text())


def test_the_job_directory_is_removed_once_the_job_has_finished(tmp_path):
    action = Host(tmp_path)
    status = action._background_round(dict(action._task.args), {}, [])
    assert status["key"] == "debian-12/1" and action.polls == 2
    assert action.leftovers() == []
    assert not (tmp_path / action.jobdirs[0]).exists()
    # The directory the status calls share is still the controller's to remove at the end of the task.
    shared = action._connection._shell.tmpdir
    assert shared and shared not in action.jobdirs and (tmp_path / shared).is_dir()


def test_a_job_still_running_keeps_its_module_file(tmp_path):
    # The poll failed while the job ran: the job still reads its module file, and async_wrapper
    # removes the directory when it ends.
    action = Host(tmp_path, rounds=5, fail_on=2)
    with pytest.raises(RuntimeError):
        action._background_round(dict(action._task.args), {}, [])
    assert action.leftovers() == ["AnsiballZ_os_mirror_object.py"]


def test_kept_remote_files_are_kept(tmp_path, monkeypatch):
    from ansible import constants

    monkeypatch.setattr(constants, "DEFAULT_KEEP_REMOTE_FILES", True)
    action = Host(tmp_path)
    action._background_round(dict(action._task.args), {}, [])
    assert action.leftovers() == ["AnsiballZ_os_mirror_object.py"]


def test_a_job_past_its_limit_fails_naming_the_job_and_prints_that_it_was_silent(tmp_path):
    # async_wrapper ends a job at its limit; a status that never says so still ends the poll, at the
    # backstop past that limit, with a line for the silence and a failure naming the job still pending.
    action = Host(tmp_path, rounds=10**6)
    action.BACKGROUND_LIMIT, action.SILENCE = 0, 0
    lines = []
    status = action._background_round(dict(action._task.args), {}, lines)
    assert status["failed"] and action.polls == 1
    assert "background job j1 still not finished" in status["msg"], status["msg"]
    assert "past its async limit" in status["msg"]
    assert lines and "no progress reported" in lines[0]
    assert action.leftovers() == ["AnsiballZ_os_mirror_object.py"]  # the job may still read it
