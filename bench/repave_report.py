#!/usr/bin/env python3
"""API requests and wall time of dbinstance_repave's drift report over many DBInstances.

Starts a lab without controllers, seeds the catalog and the DBInstances straight into its store (each
with the status an operator would have written: phase, applied revision, drift conditions), then runs
the module with ``state: report`` through ansible-playbook once per fleet size. Requests come from the
lab's audit log. Exits non-zero when the report sends more requests for more instances, or when its
verdicts do not match the fleet seeded.

    .venv/bin/python bench/repave_report.py [--instances 0,100,1000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.runner import run_playbook  # noqa: E402
from tests.lab import Lab  # noqa: E402
from tests.lab.store import now_rfc3339  # noqa: E402

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
    for index in range(start, stop):
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


def report(lab):
    """One report through ansible-playbook: (seconds, API requests by verb and resource, result)."""
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
                }
            ],
        }
    ]
    lab.clear_audit()
    started = time.perf_counter()
    run = run_playbook(play, env=lab.env())
    elapsed = time.perf_counter() - started
    if not run.ok:
        raise SystemExit("ansible-playbook failed:\n%s" % run.log)
    requests = {}
    for record in lab.audit():
        if record["resource"]:
            key = "%s %s" % (record["verb"], record["resource"])
            requests[key] = requests.get(key, 0) + 1
    return elapsed, requests, run["report"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", default="0,100,1000", help="comma-separated fleet sizes, increasing")
    args = parser.parse_args()
    steps = sorted(int(n) for n in args.instances.split(","))
    rows = []
    with tempfile.TemporaryDirectory() as state, Lab(state, with_s3=False, controllers=[]) as lab:
        setup(lab)
        seeded = 0
        for count in steps:
            began = time.perf_counter()
            seed(lab, seeded, count)
            seeded = count
            seeding = time.perf_counter() - began
            elapsed, requests, result = report(lab)
            verdicts = {e["name"]: e["verdict"] for e in result["instances"]}
            wanted = {"db-%04d" % i: expected_verdict(i) for i in range(count)}
            if verdicts != wanted:
                wrong = sorted(n for n in wanted if verdicts.get(n) != wanted[n])
                print(
                    "FAIL: %d instance(s) with a wrong verdict, e.g. %s" % (len(wrong), wrong[:5]),
                    file=sys.stderr,
                )
                return 1
            rows.append((count, requests, elapsed, seeding, result["summary"]))
    print("%9s %9s  %-40s %9s  %s" % ("instances", "requests", "requests by verb", "seconds", "verdicts"))
    for count, requests, elapsed, _seeding, summary in rows:
        by_verb = ", ".join("%s %d" % kv for kv in sorted(requests.items()))
        verdicts = ", ".join("%s %d" % kv for kv in sorted(summary.items()))
        print("%9d %9d  %-40s %9.2f  %s" % (count, sum(requests.values()), by_verb, elapsed, verdicts))
    print("(seconds: one ansible-playbook run, its start-up included, as the 0 row shows; seeding not timed)")
    counts = {tuple(sorted(r[1].items())) for r in rows}
    if len(counts) != 1:
        print("FAIL: the report sent different requests for different fleet sizes", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
