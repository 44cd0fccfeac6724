"""microvm_image on the roots people run, on disks made with real tools: XFS made with ``mkfs.xfs -p``
(a protofile, no mount) and btrfs made with ``mkfs.btrfs --rootdir``, each inside a GPT disk sgdisk
writes, compared image for image with the ext4 made from the same tree; partitions holding what the
module recognises but does not read (FAT, swap, LUKS, squashfs, F2FS, made with their own mkfs); and a
disk whose primary GPT header is damaged.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal

from tests.integration.modules.test_microvm_image import run
from tests.integration.support import disks
from tests.integration.support import microvm_parts as parts

EPOCH = 1_700_000_000
IMAGES = ("kernel", "modules", "rootfs")
TOOLS = ("mkfs.xfs", "mkfs.vfat", "mkswap", "cryptsetup", "mkfs.btrfs", "mksquashfs", "mkfs.f2fs", "pvcreate")


@pytest.fixture(autouse=True, scope="module")
def _tools():
    # Declared Debian packages (make setup installs them): a missing one is a failure, not a skip.
    missing = parts.missing_tools() + [t for t in TOOLS if shutil.which(t) is None]
    assert not missing, "missing tools (make setup installs them): %s" % missing


def digests(result):
    return tuple(result[n]["digest"] for n in IMAGES)


def layers(result):
    return tuple(result[n]["layer_digest"] for n in IMAGES)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    work = tmp_path_factory.mktemp("roots")
    tree = parts.root_tree(work / "tree")
    ext4 = parts.ext4_root(tree, work / "root.ext4")
    xfs = parts.xfs_root(tree, work / "root.xfs")
    btrfs = parts.btrfs_root(tree, work / "root.btrfs")
    return {
        "work": work,
        "tree": tree,
        "xfs": xfs,
        "ext4_gpt": parts.gpt_disk(work / "ext4.raw", ext4)["path"],
        "xfs_gpt": parts.gpt_disk(work / "xfs.raw", xfs)["path"],
        "btrfs_gpt": parts.gpt_disk(work / "btrfs.raw", btrfs)["path"],
    }


@pytest.mark.parametrize("kind, shown", [("xfs", "XFS"), ("btrfs", "btrfs")])
def test_an_xfs_or_btrfs_root_gives_the_images_the_ext4_root_gives(made, tmp_path, kind, shown):
    if os.geteuid() != 0:
        pytest.skip(
            "what mkfs.xfs -p and mkfs.btrfs 6.2 cannot make (hard links, the sticky bit, the xattr, "
            "owners, device numbers) needs root"
        )
    # Without determinism the mtimes are the files' own, so they must agree too (the rerun of the same
    # disk within one second gives the same config; the layers never depend on the clock).
    pinned = {"source_date_epoch": EPOCH, "devices": True}
    for options in (pinned, {"deterministic": False}):
        ext4 = run(src=str(made["ext4_gpt"]), dest=str(tmp_path / "ext4"), **options)
        other = run(src=str(made[kind + "_gpt"]), dest=str(tmp_path / kind), **options)
        assert layers(other) == layers(ext4), options
        assert other["left_out"] == ext4["left_out"] and other["left_out"]["xattrs"] == []
    assert other["partition"]["number"] == 2
    assert other["hygiene"] == ext4["hygiene"] and other["hygiene"]["sealed"] is True
    assert any("reading %s on partition 2 'root'" % shown in line for line in other["progress"])
    first = run(src=str(made[kind + "_gpt"]), dest=str(tmp_path / "pinned"), **pinned)
    assert digests(first) == digests(run(src=str(made["ext4_gpt"]), dest=str(tmp_path / "e"), **pinned))
    again = run(src=str(made[kind + "_gpt"]), dest=str(tmp_path / "pinned"), **pinned)
    assert again["changed"] is False and digests(again) == digests(first)


@pytest.mark.parametrize("make", [parts.xfs_root, parts.btrfs_root])
def test_a_directory_of_thousands_of_entries_is_read_whole(made, tmp_path, make):
    """As /usr/bin on a real root: XFS keeps it in node form (data, leaf and free blocks), btrfs across
    many leaves."""
    names = ["tool-with-a-long-name-%04d" % i for i in range(3000)]
    tree = parts.root_tree(tmp_path / "tree", changes={"usr/bin/" + name: name + "\n" for name in names})
    image = make(tree, tmp_path / "root.img")
    result = run(src=str(image), dest=str(tmp_path / "out"), source_date_epoch=EPOCH)
    rootfs = parts.unpack_layout(tmp_path / "out", result["rootfs"]["reference"], tmp_path / "unpacked")
    for name in names:
        assert (rootfs / "usr/bin" / name).read_text() == name + "\n"


def test_hygiene_failures_are_read_through_btrfs_symlinks(made, tmp_path):
    """The seal rules read paths through the root's symlinks (/lib -> usr/lib) on btrfs as on ext4."""
    tree = parts.root_tree(made["work"] / "tree-dirty", changes={"etc/ssh/ssh_host_ed25519_key": "k\n"})
    image = parts.btrfs_root(tree, made["work"] / "dirty.btrfs")
    result = run(src=str(image), dest=str(tmp_path / "dirty"))
    assert result["hygiene"]["failed"] == ["ssh_host_keys_absent"]


def test_an_xfs_root_keeps_owners_modes_links_and_devices_without_a_mount(made, tmp_path):
    """What the protofile alone makes (no root needed): owners, setuid/setgid, symlinks, a fifo."""
    result = run(src=str(made["xfs_gpt"]), dest=str(tmp_path / "out"), source_date_epoch=EPOCH)
    tag = result["rootfs"]["reference"]
    rootfs = parts.unpack_layout(tmp_path / "out", tag, tmp_path / "unpacked")
    found = parts.describe_tree(rootfs)
    assert found["home/dev/notes.txt"][2] == (1000, 1001)
    assert found["usr/bin/sgid-tool"][1:3] == ("0o2755", (0, 42))
    assert found["usr/bin/tool"][1] == "0o4755"
    assert found["bin"] == ("symlink", "usr/bin")
    assert found["usr/bin/python3"] == ("symlink", "/usr/bin/python3.11")
    assert found["tmp/fifo"][0] == "fifo"
    tree = made["tree"]
    assert found["usr/bin/python3.11"][3] == parts.describe_tree(tree, owners={})["usr/bin/python3.11"][3]


def test_the_hint_to_pass_the_partition_works_for_an_xfs_root(made, tmp_path):
    xfs = made["xfs"]
    typed = parts.gpt_disk(made["work"] / "xfs-basic-data.raw", xfs, kind="0700")["path"]
    with pytest.raises(Refusal) as info:
        run(src=str(typed), dest=str(tmp_path / "never"))
    assert (
        "no Linux partition holds a filesystem microvm_image reads (ext2/3/4, XFS and btrfs)"
        in info.value.msg
    )
    assert "pass the image's root partition with partition" in info.value.msg
    assert "320 MiB, xfs)" in info.value.msg
    assert not (tmp_path / "never").exists()
    for selector in ("2", "root"):
        chosen = run(src=str(typed), dest=str(tmp_path / selector), partition=selector)
        assert chosen["partition"]["number"] == 2


# Recognised, not read -------------------------------------------------------------------------------


def formatted(work: pathlib.Path, name: str, size_mib: int, *command: str) -> pathlib.Path:
    """A partition-sized sparse file formatted by ``command`` (the file's path is appended)."""
    path = work / ("%s.part" % name)
    path.unlink(missing_ok=True)
    disks.run("truncate", "-s", "%dM" % size_mib, path)
    disks.run(*command, path)
    return path


@pytest.fixture(scope="module")
def zoo(made):
    """One GPT disk: FAT, swap, LUKS, squashfs, F2FS and swap made for 64 KiB pages, each with its own
    mkfs."""
    work = made["work"]
    squash_tree = disks.write_tree(work / "squash-tree", {"etc/hostname": "x\n"})
    squash = work / "root.squashfs"
    squash.unlink(missing_ok=True)
    disks.run("mksquashfs", squash_tree, squash, "-quiet", "-no-progress")
    key = work / "luks.key"
    key.write_text("not a secret\n")
    made_parts = [
        ("vfat", 16, "ef00", formatted(work, "vfat", 16, "mkfs.vfat")),
        ("swap", 16, "8200", formatted(work, "swap", 16, "mkswap")),
        (
            "luks",
            16,
            "8309",
            formatted(
                work,
                "luks",
                16,
                "cryptsetup",
                "luksFormat",
                "--batch-mode",
                "--type",
                "luks1",
                "--pbkdf-force-iterations",
                "1000",
                "--key-file",
                str(key),
            ),
        ),
        ("squashfs", 4, "8300", squash),
        ("f2fs", 64, "8300", formatted(work, "f2fs", 64, "mkfs.f2fs", "-q", "-f")),
        ("swap64k", 16, "8200", formatted(work, "swap64k", 16, "mkswap", "--pagesize", "65536")),
    ]
    layout, offsets, start = [], [], 2048
    for number, (_name, size_mib, kind, _path) in enumerate(made_parts, start=1):
        sectors = size_mib * parts.MIB // disks.SECTOR
        layout += ["-n", "%d:%d:%d" % (number, start, start + sectors - 1), "-t", "%d:%s" % (number, kind)]
        offsets.append(start * disks.SECTOR)
        start += sectors
    path = disks.gpt_disk(work / "zoo.raw", (start + 2048) * disks.SECTOR, layout)
    for (_name, _size, _kind, part), offset in zip(made_parts, offsets, strict=True):
        disks.place(path, part, offset)
    return path


def test_every_recognised_filesystem_is_named_with_the_move(zoo, tmp_path):
    with pytest.raises(Refusal) as info:
        run(src=str(zoo), dest=str(tmp_path / "never"))
    assert (
        "no Linux partition holds a filesystem microvm_image reads (ext2/3/4, XFS and btrfs); partition 1 "
        "holds a FAT filesystem; partition 2 holds swap space; partition 3 holds a LUKS volume; partition 4 "
        "holds a squashfs image; partition 5 holds an F2FS filesystem; partition 6 holds swap space "
        "(partitions: " in info.value.msg
    )
    assert "cryptsetup open" in info.value.msg and "unsquashfs" in info.value.msg
    with pytest.raises(Refusal) as info:
        run(src=str(zoo), dest=str(tmp_path / "never"), partition="3")
    assert "partition 3 (type ca7d7ccb-63ed-4c53-861c-1742536059cc, 16 MiB, luks): holds a LUKS volume; " in (
        info.value.msg
    )
    assert info.value.msg.endswith(
        "microvm_image reads ext2/3/4, XFS and btrfs roots; open the volume (cryptsetup open) and give the "
        "decrypted device as a disk image of its own"
    )
    assert not (tmp_path / "never").exists()


# A damaged primary GPT header ------------------------------------------------------------------------


def test_a_damaged_primary_gpt_header_is_read_from_the_backup_with_a_warning(made, tmp_path):
    damaged = tmp_path / "damaged.raw"
    disks.run("cp", "--sparse=always", made["xfs_gpt"], damaged)
    with open(damaged, "r+b") as fh:
        fh.seek(512 + 24)  # the header's own LBA, under its CRC
        fh.write(b"\xff\xff\xff\xff")
    listing = subprocess.run(["sgdisk", "-v", str(damaged)], capture_output=True, text=True, check=False)
    assert "backup" in (listing.stdout + listing.stderr).lower()
    result = run(src=str(damaged), dest=str(tmp_path / "out"), source_date_epoch=EPOCH)
    intact = run(src=str(made["xfs_gpt"]), dest=str(tmp_path / "intact"), source_date_epoch=EPOCH)
    assert digests(result) == digests(intact)
    last_lba = damaged.stat().st_size // 512 - 1
    assert result["warnings"] == [
        "%s: the primary GPT header at LBA 1 is damaged (its header checksum does not match); the partitions "
        "were read from the backup header at LBA %d, as sgdisk does (sgdisk -e or gdisk's w rewrites the "
        "primary)" % (damaged, last_lba)
    ]
    assert "warnings" not in intact


def test_an_xfs_preallocated_file_reads_as_zeros_not_as_the_blocks_beneath(made, tmp_path):
    """journald preallocates its files: an unwritten extent's blocks hold what the disk held before, and
    the kernel reads them as zeros, so the image must too."""
    if os.geteuid() != 0:
        pytest.skip("fallocate on XFS needs the filesystem mounted, which needs root")
    image = tmp_path / "root.xfs"
    parts.xfs_root(made["tree"], image)
    mount = tmp_path / "mnt"
    mount.mkdir()
    disks.run("mount", "-o", "loop", image, mount)
    try:
        disks.run("fallocate", "-l", str(1200 * 1024), mount / "var/log/journal.prealloc")
        mapped = disks.run("xfs_io", "-c", "fiemap", mount / "var/log/journal.prealloc")
    finally:
        disks.run("umount", mount)
    # "0: [0..2399]: 2152..4551": the extent's 512-byte sectors in the filesystem.
    first, last = (int(n) for n in mapped.splitlines()[1].split(":")[2].strip().split(".."))
    with open(image, "r+b") as fh:
        fh.seek(first * 512)
        fh.write(b"TOPSECRET-" * ((last - first + 1) * 512 // 10))
    result = run(src=str(image), dest=str(tmp_path / "out"), source_date_epoch=EPOCH)
    rootfs = parts.unpack_layout(tmp_path / "out", result["rootfs"]["reference"], tmp_path / "unpacked")
    assert (rootfs / "var/log/journal.prealloc").read_bytes() == bytes(1200 * 1024)


@pytest.fixture(scope="module")
def lvm(made):
    if os.geteuid() != 0:
        pytest.skip(
            "pvcreate and vgcfgrestore write the LVM2 metadata through a loop device, which needs root"
        )
    return parts.lvm_disk(made["work"] / "lvm.raw", made["work"] / "root.ext4")


def test_a_root_on_lvm_gives_the_images_of_the_same_root_on_a_partition(made, lvm, tmp_path):
    """The installers' layout (the root on a logical volume of a physical volume partition), read from
    the logical volume's extents with no activation: the same images as the same ext4 on a partition."""
    pinned = {"source_date_epoch": EPOCH, "devices": True}
    plain = run(src=str(made["ext4_gpt"]), dest=str(tmp_path / "plain"), **pinned)
    volume = run(src=str(lvm["path"]), dest=str(tmp_path / "lvm"), **pinned)
    assert digests(volume) == digests(plain)
    part = volume["partition"]
    assert (part["number"], part["type"], part["volume_of"]) == ("vgt/root", "lvm", 2), part
    assert part["offset"] == lvm["offsets"][0] + lvm["pe_start"]
    assert any(
        "reading ext4 on logical volume vgt/root on partition 2" in line for line in volume["progress"]
    )
    chosen = run(src=str(lvm["path"]), dest=str(tmp_path / "chosen"), partition="vgt/root", **pinned)
    assert digests(chosen) == digests(plain)


def test_a_logical_volume_of_several_segments_is_named_with_why_and_nothing_is_written(lvm, tmp_path):
    with pytest.raises(Refusal) as refused:
        run(src=str(lvm["path"]), dest=str(tmp_path / "oci"), partition="vgt/split")
    assert "logical volume vgt/split on partition 2" in refused.value.msg
    assert "is a logical volume of 2 segments, which is not read" in refused.value.msg
    assert "qemu-img convert -O raw /dev/<vg>/<lv>" in refused.value.msg
    assert not (tmp_path / "oci").exists()


def test_a_physical_volume_whose_metadata_is_damaged_is_named(lvm, tmp_path):
    damaged = tmp_path / "damaged.raw"
    shutil.copyfile(lvm["path"], damaged)
    # The metadata area's text starts in the second MiB's first sectors: overwrite the volume group's name
    # and the whole first metadata copy with noise, keeping the label that names it an LVM2 volume.
    with open(damaged, "r+b") as handle:
        handle.seek(lvm["offsets"][0] + 4096 + 512)
        handle.write(b"\xff" * 8192)
    with pytest.raises(Refusal) as refused:
        run(src=str(damaged), dest=str(tmp_path / "oci"))
    assert "partition 2 holds an LVM2 physical volume whose metadata cannot be read" in refused.value.msg
    assert not (tmp_path / "oci").exists()


@pytest.fixture(scope="module")
def usr_split(made):
    """The installers' separate /usr: logical volume ``vgu/root`` whose /etc/fstab mounts
    ``/dev/mapper/vgu-usr`` at /usr, and ``vgu/usr``, larger than the root."""
    if os.geteuid() != 0:
        pytest.skip(
            "pvcreate and vgcfgrestore write the LVM2 metadata through a loop device, which needs root"
        )
    work = made["work"] / "usr-split"
    fstab = "/dev/mapper/vgu-root / ext4 defaults 0 1\n/dev/mapper/vgu-usr /usr ext4 defaults 0 2\n"
    tree = parts.root_tree(work / "tree", changes={"etc/fstab": fstab})
    root = parts.ext4_root(tree, work / "root.ext4")
    usr_tree = work / "usr-tree"
    disks.write_tree(usr_tree, {"bin/env": b"#!/bin/true\n", "share/doc/x": "d"})
    usr = parts.ext4_root(usr_tree, work / "usr.ext4", size=96 * disks.MIB)
    return parts.lvm_disk(work / "lvm.raw", root, vg="vgu", extra={"usr": usr})


@pytest.mark.parametrize("partition", [None, "vgu/root"])
def test_a_root_whose_fstab_mounts_usr_from_another_volume_is_refused_naming_the_line(
    usr_split, tmp_path, partition
):
    """Without partition the root is the volume with /etc/fstab, not the larger /usr volume; either way
    its fstab's /usr line is named before anything is written, not shipped as an empty /usr."""
    dest = tmp_path / "oci"
    with pytest.raises(Refusal) as refused:
        run(src=str(usr_split["path"]), dest=str(dest), partition=partition)
    message = refused.value.msg
    assert "logical volume vgu/root on partition 2" in message, message
    assert "/usr: '/dev/mapper/vgu-usr /usr ext4 defaults 0 2'" in message, message
    assert "set partition to" in message and "merge that filesystem into the root" in message
    assert not dest.exists()
