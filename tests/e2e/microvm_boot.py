#!/usr/bin/env python3
"""make e2e: boot the three micro-VM images under QEMU and time them, with and without ``slim``.

1. A real Debian 12 disk (cached in .cache/e2e/microvm by a content key): ``debootstrap
   --variant=minbase`` with systemd, Debian's cloud kernel unpacked from its package (``apt-get
   download``; ``depmod`` run for it in the tree), the uncompressed ELF ``/boot/vmlinux`` taken out of its
   ``vmlinuz`` (as a Firecracker image carries it), apt lists and the kernel package left in apt's
   cache, and one systemd unit that prints the shell marker on the serial console. The tree goes
   into ext4 (``mkfs.ext4 -d``) inside a raw disk with a GPT (BIOS boot + Linux root).
2. The ``goldenimage.pipeline.microvm_images`` role (tests/e2e/microvm.yml) turns that disk into the
   kernel, modules and root filesystem OCI images, once with ``slim: false`` and once with
   ``slim: true``, each into its own OCI layout.
3. The images are read back with ``umoci unpack`` (an independent reader) and assembled the way
   flintlock does: the root filesystem image as the root volume, the modules image as a second
   volume mounted at ``/lib/modules/<version>`` (an fstab line stands in for flintlock's mount
   metadata), the kernel image's ``boot/vmlinux`` given to QEMU directly (PVH entry, no
   initramfs). Debian's cloud kernel has NVMe and ext4 built in, so the volumes are NVMe drives.
4. Each variant boots ``--runs`` times (alternating), a fresh copy-on-write view each time; the
   time from starting QEMU to the kernel starting init, and to the marker line, are read off the
   serial console. The marker line also says whether ``modprobe`` found a module on the modules
   volume, so a modules image laid out wrongly fails the run.

KVM is used when a guest boots under it (tried first), else TCG (``--accel`` forces one). Needs
root (debootstrap; ext4 owners), qemu-system-x86, debootstrap, lz4, umoci, e2fsprogs, fdisk.
Figures go to .cache/e2e/microvm/results.json and a table on stdout.

    .venv/bin/python tests/e2e/microvm_boot.py [--runs 5] [--accel auto|kvm|tcg]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "e2e" / "microvm"
SUITE = "bookworm"
KERNEL_PACKAGE = "linux-image-cloud-amd64"
BOOTSTRAP_INCLUDE = ("systemd-sysv", "udev", "kmod", "dbus", "iproute2", "less")
MIB = 1024 * 1024
# Bump when build_disk lays the disk out differently (it is part of the cache key).
DISK_LAYOUT = "1"
MARKER = "MICROVM-SHELL-READY"
INIT_LINE = "Run /sbin/init as init process"
# A module on the modules volume that no built-in driver provides and that loads in any guest.
PROBE_MODULE = "virtio_rng"
TOOLS = {
    "qemu-system-x86_64": "qemu-system-x86",
    "debootstrap": "debootstrap",
    "lz4": "lz4",
    "umoci": "umoci",
    "mkfs.ext4": "e2fsprogs",
    "sfdisk": "fdisk",
}
MARKER_UNIT = """[Unit]
Description=Print the shell marker on the serial console
After=local-fs.target
DefaultDependencies=no

[Service]
Type=oneshot
ExecStart=/bin/sh -c 'if modprobe %s; then m=ok; else m=missing; fi; \
  echo "%s modules=$m kernel=$(uname -r)" >/dev/ttyS0'

[Install]
WantedBy=multi-user.target
""" % (PROBE_MODULE, MARKER)


def log(message: str) -> None:
    print("==> microvm e2e: %s" % message, flush=True)


def run(*command, **kwargs) -> str:
    proc = subprocess.run([str(c) for c in command], capture_output=True, text=True, **kwargs)
    if proc.returncode:
        raise SystemExit(
            "%s failed (exit %d): %s" % (" ".join(map(str, command)), proc.returncode, proc.stderr[-3000:])
        )
    return proc.stdout


def host_mirror() -> str:
    for path in sorted(pathlib.Path("/etc/apt/sources.list.d").glob("*.sources")):
        for line in path.read_text().splitlines():
            if line.startswith("URIs:") and "/debian" in line and "security" not in line:
                return line.split()[1]
    return "http://deb.debian.org/debian"


def kernel_deb(folder: pathlib.Path) -> pathlib.Path:
    """Debian's cloud kernel package, the version the metapackage points at today."""
    depends = run("apt-cache", "depends", KERNEL_PACKAGE)
    versioned = [
        line.split(":", 1)[1].strip() for line in depends.splitlines() if "Depends: linux-image-" in line
    ]
    if not versioned:
        raise SystemExit("%s: apt-cache depends names no linux-image package" % KERNEL_PACKAGE)
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o777)  # apt-get download drops to the _apt user
    found = sorted(folder.glob("%s_*.deb" % versioned[0]))
    if not found:
        run("apt-get", "download", versioned[0], cwd=folder)
        found = sorted(folder.glob("%s_*.deb" % versioned[0]))
    return found[-1]


def extract_vmlinux(vmlinuz: pathlib.Path, out: pathlib.Path) -> None:
    """The ELF kernel inside a bzImage (what the kernel's scripts/extract-vmlinux does): find a
    compressed stream's magic, decompress from there, keep the first result that is ELF."""
    data = vmlinuz.read_bytes()
    decoders = [
        (b"\x02\x21\x4c\x18", ["lz4", "-d", "-c"]),
        (b"\xfd7zXZ\x00", ["xz", "-d", "-c"]),
        (b"\x28\xb5\x2f\xfd", ["zstd", "-d", "-c"]),
        (b"\x1f\x8b\x08", ["gzip", "-d", "-c"]),
    ]
    for magic, command in decoders:
        start = data.find(magic)
        while start >= 0 and shutil.which(command[0]):
            proc = subprocess.run(command, input=data[start:], capture_output=True, check=False)
            if proc.stdout[:4] == b"\x7fELF":
                out.write_bytes(proc.stdout)
                return
            start = data.find(magic, start + 1)
    raise SystemExit("%s: no compressed ELF kernel found inside it" % vmlinuz)


def debootstrap(mirror: str, debs: pathlib.Path) -> pathlib.Path:
    """The minimal Debian tree, cached on its own so that a failed later step does not repeat it."""
    key = hashlib.sha256(("%s %s %s" % (mirror, SUITE, ",".join(BOOTSTRAP_INCLUDE))).encode()).hexdigest()[
        :12
    ]
    tree = CACHE / ("bootstrap-%s" % key)
    if (tree / ".complete").exists():
        return tree
    shutil.rmtree(tree, ignore_errors=True)
    log("debootstrap %s (minbase + %s) from %s" % (SUITE, ", ".join(BOOTSTRAP_INCLUDE), mirror))
    run(
        "debootstrap",
        "--variant=minbase",
        "--include=" + ",".join(BOOTSTRAP_INCLUDE),
        "--cache-dir=%s" % debs.resolve(),
        SUITE,
        tree,
        mirror,
    )
    (tree / ".complete").write_text("")
    return tree


def build_disk(debs: pathlib.Path) -> dict:
    deb = kernel_deb(debs)
    mirror = host_mirror()
    key_text = "\n".join([DISK_LAYOUT, MARKER_UNIT, mirror, SUITE, ",".join(BOOTSTRAP_INCLUDE), deb.name])
    key = hashlib.sha256(key_text.encode()).hexdigest()[:12]
    disk = CACHE / ("debian-12-microvm-%s.raw" % key)
    meta_path = disk.with_suffix(".json")
    if disk.exists() and meta_path.exists():
        log("disk cached: %s" % disk)
        return json.loads(meta_path.read_text())
    work = pathlib.Path(tempfile.mkdtemp(prefix="disk-", dir=CACHE))
    tree = work / "tree"
    started = time.monotonic()
    try:
        bootstrap = debootstrap(mirror, debs)
        run("cp", "-a", bootstrap, tree)
        log("kernel %s" % deb.name)
        # The package ships /lib/modules; in a merged-/usr tree /lib is a symlink that must stay one.
        subprocess.run(
            "dpkg-deb --fsys-tarfile %s | tar -x -C %s --keep-directory-symlink"
            % (shlex.quote(str(deb)), shlex.quote(str(tree))),
            shell=True,
            check=True,
        )
        release = deb.name.split("_")[0][len("linux-image-") :]
        run("chroot", tree, "/sbin/depmod", release)
        vmlinuz = tree / "boot" / ("vmlinuz-" + release)
        extract_vmlinux(vmlinuz, tree / "boot" / "vmlinux")
        # What an image build leaves behind: the downloaded kernel package and apt's lists.
        shutil.copy2(deb, tree / "var/cache/apt/archives" / deb.name)
        shutil.copy2("/etc/resolv.conf", tree / "etc/resolv.conf")
        (tree / "etc/apt/sources.list").write_text("deb %s %s main\n" % (mirror, SUITE))
        run("chroot", tree, "apt-get", "-q", "-o", "APT::Sandbox::User=root", "update")
        (tree / "etc/hostname").write_text("microvm\n")
        (tree / "etc/fstab").write_text("/dev/nvme0n1 / ext4 rw,errors=remount-ro 0 1\n")
        # Sealed as a template: identity and host keys are made at first boot.
        (tree / "etc/machine-id").write_text("")
        (tree / "etc/resolv.conf").write_text("")
        unit = tree / "etc/systemd/system/boot-marker.service"
        unit.write_text(MARKER_UNIT)
        wants = tree / "etc/systemd/system/multi-user.target.wants"
        wants.mkdir(parents=True, exist_ok=True)
        (wants / unit.name).symlink_to("/etc/systemd/system/" + unit.name)
        # No login prompt on the console: the marker is the only thing a run waits for.
        for masked in ("serial-getty@ttyS0.service", "getty@tty1.service"):
            (tree / "etc/systemd/system" / masked).symlink_to("/dev/null")
        (tree / ".complete").unlink(missing_ok=True)
        tree_bytes = int(run("du", "-sb", "--apparent-size", tree).split()[0])

        log("disk: raw, GPT (BIOS boot + Linux root), ext4 root made with mkfs.ext4 -d")
        root_mib = tree_bytes // MIB * 3 // 2 + 256
        root = work / "root.ext4"
        run("mkfs.ext4", "-q", "-F", "-L", "root", "-d", tree, root, "%dM" % root_mib)
        scratch = work / "disk.raw"
        run("truncate", "-s", "%dM" % (root_mib + 4), scratch)
        table = "label: gpt\nstart=2048, size=2048, type=21686148-6449-6E6F-744E-656564454649, name=bios\n"
        table += "start=4096, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name=root\n"
        subprocess.run(["sfdisk", "-q", str(scratch)], input=table, text=True, check=True)
        layout = json.loads(run("sfdisk", "--json", scratch))["partitiontable"]
        offset = layout["partitions"][1]["start"] * layout.get("sectorsize", 512)
        run(
            "dd",
            "if=%s" % root,
            "of=%s" % scratch,
            "bs=4M",
            "seek=%d" % offset,
            "oflag=seek_bytes",
            "conv=notrunc,sparse",
            "status=none",
        )
        meta = {
            "disk": str(disk),
            "kernel_release": release,
            "kernel_package": deb.name,
            "tree_bytes": tree_bytes,
            "disk_bytes": scratch.stat().st_size,
            "build_seconds": round(time.monotonic() - started, 1),
        }
        scratch.rename(disk)
        meta_path.write_text(json.dumps(meta, indent=2))
        return meta
    finally:
        shutil.rmtree(work, ignore_errors=True)


def publish(disk: dict, slim: bool, folder: pathlib.Path, republish: bool = False) -> dict:
    """The microvm_images role on the disk, into an OCI layout; returns the role's result (reused when
    this disk was published with this setting already: ``--republish`` runs the role again)."""
    result = folder / "result.json"
    source = folder / "source"
    if not republish and result.exists() and source.exists() and source.read_text() == disk["disk"]:
        log("reusing %s (images of %s)" % (folder, disk["disk"]))
        return json.loads(result.read_text())
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    extra = {
        "microvm_images_src": disk["disk"],
        "microvm_images_dest": str(folder / "oci"),
        "microvm_images_slim": slim,
        "microvm_images_compare_unslimmed": False,
        "microvm_e2e_result": str(result),
        "ansible_python_interpreter": sys.executable,
    }
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"),
        ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false",
    )
    started = time.monotonic()
    proc = subprocess.run(
        [
            str(ROOT / ".venv/bin/ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            str(ROOT / "tests/e2e/microvm.yml"),
            "-e",
            json.dumps(extra),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode:
        raise SystemExit("microvm_images (slim=%s) failed:\n%s" % (slim, proc.stdout[-4000:]))
    got = json.loads(result.read_text())
    got["publish_seconds"] = round(time.monotonic() - started, 1)
    result.write_text(json.dumps(got, indent=2))
    source.write_text(disk["disk"])
    return got


def ext4_from(tree: pathlib.Path, image: pathlib.Path, label: str) -> int:
    used = int(run("du", "-sb", "--apparent-size", tree).split()[0])
    size_mib = used // MIB * 3 // 2 + 64
    run("mkfs.ext4", "-q", "-F", "-L", label, "-d", tree, image, "%dM" % size_mib)
    return used


def assemble(published: dict, folder: pathlib.Path) -> dict:
    """Unpack the three images with umoci and lay them out as flintlock would."""
    oci = folder / "oci"
    version = published["kernel_version"]
    bundles = {}
    for name in ("kernel", "modules", "rootfs"):
        bundle = folder / ("bundle-" + name)
        shutil.rmtree(bundle, ignore_errors=True)
        run("umoci", "unpack", "--image", "%s:%s" % (oci, name), bundle)
        bundles[name] = bundle / "rootfs"
    kernel_file = published["spec"]["kernel"]["filename"].lstrip("/")
    vmlinux = bundles["kernel"] / kernel_file
    if vmlinux.read_bytes()[:4] != b"\x7fELF":
        raise SystemExit("kernel image: %s is not an ELF kernel" % kernel_file)
    if not (bundles["modules"] / "kernel").is_dir() or not (bundles["modules"] / "modules.dep").is_file():
        raise SystemExit(
            "modules image: kernel/ and modules.dep are not at its top (mounted at /lib/modules/%s)" % version
        )
    rootfs = bundles["rootfs"]
    mount_point = published["spec"]["additional_volumes"][0]["mount_point"]
    (rootfs / mount_point.lstrip("/")).mkdir(parents=True, exist_ok=True)
    with open(rootfs / "etc/fstab", "a") as fh:
        # flintlock mounts the modules volume at its mount point; the guest's fstab does it here.
        # udev under emulation on a loaded host can take longer than systemd's 90 s device default;
        # the boot's own --timeout bounds the wait instead.
        fh.write("/dev/nvme1n1 %s ext4 ro,x-systemd.device-timeout=0 0 0\n" % mount_point)
    root_bytes = ext4_from(rootfs, folder / "root.ext4", "root")
    modules_bytes = ext4_from(bundles["modules"], folder / "modules.ext4", "modules")
    shutil.copy2(vmlinux, folder / "vmlinux")
    for bundle in bundles.values():
        shutil.rmtree(bundle.parent, ignore_errors=True)
    return {
        "kernel": str(folder / "vmlinux"),
        "root": str(folder / "root.ext4"),
        "modules": str(folder / "modules.ext4"),
        "root_tree_bytes": root_bytes,
        "modules_tree_bytes": modules_bytes,
    }


def boot_once(parts: dict, accel: str, timeout: float, console: pathlib.Path, cpu: str = "max") -> dict:
    command = [
        "qemu-system-x86_64",
        "-accel",
        accel,
        "-machine",
        "q35",
        "-cpu",
        cpu,
        "-smp",
        "1",
        "-m",
        "512",
        "-nodefaults",
        "-no-reboot",
        "-display",
        "none",
        "-serial",
        "stdio",
        "-kernel",
        parts["kernel"],
        "-append",
        "console=ttyS0 root=/dev/nvme0n1 rootfstype=ext4 rw panic=-1",
        "-drive",
        "file=%s,format=raw,if=none,id=root,snapshot=on" % parts["root"],
        "-device",
        "nvme,drive=root,serial=root",
        "-drive",
        "file=%s,format=raw,if=none,id=modules,readonly=on" % parts["modules"],
        "-device",
        "nvme,drive=modules,serial=modules",
    ]
    started = time.monotonic()
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    found: dict = {}
    lines = []
    os.set_blocking(proc.stdout.fileno(), False)
    buffer = b""
    try:
        while time.monotonic() - started < timeout:
            chunk = proc.stdout.read()
            if chunk:
                buffer += chunk
                *complete, buffer = buffer.split(b"\n")
                for raw in complete:
                    line = raw.decode(errors="replace").rstrip("\r")
                    lines.append(line)
                    now = round(time.monotonic() - started, 3)
                    if INIT_LINE in line and "init_s" not in found:
                        found["init_s"] = now
                    if line.startswith(MARKER):
                        found["marker_s"] = now
                        found["marker"] = line
                if "marker_s" in found:
                    break
            elif proc.poll() is not None:
                break
            else:
                time.sleep(0.01)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        console.write_text("\n".join(lines + [buffer.decode(errors="replace")]) + "\n")
    if "marker_s" not in found:
        state = "QEMU exited %s" % proc.returncode if proc.returncode not in (None, -9) else "timed out"
        tail = " | ".join(line for line in lines[-5:] if line.strip())
        found["error"] = "no %s line after %.0fs (%s); console: %s; last lines: %s" % (
            MARKER,
            time.monotonic() - started,
            state,
            console,
            tail[-600:],
        )
    elif "modules=ok" not in found["marker"]:
        found["error"] = "modprobe %s failed in the guest: %s" % (PROBE_MODULE, found["marker"])
    return found


# CPU models tried under KVM, in order: the host's, then the host's without the MSR nested KVM often
# refuses (IA32_ARCH_CAPABILITIES, 0x10a).
KVM_CPUS = ("host", "host,-arch-capabilities")


def choose_accel(requested: str, parts: dict, folder: pathlib.Path) -> tuple[str, str, str]:
    """(accelerator, CPU model, why): KVM when a guest reaches the marker under it, else TCG."""
    if requested == "tcg":
        return "tcg", "max", "forced"
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        if requested == "kvm":
            raise SystemExit("microvm e2e: --accel kvm, but /dev/kvm is not usable")
        return "tcg", "max", "/dev/kvm is not usable"
    failures = []
    for cpu in KVM_CPUS:
        probe = boot_once(parts, "kvm", 60, folder / "kvm-probe.log", cpu=cpu)
        if "error" not in probe:
            return "kvm", cpu, "a guest booted under KVM (-cpu %s) in %.2fs" % (cpu, probe["marker_s"])
        failures.append("-cpu %s: %s" % (cpu, probe["error"]))
    if requested == "kvm":
        raise SystemExit("microvm e2e: no guest boots under KVM here: %s" % "; ".join(failures))
    return "tcg", "max", "KVM probe failed: %s" % "; ".join(failures)


def summary(values: list[float]) -> dict:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
        "runs": values,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="boots per variant (default 5)")
    parser.add_argument(
        "--accel", choices=("auto", "kvm", "tcg"), default=os.environ.get("E2E_ACCEL", "auto")
    )
    parser.add_argument("--timeout", type=float, default=300, help="seconds one boot may take")
    parser.add_argument("--results", type=pathlib.Path, default=CACHE / "results.json")
    parser.add_argument("--republish", action="store_true", help="run the role even when its images exist")
    args = parser.parse_args()
    if args.runs < 1 or args.timeout <= 0:
        parser.error("--runs and --timeout must be positive")
    if os.geteuid() != 0:
        raise SystemExit("microvm e2e: needs root (debootstrap, and ext4 roots with their owners)")
    missing = sorted({pkg for tool, pkg in TOOLS.items() if shutil.which(tool) is None})
    if missing:
        raise SystemExit(
            "microvm e2e: missing Debian packages: %s (apt-get install %s)" % (missing, " ".join(missing))
        )
    CACHE.mkdir(parents=True, exist_ok=True)

    disk = build_disk(CACHE / "debs")
    log(
        "disk %s: %.0f MiB raw, %.0f MiB of files, kernel %s"
        % (disk["disk"], disk["disk_bytes"] / MIB, disk["tree_bytes"] / MIB, disk["kernel_release"])
    )
    variants = {}
    for name, slim in (("full", False), ("slim", True)):
        folder = CACHE / name
        log("microvm_images role, slim=%s" % slim)
        published = publish(disk, slim, folder, args.republish)
        parts = assemble(published, folder)
        variants[name] = {"published": published, "parts": parts}
        log(
            "%s: rootfs image %.1f MiB, modules %.1f MiB, kernel %.1f MiB (%.1fs)"
            % (
                name,
                published["rootfs"]["size"] / MIB,
                published["modules"]["size"] / MIB,
                published["kernel"]["size"] / MIB,
                published["publish_seconds"],
            )
        )

    accel, cpu, why = choose_accel(args.accel, variants["full"]["parts"], CACHE)
    log("accelerator: %s, -cpu %s (%s)" % (accel, cpu, why))
    timings: dict = {name: {"init_s": [], "marker_s": []} for name in variants}
    for i in range(args.runs):
        order = ("full", "slim") if i % 2 == 0 else ("slim", "full")
        for name in order:
            console = CACHE / name / ("console-%d.log" % i)
            got = boot_once(variants[name]["parts"], accel, args.timeout, console, cpu=cpu)
            if "error" in got:
                raise SystemExit("microvm e2e: %s boot %d: %s" % (name, i + 1, got["error"]))
            timings[name]["marker_s"].append(got["marker_s"])
            timings[name]["init_s"].append(got.get("init_s"))
            log(
                "%s boot %d/%d: init at %.2fs, marker at %.2fs"
                % (name, i + 1, args.runs, got.get("init_s") or -1, got["marker_s"])
            )

    results = {
        "accelerator": accel,
        "cpu": cpu,
        "accelerator_reason": why,
        "disk": disk,
        "runs": args.runs,
        "variants": {},
    }
    for name, variant in variants.items():
        published = variant["published"]
        results["variants"][name] = {
            "slim": name == "slim",
            "kernel_version": published["kernel_version"],
            "images": {
                k: {"digest": published[k]["digest"], "size": published[k]["size"]}
                for k in ("kernel", "modules", "rootfs")
            },
            "removed": published.get("removed") or {},
            "root_tree_bytes": variant["parts"]["root_tree_bytes"],
            "modules_tree_bytes": variant["parts"]["modules_tree_bytes"],
            "publish_seconds": published["publish_seconds"],
            "to_init_s": summary([t for t in timings[name]["init_s"] if t is not None])
            if all(timings[name]["init_s"])
            else None,
            "to_marker_s": summary(timings[name]["marker_s"]),
        }
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(results, indent=2))

    print(
        "\nmicro-VM boot (%s, %d runs each, median [min-max]); disk %.0f MiB raw"
        % (accel, args.runs, disk["disk_bytes"] / MIB)
    )
    print(
        "%-5s %12s %12s %10s %20s %20s" % ("", "rootfs img", "root files", "modules", "to init", "to marker")
    )
    for name, row in results["variants"].items():
        marker = row["to_marker_s"]
        init = row["to_init_s"] or {"median": float("nan"), "min": float("nan"), "max": float("nan")}
        print(
            "%-5s %10.1fM %10.1fM %9.1fM %7.2fs [%.2f-%.2f] %7.2fs [%.2f-%.2f]"
            % (
                name,
                row["images"]["rootfs"]["size"] / MIB,
                row["root_tree_bytes"] / MIB,
                row["images"]["modules"]["size"] / MIB,
                init["median"],
                init["min"],
                init["max"],
                marker["median"],
                marker["min"],
                marker["max"],
            )
        )
    removed = results["variants"]["slim"]["removed"]
    if removed:
        print("slim removed: " + ", ".join("%s %.1fM" % (k, v / MIB) for k, v in sorted(removed.items())))
    print("results: %s" % args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
