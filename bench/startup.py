#!/usr/bin/env python3
"""CPU and wall time of a whole cluster-facing read task against kubernetes.core.k8s_info doing the same read.

A lab without controllers runs in its own process; ``N`` project namespaces, each with one golden copy
(a labelled VolumeSnapshot), are seeded through its API, many at once. At each size, paired A/B runs of whole
``ansible-playbook`` commands (alternating, so a swing of the machine's load hits both), CPU taken from
the children's resource usage (``getrusage(RUSAGE_CHILDREN)``: ansible-playbook, its workers and the
module processes):

- A: ``goldenimage.pipeline.golden_info`` (its 8 lists, the kinds it reads);
- B: ``kubernetes.core.k8s_info`` reading the same lists, one task per list (loop);
- B1: ``kubernetes.core.k8s_info`` reading only the largest of them (the labelled VolumeSnapshots);
- 0: a play with one ``ansible.builtin.debug`` task (what ansible-playbook costs with no module).

Then ``python -X importtime`` inside the module process: golden_info run directly with its arguments,
the top imports by cumulative time. Prints medians and the ratios A/B and A/B1.

    .venv/bin/python bench/startup.py [--objects 500,5000] [--repeat 5] [--smoke]

Ends with the issue's figure at each size: the paired cpu ratio golden_info/k8s_info (goal <= 0.8 at 500
objects and more), see bench/verdict.py.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.labproc import COLLECTIONS, LabProcess, in_parallel, load, playbook  # noqa: E402
from bench.verdict import startup_lines  # noqa: E402

SNAP = ("snapshot.storage.k8s.io", "v1", "volumesnapshots")
PROJECT_LABEL = "kube-dc.com/project"
FAMILY = "debian-12"
# The lists golden_info sends, as k8s_info arguments.
READS = [
    {"api_version": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot", "namespace": "golden-images"},
    {
        "api_version": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshot",
        "namespace": "golden-images-block",
    },
    {
        "api_version": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshot",
        "label_selectors": ["kube-dc.com/golden-os"],
    },
    {"api_version": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent"},
    {"api_version": "v1", "kind": "PersistentVolumeClaim"},
    {"api_version": "v1", "kind": "Namespace", "label_selectors": [PROJECT_LABEL]},
    {"api_version": "kube-dc.com/v1", "kind": "GoldenImageSelection"},
    {"api_version": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume"},
]


def seed(lab, start, stop):
    """Project namespaces ``start`` .. ``stop - 1``, each with one labelled golden copy (runs in the lab)."""
    namespaces = lab.store.resource("", "v1", "namespaces")
    snaps = lab.store.resource(*SNAP)
    for name in ("golden-images", "golden-images-block"):  # the lab makes them itself
        if not lab.store.exists(namespaces, None, name):
            lab.store.create(namespaces, {"metadata": {"name": name}})

    def one(i):
        name = "proj-%05d" % i
        lab.store.create(namespaces, {"metadata": {"name": name, "labels": {PROJECT_LABEL: "bench"}}})
        lab.store.create(
            snaps,
            {
                "apiVersion": "snapshot.storage.k8s.io/v1",
                "kind": "VolumeSnapshot",
                "metadata": {
                    "name": "golden-%s" % FAMILY,
                    "namespace": name,
                    "labels": {"kube-dc.com/golden-os": FAMILY, "kube-dc.com/golden-mode": "Filesystem"},
                    "annotations": {"kube-dc.com/seeded-from": "golden-images/golden-%s-x" % FAMILY},
                },
                "spec": {"source": {"volumeSnapshotContentName": "kdc-%s" % name}},
            },
        )

    in_parallel(one, range(start, stop))


def plays(kubeconfig):
    auth = {"kubeconfig": str(kubeconfig)}
    ours = [{"name": "report", "goldenimage.pipeline.golden_info": auth, "register": "info"}]
    theirs = [
        {
            "name": "read",
            "kubernetes.core.k8s_info": dict(
                auth, **{k: "{{ item.%s }}" % k for k in ("api_version", "kind")}
            )
            | {
                "namespace": "{{ item.namespace | default(omit) }}",
                "label_selectors": "{{ item.label_selectors | default(omit) }}",
            },
            "loop": READS,
            "register": "info",
        }
    ]
    largest = [{"name": "read", "kubernetes.core.k8s_info": dict(auth, **READS[2]), "register": "info"}]
    nothing = [{"name": "nothing", "ansible.builtin.debug": {"msg": "hello"}}]

    def play(tasks):
        return [{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]

    return {
        "A golden_info": play(ours),
        "B k8s_info, same lists": play(theirs),
        "B1 k8s_info, largest list": play(largest),
        "0 debug only": play(nothing),
    }


def importtime(kubeconfig, top=12):
    """golden_info run directly under ``python -X importtime``: (import seconds, top cumulative rows, rc)."""
    with tempfile.TemporaryDirectory() as tmp:
        args = pathlib.Path(tmp) / "args.json"
        args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"kubeconfig": str(kubeconfig)}}))
        env = dict(os.environ, PYTHONPATH=str(COLLECTIONS))
        proc = subprocess.run(
            [
                sys.executable,
                "-X",
                "importtime",
                "-m",
                "ansible_collections.goldenimage.pipeline.plugins.modules.golden_info",
                str(args),
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp,
            check=False,
        )
    rows = []
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = line.split("|")
            try:
                rows.append((int(cumulative) / 1e6, name.rstrip(), len(name) - len(name.lstrip())))
            except ValueError:
                continue
    top_level = [r for r in rows if r[2] == 1]
    return sum(r[0] for r in top_level), sorted(top_level, reverse=True)[:top], proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", default="500,5000", help="comma-separated project counts, increasing")
    parser.add_argument("--repeat", type=int, default=5, help="paired runs per size (medians are shown)")
    parser.add_argument("--smoke", action="store_true", help="a quick run: 50 objects, once")
    args = parser.parse_args()
    if args.smoke:
        args.objects, args.repeat = "50", 1
    steps = sorted(int(n) for n in args.objects.split(","))
    rows = []
    with tempfile.TemporaryDirectory() as state, LabProcess(state) as lab:
        seeded = 0
        for count in steps:
            lab.call("bench.startup:seed", seeded, count)
            seeded = count
            runs = plays(lab.kubeconfig)
            cpu = {k: [] for k in runs}
            wall = {k: [] for k in runs}
            lab_cpu = {k: [] for k in runs}
            for _ in range(args.repeat):
                for what, play in runs.items():
                    before = lab.cpu()
                    _out, seconds, used, _rss = playbook(play, env=lab.env())
                    lab_cpu[what].append(lab.cpu() - before)
                    cpu[what].append(used)
                    wall[what].append(seconds)
            rows.append((count, cpu, wall, lab_cpu))
            print("... %d objects done (%s)" % (count, load()), file=sys.stderr, flush=True)
        imports, top, code = importtime(lab.kubeconfig)
    print("%8s  %-28s %8s %8s %8s" % ("objects", "command", "cpu s", "wall s", "lab cpu"))
    figures = []
    for count, cpu, wall, lab_cpu in rows:
        med = {k: statistics.median(v) for k, v in cpu.items()}
        for what in cpu:
            print(
                "%8d  %-28s %8.2f %8.2f %8.2f"
                % (count, what, med[what], statistics.median(wall[what]), statistics.median(lab_cpu[what]))
            )
        a, b = med["A golden_info"], med["B k8s_info, same lists"]
        paired = statistics.median(
            x / y for x, y in zip(cpu["A golden_info"], cpu["B k8s_info, same lists"], strict=True)
        )
        figures.append((count, a, b, paired))
        print(
            "%8d  cpu ratio A/B %.2f, A/B1 %.2f; pairwise A/B median %.2f"
            % (count, a / b, a / med["B1 k8s_info, largest list"], paired)
        )
    print(
        "golden_info module process, python -X importtime (exit %d): %.3fs of top-level imports"
        % (code, imports)
    )
    for seconds, name, _ in top:
        print("  %7.3fs %s" % (seconds, name.strip()))
    print(
        "(medians of %d paired runs; cpu = user+sys of ansible-playbook and its children; lab cpu = the lab's"
        " own process, not included; %s)" % (args.repeat, load())
    )
    for line in startup_lines(figures):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
