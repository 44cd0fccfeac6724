"""Run a playbook against a cluster (the lab, or one named by its kubeconfig) and return per-task results.

    run = run_playbook(PLAY, env=lab.env(), extra_vars={"prefix": "t-1234"})
    assert run.ok, run.log
    assert run["make the golden"]["changed"] is True

Results are collected by a test-only callback (callback_plugins/task_results.py), so every task
of every play is available as a dict, failures included; ``run.log`` has the human output.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[3]
COLLECTIONS = ROOT / ".collections"
CALLBACKS = pathlib.Path(__file__).resolve().parent / "callback_plugins"


@dataclass
class PlaybookRun:
    rc: int
    stdout: str
    stderr: str
    tasks: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @property
    def log(self) -> str:
        return "rc=%d\n--- stdout\n%s\n--- stderr\n%s" % (self.rc, self.stdout, self.stderr)

    def results(self, task: str) -> list[dict]:
        """Every result of the task named ``task`` (one per host and per run of it)."""
        return [entry["result"] for entry in self.tasks if entry["task"] == task]

    def entry(self, task: str) -> dict:
        found = [entry for entry in self.tasks if entry["task"] == task]
        if len(found) != 1:
            raise KeyError("task %r ran %d times; names: %s" % (task, len(found), self.task_names()))
        return found[0]

    def __getitem__(self, task: str) -> dict:
        return self.entry(task)["result"]

    def task_names(self) -> list[str]:
        return [entry["task"] for entry in self.tasks]


def playbook_command(
    path: pathlib.Path,
    workdir: pathlib.Path,
    env: dict[str, str] | None = None,
    extra_vars: dict | None = None,
    check: bool = False,
    diff: bool = False,
    args: list[str] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The ansible-playbook command line and environment that run ``path`` on localhost with this venv."""
    command = [
        str(pathlib.Path(sys.executable).with_name("ansible-playbook")),
        "-i",
        "localhost,",
        "-c",
        "local",
        "-e",
        "ansible_python_interpreter=%s" % sys.executable,
        str(path),
    ]
    if extra_vars:
        command[1:1] = ["-e", json.dumps(extra_vars)]
    if check:
        command.append("--check")
    if diff:
        command.append("--diff")
    command.extend(args or [])
    run_env = dict(os.environ)
    run_env.update(env or {})
    run_env.update(
        {
            "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
            "ANSIBLE_CALLBACK_PLUGINS": str(CALLBACKS),
            "ANSIBLE_CALLBACKS_ENABLED": "task_results",
            "ANSIBLE_LOCAL_TEMP": str(workdir / "local"),
            "ANSIBLE_HOME": str(workdir / "home"),
            "ANSIBLE_RETRY_FILES_ENABLED": "false",
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_HOST_KEY_CHECKING": "false",
            "GOLDEN_TEST_RESULTS": str(workdir / "results.jsonl"),
        }
    )
    return command, run_env


def write_playbook(playbook: str | list | pathlib.Path, workdir: pathlib.Path) -> pathlib.Path:
    """``playbook`` as a file: a path is used as it is, YAML text or a list of plays is written to workdir."""
    if isinstance(playbook, pathlib.Path):
        return playbook
    path = workdir / "play.yml"
    path.write_text(playbook if isinstance(playbook, str) else yaml.safe_dump(playbook, sort_keys=False))
    return path


def run_playbook(
    playbook: str | list | pathlib.Path,
    env: dict[str, str] | None = None,
    extra_vars: dict | None = None,
    check: bool = False,
    diff: bool = False,
    timeout: int = 600,
    args: list[str] | None = None,
) -> PlaybookRun:
    """Run ``playbook`` (a path, YAML text, or a list of plays) on localhost with this repo's venv."""
    with tempfile.TemporaryDirectory(prefix="golden-play-") as tmp:
        workdir = pathlib.Path(tmp)
        path = write_playbook(playbook, workdir)
        command, run_env = playbook_command(path, workdir, env, extra_vars, check, diff, args)
        proc = subprocess.run(
            command, cwd=str(ROOT), env=run_env, capture_output=True, text=True, timeout=timeout, check=False
        )
        results = workdir / "results.jsonl"
        tasks = []
        if results.exists():
            tasks = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
        return PlaybookRun(proc.returncode, proc.stdout, proc.stderr, tasks)


# The cluster credentials every module of the collection's k8s action group reads, from the environment
# lab.env() (or a real cluster's) sets.
KUBE_DEFAULTS = {"group/goldenimage.pipeline.k8s": {"kubeconfig": "{{ lookup('env', 'KUBECONFIG') }}"}}


def play(*tasks, name: str = "test", module_defaults: dict | None = None, **keywords) -> list[dict]:
    """One play on localhost running ``tasks``; ``keywords`` are further play keywords (check_mode...)."""
    entry: dict = {"name": name, "hosts": "localhost", "gather_facts": False}
    if module_defaults:
        entry["module_defaults"] = module_defaults
    entry.update(keywords)
    entry["tasks"] = list(tasks)
    return [entry]


def kube_play(*tasks, name: str = "test", **keywords) -> list[dict]:
    """``play`` with the cluster credentials set for the collection's k8s action group."""
    return play(*tasks, name=name, module_defaults=KUBE_DEFAULTS, **keywords)


def module_task(module: str, title: str, /, *, check=None, diff=None, ignore_errors=False, **params) -> dict:
    """A task named ``title`` calling ``module`` with ``params``; the keywords set the task's own options."""
    entry = {"name": title, module: params}
    if check is not None:
        entry["check_mode"] = check
    if diff is not None:
        entry["diff"] = diff
    if ignore_errors:
        entry["ignore_errors"] = True
    return entry
