# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Micro-VM images for flintlock: the rules that turn one disk's root filesystem into three OCI images.

Pure: no I/O. The adapters read the partition table and the ext4 tree into plain data (``Entry``
objects keyed by path); everything decided here is a function of that data and the parameters:
which partition is the root, which kernel version ships, what each image holds and under which
name, what ``slim`` removes, the tar member list (hard links, owners, fixed mtimes), the OCI
config/manifest/index documents and the flintlock/CAPMVM fragments.

Layout of the modules image: flintlock mounts an additional volume's image root at the volume's
``mount_point``. The modules image therefore holds the *contents* of ``lib/modules/<version>`` at
its root (``kernel/...``, ``modules.dep``), and is mounted at ``/lib/modules/<version>``: the guest
sees ``/lib/modules/<version>/kernel/...``. An image that itself held ``lib/modules/<version>/``
would appear at ``/lib/modules/<version>/lib/modules/<version>/`` and modprobe would find nothing;
``check_modules_layout`` refuses that.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import posixpath
import re
import struct
import time
from types import MappingProxyType

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal

# GPT partition types that hold a Linux root (lower-case GUIDs) and the MBR type for Linux.
LINUX_FILESYSTEM_GPT = "0fc63daf-8483-4772-8e79-3d69d8477de4"
ROOT_GPT = {
    "4f68bce3-e8cd-4db1-96e7-fbcaf984b709": "Linux root (x86-64)",
    "b921b045-1df0-41c3-af44-4c6f280d3fae": "Linux root (ARM64)",
    "44479540-f297-41b2-9af7-d131d5f0458a": "Linux root (x86)",
}
LINUX_MBR = "0x83"
# The discoverable-partitions type of a separate /boot (XBOOTLDR).
XBOOTLDR_GPT = "bc13c2ff-59e6-4262-a352-b275fd6f7172"

# The filesystems a root or a /boot is read from, each with the adapter that reads it, and what the
# refusals call every filesystem the partition reader recognises.
READ_FILESYSTEMS = {"ext": "ext4", "xfs": "xfs", "btrfs": "btrfs"}
READ_NAMES = "ext2/3/4, XFS and btrfs"
FILESYSTEM_NAMES = {
    "ext": "an ext2/3/4 filesystem",
    "xfs": "an XFS filesystem",
    "btrfs": "a btrfs filesystem",
    "lvm2": "an LVM2 physical volume",
    "lvm-volume": "an LVM2 logical volume this module does not read",
    "luks": "a LUKS volume",
    "swap": "swap space",
    "squashfs": "a squashfs image",
    "f2fs": "an F2FS filesystem",
    "zfs": "a ZFS pool member",
    "bcachefs": "a bcachefs filesystem",
    "vfat": "a FAT filesystem",
    "ntfs": "an NTFS filesystem",
    "bitlocker": "a BitLocker volume",
}
# What to do when the root is inside one of these.
LVM_MOVE = (
    "activate the volume group and give its root logical volume as a disk image of its own "
    "(for example qemu-img convert -O raw /dev/<vg>/<lv> root.raw)"
)
UNREAD_MOVES = {
    "lvm2": LVM_MOVE,
    "lvm-volume": LVM_MOVE,
    "luks": "open the volume (cryptsetup open) and give the decrypted device as a disk image of its own",
    "zfs": "send the root dataset to a tree and make an ext4 disk of it (mkfs.ext4 -d <tree>)",
    "squashfs": "unpack it (unsquashfs) and make an ext4 disk of the tree (mkfs.ext4 -d <tree>)",
}
HYPERVISOR_KERNEL = {"firecracker": "boot/vmlinux", "cloudhypervisor": "boot/vmlinux.bin"}
IMAGE_NAMES = ("kernel", "modules", "rootfs")
# The initrd image is built only when the disk has an initrd for the kernel version.
ALL_IMAGES = IMAGE_NAMES + ("initrd",)
INITRD_ARCNAME = "boot/initrd.img"
# Where distributions install the initrd of a kernel version (Debian/Ubuntu, then Fedora/RHEL).
INITRD_PATHS = ("boot/initrd.img-%s", "boot/initramfs-%s.img")
# A volume's size: its files, a fifth more for the filesystem's own blocks and inodes, and 64 MiB of room.
VOLUME_OVERHEAD = 1.2
VOLUME_ROOM_MB = 64
SNIPPET_NOTE = (
    "no registry: the images are only tags in the OCI layout, which flintlock's containerd does not pull "
    "from, and a bare tag would be read as docker.io/library/<tag>; the image references are left out. "
    "Push with registry and repository (or copy each tag, for example skopeo copy oci:<dest>:<tag> "
    "docker://<registry>/<name>:<tag>) and fill them in."
)
DEFAULT_KEEP_LOCALES = ("C", "en", "en_US")

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
REF_NAME = "org.opencontainers.image.ref.name"
# cosign's signature and attestation images (v2): one layer per signature, the payload as the blob.
MEDIA_SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
MEDIA_DSSE = "application/vnd.dsse.envelope.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
PREDICATE_ANNOTATION = "predicateType"
COSIGN_CREATED = "0001-01-01T00:00:00Z"
SIGNATURE_SUFFIX = "sig"
ATTESTATION_SUFFIX = "att"

BANNER = re.compile(rb"Linux version (\S+) \(")
# Slim groups: what each removes, as roots inside the filesystem (resolved through its symlinks).
# Directories stay (packages expect them); every file, link and device under them goes.
SLIM_GROUPS = (
    ("apt", ("var/cache/apt", "var/lib/apt/lists")),
    ("docs", ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/doc-base")),
    ("locales", ("usr/share/locale",)),
    ("kernel", ("usr/src",)),
    ("firmware", ("lib/firmware",)),
    ("container_images", ("var/lib/containerd", "var/lib/docker")),
)
KERNEL_FILE_PATTERNS = (
    re.compile(r"^boot/(vmlinuz|vmlinux|initrd|initramfs|System\.map|config-|abi-)"),
    re.compile(r"^(vmlinuz|initrd\.img)(\.old)?$"),
)


# The xattrs of an entry or member that has none: one shared, read-only mapping.
NO_XATTRS = MappingProxyType({})


class Entry:
    """One inode as seen at one path: what a tar header needs, and nothing read from file data."""

    __slots__ = (
        "gid",
        "holes",
        "inum",
        "kind",
        "link",
        "mode",
        "mtime",
        "nlink",
        "path",
        "rdev",
        "size",
        "uid",
        "xattrs",
    )

    def __init__(
        self,
        path,
        kind,
        mode=0o644,
        uid=0,
        gid=0,
        mtime=0,
        size=0,
        link="",
        inum=0,
        nlink=1,
        xattrs=None,
        rdev=(0, 0),
    ):
        self.path = path
        self.kind = kind
        self.mode = mode
        self.uid = uid
        self.gid = gid
        self.mtime = mtime
        self.size = size
        self.link = link
        self.inum = inum
        self.nlink = nlink
        self.xattrs = xattrs or NO_XATTRS
        self.rdev = rdev
        self.holes = 0  # bytes of a file that are holes or unwritten extents (zeros never stored)

    def __repr__(self):
        return "<%s %s>" % (self.kind, self.path)


# Partitions ---------------------------------------------------------------------------------------


def check_entry_name(partition, base, name):
    """A directory entry's name is one path component: the kernel never stores ``/`` or NUL in a name, so a
    disk holding one was altered, and its tar entry (``../../x``) would land outside the image's root."""
    if "/" in name or "\x00" in name:
        raise Refusal(
            "partition %s" % partition,
            "directory /%s holds an entry named %r, which no filesystem the kernel writes holds (a name with "
            "'/' or NUL) and which would unpack outside the root" % (base, name),
            "check the disk (fsck -n) and build from one whose filesystem is intact",
        )


def check_directory_once(partition, path, inum, seen):
    """A directory reached twice (a hard-linked directory, which only an altered filesystem has) would be
    walked for ever; ``seen`` maps each directory inode walked to its path."""
    if inum in seen:
        raise Refusal(
            "partition %s" % partition,
            "directory /%s is directory /%s again (inode %d): a hard-linked directory, which loops"
            % (path, seen[inum], inum),
            "check the disk (fsck -n) and build from one whose filesystem is intact",
        )
    seen[inum] = path


def where(part):
    """A partition, or a logical volume and the partition of its physical volume, as messages name it."""
    if part.get("volume_of") is not None:
        return "logical volume %s on partition %s" % (part["name"], part["volume_of"])
    return "partition %s" % part["number"]


def describe(part):
    fs = part.get("filesystem") or "no known filesystem"
    if part.get("volume_of") is not None:
        return "%s (%d MiB, %s)" % (where(part), part["size"] // (1024 * 1024), fs)
    label = " %r" % part["name"] if part.get("name") else ""
    return "partition %s%s (type %s, %d MiB, %s)" % (
        part["number"],
        label,
        part["type"],
        part["size"] // (1024 * 1024),
        fs,
    )


def volume_partitions(part, group):
    """The logical volumes of the volume group on the LVM2 physical volume in ``part`` (``group``, as
    ``_lvm.volume_group`` reads it), as partitions of the disk.

    A visible logical volume of one linear segment on this physical volume is one run of its extents, so
    its filesystem is read at that run's offset like any partition's (named ``<vg>/<lv>``, which
    ``partition`` selects). Any other (thin, mirrored, RAID, striped, of several segments, on another
    physical volume) is listed with why it is not read (``why``); hidden volumes (a thin pool's data, a
    mirror's legs) are parts of other volumes and are left out.
    """
    extent = group["extent_bytes"]
    found = []
    for lv in group["lvs"]:
        if not lv["visible"]:
            continue
        name = "%s/%s" % (group["name"], lv["name"])
        entry = {
            "number": name,
            "name": name,
            "label": "",
            "volume_of": part["number"],
            "type": "lvm",
            "type_name": "LVM2 logical volume",
            "filesystem": None,
            "offset": part["offset"],
            "size": 0,
        }
        why = _volume_unread(lv["segments"], group)
        if why:
            entry.update(filesystem="lvm-volume", why=why)
        else:
            (segment,) = lv["segments"]
            first = segment["stripes"][0][1]
            entry["offset"] = part["offset"] + group["pe_start_bytes"] + first * extent
            entry["size"] = segment["extent_count"] * extent
        found.append(entry)
    return found


def _volume_unread(segments, group):
    """Why a logical volume of ``segments`` is not one run of this physical volume; None when it is."""
    if len(segments) != 1:
        return "of %d segments" % len(segments)
    segment = segments[0]
    if segment["type"] != "striped":  # LVM2 writes a linear volume as one stripe
        return "of type %s" % segment["type"]
    if len(segment["stripes"]) != 1:
        return "striped over %d physical volumes" % len(segment["stripes"])
    if segment["stripes"][0][0] != group["pv"]:
        return "on physical volume %s, not this partition's" % segment["stripes"][0][0]
    return None


def reads(part):
    """True when ``part`` holds a filesystem this module reads (``READ_FILESYSTEMS``)."""
    return part.get("filesystem") in READ_FILESYSTEMS


def reader_of(part):
    """The adapter that reads ``part``'s filesystem (``READ_FILESYSTEMS``)."""
    return READ_FILESYSTEMS[part["filesystem"]]


def holds(part):
    """What ``part`` holds, as a refusal says it (``holds ...`` or, of a logical volume, ``is ...``)."""
    if part.get("volume_of") is not None and part.get("why"):
        return "is a logical volume %s, which is not read" % part["why"]
    if part.get("why"):
        return "holds an LVM2 physical volume whose metadata cannot be read (%s)" % part["why"]
    return "holds %s" % FILESYSTEM_NAMES.get(part.get("filesystem"), "no filesystem this module recognises")


def _unread(partitions):
    """``(sentences, moves)``: each partition holding a recognised filesystem this module does not read,
    and what to do about each kind."""
    found = [p for p in partitions if p.get("filesystem") and not reads(p)]
    sentences = ["%s %s" % (where(p), holds(p)) for p in found]
    kinds = sorted(set(p["filesystem"] for p in found if p["filesystem"] in UNREAD_MOVES))
    return sentences, [UNREAD_MOVES[k] for k in kinds]


def check_source(src, is_directory):
    """``src`` is a disk image file; a directory (an unpacked tree, a mount point) is named as one."""
    if is_directory:
        raise Refusal(
            "src %s" % src,
            "is a directory, not a disk image",
            "pass the raw or qcow2 disk image file (a root tree is not read; make a disk from it first)",
        )


# What the disk and filesystem readers raise when an image's own structures are inconsistent: a
# qcow2 header whose tables lie past the end, a GPT entry or an extent pointing outside the disk.
MALFORMED_ERRORS = (OSError, EOFError, ValueError, struct.error, IndexError, KeyError, OverflowError)


def malformed_image(src, image_format, exc):
    """The refusal for an image a reader could not make sense of (``exc`` is what the reader raised)."""
    return Refusal(
        "src %s" % src,
        "is a malformed %s image: reading it failed (%s: %s)"
        % (image_format or "disk", type(exc).__name__, exc or "no detail"),
        "check it with qemu-img check (and qemu-img info); rebuild or download the image again, or "
        "convert it with qemu-img convert -O raw and build from the copy",
    )


def check_no_backing_file(src, backing_file_offset):
    """A qcow2 overlay is refused: the images and the source digest their provenance records are made from
    ``src``'s own bytes, and a backing file outside them could change the images without changing that
    digest."""
    if backing_file_offset:
        raise Refusal(
            "qcow2 %s" % src,
            "has a backing file, whose bytes the recorded source digest would not cover",
            "flatten it first (qemu-img convert -O qcow2 %s flat.qcow2) and build from the copy" % src,
        )


def check_within(src, partitions, virtual_size):
    """Every partition lies inside the image: one that ends after the image's last byte means the image
    was cut short (an interrupted download or copy), and its filesystem would read as damaged."""
    for part in partitions:
        end = part["offset"] + part["size"]
        if end > virtual_size:
            raise Refusal(
                "%s %s" % (src, describe(part)),
                "the image ends at byte %d, before the partition (bytes %d to %d)"
                % (virtual_size, part["offset"], end),
                "the image is truncated: copy or download it again and compare its size",
            )


def _root_rank(part):
    """2 for a discoverable-root GPT type, 1 for a generic Linux filesystem type, 0 otherwise."""
    kind = part["type"]
    if kind in ROOT_GPT:
        return 2
    if kind in (LINUX_FILESYSTEM_GPT, LINUX_MBR, "none", "lvm"):
        return 1
    return 0


def root_candidates(partitions):
    """The partitions ``choose_partition`` chooses the root among when no ``partition`` is given."""
    return [p for p in partitions if reads(p) and _root_rank(p)]


def selected(src, partitions, selector, option):
    """The partition the option ``option`` names by ``selector``, its number or its label (GPT partition
    name or filesystem label); a label two partitions carry is refused, never taken as the first."""
    listing = "; ".join(describe(p) for p in partitions) or "none"
    text = str(selector)
    if text.isdigit():
        found = [p for p in partitions if p["number"] == int(text)]
    else:
        found = [p for p in partitions if text in (p.get("name"), p.get("label"))]
    if not found:
        raise Refusal(
            "%s" % src,
            "no partition numbered or labelled %r (partitions: %s)" % (text, listing),
            "set %s to one of these numbers or labels" % option,
        )
    if len(found) > 1:
        raise Refusal(
            "%s" % src,
            "%s %r names more than one partition: %s" % (option, text, "; ".join(describe(p) for p in found)),
            "set %s to the partition's number" % option,
        )
    return found[0]


def choose_partition(src, partitions, selector=None, rootlike=()):
    """The partition that holds the root filesystem.

    ``selector`` is a partition number (int or digits) or a label (GPT partition name or ext4 volume
    label). Without it, the Linux-typed partitions holding a filesystem this module reads are
    candidates: a discoverable-root type wins over the generic Linux type, then one whose number is in
    ``rootlike`` (its filesystem has /etc/fstab or /sbin/init: a separate /usr volume is larger than the
    root it belongs to), then the largest; a tie is refused. A refusal names what the partitions hold
    that is recognised but not read.
    """
    listing = "; ".join(describe(p) for p in partitions) or "none"
    if not partitions:
        raise Refusal(
            "%s" % src, "holds no partition table and no filesystem", "pass a raw or qcow2 disk image"
        )
    if selector not in (None, ""):
        part = selected(src, partitions, selector, "partition")
        if not reads(part):
            raise Refusal(
                "%s %s" % (src, describe(part)),
                "%s; microvm_image reads %s roots" % (holds(part), READ_NAMES),
                UNREAD_MOVES.get(
                    part.get("filesystem"), "choose the partition that holds the root filesystem"
                ),
            )
        return part
    candidates = root_candidates(partitions)
    if not candidates:
        sentences, moves = _unread(partitions)
        raise Refusal(
            "%s" % src,
            "no Linux partition holds a filesystem microvm_image reads (%s)%s (partitions: %s)"
            % (READ_NAMES, "".join("; " + s for s in sentences), listing),
            "; ".join(
                ["pass the image's root partition with partition (its number or label) when it holds one"]
                + moves
            ),
        )
    return _best(
        src,
        candidates,
        lambda p: (_root_rank(p), p["number"] in rootlike),
        max,
        "Linux partition could be the root",
        "set partition to the root's number or label",
    )


# Mount points the image needs at boot, before anything mounts them: the rootfs image must hold them.
BOOT_MOUNTS = ("/usr", "/bin", "/sbin", "/etc", "/var")
BOOT_MOUNT_PREFIXES = ("/usr/", "/lib")
# Filesystems fstab mounts that are not on a disk (nothing of the image is missing from the rootfs).
VIRTUAL_FILESYSTEMS = ("tmpfs", "proc", "sysfs", "devpts", "devtmpfs", "nfs", "nfs4", "cifs", "swap", "none")


def boot_mounts(fstab):
    """``[(line, mount point)]`` of the fstab lines (its text) that mount a filesystem from a disk where
    the image needs files at boot (``BOOT_MOUNTS``, ``/usr/*``, ``/lib*``)."""
    found = []
    for line in fstab.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) < 3:
            continue
        where = norm(fields[1].replace("\\040", " ")).rstrip("/")
        where = "/" + where.lstrip("/")
        options = fields[3].split(",") if len(fields) > 3 else []
        if fields[2] in VIRTUAL_FILESYSTEMS or "bind" in options:
            continue
        if where in BOOT_MOUNTS or where.startswith(BOOT_MOUNT_PREFIXES):
            found.append((line.strip(), where))
    return found


def check_root_mounts(src, part, fstab):
    """A root whose /etc/fstab mounts another filesystem at a mount point the image needs at boot (a
    separate /usr volume) would ship that mount point empty: refused naming the line, the root read, and
    the moves."""
    found = boot_mounts(fstab or "")
    if found:
        raise Refusal(
            "%s %s" % (src, describe(part)),
            "is the root read, and its /etc/fstab mounts another filesystem where the image needs files at "
            "boot (%s); the rootfs image would hold that mount point empty"
            % "; ".join("%s: %r" % (where, line) for line, where in found),
            "merge that filesystem into the root (for example copy /usr into the root volume and drop the "
            "fstab line) and build from that disk, or set partition to the volume that holds the whole root",
        )


def root_choice_note(partitions, part, selector=None):
    """What the result says when the root was chosen among several candidates (no ``partition`` given):
    which was read and why, and the others, so a larger data volume taken for the root is seen; None when
    there was no choice to make."""
    if selector not in (None, ""):
        return None
    others = [p for p in partitions if p is not part and reads(p) and _root_rank(p)]
    if not others:
        return None
    return (
        "%s was read as the root filesystem: of the Linux partitions it could be on, the one of the most "
        "specific type, then the largest (also candidates: %s); set partition to read another"
        % (describe(part), "; ".join(describe(p) for p in others))
    )


def _best(src, candidates, rank, size_pick, what, hint):
    """The one candidate of the highest ``rank`` and then the size ``size_pick`` (max or min) picks; a
    tie is refused."""
    best_rank = max(rank(p) for p in candidates)
    candidates = [p for p in candidates if rank(p) == best_rank]
    size = size_pick(p["size"] for p in candidates)
    top = [p for p in candidates if p["size"] == size]
    if len(top) > 1:
        raise Refusal("%s" % src, "more than one %s: %s" % (what, "; ".join(describe(p) for p in top)), hint)
    return top[0]


def _boot_rank(part):
    """3 for the XBOOTLDR type, 2 for a partition named or labelled ``boot``, 1 for another Linux type."""
    if part["type"] == XBOOTLDR_GPT:
        return 3
    if "boot" in (part.get("name"), part.get("label")):
        return 2
    return 1 if _root_rank(part) else 0


def needs_boot_partition(tree, kernel_path=None):
    """True when the kernel is looked for in a separate /boot partition: no O(kernel_path) was given
    and the root filesystem's ``boot/`` holds no kernel (a mount point)."""
    if kernel_path:
        return False
    return not any(n.startswith(("vmlinuz", "vmlinux")) for n in boot_kernels(tree))


def choose_boot_partition(src, partitions, root, selector=None):
    """The separate /boot partition of a disk whose root holds no kernel: the one ``selector`` names (the
    boot_partition option: a number or label), else chosen the way the root is: the partitions other than
    ``root`` holding a filesystem this module reads, the XBOOTLDR type first, then one named or labelled
    ``boot``, then the other Linux types, the smallest of them; a tie is refused."""
    if selector not in (None, ""):
        part = selected(src, partitions, selector, "boot_partition")
        if part["number"] == root["number"] or not reads(part):
            raise Refusal(
                "%s %s" % (src, describe(part)),
                "boot_partition names %s; microvm_image reads a /boot of %s on a partition other than "
                "the root"
                % ("the root partition" if part["number"] == root["number"] else holds(part), READ_NAMES),
                "set boot_partition to the partition that holds /boot, or kernel_path to the kernel in the "
                "root",
            )
        return part
    candidates = [p for p in partitions if reads(p) and p["number"] != root["number"] and _boot_rank(p)]
    if not candidates:
        raise Refusal(
            "%s %s" % (src, describe(root)),
            "holds no kernel in /boot and no other partition holds a filesystem microvm_image reads (%s) "
            "(partitions: %s)" % (READ_NAMES, "; ".join(describe(p) for p in partitions)),
            "set kernel_path to the kernel inside the root filesystem",
        )
    return _best(
        src,
        candidates,
        _boot_rank,
        min,
        "partition could be /boot",
        "set boot_partition to the number of the partition that holds /boot",
    )


def mounted(tree, mount_point, device):
    """``tree`` (a filesystem's entries) as seen mounted at ``mount_point`` of the root: paths under it,
    inode numbers as ``(device, inum)`` so that they stay apart from the root filesystem's."""
    found = {mount_point: Entry(mount_point, "dir", mode=0o755, inum=(device, 2))}
    for path, entry in tree.items():
        moved = _renamed(entry, mount_point + "/" + path)
        moved.inum = (device, entry.inum)
        found[moved.path] = moved
    return found


# Paths --------------------------------------------------------------------------------------------


def norm(path):
    """``/a/./b/../c/`` -> ``a/c`` (paths in the tree are relative to the filesystem root)."""
    parts = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    return "/".join(parts)


def resolve(tree, path, follow_last=True, max_hops=40):
    """The real path of ``path`` inside the filesystem, following its symlinks (never out of the root).

    Returns None when a component does not exist, or when more than ``max_hops`` links are followed (a
    loop, as the kernel's ELOOP: ``unresolved`` says which). A symlink's absolute target is taken relative
    to the filesystem root, as the guest would see it.
    """
    return _walk(tree, path, follow_last, max_hops)[0]


def unresolved(tree, path):
    """Why ``path`` (a symlink) leads nowhere, in words: a loop, or the target the filesystem lacks."""
    link = tree.get(resolve(tree, path, follow_last=False) or "")
    if _walk(tree, path, True, 40)[1] == "loop":
        return "a symlink loop (more than 40 links followed from /%s)" % path
    target = link.link if link is not None and link.kind == "symlink" else path
    return "a symlink to %s, which the filesystem does not have" % target


def _walk(tree, path, follow_last, max_hops):
    """``(real path, None)``, or ``(None, "missing" | "loop")``: ``resolve`` and why it found nothing."""
    pending = [p for p in path.split("/") if p not in ("", ".")]
    done = []
    hops = 0
    while pending:
        name = pending.pop(0)
        if name == "..":
            if done:
                done.pop()
            continue
        if name in ("", "."):
            continue
        candidate = "/".join(done + [name])
        entry = tree.get(candidate)
        if entry is None:
            return None, "missing"
        if entry.kind == "symlink" and (pending or follow_last):
            hops += 1
            if hops > max_hops:
                return None, "loop"
            target = entry.link
            if target.startswith("/"):
                done = []
            pending = [p for p in target.split("/") if p] + pending
            continue
        done.append(name)
    return "/".join(done), None


def children(tree, path):
    prefix = path + "/" if path else ""
    depth = prefix.count("/")
    return sorted(p for p in tree if p.startswith(prefix) and p.count("/") == depth and p != path)


def under(path, root):
    return path == root or path.startswith(root + "/")


# Kernel and modules -------------------------------------------------------------------------------


def kernel_path_for(hypervisor, kernel_path=None):
    if kernel_path:
        return norm(kernel_path)
    return HYPERVISOR_KERNEL[hypervisor]


def stock_kernel(version):
    """Where a distribution installs the kernel of ``version``: a compressed bzImage (or an arm64 Image)."""
    return "boot/vmlinuz-%s" % version


def locate_initrd(tree, version):
    """The real path of the initrd of ``version`` (a regular file), or None when the disk has none.

    Never chosen or dropped silently: a candidate that is there but is no regular file (a link to nothing,
    a directory) is refused, and so are two different initrds of the version (Debian's and Fedora's names),
    since the micro-VM would boot one the image's owner did not pick.
    """
    found = []
    for pattern in INITRD_PATHS:
        path = pattern % version
        entry = tree.get(resolve(tree, path, follow_last=False) or "")
        if entry is None:
            continue
        real = resolve(tree, path)
        if real is None or tree[real].kind != "file":
            raise Refusal(
                "initrd /%s" % path,
                "is %s, not a regular file, so the kernel %s would boot without the initrd the image names"
                % (
                    unresolved(tree, path) if real is None else "a %s" % tree[real].kind,
                    version,
                ),
                "fix or remove /%s in the image" % path,
            )
        if real not in found:
            found.append(real)
    if len(found) > 1:
        raise Refusal(
            "kernel %s" % version,
            "has two initrds, /%s and /%s, and a micro-VM boots one" % (found[0], found[1]),
            "remove the one the kernel does not boot from the image",
        )
    return found[0] if found else None


def locate_kernel(tree, kernel_path, hypervisor, version=None):
    """The real path of the kernel file, refused when it is missing or not a regular file.

    Without ``kernel_path``, the hypervisor's vmlinux path is taken when the filesystem has it, else
    the distribution's ``/boot/vmlinuz-<version>`` (extracted from its bzImage when it is one).
    """
    wanted = kernel_path_for(hypervisor, kernel_path)
    real = resolve(tree, wanted)
    entry = tree.get(real) if real else None
    nor = ""
    if (entry is None or entry.kind != "file") and not kernel_path and version:
        real = resolve(tree, stock_kernel(version))
        entry = tree.get(real) if real else None
        nor = ", nor is /%s" % stock_kernel(version)
    if entry is None or entry.kind != "file":
        link = tree.get(resolve(tree, wanted, follow_last=False) or "")
        if link is not None and link.kind == "symlink" and resolve(tree, wanted) is None:
            raise Refusal(
                "kernel /%s" % wanted,
                "is %s%s" % (unresolved(tree, wanted), nor),
                "set kernel_path to the kernel file itself, or fix the link in the image",
            )
        raise Refusal(
            "kernel /%s" % wanted,
            "is not a file in the root filesystem%s (boot/ holds: %s)"
            % (nor, ", ".join(boot_kernels(tree)) or "no kernel"),
            "set kernel_path to the kernel, a vmlinux or a bzImage (%s wants /%s)"
            % (hypervisor, HYPERVISOR_KERNEL[hypervisor]),
        )
    return real


def boot_kernels(tree):
    """The kernel-like file names in the filesystem's ``boot/`` (configs left out)."""
    boot = resolve(tree, "boot")
    present = [posixpath.basename(p) for p in children(tree, boot)] if boot else []
    return [n for n in present if KERNEL_FILE_PATTERNS[0].match("boot/" + n) and not n.startswith("config-")]


def with_data(entries, name, size, inum):
    """``entries`` with the member ``name`` carrying other data (``size`` bytes read through ``inum``):
    the kernel image ships the vmlinux extracted from the bzImage the filesystem holds."""
    found = []
    for entry in entries:
        if entry.path == name:
            entry = _renamed(entry, name)
            entry.size = size
            entry.inum = inum
            entry.nlink = 1
        found.append(entry)
    return found


# The compressed payloads an x86 bzImage may carry, by the bytes that start each stream, in the order
# the kernel's scripts/extract-vmlinux tries them. Each is a candidate: the first that decompresses to
# an ELF is the kernel.
PAYLOAD_MAGIC = (
    ("gzip", b"\x1f\x8b\x08"),
    ("xz", b"\xfd7zXZ\x00"),
    ("bzip2", b"BZh"),
    ("lzma", b"\x5d\x00\x00\x00"),
    ("lz4", b"\x02\x21\x4c\x18"),
    ("zstd", b"\x28\xb5\x2f\xfd"),
)
# ELF e_machine of each architecture the module checks (OCI names and kernel names).
ELF_MACHINE = {"amd64": 62, "x86_64": 62, "arm64": 183, "aarch64": 183}
ELF_MACHINE_NAMES = {62: "x86_64", 183: "aarch64", 3: "i386", 40: "arm", 243: "riscv", 21: "ppc64"}
ARM64_IMAGE_MAGIC = b"ARMd"
# A decompressed kernel larger than this is not a kernel: the extraction stops there with a refusal.
MAX_VMLINUX = 1024 * 1024 * 1024
# A compressed kernel is read whole to find its payload; a file larger than this is not one.
MAX_COMPRESSED_KERNEL = 256 * 1024 * 1024


def kernel_kind(head):
    """``elf``, ``bzimage`` (x86 boot protocol header), ``arm64-image`` (the ARM64 magic at 56),
    ``compressed`` (a whole file in one of the payload formats: Debian's arm64 vmlinuz is a gzipped
    Image) or None."""
    if head[:4] == b"\x7fELF":
        return "elf"
    if head[0x202:0x206] == b"HdrS":
        return "bzimage"
    if head[56:60] == ARM64_IMAGE_MAGIC:
        return "arm64-image"
    if any(head.startswith(entry[1]) for entry in PAYLOAD_MAGIC):
        return "compressed"
    return None


def needs_extraction(kind):
    """A kernel of this kind is decompressed before it ships: the hypervisors boot it uncompressed."""
    return kind in ("bzimage", "compressed")


def bootable(data):
    """Decompressed ``data`` is a kernel the hypervisors boot: an ELF vmlinux or an arm64 Image."""
    return kernel_kind(data[:64]) in ("elf", "arm64-image")


def payload_offsets(data):
    """``(format, offset)`` of every place in a bzImage where a compressed stream may start, format by
    format in extract-vmlinux's order, each format's offsets ascending."""
    for name, magic in PAYLOAD_MAGIC:
        start = data.find(magic)
        while start >= 0:
            yield name, start
            start = data.find(magic, start + 1)


def elf_machine(head):
    """The ELF ``e_machine`` of ``head`` (None when it is not an ELF), in the header's byte order."""
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    order = "little" if head[5] == 1 else "big"
    return int.from_bytes(head[18:20], order)


def check_kernel_format(path, head, hypervisor, architecture="amd64"):
    """Firecracker and Cloud Hypervisor boot an uncompressed ELF vmlinux (x86_64) or an arm64 ``Image``.

    ``head`` is the first bytes of the kernel as shipped (after a bzImage was extracted). Returns its
    kind. An ELF whose machine is not the requested architecture is refused, as is an arm64 ``Image``
    for another architecture; architectures without an ELF machine here are not checked.
    """
    kind = kernel_kind(head)
    wanted = ELF_MACHINE.get(architecture)
    if kind == "elf":
        machine = elf_machine(head)
        if wanted is not None and machine != wanted:
            raise Refusal(
                "kernel /%s" % path,
                "is an ELF for %s, not for architecture %s"
                % (ELF_MACHINE_NAMES.get(machine, "machine %s" % machine), architecture),
                "set architecture to the kernel's, or take the kernel built for %s" % architecture,
            )
        return kind
    if kind == "arm64-image":
        if wanted is not None and wanted != ELF_MACHINE["arm64"]:
            raise Refusal(
                "kernel /%s" % path,
                "is an arm64 Image, not a kernel for architecture %s" % architecture,
                "set architecture to arm64, or take the kernel built for %s" % architecture,
            )
        return kind
    what = "a compressed bzImage" if kind == "bzimage" else "not an ELF kernel"
    raise Refusal(
        "kernel /%s" % path,
        "is %s; %s boots an uncompressed ELF vmlinux" % (what, hypervisor),
        "set kernel_path to the vmlinux or to a bzImage whose payload this module extracts",
    )


def refuse_truncated_payload(path, name, size):
    """A compressed kernel whose payload starts as a kernel and ends before its stream does."""
    raise Refusal(
        "kernel /%s" % path,
        "its %s payload decompresses to a kernel that ends after %d bytes, before the stream's end marker: "
        "the file is truncated or damaged, and a cut kernel does not boot" % (name, size),
        "install the kernel package in the image again (or copy the file whole) and rebuild",
    )


def refuse_payload(path, tried, unsupported, kind="bzimage"):
    """A compressed kernel none of whose payload candidates decompressed to a bootable kernel."""
    detail = "no payload decompressed to an ELF kernel or an arm64 Image"
    if tried:
        detail += " (tried: %s)" % ", ".join(tried)
    if unsupported:
        detail += "; %s payloads are not read here" % ", ".join(sorted(set(unsupported)))
    raise Refusal(
        "kernel /%s" % path,
        "is %s: %s" % ("a compressed bzImage" if kind == "bzimage" else "compressed", detail),
        "extract it with the kernel's scripts/extract-vmlinux into the image and set kernel_path to it",
    )


# The disk's architecture: the machine of the programs every root runs first, and of its modules.
ARCH_PROBES = ("usr/bin/env", "bin/sh", "sbin/init", "usr/lib/systemd/systemd", "bin/busybox")
OCI_ARCHITECTURE = {62: "amd64", 183: "arm64", 3: "386", 40: "arm", 243: "riscv64", 21: "ppc64le"}
# The ELF class (EI_CLASS) of each architecture: 1 for 32-bit, 2 for 64-bit.
ELF_CLASS = {"amd64": 2, "x86_64": 2, "arm64": 2, "aarch64": 2}
ELF_CLASS_NAMES = {1: "32-bit", 2: "64-bit"}
# How many wrong modules a refusal lists by name.
LISTED = 5


def architecture_probes(tree):
    """Real paths of the root's first programs (at most three, each once) to read the ELF machine of."""
    found = []
    for path in ARCH_PROBES:
        real = resolve(tree, path)
        if real and tree[real].kind == "file" and real not in found:
            found.append(real)
    return found[:3]


def module_probes(tree, modules_root, version):
    """Every kernel module (``.ko``, compressed or not) of ``version``, by path: each is checked, as one
    module of another architecture among thousands is enough to break the guest's modprobe."""
    prefix = "%s/%s/" % (modules_root, version)
    return sorted(
        path
        for path, entry in tree.items()
        if path.startswith(prefix) and entry.kind == "file" and ".ko" in posixpath.basename(path)
    )


# Compressed kernel modules by suffix: what kmod reads (``.ko.xz``, ``.ko.zst``, ``.ko.gz``).
MODULE_COMPRESSION = {".xz": "xz", ".zst": "zstd", ".gz": "gzip"}


def module_compression(path):
    """The payload format of a compressed module at ``path``, or None for a plain file."""
    return MODULE_COMPRESSION.get(posixpath.splitext(path)[1])


def machine_name(machine):
    return ELF_MACHINE_NAMES.get(machine, "machine %s" % machine)


def disk_architecture(src, programs, requested=None):
    """The OCI architecture of the disk ``src`` from ``programs`` (``[(path, e_machine or None)]``).

    Programs of two machines are a mixed root and refused; a requested architecture the programs
    contradict is refused; a root with no ELF among them needs ``architecture`` set. Returns
    ``(architecture, read_from)``: ``read_from`` is the program it was read from, or None when taken as set.
    """
    machines = dict((path, machine) for path, machine in programs if machine is not None)
    if len(set(machines.values())) > 1:
        raise Refusal(
            "disk %s" % src,
            "holds programs of more than one architecture: %s"
            % ", ".join("/%s is %s" % (path, machine_name(m)) for path, m in sorted(machines.items())),
            "build from a disk whose root is of one architecture",
        )
    if not machines:
        if requested:
            return requested, None
        raise Refusal(
            "disk %s" % src,
            "its architecture could not be read: none of /%s is an ELF program" % ", /".join(ARCH_PROBES),
            "set architecture (amd64 or arm64) to the disk's",
        )
    path, machine = sorted(machines.items())[0]
    found = OCI_ARCHITECTURE.get(machine)
    if found is None:
        raise Refusal(
            "disk %s" % src,
            "its programs are %s (/%s), an architecture flintlock does not run"
            % (machine_name(machine), path),
            "build from an amd64 or arm64 disk",
        )
    if requested and requested != found and ELF_MACHINE.get(requested) != machine:
        raise Refusal(
            "disk %s" % src,
            "is a disk for %s (/%s is %s), not for architecture %s"
            % (found, path, machine_name(machine), requested),
            "leave architecture unset to take the disk's, or build from a disk made for %s" % requested,
        )
    return found, "/" + path


def check_modules_architecture(version, modules, architecture):
    """Every kernel module (``[(path, first bytes of its ELF as loaded)]``) must be of the root's
    ``architecture``: its ELF machine and its class (an i386 module is a 32-bit ELF of another machine,
    an arm module a 32-bit one; both are refused for a 64-bit kernel). A module whose header is not an
    ELF (or whose compression this host does not read) is not judged here."""
    wanted = ELF_MACHINE.get(architecture)
    bits = ELF_CLASS.get(architecture)
    wrong = []
    for path, head in modules:
        machine = elf_machine(head)
        if machine is None or wanted is None:
            continue
        if machine != wanted or (bits is not None and head[4] != bits):
            wrong.append(
                "/%s is %s (%s)"
                % (path, machine_name(machine), ELF_CLASS_NAMES.get(head[4], "class %d" % head[4]))
            )
    if wrong:
        more = " and %d more" % (len(wrong) - LISTED) if len(wrong) > LISTED else ""
        raise Refusal(
            "kernel modules %s" % version,
            "are not for architecture %s: %s%s" % (architecture, ", ".join(wrong[:LISTED]), more),
            "take the modules built with the kernel for %s" % architecture,
        )


class BannerScan:
    """The banner's release found in a stream fed piece by piece (a banner cut between pieces is
    found: the tail of the previous piece is kept)."""

    KEEP = 256

    def __init__(self):
        self.version = None
        self.tail = b""

    def feed(self, piece):
        if self.version is None:
            self.version = banner_version(self.tail + bytes(piece))
            self.tail = bytes(piece[-self.KEEP :])
        return self.version


def check_vmlinux_size(path, name, size, limit=MAX_VMLINUX):
    """A payload that decompresses past ``limit`` is refused rather than cut: no kernel is that large,
    and a cut kernel would not boot."""
    if size > limit:
        raise Refusal(
            "kernel /%s" % path,
            "its %s payload decompresses to more than %d MiB, larger than any kernel"
            % (name, limit // (1024 * 1024)),
            "check that kernel_path names the kernel; extract the vmlinux with the kernel's "
            "scripts/extract-vmlinux and set kernel_path to it",
        )


def check_compressed_kernel_size(path, size, limit=MAX_COMPRESSED_KERNEL):
    """A compressed kernel is read whole to find its payload: one larger than ``limit`` is refused."""
    if size > limit:
        raise Refusal(
            "kernel /%s" % path,
            "is a compressed file of %d bytes, larger than any compressed kernel (%d MiB)"
            % (size, limit // (1024 * 1024)),
            "set kernel_path to the kernel (a vmlinux, a bzImage or an arm64 Image)",
        )


def check_linux_kernel(path, kind, banner):
    """The kernel is a Linux kernel, not any ELF or Image: its read-only data carries the
    ``Linux version <release> (`` banner every Linux build has (``kind`` as ``kernel_kind`` says)."""
    if banner is None:
        what = {"elf": "an ELF", "arm64-image": "an arm64 Image"}.get(kind, "a decompressed kernel")
        raise Refusal(
            "kernel /%s" % path,
            "is %s without the 'Linux version ' banner every Linux kernel carries: not a Linux kernel" % what,
            "set kernel_path to the Linux kernel (a vmlinux, a bzImage or an arm64 Image)",
        )


def check_kernel_path(kernel_path):
    """The rule for ``kernel_path``: a path inside the root filesystem without ``..``. The path is also
    the kernel's name in the kernel image, and ``..`` would name a file the written path does not say
    (``/boot/../etc/x`` is ``/etc/x``). A path outside ``/boot`` (Fedora's
    ``/lib/modules/<version>/vmlinuz``) is taken when it is a regular file in the root, which
    ``locate_kernel`` checks, and when it is a Linux kernel, which ``check_linux_kernel`` checks."""
    if kernel_path and ".." in kernel_path.split("/"):
        raise Refusal(
            "kernel_path %s" % kernel_path,
            "has a '..' component; the path is the kernel's name in the image and must say where it is",
            "write the path without '..' (for example /boot/vmlinuz-<version>)",
        )


def banner_version(data):
    """The release in the kernel's ``Linux version X (...)`` banner, or None."""
    found = BANNER.search(data)
    return found.group(1).decode("ascii", "replace") if found else None


def module_versions(tree):
    """``(real path of lib/modules, [versions])``: the directories under it."""
    root = resolve(tree, "lib/modules")
    if root is None or tree[root].kind != "dir":
        return None, []
    return root, [posixpath.basename(p) for p in children(tree, root) if tree[p].kind == "dir"]


def config_versions(tree):
    boot = resolve(tree, "boot")
    if not boot:
        return {}
    found = {}
    for path in children(tree, boot):
        name = posixpath.basename(path)
        if name.startswith("config-") and tree[path].kind == "file":
            found[name[len("config-") :]] = path
    return found


def choose_version(modules, configs, kernel_version=None, banner=None, kernel_path="boot/vmlinux"):
    """The one kernel version the kernel and modules images ship; every disagreement is refused."""
    if not modules:
        raise Refusal(
            "root filesystem",
            "has no /lib/modules/<version> directory",
            "install the kernel's modules into the image (the modules image ships them)",
        )
    if kernel_version:
        if kernel_version not in modules:
            raise Refusal(
                "kernel_version %s" % kernel_version,
                "has no /lib/modules/%s (the image holds: %s)" % (kernel_version, ", ".join(sorted(modules))),
                "set kernel_version to one of these",
            )
        version = kernel_version
    elif len(modules) > 1:
        raise Refusal(
            "/lib/modules",
            "holds more than one kernel version: %s" % ", ".join(sorted(modules)),
            "set kernel_version to the one the kernel image ships",
        )
    else:
        version = modules[0]
    if banner and banner != version:
        raise Refusal(
            "kernel /%s" % kernel_path,
            "is version %s but the modules are /lib/modules/%s" % (banner, version),
            "ship the modules built with this kernel, or set kernel_path/kernel_version so both match",
        )
    if configs and version not in configs:
        raise Refusal(
            "kernel config /boot/config-%s" % ", /boot/config-".join(sorted(configs)),
            "is for version %s but the modules are /lib/modules/%s" % (", ".join(sorted(configs)), version),
            "ship the config and modules of the same kernel, or set kernel_version",
        )
    return version


# What each image holds ----------------------------------------------------------------------------


def _dir(path, mtime=0):
    return Entry(path, "dir", mode=0o755, mtime=mtime)


def _parents(arcname, mtime=0):
    parts = arcname.split("/")[:-1]
    return [_dir("/".join(parts[: i + 1]), mtime) for i in range(len(parts))]


def _locale_kept(name, keep):
    lang = re.split(r"[_.@]", name, maxsplit=1)[0]
    return name in keep or lang in keep


def slim_roots(tree, groups, keep_locales=DEFAULT_KEEP_LOCALES):
    """``{group: [real roots]}`` for the chosen groups (roots that do not exist are left out)."""
    wanted = dict(SLIM_GROUPS)
    roots = {}
    for group in groups:
        if group not in wanted:
            raise Refusal(
                "slim group %r" % group,
                "is not a slim group",
                "choose from: %s" % ", ".join(group[0] for group in SLIM_GROUPS),
            )
        found = []
        for root in wanted[group]:
            real = resolve(tree, root)
            if not real or tree[real].kind != "dir":
                continue
            if group == "locales":
                found.extend(
                    p
                    for p in children(tree, real)
                    if tree[p].kind == "dir" and not _locale_kept(posixpath.basename(p), keep_locales)
                )
            else:
                found.append(real)
        roots[group] = sorted(set(found))
    return roots


def _kernel_group_file(path):
    return any(p.match(path) for p in KERNEL_FILE_PATTERNS)


def split(
    tree,
    version,
    kernel_real,
    kernel_arcname,
    config_real=None,
    slim_groups=(),
    keep_locales=DEFAULT_KEEP_LOCALES,
    kernel_tree=None,
    initrd_real=None,
):
    """What each image holds: ``{"kernel": [...], "modules": [...], "rootfs": [...]}`` of Entries whose
    ``path`` is the name inside the image, plus ``removed`` (bytes per slim group) and ``dropped``
    (what the rootfs leaves out because it ships separately). ``kernel_tree`` holds the kernel and its
    config when they are not in ``tree`` (a separate /boot partition seen mounted). With ``initrd_real``
    an ``initrd`` image holds it as ``INITRD_ARCNAME`` and the rootfs leaves it out.
    """
    kernel_tree = tree if kernel_tree is None else kernel_tree
    modules_root = module_versions(tree)[0]
    version_dir = modules_root + "/" + version
    kernel = _parents(kernel_arcname)
    kernel.append(_renamed(kernel_tree[kernel_real], kernel_arcname))
    if config_real:
        name = (
            posixpath.dirname(kernel_arcname) + "/config-" + version
            if "/" in kernel_arcname
            else "config-" + version
        )
        kernel.append(_renamed(kernel_tree[config_real], name))
    kernel = _unique_dirs(kernel)
    initrd = None
    if initrd_real:
        initrd = _parents(INITRD_ARCNAME) + [_renamed(kernel_tree[initrd_real], INITRD_ARCNAME)]

    modules = []
    rootfs = []
    roots = slim_roots(tree, slim_groups, keep_locales) if slim_groups else {}
    removed_entries = {group: [] for group in roots}
    if "kernel" in roots:
        removed_entries.setdefault("kernel", [])
    dropped = {"kernel": 0, "modules": 0}
    for path in sorted(tree):
        entry = tree[path]
        if under(path, version_dir) and path != version_dir:
            modules.append(_renamed(entry, path[len(version_dir) + 1 :]))
            dropped["modules"] += entry.size if entry.kind == "file" else 0
            continue
        if under(path, modules_root) and path not in (modules_root, version_dir):
            # Other versions' modules: not in this kernel's images and not in the root filesystem.
            dropped["modules"] += entry.size if entry.kind == "file" else 0
            continue
        if path in (kernel_real, config_real, initrd_real):
            dropped["kernel"] += entry.size
            continue
        group = _slim_group(path, entry, roots)
        if group:
            removed_entries[group].append(entry)
            continue
        rootfs.append(entry)
    kept = {e.inum for e in rootfs if e.kind == "file"}
    removed = {}
    for group, entries in sorted(removed_entries.items()):
        seen = set()
        total = 0
        for entry in entries:
            if entry.kind == "file" and entry.inum not in kept and entry.inum not in seen:
                seen.add(entry.inum)
                total += entry.size
        removed[group] = total
    found = {"kernel": kernel, "modules": modules, "rootfs": rootfs, "removed": removed, "dropped": dropped}
    if initrd is not None:
        found["initrd"] = initrd
    return found


def images_of(parts):
    """The images one run builds, in order: kernel, modules, rootfs, and initrd when the disk has one."""
    return tuple(name for name in ALL_IMAGES if name in parts)


def _slim_group(path, entry, roots):
    if entry.kind == "dir":
        return None
    if "kernel" in roots and _kernel_group_file(path):
        return "kernel"
    for group, group_roots in roots.items():
        for root in group_roots:
            if under(path, root):
                return group
    return None


def _renamed(entry, path):
    copy = Entry(path, entry.kind)
    for name in Entry.__slots__:
        if name != "path":
            setattr(copy, name, getattr(entry, name))
    return copy


def _unique_dirs(entries):
    seen = {}
    for entry in entries:
        seen.setdefault(entry.path, entry)
    return [seen[p] for p in sorted(seen)]


def check_modules_layout(modules, version, mount_point):
    """Refuse a modules image the guest would see nested under its mount point."""
    expected = "/lib/modules/%s" % version
    if mount_point.rstrip("/") != expected:
        raise Refusal(
            "modules volume mount_point %s" % mount_point,
            "is not /lib/modules/%s, where modprobe looks for this kernel's modules" % version,
            "mount the modules image at %s" % expected,
        )
    nested = "lib/modules/%s" % version
    if any(under(e.path, nested) for e in modules):
        raise Refusal(
            "modules image",
            "holds lib/modules/%s/ and would appear at %s/%s in the guest" % (version, expected, nested),
            "put the contents of lib/modules/%s at the image root" % version,
        )
    return [guest_path(e.path, mount_point) for e in modules]


def guest_path(name, mount_point):
    """Where a file named ``name`` inside a volume image appears when the volume is mounted."""
    return "/" + norm(mount_point + "/" + name)


# Sparse files -------------------------------------------------------------------------------------

# containerd unpacks a layer with Go's archive/tar, whose Reader gives a sparse entry's holes back as
# zeros, and writes every byte it reads (pkg/archive createTarFile): no unpacker flintlock uses keeps a
# hole. A sparse file therefore lands in the guest at its full apparent size whatever the layer says,
# and the user chooses what to do with it.
SPARSE_CHOICES = ("refuse", "write", "exclude")
DEFAULT_SPARSE_THRESHOLD = 16 * 1024 * 1024
SPARSE_LISTED = 10


def check_sparse_threshold(threshold):
    if threshold < 0:
        raise Refusal(
            "sparse_threshold %s" % threshold,
            "is negative",
            "give the bytes of holes from which a file counts as sparse (0 counts every hole)",
        )
    return threshold


def sparse_files(parts, threshold):
    """The files of every image whose holes (ranges without data, and unwritten extents) come to at
    least ``threshold`` bytes, once per inode and image, as ``{image, path, apparent_size,
    allocated_size}``; and ``{files, hole_bytes}`` of those with fewer holes.

    ``allocated_size`` is the bytes of the file held in written blocks."""
    found = []
    small = {"files": 0, "hole_bytes": 0}
    for name in images_of(parts):
        seen = set()
        for entry in sorted(parts[name], key=lambda e: e.path):
            if entry.kind != "file" or not entry.holes or entry.inum in seen:
                continue
            seen.add(entry.inum)
            if entry.holes < max(threshold, 1):
                small["files"] += 1
                small["hole_bytes"] += entry.holes
                continue
            found.append(
                {
                    "image": name,
                    "path": "/" + entry.path,
                    "apparent_size": entry.size,
                    "allocated_size": entry.size - entry.holes,
                    "inum": entry.inum,
                }
            )
    return found, small


def _listed(files):
    shown = ", ".join(
        "%s (%s image, %d bytes, %d allocated)"
        % (f["path"], f["image"], f["apparent_size"], f["allocated_size"])
        for f in files[:SPARSE_LISTED]
    )
    more = len(files) - SPARSE_LISTED
    return shown + (" and %d more" % more if more > 0 else "")


def apply_sparse_policy(src, parts, found, policy):
    """``refuse`` raises naming the sparse files; ``exclude`` returns ``parts`` without them (every name
    of the inode) and what was left out; ``write`` returns ``parts`` as they are (the holes become zeros
    in the layer, never read from the disk)."""
    if not found or policy == "write":
        return parts, []
    if policy == "refuse":
        zeros = sum(f["apparent_size"] - f["allocated_size"] for f in found)
        raise Refusal(
            "%s holds sparse files" % src,
            "%s; containerd unpacks a layer by writing every byte, so flintlock's volume would hold "
            "%d bytes of zeros in their holes" % (_listed(found), zeros),
            "set sparse_files to write (ship them at their full size) or exclude (leave them out), "
            "raise sparse_threshold, or remove them from the image",
            sparse_files=[dict((k, v) for k, v in f.items() if k != "inum") for f in found],
        )
    dropped = {}
    for f in found:
        dropped.setdefault(f["image"], set()).add(f["inum"])
    kept = dict(parts)
    left_out = []
    for name, inums in dropped.items():
        kept[name] = [e for e in parts[name] if not (e.kind == "file" and e.inum in inums)]
        left_out.extend(
            "%s (sparse, %s image)" % (e.path, name)
            for e in parts[name]
            if e.kind == "file" and e.inum in inums
        )
    return kept, sorted(left_out)


def sparse_report(found, small, policy, threshold):
    return {
        "policy": policy,
        "threshold": threshold,
        "files": [dict((k, v) for k, v in f.items() if k != "inum") for f in found],
        "below_threshold": small,
    }


# Tar members --------------------------------------------------------------------------------------


def clamp_mtime(mtime, deterministic, epoch):
    if not deterministic:
        return int(mtime)
    return int(min(mtime, epoch))


class Member:
    """One tar member, read as a mapping (``member["name"]``): slots, not a dict, as a layer of a large
    root holds one per entry."""

    __slots__ = ("gid", "inum", "linkname", "mode", "mtime", "name", "rdev", "size", "type", "uid", "xattrs")

    def __init__(self, **fields):
        for name in self.__slots__:
            setattr(self, name, fields[name])

    def __getitem__(self, key):
        return getattr(self, key)

    def __repr__(self):
        return "<member %s %s>" % (self.type, self.name)


def tar_members(entries, deterministic=True, epoch=0, devices=False):
    """The tar member list of one layer, sorted by name.

    Each member (a ``Member``, read as a mapping) has ``name``, ``type`` (file, dir, symlink, hardlink,
    char, block, fifo), ``mode`` (permission bits with setuid/setgid/sticky), ``uid``, ``gid``,
    ``mtime``, ``size``, ``linkname``, ``xattrs``, ``rdev`` and ``inum`` (which inode's data a file
    member carries). The first name of a multiply-linked inode carries the data; the later ones are tar
    hard links to it. Sockets are never archived; device nodes only with ``devices``. Returns
    ``(members, skipped)``.
    """
    members = []
    skipped = []
    first = {}
    for entry in sorted(entries, key=lambda e: e.path):
        kind = entry.kind
        if kind == "socket" or (kind in ("char", "block") and not devices):
            skipped.append("%s (%s)" % (entry.path, kind))
            continue
        size = 0
        linkname = ""
        if kind == "symlink":
            linkname = entry.link
        elif kind == "file":
            if entry.nlink > 1 and entry.inum in first:
                kind = "hardlink"
                linkname = first[entry.inum]
            else:
                first[entry.inum] = entry.path
                size = entry.size
        members.append(
            Member(
                name=entry.path,
                type=kind,
                mode=entry.mode & 0o7777,
                uid=entry.uid,
                gid=entry.gid,
                mtime=clamp_mtime(entry.mtime, deterministic, epoch),
                size=size,
                linkname=linkname,
                xattrs=dict(sorted(entry.xattrs.items())) if entry.xattrs else NO_XATTRS,
                rdev=entry.rdev,
                inum=entry.inum,
            )
        )
    return members, skipped


def content_bytes(members):
    return sum(m["size"] for m in members if m["type"] == "file")


# OCI documents ------------------------------------------------------------------------------------


def canonical(document):
    """The bytes a document is stored and digested as: sorted keys, no whitespace."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def descriptor(media_type, digest, size, annotations=None):
    found = {"mediaType": media_type, "digest": digest, "size": size}
    if annotations:
        found["annotations"] = dict(annotations)
    return found


def created_at(deterministic, epoch, now=None):
    stamp = epoch if deterministic else (now if now is not None else 0)
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamp))


def image_config(diff_id, created, architecture="amd64", labels=None):
    config = {
        "architecture": architecture,
        "os": "linux",
        "created": created,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "config": {},
    }
    if labels:
        config["config"]["Labels"] = dict(labels)
    return config


def image_manifest(config_desc, layer_desc, annotations=None):
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": config_desc,
        "layers": [layer_desc],
    }
    if annotations:
        manifest["annotations"] = dict(annotations)
    return manifest


def cosign_tag(digest, suffix):
    """The tag cosign keeps an image's signatures (``sig``) or attestations (``att``) under:
    ``sha256-<hex>.<suffix>``, in the image's own repository."""
    algorithm, _sep, hexdigest = digest.partition(":")
    return "%s-%s.%s" % (algorithm, hexdigest, suffix)


def cosign_layer(media_type, digest, size, signature=None, predicate_type=None):
    """The descriptor of one signature layer: the base64 signature in its annotation (empty for an
    attestation, whose envelope carries it), and an attestation's predicate type."""
    annotations = {SIGNATURE_ANNOTATION: signature or ""}
    if predicate_type:
        annotations[PREDICATE_ANNOTATION] = predicate_type
    return descriptor(media_type, digest, size, annotations)


def cosign_config(layers):
    """The config of a signature image as cosign writes it: no platform, the layers' digests as diff ids
    (the layers are stored uncompressed)."""
    return {
        "architecture": "",
        "created": COSIGN_CREATED,
        "history": [{"created": COSIGN_CREATED} for _layer in layers],
        "os": "",
        "rootfs": {"type": "layers", "diff_ids": [layer["digest"] for layer in layers]},
        "config": {},
    }


def cosign_manifest(config_desc, layers):
    return {"schemaVersion": 2, "mediaType": MEDIA_MANIFEST, "config": config_desc, "layers": list(layers)}


def cosign_layers(manifest, media_type):
    """The layers of a signature (or attestation) manifest that hold ``media_type``; none of an absent one."""
    return [
        layer
        for layer in (manifest or {}).get("layers") or []
        if isinstance(layer, dict) and layer.get("mediaType") == media_type and layer.get("digest")
    ]


def layer_signature(layer):
    """The base64 signature a simple-signing layer's annotation carries ("" when none)."""
    return (layer.get("annotations") or {}).get(SIGNATURE_ANNOTATION) or ""


def merge_index(existing, tagged):
    """An OCI layout's index.json with ``tagged`` (``{tag: manifest descriptor}``) put in.

    Entries for other tags stay; an entry for one of these tags is replaced. Sorted by tag.
    """
    manifests = []
    for entry in (existing or {}).get("manifests", []):
        if (entry.get("annotations") or {}).get(REF_NAME) not in tagged:
            manifests.append(entry)
    for tag, desc in tagged.items():
        entry = dict(desc)
        entry["annotations"] = dict(desc.get("annotations") or {}, **{REF_NAME: tag})
        manifests.append(entry)
    manifests.sort(key=lambda e: ((e.get("annotations") or {}).get(REF_NAME, ""), e["digest"]))
    return {"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": manifests}


def report(result):
    """The lines a person reads after a build: each image with its reference, digest and sizes (the
    initrd when there is one), the architecture, what slim removed and the sealing verdict."""
    arch = result["architecture"]
    lines = [
        "kernel %s for %s (read from %s)"
        % (result["kernel_version"], arch["name"], arch["read_from"] or "the architecture option")
    ]
    for name in ALL_IMAGES:
        image = result.get(name)
        if image:
            lines.append(
                "%s: %s %s (%d bytes compressed, %d bytes of files)"
                % (name, image["reference"], image["digest"], image["size"], image["content_bytes"])
            )
    sizes = result["sizes"]
    lines.append(
        "root filesystem: %d bytes of files before slim, %d after; removed per group: %s"
        % (sizes["source_bytes"], sizes["rootfs_bytes"], canonical(result["removed"]).decode())
    )
    hygiene = result["hygiene"]
    lines.append(
        "sealing hygiene: %s" % ("sealed" if hygiene["sealed"] else "failed " + ", ".join(hygiene["failed"]))
    )
    return lines


def check_compression_level(level):
    """The gzip level of the image layers: 1 (fastest) to 9."""
    if not 1 <= level <= 9:
        raise Refusal("compression_level %s" % level, "is not a gzip level", "use 1 (fastest) to 9")
    return level


def source_date_epoch(given, environ_value=None):
    """The timestamp every file and config carries: ``given`` (the option), else ``SOURCE_DATE_EPOCH``
    from the environment (``environ_value``, unset or empty meaning 0). Seconds since 1970."""
    epoch = given
    if epoch is None:
        raw = environ_value or "0"
        if not raw.isdigit():
            raise Refusal(
                "SOURCE_DATE_EPOCH %r" % raw,
                "is not a number of seconds",
                "unset it or set source_date_epoch",
            )
        epoch = int(raw)
    if epoch < 0:
        raise Refusal("source_date_epoch %s" % epoch, "is before 1970", "give seconds since 1970")
    return epoch


def check_dest_kind(dest, kind):
    """``dest`` is a directory, or missing (it is created); ``kind`` names what is there otherwise (a
    regular file, a device), which the layout would be written over or fail on after the disk was read."""
    if kind not in ("directory", "missing"):
        raise Refusal(
            "dest %s" % dest,
            "is %s, not a directory; an OCI image layout is a directory" % kind,
            "point dest at an empty or new directory, or at an existing OCI layout (the file is left as is)",
        )


def check_dest_layout(dest, listing, is_layout):
    """``dest`` receives an OCI layout: it is empty or new (``listing``: what it holds), or already one
    (``is_layout``). Anything else is someone's directory, and nothing is written into it."""
    if listing and not is_layout:
        raise Refusal(
            "dest %s" % dest,
            "is a non-empty directory that is not an OCI image layout (it holds %s)" % ", ".join(listing[:5]),
            "point dest at an empty or new directory, or at an existing OCI layout",
        )


def layout_index(dest, data):
    """The layout's ``index.json`` (``data``: its bytes, None when there is none) as a document, checked
    before anything is written: a file that is not an OCI index would be overwritten by the merge, and
    the tags it held lost."""
    if data is None:
        return None
    try:
        document = json.loads(data.decode("utf-8"))
    except ValueError as exc:
        document = exc
    if (
        not isinstance(document, dict)
        or not isinstance(document.get("manifests", []), list)
        or not all(
            isinstance(m, dict) and isinstance(m.get("digest"), str) for m in document.get("manifests", [])
        )
    ):
        raise Refusal(
            "dest %s/index.json" % dest,
            "is not an OCI image index (%s)"
            % (document if isinstance(document, ValueError) else "no list of manifest descriptors"),
            "repair or remove index.json (its blobs stay), or point dest at another layout",
        )
    return document


def refuse_unsealed(src, checks, sealed, failed):
    """``require_sealed``: a root filesystem that fails seal.py's checks is refused, each failed check
    named with its evidence and the hygiene report attached."""
    if sealed:
        return
    raise Refusal(
        "root filesystem of %s" % src,
        "fails the sealing checks %s: %s"
        % (", ".join(failed), "; ".join(c["evidence"] for c in checks if not c["passed"])),
        "seal the image (truncate machine-id, remove host keys, cloud-init clean) and rebuild it",
        hygiene={"sealed": sealed, "failed": failed, "checks": checks},
    )


def check_tag(option, value):
    """``value`` of the option named ``option`` as an OCI tag (a refusal names that option)."""
    if not re.match(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$", str(value)):
        raise Refusal("%s %r" % (option, value), "is not a valid OCI tag", "use letters, digits, . _ -")
    return str(value)


def layout_tags(tags=None):
    """The tag (and registry repository suffix) of each image; names must be distinct."""
    names = dict((name, name) for name in ALL_IMAGES)
    for key, value in (tags or {}).items():
        if key not in names:
            raise Refusal(
                "tags.%s" % key, "is not one of the images", "use kernel, modules, rootfs or initrd"
            )
        names[key] = check_tag("tags.%s" % key, value)
    if len(set(names.values())) != len(names):
        raise Refusal("tags %s" % names, "name two images the same", "give each image its own tag")
    return names


# Registry references and fragments ----------------------------------------------------------------


def registry_url(value):
    """The registry option as a URL, for the redaction rules: ``host[:port]`` reads as ``https://host[:port]/``."""
    text = str(value or "").strip()
    return text if "://" in text else "https://%s/" % text


def parse_registry(value, has_credentials=False):
    """``(scheme, host)`` of the registry option. Plain HTTP only when spelt ``http://``."""
    text = str(value).strip().rstrip("/")
    scheme = "https"
    if "://" in text:
        scheme, text = text.split("://", 1)
        if scheme not in ("http", "https"):
            raise Refusal(
                "registry %s" % value, "is neither http:// nor https://", "give host[:port] or https://host"
            )
    if not text or "/" in text or "@" in text:
        raise Refusal(
            "registry %s" % value,
            "is not host[:port]",
            "put the repository in repository and the credentials in username/password",
        )
    if scheme == "http" and has_credentials:
        raise Refusal(
            "registry %s" % value,
            "would receive the password over plain HTTP",
            "serve the registry over https (ca_bundle for a private CA)",
        )
    return scheme, text


def check_signing_target(signs, verifies, has_registry):
    """Signatures and provenance are kept in the registry with the images: signing or verifying needs it."""
    if (signs or verifies) and not has_registry:
        raise Refusal(
            "signing_key" if signs else "trust_policy",
            "signatures and provenance are kept in the registry next to the images (cosign's "
            "sha256-<hex>.sig and .att tags), and no registry is given",
            "give registry and repository, or leave the signing key and trust policy out",
        )


def check_repository(repository):
    if not isinstance(repository, str) or not re.match(
        r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$", repository
    ):
        raise Refusal(
            "repository %r" % repository,
            "is not an OCI repository name (lower-case path components)",
            "use names like flintlock/ubuntu-2204",
        )
    return repository


def references(host, repository, tag, names):
    """``{image: "host/repository/<name>:tag"}`` (host None: a layout tag only)."""
    found = {}
    for image in ALL_IMAGES:
        if host:
            found[image] = "%s/%s/%s:%s" % (host, repository, names[image], tag)
        else:
            found[image] = names[image]
    return found


def pinned(refs, digests):
    """``{image: "host/repository/<name>@sha256:..."}``: the snippets name each image by its digest, so
    that a tag moved later (by this module or anyone) never changes what a MicroVM boots."""
    return dict(
        (image, "%s@%s" % (ref.rsplit(":", 1)[0], digests[image]))
        for image, ref in refs.items()
        if image in digests
    )


def tag_moves(where, before, after):
    """``[{where, tag, from, to}]``: each tag that pointed at other bytes and is (or would be) moved."""
    return [
        {"where": where, "tag": tag, "from": before[tag], "to": digest}
        for tag, digest in sorted(after.items())
        if before.get(tag) and before[tag] != digest
    ]


def volume_size_mb(content_bytes):
    """The MiB a volume gets for an image of ``content_bytes`` of file data (see ``VOLUME_OVERHEAD``)."""
    return int(-(-content_bytes * VOLUME_OVERHEAD // (1024 * 1024))) + VOLUME_ROOM_MB


def _image(found, key, ref):
    if ref is not None:
        found[key] = ref
    return found


def microvm_spec(refs, kernel_filename, version, modules_id="modules", sizes=None, initrd=False):
    """The flintlock ``MicroVMSpec`` fields these images fill (proto field names).

    ``refs`` None (no registry) leaves every image reference out (see ``SNIPPET_NOTE``); ``sizes`` gives
    each volume's ``size_in_mb`` (``{"rootfs": mb, "modules": mb}``); ``initrd`` adds the initrd.
    """
    refs = refs or {}
    sizes = sizes or {}
    spec = {
        "kernel": _image(
            {"filename": kernel_filename, "add_network_config": True}, "image", refs.get("kernel")
        ),
        "root_volume": {
            "id": "root",
            "is_read_only": False,
            "source": _image({}, "container_source", refs.get("rootfs")),
        },
        "additional_volumes": [
            {
                "id": modules_id,
                "is_read_only": False,
                "mount_point": "/lib/modules/%s" % version,
                "source": _image({}, "container_source", refs.get("modules")),
            }
        ],
    }
    for volume, name in ((spec["root_volume"], "rootfs"), (spec["additional_volumes"][0], "modules")):
        if name in sizes:
            volume["size_in_mb"] = sizes[name]
    if initrd:
        spec["initrd"] = _image({"filename": INITRD_ARCNAME}, "image", refs.get("initrd"))
    return spec


def capmvm_template(refs, kernel_filename, version, modules_id="modules", initrd=False):
    """The ``MicrovmMachineTemplate`` ``spec.template.spec`` fields (CAPMVM's camelCase); ``refs`` None
    leaves the image references out (CAPMVM's volumes have no size field)."""
    refs = refs or {}
    template = {
        "kernel": _image({"filename": kernel_filename}, "image", refs.get("kernel")),
        "rootVolume": _image({"id": "root"}, "image", refs.get("rootfs")),
        "volumes": [
            _image(
                {"id": modules_id, "mountPoint": "/lib/modules/%s" % version}, "image", refs.get("modules")
            )
        ],
    }
    if initrd:
        template["initrd"] = _image({"filename": INITRD_ARCNAME}, "image", refs.get("initrd"))
    return template
