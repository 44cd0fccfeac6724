#!/usr/bin/env python3
"""Time and bytes read of seal_verify against the seed's method, on a Windows golden the size of a real one.

The image: a qcow2 of 64 GiB virtual size, GPT (ESP, MSR, C:), a real NTFS C: holding a sealed bake's
files and ``--data-gib`` GiB of random (incompressible, allocated) file data. It is built once, without
mounting (mkntfs on a sparse partition file, wimlib-imagex for the tree, ntfscp for the data files),
and cached in .cache/bench/.

Measured in the same run:
- seal_verify's verifier in this process (dissect imported beforehand), and as a fresh process;
- the seed's method: ``qemu-img convert`` of C: to raw, then the ntfs-3g tools (ntfsls, ntfscat) on it.
  (The seed converts the whole disk and mounts C: at its offset; every data byte lives in C:, so
  converting C: alone costs the same or less and needs no loop device.)

Bytes read are counted by the verifier itself, and for the seed's commands read from
/proc/<shell>/io (rchar, which includes the commands the shell ran).

    .venv/bin/python bench/seal_verify.py [--data-gib 4] [--repeat 3]

Exits non-zero when seal_verify misses its targets: under 1 s and under 8 MiB read.
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
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / ".collections"))

from ansible_collections.goldenimage.pipeline.plugins.module_utils import seal_cli  # noqa: E402

from tests.integration import disks  # noqa: E402

GIB = 1024**3
MIB = disks.MIB
VIRTUAL = 64 * GIB
CHUNK = 256 * MIB
CACHE = ROOT / ".cache" / "bench"
TARGET_SECONDS = 1.0
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
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", seal_cli.__name__, str(image)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    seconds = time.monotonic() - started
    verdict = json.loads(proc.stdout.strip().split(seal_cli.MARKER, 1)[1])
    return {"seconds": seconds, "bytes_read": verdict["bytes_read"], "sealed": verdict["sealed"]}


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


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-gib", type=int, default=4, help="GiB of random file data in C: (default 4)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    missing = disks.missing_tools() + [t for t in ("ntfsls", "ntfscat") if not disks.shutil.which(t)]
    if missing:
        raise SystemExit("missing tools: %s (Debian: gdisk ntfs-3g wimtools e2fsprogs qemu-utils)" % missing)
    image, info = build(args.data_gib)
    print(
        "image: %s, %d GiB virtual, %.2f GiB random file data, qcow2 %.2f GiB (built in %ss, cached)"
        % (
            image,
            info["virtual_size"] // GIB,
            info["data_bytes"] / GIB,
            info["qcow2_bytes"] / GIB,
            info["build_seconds"],
        )
    )
    ours = seal_verify_in_process(image, args.repeat)
    fresh = seal_verify_process(image)
    seed = seed_method(image, info)
    rows = [
        ("seal_verify (verifier, warm)", ours["seconds"], ours["bytes_read"], "sealed=%s" % ours["sealed"]),
        ("seal_verify (new process)", fresh["seconds"], fresh["bytes_read"], "imports included"),
        (
            "seed: qemu-img convert + ntfs-3g",
            seed["seconds"],
            seed["bytes_read"],
            "wrote %.2f GiB" % (seed["bytes_written"] / GIB),
        ),
    ]
    print("%-34s %10s %14s  %s" % ("method", "seconds", "bytes read", "note"))
    for name, seconds, read, note in rows:
        print("%-34s %10.3f %14s  %s" % (name, seconds, "{:,}".format(read), note))
    print(
        "ratio: the seed's method took %.0fx the time and read %.0fx the bytes"
        % (seed["seconds"] / max(ours["seconds"], 1e-6), seed["bytes_read"] / max(ours["bytes_read"], 1))
    )
    ok = ours["sealed"] and ours["seconds"] < TARGET_SECONDS and ours["bytes_read"] < TARGET_BYTES
    print(
        "targets (< %.0f s, < %d MiB read): %s"
        % (TARGET_SECONDS, TARGET_BYTES // MIB, "met" if ok else "MISSED")
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
