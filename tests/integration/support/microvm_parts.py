"""Real parts for the micro-VM image tests and bench: a Linux root tree with the awkward entries,
ext4 made from it with ``mkfs.ext4 -d`` (owners and xattrs set with ``debugfs`` where the tree
cannot hold them without root), GPT and MBR disks (sgdisk, sfdisk), qcow2 (qemu-img), and a
``docker-registry`` on loopback with a temporary config (plain HTTP, or TLS with htpasswd).

Debian packages: e2fsprogs, gdisk, fdisk, qemu-utils, docker-registry, skopeo, umoci, attr, openssl.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import pathlib
import shutil
import socket
import stat
import subprocess
import time
import urllib.request

from tests.integration.support import disks

MIB = disks.MIB
VERSION = "5.10.77"
# Owners debugfs gives entries after mkfs (the tree is made by whoever runs the test).
OWNERS = {"home/dev": (1000, 1000), "home/dev/notes.txt": (1000, 1001), "usr/bin/sgid-tool": (0, 42)}
XATTR = ("user.microvm", b"kept")
OLD_MTIME = 1_000_000_000
TOOLS = (
    "mkfs.ext4",
    "debugfs",
    "sgdisk",
    "sfdisk",
    "qemu-img",
    "docker-registry",
    "skopeo",
    "umoci",
    "openssl",
)


def missing_tools() -> list[str]:
    return [tool for tool in TOOLS if shutil.which(tool) is None]


def elf_header(machine: int = 62, kind: int = 2) -> bytes:
    """A 64-bit little-endian ELF header: ``kind`` 2 an executable, 1 a relocatable (a kernel module)."""
    return b"\x7fELF\x02\x01\x01" + bytes(9) + kind.to_bytes(2, "little") + machine.to_bytes(2, "little")


def kernel_bytes(version: str = VERSION, size: int = 64 * 1024, machine: int = 62) -> bytes:
    """An ELF header (x86_64 unless told), padding, and the banner a real vmlinux carries in .rodata."""
    banner = b"Linux version %s (builder@liquidmetal) (gcc 12.2.0) #1 SMP\n" % version.encode()
    return elf_header(machine) + bytes(51) + os.urandom(size) + banner + bytes(1024)


def module_bytes(size: int, machine: int = 62) -> bytes:
    return elf_header(machine, kind=1) + os.urandom(size)


def module_files(version: str = VERSION) -> list[str]:
    base = "usr/lib/modules/%s/" % version
    return [base + "kernel/fs/ext4/ext4.ko", base + "kernel/drivers/net/virtio_net.ko", base + "modules.dep"]


def root_tree(root: pathlib.Path, version: str = VERSION, changes: dict | None = None) -> pathlib.Path:
    """A merged-/usr Linux root: kernel, config and modules for ``version``, slim targets, and
    symlinks (relative and absolute), hard links, setuid/setgid/sticky modes and a fifo."""
    files = {
        "etc/machine-id": b"",
        "etc/hostname": "microvm\n",
        "etc/os-release": 'ID=ubuntu\nVERSION_ID="22.04"\n',
        "boot/vmlinux": kernel_bytes(version),
        "boot/config-%s" % version: "# Linux/x86 %s Kernel Configuration\nCONFIG_VIRTIO=y\n" % version,
        "usr/lib/modules/%s/kernel/fs/ext4/ext4.ko" % version: module_bytes(8192),
        "usr/lib/modules/%s/kernel/drivers/net/virtio_net.ko" % version: module_bytes(4096),
        "usr/lib/modules/%s/modules.dep" % version: "kernel/fs/ext4/ext4.ko:\n",
        # This machine's own env: the program the disk's architecture is read from.
        "usr/bin/env": pathlib.Path("/usr/bin/env").read_bytes(),
        "usr/bin/tool": b"#!/bin/sh\necho tool\n",
        "usr/bin/sgid-tool": b"#!/bin/sh\necho sgid\n",
        "usr/bin/python3.11": os.urandom(2048),
        "usr/share/doc/bash/README": os.urandom(6000),
        "usr/share/man/man1/bash.1.gz": os.urandom(3000),
        "usr/share/locale/de/LC_MESSAGES/bash.mo": os.urandom(700),
        "usr/share/locale/en_GB/LC_MESSAGES/bash.mo": os.urandom(500),
        "usr/lib/firmware/i915/gpu.bin": os.urandom(9000),
        "var/cache/apt/pkgcache.bin": os.urandom(4000),
        "var/lib/apt/lists/deb.debian.org_Packages": os.urandom(2500),
        "var/lib/containerd/io.containerd.content.v1.content/blobs/sha256/ab": os.urandom(1500),
        "var/log/syslog": "boot\n",
        "home/dev/notes.txt": "mine\n",
        "tmp/": b"",
        "root/": b"",
    }
    for name, content in (changes or {}).items():
        if content is None:
            files.pop(name, None)
        else:
            files[name] = content
    disks.write_tree(root, files)
    os.symlink("usr/bin", root / "bin")
    os.symlink("usr/lib", root / "lib")
    os.symlink("/usr/bin/python3.11", root / "usr/bin/python3")
    os.symlink("../../etc/hostname", root / "home/dev/hostname")
    os.link(root / "usr/bin/tool", root / "usr/bin/tool-again")
    os.chmod(root / "usr/bin/tool", 0o4755)
    os.chmod(root / "usr/bin/sgid-tool", 0o2755)
    os.chmod(root / "tmp", 0o1777)
    os.chmod(root / "root", 0o700)
    os.mkfifo(root / "tmp/fifo")
    os.utime(root / "etc/os-release", (OLD_MTIME, OLD_MTIME))
    if os.geteuid() == 0:
        os.makedirs(root / "dev", exist_ok=True)
        os.mknod(root / "dev/null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return root


def user_xattrs_work(path: pathlib.Path) -> bool:
    try:
        os.setxattr(path, XATTR[0], XATTR[1], follow_symlinks=False)
        return True
    except OSError:
        return False


def ext4_root(tree: pathlib.Path, image: pathlib.Path, size: int = 48 * MIB) -> pathlib.Path:
    """ext4 from ``tree`` with ``mkfs.ext4 -d``; owners (and the xattr when the tree could not hold
    it) set afterwards with ``debugfs -w`` on the unmounted image, without root."""
    has_xattr = user_xattrs_work(tree / "etc/hostname")
    disks.ext4_image(image, tree, size)
    commands = []
    for path, (uid, gid) in OWNERS.items():
        if (tree / path).exists():
            commands += ["sif /%s uid %d" % (path, uid), "sif /%s gid %d" % (path, gid)]
    if not has_xattr:
        commands.append("ea_set /etc/hostname %s %s" % (XATTR[0], XATTR[1].decode()))
    script = image.with_suffix(".debugfs")
    script.write_text("\n".join(commands) + "\n")
    disks.run("debugfs", "-w", "-f", script, image)
    script.unlink()
    return image


# mkfs.xfs refuses a filesystem smaller than 300 MB; the file is sparse.
XFS_SIZE = 320 * MIB
PROTO_KINDS = {stat.S_IFREG: "-", stat.S_IFDIR: "d", stat.S_IFLNK: "l", stat.S_IFIFO: "p", stat.S_IFCHR: "c"}


def _proto_lines(folder: pathlib.Path, tree: pathlib.Path, seen: dict, later: list, depth: int) -> list[str]:
    lines = []
    for child in sorted(folder.iterdir()):
        st = os.lstat(child)
        rel = str(child.relative_to(tree))
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            if st.st_ino in seen:
                later.append(("link", seen[st.st_ino], rel))
                continue
            seen[st.st_ino] = rel
        if st.st_mode & stat.S_ISVTX:
            later.append(("chmod", rel, stat.S_IMODE(st.st_mode)))
        uid, gid = OWNERS.get(rel, (st.st_uid, st.st_gid))
        mode = "%s%s%s%03o" % (
            PROTO_KINDS[stat.S_IFMT(st.st_mode)],
            "u" if st.st_mode & stat.S_ISUID else "-",
            "g" if st.st_mode & stat.S_ISGID else "-",
            st.st_mode & 0o777,
        )
        head = "%s%s %s %d %d" % (" " * depth, child.name, mode, uid, gid)
        if stat.S_ISREG(st.st_mode):
            lines.append("%s %s" % (head, child))
        elif stat.S_ISLNK(st.st_mode):
            lines.append("%s %s" % (head, os.readlink(child)))
        elif stat.S_ISCHR(st.st_mode):
            lines.append("%s %d %d" % (head, os.major(st.st_rdev), os.minor(st.st_rdev)))
        elif stat.S_ISDIR(st.st_mode):
            lines.append(head)
            lines += _proto_lines(child, tree, seen, later, depth + 1)
            lines.append("%s$" % (" " * (depth + 1)))
        else:
            lines.append(head)
    return lines


def xfs_root(tree: pathlib.Path, image: pathlib.Path) -> pathlib.Path:
    """XFS from ``tree`` with ``mkfs.xfs -p <protofile>`` (no mount), owners as ``ext4_root`` gives them.

    mkfs.xfs 6.1's protofile cannot express hard links, the sticky bit, extended attributes or
    modification times: as root, the filesystem is then loop-mounted once to add exactly those (the
    xattr as ``ext4_root`` adds it), so that it holds what the ext4 made from the same tree holds."""
    seen, later = {}, []
    lines = ["/dev/null", "0 0", "d--755 0 0"] + _proto_lines(tree, tree, seen, later, 1) + ["$", ""]
    proto = image.with_suffix(".proto")
    proto.write_text("\n".join(lines))
    image.unlink(missing_ok=True)
    disks.run("truncate", "-s", str(XFS_SIZE), image)
    disks.run("mkfs.xfs", "-q", "-f", "-p", proto, image)
    proto.unlink()
    if os.geteuid() == 0:
        _complete_xfs(tree, image, later)
    return image


@contextlib.contextmanager
def _mounted(image: pathlib.Path):
    """``image`` loop-mounted (as root) for the few changes its mkfs cannot make."""
    mount = image.with_suffix(".mnt")
    mount.mkdir(exist_ok=True)
    disks.run("mount", "-o", "loop", image, mount)
    try:
        yield mount
    finally:
        disks.run("umount", mount)
        mount.rmdir()


def _complete_xfs(tree: pathlib.Path, image: pathlib.Path, later: list) -> None:
    with _mounted(image) as mount:
        for action, first, second in later:
            if action == "link":
                os.link(mount / first, mount / second)
            else:
                os.chmod(mount / first, second)
        if (tree / "etc/hostname").exists():
            os.setxattr(mount / "etc/hostname", XATTR[0], XATTR[1], follow_symlinks=False)
        # Deepest first, so that a directory's time is set after its entries changed it.
        for source in sorted(tree.rglob("*"), key=lambda p: -len(p.parts)):
            st = os.lstat(source)
            os.utime(
                mount / source.relative_to(tree), ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False
            )


def btrfs_root(tree: pathlib.Path, image: pathlib.Path) -> pathlib.Path:
    """btrfs from ``tree`` with ``mkfs.btrfs --rootdir`` (no mount) into the default subvolume. The
    owners ``ext4_root`` gives are set on a copy of the tree first, which needs root; without it the
    files keep the tree's owners. btrfs-progs 6.2 writes device nodes without their numbers: as root,
    the filesystem is loop-mounted once to make ``dev/null`` again."""
    copy = image.with_suffix(".tree")
    shutil.rmtree(copy, ignore_errors=True)
    disks.run("cp", "-a", tree, copy)
    if os.geteuid() == 0:
        for path, (uid, gid) in OWNERS.items():
            if (copy / path).exists():
                os.chown(copy / path, uid, gid, follow_symlinks=False)
                # chown clears setuid and setgid.
                os.chmod(copy / path, stat.S_IMODE(os.lstat(tree / path).st_mode))
    if (copy / "etc/hostname").exists():
        os.setxattr(copy / "etc/hostname", XATTR[0], XATTR[1], follow_symlinks=False)
    image.unlink(missing_ok=True)
    disks.run("truncate", "-s", str(XFS_SIZE), image)
    disks.run("mkfs.btrfs", "-q", "-f", "--rootdir", copy, image)
    shutil.rmtree(copy)
    device = tree / "dev/null"
    if os.geteuid() == 0 and device.exists():
        st = os.lstat(device)
        with _mounted(image) as mount:
            os.unlink(mount / "dev/null")
            os.mknod(mount / "dev/null", st.st_mode, st.st_rdev)
            for path in ("dev/null", "dev"):
                os.utime(mount / path, ns=(st.st_atime_ns, os.lstat(tree / path).st_mtime_ns))
    return image


def gpt_disk(path: pathlib.Path, root: pathlib.Path, names=("root",), kind: str = "8300") -> dict:
    """ESP, then one Linux partition per name, each holding ``root``."""
    size = root.stat().st_size
    sectors = size // disks.SECTOR
    layout = ["-n", "1:2048:+4M", "-t", "1:ef00", "-c", "1:EFI"]
    start = 2048 + 4 * MIB // disks.SECTOR
    offsets = []
    for number, name in enumerate(names, start=2):
        layout += [
            "-n",
            "%d:%d:%d" % (number, start, start + sectors - 1),
            "-t",
            "%d:%s" % (number, kind),
            "-c",
            "%d:%s" % (number, name),
        ]
        offsets.append(start * disks.SECTOR)
        start += sectors + 2048
    disks.gpt_disk(path, (start + 2048) * disks.SECTOR + MIB, layout)
    for offset in offsets:
        disks.place(path, root, offset)
    return {"path": path, "offsets": offsets}


LVM_EXTENT = MIB


def _lvm_id(seed: str) -> str:
    """An LVM2 id (32 letters and digits in groups of 6-4-4-4-4-4-6) derived from ``seed``."""
    text = hashlib.sha256(seed.encode()).hexdigest()[:32]
    groups, at = [], 0
    for width in (6, 4, 4, 4, 4, 4, 6):
        groups.append(text[at : at + width])
        at += width
    return "-".join(groups)


def _lv_text(name: str, segments: list[tuple[int, int]]) -> str:
    """A visible linear logical volume of ``segments`` ((first extent on pv0, extent count) each)."""
    lines = [
        "\t\t%s {" % name,
        '\t\t\tid = "%s"' % _lvm_id(name),
        '\t\t\tstatus = ["READ", "WRITE", "VISIBLE"]',
        "\t\t\tflags = []",
        "\t\t\tsegment_count = %d" % len(segments),
    ]
    start = 0
    for number, (first, count) in enumerate(segments, start=1):
        lines += [
            "\t\t\tsegment%d {" % number,
            "\t\t\t\tstart_extent = %d" % start,
            "\t\t\t\textent_count = %d" % count,
            '\t\t\t\ttype = "striped"',
            "\t\t\t\tstripe_count = 1",
            '\t\t\t\tstripes = ["pv0", %d]' % first,
            "\t\t\t}",
        ]
        start += count
    return "\n".join(lines + ["\t\t}"])


def lvm_disk(path: pathlib.Path, root: pathlib.Path, vg: str = "vgt", extra: dict | None = None) -> dict:
    """A GPT disk whose partition 2 (type 8e00) is an LVM2 physical volume of volume group ``vg`` with
    two visible linear logical volumes: ``root`` (one segment holding ``root``, a filesystem image, at
    the first extent) and ``split`` (two segments, after it). The metadata is written by LVM2's own
    tools (pvcreate, vgcreate, vgcfgrestore) on a loop device; nothing is activated, as no
    device-mapper is needed to write metadata, and the filesystem is then copied to its extents.
    ``extra`` ({name: filesystem image}) adds one linear volume each, after ``split``."""
    root_extents = -(-root.stat().st_size // LVM_EXTENT)
    placed, first = [], root_extents + 6
    for name, image in (extra or {}).items():
        count = -(-image.stat().st_size // LVM_EXTENT)
        placed.append((name, image, first, count))
        first += count
    pv = path.with_suffix(".pv")
    with open(pv, "wb") as handle:
        handle.truncate(MIB + first * LVM_EXTENT)
    loop = disks.run("losetup", "--find", "--show", pv).strip()
    only = ("--devices", loop)
    try:
        disks.run("pvcreate", "-q", *only, "--dataalignment", "1m", loop)
        disks.run("vgcreate", "-q", *only, "-s", "%dk" % (LVM_EXTENT // 1024), vg, loop)
        backup = path.with_suffix(".vg")
        disks.run("vgcfgbackup", "-q", *only, "-f", backup, vg)
        text = backup.read_text()
        volumes = "\n".join(
            [
                "\tlogical_volumes {",
                _lv_text("root", [(0, root_extents)]),
                _lv_text("split", [(root_extents, 2), (root_extents + 3, 2)]),
            ]
            + [_lv_text(name, [(at, count)]) for name, _image, at, count in placed]
            + [
                "\t}",
            ]
        )
        body_end = text.rstrip().rfind("}")
        backup.write_text(text[:body_end] + volumes + "\n}\n")
        disks.run("vgcfgrestore", "-q", *only, "-f", backup, vg)
        shown = disks.run("pvs", *only, "--noheadings", "--units", "b", "-o", "pe_start", loop)
        pe_start = int(shown.strip().rstrip("B"))
    finally:
        disks.run("losetup", "-d", loop)
    disks.place(pv, root, pe_start)
    for _name, image, at, _count in placed:
        disks.place(pv, image, pe_start + at * LVM_EXTENT)
    made = gpt_disk(path, pv, kind="8e00")
    pv.unlink()
    return dict(made, pe_start=pe_start)


def mbr_disk(path: pathlib.Path, root: pathlib.Path) -> dict:
    """A DOS label: a small FAT-typed partition, then the Linux root as the second primary."""
    sectors = root.stat().st_size // disks.SECTOR
    start = 2048 + 8192
    path.unlink(missing_ok=True)
    disks.run("truncate", "-s", str((start + sectors + 2048) * disks.SECTOR), path)
    table = "label: dos\nstart=2048, size=8192, type=c\nstart=%d, size=%d, type=83\n" % (start, sectors)
    proc = subprocess.run(
        ["sfdisk", "-q", str(path)], input=table, capture_output=True, text=True, check=False
    )
    if proc.returncode:
        raise AssertionError("sfdisk failed: %s" % proc.stderr)
    disks.place(path, root, start * disks.SECTOR)
    return {"path": path, "offsets": [start * disks.SECTOR]}


def free_port() -> int:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Registry:
    """``docker-registry serve`` on loopback with its own storage, plain or TLS + htpasswd."""

    def __init__(
        self, workdir: pathlib.Path, tls: bool = False, users: dict | None = None, token: bool = False
    ):
        self.workdir = workdir
        self.token_server = None
        self.port = free_port()
        self.host = "127.0.0.1:%d" % self.port
        self.tls = tls
        self.ca = None
        workdir.mkdir(parents=True, exist_ok=True)
        config = [
            "version: 0.1",
            "log:",
            "  level: error",
            "storage:",
            "  filesystem:",
            "    rootdirectory: %s" % (workdir / "data"),
            "http:",
            "  addr: %s" % self.host,
        ]
        if tls:
            self.ca = self._certificates()
            config += [
                "  tls:",
                "    certificate: %s" % (workdir / "server.pem"),
                "    key: %s" % (workdir / "server.key"),
            ]
        if token:
            self.token_server = TokenServer(workdir, users or {}, self.ca)
            config += [
                "auth:",
                "  token:",
                "    realm: %s" % self.token_server.realm,
                "    service: %s" % TokenServer.SERVICE,
                "    issuer: %s" % TokenServer.ISSUER,
                "    rootcertbundle: %s" % (workdir / "server.pem"),
            ]
        elif users:
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                import crypt  # bcrypt through libxcrypt; the registry accepts only bcrypt

            lines = [
                "%s:%s" % (user, crypt.crypt(pw, crypt.mksalt(crypt.METHOD_BLOWFISH)))
                for user, pw in users.items()
            ]
            (workdir / "htpasswd").write_text("\n".join(lines) + "\n")
            config += [
                "auth:",
                "  htpasswd:",
                "    realm: microvm-test",
                "    path: %s" % (workdir / "htpasswd"),
            ]
        (workdir / "config.yml").write_text("\n".join(config) + "\n")
        self.log = open(workdir / "registry.log", "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            ["docker-registry", "serve", str(workdir / "config.yml")],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self._wait()

    def _certificates(self) -> pathlib.Path:
        w = self.workdir
        run = disks.run
        run(
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=microvm-test-ca",
            "-keyout",
            w / "ca.key",
            "-out",
            w / "ca.pem",
        )
        run(
            "openssl",
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            w / "server.key",
            "-out",
            w / "server.csr",
        )
        (w / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
        run(
            "openssl",
            "x509",
            "-req",
            "-in",
            w / "server.csr",
            "-CA",
            w / "ca.pem",
            "-CAkey",
            w / "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            w / "ext.cnf",
            "-out",
            w / "server.pem",
        )
        return w / "ca.pem"

    @property
    def url(self) -> str:
        return ("https://" if self.tls else "http://") + self.host

    def _wait(self) -> None:
        import ssl

        context = ssl.create_default_context(cafile=str(self.ca)) if self.ca else None
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(self.url + "/v2/", timeout=2, context=context)
                return
            except urllib.error.HTTPError:
                return  # 401: up, and asking for credentials
            except (urllib.error.URLError, OSError):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    log = (self.workdir / "registry.log").read_text()
                    raise AssertionError("docker-registry did not start: %s" % log) from None
                time.sleep(0.1)

    def manifest(self, repository: str, tag: str, auth: tuple | None = None) -> int:
        """HTTP status of a manifest HEAD (200 present, 404 absent)."""
        import ssl

        request = urllib.request.Request(self.url + "/v2/%s/manifests/%s" % (repository, tag), method="HEAD")
        request.add_header("Accept", "application/vnd.oci.image.manifest.v1+json")
        if auth:
            request.add_header(
                "Authorization", "Basic " + base64.b64encode(("%s:%s" % auth).encode()).decode()
            )
        context = ssl.create_default_context(cafile=str(self.ca)) if self.ca else None
        try:
            return urllib.request.urlopen(request, timeout=10, context=context).status
        except urllib.error.HTTPError as exc:
            return exc.code

    def stop(self) -> None:
        if self.token_server:
            self.token_server.stop()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def pull_and_unpack(
    reference: str, workdir: pathlib.Path, name: str, tls_verify: bool = False
) -> pathlib.Path:
    """skopeo copy to an OCI layout, umoci unpack --rootless; returns the unpacked rootfs."""
    layout = workdir / ("pulled-" + name)
    bundle = workdir / ("bundle-" + name)
    shutil.rmtree(layout, ignore_errors=True)
    shutil.rmtree(bundle, ignore_errors=True)
    disks.run(
        "skopeo",
        "copy",
        "--quiet",
        "--src-tls-verify=%s" % str(tls_verify).lower(),
        "docker://" + reference,
        "oci:%s:%s" % (layout, name),
    )
    disks.run("umoci", "unpack", "--rootless", "--image", "%s:%s" % (layout, name), bundle)
    return bundle / "rootfs"


def unpack_layout(layout: pathlib.Path, tag: str, bundle: pathlib.Path) -> pathlib.Path:
    """``umoci unpack --rootless`` of one tag of an OCI layout the module wrote; returns the rootfs."""
    shutil.rmtree(bundle, ignore_errors=True)
    disks.run("umoci", "unpack", "--rootless", "--image", "%s:%s" % (layout, tag), bundle)
    return bundle / "rootfs"


def _varints(data: bytes) -> dict:
    """Fields 1 and 2 of a rootlesscontainers protobuf (uid, gid); 0xFFFFFFFF means unchanged."""
    fields, i = {}, 0
    while i < len(data):
        key = data[i]
        i += 1
        value = shift = 0
        while True:
            byte = data[i]
            i += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        fields[key >> 3] = value
    return fields


def owner(path: pathlib.Path) -> tuple[int, int]:
    """The owner the layer recorded: umoci --rootless keeps it in user.rootlesscontainers."""
    st = os.lstat(path)
    try:
        raw = os.getxattr(path, "user.rootlesscontainers", follow_symlinks=False)
    except OSError:
        return (0, 0) if st.st_uid == os.geteuid() else (st.st_uid, st.st_gid)
    fields = _varints(raw)
    uid = fields.get(1, 0xFFFFFFFF)
    gid = fields.get(2, 0xFFFFFFFF)
    return (0 if uid == 0xFFFFFFFF else uid, 0 if gid == 0xFFFFFFFF else gid)


def describe_tree(root: pathlib.Path, owners: dict | None = None, skip=()) -> dict:
    """``{path: (kind, mode, size or link target, sha-ish, owner)}`` of a tree as the guest sees it."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(dirnames + filenames):
            full = pathlib.Path(dirpath) / name
            rel = str(full.relative_to(root))
            if any(rel == s or rel.startswith(s + "/") for s in skip):
                continue
            st = os.lstat(full)
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                found[rel] = ("symlink", os.readlink(full))
                continue
            who = owners.get(rel, (st.st_uid, st.st_gid)) if owners is not None else owner(full)
            if stat.S_ISDIR(st.st_mode):
                found[rel] = ("dir", oct(mode), who)
            elif stat.S_ISFIFO(st.st_mode):
                found[rel] = ("fifo", oct(mode), who)
            elif stat.S_ISREG(st.st_mode):
                found[rel] = ("file", oct(mode), who, hashlib.sha256(full.read_bytes()).hexdigest())
            else:
                found[rel] = ("other", oct(mode))
    return found


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenServer:
    """A token service as the Docker token-auth spec describes it, over TLS on loopback: it checks the
    basic credentials a client sends to the realm and issues a JWT (RS256, ``x5c`` header with the
    certificate the registry trusts) granting the scope asked for."""

    SERVICE = "microvm-registry"
    ISSUER = "microvm-test-issuer"

    def __init__(self, workdir: pathlib.Path, users: dict, ca: pathlib.Path):
        import http.server
        import ssl
        import threading

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import padding

        cert = x509.load_pem_x509_certificate((workdir / "server.pem").read_bytes())
        key = serialization.load_pem_private_key((workdir / "server.key").read_bytes(), password=None)
        chain = [base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode()]
        self.requests = []
        server_self = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                import urllib.parse

                query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
                header = self.headers.get("Authorization", "")
                user = None
                if header.startswith("Basic "):
                    name, _colon, password = base64.b64decode(header[6:]).decode().partition(":")
                    if users.get(name) != password:
                        self.send_response(401)
                        self.end_headers()
                        return
                    user = name
                server_self.requests.append({"user": user, "scope": query.get("scope")})
                access = []
                if query.get("scope") and user:
                    kind, name, actions = query["scope"].split(":")
                    access.append({"type": kind, "name": name, "actions": actions.split(",")})
                now = int(time.time())
                claims = {
                    "iss": TokenServer.ISSUER,
                    "sub": user or "",
                    "aud": query.get("service"),
                    "exp": now + 300,
                    "nbf": now - 10,
                    "iat": now,
                    "jti": os.urandom(8).hex(),
                    "access": access,
                }
                head = {"typ": "JWT", "alg": "RS256", "x5c": chain}
                signing = _b64url(json.dumps(head).encode()) + "." + _b64url(json.dumps(claims).encode())
                signature = key.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
                body = json.dumps({"token": signing + "." + _b64url(signature)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(workdir / "server.pem"), str(workdir / "server.key"))
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.realm = "https://127.0.0.1:%d/token" % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
