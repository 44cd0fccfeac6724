#!/usr/bin/env python3
"""A request's overhead through the lab's fault proxy against kube-apiserver direct.

The lab's kubeconfig names kube-apiserver itself: direct is the default path. Only clients given
``lab.fault_kubeconfig`` (tests that arm fault knobs) go through the proxy, whose cost this measures. The
lab (no controllers) runs in its own process (``bench/labproc.py``). One client keeps one connection to
the proxy and one to kube-apiserver and sends the same GET (``/api/v1/namespaces/default``) alternately in
rounds; the proxy is measured with its connections to kube-apiserver kept (what the lab does) and with a
new connection per request, in the same run. Prints per-request medians of each round and the overhead,
with the goal: at most 2 ms more than kube-apiserver direct.

    .venv/bin/python bench/lab_front.py [--requests 200] [--rounds 5] [--smoke]
"""

from __future__ import annotations

import argparse
import base64
import http.client
import pathlib
import ssl
import statistics
import sys
import tempfile
import time
from urllib.parse import urlsplit

import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench.labproc import LabProcess
from bench.verdict import verdict

PATH = "/api/v1/namespaces/default"
GOAL_MS = 2.0


def set_idle(lab, count):
    """In the lab's process: how many connections to kube-apiserver the front keeps (0: none)."""
    lab.server.IDLE_CONNECTIONS = count
    with lab.server._lock:
        idle, lab.server._idle = lab.server._idle, []
    for conn, _kept_at in idle:
        conn.close()


def client(kubeconfig: pathlib.Path):
    """``(connection, headers)`` from a kubeconfig's first cluster and user."""
    doc = yaml.safe_load(kubeconfig.read_text())
    cluster = doc["clusters"][0]["cluster"]
    user = doc["users"][0]["user"]
    context = ssl.create_default_context()
    if cluster.get("certificate-authority-data"):
        context.load_verify_locations(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    else:
        context.load_verify_locations(cafile=cluster["certificate-authority"])
    url = urlsplit(cluster["server"])
    conn = http.client.HTTPSConnection(url.hostname, url.port, context=context, timeout=30)
    return conn, {"Authorization": "Bearer " + user["token"], "Accept": "application/json"}


def timed(conn, headers, count):
    """Per-request seconds of ``count`` GETs on one kept connection."""
    times = []
    for _ in range(count):
        start = time.perf_counter()
        conn.request("GET", PATH, headers=headers)
        reply = conn.getresponse()
        reply.read()
        times.append(time.perf_counter() - start)
        assert reply.status == 200, reply.status
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="20 requests, one round")
    args = parser.parse_args()
    if args.smoke:
        args.requests, args.rounds = 20, 1
    with tempfile.TemporaryDirectory() as state, LabProcess(pathlib.Path(state) / "lab") as lab:
        front, front_headers = client(lab.fault_kubeconfig)
        direct, direct_headers = client(lab.kubeconfig)  # the lab's own kubeconfig: kube-apiserver
        timed(front, front_headers, 20)  # warm: the connections and the API server's caches
        timed(direct, direct_headers, 20)
        medians = {"direct": [], "front": [], "front, new connection per request": []}
        for number in range(args.rounds):
            lab.call("bench.lab_front:set_idle", 0)
            medians["front, new connection per request"].append(
                statistics.median(timed(front, front_headers, args.requests))
            )
            lab.call("bench.lab_front:set_idle", 16)
            medians["front"].append(statistics.median(timed(front, front_headers, args.requests)))
            medians["direct"].append(statistics.median(timed(direct, direct_headers, args.requests)))
            print(
                "round %d: %s"
                % (number + 1, ", ".join("%s %.2f ms" % (k, v[-1] * 1000) for k, v in medians.items())),
                flush=True,
            )
    result = dict((name, statistics.median(values) * 1000) for name, values in medians.items())
    for name, value in result.items():
        print("%s: %.2f ms per request (median of %d rounds)" % (name, value, args.rounds))
    old = result["front, new connection per request"] - result["direct"]
    print("overhead with a new connection per request: %.2f ms" % old)
    print(verdict("overhead through the front", result["front"] - result["direct"], GOAL_MS, "ms"))


if __name__ == "__main__":
    main()
