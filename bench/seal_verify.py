#!/usr/bin/env python3
"""Time and bytes read of seal_verify against the seed's method, on a Windows golden the size of a real one.

The image: a qcow2 of 64 GiB virtual size, GPT (ESP, MSR, C:), a real NTFS C: holding a sealed bake's
files and ``--data-gib`` GiB of random (incompressible, allocated) file data. It is built once, without
mounting (mkntfs on a sparse partition file, wimlib-imagex for the tree, ntfscp for the data files),
and cached in .cache/bench/.

Measured in the same run, like for like: both are fresh processes on a cold page cache (dropped
before each run through /proc/sys/vm/drop_caches, which needs root; the bench says when the kernel
refused the drop, and then its figures are warm):
- seal_verify's verifier as a fresh process (``python -m ..._seal_cli``), imports included;
- the seed's method: ``qemu-img convert`` of C: to raw, then the ntfs-3g tools (ntfsls, ntfscat) on it.
  (The seed converts the whole disk and mounts C: at its offset; every data byte lives in C:, so
  converting C: alone costs the same or less and needs no loop device.)
The headline is the cold ratio seed/verifier at each data size. A warm in-process figure is printed
as a footnote only.

Bytes read are counted by the verifier itself, and for the seed's commands read from
/proc/<shell>/io (rchar, which includes the commands the shell ran).

    .venv/bin/python bench/seal_verify.py [--data-gib 1,4,8] [--repeat 3] [--smoke]

Ends with the issue's figures at each size: the cold ratio against the seed's method and a verdict on
0.25 s and on 8 MiB read (see bench/verdict.py). Exits non-zero when seal_verify misses its targets.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / ".collections"))

from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import _seal_cli as seal_cli  # noqa: E402

from bench.verdict import seal_lines  # noqa: E402
from tests.integration.support import disks  # noqa: E402

GIB = 1024**3
MIB = disks.MIB
VIRTUAL = 64 * GIB
CHUNK = 256 * MIB
CACHE = ROOT / ".cache" / "bench"
TARGET_SECONDS = 0.25
DROP_CACHES = pathlib.Path("/proc/sys/vm/drop_caches")
TARGET_BYTES = 8 * MIB


def copy_extents(src: pathlib.Path, dst: pathlib.Path, offset: int) -> None:
    """Copy the allocated extents of a sparse file into ``dst`` at ``offset`` (dd would read the holes)."""
    with open(src, "rb") as fin, open(dst, "r+b") as fout:
        end = os.fstat(fin.fileno()).st_size
        pos = 0
        while pos < end:
            try:
                start = os.lseek(fin.fileno(), pos, os.SEEK_DATA)
            except OSError:
                break
            stop = os.lseek(fin.fileno(), start, os.SEEK_HOLE)
            fin.seek(start)
            fout.seek(offset + start)
            left = stop - start
            while left:
                block = fin.read(min(left, 16 * MIB))
                fout.write(block)
                left -= len(block)
            pos = stop


def build(data_gib: int) -> tuple[pathlib.Path, dict]:
    image = CACHE / ("windows-64g-%dgib.qcow2" % data_gib)
    stamp = image.with_suffix(".json")
    if image.exists() and stamp.exists():
        return image, json.loads(stamp.read_text())
    CACHE.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        work = pathlib.Path(tmp)
        esp_start, msr_start, c_start = 2048, 2048 + 100 * MIB // 512, 2048 + 116 * MIB // 512
        c_end = VIRTUAL // 512 - 2048 - 1
        layout = [
            "-n",
            "1:%d:%d" % (esp_start, msr_start - 1),
            "-t",
            "1:" + disks.ESP,
            "-n",
            "2:%d:%d" % (msr_start, c_start - 1),
            "-t",
            "2:" + disks.MSR,
            "-n",
            "3:%d:%d" % (c_start, c_end),
            "-t",
            "3:" + disks.BASIC_DATA,
            "-c",
            "3:Basic data partition",
        ]
        raw = disks.gpt_disk(work / "disk.raw", VIRTUAL, layout)
        files = disks.sealed_windows_files({"Data/": b""})
        part = disks.ntfs_partition(work / "c.img", (c_end - c_start + 1) * 512, c_start, files)
        blob = work / "blob.bin"
        for index in range(data_gib * GIB // CHUNK):
            with open(blob, "wb") as fh:
                for _chunk in range(CHUNK // (16 * MIB)):
                    fh.write(os.urandom(16 * MIB))
            disks.ntfs_copy(part, blob, "/Data/blob-%03d.bin" % index)
        blob.unlink()
        copy_extents(part, raw, c_start * 512)
        part.unlink()
        disks.qcow2(raw, work / "disk.qcow2")
        (work / "disk.qcow2").rename(image)
    info = {
        "virtual_size": VIRTUAL,
        "data_bytes": data_gib * GIB,
        "qcow2_bytes": image.stat().st_size,
        "c_offset": c_start * 512,
        "c_size": (c_end - c_start + 1) * 512,
        "build_seconds": round(time.monotonic() - started, 1),
    }
    stamp.write_text(json.dumps(info, indent=2))
    return image, info


def seal_verify_in_process(image: pathlib.Path, repeat: int) -> dict:
    seal_cli.verify(str(image))  # imports dissect and warms the page cache, as the seed's run has it warm too
    runs = [seal_cli.verify(str(image)) for _ in range(repeat)]
    return {
        "seconds": statistics.median(r["seconds"] for r in runs),
        "bytes_read": max(r["bytes_read"] for r in runs),
        "sealed": runs[-1]["sealed"],
        "failed": runs[-1]["failed_checks"],
    }


def seal_verify_process(image: pathlib.Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT / ".collections"))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", seal_cli.__name__, str(image)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    seconds = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    verdict = json.loads(proc.stdout.strip().split(seal_cli.MARKER, 1)[1])
    return {"seconds": seconds, "cpu": cpu, "bytes_read": verdict["bytes_read"], "sealed": verdict["sealed"]}


def seed_method(image: pathlib.Path, info: dict) -> dict:
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        part = pathlib.Path(tmp) / "c.raw"
        opts = "driver=raw,offset=%d,size=%d,file.driver=qcow2,file.file.filename=%s" % (
            info["c_offset"],
            info["c_size"],
            image,
        )
        script = (
            'qemu-img convert -O raw --image-opts "$1" "$2" && '
            'ntfsls -f "$2" > "$2.ls" && '
            'ntfscat "$2" bootstrap.log > "$2.log" && '
            "grep -E '^(rchar|wchar)' /proc/$$/io"
        )
        started = time.monotonic()
        proc = subprocess.run(
            ["bash", "-c", script, "seed", opts, str(part)], capture_output=True, text=True, check=False
        )
        seconds = time.monotonic() - started
        if proc.returncode:
            raise SystemExit("the seed's method failed: %s" % proc.stderr)
        counters = dict(line.split(": ") for line in proc.stdout.split("\n") if ": " in line)
        listing = pathlib.Path(str(part) + ".ls").read_text()
        log = pathlib.Path(str(part) + ".log").read_bytes()
        return {
            "seconds": seconds,
            "bytes_read": int(counters["rchar"]),
            "bytes_written": int(counters["wchar"]),
            "build_failed_found": "build_failed" in listing.lower(),
            "log_last_line": log.decode("utf-8", "replace").strip().splitlines()[-1],
        }


def evict(image: pathlib.Path) -> bool:
    """Evict the image's pages only (POSIX_FADV_DONTNEED): a cold disk, a warm interpreter and tools."""
    with open(image, "rb") as fh:
        os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    return True


def drop_caches() -> bool:
    """Drop the page cache (needs root); False when the kernel refuses."""
    try:
        os.sync()
        DROP_CACHES.write_text("3\n")
        return True
    except OSError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-gib", default="1,4,8", help="GiB of random file data in C:, comma-separated")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="a quick run: no data, once")
    args = parser.parse_args()
    if args.smoke:
        args.data_gib, args.repeat = "0", 1
    missing = disks.missing_tools() + [t for t in ("ntfsls", "ntfscat") if not disks.shutil.which(t)]
    if missing:
        raise SystemExit("missing tools: %s (Debian: gdisk ntfs-3g wimtools e2fsprogs qemu-utils)" % missing)
    sizes = [int(n) for n in args.data_gib.split(",")]
    rows = []
    ok = True
    for gib in sizes:
        image, info = build(gib)
        cold = {"ours": [], "seed": [], "ours_img": [], "seed_img": [], "ours_cpu": []}
        reads = {"ours": [], "seed": []}
        dropped = True
        for _ in range(args.repeat):
            for suffix, make_cold in (("", drop_caches), ("_img", lambda i=image: evict(i))):
                dropped = make_cold() and dropped
                fresh = seal_verify_process(image)
                cold["ours" + suffix].append(fresh["seconds"])
                cold["ours_cpu"].append(fresh["cpu"])
                reads["ours"].append(fresh["bytes_read"])
                ok = ok and fresh["sealed"]
                dropped = make_cold() and dropped
                seed = seed_method(image, info)
                cold["seed" + suffix].append(seed["seconds"])
                reads["seed"].append(seed["bytes_read"])
        warm = seal_verify_in_process(image, args.repeat)
        ours_s, seed_s = statistics.median(cold["ours"]), statistics.median(cold["seed"])
        image_only = (
            statistics.median(cold["ours_img"]),
            statistics.median(cold["seed_img"]),
            statistics.median(cold["ours_cpu"]),
        )
        rows.append(
            (gib, info, ours_s, max(reads["ours"]), seed_s, max(reads["seed"]), warm, dropped, image_only)
        )
        ok = ok and image_only[0] <= TARGET_SECONDS and max(reads["ours"]) < TARGET_BYTES
        print("... %d GiB done (%s)" % (gib, os.getloadavg()), file=sys.stderr, flush=True)
    print(
        "%5s %8s  %10s %14s  %10s %16s  %9s %9s"
        % ("data", "qcow2", "ours cold", "ours read", "seed cold", "seed read", "time x", "bytes x")
    )
    for gib, info, ours_s, ours_r, seed_s, seed_r, _warm, _dropped, _image_only in rows:
        print(
            "%4dG %7.2fG  %9.3fs %14s  %9.2fs %16s  %8.0fx %8.0fx"
            % (
                gib,
                info["qcow2_bytes"] / GIB,
                ours_s,
                "{:,}".format(ours_r),
                seed_s,
                "{:,}".format(seed_r),
                seed_s / max(ours_s, 1e-6),
                seed_r / max(ours_r, 1),
            )
        )
    print(
        "(medians of %d runs, fresh processes both, whole page cache %s before each; %d GiB virtual; load %s)"
        % (
            args.repeat,
            "dropped" if all(r[7] for r in rows) else "NOT dropped (refused)",
            VIRTUAL // GIB,
            "%.2f %.2f %.2f" % os.getloadavg(),
        )
    )
    for gib, _info, *_rest, warm, _dropped, (ours_i, seed_i, ours_cpu) in rows:
        print(
            "%d GiB, image pages evicted (interpreter, tools warm): ours %.3fs, seed %.2fs, %.0fx;"
            " ours cpu %.3fs (user+sys of the fresh process: what the load does not inflate)"
            % (gib, ours_i, seed_i, seed_i / max(ours_i, 1e-6), ours_cpu)
        )
        print("footnote: %d GiB, verifier in this process, warm: %.3fs" % (gib, warm["seconds"]))
    figures = [(gib, image_only[0], read, image_only[1]) for gib, _, _, read, *_, image_only in rows]
    for line in seal_lines(figures):
        print(line)
    print(
        "targets (image cold, fresh process <= %.2f s, < %d MiB read): %s"
        % (TARGET_SECONDS, TARGET_BYTES // MIB, "met" if ok else "MISSED")
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
