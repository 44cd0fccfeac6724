"""The micro-VM image rules over in-memory trees, and the bzImage payload decompression on payloads made
here (the disk and registry adapters are covered by tests/integration/modules/test_microvm_image.py,
a real kernel by tests/unit/plugins/modules/test_microvm_image_stock.py)."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import random
import re
import struct

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.microvm import _kernel, microvm
from ansible_collections.goldenimage.pipeline.plugins.module_utils.microvm.microvm import Entry
from hypothesis import given
from hypothesis import strategies as st

try:
    from compression import zstd
except ImportError:
    from backports import zstd

V = "5.10.77"
MIB = 1024 * 1024


def part(number, kind=microvm.LINUX_FILESYSTEM_GPT, size=100 * MIB, fs="ext", name="", label=""):
    return {
        "number": number,
        "offset": number * MIB,
        "size": size,
        "type": kind,
        "name": name,
        "label": label,
        "filesystem": fs,
    }


def tree_of(spec):
    """``{"path": kind_or_entry}``: ``"dir"``, ``"file:<size>"``, ``"->target"`` or an Entry."""
    tree = {}
    inum = 10
    for path, value in spec.items():
        inum += 1
        if isinstance(value, Entry):
            value.path = path
            tree[path] = value
        elif value == "dir":
            tree[path] = Entry(path, "dir", mode=0o755, inum=inum)
        elif value.startswith("->"):
            tree[path] = Entry(path, "symlink", mode=0o777, link=value[2:], inum=inum)
        else:
            tree[path] = Entry(path, "file", size=int(value.split(":")[1]), inum=inum)
    return tree


def merged_usr(extra=None):
    spec = {
        "bin": "->usr/bin",
        "lib": "->usr/lib",
        "boot": "dir",
        "boot/vmlinux": "file:4000",
        "boot/config-" + V: "file:200",
        "boot/initrd.img-" + V: "file:3000",
        "etc": "dir",
        "etc/hostname": "file:10",
        "usr": "dir",
        "usr/bin": "dir",
        "usr/bin/true": "file:100",
        "usr/lib": "dir",
        "usr/lib/modules": "dir",
        "usr/lib/modules/" + V: "dir",
        "usr/lib/modules/%s/kernel" % V: "dir",
        "usr/lib/modules/%s/kernel/ext4.ko" % V: "file:700",
        "usr/lib/modules/%s/modules.dep" % V: "file:30",
        "usr/lib/firmware": "dir",
        "usr/lib/firmware/gpu.bin": "file:5000",
        "usr/share": "dir",
        "usr/share/doc": "dir",
        "usr/share/doc/bash": "dir",
        "usr/share/doc/bash/README": "file:600",
        "usr/share/locale": "dir",
        "usr/share/locale/de": "dir",
        "usr/share/locale/de/x.mo": "file:80",
        "usr/share/locale/en_GB": "dir",
        "usr/share/locale/en_GB/x.mo": "file:90",
        "usr/share/locale/locale.alias": "file:5",
        "var": "dir",
        "var/cache": "dir",
        "var/cache/apt": "dir",
        "var/cache/apt/pkgcache.bin": "file:900",
        "var/lib": "dir",
        "var/lib/containerd": "dir",
        "var/lib/containerd/blob": "file:7000",
    }
    spec.update(extra or {})
    return tree_of(spec)


# Partitions ---------------------------------------------------------------------------------------


def test_the_largest_linux_ext_partition_is_the_root():
    parts = [
        part(1, "c12a7328-f81f-11d2-ba4b-00a0c93ec93b", fs=None),
        part(2, size=10 * MIB),
        part(3, size=900 * MIB),
    ]
    assert microvm.choose_partition("disk.raw", parts)["number"] == 3


def test_a_discoverable_root_type_wins_over_a_bigger_generic_linux_partition():
    parts = [part(1, size=900 * MIB), part(2, "4f68bce3-e8cd-4db1-96e7-fbcaf984b709", size=100 * MIB)]
    assert microvm.choose_partition("disk.raw", parts)["number"] == 2


def test_mbr_linux_partition_is_a_candidate():
    assert microvm.choose_partition("disk.raw", [part(1, "0x83")])["number"] == 1


def test_two_equal_candidates_are_refused():
    with pytest.raises(Refusal, match=r"more than one Linux partition could be the root.*set partition"):
        microvm.choose_partition("disk.raw", [part(1), part(2)])


def test_no_linux_ext_partition_is_refused_listing_the_table():
    with pytest.raises(
        Refusal,
        match=r"no Linux partition holds a filesystem microvm_image reads \(ext2/3/4, XFS and btrfs\) "
        r"\(partitions: partition 1",
    ):
        microvm.choose_partition("disk.raw", [part(1, "0x07", fs=None)])


def test_an_xfs_root_is_chosen_like_an_ext_one():
    parts = [part(1, fs="vfat", size=100 * MIB), part(2, fs="xfs", size=900 * MIB), part(3, size=200 * MIB)]
    chosen = microvm.choose_partition("disk.raw", parts)
    assert chosen["number"] == 2 and microvm.reader_of(chosen) == "xfs"
    assert microvm.reader_of(parts[2]) == "ext4"
    # RHEL's separate /boot is XFS too.
    boot = microvm.choose_boot_partition("disk.raw", parts[:2] + [part(3, fs="xfs", size=1 * MIB)], chosen)
    assert boot["number"] == 3


def test_recognised_but_unread_filesystems_are_named_with_what_to_do():
    parts = [part(1, fs="vfat"), part(2, fs="luks"), part(3, "0x8e", fs="lvm2"), part(4, fs="swap")]
    with pytest.raises(Refusal) as info:
        microvm.choose_partition("disk.raw", parts)
    assert (
        "no Linux partition holds a filesystem microvm_image reads (ext2/3/4, XFS and btrfs); partition 1 "
        "holds a FAT filesystem; partition 2 holds a LUKS volume; partition 3 holds an LVM2 physical volume; "
        "partition 4 holds swap space (partitions: " in info.value.msg
    )
    assert "cryptsetup open" in info.value.msg and "activate the volume group" in info.value.msg
    with pytest.raises(Refusal, match=r"holds a LUKS volume; microvm_image reads ext2/3/4, XFS and btrfs"):
        microvm.choose_partition("disk.raw", parts, "2")
    for fs in ("squashfs", "f2fs", "zfs", "bcachefs", "ntfs", "bitlocker"):
        with pytest.raises(Refusal, match=r"partition 1 .*: holds an? [^;]+; microvm_image reads"):
            microvm.choose_partition("disk.raw", [part(1, fs=fs)], "1")


def test_an_empty_disk_is_refused():
    with pytest.raises(Refusal, match="holds no partition table"):
        microvm.choose_partition("disk.raw", [])


def test_partition_by_number_and_by_label():
    parts = [part(1, name="efi", fs=None), part(2, name="root", label="cloudimg-rootfs")]
    assert microvm.choose_partition("d", parts, "2")["number"] == 2
    assert microvm.choose_partition("d", parts, "root")["number"] == 2
    assert microvm.choose_partition("d", parts, "cloudimg-rootfs")["number"] == 2


def test_an_unknown_partition_selector_is_refused():
    with pytest.raises(Refusal, match="no partition numbered or labelled '7'"):
        microvm.choose_partition("d", [part(1)], "7")


def test_a_selected_partition_without_ext_is_refused():
    with pytest.raises(
        Refusal, match="holds no filesystem this module recognises; microvm_image reads ext2/3/4, XFS"
    ):
        microvm.choose_partition("d", [part(1, fs=None)], 1)


# Paths and versions -------------------------------------------------------------------------------


def test_resolve_follows_merged_usr_and_absolute_links():
    tree = merged_usr({"etc/alt": "->/usr/lib/modules", "loop": "->loop"})
    assert microvm.resolve(tree, "lib/modules/" + V) == "usr/lib/modules/" + V
    assert microvm.resolve(tree, "/etc/alt/../firmware") == "usr/lib/firmware"
    assert microvm.resolve(tree, "lib/missing") is None
    assert microvm.resolve(tree, "loop") is None


def test_one_modules_version_is_detected():
    tree = merged_usr()
    root, versions = microvm.module_versions(tree)
    assert (root, versions) == ("usr/lib/modules", [V])
    assert microvm.choose_version(versions, microvm.config_versions(tree), banner=V) == V


def test_more_than_one_modules_version_is_refused_listing_them():
    with pytest.raises(
        Refusal,
        match=r"/lib/modules: holds more than one kernel version: 5.10.77, 5.15.65; set kernel_version",
    ):
        microvm.choose_version([V, "5.15.65"], {})


def test_kernel_version_picks_one_of_several():
    assert microvm.choose_version([V, "5.15.65"], {"5.15.65": "boot/config-5.15.65"}, "5.15.65") == "5.15.65"


def test_a_kernel_version_without_modules_is_refused():
    with pytest.raises(
        Refusal, match=r"kernel_version 6.1.0: has no /lib/modules/6.1.0 \(the image holds: 5.10.77\)"
    ):
        microvm.choose_version([V], {}, "6.1.0")


def test_no_modules_is_refused():
    with pytest.raises(Refusal, match="has no /lib/modules/<version> directory"):
        microvm.choose_version([], {})


def test_a_kernel_banner_that_differs_from_the_modules_is_refused_naming_both():
    with pytest.raises(
        Refusal, match=r"kernel /boot/vmlinux: is version 5.15.65 but the modules are /lib/modules/5.10.77"
    ):
        microvm.choose_version([V], {}, banner="5.15.65")


def test_a_kernel_config_that_differs_from_the_modules_is_refused_naming_both():
    with pytest.raises(
        Refusal, match=r"config-5.15.65: is for version 5.15.65 but the modules are /lib/modules/5.10.77"
    ):
        microvm.choose_version([V], {"5.15.65": "boot/config-5.15.65"})


def test_banner_version():
    assert microvm.banner_version(b"\0Linux version 5.10.77 (builder@host) (gcc) #1 SMP") == V
    assert microvm.banner_version(b"no banner here") is None


def test_a_missing_kernel_is_refused_naming_what_boot_holds():
    with pytest.raises(
        Refusal, match=r"kernel /boot/vmlinux.bin: is not a file.*boot/ holds: initrd.img-5.10.77, vmlinux"
    ):
        microvm.locate_kernel(merged_usr(), None, "cloudhypervisor")


def test_a_symlink_loop_is_named_as_one_not_as_a_missing_file():
    tree = merged_usr({"boot/a": "->b", "boot/b": "->a", "boot/vmlinuz-5.10.77": "->a"})
    del tree["boot/vmlinux"]
    with pytest.raises(
        Refusal, match=r"kernel /boot/a: is a symlink loop \(more than 40 links followed from /boot/a\)"
    ):
        microvm.locate_kernel(tree, "boot/a", "firecracker")
    assert microvm.unresolved(tree, "boot/vmlinuz-5.10.77").startswith("a symlink loop")
    gone = merged_usr({"boot/initrd.img-5.10.77": "->initrd.gone"})
    assert microvm.unresolved(gone, "boot/initrd.img-5.10.77") == (
        "a symlink to initrd.gone, which the filesystem does not have"
    )


def test_kernel_path_reaches_through_symlinks():
    tree = merged_usr({"vmlinux": "->boot/vmlinux"})
    assert microvm.locate_kernel(tree, "/vmlinux", "firecracker") == "boot/vmlinux"


def elf(machine=62, version=V):
    """A minimal 64-bit little-endian ELF header for ``machine``, then a kernel banner."""
    header = b"\x7fELF\x02\x01\x01" + bytes(9) + struct.pack("<HH", 2, machine) + bytes(44)
    return header + b"\0Linux version %s (builder@host) (gcc) #1 SMP\n" % version.encode() + bytes(2048)


def bzimage(payload):
    """A fake x86 setup header (``HdrS`` at 0x202), junk, then the compressed payload and its trailer."""
    head = bytearray(0x4000)
    head[0x202:0x206] = b"HdrS"
    head[0x1000:0x1010] = b"\x1f\x8b\x08 not gzip"  # a false candidate that must be skipped
    return bytes(head) + payload + struct.pack("<I", 4096)


def extract(data, path, limit=microvm.MAX_VMLINUX):
    """``(format, vmlinux)`` streamed out of ``data`` into memory."""
    out = io.BytesIO()
    name, size, _banner = _kernel.extract_vmlinux(data, path, out, limit)
    assert size == len(out.getvalue())
    return name, out.getvalue()


def test_a_bzimage_without_a_readable_payload_is_refused():
    head = bytearray(4096)
    head[0x202:0x206] = b"HdrS"
    assert microvm.kernel_kind(bytes(head)) == "bzimage"
    with pytest.raises(
        Refusal, match="is a compressed bzImage; firecracker boots an uncompressed ELF vmlinux"
    ):
        microvm.check_kernel_format("boot/vmlinux", bytes(head), "firecracker")
    with pytest.raises(
        Refusal,
        match=r"kernel /boot/vmlinuz-5.10.77: is a compressed bzImage: no payload decompressed to an ELF "
        r"kernel or an arm64 Image \(tried: gzip\)",
    ):
        extract(bzimage(gzip.compress(b"not a kernel" * 100)), "boot/vmlinuz-5.10.77")


@pytest.mark.parametrize(
    "name,compress",
    [
        ("gzip", lambda data: gzip.compress(data, mtime=0)),
        ("xz", lambda data: lzma.compress(data, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC32)),
        (
            "lzma",
            lambda data: lzma.compress(data, format=lzma.FORMAT_ALONE, preset=9),
        ),  # as the kernel: lzma -9
        ("bzip2", bz2.compress),
        ("zstd", zstd.compress),
    ],
)
def test_the_vmlinux_is_extracted_from_each_payload_format(name, compress):
    kernel = elf()
    found, vmlinux = extract(bzimage(compress(kernel)), "boot/vmlinuz-5.10.77")
    assert (found, vmlinux) == (name, kernel)
    assert microvm.check_kernel_format("boot/vmlinux", vmlinux, "firecracker", "amd64") == "elf"
    assert microvm.banner_version(vmlinux) == V


@pytest.mark.parametrize(
    "name,compress",
    [
        ("gzip", lambda data: gzip.compress(data, mtime=0)),
        ("xz", lambda data: lzma.compress(data, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC32)),
        ("lzma", lambda data: lzma.compress(data, format=lzma.FORMAT_ALONE, preset=9)),
        ("bzip2", lambda data: bz2.compress(data, 1)),  # 100 kB blocks: the cut leaves whole ones before it
        ("zstd", zstd.compress),
    ],
)
def test_a_kernel_cut_short_is_refused_as_truncated_never_shipped(name, compress):
    kernel = elf() + random.Random(7).randbytes(300_000)
    packed = bzimage(compress(kernel))
    whole = extract(packed, "boot/vmlinuz-5.10.77")
    assert whole == (name, kernel)
    cut = packed[: 0x4000 + (len(packed) - 0x4000) * 2 // 3]  # the file ends two thirds into its payload
    with pytest.raises(Refusal) as refused:
        extract(cut, "boot/vmlinuz-5.10.77")
    words = str(refused.value)
    assert words.startswith("kernel /boot/vmlinuz-5.10.77: its %s payload decompresses to a kernel" % name), (
        words
    )
    assert "before the stream's end marker" in words and "install the kernel package" in words, words


def test_payload_candidates_come_format_by_format_in_extract_vmlinux_order():
    data = b"BZh..\x1f\x8b\x08..\x28\xb5\x2f\xfd..\x1f\x8b\x08"
    assert list(microvm.payload_offsets(data)) == [("gzip", 5), ("gzip", 16), ("bzip2", 0), ("zstd", 10)]


def test_the_kernel_must_be_an_elf_for_the_requested_architecture():
    assert microvm.elf_machine(elf(183)) == 183
    assert microvm.elf_machine(b"MZ") is None
    assert microvm.check_kernel_format("boot/vmlinux", elf(183), "firecracker", "arm64") == "elf"
    with pytest.raises(
        Refusal, match="kernel /boot/vmlinux: is an ELF for aarch64, not for architecture amd64"
    ):
        microvm.check_kernel_format("boot/vmlinux", elf(183), "firecracker", "amd64")
    with pytest.raises(Refusal, match="is an ELF for x86_64, not for architecture arm64"):
        microvm.check_kernel_format("boot/vmlinux", elf(62), "firecracker", "arm64")


def test_a_gzipped_arm64_image_is_decompressed_as_debian_installs_it():
    image = bytearray(4096)
    image[56:60] = b"ARMd"
    packed = gzip.compress(bytes(image), mtime=0)
    assert microvm.kernel_kind(packed) == "compressed" and microvm.needs_extraction("compressed")
    assert extract(packed, "boot/vmlinuz-5.10.77") == ("gzip", bytes(image))
    with pytest.raises(
        Refusal, match=r"kernel /boot/vmlinuz-5.10.77: is compressed: no payload decompressed"
    ):
        extract(gzip.compress(b"text" * 100), "boot/vmlinuz-5.10.77")


def test_an_arm64_image_ships_as_is_for_arm64_only():
    image = bytearray(4096)
    image[56:60] = b"ARMd"
    assert microvm.kernel_kind(bytes(image)) == "arm64-image"
    assert microvm.check_kernel_format("boot/vmlinux", bytes(image), "firecracker", "arm64") == "arm64-image"
    with pytest.raises(Refusal, match="is an arm64 Image, not a kernel for architecture amd64"):
        microvm.check_kernel_format("boot/vmlinux", bytes(image), "firecracker", "amd64")


def test_without_the_vmlinux_the_distributions_vmlinuz_of_the_version_is_taken():
    tree = merged_usr({"boot/vmlinuz-5.10.77": "file:100"})
    del tree["boot/vmlinux"]
    assert microvm.locate_kernel(tree, None, "firecracker", V) == "boot/vmlinuz-5.10.77"
    with pytest.raises(
        Refusal,
        match=r"kernel /boot/vmlinux: is not a file in the root filesystem, nor is /boot/vmlinuz-5.15.65",
    ):
        microvm.locate_kernel(tree, None, "firecracker", "5.15.65")
    with pytest.raises(Refusal, match=r"kernel /boot/vmlinux: is not a file"):
        microvm.locate_kernel(tree, "boot/vmlinux", "firecracker", V)


def test_the_extracted_vmlinux_replaces_the_kernel_members_data():
    entries = [microvm.Entry("boot", "dir"), microvm.Entry("boot/vmlinux", "file", size=10, inum=7, nlink=2)]
    found = microvm.with_data(entries, "boot/vmlinux", 99, -1)
    assert [(e.path, e.size, e.inum, e.nlink) for e in found] == [
        ("boot", 0, 0, 1),
        ("boot/vmlinux", 99, -1, 1),
    ]
    assert entries[1].size == 10


# What each image holds ----------------------------------------------------------------------------


def test_split_puts_each_file_in_one_image():
    tree = merged_usr()
    parts = microvm.split(tree, V, "boot/vmlinux", "boot/vmlinux", "boot/config-" + V)
    assert [e.path for e in parts["kernel"]] == ["boot", "boot/config-" + V, "boot/vmlinux"]
    assert [e.path for e in parts["modules"]] == ["kernel", "kernel/ext4.ko", "modules.dep"]
    rootfs = [e.path for e in parts["rootfs"]]
    assert "boot/vmlinux" not in rootfs and "boot/config-" + V not in rootfs
    assert "usr/lib/modules/%s" % V in rootfs  # the mount point stays, empty
    assert not [p for p in rootfs if p.startswith("usr/lib/modules/%s/" % V)]
    assert "boot/initrd.img-" + V in rootfs and parts["removed"] == {}
    assert parts["dropped"] == {"kernel": 4200, "modules": 730}


def test_other_kernels_modules_ship_nowhere():
    tree = merged_usr({"usr/lib/modules/4.19.0": "dir", "usr/lib/modules/4.19.0/old.ko": "file:10"})
    parts = microvm.split(tree, V, "boot/vmlinux", "boot/vmlinux")
    everywhere = [e.path for name in ("kernel", "modules", "rootfs") for e in parts[name]]
    assert not [p for p in everywhere if "4.19.0" in p]


def test_slim_removes_files_per_group_and_keeps_directories_and_listed_locales():
    tree = merged_usr()
    groups = ["apt", "docs", "locales", "kernel", "firmware", "container_images"]
    parts = microvm.split(tree, V, "boot/vmlinux", "boot/vmlinux", "boot/config-" + V, groups)
    assert parts["removed"] == {
        "apt": 900,
        "docs": 600,
        "locales": 80,
        "kernel": 3000,
        "firmware": 5000,
        "container_images": 7000,
    }
    rootfs = [e.path for e in parts["rootfs"]]
    assert "usr/share/locale/en_GB/x.mo" in rootfs and "usr/share/locale/locale.alias" in rootfs
    assert "usr/share/doc/bash" in rootfs and "var/cache/apt" in rootfs
    assert "usr/lib/firmware/gpu.bin" not in rootfs


def test_slim_does_not_count_a_file_that_a_kept_hard_link_keeps():
    tree = merged_usr()
    tree["usr/share/doc/bash/README"].inum = tree["usr/bin/true"].inum = 99
    tree["usr/share/doc/bash/README"].nlink = tree["usr/bin/true"].nlink = 2
    parts = microvm.split(tree, V, "boot/vmlinux", "boot/vmlinux", slim_groups=["docs"])
    assert parts["removed"] == {"docs": 0}


def test_an_unknown_slim_group_is_refused():
    with pytest.raises(Refusal, match="slim group 'cache': is not a slim group; choose from: apt"):
        microvm.slim_roots(merged_usr(), ["cache"])


def test_modules_image_root_appears_under_the_mount_point():
    parts = microvm.split(merged_usr(), V, "boot/vmlinux", "boot/vmlinux")
    seen = microvm.check_modules_layout(parts["modules"], V, "/lib/modules/" + V)
    assert "/lib/modules/%s/kernel/ext4.ko" % V in seen


def test_a_nested_modules_layout_is_refused():
    nested = [Entry("lib/modules/%s/kernel/ext4.ko" % V, "file")]
    with pytest.raises(
        Refusal, match=r"would appear at /lib/modules/5.10.77/lib/modules/5.10.77 in the guest"
    ):
        microvm.check_modules_layout(nested, V, "/lib/modules/" + V)


def test_a_modules_mount_point_elsewhere_is_refused():
    with pytest.raises(Refusal, match=r"is not /lib/modules/5\.10\.77"):
        microvm.check_modules_layout([], V, "/lib/modules")


# Tar members --------------------------------------------------------------------------------------


def test_members_are_sorted_with_hard_links_clamped_mtimes_and_no_sockets_or_devices():
    entries = [
        Entry("usr/bin/b", "file", mode=0o104755, size=5, inum=7, nlink=2, mtime=2000),
        Entry("usr/bin/a", "file", mode=0o100755, size=5, inum=7, nlink=2, mtime=2000),
        Entry("usr", "dir", mode=0o41777, mtime=10),
        Entry("run/sock", "socket"),
        Entry("dev/null", "char", rdev=(1, 3)),
        Entry("etc/x", "symlink", link="../usr/bin/a", xattrs={"user.b": b"2", "user.a": b"1"}),
    ]
    members, skipped = microvm.tar_members(entries, deterministic=True, epoch=1000)
    assert [m["name"] for m in members] == ["etc/x", "usr", "usr/bin/a", "usr/bin/b"]
    assert skipped == ["dev/null (char)", "run/sock (socket)"]
    by = {m["name"]: m for m in members}
    assert by["usr/bin/a"]["type"] == "file" and by["usr/bin/a"]["size"] == 5
    assert by["usr/bin/b"]["type"] == "hardlink" and by["usr/bin/b"]["linkname"] == "usr/bin/a"
    assert by["usr/bin/b"]["mode"] == 0o4755 and by["usr"]["mode"] == 0o1777
    assert by["usr"]["mtime"] == 10 and by["usr/bin/a"]["mtime"] == 1000
    assert list(by["etc/x"]["xattrs"]) == ["user.a", "user.b"]
    assert microvm.content_bytes(members) == 5
    with_devices = microvm.tar_members(entries, devices=True)[0]
    assert "dev/null" in [m["name"] for m in with_devices]
    kept = microvm.tar_members(entries, deterministic=False)[0]
    assert {m["name"]: m["mtime"] for m in kept}["usr/bin/a"] == 2000


# OCI documents, references, fragments -------------------------------------------------------------


def test_documents_are_canonical():
    config = microvm.image_config("sha256:aa", microvm.created_at(True, 0), labels={"b": "1"})
    assert microvm.canonical(config).startswith(
        b'{"architecture":"amd64","config":{"Labels":{"b":"1"}},"created":"1970-01-01T00:00:00Z"'
    )
    manifest = microvm.image_manifest(
        microvm.descriptor(microvm.MEDIA_CONFIG, "sha256:c", 2),
        microvm.descriptor(microvm.MEDIA_LAYER, "sha256:l", 3),
    )
    assert manifest["layers"][0]["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"


def test_merge_index_replaces_our_tags_and_keeps_others():
    existing = {
        "manifests": [
            {"digest": "sha256:old", "annotations": {microvm.REF_NAME: "kernel"}},
            {"digest": "sha256:other", "annotations": {microvm.REF_NAME: "custom"}},
        ]
    }
    index = microvm.merge_index(existing, {"kernel": {"digest": "sha256:new", "size": 1, "mediaType": "m"}})
    assert [(e["annotations"][microvm.REF_NAME], e["digest"]) for e in index["manifests"]] == [
        ("custom", "sha256:other"),
        ("kernel", "sha256:new"),
    ]
    assert (
        microvm.merge_index(index, {"kernel": {"digest": "sha256:new", "size": 1, "mediaType": "m"}}) == index
    )


def test_layout_tags_refusals():
    assert microvm.layout_tags({"rootfs": "ubuntu"})["rootfs"] == "ubuntu"
    with pytest.raises(
        Refusal, match=r"tags\.initramfs: is not one of the images; use kernel, modules, rootfs or initrd"
    ):
        microvm.layout_tags({"initramfs": "x"})
    with pytest.raises(Refusal, match="is not a valid OCI tag"):
        microvm.layout_tags({"kernel": "a b"})
    with pytest.raises(Refusal, match="name two images the same"):
        microvm.layout_tags({"kernel": "modules"})


def test_registry_url_reads_host_port_as_https():
    assert microvm.registry_url("registry.example.com:5000") == "https://registry.example.com:5000/"
    assert microvm.registry_url("u:pw@registry.example.com") == "https://u:pw@registry.example.com/"
    assert microvm.registry_url("http://u:pw@127.0.0.1:5000") == "http://u:pw@127.0.0.1:5000"


def test_parse_registry():
    assert microvm.parse_registry("registry.example.com:5000") == ("https", "registry.example.com:5000")
    assert microvm.parse_registry("http://127.0.0.1:5000/") == ("http", "127.0.0.1:5000")
    with pytest.raises(Refusal, match="would receive the password over plain HTTP"):
        microvm.parse_registry("http://127.0.0.1:5000", has_credentials=True)
    with pytest.raises(Refusal, match="is not host"):
        microvm.parse_registry("registry.example.com/flintlock")
    with pytest.raises(Refusal, match="is neither http"):
        microvm.parse_registry("ftp://x")


def test_repository_names():
    assert microvm.check_repository("liquidmetal/ubuntu-2204") == "liquidmetal/ubuntu-2204"
    with pytest.raises(Refusal, match="is not an OCI repository name"):
        microvm.check_repository("Liquidmetal/Ubuntu")


def test_fragments_always_set_the_kernel_filename_and_mount_the_modules():
    refs = microvm.references("r:5000", "lm/ubuntu", V, microvm.layout_tags())
    assert refs["modules"] == "r:5000/lm/ubuntu/modules:5.10.77"
    spec = microvm.microvm_spec(refs, "boot/vmlinux", V)
    assert spec["kernel"] == {
        "image": "r:5000/lm/ubuntu/kernel:5.10.77",
        "filename": "boot/vmlinux",
        "add_network_config": True,
    }
    assert spec["root_volume"]["source"] == {"container_source": "r:5000/lm/ubuntu/rootfs:5.10.77"}
    assert spec["additional_volumes"][0]["mount_point"] == "/lib/modules/5.10.77"
    capmvm = microvm.capmvm_template(refs, "boot/vmlinux", V)
    assert capmvm["kernel"]["filename"] == "boot/vmlinux"
    assert capmvm["volumes"] == [
        {"id": "modules", "image": refs["modules"], "mountPoint": "/lib/modules/5.10.77"}
    ]


def test_the_compression_level_is_a_gzip_level():
    assert microvm.check_compression_level(9) == 9
    for level in (0, 10):
        with pytest.raises(Refusal, match="compression_level %d: is not a gzip level; use 1" % level):
            microvm.check_compression_level(level)


def test_source_date_epoch_from_the_option_else_the_environment():
    assert microvm.source_date_epoch(5) == 5
    assert microvm.source_date_epoch(None, "1700000000") == 1700000000
    assert microvm.source_date_epoch(None, "") == 0 and microvm.source_date_epoch(None) == 0
    with pytest.raises(Refusal, match="SOURCE_DATE_EPOCH 'yesterday': is not a number of seconds"):
        microvm.source_date_epoch(None, "yesterday")
    with pytest.raises(Refusal, match="source_date_epoch -1: is before 1970"):
        microvm.source_date_epoch(-1)


def test_dest_is_empty_new_or_already_a_layout():
    microvm.check_dest_layout("/out", [], False)
    microvm.check_dest_layout("/out", ["index.json", "oci-layout", "blobs"], True)
    with pytest.raises(Refusal) as caught:
        microvm.check_dest_layout("/home/me", ["notes.txt"], False)
    assert caught.value.msg.startswith(
        "dest /home/me: is a non-empty directory that is not an OCI image layout (it holds notes.txt)"
    )


def test_require_sealed_refuses_naming_each_failed_check():
    checks = [
        {"name": "machine_id_empty", "passed": False, "evidence": "/etc/machine-id holds an id"},
        {"name": "ssh_host_keys_absent", "passed": True, "evidence": "none"},
    ]
    assert microvm.refuse_unsealed("disk.raw", checks, True, []) is None
    with pytest.raises(Refusal) as caught:
        microvm.refuse_unsealed("disk.raw", checks, False, ["machine_id_empty"])
    assert caught.value.msg.startswith(
        "root filesystem of disk.raw: fails the sealing checks machine_id_empty: /etc/machine-id holds an id;"
    )
    assert caught.value.result["hygiene"] == {
        "sealed": False,
        "failed": ["machine_id_empty"],
        "checks": checks,
    }


# A separate /boot partition ------------------------------------------------------------------------


def test_a_root_without_a_kernel_looks_for_a_boot_partition():
    assert microvm.needs_boot_partition(merged_usr()) is False
    empty_boot = tree_of({"boot": "dir", "etc": "dir"})
    assert microvm.needs_boot_partition(empty_boot) is True
    assert microvm.needs_boot_partition(empty_boot, "opt/vmlinux") is False


def test_the_boot_partition_is_chosen_by_type_then_name_then_size():
    root = part(3, kind="4f68bce3-e8cd-4db1-96e7-fbcaf984b709", size=900 * MIB)
    home = part(4, size=300 * MIB)
    small = part(5, size=200 * MIB)
    named = part(2, size=500 * MIB, name="boot")
    xbootldr = part(1, kind=microvm.XBOOTLDR_GPT, size=800 * MIB)
    esp = part(6, kind="c12a7328-f81f-11d2-ba4b-00a0c93ec93b", fs=None)
    assert microvm.choose_boot_partition("d.raw", [xbootldr, named, root, home, esp], root) is xbootldr
    assert microvm.choose_boot_partition("d.raw", [named, root, home, small], root) is named
    assert microvm.choose_boot_partition("d.raw", [root, home, small], root) is small
    twin = part(5, size=300 * MIB)
    with pytest.raises(
        Refusal, match=r"more than one partition could be /boot.*set boot_partition to the number"
    ):
        microvm.choose_boot_partition("d.raw", [root, home, twin], root)
    # The move the refusal names can be taken: boot_partition picks one of the twins.
    assert microvm.choose_boot_partition("d.raw", [root, home, twin], root, "5") is twin
    with pytest.raises(Refusal, match=r"boot_partition names the root partition"):
        microvm.choose_boot_partition("d.raw", [root, home, twin], root, "3")
    with pytest.raises(
        Refusal, match=r"partition 6 .*: boot_partition names .*; microvm_image reads a /boot"
    ):
        microvm.choose_boot_partition("d.raw", [root, esp], root, "6")
    with pytest.raises(
        Refusal,
        match=r"d.raw partition 3 .*: holds no kernel in /boot and no other partition holds a filesystem "
        r"microvm_image reads",
    ):
        microvm.choose_boot_partition("d.raw", [root, esp], root)


def test_a_label_two_partitions_carry_is_refused_not_taken_as_the_first():
    parts = [
        part(1, size=100 * MIB, name="boot"),
        part(2, size=900 * MIB),
        part(3, size=200 * MIB, name="boot"),
    ]
    for option, call in (
        ("partition", lambda: microvm.choose_partition("d.raw", parts, "boot")),
        ("boot_partition", lambda: microvm.choose_boot_partition("d.raw", parts, parts[1], "boot")),
    ):
        with pytest.raises(
            Refusal, match=r"%s 'boot' names more than one partition: partition 1.*partition 3" % option
        ):
            call()
    assert microvm.choose_boot_partition("d.raw", parts, parts[1], "3") is parts[2]


def test_a_boot_partition_is_seen_mounted_with_its_own_inode_numbers():
    boot = tree_of({"vmlinuz-5.10.77": "file:10", "vmlinuz": "->vmlinuz-5.10.77"})
    seen = microvm.mounted(boot, "boot", "b")
    assert sorted(seen) == ["boot", "boot/vmlinuz", "boot/vmlinuz-5.10.77"]
    assert seen["boot/vmlinuz-5.10.77"].inum == ("b", boot["vmlinuz-5.10.77"].inum)
    tree = dict(tree_of({"boot": "dir", "etc": "dir"}), **seen)
    assert microvm.locate_kernel(tree, None, "firecracker", V) == "boot/vmlinuz-5.10.77"
    assert microvm.resolve(tree, "boot/vmlinuz") == "boot/vmlinuz-5.10.77"


# The initrd image and the snippets -----------------------------------------------------------------


def test_the_initrd_of_the_kernel_version_ships_as_its_own_image():
    tree = merged_usr()
    assert microvm.locate_initrd(tree, V) == "boot/initrd.img-5.10.77"
    assert microvm.locate_initrd(tree, "5.15.65") is None
    rhel = tree_of({"boot": "dir", "boot/initramfs-5.10.77.img": "file:77"})
    assert microvm.locate_initrd(rhel, V) == "boot/initramfs-5.10.77.img"
    # A name that links to the other is one initrd, not two.
    linked = tree_of(
        {
            "boot": "dir",
            "boot/initramfs-5.10.77.img": "file:77",
            "boot/initrd.img-5.10.77": "->initramfs-5.10.77.img",
        }
    )
    assert microvm.locate_initrd(linked, V) == "boot/initramfs-5.10.77.img"
    parts = microvm.split(tree, V, "boot/vmlinux", "boot/vmlinux", initrd_real="boot/initrd.img-5.10.77")
    assert [(e.path, e.size) for e in parts["initrd"]] == [("boot", 0), ("boot/initrd.img", 3000)]
    assert "boot/initrd.img-5.10.77" not in [e.path for e in parts["rootfs"]]
    assert microvm.images_of(parts) == ("kernel", "modules", "rootfs", "initrd")
    assert microvm.images_of(microvm.split(tree, V, "boot/vmlinux", "boot/vmlinux")) == microvm.IMAGE_NAMES
    assert microvm.layout_tags({"initrd": "ramdisk"})["initrd"] == "ramdisk"


@pytest.mark.parametrize(
    "spec, words",
    [
        ({"boot/initrd.img-5.10.77": "->initrd.img-5.10.77.gone"}, "is a symlink to initrd.img-5.10.77.gone"),
        ({"boot/initramfs-5.10.77.img": "dir"}, "is a dir, not a regular file"),
        (
            {"boot/initrd.img-5.10.77": "file:5", "boot/initramfs-5.10.77.img": "file:7"},
            "has two initrds, /boot/initrd.img-5.10.77 and /boot/initramfs-5.10.77.img",
        ),
    ],
)
def test_an_initrd_is_never_dropped_or_chosen_silently(spec, words):
    with pytest.raises(Refusal) as refused:
        microvm.locate_initrd(tree_of(dict({"boot": "dir"}, **spec)), V)
    assert words in str(refused.value), str(refused.value)


def test_without_a_registry_the_snippets_name_no_image_containerd_would_misread():
    refs = microvm.references(None, None, V, microvm.layout_tags())
    assert refs["kernel"] == "kernel"  # the layout tag, which containerd reads as docker.io/library/kernel
    spec = microvm.microvm_spec(None, "boot/vmlinux", V, sizes={"rootfs": 900, "modules": 80}, initrd=True)
    assert spec["kernel"] == {"filename": "boot/vmlinux", "add_network_config": True}
    assert spec["root_volume"] == {"id": "root", "is_read_only": False, "source": {}, "size_in_mb": 900}
    assert spec["additional_volumes"][0]["size_in_mb"] == 80
    assert "container_source" not in spec["additional_volumes"][0]["source"]
    assert spec["initrd"] == {"filename": "boot/initrd.img"}
    capmvm = microvm.capmvm_template(None, "boot/vmlinux", V, initrd=True)
    assert capmvm == {
        "kernel": {"filename": "boot/vmlinux"},
        "rootVolume": {"id": "root"},
        "volumes": [{"id": "modules", "mountPoint": "/lib/modules/5.10.77"}],
        "initrd": {"filename": "boot/initrd.img"},
    }
    assert "docker.io/library" in microvm.SNIPPET_NOTE


def test_a_volume_is_sized_for_its_files_and_the_filesystem():
    assert microvm.volume_size_mb(0) == 64
    assert microvm.volume_size_mb(100 * MIB) == 184
    assert microvm.volume_size_mb(100 * MIB + 1) == 185


def test_a_dest_that_is_not_a_directory_is_refused_naming_it():
    microvm.check_dest_kind("/srv/oci", "directory")
    microvm.check_dest_kind("/srv/oci", "missing")
    with pytest.raises(
        Refusal,
        match=r"dest /srv/oci: is a regular file, not a directory; an OCI image layout is a directory; "
        r"point dest at an empty or new directory",
    ):
        microvm.check_dest_kind("/srv/oci", "a regular file")


def test_a_directory_and_a_truncated_image_are_named_as_such():
    microvm.check_source("/srv/disk.raw", False)
    with pytest.raises(
        Refusal, match=r"src /srv/tree: is a directory, not a disk image; pass the raw or qcow2"
    ):
        microvm.check_source("/srv/tree", True)
    parts = [part(1, size=8 * MIB), part(2, size=100 * MIB)]
    parts[0]["offset"], parts[1]["offset"] = MIB, 9 * MIB
    microvm.check_within("d.raw", parts, 109 * MIB)
    with pytest.raises(
        Refusal,
        match=r"d.raw partition 2 .*: the image ends at byte 52428800, before the partition "
        r"\(bytes 9437184 to 114294784\); the image is truncated",
    ):
        microvm.check_within("d.raw", parts, 50 * MIB)


# Sparse files -------------------------------------------------------------------------------------


def sparse_parts():
    big = Entry("var/big.img", "file", size=4 << 30, inum=20, nlink=2)
    big.holes = 4 << 30
    again = Entry("srv/big-again.img", "file", size=4 << 30, inum=20, nlink=2)
    again.holes = 4 << 30
    small = Entry("usr/lib/libx.so", "file", size=1 << 20, inum=21)
    small.holes = 8192
    module = Entry("kernel/x.ko", "file", size=64 << 20, inum=22)
    module.holes = 32 << 20
    plain = Entry("etc/hostname", "file", size=5, inum=23)
    return {
        "kernel": [],
        "modules": [module],
        "rootfs": [Entry("var", "dir"), big, again, small, plain],
        "removed": {},
        "dropped": {},
    }


def test_sparse_files_are_those_with_holes_from_the_threshold_once_per_inode():
    found, small = microvm.sparse_files(sparse_parts(), 16 << 20)
    assert [(f["image"], f["path"], f["apparent_size"], f["allocated_size"]) for f in found] == [
        ("modules", "/kernel/x.ko", 64 << 20, 32 << 20),
        ("rootfs", "/srv/big-again.img", 4 << 30, 0),
    ]
    assert small == {"files": 1, "hole_bytes": 8192}
    assert len(microvm.sparse_files(sparse_parts(), 0)[0]) == 3


def test_refuse_names_each_sparse_file_with_its_sizes_and_the_moves():
    found, _small = microvm.sparse_files(sparse_parts(), 16 << 20)
    with pytest.raises(Refusal) as refused:
        microvm.apply_sparse_policy("disk.raw", sparse_parts(), found, "refuse")
    message = str(refused.value)
    assert message.startswith("disk.raw holds sparse files: /kernel/x.ko (modules image, 67108864 bytes, ")
    assert "/srv/big-again.img (rootfs image, 4294967296 bytes, 0 allocated)" in message
    assert "sparse_files to write" in message and "exclude" in message and "sparse_threshold" in message
    assert [f["path"] for f in refused.value.result["sparse_files"]] == ["/kernel/x.ko", "/srv/big-again.img"]
    assert "inum" not in refused.value.result["sparse_files"][0]


def test_exclude_drops_every_name_of_a_sparse_inode_and_write_keeps_them():
    parts = sparse_parts()
    found, _small = microvm.sparse_files(parts, 16 << 20)
    kept, left_out = microvm.apply_sparse_policy("disk.raw", parts, found, "exclude")
    assert [e.path for e in kept["rootfs"]] == ["var", "usr/lib/libx.so", "etc/hostname"]
    assert kept["modules"] == []
    assert left_out == [
        "kernel/x.ko (sparse, modules image)",
        "srv/big-again.img (sparse, rootfs image)",
        "var/big.img (sparse, rootfs image)",
    ]
    assert microvm.apply_sparse_policy("disk.raw", parts, found, "write") == (parts, [])
    assert microvm.apply_sparse_policy("disk.raw", parts, [], "refuse") == (parts, [])


def test_a_negative_sparse_threshold_is_refused():
    with pytest.raises(Refusal, match="sparse_threshold -1: is negative"):
        microvm.check_sparse_threshold(-1)
    assert microvm.check_sparse_threshold(0) == 0


# The disk's architecture ---------------------------------------------------------------------------


def test_architecture_probes_follow_links_and_skip_scripts_and_repeats():
    tree = tree_of(
        {"usr": "dir", "usr/bin": "dir", "bin": "->usr/bin", "usr/bin/env": "file:10", "usr/bin/sh": "->env"}
    )
    assert microvm.architecture_probes(tree) == ["usr/bin/env"]
    assert microvm.architecture_probes(tree_of({"etc": "dir"})) == []


def test_module_probes_are_every_module_by_path_compressed_or_not():
    base = "usr/lib/modules/6.1"
    tree = tree_of(
        {
            base + "/kernel/c.ko.zst": "file:1",
            base + "/kernel/a.ko": "file:1",
            base + "/kernel/b.ko.xz": "file:1",
            base + "/kernel/d.ko": "file:1",
            base + "/modules.dep": "file:1",
            "usr/lib/modules/6.2/kernel/0.ko": "file:1",
        }
    )
    assert microvm.module_probes(tree, "usr/lib/modules", "6.1") == [
        base + "/kernel/a.ko",
        base + "/kernel/b.ko.xz",
        base + "/kernel/c.ko.zst",
        base + "/kernel/d.ko",
    ]
    assert [microvm.module_compression(p) for p in ("a.ko", "b.ko.xz", "c.ko.zst", "d.ko.gz")] == [
        None,
        "xz",
        "zstd",
        "gzip",
    ]


def test_the_disk_architecture_is_its_programs_machine():
    assert microvm.disk_architecture("d.raw", [("usr/bin/env", 183), ("sbin/init", None)]) == (
        "arm64",
        "/usr/bin/env",
    )
    assert microvm.disk_architecture("d.raw", [("usr/bin/env", 62)], "x86_64") == ("amd64", "/usr/bin/env")
    assert microvm.disk_architecture("d.raw", [("usr/bin/env", None)], "arm64") == ("arm64", None)


@pytest.mark.parametrize(
    "programs, requested, message",
    [
        (
            [("usr/bin/env", 62), ("sbin/init", 183)],
            None,
            "more than one architecture: /sbin/init is aarch64",
        ),
        (
            [("usr/bin/env", 62)],
            "arm64",
            r"is a disk for amd64 \(/usr/bin/env is x86_64\), not for architecture",
        ),
        ([("usr/bin/env", None)], None, "its architecture could not be read"),
        ([("usr/bin/env", 8)], None, "machine 8 \\(/usr/bin/env\\), an architecture flintlock does not run"),
    ],
)
def test_a_disk_architecture_that_cannot_be_trusted_is_refused(programs, requested, message):
    with pytest.raises(Refusal, match=message):
        microvm.disk_architecture("d.raw", programs, requested)


def elf_of(machine, bits=2):
    return b"\x7fELF" + bytes([bits]) + b"\x01\x01" + bytes(9) + struct.pack("<HH", 1, machine) + bytes(44)


def test_modules_of_another_architecture_are_refused():
    microvm.check_modules_architecture("6.1", [("a.ko", elf_of(62)), ("b.ko.xz", b"")], "amd64")
    with pytest.raises(
        Refusal, match=r"kernel modules 6.1: are not for architecture amd64: /b.ko.xz is aarch64 \(64-bit\)"
    ):
        microvm.check_modules_architecture("6.1", [("a.ko", elf_of(62)), ("b.ko.xz", elf_of(183))], "amd64")


@pytest.mark.parametrize(
    "architecture, head, named",
    [
        ("amd64", elf_of(3, bits=1), "i386 (32-bit)"),
        ("amd64", elf_of(62, bits=1), "x86_64 (32-bit)"),
        ("arm64", elf_of(40, bits=1), "arm (32-bit)"),
        ("arm64", elf_of(183, bits=1), "aarch64 (32-bit)"),
    ],
)
def test_a_module_of_the_32_bit_sibling_is_refused(architecture, head, named):
    good = elf_of(microvm.ELF_MACHINE[architecture])
    modules = [("m/%03d.ko" % n, good) for n in range(500)] + [("m/z.ko", head)]
    with pytest.raises(Refusal, match=r"/m/z.ko is %s" % re.escape(named)):
        microvm.check_modules_architecture("6.1", modules, architecture)


def test_a_refusal_lists_a_few_wrong_modules_and_counts_the_rest():
    modules = [("m/%d.ko" % n, elf_of(3, bits=1)) for n in range(8)]
    with pytest.raises(Refusal, match=r"/m/4.ko is i386 \(32-bit\) and 3 more"):
        microvm.check_modules_architecture("6.1", modules, "amd64")


def test_only_the_header_of_a_compressed_module_is_decompressed():
    import io

    body = elf_of(183) + bytes(64 * 1024 * 1024)
    for name, packed in (
        ("a.ko.xz", lzma.compress(body, format=lzma.FORMAT_XZ)),
        ("a.ko.gz", gzip.compress(body)),
        ("a.ko.zst", zstd.compress(body)),
    ):
        fh = io.BytesIO(packed)
        assert _kernel.elf_head(fh, name) == elf_of(183)[:64]
        assert fh.tell() <= 64 * 1024, (name, fh.tell())


def test_a_compressed_modules_elf_header_is_read_after_decompression():
    import io

    header = b"\x7fELF\x02\x01\x01" + bytes(9) + b"\x01\x00\xb7\x00" + bytes(100)
    packed = lzma.compress(header, format=lzma.FORMAT_XZ)
    assert microvm.elf_machine(_kernel.elf_head(io.BytesIO(packed), "x/a.ko.xz")) == 183
    assert microvm.elf_machine(_kernel.elf_head(io.BytesIO(gzip.compress(header)), "x/a.ko.gz")) == 183
    assert microvm.elf_machine(_kernel.elf_head(io.BytesIO(header), "x/a.ko")) == 183
    assert _kernel.elf_head(io.BytesIO(b"not xz"), "x/a.ko.xz") == b""


def test_the_report_names_every_image_the_architecture_and_the_verdict():
    image = {"reference": "r/%s:1", "digest": "sha256:d", "size": 10, "content_bytes": 30}
    result = {
        "kernel_version": "6.1",
        "architecture": {"name": "arm64", "read_from": None},
        "kernel": dict(image, reference="r/kernel:1"),
        "rootfs": dict(image, reference="r/rootfs:1"),
        "initrd": dict(image, reference="r/initrd:1"),
        "sizes": {"source_bytes": 100, "rootfs_bytes": 60},
        "removed": {"docs": 40},
        "hygiene": {"sealed": False, "failed": ["ssh_host_keys_absent"]},
    }
    assert microvm.report(result) == [
        "kernel 6.1 for arm64 (read from the architecture option)",
        "kernel: r/kernel:1 sha256:d (10 bytes compressed, 30 bytes of files)",
        "rootfs: r/rootfs:1 sha256:d (10 bytes compressed, 30 bytes of files)",
        "initrd: r/initrd:1 sha256:d (10 bytes compressed, 30 bytes of files)",
        'root filesystem: 100 bytes of files before slim, 60 after; removed per group: {"docs":40}',
        "sealing hygiene: failed ssh_host_keys_absent",
    ]


def test_cosign_signature_images_have_cosigns_tags_media_types_and_annotations():
    digest = "sha256:" + "a" * 64
    assert microvm.cosign_tag(digest, microvm.SIGNATURE_SUFFIX) == "sha256-%s.sig" % ("a" * 64)
    assert microvm.cosign_tag(digest, microvm.ATTESTATION_SUFFIX) == "sha256-%s.att" % ("a" * 64)
    sig = microvm.cosign_layer(microvm.MEDIA_SIMPLE_SIGNING, digest, 10, signature="MEUC")
    att = microvm.cosign_layer(
        microvm.MEDIA_DSSE, digest, 10, predicate_type="https://slsa.dev/provenance/v1"
    )
    assert sig["mediaType"] == "application/vnd.dev.cosign.simplesigning.v1+json"
    assert sig["annotations"] == {"dev.cosignproject.cosign/signature": "MEUC"}
    assert att["mediaType"] == "application/vnd.dsse.envelope.v1+json"
    assert att["annotations"] == {
        "dev.cosignproject.cosign/signature": "",
        "predicateType": "https://slsa.dev/provenance/v1",
    }
    config = microvm.cosign_config([sig, att])
    assert config["rootfs"]["diff_ids"] == [digest, digest] and config["os"] == ""
    manifest = microvm.cosign_manifest(microvm.descriptor(microvm.MEDIA_CONFIG, digest, 2), [sig, att])
    assert manifest["mediaType"] == microvm.MEDIA_MANIFEST
    assert microvm.cosign_layers(manifest, microvm.MEDIA_DSSE) == [att]
    assert microvm.cosign_layers(None, microvm.MEDIA_DSSE) == []
    assert microvm.layer_signature(sig) == "MEUC" and microvm.layer_signature({}) == ""


def test_signing_or_verifying_needs_a_registry():
    microvm.check_signing_target(False, False, False)
    microvm.check_signing_target(True, True, True)
    with pytest.raises(Refusal, match=r"^signing_key: .*give registry and repository"):
        microvm.check_signing_target(True, False, False)
    with pytest.raises(Refusal, match=r"^trust_policy: "):
        microvm.check_signing_target(False, True, False)


def test_an_entry_name_is_one_path_component():
    microvm.check_entry_name(2, "etc", "hostname")
    for name in ("../../x", "a/b", "nul\x00"):
        with pytest.raises(Refusal, match=r"^partition 2: directory /etc holds an entry named"):
            microvm.check_entry_name(2, "etc", name)


def test_a_directory_is_walked_once():
    seen = {}
    microvm.check_directory_once(1, "srv/a", 12, seen)
    microvm.check_directory_once(1, "srv/b", 13, seen)
    with pytest.raises(Refusal, match=r"directory /srv/a/b/loop is directory /srv/a again \(inode 12\)"):
        microvm.check_directory_once(1, "srv/a/b/loop", 12, seen)


def test_a_payload_past_the_bound_is_refused_not_cut():
    kernel = elf() + bytes(3 * 1024 * 1024)
    packed = bzimage(gzip.compress(kernel, mtime=0))
    assert extract(packed, "boot/vmlinuz-5.10.77", limit=len(kernel)) == ("gzip", kernel)
    with pytest.raises(
        Refusal,
        match=r"kernel /boot/vmlinuz-5.10.77: its gzip payload decompresses to more than 1 MiB, larger than",
    ):
        extract(packed, "boot/vmlinuz-5.10.77", limit=1024 * 1024)


@pytest.mark.parametrize(
    "name,compress", [("gzip", gzip.compress), ("xz", lzma.compress), ("bzip2", bz2.compress)]
)
def test_the_extraction_streams_in_bounded_memory(name, compress):
    import tracemalloc

    # 40 MiB of vmlinux from a payload of a few hundred KiB: the output goes to the file as it comes.
    kernel_size = elf() + bytes(40 * 1024 * 1024)
    packed = bzimage(compress(kernel_size))
    del kernel_size

    class Counting:
        size = 0

        def seek(self, offset):
            pass

        def truncate(self):
            self.size = 0

        def write(self, piece):
            self.size += len(piece)

        def flush(self):
            pass

    out = Counting()
    tracemalloc.start()
    try:
        found = _kernel.extract_vmlinux(packed, "boot/vmlinuz-5.10.77", out)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert found == (name, len(elf()) + 40 * 1024 * 1024, V)
    assert peak < 24 * 1024 * 1024, peak


def test_the_banner_is_found_across_pieces():
    scan = microvm.BannerScan()
    banner = b"Linux version 6.1.0-18-cloud-amd64 (debian-kernel@lists) (gcc) #1"
    assert scan.feed(b"x" * 1000 + banner[:20]) is None
    assert scan.feed(banner[20:]) == "6.1.0-18-cloud-amd64"


def test_an_elf_without_the_linux_banner_is_not_a_kernel():
    microvm.check_linux_kernel("boot/vmlinux", "elf", V)
    with pytest.raises(
        Refusal,
        match=r"kernel /boot/vmlinux: is an ELF without the 'Linux version ' banner every Linux kernel",
    ):
        microvm.check_linux_kernel("boot/vmlinux", "elf", None)
    with pytest.raises(Refusal, match=r"is an arm64 Image without the 'Linux version ' banner"):
        microvm.check_linux_kernel("boot/Image", "arm64-image", None)


@pytest.mark.parametrize("path", ["/boot/../etc/shadow", "../vmlinux", "boot/x/../../vmlinux"])
def test_a_kernel_path_with_dotdot_is_refused(path):
    with pytest.raises(Refusal, match=r"kernel_path %s: has a '\.\.' component" % re.escape(path)):
        microvm.check_kernel_path(path)


@pytest.mark.parametrize("path", [None, "", "/boot/vmlinuz-6.1", "/lib/modules/6.1/vmlinuz", "boot/..x"])
def test_a_kernel_path_without_dotdot_is_taken(path):
    microvm.check_kernel_path(path)


def test_a_layout_index_is_checked_before_a_write():
    assert microvm.layout_index("/d", None) is None
    good = b'{"schemaVersion":2,"manifests":[{"digest":"sha256:00","size":1}]}'
    assert microvm.layout_index("/d", good)["manifests"][0]["digest"] == "sha256:00"
    for bad in (b"{", b"[]", b'{"manifests":{}}', b'{"manifests":[1]}', b"\xff"):
        with pytest.raises(Refusal, match=r"dest /d/index.json: is not an OCI image index"):
            microvm.layout_index("/d", bad)


def test_snippets_name_images_by_digest_and_moves_are_listed():
    refs = {"kernel": "r.io/u/kernel:6.1", "rootfs": "r.io:5000/u/rootfs:6.1", "initrd": "r.io/u/initrd:6.1"}
    assert microvm.pinned(refs, {"kernel": "sha256:aa", "rootfs": "sha256:bb"}) == {
        "kernel": "r.io/u/kernel@sha256:aa",
        "rootfs": "r.io:5000/u/rootfs@sha256:bb",
    }
    before = {"a:1": "sha256:old", "b:1": "sha256:same", "c:1": None}
    after = {"a:1": "sha256:new", "b:1": "sha256:same", "c:1": "sha256:first"}
    assert microvm.tag_moves("registry", before, after) == [
        {"where": "registry", "tag": "a:1", "from": "sha256:old", "to": "sha256:new"}
    ]


def _group(*lvs, pv="pv0"):
    return {
        "name": "rl",
        "extent_bytes": 4 << 20,
        "pv": pv,
        "pe_start_bytes": 1 << 20,
        "pv_count": 1,
        "lvs": list(lvs),
    }


def _lv(name, *segments, visible=True):
    return {"name": name, "visible": visible, "segments": list(segments)}


def _seg(start, count, stripes=(("pv0", 0),), kind="striped"):
    return {"type": kind, "start_extent": start, "extent_count": count, "stripes": list(stripes)}


def test_a_linear_logical_volume_is_a_run_of_its_physical_volume():
    part = {"number": 3, "offset": 10 << 20, "size": 100 << 20}
    (root,) = microvm.volume_partitions(part, _group(_lv("root", _seg(0, 5, [("pv0", 7)]))))
    assert root["number"] == root["name"] == "rl/root" and root["volume_of"] == 3
    assert (root["offset"], root["size"]) == ((10 << 20) + (1 << 20) + 7 * (4 << 20), 5 * (4 << 20))
    assert root["type"] == "lvm" and "why" not in root and microvm._root_rank(root) == 1


@pytest.mark.parametrize(
    "volume, why",
    [
        (_lv("two", _seg(0, 1), _seg(1, 1, [("pv0", 4)])), "of 2 segments"),
        (_lv("thin", _seg(0, 1, [], kind="thin")), "of type thin"),
        (_lv("wide", _seg(0, 2, [("pv0", 0), ("pv0", 8)])), "striped over 2 physical volumes"),
        (_lv("away", _seg(0, 2, [("pv1", 0)])), "on physical volume pv1, not this partition's"),
    ],
)
def test_other_logical_volumes_are_listed_with_why_they_are_not_read(volume, why):
    part = {"number": 3, "offset": 0, "size": 1 << 30}
    (entry,) = microvm.volume_partitions(part, _group(volume, _lv("pool_tdata", _seg(0, 1), visible=False)))
    assert entry["why"] == why and not microvm.reads(entry)
    assert microvm.holds(entry) == "is a logical volume %s, which is not read" % why


def test_a_root_chosen_among_several_candidates_is_said_with_the_others():
    def part(number, size, filesystem="ext"):
        return {
            "number": number,
            "size": size << 20,
            "type": microvm.LINUX_MBR,
            "name": "",
            "filesystem": filesystem,
        }

    boot, data, root = part(1, 512), part(2, 4096), part(3, 2048)
    chosen = microvm.choose_partition("disk.raw", [boot, data, root])
    assert chosen is data  # the largest: what the note is there to show
    note = microvm.root_choice_note([boot, data, root], chosen)
    assert note.startswith("partition 2 (type 0x83, 4096 MiB, ext) was read as the root filesystem")
    assert "partition 1 (type 0x83, 512 MiB, ext); partition 3 (type 0x83, 2048 MiB, ext)" in note
    assert note.endswith("set partition to read another")
    assert microvm.root_choice_note([boot, data, root], root, "3") is None
    assert microvm.root_choice_note([part(1, 64, "vfat"), root], root) is None


# A root whose fstab mounts what the image needs at boot ------------------------------------------


def test_the_root_is_the_candidate_with_fstab_or_init_before_a_larger_one():
    parts = [part(1, size=40 * MIB), part(2, size=200 * MIB)]
    assert microvm.choose_partition("disk.raw", parts)["number"] == 2
    assert microvm.choose_partition("disk.raw", parts, rootlike={1})["number"] == 1
    assert microvm.choose_partition("disk.raw", parts, "2", rootlike={1})["number"] == 2


def test_fstab_lines_mounting_what_the_image_needs_at_boot_are_found():
    fstab = (
        "# comment\n"
        "UUID=1 / ext4 defaults 0 1\n"
        "/dev/mapper/vg-usr /usr ext4 defaults 0 2\n"
        "LABEL=var /var/ xfs defaults 0 2\n"
        "/dev/vg/lib /lib64 ext4 ro 0 2\n"
        "/dev/vg/data /srv ext4 defaults 0 2\n"
        "tmpfs /var tmpfs defaults 0 0\n"
        "/srv/usr /usr none bind 0 0\n"
        "UUID=2 none swap sw 0 0\n"
        "short line\n"
    )
    assert [where for _line, where in microvm.boot_mounts(fstab)] == ["/usr", "/var", "/lib64"]
    assert microvm.boot_mounts("UUID=1 / ext4 defaults 0 1\n/dev/sda2 /usrdata ext4 defaults 0 2\n") == []


def test_a_root_whose_fstab_mounts_usr_elsewhere_is_refused_naming_the_line_and_partition():
    microvm.check_root_mounts("d.raw", part(1), "UUID=1 / ext4 defaults 0 1\n")
    microvm.check_root_mounts("d.raw", part(1), None)
    with pytest.raises(Refusal) as refused:
        microvm.check_root_mounts("d.raw", part(1), "/dev/mapper/vg-usr /usr ext4 defaults 0 2\n")
    assert "/usr: '/dev/mapper/vg-usr /usr ext4 defaults 0 2'" in refused.value.msg
    assert refused.value.msg.startswith("d.raw partition 1")
    assert "set partition to" in refused.value.msg


@given(
    st.sampled_from(
        ["/usr", "/usr/local", "/usr/", "//usr", "/lib", "/lib64", "/bin", "/sbin", "/etc", "/var"]
    ),
    st.sampled_from(["ext4", "xfs", "btrfs", "auto"]),
    st.sampled_from(["/dev/mapper/vg-x", "/dev/vg/x", "UUID=abc", "LABEL=x", "PARTLABEL=x"]),
)
def test_any_disk_filesystem_at_a_boot_mount_point_is_refused(where, kind, device):
    with pytest.raises(Refusal):
        microvm.check_root_mounts("d.raw", part(1), "%s %s %s defaults 0 2\n" % (device, where, kind))
