#!/usr/bin/env python
"""Requests per second of the lab API server for get and list with 1,000 ConfigMaps.

Starts a lab, creates 1,000 ConfigMaps in one namespace (every 100th labelled `pick=yes`), then
runs a fixed number of requests per scenario from two client threads over keep-alive HTTP/1.1
connections. Exits non-zero when GET falls under the target.

    .venv/bin/python bench/lab_rps.py [--objects 1000] [--requests 2000]
"""

from __future__ import annotations

import argparse
import http.client
import json
import pathlib
import sys
import tempfile
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from tests.lab import Lab

TARGET_RPS = 500
NAMESPACE = "bench"


def _connection(lab) -> http.client.HTTPConnection:
    return lab.connection(timeout=30)  # HTTPS with the lab's CA on the real API server


def _request(conn, method: str, path: str, token: str, body=None) -> bytes:
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    payload = None
    if body is not None:
        payload = json.dumps(body)
        headers["Content-Type"] = "application/json"
    conn.request(method, path, body=payload, headers=headers)
    resp = conn.getresponse()
    data = resp.read()
    if resp.status >= 300:
        raise RuntimeError(f"{method} {path}: {resp.status} {data[:200]!r}")
    return data


def _populate(lab: Lab, count: int) -> None:
    conn = _connection(lab)
    _request(conn, "POST", "/api/v1/namespaces", lab.admin_token, {"metadata": {"name": NAMESPACE}})
    for i in range(count):
        labels = {"app": "bench", "index": str(i)}
        if i % 100 == 0:
            labels["pick"] = "yes"
        body = {
            "metadata": {"name": f"cm-{i:04d}", "labels": labels},
            "data": {"key": f"value-{i}", "blob": "x" * 64},
        }
        _request(conn, "POST", f"/api/v1/namespaces/{NAMESPACE}/configmaps", lab.admin_token, body)
    conn.close()


def _measure(lab: Lab, paths: list[str], requests: int, threads: int = 2) -> float:
    per_thread = requests // threads
    barrier = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def worker(offset: int) -> None:
        conn = _connection(lab)
        try:
            _request(conn, "GET", paths[0], lab.admin_token)  # warm the connection
            barrier.wait()
            for i in range(per_thread):
                _request(conn, "GET", paths[(offset + i) % len(paths)], lab.admin_token)
        except BaseException as exc:
            errors.append(exc)
        finally:
            conn.close()

    workers = [threading.Thread(target=worker, args=(n * 7919,)) for n in range(threads)]
    for w in workers:
        w.start()
    barrier.wait()
    started = time.perf_counter()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise errors[0]
    return per_thread * threads / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=2000, help="requests per scenario")
    args = parser.parse_args()

    base = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
    with tempfile.TemporaryDirectory() as state, Lab(state, with_s3=False, controllers=[]) as lab:
        started = time.perf_counter()
        _populate(lab, args.objects)
        create_rps = args.objects / (time.perf_counter() - started)
        scenarios = [
            ("get one object", [f"{base}/cm-{i:04d}" for i in range(args.objects)], args.requests),
            ("list, labelSelector (~10 items)", [f"{base}?labelSelector=pick%3Dyes"], args.requests),
            ("list, limit=100", [f"{base}?limit=100"], args.requests),
            (f"list, all {args.objects}", [base], max(50, args.requests // 20)),
        ]
        rows = [("create (1 thread, sequential)", args.objects, create_rps)]
        for name, paths, count in scenarios:
            rows.append((name, count, _measure(lab, paths, count)))

    print(f"{'scenario':<36} {'requests':>9} {'req/s':>9}")
    for name, count, rps in rows:
        print(f"{name:<36} {count:>9} {rps:>9.0f}")
    get_rps = rows[1][2]
    if get_rps < TARGET_RPS:
        print(f"FAIL: get {get_rps:.0f} req/s is under the target of {TARGET_RPS}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
