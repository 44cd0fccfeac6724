"""Would firmware boot this disk? The lab's own small answer, deliberately independent of seal_verify.

It reads a handful of sectors: the MBR boot signature, the GPT header and entries (or the MBR partition
table), and the first sector of each OS partition. A Windows disk boots when a basic-data partition holds
an NTFS boot sector (a BitLocker volume, `-FVE-FS-`, stops at the recovery screen in a VM without the
TPM that sealed it); a GPT Windows disk also needs an EFI system partition. A Linux disk boots when a
Linux partition holds an ext2/3/4 superblock. qcow2 images are read through `qemu-img dd`, so
compressed clusters and backing chains read exactly as QEMU reads them.

Whether a Windows guest answers Remote Desktop is read the way an operator would with ntfs-3g and hivex,
not with the collection's readers: `ntfscat` takes the SYSTEM hive out of the NTFS volume and `hivexget`
reads `fDenyTSConnections` and the firewall rules of the current control set. Off, the guest boots but
nothing listens on 3389, as on a real golden whose bake never enabled it.
"""

from __future__ import annotations

import pathlib
import re
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass

SECTOR = 512
QCOW2_MAGIC = b"QFI\xfb"
ESP = "c12a7328-f81f-11d2-ba4b-00a0c93ec93b"
BASIC_DATA = "ebd0a0a2-b9e5-4433-87c0-68b6b72699c7"
LINUX_FS = "0fc63daf-8483-4772-8e79-3d69d8477de4"
MBR_NTFS, MBR_LINUX, MBR_PROTECTIVE = 0x07, 0x83, 0xEE
EXT_MAGIC = 0xEF53
MAX_ENTRIES = 256


@dataclass
class BootCheck:
    boots: bool
    guest: str  # "windows", "linux" or "" when nothing boots
    reason: str
    # Windows: "" when Remote Desktop is on and let in on 3389, else why not. Linux: always "".
    remote_off: str = ""
    # The OS volume: its byte offset and size, and whether it is the disk's last partition (only then
    # can the guest extend it into a disk that grew).
    volume: tuple[int, int, bool] | None = None


class _Image:
    """Random reads from a raw or qcow2 image file."""

    def __init__(self, path: pathlib.Path):
        self.path = path
        with open(path, "rb") as fh:
            self.qcow2 = fh.read(4) == QCOW2_MAGIC

    def read(self, offset: int, length: int) -> bytes:
        if not self.qcow2:
            with open(self.path, "rb") as fh:
                fh.seek(offset)
                return fh.read(length)
        # Sector-aligned windows, as every read here is.
        first, count = offset // SECTOR, -(-(offset % SECTOR + length) // SECTOR)
        with tempfile.TemporaryDirectory(prefix="lab-boot-") as tmp:
            out = pathlib.Path(tmp) / "window.raw"
            argv = ["qemu-img", "dd", "-f", "qcow2", "-O", "raw", f"bs={SECTOR}"]
            # qemu-img dd counts `count` from the start of the input, skipped blocks included.
            argv += [f"skip={first}", f"count={first + count}", f"if={self.path}", f"of={out}"]
            proc = subprocess.run(argv, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise OSError(f"qemu-img dd failed: {proc.stderr.strip()}")
            data = out.read_bytes()
        start = offset % SECTOR
        return data[start : start + length]


def image_virtual_size(path: pathlib.Path) -> int:
    """The size of the disk an image holds: a qcow2 header's virtual size, else the file's size."""
    with open(path, "rb") as fh:
        header = fh.read(32)
    if header[:4] == QCOW2_MAGIC and len(header) == 32:
        return struct.unpack_from(">Q", header, 24)[0]
    return path.stat().st_size


def _guid(raw: bytes) -> str:
    a, b, c = struct.unpack_from("<IHH", raw)
    return f"{a:08x}-{b:04x}-{c:04x}-{raw[8:10].hex()}-{raw[10:16].hex()}"


def _partitions(img: _Image, mbr: bytes) -> tuple[str, list[tuple[str, int, int]]]:
    """("gpt"|"mbr", [(type, byte offset, byte size)]) with GPT types as GUID strings, MBR types as
    "mbr:0x07"."""
    entries = [mbr[446 + 16 * i : 462 + 16 * i] for i in range(4)]
    if any(e[4] == MBR_PROTECTIVE for e in entries):
        header = img.read(SECTOR, SECTOR)
        if header[:8] != b"EFI PART":
            return "gpt", []
        lba, count, size = struct.unpack_from("<QII", header, 72)
        count = min(count, MAX_ENTRIES)
        table = img.read(lba * SECTOR, count * size)
        found = []
        for i in range(count):
            entry = table[i * size : (i + 1) * size]
            if len(entry) < 48 or entry[:16] == b"\0" * 16:
                continue
            first, last = struct.unpack_from("<QQ", entry, 32)
            found.append((_guid(entry[:16]), first * SECTOR, (last - first + 1) * SECTOR))
        return "gpt", found
    found = []
    for entry in entries:
        ptype, start, count = entry[4], *struct.unpack_from("<II", entry, 8)
        if ptype and start:
            found.append((f"mbr:0x{ptype:02x}", start * SECTOR, count * SECTOR))
    return "mbr", found


def inspect(path: pathlib.Path) -> BootCheck:
    """Whether a VM booting from `path` reaches an operating system, and which kind."""
    try:
        img = _Image(path)
        mbr = img.read(0, SECTOR)
        if len(mbr) < SECTOR or mbr[510:512] != b"\x55\xaa":
            return BootCheck(False, "", "no bootable device: sector 0 carries no boot signature")
        table, parts = _partitions(img, mbr)
        if not parts:
            return BootCheck(False, "", f"no bootable device: the {table.upper()} lists no partitions")
        has_esp = any(ptype == ESP for ptype, _, _ in parts)
        last_end = max(offset + size for _, offset, size in parts)
        problems = []
        for ptype, offset, size in parts:
            volume = (offset, size, offset + size == last_end)
            if ptype in (BASIC_DATA, f"mbr:0x{MBR_NTFS:02x}"):
                oem = img.read(offset, SECTOR)[3:11]
                if oem == b"NTFS    ":
                    if table == "gpt" and not has_esp:
                        problems.append("a Windows partition but no EFI system partition")
                        continue
                    reason = f"NTFS system volume at byte {offset}"
                    return BootCheck(True, "windows", reason, remote_desktop_off(img, offset), volume)
                if oem == b"-FVE-FS-":
                    problems.append(f"BitLocker volume at byte {offset}: stops at the recovery screen")
            elif ptype in (LINUX_FS, f"mbr:0x{MBR_LINUX:02x}"):
                magic = struct.unpack_from("<H", img.read(offset + 1024 + 56, 2).ljust(2, b"\0"))[0]
                if magic == EXT_MAGIC:
                    return BootCheck(True, "linux", f"ext4 root at byte {offset}", volume=volume)
                problems.append(f"Linux partition at byte {offset} holds no ext filesystem")
        why = "; ".join(problems) or "no operating system partition"
        return BootCheck(False, "", f"no bootable device: {why}")
    except OSError as exc:
        return BootCheck(False, "", f"no bootable device: the disk cannot be read ({exc})")


def _tool(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("stdout", subprocess.PIPE)
    return subprocess.run(argv, stderr=subprocess.PIPE, check=False, **kwargs)


def _hive_value(hive: pathlib.Path, key: str, name: str | None = None) -> str | None:
    proc = _tool(["hivexget", str(hive), key] + ([name] if name else []), text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def remote_desktop_off(img: _Image, offset: int, port: int = 3389) -> str:
    """ "" when the NTFS volume at `offset` enables Remote Desktop and lets TCP `port` in, else why not."""
    if not (shutil.which("ntfscat") and shutil.which("hivexget")):
        return "ntfscat or hivexget is not installed, so the lab cannot tell whether RDP is on"
    boot = img.read(offset, SECTOR)
    size = struct.unpack_from("<H", boot, 11)[0] * struct.unpack_from("<Q", boot, 40)[0] + SECTOR
    with tempfile.TemporaryDirectory(prefix="lab-rdp-") as tmp:
        volume, hive = pathlib.Path(tmp) / "volume.raw", pathlib.Path(tmp) / "SYSTEM"
        if img.qcow2:
            first, count = offset // SECTOR, -(-size // SECTOR)
            argv = ["qemu-img", "dd", "-f", "qcow2", "-O", "raw", f"bs={SECTOR}", f"skip={first}"]
            argv += [f"count={first + count}", f"if={img.path}", f"of={volume}"]
        else:
            argv = ["dd", f"if={img.path}", f"of={volume}", "bs=4M", f"skip={offset}", f"count={size}"]
            argv += ["iflag=skip_bytes,count_bytes", "conv=sparse", "status=none"]
        if _tool(argv).returncode != 0:
            return "the Windows volume cannot be read"
        with open(hive, "wb") as out:
            if _tool(["ntfscat", str(volume), "Windows/System32/config/SYSTEM"], stdout=out).returncode:
                return "the volume holds no Windows/System32/config/SYSTEM hive"
        current = _hive_value(hive, "Select", "Current")
        control = "ControlSet%03d" % (int(current) if current and current.isdigit() else 1)
        deny = _hive_value(hive, control + "\\Control\\Terminal Server", "fDenyTSConnections")
        if deny != "0":
            return f"fDenyTSConnections is {deny or 'not set'}: Remote Desktop is off"
        rules = _hive_value(
            hive, control + "\\Services\\SharedAccess\\Parameters\\FirewallPolicy\\FirewallRules"
        )
        for line in (rules or "").splitlines():
            fields = dict(re.findall(r"\|([A-Za-z]+)=([^|]*)", "|" + line.split("=", 1)[-1].strip('"')))
            wanted = {"Action": "allow", "Active": "true", "Dir": "in", "Protocol": "6", "LPort": str(port)}
            if all(fields.get(k, "").lower() == v for k, v in wanted.items()):
                return ""
        return f"no enabled inbound firewall rule lets TCP {port} in"


__all__ = ["BootCheck", "inspect", "remote_desktop_off"]
