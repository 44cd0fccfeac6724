"""Helpers for the benches: the lab in its own process, a baseline copy of the collection, timed playbooks.

``LabProcess`` runs the lab (with the controllers asked for, or none) in a child process, so what a bench
times in its own process or in ansible-playbook does not share a CPU-bound interpreter with the API
server and its controllers; the lab's own CPU is reported separately (``cpu()``). Seeding functions run
inside the lab's process (``call``) and write through the lab's API client (``lab.store``, an ApiStore on
the real API server), many requests at once (``in_parallel``).

``baseline_collections`` builds a collections tree of this checkout in which chosen files are taken from
another git revision: the same modules on the old adapter, for an A/B in one run.
"""

from __future__ import annotations

import importlib
import json
import multiprocessing
import os
import pathlib
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
COLLECTIONS = ROOT / ".collections"


SEED_WORKERS = 16  # concurrent writes while seeding: the API server takes them side by side


def in_parallel(fn, items, workers: int = SEED_WORKERS) -> None:
    """``fn(item)`` for every item, ``workers`` at a time (seeding through the API, not one by one)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(workers) as pool:
        for _ in pool.map(fn, items):
            pass


def _resolve(dotted):
    module, _, attr = dotted.partition(":")
    return getattr(importlib.import_module(module), attr)


def _server_cpu(lab):
    """CPU seconds the lab's server processes (kube-apiserver, etcd, and kube-controller-manager when it
    runs) have used so far, from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for _, proc in lab.apiserver._procs:
        with open("/proc/%d/stat" % proc.pid) as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def _serve(conn, state, controllers):
    sys.path.insert(0, str(ROOT))
    from tests.lab import Lab

    classes = _resolve(controllers) if controllers else []
    # Without controllers nothing is deleted or run, so kube-controller-manager stays off too: a bench
    # measures the API server answering, not it catching up with namespaces just seeded.
    with Lab(state, with_s3=False, controllers=classes, kube_controllers=bool(classes)) as lab:
        # The API server itself (lab.kubeconfig names it too); the fault proxy relays every byte in
        # Python, a cost a real cluster does not add, so it is measured apart (bench/lab_front.py).
        direct = lab.apiserver.write_kubeconfig(pathlib.Path(state) / "direct.kubeconfig")
        conn.send(
            {
                "kubeconfig": str(lab.kubeconfig),
                "direct": str(direct),
                "faults": str(lab.fault_kubeconfig),
                "url": lab.url,
                "env": lab.env(),
            }
        )
        while True:
            what, args = conn.recv()
            try:
                if what == "stop":
                    conn.send(None)
                    return
                if what == "audit":
                    answer = lab.audit()
                elif what == "clear":
                    answer = lab.clear_audit()
                elif what == "cpu":
                    answer = time.process_time()
                elif what == "server_cpu":
                    answer = _server_cpu(lab)
                else:
                    answer = _resolve(what)(lab, *args)
                conn.send(("ok", answer))
            except Exception as exc:  # reported in the bench's process
                conn.send(("error", "%s: %s" % (type(exc).__name__, exc)))


class LabProcess:
    """The lab in a child process; ``controllers`` is "module:ATTRIBUTE" naming a list of classes, or None."""

    def __init__(self, state, controllers=None):
        self.state = str(state)
        self.controllers = controllers

    def __enter__(self):
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, self.state, self.controllers), daemon=True)
        self._proc.start()
        info = self._conn.recv()
        self.kubeconfig = pathlib.Path(info["kubeconfig"])
        self.direct_kubeconfig = pathlib.Path(info["direct"])
        self.fault_kubeconfig = pathlib.Path(info["faults"])
        self.url = info["url"]
        self._env = info["env"]
        return self

    def __exit__(self, *exc):
        try:
            self._conn.send(("stop", ()))
            self._conn.recv()
        finally:
            self._proc.join(30)

    def _ask(self, what, *args):
        self._conn.send((what, args))
        status, answer = self._conn.recv()
        if status != "ok":
            raise RuntimeError("lab process: %s" % answer)
        return answer

    def call(self, dotted, *args):
        """``function(lab, *args)`` inside the lab's process (``dotted`` is "module:function")."""
        return self._ask(dotted, *args)

    def audit(self):
        return self._ask("audit")

    def clear_audit(self):
        self._ask("clear")

    def cpu(self):
        """CPU seconds the lab's Python process has used so far (its front and controllers)."""
        return self._ask("cpu")

    def server_cpu(self):
        """CPU seconds kube-apiserver and etcd have used so far."""
        return self._ask("server_cpu")

    def env(self, direct=False):
        """Environment for ansible-playbook; ``direct``: its kubeconfig names kube-apiserver itself."""
        env = dict(self._env)
        if direct:
            env.update(
                K8S_AUTH_KUBECONFIG=str(self.direct_kubeconfig), KUBECONFIG=str(self.direct_kubeconfig)
            )
        return env


def add_direct_argument(parser):
    """``--direct``: the bench's clients talk to kube-apiserver itself, not through the lab's front."""
    parser.add_argument(
        "--direct",
        action="store_true",
        help="talk to kube-apiserver itself, not through the lab's front (a Python relay no cluster has)",
    )


def baseline_collections(revision, files, into):
    """A collections path: this checkout as goldenimage.pipeline, ``files`` taken from ``revision``."""
    into = pathlib.Path(into)
    base = into / "ansible_collections"
    (base / "goldenimage").mkdir(parents=True, exist_ok=True)
    for other in (COLLECTIONS / "ansible_collections").iterdir():
        if other.name != "goldenimage":
            (base / other.name).symlink_to(other.resolve())
    tree = base / "goldenimage" / "pipeline"
    tree.mkdir()
    for name in ("plugins", "meta"):
        shutil.copytree(ROOT / name, tree / name)
    shutil.copy(ROOT / "galaxy.yml", tree / "galaxy.yml")
    for path in files:
        text = subprocess.run(
            ["git", "show", "%s:%s" % (revision, path)], cwd=str(ROOT), capture_output=True, check=True
        ).stdout
        (tree / path).write_bytes(text)
    return into


# Runs a command and prints the peak resident set size of its largest process, the module's among them
# (the kernel carries a child's peak up to its parent when the parent waits for it).
PEAK_RSS = (
    "import resource, subprocess, sys; code = subprocess.call(sys.argv[1:]);"
    " print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(code)"
)


def playbook(play, env=None, collections=COLLECTIONS, timeout=1800):
    """Run a list of plays with ansible-playbook: (stdout, wall seconds, CPU seconds of its processes, peak
    MiB resident of its largest process)."""
    with tempfile.TemporaryDirectory(prefix="bench-play-") as tmp:
        path = pathlib.Path(tmp) / "play.yml"
        path.write_text(json.dumps(play))
        run_env = dict(os.environ)
        run_env.update(env or {})
        run_env.update(
            ANSIBLE_COLLECTIONS_PATH=str(collections),
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_LOCAL_TEMP=str(pathlib.Path(tmp) / "local"),
            ANSIBLE_HOME=str(pathlib.Path(tmp) / "home"),
            ANSIBLE_RETRY_FILES_ENABLED="false",
        )
        command = [
            sys.executable,
            "-c",
            PEAK_RSS,
            str(pathlib.Path(sys.executable).with_name("ansible-playbook")),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            "ansible_python_interpreter=%s" % sys.executable,
            str(path),
        ]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        proc = subprocess.run(
            command, env=run_env, cwd=str(ROOT), capture_output=True, text=True, timeout=timeout, check=False
        )
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit("ansible-playbook failed:\n%s\n%s" % (proc.stdout[-4000:], proc.stderr[-4000:]))
    return proc.stdout, wall, cpu, int(proc.stderr.strip().splitlines()[-1]) / 1024


def load():
    return "load average %.2f %.2f %.2f" % os.getloadavg()
