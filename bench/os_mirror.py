#!/usr/bin/env python3
"""os_mirror upload throughput against a loopback S3 server, compared with one plain put_object.

Writes a file of random bytes (256 MiB by default), starts moto's S3 server in its own process on
127.0.0.1, then times:

  mirror   the os_mirror_object upload path: sha256 while streaming, multipart parts (16 MiB, 4 at a
           time) to a temporary key, every part verified, server-side copy to the digest key,
           final object verified, temporary key deleted;
  put      a single-stream boto3 put_object of the same file to another key;
  skip     the second run of the mirror: a listing and a HEAD decide nothing needs moving.

    .venv/bin/python bench/os_mirror.py [--size-mib 256] [--part-mib 16] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / ".collections"))

from ansible_collections.goldenimage.pipeline.plugins.module_utils import _mirror_transfer as transfer  # noqa: E402
from ansible_collections.goldenimage.pipeline.plugins.module_utils import mirror  # noqa: E402
from ansible_collections.goldenimage.pipeline.plugins.module_utils._s3 import s3_client  # noqa: E402

MIB = 1024 * 1024
BUCKET = "bench-os-mirror"
SERVER = """
import logging, sys
from moto.server import ThreadedMotoServer
logging.getLogger("werkzeug").setLevel(logging.ERROR)
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print("%s:%d" % server.get_host_and_port(), flush=True)
sys.stdin.read()
server.stop()
"""


def start_server():
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    address = proc.stdout.readline().strip()
    return proc, "http://" + address


def write_random(path: pathlib.Path, size_mib: int) -> None:
    with path.open("wb") as stream:
        for _ in range(size_mib):
            stream.write(os.urandom(MIB))


def run_mirror(client, path, part_size, concurrency):
    source = transfer.open_source(path=str(path))

    def destination(digest):
        key = mirror.object_key("bench", "1", digest, path.name)
        return key, mirror.final_metadata(digest, str(path), "2026-01-01T00:00:00Z")

    try:
        job = transfer.Upload(
            client,
            BUCKET,
            mirror.incoming_key("bench", path.name),
            source,
            destination,
            mirror.plan_part_size(source.size, part_size),
            concurrency,
        )
        started = time.monotonic()
        report = job.run()
        return report, time.monotonic() - started
    finally:
        source.close()


def run_skip(client, path, digest):
    """What a second mirror run does with the digest given: list the version, HEAD the object, decide."""
    started = time.monotonic()
    found = []
    for obj in transfer.list_objects(client, BUCKET, mirror.version_prefix("bench", "1")):
        parsed = mirror.parse_key(obj["key"])
        head = transfer.head(client, BUCKET, obj["key"])
        parsed.update(key=obj["key"], metadata_sha256=head["Metadata"].get(mirror.META_SHA256))
        found.append(parsed)
    plan = mirror.plan_object("bench", "1", path.name, digest, found)
    return plan, time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--part-mib", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()

    proc, endpoint = start_server()
    try:
        client = s3_client(
            endpoint_url=endpoint,
            access_key="bench",
            secret_key="bench",
            max_pool_connections=max(10, args.concurrency + 2),
        )
        client.create_bucket(Bucket=BUCKET)
        with tempfile.TemporaryDirectory(prefix="os-mirror-bench-") as tmp:
            path = pathlib.Path(tmp) / "random.img"
            write_random(path, args.size_mib)
            size = path.stat().st_size

            report, mirror_seconds = run_mirror(client, path, args.part_mib * MIB, args.concurrency)
            started = time.monotonic()
            with path.open("rb") as body:
                client.put_object(Bucket=BUCKET, Key="plain/random.img", Body=body)
            put_seconds = time.monotonic() - started
            plan, skip_seconds = run_skip(client, path, report["sha256"])
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)

    print("file: %d MiB of random bytes; server: moto on %s (own process)" % (size // MIB, endpoint))
    print(
        "mirror  %8.1f MiB/s  %6.2f s  bytes moved %d  parts %d x %d MiB  concurrency %d  verified: %s"
        % (
            mirror.throughput_mib_s(report["bytes_moved"], mirror_seconds),
            mirror_seconds,
            report["bytes_moved"],
            report["parts"],
            report["part_size"] // MIB,
            args.concurrency,
            "; ".join(report["verified_by"]),
        )
    )
    print(
        "put     %8.1f MiB/s  %6.2f s  bytes moved %d  single stream, no verification"
        % (mirror.throughput_mib_s(size, put_seconds), put_seconds, size)
    )
    print(
        "skip    %8s        %6.3f s  bytes moved 0  action %s (listing + HEAD)"
        % ("-", skip_seconds, plan["action"])
    )
    return 0 if plan["action"] == "skip" and report["bytes_moved"] == size else 1


if __name__ == "__main__":
    sys.exit(main())
