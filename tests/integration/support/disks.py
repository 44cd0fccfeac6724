"""Real test disks, made without mounting anything (no root, no loop device).

Windows: ``sgdisk`` writes the GPT (ESP, MSR, basic data C:, optionally a recovery partition after it),
``mkntfs --fast`` formats a partition-sized sparse file, ``wimlib-imagex`` applies a directory tree into
that unmounted NTFS file, ``dd conv=notrunc`` copies it into the disk at its offset, and ``qemu-img``
makes qcow2 (plain, compressed, or an overlay on a backing chain). Linux: ``mkfs.ext4 -d`` from a tree.

The SYSTEM registry hive on C: is written by ``hivexsh`` (see ``hives.py``).

Debian packages: gdisk, ntfs-3g, wimtools, e2fsprogs, qemu-utils, libhivex-bin.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import subprocess

from tests.integration.support import hives

ROOT = pathlib.Path(__file__).resolve().parents[3]
# sgdisk calls sync(2) after every write, a second or more on a busy machine: each layout is made once.
GPT_CACHE = ROOT / ".cache" / "test-disks"
MIB = 1024 * 1024
SECTOR = 512
SEALED_LOG = (
    "2026-08-09 10:02:11 bootstrap: guest agent installed\r\n"
    "2026-08-09 10:02:40 bootstrap: cloudbase-init installed\r\n"
    "2026-08-09 10:03:02 bootstrap: running C:\\Windows\\System32\\Sysprep\\sysprep.exe "
    "/generalize /oobe /shutdown\r\n"
    "\r\n"
    "\r\n"
)
SEALED_LINE = "sysprep /generalize /oobe /shutdown"
TOOLS = ("sgdisk", "mkntfs", "wimlib-imagex", "ntfscp", "mkfs.ext4", "qemu-img", "dd", "hivexsh")

# GPT type codes as sgdisk spells them.
ESP, MSR, BASIC_DATA, WINRE, LINUX = "ef00", "0c01", "0700", "2700", "8300"


def run(*command: str | pathlib.Path) -> str:
    proc = subprocess.run([str(c) for c in command], capture_output=True, text=True, check=False)
    if proc.returncode:
        raise AssertionError("%s failed (%d): %s%s" % (command[0], proc.returncode, proc.stdout, proc.stderr))
    return proc.stdout


def missing_tools() -> list[str]:
    return [tool for tool in TOOLS if shutil.which(tool) is None]


def write_tree(root: pathlib.Path, files: dict[str, bytes | str]) -> pathlib.Path:
    """``{"Windows/System32/x.dll": b"..."}`` -> files under ``root``; a trailing ``/`` makes a directory."""
    root.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        target = root / name
        if name.endswith("/"):
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode() if isinstance(content, str) else content)
    return root


def ntfs_partition(
    path: pathlib.Path, size: int, start_sector: int, files: dict | None = None
) -> pathlib.Path:
    """A formatted NTFS volume in a sparse file of ``size`` bytes, holding ``files``."""
    path.unlink(missing_ok=True)
    run("truncate", "-s", str(size), path)
    run(
        "mkntfs",
        "--fast",
        "-F",
        "-q",
        "-s",
        "512",
        "-p",
        str(start_sector),
        "-H",
        "255",
        "-S",
        "63",
        "-L",
        "Windows",
        path,
    )
    if files:
        tree = write_tree(path.with_suffix(".tree"), files)
        wim = path.with_suffix(".wim")
        run("wimlib-imagex", "capture", tree, wim, "--no-acls", "--compress=none")
        run("wimlib-imagex", "apply", wim, "1", path)
        wim.unlink()
        shutil.rmtree(tree)
    return path


def ntfs_copy(volume: pathlib.Path, source: pathlib.Path, dest: str) -> None:
    """One file into an unmounted NTFS volume (``dest`` is a path inside it)."""
    run("ntfscp", "-f", "-q", volume, source, dest)


def place(disk: pathlib.Path, part: pathlib.Path, offset: int) -> None:
    run(
        "dd",
        "if=%s" % part,
        "of=%s" % disk,
        "bs=4M",
        "seek=%d" % offset,
        "oflag=seek_bytes",
        "conv=notrunc,sparse",
        "status=none",
    )


def _scratch(target: pathlib.Path) -> pathlib.Path:
    """Where one process builds ``target`` before renaming it into place: test workers that build the
    same cached file at once each write their own, and the last rename wins with identical bytes."""
    scratch = target.with_name("%s.%d.tmp" % (target.name, os.getpid()))
    scratch.unlink(missing_ok=True)
    return scratch


def gpt_disk(path: pathlib.Path, disk_size: int, layout: list[str]) -> pathlib.Path:
    """A sparse disk with the GPT ``sgdisk <layout>`` writes (made once per layout, then copied)."""
    key = hashlib.sha256(("%d %s" % (disk_size, " ".join(layout))).encode()).hexdigest()[:16]
    template = GPT_CACHE / ("%s.raw" % key)
    if not template.exists():
        GPT_CACHE.mkdir(parents=True, exist_ok=True)
        scratch = _scratch(template)
        run("truncate", "-s", str(disk_size), scratch)
        run("sgdisk", *layout, scratch)
        scratch.rename(template)
    path.unlink(missing_ok=True)
    run("cp", "--sparse=always", template, path)
    return path


def mark_bitlocker(disk: pathlib.Path, offset: int) -> None:
    """What BitLocker leaves in the boot sector: ``-FVE-FS-`` where NTFS writes its OEM id."""
    with open(disk, "r+b") as fh:
        fh.seek(offset + 3)
        fh.write(b"-FVE-FS-")


def windows_disk(
    path: pathlib.Path,
    files: dict | None = None,
    disk_size: int = 256 * MIB,
    c_size: int = 64 * MIB,
    recovery_after: bool = False,
    bitlocker: bool = False,
) -> dict:
    """A GPT disk laid out as Windows Setup leaves it: ESP, MSR, C:, and optionally WinRE after C:.

    Returns the raw path and C:'s partition number, offset and size.
    """
    esp_start, esp_sectors = 2048, 100 * MIB // SECTOR // 4
    msr_start = esp_start + esp_sectors
    c_start = msr_start + 16 * MIB // SECTOR
    c_sectors = c_size // SECTOR
    layout = [
        "-n",
        "1:%d:%d" % (esp_start, msr_start - 1),
        "-t",
        "1:" + ESP,
        "-c",
        "1:EFI system partition",
        "-n",
        "2:%d:%d" % (msr_start, c_start - 1),
        "-t",
        "2:" + MSR,
        "-c",
        "2:Microsoft reserved partition",
        "-n",
        "3:%d:%d" % (c_start, c_start + c_sectors - 1),
        "-t",
        "3:" + BASIC_DATA,
        "-c",
        "3:Basic data partition",
    ]
    if recovery_after:
        rec_start = c_start + c_sectors
        layout += [
            "-n",
            "4:%d:%d" % (rec_start, rec_start + 16 * MIB // SECTOR - 1),
            "-t",
            "4:" + WINRE,
            "-c",
            "4:Recovery",
        ]
    gpt_disk(path, disk_size, layout)
    offset = c_start * SECTOR
    part = ntfs_partition(path.with_suffix(".c.img"), c_size, c_start, files)
    place(path, part, offset)
    part.unlink()
    if bitlocker:
        mark_bitlocker(path, offset)
    return {"path": path, "number": 3, "offset": offset, "size": c_size}


def system_hive(**settings) -> bytes:
    """The bytes of a SYSTEM hive written by hivexsh (``hives.system_hive``), made once per setting."""
    key = hashlib.sha256(repr(sorted(settings.items())).encode()).hexdigest()[:16]
    cached = GPT_CACHE / ("SYSTEM-%s" % key)
    if not cached.exists():
        GPT_CACHE.mkdir(parents=True, exist_ok=True)
        scratch = _scratch(cached)
        hives.system_hive(scratch, **settings)
        scratch.rename(cached)
    return cached.read_bytes()


def software_hive(**settings) -> bytes:
    """The bytes of a SOFTWARE hive written by hivexsh (``hives.software_hive``), made once per setting."""
    key = hashlib.sha256(repr(sorted(settings.items())).encode()).hexdigest()[:16]
    cached = GPT_CACHE / ("SOFTWARE-%s" % key)
    if not cached.exists():
        GPT_CACHE.mkdir(parents=True, exist_ok=True)
        scratch = _scratch(cached)
        hives.software_hive(scratch, **settings)
        scratch.rename(cached)
    return cached.read_bytes()


def sealed_windows_files(changes: dict | None = None) -> dict:
    """C:\\ of a good bake: the log ends on the sysprep line, Remote Desktop is on and let in (the SYSTEM
    hive), the SOFTWARE hive records the image generalized to OOBE (an evaluation edition, no KMS, no
    stored logon password); ``changes`` add (or, as None, remove) files."""
    files = {
        "Windows/System32/config/SOFTWARE": software_hive(),
        "Windows/System32/config/SYSTEM": system_hive(),
        "Windows/System32/Recovery/Winre.wim": b"MSWIM\0\0\0" + b"\0" * 1024,
        "Program Files/Cloudbase Solutions/Cloudbase-Init/conf/cloudbase-init.conf": "[DEFAULT]\r\n",
        "bootstrap.log": SEALED_LOG,
    }
    for name, content in (changes or {}).items():
        if content is None:
            files.pop(name, None)
        else:
            files[name] = content
    return files


def ext4_tree(root: pathlib.Path, changes: dict | None = None) -> pathlib.Path:
    """A sealed Linux root: empty machine-id, no host keys, no instance data, no build keys, small logs."""
    files = {
        "etc/machine-id": b"",
        "etc/hostname": "localhost\n",
        "etc/ssh/sshd_config": "PermitRootLogin no\n",
        "var/lib/cloud/": b"",
        "var/log/apt/": b"",
        "var/log/journal/": b"",
        "root/.ssh/": b"",
        "home/debian/.bashrc": "# bash\n",
        "usr/bin/true": b"\x7fELF",
    }
    files.update(changes or {})
    return write_tree(root, files)


def ext4_image(path: pathlib.Path, tree: pathlib.Path, size: int = 32 * MIB) -> pathlib.Path:
    path.unlink(missing_ok=True)
    run("mkfs.ext4", "-q", "-F", "-d", tree, path, "%dK" % (size // 1024))
    return path


def linux_disk(path: pathlib.Path, tree: pathlib.Path, disk_size: int = 64 * MIB) -> dict:
    """A GPT disk whose second partition is the ext4 root (the first is a small ESP)."""
    root_start = 2048 + 8 * MIB // SECTOR
    root_size = disk_size - root_start * SECTOR - MIB
    layout = [
        "-n",
        "1:2048:%d" % (root_start - 1),
        "-t",
        "1:" + ESP,
        "-n",
        "2:%d:%d" % (root_start, root_start + root_size // SECTOR - 1),
        "-t",
        "2:" + LINUX,
    ]
    gpt_disk(path, disk_size, layout)
    part = ext4_image(path.with_suffix(".root.img"), tree, root_size)
    place(path, part, root_start * SECTOR)
    part.unlink()
    return {"path": path, "number": 2, "offset": root_start * SECTOR}


def qcow2(raw: pathlib.Path, out: pathlib.Path, compressed: bool = False) -> pathlib.Path:
    out.unlink(missing_ok=True)
    run("qemu-img", "convert", "-O", "qcow2", *(["-c"] if compressed else []), raw, out)
    return out


def overlay_chain(base_raw: pathlib.Path, top_raw: pathlib.Path, folder: pathlib.Path) -> pathlib.Path:
    """base.qcow2 <- mid.qcow2 (empty) <- top.qcow2 holding only the clusters where top_raw differs.

    Backing names are relative, as qemu resolves them against the overlay's directory.
    """
    base = qcow2(base_raw, folder / "base.qcow2", compressed=True)
    mid = folder / "mid.qcow2"
    mid.unlink(missing_ok=True)
    run("qemu-img", "create", "-q", "-f", "qcow2", "-b", base.name, "-F", "qcow2", mid)
    top = folder / "top.qcow2"
    top.unlink(missing_ok=True)
    run("qemu-img", "convert", "-O", "qcow2", "-B", mid.name, "-F", "qcow2", top_raw, top)
    return top
