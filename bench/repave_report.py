#!/usr/bin/env python3
"""API requests and wall time of dbinstance_repave's drift report over many DBInstances.

Starts a lab without controllers in its own process, seeds the catalog and the DBInstances through
its API, many at once (each with the status an operator would have written: phase, applied revision, drift
conditions), then runs the module with ``state: report`` through ansible-playbook, paired: the same
collection on the baseline adapter (dynamic-client objects) and on this one (raw JSON pages), at each
fleet size. Prints medians, the old/new ratio and the growth of time against the growth of objects.
Requests come from the lab's audit log. Exits non-zero when a verdict does not match the fleet seeded.

    .venv/bin/python bench/repave_report.py [--instances 0,1000,10000] [--repeat 3] [--smoke]

Ends with the issue's figures: each size against the baseline, 100,000 DBInstances against its 30 s and
the growth between sizes against linear (see bench/verdict.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.labproc import (  # noqa: E402
    COLLECTIONS,
    LabProcess,
    add_direct_argument,
    baseline_collections,
    in_parallel,
    load,
    playbook,
)
from bench.verdict import drift_lines  # noqa: E402
from tests.lab.objects import now_rfc3339  # noqa: E402

# The adapter before list bodies were parsed raw (the dynamic client's objects, then to_dict).
BASELINE = "a34c254"
ADAPTER = "plugins/module_utils/kube/_kube.py"

GROUP, VERSION, PLURAL = "db.goldenimage.io", "v1alpha1", "dbinstances"
NAMESPACE, CATALOG_NS = "fleet", "dbaas-system"
OLD, TIP = "v20260615", "v20260815"
TODAY = "2026-09-01"
# Every 10th instance runs PostgreSQL 15, which the tip no longer carries; every 4th is on the tip.
CATALOG = {
    "version": 1,
    "default_stream": "22.04",
    "streams": {"22.04": {"tip": TIP, "validated": True}},
    "images": {
        OLD: {"os_version": "22.04", "pg_versions": ["15", "16", "17"], "build_date": "2026-06-15"},
        TIP: {"os_version": "22.04", "pg_versions": ["16", "17"], "build_date": "2026-08-15"},
    },
}


def expected_verdict(index):
    if index % 10 == 0:
        return "PGVersionEOL"
    return "Current" if index % 4 == 0 else "OSUpdateAvailable"


def condition(kind, status):
    return {
        "type": kind,
        "status": status,
        "reason": kind,
        "message": "",
        "lastTransitionTime": now_rfc3339(),
    }


def seed(lab, start, stop):
    """DBInstances ``start`` .. ``stop - 1`` with an operator's status, through the store."""
    rt = lab.store.resource(GROUP, VERSION, PLURAL)

    def one(index):
        engine = "15" if index % 10 == 0 else "16"
        revision = TIP if expected_verdict(index) == "Current" else OLD
        verdict = expected_verdict(index)
        created = lab.store.create(
            rt,
            {
                "metadata": {"name": "db-%04d" % index, "namespace": NAMESPACE, "labels": {"tier": "bench"}},
                "spec": {"engineVersion": engine},
            },
        )
        created["status"] = {
            "phase": "Available",
            "appliedSpec": {"imageRevision": revision, "osVersion": "22.04", "engineVersion": engine},
            "conditions": [
                condition("OSUpdateAvailable", "True" if verdict == "OSUpdateAvailable" else "False"),
                condition("PGVersionEOL", "True" if verdict == "PGVersionEOL" else "False"),
                condition("Ready", "True"),
            ],
        }
        lab.store.update(rt, created, subresource="status")

    in_parallel(one, range(start, stop))


def setup(lab):
    core = {"namespaces": lab.store.resource("", "v1", "namespaces")}
    for name in (NAMESPACE, CATALOG_NS):
        lab.store.create(core["namespaces"], {"metadata": {"name": name}})
    lab.store.create(
        lab.store.resource("", "v1", "configmaps"),
        {
            "metadata": {"name": "baked-image-catalog", "namespace": CATALOG_NS},
            "data": {"catalog.yaml": yaml.safe_dump(CATALOG)},
        },
    )


def report(lab, collections, direct=False):
    """One report through ansible-playbook: (seconds, cpu seconds, requests by verb and resource, result).

    ``direct``: the module talks to kube-apiserver itself, not through the lab's front.
    """
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "report",
                    "goldenimage.pipeline.dbinstance_repave": {
                        "namespace": NAMESPACE,
                        "catalog": {"namespace": CATALOG_NS, "name": "baked-image-catalog"},
                        "today": TODAY,
                    },
                    "register": "drift",
                },
                {
                    "name": "result",
                    "ansible.builtin.copy": {"content": "{{ drift | to_json }}", "dest": "{{ out }}"},
                },
            ],
        }
    ]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        play[0]["vars"] = {"out": str(out)}
        lab.clear_audit()
        _stdout, elapsed, cpu, _rss = playbook(play, env=lab.env(direct), collections=collections)
        result = json.loads(out.read_text())
    requests = {}
    for record in lab.audit():
        if record["resource"]:
            key = "%s %s" % (record["verb"], record["resource"])
            requests[key] = requests.get(key, 0) + 1
    return elapsed, cpu, requests, result


def wrong_report(result, count):
    """What is wrong with a report of the first ``count`` instances seeded, or None.

    Above the detail limit the report is a summary: the counts cover every instance, the rows only those
    that need attention; every row returned must carry the verdict its instance was seeded with.
    """
    wanted = {"db-%04d" % i: expected_verdict(i) for i in range(count)}
    counts = {}
    for verdict in wanted.values():
        counts[verdict] = counts.get(verdict, 0) + 1
    if result["summary"] != counts:
        return "summary %s, expected %s" % (result["summary"], counts)
    rows = {e["name"]: e["verdict"] for e in result["instances"]}
    wrong = sorted(n for n in rows if wanted.get(n) != rows[n])
    if wrong:
        return "%d instance(s) with a wrong verdict, e.g. %s" % (len(wrong), wrong[:5])
    if result.get("details") == "summary":
        attention = sum(n for verdict, n in counts.items() if verdict != "Current")
        if len(rows) != min(attention, 1000) or "Current" in rows.values():
            return "a summary of %d rows (%d need attention)" % (len(rows), attention)
        if len(rows) + result["instances_omitted"] != count:
            return "%d rows + %d omitted != %d" % (len(rows), result["instances_omitted"], count)
    elif len(rows) != count:
        return "%d rows for %d instances" % (len(rows), count)
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", default="0,100,1000", help="comma-separated fleet sizes, increasing")
    parser.add_argument("--repeat", type=int, default=3, help="paired runs per size (medians are shown)")
    parser.add_argument("--baseline", default=BASELINE, help="git revision of the adapter to compare with")
    parser.add_argument("--smoke", action="store_true", help="a quick run: 100 and 1,000, once")
    add_direct_argument(parser)
    args = parser.parse_args()
    if args.smoke:
        args.instances, args.repeat = "100,1000", 1
    steps = sorted(int(n) for n in args.instances.split(","))
    rows = []
    with (
        tempfile.TemporaryDirectory() as state,
        tempfile.TemporaryDirectory() as old_tree,
        LabProcess(state) as lab,
    ):
        old = baseline_collections(args.baseline, [ADAPTER], old_tree)
        lab.call("bench.repave_report:setup")
        seeded = 0
        for count in steps:
            lab.call("bench.repave_report:seed", seeded, count)
            seeded = count
            times = {"new": [], "old": []}
            cpus = {"new": [], "old": []}
            lab_cpu, server_cpu = [], []
            for _ in range(args.repeat):
                for which, tree in (("old", old), ("new", COLLECTIONS)):
                    before, server_before = lab.cpu(), lab.server_cpu()
                    elapsed, cpu, requests, result = report(lab, tree, args.direct)
                    if which == "new":
                        lab_cpu.append(lab.cpu() - before)
                        server_cpu.append(lab.server_cpu() - server_before)
                    times[which].append(elapsed)
                    cpus[which].append(cpu)
                    problem = wrong_report(result, count)
                    if problem:
                        print("FAIL (%s): %s" % (which, problem), file=sys.stderr)
                        return 1
                    if which == "new":
                        new_requests, summary = requests, result["summary"]
            rows.append(
                (
                    count,
                    new_requests,
                    times,
                    cpus,
                    statistics.median(lab_cpu),
                    statistics.median(server_cpu),
                    summary,
                )
            )
            print(
                "... %d instances: old %.2fs, new %.2fs (medians; %s)"
                % (count, statistics.median(times["old"]), statistics.median(times["new"]), load()),
                file=sys.stderr,
                flush=True,
            )
    print(
        "%9s %9s  %-40s %8s %8s %7s %8s %8s %8s  %s"
        % (
            "instances",
            "requests",
            "requests by verb (new)",
            "old s",
            "new s",
            "old/new",
            "new cpu",
            "lab cpu",
            "srv cpu",
            "verdicts",
        )
    )
    previous = None
    for count, requests, times, cpus, lab_cpu, server_cpu, summary in rows:
        by_verb = ", ".join("%s %d" % kv for kv in sorted(requests.items()))
        verdicts = ", ".join("%s %d" % kv for kv in sorted(summary.items()))
        old_s, new_s = statistics.median(times["old"]), statistics.median(times["new"])
        print(
            "%9d %9d  %-40s %8.2f %8.2f %7.2f %8.2f %8.2f %8.2f  %s"
            % (
                count,
                sum(requests.values()),
                by_verb,
                old_s,
                new_s,
                old_s / new_s,
                statistics.median(cpus["new"]),
                lab_cpu,
                server_cpu,
                verdicts,
            )
        )
        if previous and previous[0]:
            print(
                "%9s growth %dx objects: new %.2fx time, old %.2fx time"
                % ("", count // previous[0], new_s / previous[1], old_s / previous[2])
            )
        previous = (count, new_s, old_s)
    steps = [(r[0], statistics.median(r[2]["old"]), statistics.median(r[2]["new"])) for r in rows]
    for line in drift_lines(steps):
        print(line)
    print(
        "(seconds: medians of %d paired ansible-playbook runs, start-up included as the 0 row shows;"
        " old = the same collection with %s's %s; lab cpu = the lab's own process (its front) and srv cpu ="
        " kube-apiserver and etcd during a new run, not in the module's figures; %s)"
        % (args.repeat, args.baseline, ADAPTER, load())
    )
    counts = {tuple(sorted(r[1].items())) for r in rows}
    if len(counts) != 1:
        print(
            "NOTE: the report sent different requests for different fleet sizes (list pages)", file=sys.stderr
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
