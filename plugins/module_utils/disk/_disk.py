# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Disk image adapter: raw or qcow2 (compressed clusters, backing chains), NTFS and ext4.

qcow2 and the filesystems are read with the ``dissect`` libraries, the partition table with
``_partitions``, without mounting, loop devices or root. Only the partition table, boot sectors,
filesystem metadata and the few files a check asks for are read; every byte read from the image files
is counted, so callers can prove that a 60 GiB disk cost kilobytes.

This file imports nothing from Ansible (only the collection's own files): the verifier Job runs it
with a plain Python.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import stat
import sys

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import _partitions, image_facts, seal

QCOW2_MAGIC = b"QFI\xfb"
LIBRARIES = ("dissect.hypervisor", "dissect.ntfs", "dissect.extfs", "dissect.regf")
SECTOR = 512


class DiskError(PipelineError):
    """The image cannot be opened or read; the message names the file and the cause."""


class MissingLibrary(DiskError):
    """A ``dissect`` package is not installed where the verifier runs."""

    def __init__(self, name, error):
        super(MissingLibrary, self).__init__("%s is not installed: %s" % (name, error))
        self.name = name


def _require(name):
    try:
        __import__(name)
    except ImportError as exc:
        raise MissingLibrary(name, exc) from exc


def _import_alone(name, library):
    """Import the module ``name`` without running the ``__init__`` of the packages above it.

    ``dissect.hypervisor``'s ``__init__`` imports every format it knows (and compiles each one's
    structure definitions), which costs more than reading the qcow2 (bench/README.md, "Opening a
    qcow2"). The packages on the way are registered as bare packages (their search path only), so
    ``name`` and what it imports load alone. A package already imported whole is used as it is.
    """
    if name in sys.modules:
        return sys.modules[name]
    import importlib
    import importlib.util

    parts = name.split(".")
    try:
        for depth in range(2, len(parts)):
            package = ".".join(parts[:depth])
            if package in sys.modules:
                continue
            spec = importlib.util.find_spec(package)
            if spec is None or spec.submodule_search_locations is None:
                raise MissingLibrary(library, ImportError("no package %s" % package))
            sys.modules[package] = importlib.util.module_from_spec(spec)
        return importlib.import_module(name)
    except ImportError as exc:
        raise MissingLibrary(library, exc) from exc


class Counter:
    """Bytes read from every file of one image (the chain included)."""

    def __init__(self):
        self.bytes_read = 0
        self.reads = 0


class CountingFile:
    """A read-only file object that adds what it reads to a Counter."""

    def __init__(self, path, counter):
        self._fh = open(path, "rb")  # noqa: SIM115 - closed by Image.close with the rest of the chain
        self._counter = counter
        self.name = path

    def read(self, size=-1):
        data = self._fh.read(size)
        self._counter.bytes_read += len(data)
        self._counter.reads += 1
        return data

    def readinto(self, buf):
        count = self._fh.readinto(buf)
        self._counter.bytes_read += count or 0
        self._counter.reads += 1
        return count

    def seek(self, offset, whence=0):
        return self._fh.seek(offset, whence)

    def tell(self):
        return self._fh.tell()

    def seekable(self):
        return True

    def readable(self):
        return True

    def close(self):
        self._fh.close()


def _size(fh):
    here = fh.tell()
    end = fh.seek(0, 2)
    fh.seek(here)
    return end


class Image:
    """One disk image: ``stream`` is its virtual disk, ``chain`` the files it is made of."""

    def __init__(self, path):
        self.path = os.path.abspath(path)
        self.counter = Counter()
        self.files = []
        self.chain = []
        self.format = None
        self.stream = self._open(self.path, depth=0)
        self.virtual_size = getattr(self.stream, "size", None) or _size(self.stream)

    @property
    def bytes_read(self):
        return self.counter.bytes_read

    def _open(self, path, depth):
        if depth > 16:
            raise DiskError("%s: the backing chain is deeper than 16 files" % path)
        if not os.path.exists(path):
            raise DiskError("%s does not exist" % path)
        fh = CountingFile(path, self.counter)
        self.files.append(fh)
        magic = fh.read(4)
        fh.seek(0)
        if magic != QCOW2_MAGIC:
            self.chain.append({"path": path, "format": "raw"})
            self.format = self.format or "raw"
            return fh
        QCow2 = _import_alone("dissect.hypervisor.disk.qcow2", "dissect.hypervisor").QCow2

        try:
            qcow = QCow2(fh, allow_no_backing_file=True, allow_no_data_file=True)
        except Exception as exc:
            raise DiskError("%s: not a readable qcow2: %s" % (path, exc)) from exc
        self.chain.append({"path": path, "format": "qcow2"})
        self.format = self.format or "qcow2"
        if qcow.needs_data_file:
            raise DiskError("%s: qcow2 images with an external data file are not supported" % path)
        if qcow.auto_backing_file:
            # qemu resolves a relative backing file against the overlay's directory.
            backing = os.path.join(os.path.dirname(path), qcow.auto_backing_file)
            qcow.backing_file = self._open(backing, depth + 1)
        try:
            return qcow.open()
        except Exception as exc:
            raise DiskError("%s: not a readable qcow2: %s" % (path, exc)) from exc

    def read(self, offset, length):
        self.stream.seek(offset)
        return self.stream.read(length)

    def close(self):
        for fh in self.files:
            fh.close()
        self.files = []


class _RangeFile:
    """A partition as a file of its own."""

    def __init__(self, image, offset, size):
        from dissect.util.stream import RangeStream

        self._stream = RangeStream(image.stream, offset, size)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _norm(path):
    return "/" + "/".join(p for p in path.split("/") if p)


class NtfsView:
    """The read-only filesystem view the seal rules expect, over NTFS (names case-insensitive)."""

    case_insensitive = True

    def __init__(self, image, part):
        _require("dissect.ntfs")
        from dissect.ntfs import NTFS

        try:
            self.fs = NTFS(_RangeFile(image, part["offset"], part["size"]))
        except Exception as exc:
            raise DiskError("partition %s: cannot read NTFS: %s" % (part["number"], exc)) from exc

    def _record(self, path):
        from dissect.ntfs.exceptions import Error

        try:
            return self.fs.mft.get(_norm(path))
        except (Error, KeyError, OSError):
            return None

    def exists(self, path):
        return self._record(path) is not None

    def is_dir(self, path):
        rec = self._record(path)
        return rec is not None and rec.is_dir()

    def list(self, path):
        rec = self._record(path)
        if rec is None or not rec.is_dir():
            return None
        return [n for n in rec.listdir(ignore_dos=True) if n not in (".", "..")]

    def size(self, path):
        rec = self._record(path)
        if rec is None or rec.is_dir():
            return None
        return rec.size()

    def is_file(self, path):
        rec = self._record(path)
        return rec is not None and not rec.is_dir()

    def read(self, path, offset=0, length=-1):
        rec = self._record(path)
        if rec is None:
            return b""
        fh = rec.open()
        fh.seek(offset)
        return fh.read(length)

    def open(self, path):
        """A read-only stream of the file at ``path`` (None when absent), read on demand."""
        rec = self._record(path)
        return None if rec is None or rec.is_dir() else rec.open()


FIREWALL_RULES = "Services\\SharedAccess\\Parameters\\FirewallPolicy\\FirewallRules"
TERMINAL_SERVER = "Control\\Terminal Server"
RDP_LISTENER = "Control\\Terminal Server\\WinStations\\RDP-Tcp"


def remote_desktop_settings(view, hive_path):
    """What the SYSTEM hive at ``hive_path`` (a path on ``view``) says of Remote Desktop, read offline.

    The current control set (``Select\\Current``): ``fDenyTSConnections``, the RDP-Tcp listener's
    ``PortNumber`` and every firewall rule of the firewall policy. ``error`` says why it could not be read.
    """
    fh = view.open(hive_path) if hive_path else None
    if fh is None:
        return {"error": "the hive is not on the volume"}
    _require("dissect.regf")
    from dissect.regf import RegistryHive
    from dissect.regf.exceptions import Error as RegfError

    try:
        hive = RegistryHive(fh)
        current = _value(hive, "Select", "Current")
        control_set = "ControlSet%03d" % int(current if current is not None else 1)
        rules = {}
        key = _key(hive, "%s\\%s" % (control_set, FIREWALL_RULES))
        for value in key.values() if key is not None else ():
            if isinstance(value.value, str):
                rules[value.name] = value.value
        return {
            "control_set": control_set,
            "deny": _value(hive, "%s\\%s" % (control_set, TERMINAL_SERVER), "fDenyTSConnections"),
            "port_number": _value(hive, "%s\\%s" % (control_set, RDP_LISTENER), "PortNumber"),
            "rules": rules,
        }
    except (RegfError, OSError, EOFError, ValueError) as exc:
        return {"error": "not a readable registry hive: %s" % (exc,)}


def _key(hive, path):
    from dissect.regf.exceptions import RegistryKeyNotFoundError

    try:
        return hive.open(path)
    except RegistryKeyNotFoundError:
        return None


def _value(hive, path, name):
    from dissect.regf.exceptions import RegistryValueNotFoundError

    key = _key(hive, path)
    if key is None:
        return None
    try:
        return key.value(name).value
    except RegistryValueNotFoundError:
        return None


def open_filesystem(view, stream, part, error):
    """``stream`` opened by ``view.READER`` (module, class) of a view class; ``error`` names the
    partition and ``view.FILESYSTEM`` when it cannot be, ``MissingLibrary`` when the module is not
    installed."""
    import importlib

    library, name = view.READER
    try:
        reader = getattr(importlib.import_module(library), name)
    except ImportError as exc:
        raise MissingLibrary(library, exc) from exc
    try:
        return reader(stream)
    except Exception as exc:
        raise error("partition %s: cannot read %s: %s" % (part["number"], view.FILESYSTEM, exc)) from exc


class ExtView:
    """The same view over ext2/3/4 (names case-sensitive; symlinks are not followed)."""

    case_insensitive = False
    # The filesystem as messages name it, and the module and class that read it (the XFS and btrfs
    # views of ``_xfs`` and ``_btrfs`` name theirs).
    FILESYSTEM = "ext4"
    READER = ("dissect.extfs", "ExtFS")
    ERROR = DiskError

    def __init__(self, image, part):
        self.fs = open_filesystem(self, _RangeFile(image, part["offset"], part["size"]), part, self.ERROR)

    def _inode(self, path):
        from dissect.extfs.exceptions import Error

        try:
            return self.fs.get(_norm(path))
        except (Error, OSError):
            return None

    def _kind(self, node):
        """The ``stat.S_IFMT`` type of ``node`` (a subclass reads it where its library keeps it)."""
        return node.filetype

    def exists(self, path):
        return self._inode(path) is not None

    def is_dir(self, path):
        node = self._inode(path)
        return node is not None and self._kind(node) == stat.S_IFDIR

    def list(self, path):
        node = self._inode(path)
        if node is None or self._kind(node) != stat.S_IFDIR:
            return None
        return [n for n in node.listdir() if n not in (".", "..")]

    def size(self, path):
        node = self._inode(path)
        if node is None or self._kind(node) == stat.S_IFDIR:
            return None
        return node.size

    def is_file(self, path):
        """A regular file (a symlink is not followed, so it is not one)."""
        node = self._inode(path)
        return node is not None and self._kind(node) == stat.S_IFREG

    def read(self, path, offset=0, length=-1):
        node = self._inode(path)
        if node is None or self._kind(node) != stat.S_IFREG:
            return b""
        fh = node.open()
        fh.seek(offset)
        return fh.read(length)


# Image facts --------------------------------------------------------------------------------------


def read_image_facts(path_or_disk, os_family=None, partition=None):
    """The image-facts document (``image_facts``) of a disk: a path to a raw or qcow2 file, or an open
    ``Image``. ``os_family`` is ``windows`` or ``linux`` (detected from the partitions when None);
    ``partition`` picks the partition as ``seal_verify`` does."""
    image = path_or_disk if isinstance(path_or_disk, Image) else Image(path_or_disk)
    try:
        parts = seal.check_partitions(image.path, _partitions.read_partitions(image))
        family = os_family or seal.detect_os(parts)
        if family == "windows":
            return windows_facts(image, seal.pick_windows_partition(parts, partition))
        if family == "linux":
            return linux_facts(ExtView(image, seal.pick_linux_partition(parts, partition)))
        raise seal.SealError("cannot tell the OS: no partition holds NTFS, BitLocker or ext; name os_family")
    finally:
        if image is not path_or_disk:
            image.close()


def read_facts_or_why(path, os_family=None):
    """``read_image_facts`` for a guard: a disk that cannot be read or judged (no NTFS, BitLocker or ext
    partition, a damaged file system) is answered by a document saying so, which
    ``image_facts.exposure_reasons`` turns into a reason; a missing ``dissect`` package is raised, since
    nothing was read at all."""
    try:
        return read_image_facts(path, os_family)
    except MissingLibrary:
        raise
    except PipelineError as exc:
        return image_facts.document(os_family or "unknown", [image_facts.unreadable(path, exc)])


def _shown(found):
    return "C:" + found.replace("/", "\\")


def windows_facts(image, part, view=None, unreadable=None):
    """The facts of the Windows partition ``part``; ``view`` is its NtfsView when already open, None with
    ``unreadable`` saying why when it cannot be read."""
    bitlocker = image_facts.bitlocker_fact(image.read(part["offset"], SECTOR))
    if view is None and unreadable is None:
        if bitlocker["encrypted"]:
            unreadable = "the volume is BitLocker-encrypted"
        else:
            try:
                view = NtfsView(image, part)
            except MissingLibrary:
                raise
            except DiskError as exc:
                unreadable = str(exc)
    if view is None:
        return image_facts.document(
            "windows",
            [image_facts.unreadable("partition %s" % part["number"], unreadable)],
            bitlocker=bitlocker,
            software_hive=None,
            image_state=None,
            edition=None,
            licensing=None,
            autologon=None,
            unattend=[],
        )
    return windows_view_facts(view, bitlocker)


def windows_view_facts(view, bitlocker):
    problems = []
    registry = _software_values(view, problems)
    found = seal.find(view, seal.volume_path(image_facts.SOFTWARE_HIVE))
    return image_facts.document(
        "windows",
        problems,
        bitlocker=bitlocker,
        software_hive=image_facts.hive_fact(view.read(found, 0, 12) if found else None),
        image_state=image_facts.image_state_fact(registry["state"].get(image_facts.IMAGE_STATE_VALUE)),
        edition=image_facts.edition_fact(registry["current"]),
        licensing=image_facts.licensing_fact(dict(registry["current"], **registry["licensing"])),
        autologon=image_facts.autologon_fact(registry["winlogon"]),
        unattend=_unattend_files(view),
        private_keys=_windows_keys(view),
    )


def _windows_keys(view):
    """Private keys left on the volume: OpenSSH for Windows' host keys, users' ``.ssh\\id_*``."""
    folders = [image_facts.WINDOWS_SSH_DIR]
    users = seal.find(view, seal.volume_path(image_facts.WINDOWS_USERS_DIR))
    for user in sorted(view.list(users) or []) if users else []:
        folders.append("%s\\%s\\.ssh" % (image_facts.WINDOWS_USERS_DIR, user))
    keys = []
    for folder in folders:
        found = seal.find(view, seal.volume_path(folder))
        for name in sorted(view.list(found) or []) if found and view.is_dir(found) else []:
            path = found + "/" + name
            if not image_facts.is_windows_key_candidate(folder, name) or not view.is_file(path):
                continue
            fact = image_facts.private_key_fact(
                "%s\\%s" % (folder, name), view.size(path), view.read(path, 0, image_facts.KEY_HEAD_BYTES)
            )
            if fact is not None:
                keys.append(fact)
    return keys


def _software_values(view, problems):
    """Raw values of the SOFTWARE hive's keys the facts need; ``problems`` gets a hive that cannot be read.

    Secret values stay in this frame: the builders of ``image_facts`` keep only their presence."""
    values = {"state": {}, "current": {}, "licensing": {}, "winlogon": {}}
    found = seal.find(view, seal.volume_path(image_facts.SOFTWARE_HIVE))
    if found is None:
        # Every installed Windows has it: without it nothing about licensing or logon was read.
        problems.append(image_facts.unreadable(image_facts.SOFTWARE_HIVE, "not found on the volume"))
        return values
    _require("dissect.regf")
    from dissect.regf import RegistryHive

    wanted = (
        ("state", image_facts.SETUP_STATE_KEY, (image_facts.IMAGE_STATE_VALUE,)),
        (
            "current",
            image_facts.CURRENT_VERSION_KEY,
            image_facts.EDITION_VALUES + image_facts.PRODUCT_ID_VALUES,
        ),
        ("licensing", image_facts.LICENSING_KEY, image_facts.LICENSING_VALUES),
        ("winlogon", image_facts.WINLOGON_KEY, image_facts.WINLOGON_VALUES),
    )
    try:
        hive = RegistryHive(view.open(found))
        for slot, key, names in wanted:
            for name in names:
                value = _value(hive, key, name)
                if value is not None:
                    values[slot][name] = value
    except Exception as exc:  # any parse failure of these bytes leaves the facts unproven
        problems.append(image_facts.unreadable(_shown(found), "not a readable registry hive: %s" % (exc,)))
    return values


def _unattend_files(view):
    paths = []
    for windows_path in image_facts.UNATTEND_FILES:
        found = seal.find(view, seal.volume_path(windows_path))
        if found is not None and view.is_file(found):
            paths.append(found)
    for folder in image_facts.UNATTEND_FOLDERS:
        found = seal.find(view, seal.volume_path(folder))
        for name in sorted(view.list(found) or []) if found else []:
            child = found + "/" + name
            if name.lower().endswith(".xml") and view.is_file(child):
                paths.append(child)
    seen, facts = set(), []
    for found in paths:
        if found.lower() in seen:
            continue
        seen.add(found.lower())
        data = view.read(found, 0, image_facts.MAX_UNATTEND_BYTES + 1)
        facts.append(image_facts.unattend_fact(_shown(found), data))
    return facts


def linux_facts(view):
    """The facts of an ext2/3/4 root read through ``view`` (an ExtView)."""
    os_release = None
    for path in image_facts.OS_RELEASE_FILES:
        if view.is_file(path):
            text = view.read(path, 0, 64 * 1024).decode("utf-8", errors="replace")
            os_release = image_facts.os_release_fact(path, text)
            break
    regular = view.is_file("/etc/machine-id")
    machine_id = view.read("/etc/machine-id", 0, 128) if view.exists("/etc/machine-id") else None
    keys = []
    for path in _key_candidates(view):
        fact = image_facts.private_key_fact(
            path, view.size(path), view.read(path, 0, image_facts.KEY_HEAD_BYTES)
        )
        if fact is not None:
            keys.append(fact)
    return image_facts.document(
        "linux",
        os_release=os_release,
        machine_id=image_facts.machine_id_fact(machine_id, regular),
        private_keys=keys,
        postgresql=_postgresql(view),
    )


def _postgresql(view):
    """The raw reads ``image_facts.postgresql_fact`` builds on: servers, configured clusters, data dirs."""
    installed = {
        name: view.is_file("%s/%s/%s" % (image_facts.PG_LIB_DIR, name, image_facts.PG_SERVER))
        for name in view.list(image_facts.PG_LIB_DIR) or []
    }
    configured = [
        (major, name)
        for major in view.list(image_facts.PG_CONF_DIR) or []
        for name in view.list("%s/%s" % (image_facts.PG_CONF_DIR, major)) or []
    ]
    data_dirs = {}
    for major in view.list(image_facts.PG_DATA_DIR) or []:
        for name in view.list("%s/%s" % (image_facts.PG_DATA_DIR, major)) or []:
            folder = "%s/%s/%s" % (image_facts.PG_DATA_DIR, major, name)
            if view.is_dir(folder):
                marker = folder + "/PG_VERSION"
                data_dirs[(major, name)] = (
                    view.read(marker, 0, 64).decode("ascii", "replace") if view.is_file(marker) else None
                )
    # A cluster whose postgresql.conf moves its data elsewhere (data_directory) is read there too.
    elsewhere = {}
    for major, name in configured:
        conf = "%s/%s/%s/postgresql.conf" % (image_facts.PG_CONF_DIR, major, name)
        path = image_facts.configured_data_directory(
            view.read(conf, 0, 1 << 20).decode("utf-8", "replace") if view.is_file(conf) else ""
        )
        if path:
            marker = path.rstrip("/") + "/PG_VERSION"
            text = view.read(marker, 0, 64).decode("ascii", "replace") if view.is_file(marker) else None
            elsewhere[(major, name)] = (path, text)
    return image_facts.postgresql_fact(installed, configured, data_dirs, elsewhere)


def _key_candidates(view):
    """Files under /etc/ssh, /etc/ssl/private and /etc/postgresql (all levels), /root/.ssh, the postgres
    user's ~/.ssh and /home/*/.ssh, in order."""
    folders = [image_facts.SSH_DIR, image_facts.TLS_PRIVATE_DIR, image_facts.PG_CONF_DIR, "/root/.ssh"]
    folders += [image_facts.PG_DATA_DIR + "/.ssh"]  # the postgres user's home
    folders += ["/home/%s/.ssh" % name for name in sorted(view.list("/home") or [])]
    found = []
    pending = list(reversed(folders))
    while pending:
        folder = pending.pop()
        for name in sorted(view.list(folder) or []):
            path = folder + "/" + name
            if view.is_dir(path):
                if any(path.startswith(tree + "/") for tree in image_facts.KEY_TREES):
                    pending.append(path)
            elif image_facts.is_key_candidate(path):
                found.append(path)
    return found
