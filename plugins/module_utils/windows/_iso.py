# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""ISO adapter: read an installer ISO's UDF side without mounting, rebuild with xorriso, checksum.

Readers: ``pycdlib`` (Python, reads UDF) or ``7z`` (p7zip, told to read UDF). Neither needs root or a
loop device. xorriso is only used to write: its own extraction reads the ISO9660 side alone.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import shutil
import subprocess

from ansible_collections.goldenimage.pipeline.plugins.module_utils.windows.iso import IsoError

CHUNK = 4 * 1024 * 1024


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def tree_sizes(root):
    """``{relative path: size}`` of every file under ``root``."""
    out = {}
    for folder, _dirs, names in os.walk(root):
        for name in names:
            full = os.path.join(folder, name)
            out[os.path.relpath(full, root).replace(os.sep, "/")] = os.path.getsize(full)
    return out


def have_pycdlib():
    try:
        import pycdlib  # noqa: F401  pylint: disable=unused-import
    except ImportError:
        return False
    return True


def pick_reader(reader):
    if reader != "auto":
        return reader
    if have_pycdlib():
        return "pycdlib"
    if shutil.which("7z"):
        return "7z"
    raise IsoError("no UDF reader: install the pycdlib Python package or 7z (Debian p7zip-full)")


def extract(source, dest, reader):
    """Extract ``source``'s UDF tree into ``dest``; returns the ISO's volume label."""
    reader = pick_reader(reader)
    if reader == "pycdlib":
        return _extract_pycdlib(source, dest)
    return _extract_7z(source, dest)


def _extract_pycdlib(source, dest):
    import pycdlib

    iso = pycdlib.PyCdlib()
    try:
        iso.open(source)
    except pycdlib.pycdlibexception.PyCdlibException as exc:
        raise IsoError("%s cannot be read as an ISO: %s" % (source, exc)) from exc
    try:
        label = iso.pvd.volume_identifier.decode("ascii", "replace").strip()
        if not iso.has_udf():
            raise IsoError("%s has no UDF file system: not a Windows installer ISO" % source)
        for folder, _dirs, names in iso.walk(udf_path="/"):
            local = os.path.join(dest, folder.lstrip("/"))
            os.makedirs(local, exist_ok=True)
            for name in names:
                inside = folder.rstrip("/") + "/" + name
                target = os.path.join(local, name)
                entry = iso.get_record(udf_path=inside)
                if getattr(entry, "inode", None) is None or not entry.get_data_length():
                    # The El Torito boot catalog's UDF entry (a Windows ISO's /boot.cat) has no inode in
                    # pycdlib, which refuses to copy it ("an entry without data"), as it does an empty
                    # file. The rebuild writes its own catalog, so an empty file keeps the name.
                    open(target, "wb").close()
                    continue
                iso.get_file_from_iso(target, udf_path=inside)
    finally:
        iso.close()
    return label


def _extract_7z(source, dest):
    proc = subprocess.run(
        ["7z", "x", "-tudf", "-y", "-bd", "-o" + dest, source], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise IsoError(
            "7z could not read the UDF side of %s: %s" % (source, (proc.stderr or proc.stdout)[-500:])
        )
    listing = subprocess.run(["7z", "l", "-tudf", source], capture_output=True, text=True, check=False)
    for line in listing.stdout.splitlines():
        if line.startswith("Comment = ") or line.startswith("Label = "):
            return line.split("=", 1)[1].strip()
    return ""


def run_xorriso(command):
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise IsoError("xorriso failed (rc=%d): %s" % (proc.returncode, proc.stderr[-1000:]))


def el_torito_report(path):
    proc = subprocess.run(
        ["xorriso", "-indev", path, "-report_el_torito", "plain"], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise IsoError("xorriso cannot read the El Torito catalog of %s: %s" % (path, proc.stderr[-500:]))
    return proc.stdout


def record_path(dest):
    return dest + ".remaster.json"


def read_record(dest):
    try:
        with open(record_path(dest), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def write_record(dest, record):
    tmp = record_path(dest) + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=2, sort_keys=True)
    os.replace(tmp, record_path(dest))
