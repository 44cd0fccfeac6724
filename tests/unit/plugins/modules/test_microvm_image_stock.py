"""microvm_image on stock distribution disks: a real Debian cloud kernel (a compressed bzImage as the
distribution installs it at /boot/vmlinuz-<version>) in ext4 made with ``mkfs.ext4 -d``, partitioned
with ``sgdisk``, read through the runner into an OCI layout.

The kernel package is downloaded once with ``apt-get download`` (the versioned package that
``linux-image-cloud-amd64`` depends on), unpacked with ``dpkg-deb -x`` into .cache/test-kernels and
reused from there.
"""

from __future__ import annotations

import gzip
import json
import lzma
import pathlib
import shutil
import subprocess
import tarfile

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.microvm import microvm
from ansible_collections.goldenimage.pipeline.plugins.modules import microvm_image

ROOT = pathlib.Path(__file__).resolve().parents[4]
KERNEL_CACHE = ROOT / ".cache" / "test-kernels"
META_PACKAGE = "linux-image-cloud-amd64"
MIB = 1024 * 1024
TOOLS = ("apt-get", "apt-cache", "dpkg-deb", "mkfs.ext4", "sgdisk", "dd")


def run(*command, cwd=None):
    proc = subprocess.run([str(c) for c in command], capture_output=True, text=True, check=False, cwd=cwd)
    assert proc.returncode == 0, "%s failed (%d): %s%s" % (
        command[0],
        proc.returncode,
        proc.stdout,
        proc.stderr,
    )
    return proc.stdout


def download_kernel_package():
    """``(package, folder)``: the versioned kernel package the meta package names, downloaded."""
    depends = run("apt-cache", "depends", META_PACKAGE)
    package = next(
        (
            line.split(":", 1)[1].strip()
            for line in depends.splitlines()
            if line.strip().startswith("Depends:") and "linux-image-" in line
        ),
        None,
    )
    assert package, "apt-cache depends %s names no linux-image package: %s" % (META_PACKAGE, depends)
    scratch = KERNEL_CACHE / (".download-" + package)
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    run("apt-get", "download", package, cwd=scratch)
    return package, scratch


@pytest.fixture(scope="session")
def stock_kernel():
    """``(boot folder, version)`` of the real kernel package, fetched and unpacked once."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    assert not missing, "missing tools (make setup installs them): %s" % ", ".join(missing)
    found = sorted(KERNEL_CACHE.glob("linux-image-*/boot/vmlinuz-*"))
    if not found:
        KERNEL_CACHE.mkdir(parents=True, exist_ok=True)
        try:
            package, scratch = download_kernel_package()
        except AssertionError:
            # A fresh machine's package lists may be empty, or name a version the mirror has replaced.
            run("apt-get", "update", "-qq")
            package, scratch = download_kernel_package()
        deb = next(scratch.glob("*.deb"))
        run("dpkg-deb", "-x", deb, scratch / "tree")
        (scratch / "tree").rename(KERNEL_CACHE / package)
        shutil.rmtree(scratch)
        found = sorted(KERNEL_CACHE.glob("linux-image-*/boot/vmlinuz-*"))
    vmlinuz = found[-1]
    return vmlinuz.parent, vmlinuz.name[len("vmlinuz-") :]


def write(root, files):
    for name, content in files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str) and content.startswith("->"):
            target.symlink_to(content[2:])
        else:
            target.write_bytes(content.encode() if isinstance(content, str) else content)
    return root


def stock_root(root, boot, version, with_boot=True, changes=None):
    """A Debian-like merged-/usr root; its /boot holds the distribution's files unless ``with_boot``
    is false (a separate /boot partition holds them)."""
    files = {
        "etc/machine-id": "",
        "etc/os-release": "ID=debian\nVERSION_ID=12\n",
        "usr/bin/env": pathlib.Path("/usr/bin/env").read_bytes(),
        "lib": "->usr/lib",
        "usr/lib/modules/%s/kernel/fs/ext4/ext4.ko" % version: b"\0" * 4096,
        "usr/lib/modules/%s/modules.dep" % version: "kernel/fs/ext4/ext4.ko:\n",
    }
    files.update(changes or {})
    write(root, files)
    (root / "boot").mkdir(exist_ok=True)
    if with_boot:
        for item in boot.iterdir():
            shutil.copy(item, root / "boot" / item.name)
    return root


def ext4(path, tree, size):
    run("mkfs.ext4", "-q", "-F", "-d", tree, path, "%dK" % (size // 1024))
    return path


class Module:
    check_mode = False
    _diff = False

    def __init__(self, **params):
        self.params = {name: spec.get("default") for name, spec in microvm_image.argument_spec().items()}
        self.params.update(params)

    def log(self, line):
        pass


def build(**params):
    return microvm_image.Runner(Module(**params)).run()


def layer_files(dest, result):
    """``{name: bytes}`` of the files in an image's one layer, read back from the layout."""
    blob = pathlib.Path(dest) / "blobs" / "sha256" / result["layer_digest"].split(":", 1)[1]
    with tarfile.open(fileobj=gzip.open(blob)) as archive:
        return {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}


@pytest.fixture(scope="module")
def whole_disk(stock_kernel, tmp_path_factory):
    boot, version = stock_kernel
    work = tmp_path_factory.mktemp("stock")
    tree = stock_root(work / "tree", boot, version)
    return ext4(work / "root.ext4", tree, 64 * MIB), version


def test_the_vmlinux_is_extracted_from_the_distributions_bzimage(whole_disk, tmp_path):
    disk, version = whole_disk
    result = build(src=str(disk), dest=str(tmp_path / "oci"))
    assert result["kernel_version"] == version
    assert result["kernel_source"]["path"] == "/boot/vmlinuz-%s" % version
    assert result["kernel_source"]["extracted"] in [entry[0] for entry in microvm.PAYLOAD_MAGIC]
    files = layer_files(tmp_path / "oci", result["kernel"])
    vmlinux = files["boot/vmlinux"]
    assert microvm.elf_machine(vmlinux[:64]) == 62
    assert microvm.banner_version(vmlinux) == version
    assert result["kernel"]["content_bytes"] == len(vmlinux) + len(files["boot/config-%s" % version])
    rootfs = layer_files(tmp_path / "oci", result["rootfs"])
    assert "boot/vmlinuz-%s" % version not in rootfs
    again = build(src=str(disk), dest=str(tmp_path / "oci"))
    assert again["changed"] is False and again["kernel"]["digest"] == result["kernel"]["digest"]


def elf(machine, kind=2):
    """A 64-bit little-endian ELF header: ``kind`` 2 a program, 1 a kernel module."""
    return (
        b"\x7fELF\x02\x01\x01"
        + bytes(9)
        + kind.to_bytes(2, "little")
        + machine.to_bytes(2, "little")
        + bytes(4096)
    )


def changed_disk(stock_kernel, tmp_path, changes):
    boot, version = stock_kernel
    tree = stock_root(tmp_path / "tree", boot, version, changes=changes)
    return ext4(tmp_path / "root.ext4", tree, 64 * MIB)


def test_the_architecture_is_read_from_the_disk_and_recorded(whole_disk, tmp_path):
    result = build(src=str(whole_disk[0]), dest=str(tmp_path / "oci"))
    assert result["architecture"] == {"name": "amd64", "read_from": "/usr/bin/env"}
    config = json.loads(
        (tmp_path / "oci" / "blobs" / "sha256" / result["rootfs"]["config_digest"][7:]).read_bytes()
    )
    assert config["architecture"] == "amd64"
    with pytest.raises(
        Refusal, match=r"is a disk for amd64 \(/usr/bin/env is x86_64\), not for architecture arm64"
    ):
        build(src=str(whole_disk[0]), dest=str(tmp_path / "never"), architecture="arm64")
    assert not (tmp_path / "never").exists()


def test_an_arm64_root_with_the_amd64_kernel_is_refused_as_mixed(stock_kernel, tmp_path):
    disk = changed_disk(stock_kernel, tmp_path, {"usr/bin/env": elf(183)})
    with pytest.raises(
        Refusal, match=r"kernel /boot/vmlinux: is an ELF for x86_64, not for architecture arm64"
    ):
        build(src=str(disk), dest=str(tmp_path / "never"))
    assert not (tmp_path / "never").exists()


def test_modules_of_another_architecture_are_refused_compressed_or_not(stock_kernel, tmp_path):
    version = stock_kernel[1]
    base = "usr/lib/modules/%s/kernel/" % version
    arm = lzma.compress(elf(183, kind=1), format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC32)
    disk = changed_disk(stock_kernel, tmp_path, {base + "crypto/aes.ko.xz": arm})
    with pytest.raises(
        Refusal,
        match=r"kernel modules %s: are not for architecture amd64: /%scrypto/aes.ko.xz is aarch64"
        % (version, base),
    ):
        build(src=str(disk), dest=str(tmp_path / "never"))
    assert not (tmp_path / "never").exists()


def test_programs_of_two_architectures_are_refused(stock_kernel, tmp_path):
    disk = changed_disk(stock_kernel, tmp_path, {"usr/sbin/init": elf(183), "sbin": "->usr/sbin"})
    with pytest.raises(
        Refusal,
        match=r"more than one architecture: /usr/bin/env is x86_64, /usr/sbin/init is aarch64",
    ):
        build(src=str(disk), dest=str(tmp_path / "never"))


def test_a_root_without_programs_needs_the_architecture_set(stock_kernel, tmp_path):
    disk = changed_disk(stock_kernel, tmp_path, {"usr/bin/env": b"#!/bin/sh\n"})
    with pytest.raises(Refusal, match=r"its architecture could not be read: none of /usr/bin/env, /bin/sh"):
        build(src=str(disk), dest=str(tmp_path / "never"))
    result = build(src=str(disk), dest=str(tmp_path / "oci"), architecture="amd64")
    assert result["architecture"] == {"name": "amd64", "read_from": None}


def split_boot_disk(path, boot_tree, root_tree):
    """A GPT disk (sgdisk): partition 1 an ext4 /boot of the XBOOTLDR type, partition 2 the x86-64 root."""
    boot_start, boot_sectors = 2048, 40 * MIB // 512
    root_start, root_sectors = boot_start + boot_sectors, 40 * MIB // 512
    run("truncate", "-s", str((root_start + root_sectors) * 512 + MIB), path)
    run(
        "sgdisk",
        "-n",
        "1:%d:%d" % (boot_start, boot_start + boot_sectors - 1),
        "-t",
        "1:ea00",
        "-c",
        "1:boot",
        "-n",
        "2:%d:%d" % (root_start, root_start + root_sectors - 1),
        "-t",
        "2:8304",
        "-c",
        "2:root",
        path,
    )
    for tree, start, sectors in (
        (boot_tree, boot_start, boot_sectors),
        (root_tree, root_start, root_sectors),
    ):
        part = ext4(path.with_suffix(".part"), tree, sectors * 512)
        run(
            "dd",
            "if=%s" % part,
            "of=%s" % path,
            "bs=1M",
            "seek=%d" % (start * 512),
            "oflag=seek_bytes",
            "conv=notrunc",
            "status=none",
        )
        part.unlink()
    return path


def test_the_kernel_comes_from_a_separate_boot_partition(stock_kernel, whole_disk, tmp_path):
    boot, version = stock_kernel
    root = stock_root(tmp_path / "root", boot, version, with_boot=False)
    disk = split_boot_disk(tmp_path / "split.raw", boot, root)
    result = build(src=str(disk), dest=str(tmp_path / "oci"))
    assert result["partition"]["number"] == 2
    assert result["boot_partition"]["number"] == 1 and result["boot_partition"]["name"] == "boot"
    assert result["kernel_source"]["path"] == "/boot/vmlinuz-%s" % version
    assert result["kernel_source"]["partition"] == 1
    files = layer_files(tmp_path / "oci", result["kernel"])
    assert sorted(files) == ["boot/config-%s" % version, "boot/vmlinux"]
    assert files["boot/config-%s" % version] == (boot / ("config-%s" % version)).read_bytes()
    # The same kernel as the one extracted from a root that holds /boot itself.
    alone = build(src=str(whole_disk[0]), dest=str(tmp_path / "alone"))
    assert result["kernel"]["digest"] == alone["kernel"]["digest"]
    assert result["kernel_source"]["extracted"] == alone["kernel_source"]["extracted"]
    assert not [name for name in layer_files(tmp_path / "oci", result["rootfs"]) if name.startswith("boot/")]
    # boot_partition names it (the move a tie of two /boot candidates gives); naming the root is refused.
    named = build(src=str(disk), dest=str(tmp_path / "oci"), boot_partition="boot")
    assert named["kernel"]["digest"] == result["kernel"]["digest"] and named["changed"] is False
    with pytest.raises(Refusal, match=r"boot_partition names the root partition"):
        build(src=str(disk), dest=str(tmp_path / "refused"), boot_partition="2")
    assert not (tmp_path / "refused").exists()


def test_an_initrd_becomes_an_image_and_the_layout_only_snippets_name_no_image(stock_kernel, tmp_path):
    boot, version = stock_kernel
    root = stock_root(tmp_path / "root", boot, version)
    initrd = b"070701" + bytes(8000)  # a newc cpio header, as update-initramfs writes
    write(root, {"boot/initrd.img-%s" % version: initrd, "boot/initrd.img-5.10.0-old": b"old"})
    disk = ext4(tmp_path / "root.ext4", root, 64 * MIB)
    result = build(src=str(disk), dest=str(tmp_path / "oci"))
    assert result["initrd"]["reference"] == "initrd" and result["initrd"]["content_bytes"] == len(initrd)
    assert layer_files(tmp_path / "oci", result["initrd"]) == {"boot/initrd.img": initrd}
    rootfs = layer_files(tmp_path / "oci", result["rootfs"])
    assert "boot/initrd.img-%s" % version not in rootfs and "boot/initrd.img-5.10.0-old" in rootfs
    index = json.loads((tmp_path / "oci" / "index.json").read_text())
    tags = sorted(m["annotations"]["org.opencontainers.image.ref.name"] for m in index["manifests"])
    assert tags == ["initrd", "kernel", "modules", "rootfs"]
    spec, capmvm = result["spec"], result["capmvm"]
    assert spec["initrd"] == {"filename": "boot/initrd.img"} and capmvm["initrd"] == {
        "filename": "boot/initrd.img"
    }
    assert "image" not in spec["kernel"] and spec["root_volume"]["source"] == {}
    assert "image" not in capmvm["rootVolume"] and "image" not in capmvm["volumes"][0]
    assert "docker.io/library" in result["snippet_note"]
    assert spec["root_volume"]["size_in_mb"] == microvm.volume_size_mb(result["rootfs"]["content_bytes"])
    assert spec["additional_volumes"][0]["size_in_mb"] == microvm.volume_size_mb(
        result["modules"]["content_bytes"]
    )
    assert result["sizes"]["shipped_separately"] == sum(
        result[n]["content_bytes"] for n in ("kernel", "modules", "initrd")
    )


def test_a_truncated_disk_and_a_directory_are_named_as_such(stock_kernel, tmp_path):
    boot, version = stock_kernel
    root = stock_root(tmp_path / "root", boot, version, with_boot=False)
    disk = split_boot_disk(tmp_path / "split.raw", boot, root)
    with open(disk, "r+b") as fh:
        fh.truncate(60 * MIB)  # inside the root partition, which ends after 82 MiB
    with pytest.raises(
        Refusal, match=r"partition 2 'root'.*: the image ends at byte 62914560, before the partition"
    ):
        build(src=str(disk), dest=str(tmp_path / "never"))
    with pytest.raises(Refusal, match=r"src %s: is a directory, not a disk image" % root):
        build(src=str(root), dest=str(tmp_path / "never"))
    assert not (tmp_path / "never").exists()
