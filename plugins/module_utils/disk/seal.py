# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Whether a golden's disk is sealed: "Stopped" is not "sealed".

Pure: the rules read a filesystem through a small view and the partition table as plain dicts, so
they run the same on a qcow2 on the controller, inside a Job next to a PVC, and in unit tests.

A view has ``case_insensitive`` (NTFS: True) and ``is_dir(path)``, ``exists(path)``,
``list(path)`` (names, or None when not a directory), ``size(path)`` (None when absent) and
``read(path, offset, length)``. Paths are ``/``-separated from the volume root.

Every check is ``{"name", "passed", "evidence"}``; the evidence is a sentence an operator can act on.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import codecs
import re

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import image_facts

NTFS_OEM = b"NTFS    "
BITLOCKER_OEM = b"-FVE-FS-"
WINDOWS_DATA_GPT = "ebd0a0a2-b9e5-4433-87c0-68b6b72699c7"
WINDOWS_RECOVERY_GPT = "de94bba4-06d1-4d40-a16a-bfd50179d6ac"

DEFAULT_BUILD_FAILED = "C:\\BUILD_FAILED"
DEFAULT_BOOTSTRAP_SCRIPT = "C:\\kube-dc-bootstrap.ps1"
DEFAULT_BOOTSTRAP_LOG = "C:\\bootstrap.log"
DEFAULT_FINAL_LINE = "sysprep /generalize /oobe /shutdown"
DEFAULT_MAX_LOG_BYTES = 1024 * 1024
# The remote-access contract of a Windows golden: the bake enables Remote Desktop on this port and opens it
# in the firewall, and the clone gate probes the same port. The seal check reads it from the SYSTEM hive.
REMOTE_DESKTOP_PORT = 3389
SYSTEM_HIVE = "C:\\Windows\\System32\\config\\SYSTEM"
# Enough of a log's end to hold its last line; the rest of the file is never read.
LOG_TAIL_BYTES = 64 * 1024

WINDOWS_CHECKS = (
    "ntfs_boot_sector",
    "build_failed_absent",
    "bootstrap_script_absent",
    "bootstrap_log_final_line",
    "image_state_generalized",
    "credentials_absent",
    "nothing_after_windows_partition",
    "remote_desktop_enabled",
)
LINUX_CHECKS = (
    "machine_id_empty",
    "ssh_host_keys_absent",
    "cloud_init_instance_absent",
    "build_authorized_keys_absent",
    "core_dumps_absent",
    "var_log_small",
    "background_apt_disabled",
    "postgresql_clusters_at_boot",
)
# Background apt writes packages into every clone's copy-on-write delta and drifts PostgreSQL minors; the
# Ubuntu Pro, motd-news and snap-repair timers fetch at boot in every clone likewise.
BACKGROUND_APT_UNITS = (
    "unattended-upgrades.service",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "ua-timer.timer",
    "motd-news.timer",
    "snapd.snap-repair.timer",
)
# Started by apt's own hooks rather than enabled (Ubuntu Pro's apt-news and esm-cache): only a mask stops
# them. A unit is masked by an empty file or a link to /dev/null of its name in /etc/systemd/system.
APT_HOOK_UNITS = ("apt-news.service", "esm-cache.service")
UNIT_DIRS = ("/usr/lib/systemd/system", "/lib/systemd/system")
SYSTEMD_ETC = "/etc/systemd/system"


class SealError(PipelineError):
    """The disk cannot be judged (no Windows partition, unknown layout); the message says why."""


def refuse_unsealed(result, what, fail_on_unsealed=True):
    """Refuse a verdict that is not sealed (unless the caller only wants the report); returns ``result``.

    The message names each failed check with its evidence; the result fields go with it.
    """
    if result.get("sealed") or not fail_on_unsealed:
        return result
    failed = [c for c in result.get("checks") or [] if not c.get("passed")]
    reasons = "; ".join("%s: %s" % (c["name"], c["evidence"]) for c in failed) or "no check ran"
    raise Refusal(
        what,
        "is not sealed: %s" % reasons,
        "do not publish it: rebuild the image, or set fail_on_unsealed: false to only report",
        **result,
    )


def refuse_without_verifier_image(image, what):
    """A claim is read by a Job, whose image must carry dissect: nothing is pip-installed behind the user's
    back, so there is no default image to fall back on."""
    if not image:
        raise Refusal(
            "option verifier_image",
            "the verifier Job of %s needs an image with python3 and the dissect packages" % what,
            "build it from images/seal-verifier/Containerfile and give its name; nothing was created",
        )


def check_mode_skip(what):
    """The check-mode result for a claim: verifying it would create the verifier Job."""
    return {
        "changed": False,
        "skipped": True,
        "msg": "check mode: %s was not verified, because the verifier Job would have to be created to "
        "read it; run without --check to verify it" % what,
    }


def check(name, passed, evidence):
    return {"name": name, "passed": bool(passed), "evidence": evidence}


def absence(name, found, problem, clean):
    """A check that passes when ``found`` lists nothing: else ``problem`` names what was found."""
    if found:
        return check(name, False, problem % ", ".join(found))
    return check(name, True, clean)


def verdict(checks):
    """``(sealed, failed check names)``: sealed only when there is at least one check and all pass."""
    failed = [c["name"] for c in checks if not c["passed"]]
    return bool(checks) and not failed, failed


def human_size(size):
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return ("%d %s" % (value, unit)) if unit == "B" else ("%.1f %s" % (value, unit))
        value /= 1024.0
    return "%d B" % size


# Windows paths ----------------------------------------------------------------------------------


def volume_path(windows_path):
    """``C:\\Dir\\file`` -> ``/Dir/file`` (the drive is the partition being read)."""
    path = windows_path.strip().replace("\\", "/")
    if re.match(r"^[A-Za-z]:", path):
        path = path[2:]
    return "/" + path.strip("/")


def _split(path):
    return [part for part in path.split("/") if part]


def find(view, path):
    """The path as stored on the volume, or None. On NTFS every component matches case-insensitively."""
    found = "/"
    for part in _split(path):
        names = view.list(found)
        if names is None:
            return None
        if view.case_insensitive:
            matches = [n for n in names if n.casefold() == part.casefold()]
        else:
            matches = [n for n in names if n == part]
        if not matches:
            return None
        found = found.rstrip("/") + "/" + matches[0]
    return found


# Partition layout -------------------------------------------------------------------------------


def check_partitions(source, partitions):
    """``partitions`` when the disk has some; a disk with neither a partition table nor a filesystem at
    its start cannot be judged."""
    if not partitions:
        raise SealError(
            "%s: no GPT or MBR partition table and no filesystem at its start; "
            "give a raw or qcow2 disk image" % source
        )
    return partitions


GPT_MISSING = "no GPT header"


def gpt_header_choice(source, primary, backup, last_lba, backup_allowed=True):
    """Which GPT header a disk is read by, as sgdisk does: ``("primary" or "backup", note)``, or
    ``(None, message)`` when neither can be. ``primary`` and ``backup`` are None for a header (and entry
    array) that checks out, else what is wrong with it; ``backup`` is only read when the primary fails.
    A caller that cannot pass the note on (a seal verdict, an image's facts: what they judge is served
    as it is, damaged table included) sets ``backup_allowed`` false and is refused instead."""
    if primary is None:
        return "primary", None
    if not backup_allowed:
        return None, (
            "%s: the primary GPT header at LBA 1 is damaged (%s); rewrite it from the backup (sgdisk -e) "
            "and judge the disk again" % (source, primary)
        )
    if backup is None:
        return "backup", (
            "%s: the primary GPT header at LBA 1 is damaged (%s); the partitions were read from the backup "
            "header at LBA %d, as sgdisk does (sgdisk -e or gdisk's w rewrites the primary)"
            % (source, primary, last_lba)
        )
    return None, "%s: the primary GPT header at LBA 1 is damaged (%s) and so is the backup at LBA %d (%s)" % (
        source,
        primary,
        last_lba,
        backup,
    )


def overlap_problem(source, partitions):
    """None when no two partitions share a byte, else why the table cannot be trusted: two filesystems
    written over each other, which ``sgdisk -v`` reports as a problem too, so neither is read."""
    widest = None  # of the partitions before, the one reaching furthest
    for part in sorted(partitions, key=lambda p: (p["offset"], p["number"])):
        if widest is not None and part["offset"] < widest["offset"] + widest["size"]:
            return (
                "%s: partitions %d and %d overlap (bytes %d-%d and %d-%d), so what either holds may be the "
                "other's; check the table with sgdisk -v and repair it (gdisk, sfdisk) before building"
                % (
                    source,
                    widest["number"],
                    part["number"],
                    widest["offset"],
                    widest["offset"] + widest["size"] - 1,
                    part["offset"],
                    part["offset"] + part["size"] - 1,
                )
            )
        if widest is None or part["offset"] + part["size"] > widest["offset"] + widest["size"]:
            widest = part
    return None


def gpt_backup_differs(source, last_lba):
    """The note of a disk whose backup GPT lists other partitions than its valid primary: read by the
    primary, as sgdisk does, and said rather than passed over."""
    return (
        "%s: the backup GPT header at LBA %d lists other partitions than the primary at LBA 1; the primary "
        "was read, as sgdisk does (sgdisk -v shows both; sgdisk -e rewrites the backup from the primary)"
        % (source, last_lba)
    )


def filesystem_fits(number, filesystem, filesystem_bytes, partition_bytes):
    """None when a filesystem's own size (its superblock's block count) lies within its partition, else
    why not: the blocks past the partition's end belong to whatever follows it (another partition, the
    backup GPT, nothing), so nothing read there is the filesystem's."""
    if filesystem_bytes <= partition_bytes:
        return None
    return (
        "partition %s: its %s filesystem says it spans %d bytes, more than the partition's %d; grow the "
        "partition to the filesystem (sgdisk, growpart) or shrink the filesystem to the partition "
        "(resize2fs, btrfs filesystem resize; XFS cannot shrink: make it again)"
        % (number, filesystem, filesystem_bytes, partition_bytes)
    )


def describe_partition(part):
    label = " %r" % part["name"] if part.get("name") else ""
    return "partition %s%s (%s, %s at offset %d)" % (
        part["number"],
        label,
        part.get("type_name") or part.get("type"),
        human_size(part["size"]),
        part["offset"],
    )


def pick_windows_partition(partitions, index=None):
    """The partition numbered ``index``, else the largest basic-data (GPT) or NTFS (MBR) one."""
    if index is not None:
        for part in partitions:
            if part["number"] == index:
                return part
        numbers = ", ".join(str(p["number"]) for p in partitions) or "none"
        raise SealError("the disk has no partition %s (partitions: %s)" % (index, numbers))
    candidates = [p for p in partitions if _is_windows_data(p)]
    if not candidates:
        raise SealError(
            "no Windows partition: no GPT basic data (%s) or MBR NTFS (0x07) partition in %s; "
            "name it with the partition option" % (WINDOWS_DATA_GPT, _layout(partitions))
        )
    return max(candidates, key=lambda p: p["size"])


def _is_windows_data(part):
    return str(part.get("type", "")).lower() in (WINDOWS_DATA_GPT, "0x07")


def detect_os(partitions):
    """``windows`` when a partition holds NTFS or BitLocker, ``linux`` when one holds ext, else None."""
    found = set(p.get("filesystem") for p in partitions)
    if found & {"ntfs", "bitlocker"}:
        return "windows"
    if "ext" in found:
        return "linux"
    return None


def pick_linux_partition(partitions, index=None):
    """The Linux root: the partition numbered ``index``, else the largest one holding ext."""
    if index is not None:
        return pick_windows_partition(partitions, index)
    candidates = [p for p in partitions if p.get("filesystem") == "ext"]
    if not candidates:
        raise SealError(
            "no ext2/3/4 filesystem in %s; name the partition with the partition option" % _layout(partitions)
        )
    return max(candidates, key=lambda p: p["size"])


def _layout(partitions):
    return "; ".join(describe_partition(p) for p in partitions) or "an empty partition table"


def check_nothing_after(partitions, windows):
    """Link 2 of disk growth: Windows cannot extend C: past a partition that follows it (WinRE)."""
    after = sorted((p for p in partitions if p["offset"] > windows["offset"]), key=lambda p: p["offset"])
    if after:
        names = "; ".join(describe_partition(p) for p in after)
        return check(
            "nothing_after_windows_partition",
            False,
            "%s follows the Windows partition %s: C: cannot grow past it, so every byte a clone adds "
            "beyond it is stranded; remove it before sysprep (reagentc /disable, then delete the "
            "partition)" % (names, windows["number"]),
        )
    return check(
        "nothing_after_windows_partition",
        True,
        "the Windows partition %s is the last partition, so C: can grow to the end of the disk"
        % windows["number"],
    )


# Windows assertions -----------------------------------------------------------------------------


def check_boot_sector(boot_sector):
    """Assertion 1: the partition starts with an NTFS boot sector, not BitLocker's ``-FVE-FS-``."""
    oem = bytes(boot_sector[3:11])
    if oem == NTFS_OEM:
        return check("ntfs_boot_sector", True, "the boot sector carries the NTFS signature")
    if oem == BITLOCKER_OEM:
        return check(
            "ntfs_boot_sector",
            False,
            "the boot sector carries -FVE-FS-: the volume is BitLocker-encrypted, and a TPM-sealed "
            "golden boots on no clone; keep PreventDeviceEncryption in the answer file",
        )
    return check(
        "ntfs_boot_sector",
        False,
        "the boot sector carries %r, not the NTFS signature" % oem.decode("latin-1"),
    )


def check_absent(view, name, windows_path, why):
    found = find(view, volume_path(windows_path))
    if found is None:
        return check(name, True, "%s is absent" % windows_path)
    size = view.size(found)
    shown = windows_path[:2] + found.replace("/", "\\") if re.match(r"^[A-Za-z]:", windows_path) else found
    detail = " (%s)" % human_size(size) if size is not None else ""
    return check(name, False, "%s is present as %s%s: %s" % (windows_path, shown, detail, why))


def decode_log(head, tail, tail_offset):
    """Text of a log's tail: UTF-16 (with a BOM, or LE without one) or UTF-8 (with or without a BOM)."""
    if head.startswith(codecs.BOM_UTF16_LE):
        encoding, skip = "utf-16-le", 2
    elif head.startswith(codecs.BOM_UTF16_BE):
        encoding, skip = "utf-16-be", 2
    elif head.startswith(codecs.BOM_UTF8):
        encoding, skip = "utf-8", 3
    elif _looks_utf16le(head):
        encoding, skip = "utf-16-le", 0
    else:
        encoding, skip = "utf-8", 0
    data = tail
    if tail_offset < skip:
        data = data[skip - tail_offset :]
    elif encoding.startswith("utf-16") and (tail_offset - skip) % 2:
        data = data[1:]  # stay on a code unit boundary
    text = data.decode(encoding, errors="replace")
    if tail_offset > skip:
        # The first line of a tail that starts mid-file is partial.
        text = text.split("\n", 1)[1] if "\n" in text else ""
    return text


def _looks_utf16le(head):
    sample = head[:64]
    if len(sample) < 4:
        return False
    return sample[1::2].count(0) >= len(sample[1::2]) * 3 // 4 and sample[0::2].count(0) == 0


def last_line(text):
    """The last line that is not blank, after CRLF/CR line ends are normalized."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    for line in reversed(lines):
        stripped = line.strip().lstrip("\ufeff").strip()
        if stripped:
            return stripped
    return ""


def _token(word):
    word = word.strip("\"'").casefold()
    word = word.replace("/", "\\").rsplit("\\", 1)[-1] if not word.startswith("/") else word
    return word[:-4] if word.endswith(".exe") else word


# What may stand before the program on a log line: a timestamp (``2026-08-09T10:03:02``, ``10:03:02``,
# ``[2026-08-09``), a log label (``bootstrap:``), a level (``[INFO]``), the word ``running`` and
# PowerShell's call operator. Anything else (``echo``, ``Write-Host``, ``rem``, ``#``, ``FAILED:``) means
# the line prints, comments or reports the command instead of running it.
_TIMESTAMP = re.compile(r"^[\[(]?\d[\d:.,TZ+/-]*[\])]?$", re.IGNORECASE)
_LEVEL = re.compile(r"^\[[A-Za-z]+\]$")
_LABEL = re.compile(r"^[A-Za-z][\w.-]*:$")
_NOT_LABELS = (
    "echo:",
    "rem:",
    "write-host:",
    "write-output:",
    "print:",
    "cmd:",
    "powershell:",
    # A label that reports the command's failure or skip is no run of it.
    "failed:",
    "fail:",
    "error:",
    "skipped:",
    "skip:",
)


def _prefix_word(word):
    if word in ("&", "running"):
        return True
    if _TIMESTAMP.match(word) or _LEVEL.match(word):
        return True
    return bool(_LABEL.match(word)) and word.casefold() not in _NOT_LABELS


def ends_on(line, expected):
    """Whether ``line`` runs ``expected``: its words in order (the program by its base name, with or
    without ``.exe`` and a path), followed by nothing but more switches, and preceded by nothing but a
    timestamp, a log label, a level, ``running`` or ``&`` (so ``echo sysprep ...`` is not a run)."""
    want = [_token(w) for w in expected.split()]
    words = line.split()
    have = [_token(w) for w in words]
    if not want:
        return False
    for start in range(len(have) - len(want) + 1):
        if not all(_prefix_word(word.casefold()) for word in words[:start]):
            return False
        if have[start : start + len(want)] == want:
            rest = have[start + len(want) :]
            if all(word.startswith("/") for word in rest):
                return True
    return False


def check_log_final_line(view, log_path, expected):
    found = find(view, volume_path(log_path))
    name = "bootstrap_log_final_line"
    if found is None:
        return check(name, False, "%s is absent, so nothing shows that sysprep ran" % log_path)
    size = view.size(found) or 0
    head = view.read(found, 0, min(size, 64))
    offset = max(0, size - LOG_TAIL_BYTES)
    tail = view.read(found, offset, size - offset)
    line = last_line(decode_log(head, tail, offset))
    if not line:
        return check(name, False, "%s is empty: nothing shows that sysprep ran" % log_path)
    shown = line if len(line) <= 200 else line[:197] + "..."
    if ends_on(line, expected):
        return check(name, True, "%s ends on %r" % (log_path, shown))
    return check(
        name,
        False,
        "%s ends on %r, not on the %r line: the build stopped before sysprep" % (log_path, shown, expected),
    )


def firewall_rule(text):
    """The fields of a Windows firewall rule as the registry stores it (``v2.31|Action=Allow|...|``).

    Keys are lower-cased; a field given twice (several ``LPort``) keeps every value in a list.
    """
    fields = {}
    for part in (text or "").split("|"):
        key, sep, value = part.partition("=")
        if sep:
            fields.setdefault(key.strip().lower(), []).append(value.strip())
    return fields


def _port_listed(values, port):
    """Whether ``port`` is among the rule's ``LPort`` values (numbers, ``low-high`` ranges, comma lists)."""
    for value in values:
        for item in value.split(","):
            low, _sep, high = (part.strip() for part in item.partition("-"))
            high = high or low
            if low.isdigit() and high.isdigit() and int(low) <= port <= int(high):
                return True
    return False


def rule_opens(fields, port):
    """Whether a parsed rule lets inbound TCP ``port`` in: active, allow, inbound, TCP (6), that port."""

    def first(key):
        return (fields.get(key) or [""])[0].lower()

    return (
        first("active") == "true"
        and first("action") == "allow"
        and first("dir") == "in"
        and first("protocol") == "6"
        and _port_listed(fields.get("lport") or [], port)
    )


def check_remote_desktop(settings, port=REMOTE_DESKTOP_PORT):
    """The golden answers Remote Desktop on ``port``: what the clone gate probes.

    ``settings`` is what the adapter read from the SYSTEM hive of the current control set: ``deny``
    (``fDenyTSConnections``, None when absent), ``port_number`` (the RDP-Tcp listener's ``PortNumber``,
    None when absent, meaning 3389), ``rules`` ({name: rule text} of the firewall policy), ``control_set``,
    or ``error`` when the hive could not be read.
    """
    name = "remote_desktop_enabled"
    if settings.get("error"):
        return check(name, False, "%s cannot be read: %s" % (SYSTEM_HIVE, settings["error"]))
    where = "%s (%s)" % (SYSTEM_HIVE, settings.get("control_set") or "no current control set")
    problems = []
    if settings.get("deny") is None:
        problems.append(
            "Terminal Server\\fDenyTSConnections is not set (Windows then refuses Remote Desktop): the bake "
            "must set it to 0"
        )
    elif int(settings["deny"]) != 0:
        problems.append(
            "Terminal Server\\fDenyTSConnections is %s: Remote Desktop is off; the bake must set it to 0"
            % settings["deny"]
        )
    listener = settings.get("port_number")
    listener = REMOTE_DESKTOP_PORT if listener is None else int(listener)
    if listener != port:
        problems.append(
            "the RDP-Tcp listener is on port %d, not on %d where the clone gate probes" % (listener, port)
        )
    opening = sorted(
        n for n, text in (settings.get("rules") or {}).items() if rule_opens(firewall_rule(text), port)
    )
    if not opening:
        problems.append(
            "no enabled inbound firewall rule allows TCP %d (enable the Remote Desktop rule group)" % port
        )
    if problems:
        return check(name, False, "%s: %s" % (where, "; ".join(problems)))
    return check(
        name,
        True,
        "%s: fDenyTSConnections is 0, RDP listens on %d and firewall rule %s allows it in"
        % (where, port, ", ".join(opening[:3])),
    )


def check_image_state(facts):
    """The registry's word on sysprep, read from the SOFTWARE hive: generalized to OOBE, or not sealed.

    A hive that holds no ``ImageState`` leaves the log line as the only proof (the check says so); a hive
    that cannot be read fails."""
    name = "image_state_generalized"
    where = "%s\\%s\\%s" % (
        image_facts.SOFTWARE_HIVE,
        image_facts.SETUP_STATE_KEY,
        image_facts.IMAGE_STATE_VALUE,
    )
    hive = [
        u for u in facts.get("unreadable") or [] if u["source"].lower() == image_facts.SOFTWARE_HIVE.lower()
    ]
    if facts.get("image_state") is None or hive:
        why = hive[0]["error"] if hive else "the volume cannot be read"
        return check(name, False, "%s cannot be read: %s" % (where, why))
    sealed = image_facts.sealed_by_image_state(facts)
    if sealed is None:
        return check(name, True, "%s is not recorded; the log line is the only proof of sysprep" % where)
    if sealed:
        return check(name, True, "%s is %s" % (where, image_facts.GENERALIZED))
    return check(
        name,
        False,
        "%s is %s, not %s: sysprep /generalize /oobe did not seal this image, whatever the log says"
        % (where, facts["image_state"]["value"], image_facts.GENERALIZED),
    )


def check_credentials(facts):
    """No answer file with a password or a product key, and no Winlogon DefaultPassword, is left."""
    name = "credentials_absent"
    if facts.get("image_state") is None:
        why = "; ".join(u["error"] for u in facts.get("unreadable") or []) or "the volume cannot be read"
        return check(name, False, "answer files and Winlogon cannot be checked: %s" % why)
    found = image_facts.leftover_credentials(facts)
    if found:
        return check(
            name,
            False,
            "%s: every clone would carry them; remove the answer files and the Winlogon DefaultPassword "
            "before sysprep" % "; ".join(found),
        )
    left = ", ".join(u["path"] for u in facts.get("unattend") or [])
    return check(
        name,
        True,
        "no password or product key in an answer file%s, and no Winlogon DefaultPassword"
        % (" (%s)" % left if left else ""),
    )


def windows_checks(
    boot_sector,
    view,
    partitions,
    windows,
    build_failed=DEFAULT_BUILD_FAILED,
    bootstrap_script=DEFAULT_BOOTSTRAP_SCRIPT,
    bootstrap_log=DEFAULT_BOOTSTRAP_LOG,
    final_line=DEFAULT_FINAL_LINE,
    unreadable=None,
    remote_desktop=None,
    remote_desktop_port=REMOTE_DESKTOP_PORT,
    facts=None,
):
    """The four assertions, the partition-after-C: rule and the remote-access contract. ``view`` is None
    when NTFS cannot be read (BitLocker); ``unreadable`` then says why, and the file assertions fail with
    it as evidence. ``remote_desktop`` is what the adapter read from the SYSTEM hive (see
    ``check_remote_desktop``); ``remote_desktop_port`` None (or 0) leaves that check out. ``facts`` is the
    image-facts document of the volume (``image_facts``): its ImageState and leftover credentials."""
    checks = [check_boot_sector(boot_sector)]
    if view is None:
        why = "cannot be checked: %s" % (unreadable or "the volume cannot be read as NTFS")
        checks.append(check("build_failed_absent", False, "%s %s" % (build_failed, why)))
        checks.append(check("bootstrap_script_absent", False, "%s %s" % (bootstrap_script, why)))
        checks.append(check("bootstrap_log_final_line", False, "%s %s" % (bootstrap_log, why)))
    else:
        checks.append(check_absent(view, "build_failed_absent", build_failed, "the build failed and said so"))
        checks.append(
            check_absent(
                view,
                "bootstrap_script_absent",
                bootstrap_script,
                "the reboot-resume task must not ship in the golden",
            )
        )
        checks.append(check_log_final_line(view, bootstrap_log, final_line))
    if view is None or facts is None:
        facts = {"unreadable": [{"source": "the volume", "error": unreadable or "the facts were not read"}]}
    checks.append(check_image_state(facts))
    checks.append(check_credentials(facts))
    checks.append(check_nothing_after(partitions, windows))
    if remote_desktop_port:
        if view is None:
            settings = {"error": unreadable or "the volume cannot be read as NTFS"}
        else:
            settings = remote_desktop or {"error": "it was not read"}
        checks.append(check_remote_desktop(settings, remote_desktop_port))
    return checks


# Linux hygiene ----------------------------------------------------------------------------------


def check_machine_id(view):
    name = "machine_id_empty"
    if not view.exists("/etc/machine-id"):
        return check(name, True, "/etc/machine-id is absent; systemd makes a fresh one at first boot")
    content = view.read("/etc/machine-id", 0, 128).strip()
    if not content or content == b"uninitialized":
        return check(name, True, "/etc/machine-id is empty; every clone gets its own at first boot")
    return check(
        name,
        False,
        "/etc/machine-id holds %s: every clone would share it (DHCP leases, journald); truncate it"
        % content.decode("latin-1")[:40],
    )


def check_host_keys(view):
    names = view.list("/etc/ssh") or []
    keys = sorted(
        n for n in names if n.startswith("ssh_host_") and (n.endswith("_key") or n.endswith(".pub"))
    )
    return absence(
        "ssh_host_keys_absent",
        keys,
        "/etc/ssh holds %s: every clone would share the build's host keys",
        "no /etc/ssh/ssh_host_* keys",
    )


def check_cloud_init(view):
    found = []
    if view.exists("/var/lib/cloud/data/instance-id"):
        found.append("/var/lib/cloud/data/instance-id")
    for entry in view.list("/var/lib/cloud/instances") or []:
        found.append("/var/lib/cloud/instances/%s" % entry)
    if view.exists("/var/lib/cloud/instance"):
        found.append("/var/lib/cloud/instance")
    return absence(
        "cloud_init_instance_absent",
        found,
        "cloud-init instance data is left: %s; clones would skip first-boot configuration "
        "(run cloud-init clean)",
        "no cloud-init instance data",
    )


def check_authorized_keys(view):
    homes = ["/root"] + ["/home/%s" % n for n in sorted(view.list("/home") or [])]
    found = []
    for home in homes:
        path = home + "/.ssh/authorized_keys"
        size = view.size(path)
        if size:
            found.append("%s (%s)" % (path, human_size(size)))
    return absence(
        "build_authorized_keys_absent",
        found,
        "authorized_keys left from the build: %s; clones would let the build key in",
        "no authorized_keys in /root or /home/*",
    )


def check_core_dumps(view):
    found = []
    for folder in ("/var/crash", "/var/lib/systemd/coredump"):
        for entry in view.list(folder) or []:
            found.append("%s/%s" % (folder, entry))
    return absence(
        "core_dumps_absent",
        sorted(found)[:10],
        "core dumps are left: %s",
        "no core dumps in /var/crash or /var/lib/systemd/coredump",
    )


def tree_size(view, path):
    """Bytes of the regular files under ``path`` (metadata only: no file is read)."""
    total = 0
    pending = [path]
    while pending:
        current = pending.pop()
        for entry in view.list(current) or []:
            child = current.rstrip("/") + "/" + entry
            if view.is_dir(child):
                pending.append(child)
            else:
                total += view.size(child) or 0
    return total


def check_var_log(view, max_bytes=DEFAULT_MAX_LOG_BYTES):
    total = tree_size(view, "/var/log")
    evidence = "/var/log holds %s (limit %s)" % (human_size(total), human_size(max_bytes))
    if total > max_bytes:
        return check("var_log_small", False, evidence + ": the build's logs ship in every clone")
    return check("var_log_small", True, evidence)


def enablement_links(view):
    """``{unit: [link paths]}`` of the units enabled in /etc/systemd/system (``*.wants``/``*.requires``)."""
    links = {}
    for folder in sorted(view.list(SYSTEMD_ETC) or []):
        if not (folder.endswith(".wants") or folder.endswith(".requires")):
            continue
        for unit in sorted(view.list("%s/%s" % (SYSTEMD_ETC, folder)) or []):
            links.setdefault(unit, []).append("%s/%s/%s" % (SYSTEMD_ETC, folder, unit))
    return links


def unmasked(view, units):
    """The ``units`` the image ships that no mask in /etc/systemd/system stops."""
    found = []
    for unit in units:
        mask = "%s/%s" % (SYSTEMD_ETC, unit)
        shipped = any(view.exists("%s/%s" % (folder, unit)) for folder in UNIT_DIRS)
        # An empty file or a symbolic link (to /dev/null) reads as no bytes.
        if shipped and not (view.exists(mask) and view.read(mask, 0, 1) == b""):
            found.append("%s (shipped, not masked)" % unit)
    return found


def check_background_apt(view, links=None):
    links = enablement_links(view) if links is None else links
    found = [path for unit in BACKGROUND_APT_UNITS for path in links.get(unit, [])]
    found += unmasked(view, APT_HOOK_UNITS)
    return absence(
        "background_apt_disabled",
        found,
        "background apt is enabled at boot by %s: every clone would upgrade or fetch into its "
        "copy-on-write delta and drift the PostgreSQL minors; disable and mask unattended-upgrades, the "
        "apt daily, Ubuntu Pro, motd-news and snap-repair timers, and mask apt-news and esm-cache "
        "before sealing",
        "%s are not enabled; %s are masked or absent"
        % (", ".join(BACKGROUND_APT_UNITS), ", ".join(APT_HOOK_UNITS)),
    )


def cluster_name(value):
    """``17/main`` or ``17-main`` -> ``17/main``."""
    text = str(value).strip()
    version, sep, name = text.replace("/", "-", 1).partition("-")
    if not sep or not version or not name:
        raise SealError("postgresql cluster %r: name it <major>/<cluster>, for example 17/main" % (value,))
    return "%s/%s" % (version, name)


def start_mode(text):
    """The first word of a start.conf that is not a comment (``auto``, ``manual``, ``disabled``)."""
    for line in text.splitlines():
        word = line.split("#", 1)[0].strip()
        if word:
            return word.lower()
    return ""


def check_postgresql_clusters(view, requested=(), links=None):
    """Only the ``requested`` clusters start at boot: their start.conf says ``auto`` or systemd enables
    their ``postgresql@<major>-<name>.service``; every other cluster is manual and not enabled."""
    links = enablement_links(view) if links is None else links
    wanted = sorted(set(cluster_name(c) for c in requested or ()))
    enabled = {}
    for version in sorted(view.list("/etc/postgresql") or []):
        for name in sorted(view.list("/etc/postgresql/%s" % version) or []):
            conf = "/etc/postgresql/%s/%s/start.conf" % (version, name)
            if view.exists(conf) and start_mode(view.read(conf, 0, 4096).decode("latin-1")) == "auto":
                enabled.setdefault("%s/%s" % (version, name), []).append("%s says auto" % conf)
    for unit, paths in links.items():
        if unit.startswith("postgresql@") and unit.endswith(".service"):
            cluster = cluster_name(unit[len("postgresql@") : -len(".service")])
            enabled.setdefault(cluster, []).extend("%s is enabled" % p for p in paths)
    extra = ["%s (%s)" % (c, ", ".join(enabled[c])) for c in sorted(enabled) if c not in wanted]
    missing = [c for c in wanted if c not in enabled]
    name = "postgresql_clusters_at_boot"
    asked = ", ".join(wanted) or "none"
    problems = []
    if extra:
        problems.append(
            "%s start at boot, but the requested clusters are %s: every clone would start them; "
            "set their start.conf to manual and disable their units" % ("; ".join(extra), asked)
        )
    if missing:
        problems.append(
            "%s is requested but does not start at boot (start.conf is not auto and no "
            "postgresql@ unit is enabled)" % ", ".join(missing)
        )
    if problems:
        return check(name, False, "; ".join(problems))
    return check(name, True, "the clusters that start at boot are the requested ones: %s" % asked)


def linux_checks(view, max_log_bytes=DEFAULT_MAX_LOG_BYTES, postgresql_clusters=()):
    links = enablement_links(view)
    return [
        check_machine_id(view),
        check_host_keys(view),
        check_cloud_init(view),
        check_authorized_keys(view),
        check_core_dumps(view),
        check_var_log(view, max_log_bytes),
        check_background_apt(view, links),
        check_postgresql_clusters(view, postgresql_clusters, links),
    ]
