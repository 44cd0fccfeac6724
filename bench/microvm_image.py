#!/usr/bin/env python3
"""CPU and peak memory of microvm_image against the seed's ``mount + tar | gzip``, and its sizes.

The default run measures CPU (user + system, children included) and peak RSS of the module's runner and
of the seed's method on one root made of this machine's real files, repeated, and prints medians and
ratios (``--repeat``, 3 by default). The root: a 2 GiB raw disk, GPT (ESP, Linux root), an ext4 root
made with ``mkfs.ext4 -d`` from hard links into ``/usr/lib/x86_64-linux-gnu``, ``/usr/share/man``,
``/usr/lib/python3*``, ``/usr/share/i18n`` and ``/etc`` (about 1.1 GiB in about 34,000 files on a
Debian 12 machine) plus a kernel and a modules directory; built once, cached in .cache/bench/.
The seed's method runs as root with ``mount -o loop,ro,offset=N``; where the mount is not allowed it
runs ``tar | gzip`` over the tree ``debugfs rdump`` extracted once (the output says which).

    .venv/bin/python bench/microvm_image.py [--repeat 3]

``--sizes`` runs the older report below instead: time, peak memory and sizes on a 2 GiB raw disk, side
by side with the seed's path.

The disk: 2 GiB raw, GPT (ESP, Linux root), an ext4 root made with ``mkfs.ext4 -d`` from a tree of
this machine's real files (shared libraries, docs, man pages, locales: hard links into /usr, read
only) plus incompressible stand-ins for what a CAPI image carries (a 40 MiB vmlinux with its banner,
80 MiB of modules, firmware, apt caches and lists, baked containerd blobs). Built once, cached in
.cache/bench/.

Measured in one run, each as a fresh process (wall time; peak RSS from wait4):
- microvm_image without slim and with slim (+ baked container images): the three images into an OCI
  layout, rootless;
- the seed's path as root where this machine allows a loop mount: offset from the partition table
  (``sfdisk --json``), ``mount -o loop,ro,offset=N``, ``tar -C mnt -c . | gzip`` (its ``docker import``
  needs a daemon; the tar+gzip is the layer it would store);
- the root-free baseline: ``debugfs -R 'rdump / out' 'disk.raw?offset=N'``, then ``tar | gzip``.

    .venv/bin/python bench/microvm_image.py --sizes [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / ".collections"))

from bench.verdict import verdict  # noqa: E402
from tests.integration.support import disks  # noqa: E402
from tests.integration.support import microvm_parts as parts  # noqa: E402

MIB = 1024 * 1024
GIB = 1024 * MIB
CACHE = ROOT / ".cache" / "bench"
DISK = CACHE / "microvm-2g.raw"
VERSION = "5.15.65"
LINUX_GUID = "0FC63DAF-8483-4772-8E79-3D69D8477DE4"
HOST_DIRS = (
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/python3",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/locale",
    "usr/share/i18n",
    "etc",
)
STAND_INS = {  # path -> (files, bytes each)
    "usr/lib/modules/%s/kernel/drivers" % VERSION: (400, 200 * 1024),
    "usr/lib/firmware/vendor": (50, 2 * MIB),
    "var/cache/apt/archives": (20, 2 * MIB),
    "var/lib/apt/lists": (20, 2 * MIB),
    "var/lib/containerd/io.containerd.content.v1.content/blobs/sha256": (30, 5 * MIB),
}

RUN_MODULE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from ansible_collections.goldenimage.pipeline.plugins.modules import microvm_image
class Module:
    check_mode = False
    _diff = False
    def __init__(self, params):
        self.params = {k: v.get("default") for k, v in microvm_image.argument_spec().items()}
        self.params.update(params)
    def log(self, line):
        print(line, file=sys.stderr, flush=True)
result = microvm_image.Runner(Module(json.loads(sys.argv[2]))).run()
result.pop("progress")
print(json.dumps(result))
"""


def cached_disk(disk: pathlib.Path, fill) -> dict:
    """The 2 GiB disk ``disk`` whose root ``fill(tree)`` makes, built once and cached with its figures."""
    meta_path = disk.with_suffix(".json")
    if disk.exists() and meta_path.exists():
        return json.loads(meta_path.read_text())
    CACHE.mkdir(parents=True, exist_ok=True)
    work = pathlib.Path(tempfile.mkdtemp(prefix="microvm-bench-", dir=CACHE))
    tree = work / "tree"
    started = time.monotonic()
    try:
        fill(tree)
        (tree / ("boot/config-%s" % VERSION)).write_text("# Linux/x86 %s Kernel Configuration\n" % VERSION)
        (tree / ("usr/lib/modules/%s/modules.dep" % VERSION)).write_text("")
        scratch = assemble(work, tree)
        meta = {
            "file_bytes": tree_bytes(tree),
            "files": sum(len(names) for _, _, names in os.walk(tree)),
            "build_seconds": round(time.monotonic() - started, 1),
        }
        scratch.rename(disk)
        meta_path.write_text(json.dumps(meta))
        return meta
    finally:
        shutil.rmtree(work, ignore_errors=True)


def build_disk() -> dict:
    def fill(tree):
        linked_tree(tree, HOST_DIRS)
        (tree / "boot/vmlinux").write_bytes(parts.kernel_bytes(VERSION, 40 * MIB))
        for folder, (count, size) in STAND_INS.items():
            (tree / folder).mkdir(parents=True, exist_ok=True)
            for i in range(count):
                (tree / folder / ("f%04d.bin" % i)).write_bytes(os.urandom(size))

    return cached_disk(DISK, fill)


def linked_tree(tree: pathlib.Path, folders) -> None:
    """``tree`` with ``folders`` of this machine, ``lib`` -> ``usr/lib`` and an empty ``boot``."""
    for rel in folders:
        source = pathlib.Path("/") / rel
        if source.is_dir() and not source.is_symlink():
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            # Hard links into this machine's files: mkfs only reads them; nothing here writes to them.
            subprocess.run(["cp", "-al", str(source), str(tree / rel)], check=True)
    os.symlink("usr/lib", tree / "lib")
    (tree / "boot").mkdir()


def assemble(work: pathlib.Path, tree: pathlib.Path) -> pathlib.Path:
    """A 2 GiB raw GPT disk in ``work``: a 4 MiB ESP, then the ext4 root mkfs.ext4 -d makes of ``tree``."""
    root = disks.ext4_image(work / "root.ext4", tree, 2 * GIB - 8 * MIB)
    layout = ["-n", "1:2048:+4M", "-t", "1:ef00", "-n", "2:10240:0", "-t", "2:8300", "-c", "2:root"]
    scratch = work / "disk.raw"
    disks.run("truncate", "-s", str(2 * GIB), scratch)
    disks.run("sgdisk", *layout, scratch)
    disks.place(scratch, root, 10240 * 512)
    return scratch


def tree_bytes(tree: pathlib.Path) -> int:
    seen, total = set(), 0
    for dirpath, _, files in os.walk(tree):
        for name in files:
            st = os.lstat(os.path.join(dirpath, name))
            if st.st_ino not in seen and not os.path.islink(os.path.join(dirpath, name)):
                seen.add(st.st_ino)
                total += st.st_size
    return total


def measured(command, shell: bool = False) -> dict:
    """Run a command; wall seconds, and the peak RSS of its largest process (``RUSAGE_CHILDREN``:
    callers run this inside ``isolated`` so the peak is this command's alone)."""
    import resource

    started = time.monotonic()
    proc = subprocess.run(command, shell=shell, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    if proc.returncode:
        raise SystemExit("%s failed: %s" % (command, proc.stderr[-2000:]))
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return {"seconds": round(seconds, 1), "peak_rss": peak, "stdout": proc.stdout, "stderr": proc.stderr}


def run_module(params: dict) -> dict:
    got = measured([sys.executable, "-c", RUN_MODULE, str(ROOT / ".collections"), json.dumps(params)])
    got["result"] = json.loads(got.pop("stdout"))
    return got


def isolated(fn, *args):
    """Run ``fn`` in a forked child so RUSAGE_CHILDREN's peak is that run's alone."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            payload = json.dumps(fn(*args)).encode()
        except BaseException as exc:
            payload = json.dumps({"error": str(exc)}).encode()
        with os.fdopen(write, "wb") as fh:
            fh.write(payload)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        data = fh.read()
    os.waitpid(pid, 0)
    found = json.loads(data)
    if "error" in found:
        raise SystemExit(found["error"])
    return found


def module_run(params):
    got = run_module(params)
    got.pop("stderr", None)
    return got


def root_offset() -> int:
    table = json.loads(disks.run("sfdisk", "--json", DISK))["partitiontable"]
    # The seed reads the offset off the partition listing; sfdisk's JSON is that listing, parsed.
    linux = [p for p in table["partitions"] if p["type"].upper() == LINUX_GUID]
    return linux[0]["start"] * table.get("sectorsize", 512)


def seed_path(out: pathlib.Path) -> dict:
    offset = root_offset()
    mnt = out / "mnt"
    mnt.mkdir()
    mounted = subprocess.run(
        ["mount", "-o", "loop,ro,offset=%d" % offset, str(DISK), str(mnt)], capture_output=True, text=True
    )
    if mounted.returncode:
        return {"skipped": "loop mount not allowed here: %s" % mounted.stderr.strip()}
    try:
        got = measured("tar -C %s -c . | gzip -6 > %s" % (mnt, out / "rootfs.tar.gz"), shell=True)
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
    return {
        "seconds": got["seconds"],
        "peak_rss": got["peak_rss"],
        "size": (out / "rootfs.tar.gz").stat().st_size,
    }


def debugfs_path(out: pathlib.Path) -> dict:
    offset = root_offset()
    dump = out / "rdump"
    dump.mkdir()
    got = measured(["debugfs", "-R", "rdump / %s" % dump, "%s?offset=%d" % (DISK, offset)])
    tarred = measured("tar -C %s -c . | gzip -6 > %s" % (dump, out / "rootfs-debugfs.tar.gz"), shell=True)
    return {
        "seconds": round(got["seconds"] + tarred["seconds"], 1),
        "rdump_seconds": got["seconds"],
        "peak_rss": max(got["peak_rss"], tarred["peak_rss"]),
        "size": (out / "rootfs-debugfs.tar.gz").stat().st_size,
    }


# CPU and memory against the seed's method ----------------------------------------------------------

REAL_DISK = CACHE / "microvm-real-2g.raw"
REAL_DIRS = (
    "usr/lib/x86_64-linux-gnu",
    "usr/share/man",
    "usr/lib/python3",
    "usr/lib/python3.11",
    "usr/share/i18n",
    "etc",
)
REAL_MODULES = (200, 64 * 1024)  # stand-in modules: files, bytes each


def build_real_disk() -> dict:
    """The disk whose ext4 root holds this machine's real files (hard links, read only)."""

    def fill(tree):
        linked_tree(tree, REAL_DIRS)
        (tree / "boot/vmlinux").write_bytes(parts.kernel_bytes(VERSION, 8 * MIB))
        drivers = tree / ("usr/lib/modules/%s/kernel/drivers" % VERSION)
        drivers.mkdir(parents=True)
        count, size = REAL_MODULES
        for i in range(count):
            (drivers / ("m%04d.ko" % i)).write_bytes(os.urandom(size // 2) + bytes(size // 2))

    return cached_disk(REAL_DISK, fill)


def cpu_of(command, shell: bool = False) -> dict:
    """CPU seconds (user + system of every process it started) and the largest peak RSS among them.

    Called in a forked child (``isolated``), so ``RUSAGE_CHILDREN`` counts this command alone."""
    import resource

    proc = subprocess.run(command, shell=shell, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise SystemExit("%s failed: %s" % (command, proc.stderr[-2000:]))
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "cpu": usage.ru_utime + usage.ru_stime,
        "user": usage.ru_utime,
        "sys": usage.ru_stime,
        "peak_rss": usage.ru_maxrss * 1024,
        "stdout": proc.stdout,
    }


def runner_cpu(out: pathlib.Path, level: int) -> dict:
    dest = out / "layout"
    shutil.rmtree(dest, ignore_errors=True)
    # The bench root has no /usr/bin programs to read the architecture from: it is this machine's.
    params = {"src": str(REAL_DISK), "dest": str(dest), "compression_level": level, "architecture": "amd64"}
    got = cpu_of([sys.executable, "-c", RUN_MODULE, str(ROOT / ".collections"), json.dumps(params)])
    result = json.loads(got.pop("stdout"))
    got["layers"] = {n: result[n]["layer_digest"] for n in ("kernel", "modules", "rootfs")}
    shutil.rmtree(dest, ignore_errors=True)
    return got


def seed_cpu(out: pathlib.Path, level: int, source: str) -> dict:
    """The seed's ``tar -C <root> -c . | gzip`` over ``source`` (the loop mount, or the extracted tree)."""
    target = out / "seed.tar.gz"
    got = cpu_of("tar -C %s -c . | gzip -%d > %s" % (source, level, target), shell=True)
    got["size"] = target.stat().st_size
    target.unlink()
    got.pop("stdout")
    return got


def loop_mount(mnt: pathlib.Path) -> None:
    subprocess.run(
        ["mount", "-o", "loop,ro,offset=%d" % real_root_offset(), str(REAL_DISK), str(mnt)],
        check=True,
        capture_output=True,
    )


def real_root_offset() -> int:
    table = json.loads(disks.run("sfdisk", "--json", REAL_DISK))["partitiontable"]
    linux = [p for p in table["partitions"] if p["type"].upper() == LINUX_GUID]
    return linux[0]["start"] * table.get("sectorsize", 512)


def can_loop_mount(out: pathlib.Path) -> str | None:
    """None when this machine lets us loop-mount the root, else why not."""
    if os.geteuid() != 0:
        return "not root"
    mnt = out / "probe"
    mnt.mkdir()
    offset = real_root_offset()
    probe = subprocess.run(
        ["mount", "-o", "loop,ro,offset=%d" % offset, str(REAL_DISK), str(mnt)],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode:
        return probe.stderr.strip() or "mount failed"
    subprocess.run(["umount", str(mnt)], check=False)
    return None


def extracted_tree() -> pathlib.Path:
    """The root extracted once with ``debugfs rdump`` (cached), for machines without a loop mount."""
    tree = CACHE / "microvm-real-tree"
    if not (tree / ".complete").exists():
        shutil.rmtree(tree, ignore_errors=True)
        tree.mkdir(parents=True)
        disks.run("debugfs", "-R", "rdump / %s" % tree, "%s?offset=%d" % (REAL_DISK, real_root_offset()))
        (tree / ".complete").write_text("")
    return tree


def median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2.0


def ratio_main(repeat: int, level: int) -> int:
    meta = build_real_disk()
    print(
        "root: %s, %s of file data in %d files (real files of this machine; built in %s s, cached)"
        % (REAL_DISK.name, mib(meta["file_bytes"]), meta["files"], meta["build_seconds"])
    )
    out = pathlib.Path(tempfile.mkdtemp(prefix="microvm-bench-ratio-", dir=CACHE))
    try:
        why = can_loop_mount(out)
        tree = None
        if why is not None:
            print("seed method: no loop mount (%s); tar | gzip runs over a tree extracted once" % why)
            tree = str(extracted_tree())
        runs = []
        mnt = out / "mnt"
        mnt.mkdir()
        how = "tar over a tree debugfs extracted once (no loop mount here)"
        if tree is None:
            how = "mount -o loop,ro,offset=N (outside the figures) + tar | gzip, as root"
        for i in range(repeat):
            module = isolated(runner_cpu, out, level)
            if tree is None:
                loop_mount(mnt)
                try:
                    seed = isolated(seed_cpu, out, level, str(mnt))
                finally:
                    subprocess.run(["umount", str(mnt)], check=False)
            else:
                seed = isolated(seed_cpu, out, level, tree)
            runs.append((module, seed))
            print(
                "run %d: module %.2f s CPU (user %.2f, sys %.2f), %s peak; seed %.2f s CPU (user %.2f, "
                "sys %.2f), %s peak; CPU ratio %.2f"
                % (
                    i + 1,
                    module["cpu"],
                    module["user"],
                    module["sys"],
                    mib(module["peak_rss"]),
                    seed["cpu"],
                    seed["user"],
                    seed["sys"],
                    mib(seed["peak_rss"]),
                    module["cpu"] / seed["cpu"],
                )
            )
    finally:
        shutil.rmtree(out, ignore_errors=True)
    digests = {json.dumps(m["layers"], sort_keys=True) for m, _ in runs}
    summary = {
        "seed_method": how,
        "repeat": repeat,
        "compression_level": level,
        "module_cpu_median": round(median([m["cpu"] for m, _ in runs]), 2),
        "seed_cpu_median": round(median([s["cpu"] for _, s in runs]), 2),
        "cpu_ratio_median": round(median([m["cpu"] / s["cpu"] for m, s in runs]), 3),
        "module_peak_rss_median": median([m["peak_rss"] for m, _ in runs]),
        "seed_peak_rss_median": median([s["peak_rss"] for _, s in runs]),
        "memory_ratio_median": round(median([m["peak_rss"] / float(s["peak_rss"]) for m, s in runs]), 2),
        "same_layers_every_run": len(digests) == 1,
        "seed_tarball": runs[0][1]["size"],
    }
    print()
    print("seed method: %s" % summary["seed_method"])
    print(
        "median CPU: module %.2f s, seed %.2f s; ratio (module / seed, pair by pair) %.3f"
        % (summary["module_cpu_median"], summary["seed_cpu_median"], summary["cpu_ratio_median"])
    )
    print(
        "median peak RSS: module %s, seed %s; ratio %.2f"
        % (
            mib(summary["module_peak_rss_median"]),
            mib(summary["seed_peak_rss_median"]),
            summary["memory_ratio_median"],
        )
    )
    # The goal: at most the seed method's CPU (user + system, children included).
    print(verdict("microvm_image CPU against the seed's method", summary["cpu_ratio_median"], 1.0, "x"))
    print(json.dumps(summary))
    return 0 if summary["cpu_ratio_median"] <= 1.0 else 1


def mib(value: float) -> str:
    return "%.1f MiB" % (value / MIB)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the OCI layouts and tarballs (--sizes)")
    parser.add_argument("--sizes", action="store_true", help="the time, memory and sizes report instead")
    parser.add_argument("--repeat", type=int, default=3, help="paired runs of the CPU and memory ratio")
    parser.add_argument("--level", type=int, default=6, help="gzip level of both sides")
    args = parser.parse_args()
    missing = [
        t for t in ("mkfs.ext4", "sgdisk", "sfdisk", "debugfs", "tar", "gzip") if shutil.which(t) is None
    ]
    if missing:
        print("bench/microvm_image.py: missing tools: %s" % ", ".join(missing))
        return 1
    if not args.sizes:
        return ratio_main(args.repeat, args.level)
    meta = build_disk()
    print(
        "disk: %s, 2 GiB raw GPT, %s of file data (built in %s s, cached)"
        % (DISK.name, mib(meta["file_bytes"]), meta["build_seconds"])
    )
    out = pathlib.Path(tempfile.mkdtemp(prefix="microvm-bench-out-", dir=CACHE))
    try:
        plain = isolated(module_run, {"src": str(DISK), "dest": str(out / "plain"), "architecture": "amd64"})
        slim = isolated(
            module_run,
            {
                "src": str(DISK),
                "dest": str(out / "slim"),
                "slim": True,
                "slim_container_images": True,
                "architecture": "amd64",
            },
        )
        seed = isolated(seed_path, out) if os.geteuid() == 0 else {"skipped": "not root"}
        rdump = isolated(debugfs_path, out)
    finally:
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)

    p, s = plain["result"], slim["result"]
    print()
    print("%-46s %9s %12s %14s" % ("path", "time", "peak RSS", "rootfs layer"))
    rows = [
        ("microvm_image (3 images, rootless)", plain["seconds"], plain["peak_rss"], p["rootfs"]["size"]),
        ("microvm_image slim (3 images, rootless)", slim["seconds"], slim["peak_rss"], s["rootfs"]["size"]),
    ]
    if "skipped" not in seed:
        rows.append(
            ("seed: loop mount + tar | gzip (root, 1 image)", seed["seconds"], seed["peak_rss"], seed["size"])
        )
    rows.append(
        (
            "debugfs rdump + tar | gzip (root-free, 1 image)",
            rdump["seconds"],
            rdump["peak_rss"],
            rdump["size"],
        )
    )
    for name, seconds, peak, size in rows:
        print("%-46s %8.1fs %12s %14s" % (name, seconds, mib(peak), mib(size)))
    if "skipped" in seed:
        print("seed path: %s" % seed["skipped"])
    print()
    print(
        "images without slim: kernel %s, modules %s, rootfs %s (layers, gzip)"
        % (mib(p["kernel"]["size"]), mib(p["modules"]["size"]), mib(p["rootfs"]["size"]))
    )
    print(
        "rootfs files: %s before slim, %s after"
        % (mib(s["sizes"]["source_bytes"]), mib(s["sizes"]["rootfs_bytes"]))
    )
    print("bytes removed per slim group:")
    for group, size in sorted(s["removed"].items()):
        print("  %-18s %12d  (%s)" % (group, size, mib(size)))
    ratios = {
        "slim / plain rootfs layer": s["rootfs"]["size"] / float(p["rootfs"]["size"]),
        "plain time / debugfs baseline": plain["seconds"] / rdump["seconds"],
        "plain peak RSS / debugfs baseline": plain["peak_rss"] / float(rdump["peak_rss"]),
    }
    if "skipped" not in seed:
        ratios["plain time / seed path"] = plain["seconds"] / seed["seconds"]
        ratios["plain rootfs layer / seed tarball"] = p["rootfs"]["size"] / float(seed["size"])
    for name, value in ratios.items():
        print("ratio %-36s %.2f" % (name, value))
    summary = {
        "plain": {k: plain[k] for k in ("seconds", "peak_rss")},
        "slim": {k: slim[k] for k in ("seconds", "peak_rss")},
        "seed": seed,
        "debugfs": rdump,
        "removed": s["removed"],
        "sizes": {"plain": p["sizes"], "slim": s["sizes"]},
        "layers": {n: {"plain": p[n]["size"], "slim": s[n]["size"]} for n in ("kernel", "modules", "rootfs")},
        "ratios": {k: round(v, 3) for k, v in ratios.items()},
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
