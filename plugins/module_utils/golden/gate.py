# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Pure rules of the clone gate: what a tenant's clone is made of and how its boot is judged.

The gate boots a clone of a candidate golden the way a tenant would and judges it in two phases:
the guest agent connecting (the earliest proof that the OS booted), then the remote port answering
from where tenants reach it. A guest whose agent connected but whose port did not answer booted; the
verdict says so instead of calling it a boot failure.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import re

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import seal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import golden, selection
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import kinds
from ansible_collections.goldenimage.pipeline.plugins.module_utils.repave import rollout
from ansible_collections.goldenimage.pipeline.plugins.module_utils.windows import console

PASSED = "passed"
NO_BOOT = "no_boot"
PORT_UNREACHABLE = "port_unreachable"
DISK_NOT_GROWN = "disk_not_grown"
DISK_UNPROVEN = "disk_unproven"
INCONCLUSIVE = "inconclusive"

# What proved the clone booted. The guest agent connecting is the strongest and earliest proof. A stock
# Linux cloud image ships no agent, so there the SSH server's banner is the proof: its host keys are made
# at first boot (cloud-init, fed by the gate's NoCloud seed), so a banner means the OS came up. NONE: no
# proof arrived (the verdict is no_boot and the console says what the screen showed).
PROOF_AGENT = "guest-agent"
PROOF_SSH = "ssh-banner"
PROOF_NONE = "none"
SSH_BANNER = "SSH-2.0-"
# How the disk growth was read: the agent's filesystem list, a command over SSH in a Linux guest, or
# PowerShell over WinRM in a Windows guest.
CHECK_AGENT = "guest-agent-filesystems"
CHECK_SSH = "ssh-root-filesystem"
CHECK_WINRM = "winrm-partition"
# The in-guest command of the SSH check: the root filesystem's size in bytes (util-linux findmnt,
# with coreutils df as the fallback where findmnt is missing).
ROOT_SIZE_COMMAND = "findmnt -bno SIZE / 2>/dev/null || df -B1 --output=size / | tail -n 1"
# The in-guest script of the WinRM check, the seed's own Get-PartitionSupportedSize: C:'s partition size,
# the largest size it could take, and its disk's size, in bytes on one line. The three figures tell the
# three links apart (see partition_problem).
PARTITION_CHECK = "Get-PartitionSupportedSize -DriveLetter C"
PARTITION_SCRIPT = "; ".join(
    (
        "$ErrorActionPreference = 'Stop'",
        "$p = Get-Partition -DriveLetter C",
        "$s = " + PARTITION_CHECK,
        "$d = Get-Disk -Number $p.DiskNumber",
        "'{0} {1} {2}' -f $p.Size, $s.SizeMax, $d.Size",
    )
)
WINRM_PORTS = {"https": 5986, "http": 5985}
WINRM_TRANSPORTS = ("ntlm", "kerberos", "credssp", "basic")
# A partition extended to the end of its disk leaves only alignment slack of SizeMax unclaimed.
EXTEND_SLACK = 16 * 2**20
# The NoCloud seed's volume and disk name in the gate's VM.
SEED_VOLUME = "gate-seed"

# A disk grows in three links, each healthy-looking on its own: KubeVirt's ExpandDisks grows the
# image to its PVC (a feature gate before v1.9.0, GA from it), nothing sits after the OS volume, and
# the guest extends the volume. The gate clones GROW_BY larger than the golden and reads the result.
EXPAND_DISKS = "ExpandDisks"
EXPAND_DISKS_GA = (1, 9, 0)
GROW_BY = "1Gi"
OS_MOUNTS = {"windows": "C:\\", "linux": "/"}

# The remote port per OS. Windows: Remote Desktop, which the bake enables and opens in the firewall and
# the seal check asserts in the sealed SYSTEM hive (seal.REMOTE_DESKTOP_PORT): one contract.
OS_PORTS = {"windows": seal.REMOTE_DESKTOP_PORT, "linux": 22}
# The catalog's minMemory per OS (Kube-DC's catalog: 8Gi for Windows 11). A clone below it fails for
# reasons that say nothing of the image, so a gate below it is inconclusive, never a boot verdict.
MIN_MEMORY = {"windows": "8Gi", "linux": "1Gi"}

SNAPSHOT_API = "snapshot.storage.k8s.io/v1"
VM_API = "kubevirt.io/v1"
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "goldenimage.pipeline.clone_gate"
# Every object a gate run creates carries the run, the candidate it gates and, when kept on purpose,
# the kept label: cleanup and the next run's sweep find them by label, never by a name they remember.
GATE_LABEL = "goldenimage.pipeline/clone-gate"
CANDIDATE_LABEL = "goldenimage.pipeline/clone-gate-candidate"
KEPT_LABEL = "goldenimage.pipeline/clone-gate-kept"
CANDIDATE_ANNOTATION = "goldenimage.pipeline/clone-gate-candidate"
CLONE_MIN_SIZE = "kube-dc.com/clone-min-size"

# The kinds a gate creates, in creation order: (apiVersion, kind, plural for kubectl, namespaced).
CREATED_KINDS = (
    (SNAPSHOT_API, "VolumeSnapshotContent", "volumesnapshotcontents.snapshot.storage.k8s.io", False),
    (SNAPSHOT_API, "VolumeSnapshot", "volumesnapshots.snapshot.storage.k8s.io", True),
    ("v1", "PersistentVolumeClaim", "persistentvolumeclaims", True),
    (VM_API, "VirtualMachine", "virtualmachines.kubevirt.io", True),
)

_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([KMGTPE]i|[kMGTPE])?$")
_FACTORS = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


# A round of the gate (one module call) returns after this many seconds at most, with a progress line.
REPORT_EVERY = 20
STAGE_NAMES = {
    "sweep": "sweep",
    "publish": "provision",
    "provision": "provision",
    "start": "start",
    "agent": "agent",
    "port": "port",
}


def progress_line(candidate, project, stage, pending, state, elapsed, stage_elapsed, stage_timeout):
    """One progress line of a gate still waiting: the phase, what it waits for, the last state seen, and
    the elapsed time, in total and of the phase's own timeout."""
    return "clone gate of %s in %s: phase %s, waiting for %s (%s); %ds elapsed, %ds of %ds in this phase" % (
        candidate,
        project,
        STAGE_NAMES.get(stage, stage),
        pending,
        state or "nothing observed yet",
        int(elapsed),
        int(stage_elapsed),
        int(stage_timeout),
    )


def timeout_message(pending, elapsed, state):
    """A phase that ran out of time: what was still pending, and the last state seen."""
    return "timed out after %ds, still pending: %s; last observed: %s" % (
        int(elapsed),
        pending,
        state or "nothing",
    )


class GateError(PipelineError):
    """A gate that cannot run as asked; the message says why."""


def parse_quantity(value):
    """Bytes in a Kubernetes quantity such as ``8Gi``, ``512Mi`` or ``4G``."""
    match = _QUANTITY.match(str(value).strip())
    if not match:
        raise GateError("%r is not a Kubernetes quantity (for example 8Gi)" % (value,))
    number, suffix = match.group(1), match.group(2) or ""
    whole, frac = (number.split(".") + [""])[:2]
    scale = 10 ** len(frac)
    return -(-(int(whole + frac) * _FACTORS[suffix]) // scale)


def port_for(os_name, port=None):
    """The remote port the gate probes: ``port`` when given (1-65535), else the OS's contract port."""
    if os_name not in OS_PORTS:
        raise GateError("os must be one of %s, not %r" % (", ".join(sorted(OS_PORTS)), os_name))
    if port is None:
        return OS_PORTS[os_name]
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise Refusal(
            "option port (%r)" % (port,),
            "a TCP port is a number from 1 to 65535",
            "give the port the golden opens (%d for Windows Remote Desktop, 22 for SSH)" % OS_PORTS[os_name],
        )
    return port


def golden_os(os_name="", family="", chosen=""):
    """The gate's guest OS for a golden: ``chosen`` when given, else ``windows`` when the golden's OS name
    or family says Windows, else ``linux``. The OS picks the port probed and the catalog minimum memory
    (a Windows golden gated as Linux would boot at 1Gi and be probed on 22)."""
    if chosen:
        if chosen not in MIN_MEMORY:
            raise GateError("os must be one of %s, not %r" % (", ".join(sorted(MIN_MEMORY)), chosen))
        return chosen
    return "windows" if "windows" in ("%s %s" % (os_name or "", family or "")).lower() else "linux"


def gate_memory(os_name, memory=None, min_memory=None):
    """``(memory, min_memory)`` of a gate: the catalog minimum for the OS unless given, and the guest
    memory defaulting to it. Every path that runs a gate (module, role, playbook) resolves it here."""
    if os_name not in MIN_MEMORY:
        raise GateError("os must be one of %s, not %r" % (", ".join(sorted(MIN_MEMORY)), os_name))
    floor = min_memory or MIN_MEMORY[os_name]
    return memory or floor, floor


def memory_problem(memory, min_memory):
    """Why ``memory`` makes the gate inconclusive (below the catalog minimum), or None."""
    have, need = parse_quantity(memory), parse_quantity(min_memory)
    if have < need:
        return (
            "memory %s is below the catalog minimum %s: a clone that fails with too little memory proves "
            "nothing about the image, so the gate is inconclusive and does not run" % (memory, min_memory)
        )
    return None


def verdict(booted, port_answered, disk_grown=True):
    """``passed`` / ``no_boot`` (no boot proof: neither the agent nor, on Linux, the SSH banner) /
    ``disk_not_grown`` (booted, the OS volume did not grow into the larger disk) / ``disk_unproven``
    (booted, but nothing in the guest could report its disk: ``disk_grown`` is None) /
    ``port_unreachable`` (booted, port silent)."""
    if not booted:
        return NO_BOOT
    if disk_grown is None:
        return DISK_UNPROVEN
    if not disk_grown:
        return DISK_NOT_GROWN
    return PASSED if port_answered else PORT_UNREACHABLE


PROOF_WORDS = {
    PROOF_AGENT: "guest agent connected",
    PROOF_SSH: "SSH banner answered, no guest agent",
}


def banner_problem(data):
    """None when ``data`` (the first bytes a TCP peer sent) is an SSH server's identification line
    (RFC 4253: ``SSH-2.0-<software>``), else why it is not a boot proof."""
    text = bytes(data or b"")
    if not text:
        return "connected, but no banner arrived"
    if not text.startswith(SSH_BANNER.encode("ascii")):
        return "%r is not an SSH-2.0 banner" % text[:40]
    return None


def banner_text(data):
    """The banner's first line, printable."""
    line = bytes(data or b"").split(b"\n", 1)[0].rstrip(b"\r")
    return line.decode("ascii", "replace")[:120]


def seed_user_data(public_key, password_login=False):
    """The NoCloud user-data of the gate's Linux VM: cloud-init makes the SSH host keys at first boot
    (so the banner is a boot proof), password login stays off unless the gate logs in with a password,
    and ``public_key`` (one line, ``ssh-ed25519 AAAA...``) is authorised for the image's default user."""
    key = str(public_key or "").strip()
    if not key or "\n" in key or not key.startswith(("ssh-", "ecdsa-", "sk-")):
        raise GateError("the gate's seed needs one OpenSSH public key line, got %r" % key[:40])
    return "#cloud-config\nssh_pwauth: %s\nssh_authorized_keys:\n  - %s\n" % (
        "true" if password_login else "false",
        key,
    )


def credentials_problem(credentials, os_name="linux"):
    """Why ``guest_credentials`` cannot log in (None when they can): a username and a password or a
    private key over SSH (Linux); a username and a password over WinRM (Windows), never Basic
    authentication over plain HTTP, which sends the password readable on the wire."""
    if not credentials:
        return None
    if not str(credentials.get("username") or "").strip():
        return "guest_credentials needs a username"
    if os_name != "windows":
        if not (credentials.get("password") or credentials.get("private_key")):
            return "guest_credentials needs a password or a private_key"
        return None
    if credentials.get("private_key") or not credentials.get("password"):
        return "WinRM logs in with a password: guest_credentials needs a password and no private_key"
    transport = credentials.get("transport") or "ntlm"
    if transport not in WINRM_TRANSPORTS:
        return "transport %r is not one of %s" % (transport, ", ".join(WINRM_TRANSPORTS))
    if transport == "basic" and (credentials.get("scheme") or "https") == "http":
        return "transport basic over scheme http sends the password readable on the wire"
    return None


def login_port(os_name, credentials, port=None):
    """The port the in-guest checks log in to: SSH's (the probed port) for Linux, WinRM's for Windows
    (the one given, else 5986 for HTTPS and 5985 for HTTP)."""
    if os_name != "windows":
        return port_for(os_name, port)
    return (credentials or {}).get("port") or WINRM_PORTS[(credentials or {}).get("scheme") or "https"]


def root_size(output):
    """Bytes of the root filesystem from ``ROOT_SIZE_COMMAND``'s output, or None when it is not a number."""
    lines = [line.strip() for line in str(output or "").splitlines() if line.strip()]
    if not lines or not lines[-1].isdigit():
        return None
    return int(lines[-1])


def partition_sizes(output):
    """``(size, size_max, disk)`` in bytes from ``PARTITION_SCRIPT``'s output, or None when its last line
    is not three numbers."""
    lines = [line.split() for line in str(output or "").splitlines() if line.strip()]
    if not lines or len(lines[-1]) != 3 or not all(f.isdigit() for f in lines[-1]):
        return None
    return tuple(int(f) for f in lines[-1])


def partition_problem(sizes, golden_size, clone_size_text):
    """Which of the three links broke, from C:'s size, its SizeMax and its disk's size (None: C: grew).

    The disk no larger than the golden: the image was not grown to its PVC (link 1). SizeMax beyond
    C:'s size: the space is there and C: may take it, but nothing extended it (link 3). C: no larger
    than the golden and unable to grow on a grown disk: a partition after C: strands the space (link 2).
    """
    size, size_max, disk = sizes
    golden = parse_quantity(golden_size)
    words = partition_words(sizes, golden_size, clone_size_text)
    if disk <= golden:
        return (
            "%s: the guest's disk kept the golden's size, so KubeVirt's %s did not grow the image to its "
            "volume (link 1)" % (words, EXPAND_DISKS)
        )
    if size_max - size > EXTEND_SLACK:
        return (
            "%s: C: may grow by %s (Get-PartitionSupportedSize SizeMax) but nothing extended it; "
            "cloudbase-init's ExtendVolumesPlugin extends it at first boot (link 3)"
            % (words, seal.human_size(size_max - size))
        )
    if size <= golden:
        return (
            "%s: C: cannot grow (SizeMax is its size) on a disk with %s beyond it, so a partition after "
            "C: strands the space; the bake removes WinRE (reagentc /disable) before sysprep (link 2)"
            % (words, seal.human_size(disk - size))
        )
    return None


def partition_words(sizes, golden_size, clone_size_text):
    """``C: is 1.9 GiB (SizeMax 1.9 GiB) on a 2.0 GiB disk; a 2.0 GiB clone of a 1.0 GiB golden``."""
    size, size_max, disk = sizes
    return "C: is %s (SizeMax %s) on a %s disk; a %s clone of a %s golden" % (
        seal.human_size(size),
        seal.human_size(size_max),
        seal.human_size(disk),
        seal.human_size(parse_quantity(clone_size_text)),
        seal.human_size(parse_quantity(golden_size)),
    )


def guest_reading(os_name, code, out, err, golden_size, clone_size_text):
    """What one in-guest read says: ``(volume, problem, words)``. ``volume`` is None when the command did
    not answer with its figures (``problem`` then says what it answered); ``words`` describe a reading."""
    if os_name == "windows":
        sizes = partition_sizes(out) if code == 0 else None
        if sizes is None:
            return None, "exited %d: %s" % (code, err or out or "no output"), None
        volume = {"mountPoint": OS_MOUNTS["windows"], "totalBytes": sizes[0]}
        words = partition_words(sizes, golden_size, clone_size_text)
        return volume, partition_problem(sizes, golden_size, clone_size_text), words
    size = root_size(out) if code == 0 else None
    if size is None:
        return None, "exited %d: %s" % (code, err or out or "no output"), None
    volume = {"mountPoint": "/", "totalBytes": size}
    problem = growth_problem(volume, os_name, golden_size, clone_size_text)
    return volume, problem, growth_words(volume, golden_size, clone_size_text)


def gate_record(result, candidate, release_digest, handle, run_id, at, project):
    """What a promotion reads of this gate run, in one dict to store keyed by the golden's release
    digest: the verdict, the boot proof, the disk check and its figures, the run and its time."""
    disk = result.get("disk_check") or {}
    return {
        "verdict": result.get("verdict"),
        "passed": result.get("verdict") == PASSED,
        "proof": result.get("proof") or PROOF_NONE,
        "disk_check": disk.get("name") or "",
        "disk_detail": disk.get("detail") or "",
        "candidate": candidate,
        "release_digest": release_digest or "",
        "snapshot_handle": handle or "",
        "project": project,
        "run": run_id,
        "at": at,
        "memory": result.get("memory") or "",
    }


# What the clone's console last showed says where a clone that never connected its agent stopped.
CONSOLE_MEANING = {
    console.FIRMWARE: "wedged in the firmware's boot manager: nothing on the disk booted",
    console.BOOTPROMPT: "firmware boot lines or a boot prompt: it did not get past the boot loader",
    console.SETUP: "Windows' own screens: it was still installing or starting, not wedged",
    console.STOP_ERROR: "a Windows stop error: it crashed while booting",
    console.BLANK: "a blank screen: no output at all",
}
# A Linux guest's console: what Windows' classes mean there.
LINUX_CONSOLE_MEANING = dict(
    CONSOLE_MEANING,
    **{
        console.SETUP: "the system's own output (kernel or service messages, a login prompt): it was still "
        "starting, not wedged",
        console.STOP_ERROR: "a crash screen: it failed while booting",
    },
)


def console_words(screen, os_name="windows"):
    """``bootprompt (firmware boot lines ...)`` for the last screen seen, or why none was read."""
    if not screen:
        return "not read"
    if screen.get("error"):
        return "unreadable (%s)" % screen["error"]
    base = screen.get("base_class") or ""
    meaning = LINUX_CONSOLE_MEANING if os_name == "linux" else CONSOLE_MEANING
    return "%s (%s)" % (base, meaning.get(base, "unknown"))


def explain(result, os_name, port, probe, screen=None, proof=PROOF_AGENT):
    how = PROOF_WORDS.get(proof, proof)
    if result == PASSED:
        return "the clone booted (%s) and port %d answered at %s" % (how, port, probe)
    if result == NO_BOOT:
        return "the clone did not boot: the guest agent never connected%s; its console last showed %s" % (
            " and no SSH banner answered" if os_name == "linux" else "",
            console_words(screen, os_name),
        )
    if result == DISK_NOT_GROWN:
        return "the clone booted (%s) but its disk did not grow" % how
    if result == DISK_UNPROVEN:
        return (
            "the clone booted (%s) but whether its disk grew could not be read inside the guest: no guest "
            "agent reports its filesystems and no guest_credentials were given to log in over SSH; give "
            "guest_credentials, install qemu-guest-agent in the golden, or set grow_by: 0 to gate without "
            "the disk link" % how
        )
    return (
        "the clone booted (%s) but port %d (%s remote access) did not answer at %s: "
        "the image boots; look at the guest's firewall or remote-access service, not at its boot"
        % (how, port, "RDP" if os_name == "windows" else "SSH", probe)
    )


def clone_size(restore_size, clone_min_size=None, grow_by="0"):
    """The clone's size: the snapshot's restoreSize, or the seeder's clone-min-size when larger, plus
    ``grow_by`` (so that the gate sees the disk grow, as a tenant's larger disk does)."""
    sizes = [s for s in (restore_size, clone_min_size) if s]
    if not sizes:
        raise GateError("the snapshot reports no restoreSize; it is not ready to clone")
    base = max(sizes, key=parse_quantity)
    extra = parse_quantity(grow_by)
    return base if not extra else str(parse_quantity(base) + extra)


def _version(text):
    match = re.match(r"^v?(\d+)\.(\d+)\.(\d+)", str(text or ""))
    return tuple(int(g) for g in match.groups()) if match else None


def expand_disks(kubevirts):
    """``(problem, detail)`` for link 1: whether KubeVirt grows a clone's disk image to its PVC.

    ``kubevirts`` are the cluster's KubeVirt CRs. ExpandDisks is on when a CR lists the feature gate or
    runs v1.9.0 or later, where it is GA; every CR must say so. No CR means it cannot be told: a
    problem, never a guess.
    """
    if not kubevirts:
        return (
            "no KubeVirt CR (kubevirt.io/v1 KubeVirt) was found, so whether ExpandDisks grows a clone's "
            "disk cannot be told; give the gate's credentials list on kubevirts.kubevirt.io, or set "
            "require_expand_disks: false to promote without that link checked",
            None,
        )
    seen = []
    for kubevirt in kubevirts:
        where = "%s/%s" % (kinds.namespace(kubevirt), kinds.name(kubevirt))
        spec = kubevirt.get("spec") or {}
        gates = ((spec.get("configuration") or {}).get("developerConfiguration") or {}).get("featureGates")
        version = kinds.status(kubevirt).get("observedKubeVirtVersion") or ""
        if EXPAND_DISKS in (gates or []):
            seen.append("KubeVirt %s lists the %s feature gate" % (where, EXPAND_DISKS))
        elif (_version(version) or (0, 0, 0)) >= EXPAND_DISKS_GA:
            seen.append("KubeVirt %s runs %s, where %s is GA" % (where, version, EXPAND_DISKS))
        else:
            return (
                "KubeVirt %s (%s) does not have the %s feature gate: a clone's disk image stays the "
                "golden's size whatever its PVC asks, so no tenant's disk grows; add %s to "
                "spec.configuration.developerConfiguration.featureGates of KubeVirt %s (it is GA from "
                "v%s), or set require_expand_disks: false to promote without that link"
                % (
                    where,
                    version or "version not reported",
                    EXPAND_DISKS,
                    EXPAND_DISKS,
                    where,
                    ".".join(str(n) for n in EXPAND_DISKS_GA),
                ),
                None,
            )
    return None, "; ".join(seen)


def os_volume(filesystems, os_name):
    """The OS volume among the guest agent's filesystems (``C:\\`` or ``/``), or None."""
    mount = OS_MOUNTS[os_name].lower()
    for item in filesystems or []:
        if str(item.get("mountPoint") or "").lower() == mount:
            return item
    return None


def growth_problem(volume, os_name, golden_size, clone_size_text):
    """Why the clone's OS volume shows the disk did not grow (links 1-3), or None.

    The volume grew when it is larger than the whole golden disk: only a disk image grown to the
    larger PVC (link 1), with nothing after the OS volume (link 2), extended by the guest (link 3) can
    hold that. Anything less is named with the three links to look at.
    """
    mount = OS_MOUNTS[os_name]
    if volume is None:
        return "the guest agent reports no %s volume, so the gate cannot tell whether the disk grew" % mount
    if int(volume.get("totalBytes") or 0) > parse_quantity(golden_size):
        return None
    return (
        "the guest's %s: the disk did not grow into the volume; check the three links: KubeVirt's %s, "
        "nothing after %s on the disk (the bake removes WinRE), and the guest extending its volume "
        "(cloudbase-init ExtendVolumes or cloud-init growpart)"
        % (growth_words(volume, golden_size, clone_size_text), EXPAND_DISKS, mount)
    )


def growth_words(volume, golden_size, clone_size_text):
    """``C:\\ is 1.8 GiB on a 2.0 GiB clone of a 1.0 GiB golden``."""
    return "%s is %s on a %s clone of a %s golden" % (
        volume.get("mountPoint"),
        seal.human_size(int(volume.get("totalBytes") or 0)),
        seal.human_size(parse_quantity(clone_size_text)),
        seal.human_size(parse_quantity(golden_size)),
    )


def candidate_id(namespace, name):
    """A label value for the candidate ``namespace/name``: readable, unique, at most 63 characters."""
    digest = hashlib.sha256(("%s/%s" % (namespace, name)).encode("utf-8")).hexdigest()[:12]
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "-", name or "")[:50].strip("-_.")
    return "%s-%s" % (readable, digest) if readable else digest


def gate_labels(run_id, candidate=None, kept=False):
    labels = {MANAGED_BY: MANAGER, GATE_LABEL: run_id}
    if candidate:
        labels[CANDIDATE_LABEL] = candidate
    if kept:
        labels[KEPT_LABEL] = "true"
    return labels


def refuse_project_namespace(project, snapshot_namespace):
    """A gate clones as a tenant would, so never in a golden namespace (nor the candidate's own)."""
    forbidden = {golden.NAMESPACES[golden.FILESYSTEM], golden.NAMESPACES[golden.BLOCK], snapshot_namespace}
    if project in forbidden:
        raise Refusal(
            "option project_namespace (%s)" % project,
            "a clone gate runs in a tenant's project namespace, never in a golden namespace: %s enforces "
            "PodSecurity baseline, KubeVirt's launcher needs privileged, and the gate must not relax a "
            "system namespace to run" % project,
            "give a project namespace (one labelled kube-dc.com/project)",
        )


# How a project namespace is recognised: Kube-DC labels every project's namespace kube-dc.com/project.
PROJECT_SELECTOR = selection.PROJECT_SELECTOR


def refuse_non_project(namespace_obj, project, project_selector=PROJECT_SELECTOR):
    """A gate clones only where a tenant would: a namespace that exists and is a project namespace,
    recognised by ``project_selector`` (a label selector on the Namespace; never empty)."""
    if not str(project_selector or "").strip():
        raise Refusal(
            "option project_selector (empty)",
            "an empty selector matches every namespace, so it recognises no project namespace",
            "give the label selector of project namespaces (Kube-DC: %s)" % PROJECT_SELECTOR,
        )
    if namespace_obj is None:
        raise Refusal(
            "option project_namespace (%s)" % project,
            "the namespace does not exist",
            "give an existing project namespace",
        )
    labels = kinds.labels(namespace_obj)
    try:
        matched = rollout.match_selector(labels, project_selector)
    except PipelineError as exc:
        raise Refusal(
            "option project_selector (%s)" % project_selector,
            "it is not a label selector: %s" % exc,
            "give a selector such as %s or kube-dc.com/project=acme" % PROJECT_SELECTOR,
        ) from None
    if not matched:
        raise Refusal(
            "option project_namespace (%s)" % project,
            "it is not a project namespace: its labels (%s) do not match %s, and a clone gate runs only "
            "where a tenant's VM would"
            % (", ".join("%s=%s" % kv for kv in sorted(labels.items())) or "none", project_selector),
            "give a project namespace, or set project_selector to how this cluster labels them",
        )


def sweep_selector(candidate):
    """The label selector of what earlier gate runs of ``candidate`` left behind (kept ones excluded)."""
    return "%s=%s,%s=%s,!%s" % (MANAGED_BY, MANAGER, CANDIDATE_LABEL, candidate, KEPT_LABEL)


def swept(objects, project):
    """Of the listed gate objects, those of ``project``: namespaced ones in it, contents bound to it."""
    found = []
    for obj in objects or []:
        if kinds.namespace(obj):
            if kinds.namespace(obj) == project:
                found.append(obj)
        elif (kinds.spec(obj).get("volumeSnapshotRef") or {}).get("namespace") == project:
            found.append(obj)
    return found


def removal_order(objects):
    """Newest kind first (VM, claim, snapshot, content), so nothing is deleted under a user of it."""
    rank = {kind: i for i, (_api, kind, _plural, _ns) in enumerate(CREATED_KINDS)}
    return sorted(objects, key=lambda o: -rank.get(o.get("kind"), -1))


def cleanup_command(run_id, project):
    """The kubectl commands that remove what run ``run_id`` left behind."""
    selector = "%s=%s" % (GATE_LABEL, run_id)
    namespaced = ",".join(plural for _a, _k, plural, ns in reversed(CREATED_KINDS) if ns)
    cluster = ",".join(plural for _a, _k, plural, ns in CREATED_KINDS if not ns)
    return "kubectl delete -n %s %s -l %s && kubectl delete %s -l %s" % (
        project,
        namespaced,
        selector,
        cluster,
        selector,
    )


def describe_left(objects):
    return ", ".join(
        "%s %s" % (o["kind"], "%s/%s" % (o["namespace"], o["name"]) if o.get("namespace") else o["name"])
        for o in objects
    )


def object_name(run_id, suffix=""):
    return ("gate-%s%s" % (run_id, suffix))[:63]


def content_definition(name, handle, driver, mode, snapshot_name, namespace, run_id, **marks):
    """A pre-provisioned, Retain content on the candidate's handle, as the per-project seeder makes them."""
    spec = {
        "deletionPolicy": "Retain",
        "driver": driver,
        "source": {"snapshotHandle": handle},
        "sourceVolumeMode": mode,
        "volumeSnapshotRef": {
            "apiVersion": SNAPSHOT_API,
            "kind": "VolumeSnapshot",
            "name": snapshot_name,
            "namespace": namespace,
        },
    }
    return {
        "apiVersion": SNAPSHOT_API,
        "kind": "VolumeSnapshotContent",
        "metadata": {"name": name, "labels": gate_labels(run_id, **marks)},
        "spec": spec,
    }


def snapshot_definition(name, namespace, content_name, run_id, **marks):
    return {
        "apiVersion": SNAPSHOT_API,
        "kind": "VolumeSnapshot",
        "metadata": {"name": name, "namespace": namespace, "labels": gate_labels(run_id, **marks)},
        "spec": {"source": {"volumeSnapshotContentName": content_name}},
    }


def pvc_definition(name, namespace, snapshot_name, size, mode, storage_class, run_id, **marks):
    spec = {
        "accessModes": ["ReadWriteOnce"],
        "volumeMode": mode,
        "resources": {"requests": {"storage": size}},
        "dataSource": {
            "apiGroup": "snapshot.storage.k8s.io",
            "kind": "VolumeSnapshot",
            "name": snapshot_name,
        },
    }
    if storage_class:
        spec["storageClassName"] = storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace, "labels": gate_labels(run_id, **marks)},
        "spec": spec,
    }


def vm_definition(name, namespace, claim, memory, run_id, annotations=None, user_data=None, **marks):
    """A VM booting the clone as a tenant's would: the claim as boot disk, the agent channel, pod network,
    and with ``user_data`` a NoCloud seed (a Linux tenant's VM gets cloud-init data the same way)."""
    disks = [{"name": "boot", "bootOrder": 1, "disk": {"bus": "virtio"}}]
    volumes = [{"name": "boot", "persistentVolumeClaim": {"claimName": claim}}]
    if user_data:
        disks.append({"name": SEED_VOLUME, "disk": {"bus": "virtio"}})
        volumes.append({"name": SEED_VOLUME, "cloudInitNoCloud": {"userData": user_data}})
    labels = gate_labels(run_id, **marks)
    return {
        "apiVersion": VM_API,
        "kind": "VirtualMachine",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": dict(annotations or {}),
        },
        "spec": {
            "runStrategy": "Always",
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "domain": {
                        "devices": {
                            "disks": disks,
                            "interfaces": [{"name": "default", "masquerade": {}}],
                        },
                        "memory": {"guest": memory},
                        "resources": {"requests": {"memory": memory}},
                    },
                    "networks": [{"name": "default", "pod": {}}],
                    "volumes": volumes,
                },
            },
        },
    }


def vmi_ip(vmi):
    interfaces = kinds.status(vmi).get("interfaces") or []
    return (interfaces[0].get("ipAddress") if interfaces else None) or None


def probe_address(port_probe, vmi, port):
    """``(host, port)`` to probe, or None while the VMI has no address yet.

    ``auto``: the VMI's first interface address and the guest port, where a pod on the cluster network
    reaches the guest. Anything else is a ``host:port`` template with ``{ip}``, ``{port}``, ``{name}``,
    ``{namespace}`` and ``{annotations[KEY]}`` (an annotation of the VMI, for a platform that records
    where it forwards the port) filled in, for example a Service or a load balancer.
    """
    ip = vmi_ip(vmi)
    if port_probe in (None, "", "auto"):
        return (ip, port) if ip is not None else None
    if "{ip}" in port_probe and ip is None:
        return None
    try:
        text = port_probe.format(
            ip=ip or "",
            port=port,
            name=kinds.name(vmi) or "",
            namespace=kinds.namespace(vmi) or "",
            annotations=kinds.annotations(vmi),
        )
    except KeyError:
        return None  # the annotation the template reads is not there yet
    except (IndexError, ValueError, AttributeError) as exc:
        raise GateError("port_probe %r is not a host:port template: %s" % (port_probe, exc)) from None
    host, sep, number = text.rpartition(":")
    if not sep or not number.isdigit():
        raise GateError("port_probe must be 'auto' or a host:port template, got %r" % port_probe)
    return host.strip("[]"), int(number)


# --- the rounds: stages, what each waits for, and what the observed state means --------------------

# The stages of a gate run, in order; each round runs stages until one has to wait past the round.
STAGES = ("sweep", "publish", "provision", "start", "agent", "disk", "port", "done")
PENDING = {
    "provision": "the published snapshot to be ready",
    "start": "the VM instance to run",
    "agent": "the guest agent to connect (AgentConnected)",
    "agent-linux": "the guest agent to connect (AgentConnected) or the SSH server to send its banner",
    "disk": "the guest to report its OS volume grown into the larger disk",
}


def next_stage(stage):
    """The stage after ``stage``."""
    return STAGES[STAGES.index(stage) + 1]


def ref(obj):
    """What names one object of a gate run: ``{apiVersion, kind, name, namespace, run}``."""
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": kinds.name(obj),
        "namespace": kinds.namespace(obj),
        "run": kinds.labels(obj).get(GATE_LABEL),
    }


def run_names(run_id, project):
    """The names of a run's objects: ``vs`` (snapshot, claim and VM) and ``content`` (cluster-scoped,
    so it carries the project too)."""
    return {"vs": object_name(run_id), "content": object_name("%s-%s" % (project, run_id))}


def candidate_content(vs, where):
    """The name of the content a candidate ``VolumeSnapshot`` is bound to; refused when it is absent or
    not ready (a clone of it cannot be gated)."""
    if vs is None:
        raise PipelineError("%s not found" % where)
    status = kinds.status(vs)
    if not status.get("readyToUse") or not status.get("boundVolumeSnapshotContentName"):
        raise PipelineError("%s is not ready to use; a clone of it cannot be gated" % where)
    return status["boundVolumeSnapshotContentName"]


def candidate_source(vs, content, where):
    """``(handle, volume mode, driver)`` of a candidate from its bound content; refused without a handle."""
    handle = kinds.snapshot_handle(content)
    if not handle:
        raise PipelineError("%s has no snapshot handle on its content" % where)
    mode = kinds.spec(content).get("sourceVolumeMode") or kinds.labels(vs).get("kube-dc.com/golden-mode")
    return handle, mode or "Filesystem", kinds.spec(content).get("driver") or ""


def copy_candidates(snapshots):
    """The project's snapshots that may be the seeder's copy (ready, bound, not being deleted), by name:
    ``[(snapshot, content name)]``."""
    found = []
    for vs in sorted(snapshots, key=kinds.name):
        status = kinds.status(vs)
        name = status.get("boundVolumeSnapshotContentName")
        if status.get("readyToUse") and name and not kinds.terminating(vs):
            found.append((vs, name))
    return found


def seeded_copy(candidates, contents, handle):
    """The first of ``copy_candidates`` whose content (``contents``: name -> object) is on ``handle``."""
    for vs, name in candidates:
        if kinds.snapshot_handle(contents.get(name)) == handle:
            return vs
    return None


def source(seeded, names, handle, project):
    """What the clone is restored from: the seeder's copy (``seeded``) or the snapshot the gate publishes."""
    return {
        "name": kinds.name(seeded) if seeded else names["vs"],
        "namespace": project,
        "handle": handle,
        "published_by": "project" if seeded else "gate",
    }


def plan(names, seeded, project):
    """The objects a run creates, in order (what check mode reports)."""
    found = []
    if seeded is None:
        found.append({"kind": "VolumeSnapshotContent", "name": names["content"], "namespace": None})
        found.append({"kind": "VolumeSnapshot", "name": names["vs"], "namespace": project})
    for kind in ("PersistentVolumeClaim", "VirtualMachine"):
        found.append({"kind": kind, "name": names["vs"], "namespace": project})
    return found


def snapshot_ready(obj):
    """Wait predicate of the published snapshot: ``(done, failed)``."""
    return bool(kinds.status(obj).get("readyToUse")), None


def describe_snapshot(obj):
    status = kinds.status(obj)
    error = status.get("error")
    return "readyToUse=%s%s" % (
        status.get("readyToUse"),
        " error: %s" % error.get("message") if error else "",
    )


def vmi_running(obj):
    """Wait predicate of the start stage: Running, or failed before the guest ran."""
    phase = kinds.status(obj).get("phase")
    return phase == "Running", ("the instance failed before the guest ran" if phase == "Failed" else None)


def agent_ready(obj):
    """Wait predicate of the agent stage: connected, or the instance ended before it did."""
    if kinds.agent_connected(obj):
        return True, None
    phase = kinds.status(obj).get("phase")
    if obj is None or phase in ("Failed", "Succeeded"):
        return False, "the instance ended (%s) before its agent connected" % (phase or "deleted")
    return False, None


def gone(obj):
    return obj is None, None


def sweep_refusal(candidate, left, project, errors):
    """What an earlier run of the candidate left and could not be removed: the run refuses to add more."""
    runs = sorted({o.get("run") for o in left if o.get("run")})
    return (
        "earlier clone gate runs of %s left %s in %s and they could not be removed (%s), so this run does "
        "not add more; remove them with: %s"
        % (
            candidate,
            describe_left(left),
            project,
            "; ".join(errors),
            " && ".join(cleanup_command(run, project) for run in runs),
        )
    )


def kept_report(created, run_id, project):
    """The cleanup result of a run kept on purpose (keep: true)."""
    if not created:
        return {"kept": False}
    command = cleanup_command(run_id, project)
    report = {
        "kept": True,
        "cleanup_command": command,
        "cleanup_message": "kept %s for diagnosis (keep: true); delete them with: %s"
        % (describe_left(removal_order(list(created))), command),
    }
    for kind, key in (("VirtualMachine", "kept_vm"), ("PersistentVolumeClaim", "kept_pvc")):
        found = [o for o in created if o.get("kind") == kind]
        if found:
            report[key] = "%s/%s" % (found[-1]["namespace"], found[-1]["name"])
    return report


def left_report(left, errors, run_id, project):
    """The cleanup result when objects could not be removed (None when nothing was left)."""
    if not left:
        return None
    command = cleanup_command(run_id, project)
    return {
        "kept": True,
        "left_behind": left,
        "cleanup_errors": errors,
        "cleanup_command": command,
        "cleanup_message": "cleanup left %s behind (%s); remove them with: %s"
        % (describe_left(left), "; ".join(errors), command),
    }
