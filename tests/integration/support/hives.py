"""Real registry hives for test disks: ``hivexsh`` (libhivex-bin) writes every key and value.

hivex edits a hive but cannot start one, so ``empty_hive`` lays down the smallest valid one: the
4 KiB base block and one hive bin with the root key and its security descriptor. Everything the seal
check reads is then written by ``hivexsh`` in a ``-w`` session, the way libguestfs edits a guest's
registry, so the bytes the verifier parses are the tool's, not this file's.
"""

from __future__ import annotations

import pathlib
import struct
import subprocess

HBIN = 4096
# The Remote Desktop rule group the bake enables (Dir=In, TCP 3389), as Windows stores its rules.
RDP_RULE = (
    "v2.31|Action=Allow|Active=TRUE|Dir=In|Protocol=6|LPort=3389|App=%SystemRoot%\\system32\\svchost.exe|"
    "Svc=termservice|Name=@FirewallAPI.dll,-28775|Desc=@FirewallAPI.dll,-28756|EmbedCtxt=@FirewallAPI.dll,-28752|"
)
RDP_RULE_OFF = RDP_RULE.replace("Active=TRUE", "Active=FALSE")


def _cell(body: bytes) -> bytes:
    size = (len(body) + 4 + 7) // 8 * 8
    return struct.pack("<i", -size) + body + b"\0" * (size - 4 - len(body))


def empty_hive(path: pathlib.Path) -> pathlib.Path:
    """A hive holding only its root key."""
    root_at = 0x20
    name = b"ROOT"

    def root(sk_at: int) -> bytes:
        none = 0xFFFFFFFF
        fields = (b"nk", 0x2C, 0, 0, none, 0, 0, none, none, 0, none, sk_at, none, 0, 0, 0, 0, 0)
        return struct.pack("<2sHQIIIIIIIIIIIIIII", *fields) + struct.pack("<HH", len(name), 0) + name

    sk_at = root_at + len(_cell(root(0)))
    descriptor = struct.pack("<BBHIIII", 1, 0, 0x8004, 0, 0, 0, 0)  # self-relative, NULL DACL
    sk = _cell(struct.pack("<2sHIIII", b"sk", 0, sk_at, sk_at, 1, len(descriptor)) + descriptor)
    cells = _cell(root(sk_at)) + sk
    used = root_at + len(cells)
    hbin = struct.pack("<4sII", b"hbin", 0, HBIN).ljust(root_at, b"\0") + cells
    hbin += struct.pack("<i", HBIN - used).ljust(HBIN - used, b"\0")
    base = bytearray(4096)
    struct.pack_into("<4sIIQIIIIIII", base, 0, b"regf", 1, 1, 0, 1, 3, 0, 1, root_at, HBIN, 1)
    checksum = 0
    for offset in range(0, 508, 4):
        checksum ^= struct.unpack_from("<I", base, offset)[0]
    struct.pack_into("<I", base, 508, checksum)
    path.write_bytes(bytes(base) + hbin)
    return path


def hivexsh(path: pathlib.Path, keys: dict[str, dict[str, str]]) -> pathlib.Path:
    """Write ``{"A\\B": {"name": "dword:0x0" | "string:text"}}`` into the hive with one hivexsh session."""
    script, made = [], set()
    for key, values in keys.items():
        script.append("cd \\")
        parts = key.split("\\")
        for depth, part in enumerate(parts):
            below = "\\".join(parts[: depth + 1])
            if below not in made:
                made.add(below)
                script.append("add %s" % part)
            script.append("cd %s" % part)
        if values:
            script.append("setval %d" % len(values))
            for name, value in values.items():
                script += [name, value]
    script.append("commit")
    proc = subprocess.run(
        ["hivexsh", "-w", str(path)],
        input="\n".join(script) + "\n",
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode or proc.stderr.strip():
        raise AssertionError("hivexsh failed (%d): %s%s" % (proc.returncode, proc.stdout, proc.stderr))
    return path


def system_hive(
    path: pathlib.Path,
    deny: int | None = 0,
    rules: dict[str, str] | None = None,
    port_number: int | None = 3389,
    current: int = 1,
) -> bytes:
    """A SYSTEM hive as the bake leaves it (Remote Desktop on, its rule group enabled), or as told."""
    control = "ControlSet%03d" % current
    terminal = {} if deny is None else {"fDenyTSConnections": "dword:0x%08x" % deny}
    listener = {} if port_number is None else {"PortNumber": "dword:0x%08x" % port_number}
    if rules is None:
        rules = {
            "RemoteDesktop-UserMode-In-TCP": RDP_RULE,
            "RemoteDesktop-UserMode-In-UDP": RDP_RULE.replace("Protocol=6", "Protocol=17"),
        }
    keys = {
        "Select": {"Current": "dword:0x%08x" % current},
        control + "\\Control\\Terminal Server": terminal,
        control + "\\Control\\Terminal Server\\WinStations\\RDP-Tcp": listener,
        control + "\\Services\\SharedAccess\\Parameters\\FirewallPolicy\\FirewallRules": {
            name: "string:" + text for name, text in rules.items()
        },
    }
    empty_hive(path)
    hivexsh(path, keys)
    return path.read_bytes()


GENERALIZED = "IMAGE_STATE_GENERALIZE_RESEAL_TO_OOBE"


def software_hive(
    path: pathlib.Path,
    image_state: str | None = GENERALIZED,
    edition: str = "EnterpriseEval",
    licensing: dict[str, str] | None = None,
    winlogon: dict[str, str] | None = None,
) -> bytes:
    """A SOFTWARE hive as a sealed evaluation bake leaves it (ImageState generalized to OOBE), or as told.

    ``licensing`` and ``winlogon`` are hivexsh values (``{"name": "string:text"}``) of
    SoftwareProtectionPlatform and Winlogon."""
    state = {} if image_state is None else {"ImageState": "string:" + image_state}
    keys = {
        "Microsoft\\Windows\\CurrentVersion\\Setup\\State": state,
        "Microsoft\\Windows NT\\CurrentVersion": {
            "EditionID": "string:" + edition,
            "ProductName": "string:Windows 10 Enterprise",
            "CurrentBuild": "string:26100",
            "DigitalProductId": "hex:3:a4000000030000003030333239",
        },
        "Microsoft\\Windows NT\\CurrentVersion\\SoftwareProtectionPlatform": dict(
            {"BackupProductKeyDefault": "string:NPPR9-FWDCX-D2C8J-H872K-2YT43"}, **(licensing or {})
        ),
        "Microsoft\\Windows NT\\CurrentVersion\\Winlogon": dict(
            {"Shell": "string:explorer.exe"}, **(winlogon or {})
        ),
    }
    empty_hive(path)
    hivexsh(path, keys)
    return path.read_bytes()
