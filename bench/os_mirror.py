#!/usr/bin/env python3
"""os_mirror upload throughput against a loopback S3 server, compared with one plain put_object.

Writes a file of random bytes (256 MiB by default), starts the lab's S3 (tests/lab/s3.py: versitygw, which
verifies every signature, body hash and checksum, behind the lab's relay) in its own process on 127.0.0.1,
then times, each --repeat times (the median is printed, the server emptied between runs):

  given    the os_mirror_object upload path with the sha256 given: the file is read once; parts
           (Content-MD5 each, ETag compared) go straight to the digest key's multipart upload while
           the whole sha256 is computed, then CompleteMultipartUpload with If-None-Match and a HEAD;
  hashed   the same without the sha256: the file is read once to hash it first (the key holds it);
  put      a single-stream boto3 put_object of the same file, nothing verified;
  skip     a second mirror run: a listing and a HEAD decide nothing needs moving.

"complete" is the time of CompleteMultipartUpload alone: versitygw's POSIX backend copies every part
into the object file (S3 itself completes without moving the bytes).

First, paired runs (one put_object, the upload adapter of --baseline, this one, in turn, each on its
own client) on loopback and through a forwarder that caps each connection at --cap-mib MiB/s (the way
a WAN link or a gateway limits one stream): throughput, the ratio to the put, and the client's CPU per
MiB (this process, its upload threads included; the server and the forwarder run in their own).
--ab-only stops there.

--matrix times the "given" path for every --part-mib x --concurrency pair instead.

    .venv/bin/python bench/os_mirror.py [--size-mib 256] [--part-mib 64] [--concurrency 2] [--repeat 3]
    .venv/bin/python bench/os_mirror.py --matrix --part-mib 16 32 64 --concurrency 1 2 4
    .venv/bin/python bench/os_mirror.py --ab-only --size-mib 32 --part-mib 8 --cap-mib 1.5
    .venv/bin/python bench/os_mirror.py --smoke

Ends with the issue's figures: the speed-up over one put_object on the capped link (goal >= 2x) and the
client's CPU per MiB on loopback (goal <= 2.5 ms/MiB), see bench/verdict.py.
"""

from __future__ import annotations

import argparse
import functools
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / ".collections"))

from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket import _mirror_transfer as transfer  # noqa: E402
from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket import mirror  # noqa: E402
from ansible_collections.goldenimage.pipeline.plugins.module_utils.s3._s3 import s3_client  # noqa: E402

sys.path.insert(0, str(ROOT))
from bench.labproc import load  # noqa: E402
from bench.verdict import mirror_lines  # noqa: E402
from tests.lab.s3 import S3Endpoint  # noqa: E402

KEYS = S3Endpoint("")  # the only identity the lab's S3 accepts

MIB = 1024 * 1024
# The module's defaults (plugins/modules/os_mirror_object.py).
DEFAULT_PART = 16 * MIB
DEFAULT_CONCURRENCY = 4
BUCKET = "bench-os-mirror"
SERVER = """
import sys
from tests.lab.s3 import S3Server
server = S3Server()
print(server.start().endpoint_url, flush=True)
sys.stdin.read()
server.stop()
"""


# A TCP forwarder that caps each connection's upload direction at --cap-mib MiB/s (token bucket per
# connection), the way a WAN link or a gateway limits one stream; it runs in its own process.
PROXY = """
import socket, sys, threading, time
upstream_host, upstream_port, cap = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]) * 1048576
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", 0))
listener.listen(64)
print(listener.getsockname()[1], flush=True)

def pump(src, dst, limited):
    started, sent = time.monotonic(), 0
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
            if limited:
                sent += len(data)
                ahead = sent / cap - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

def serve(client):
    server = socket.create_connection((upstream_host, upstream_port))
    threading.Thread(target=pump, args=(client, server, True), daemon=True).start()
    threading.Thread(target=pump, args=(server, client, False), daemon=True).start()

threading.Thread(target=lambda: [serve(listener.accept()[0]) for _ in iter(int, 1)], daemon=True).start()
sys.stdin.read()
"""


def start_proxy(endpoint, cap_mib):
    host, port = endpoint.split("//", 1)[1].split(":")
    proc = subprocess.Popen(
        [sys.executable, "-c", PROXY, host, port, str(cap_mib)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    return proc, "http://127.0.0.1:%s" % proc.stdout.readline().strip()


UTILS = "ansible_collections.goldenimage.pipeline.plugins.module_utils"


def baseline_transfer(revision):
    """The upload adapter as it was at ``revision`` (same _s3 and mirror as now), loaded as a module."""
    import importlib.util

    source = subprocess.run(
        ["git", "show", "%s:plugins/module_utils/bucket/_mirror_transfer.py" % revision],
        cwd=str(ROOT),
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    # Since then redact_message moved from _s3 to redact: the baseline imports it from where it is now.
    source = source.replace("    redact_message,\n)", ")\nfrom %s.redact import redact_message" % UTILS)
    path = pathlib.Path(tempfile.mkdtemp(prefix="os-mirror-baseline-")) / "_mirror_transfer_baseline.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("_mirror_transfer_baseline", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cpu_timed(call):
    """``(result, wall seconds, cpu seconds of this process)`` of ``call()`` (its upload threads included)."""
    cpu, wall = time.process_time(), time.monotonic()
    result = call()
    return result, time.monotonic() - wall, time.process_time() - cpu


def ab(endpoint, path, digest, part_mib, concurrency, repeat, baseline):
    """Paired runs (put, baseline mirror, this mirror, in turn) on fresh clients: medians of wall and
    of client cpu seconds by label."""
    clients = {
        label: s3_client(
            endpoint_url=endpoint,
            access_key=KEYS.access_key,
            secret_key=KEYS.secret_key,
            max_pool_connections=concurrency + 2,
        )
        for label in ("put", "old", "new")
    }
    runs = {label: ([], []) for label in clients}
    for _ in range(repeat):
        for label, client in clients.items():
            empty(client)
            if label == "put":
                call = functools.partial(run_put, client, path)
            else:
                module = baseline if label == "old" else transfer
                call = functools.partial(
                    run_mirror, client, path, part_mib * MIB, concurrency, digest, module
                )
            _result, wall, cpu = cpu_timed(call)
            runs[label][0].append(wall)
            runs[label][1].append(cpu)
    median = statistics.median
    return {label: (median(walls), median(cpus)) for label, (walls, cpus) in runs.items()}


def start_server():
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    return proc, proc.stdout.readline().strip()


def write_random(path: pathlib.Path, size_mib: int) -> None:
    with path.open("wb") as stream:
        for _ in range(size_mib):
            stream.write(os.urandom(MIB))


def run_mirror(client, path, part_size, concurrency, sha256=None, module=transfer):
    """One upload the way os_mirror_object does it; ``(report, seconds)``."""
    started = time.monotonic()
    source = module.open_source(path=str(path))

    def destination(digest):
        key = mirror.object_key("bench", "1", digest, path.name)
        return key, mirror.final_metadata(digest, str(path), "2026-01-01T00:00:00Z")

    try:
        job = module.Upload(
            client,
            BUCKET,
            source,
            destination,
            mirror.plan_part_size(source.size, part_size),
            concurrency,
            expected_sha256=sha256,
        )
        report = job.run()
        return report, time.monotonic() - started
    finally:
        source.close()


def run_put(client, path):
    started = time.monotonic()
    with path.open("rb") as body:
        client.put_object(Bucket=BUCKET, Key="plain/" + path.name, Body=body)
    return time.monotonic() - started


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


class CallClock:
    """Seconds spent in each S3 operation (botocore events), to show where the server spends the time."""

    def __init__(self, client):
        self.spent = {}
        self.local = threading.local()
        client.meta.events.register("before-call.s3", self.before)
        client.meta.events.register("after-call.s3", self.after)

    def before(self, model, **kwargs):
        self.local.started = time.monotonic()

    def after(self, model, **kwargs):
        self.spent.setdefault(model.name, []).append(time.monotonic() - self.local.started)

    def take(self, name):
        return self.spent.pop(name, [])


def empty(client):
    """Delete every object, so each timed run starts from the same server state."""
    for obj in transfer.list_objects(client, BUCKET):
        client.delete_object(Bucket=BUCKET, Key=obj["key"])


def median_complete(clock, repeat):
    """Median seconds of the CompleteMultipartUpload calls of the last ``repeat`` uploads."""
    spent = clock.take("CompleteMultipartUpload")[-repeat:]
    return sorted(spent)[len(spent) // 2] if spent else 0.0


def timed(client, repeat, call):
    """Median seconds of ``repeat`` runs of ``call()`` (which returns seconds or (report, seconds))."""
    runs = []
    for _ in range(repeat):
        empty(client)
        runs.append(call())
    pairs = [run if isinstance(run, tuple) else (None, run) for run in runs]
    return sorted(pairs, key=lambda pair: pair[1])[len(pairs) // 2]


def describe(label, size, report, seconds, concurrency, complete):
    return "%-7s %8.1f MiB/s  %6.2f s  %s %d x %d MiB  concurrency %d  sha256 %s  (complete: %.2f s)" % (
        label,
        mirror.throughput_mib_s(size, seconds),
        seconds,
        report["method"],
        report["parts"],
        report["part_size"] // MIB,
        concurrency,
        report["digest_from"],
        complete,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--part-mib", type=int, nargs="+", default=[DEFAULT_PART // MIB])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[DEFAULT_CONCURRENCY])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--matrix", action="store_true")
    parser.add_argument("--cap-mib", type=float, default=25.0, help="per-connection cap of the capped link")
    parser.add_argument("--baseline", default="d7f5fb3", help="git revision of the upload adapter to compare")
    parser.add_argument("--ab-only", action="store_true", help="only the paired put/old/new runs")
    parser.add_argument("--smoke", action="store_true", help="a quick run: --ab-only, 16 MiB, once")
    args = parser.parse_args()
    if args.smoke:
        args.ab_only, args.size_mib, args.part_mib, args.repeat = True, 16, [4], 1

    proc, endpoint = start_server()
    lines, ok, by_link = [], True, []
    try:
        client = s3_client(
            endpoint_url=endpoint,
            access_key=KEYS.access_key,
            secret_key=KEYS.secret_key,
            max_pool_connections=max(10, max(args.concurrency) + 2),
        )
        client.create_bucket(Bucket=BUCKET)
        clock = CallClock(client)
        with tempfile.TemporaryDirectory(prefix="os-mirror-bench-") as tmp:
            path = pathlib.Path(tmp) / "random.img"
            write_random(path, args.size_mib)
            size = path.stat().st_size
            digest = transfer.hash_source(transfer.open_source(path=str(path)))[0]
            pairs = [(p, c) for p in args.part_mib for c in args.concurrency]
            if not args.matrix:
                pairs = pairs[:1]
            baseline = baseline_transfer(args.baseline)
            part_mib, concurrency = pairs[0]
            proxy, capped = start_proxy(endpoint, args.cap_mib)
            try:
                for link, url in (
                    ("loopback", endpoint),
                    ("capped %g MiB/s a connection" % args.cap_mib, capped),
                ):
                    found = ab(url, path, digest, part_mib, concurrency, args.repeat, baseline)
                    by_link.append(found)
                    put_wall = found["put"][0]
                    for label, name in (
                        ("put", "one put_object"),
                        ("old", "mirror, " + args.baseline),
                        ("new", "mirror, this tree"),
                    ):
                        wall, cpu = found[label]
                        lines.append(
                            "%-34s %-18s %8.1f MiB/s  %6.2f s  %5.2fx put  client cpu %5.2f ms/MiB"
                            % (
                                link,
                                name,
                                mirror.throughput_mib_s(size, wall),
                                wall,
                                put_wall / wall,
                                cpu * 1000 / (size / MIB),
                            )
                        )
            finally:
                proxy.stdin.close()
                proxy.wait(timeout=30)
            if args.ab_only:
                pairs = []
            for part_mib, concurrency in pairs:
                report, seconds = timed(
                    client,
                    args.repeat,
                    functools.partial(run_mirror, client, path, part_mib * MIB, concurrency, digest),
                )
                ok = ok and report["bytes_moved"] == size and report["sha256"] == digest
                lines.append(
                    describe("given", size, report, seconds, concurrency, median_complete(clock, args.repeat))
                )
            if not args.matrix and pairs:
                part_mib, concurrency = pairs[0]
                report, seconds = timed(
                    client, args.repeat, lambda: run_mirror(client, path, part_mib * MIB, concurrency)
                )
                ok = ok and report["sha256"] == digest
                lines.append(
                    describe(
                        "hashed", size, report, seconds, concurrency, median_complete(clock, args.repeat)
                    )
                )
                lines.append(
                    "verified: " + "; ".join(report["verified_by"]),
                )
                seconds = timed(client, args.repeat, lambda: run_put(client, path))[1]
                lines.append(
                    "put     %8.1f MiB/s  %6.2f s  single stream, nothing verified"
                    % (mirror.throughput_mib_s(size, seconds), seconds)
                )
                run_mirror(client, path, part_mib * MIB, concurrency, digest)
                plan, seconds = run_skip(client, path, digest)
                ok = ok and plan["action"] == "skip"
                lines.append(
                    "skip    %8s        %6.3f s  action %s (listing + HEAD)" % ("-", seconds, plan["action"])
                )
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)

    print(
        "file: %d MiB of random bytes; server: the lab's S3 on %s (own process); median of %d runs (put, old"
        " and new in turn on their own clients; part %d MiB, concurrency %d; %s)"
        % (size // MIB, endpoint, args.repeat, args.part_mib[0], args.concurrency[0], load())
    )
    print("\n".join(lines))
    loopback, capped = by_link
    cpu_ms_per_mib = loopback["new"][1] * 1000 / (size / MIB)
    for line in mirror_lines(capped["put"][0], capped["new"][0], cpu_ms_per_mib, args.cap_mib):
        print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
