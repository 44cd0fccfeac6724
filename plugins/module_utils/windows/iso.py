# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Rules for remastering a Windows installer ISO into one that boots without a keypress.

Pure: the rules see an extracted tree as ``{relative path: size}`` and xorriso's El Torito report as
text, so they run the same in the module and in unit tests. ``_iso.py`` does the reading and writing.

The trap they guard against: Windows installer ISOs are UDF/ISO9660 hybrids whose ISO9660 side holds
little more than a short README, so a reader that only knows ISO9660 "extracts" a tree that looks fine
and installs nothing. The only reliable symptom is the size of the install image.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal

MIB = 1024 * 1024
DEFAULT_MIN_IMAGE_SIZE = 100 * MIB
IMAGE_FILES = ("sources/install.wim", "sources/install.esd")
EFI_NOPROMPT_IMAGE = "efi/microsoft/boot/efisys_noprompt.bin"
BIOS_BOOT_IMAGE = "boot/etfsboot.com"
# etfsboot.com is loaded as 8 virtual (512-byte) sectors, as Microsoft's own media do.
BIOS_LOAD_SECTORS = 8
VOLUME_ID_MAX = 32


class IsoError(PipelineError):
    """The ISO cannot be remastered; the message says which file and why."""


def require_xorriso(dest, xorriso, check_mode):
    """A rebuild needs xorriso (``xorriso``: its path, None when not found); check mode rebuilds nothing."""
    if not check_mode and not xorriso:
        raise Refusal("rebuilding %s" % dest, "xorriso is required to rebuild the ISO", "install xorriso")


def claim_size(iso_bytes, requested=""):
    """The size of the claim an ISO is imported into: ``requested`` when given, else the ISO's size plus a
    tenth, in whole MiB rounded up (at least ``1Mi``), as a quantity string such as ``"6093Mi"``.

    CDI writes the image onto a filesystem of its own in the claim and keeps room for that filesystem's
    overhead (5.5% by default), so a claim of exactly the ISO's size is too small.
    """
    if requested not in (None, ""):
        return str(requested)
    if isinstance(iso_bytes, bool):
        raise IsoError("ISO size %r is not a number of bytes" % (iso_bytes,))
    try:
        size = int(iso_bytes)
    except (TypeError, ValueError):
        raise IsoError("ISO size %r is not a number of bytes" % (iso_bytes,)) from None
    if size < 0:
        raise IsoError("ISO size %d is negative" % size)
    mib = -(-size * 11 // (10 * MIB))
    return "%dMi" % max(mib, 1)


def normalise(path):
    """A tree path as the rules compare it: ``/``-separated, relative, lower case (the media are FAT/UDF)."""
    return path.replace("\\", "/").strip("/").lower()


def lookup(files, path):
    """``(name as found, size)`` of ``path`` in ``files``, ignoring case; ``(None, None)`` if absent."""
    wanted = normalise(path)
    for name, size in files.items():
        if normalise(name) == wanted:
            return name, size
    return None, None


def install_image(files, min_size=DEFAULT_MIN_IMAGE_SIZE):
    """The install image of an extracted tree, ``{"path", "size"}``; refuses a missing or implausible one."""
    found = [(name, size) for name, size in (lookup(files, path) for path in IMAGE_FILES) if name]
    if not found:
        raise IsoError(
            "neither %s is in the extracted tree (%d files): this is not a Windows installer, or the reader "
            "saw only the ISO9660 side of a UDF hybrid" % (" nor ".join(IMAGE_FILES), len(files))
        )
    name, size = max(found, key=lambda item: item[1])
    if size < min_size:
        raise IsoError(
            "%s is %d bytes, below the %d bytes an install image has at least: the extraction read the "
            "ISO9660 side of a UDF/ISO9660 hybrid, which holds a stub where UDF holds the real file; "
            "extract with a UDF reader" % (name, size, min_size)
        )
    return {"path": name, "size": size}


def boot_images(files, efi_image=EFI_NOPROMPT_IMAGE, bios_image=BIOS_BOOT_IMAGE):
    """The two boot images as found in the tree (their real letter case); refuses a missing one."""
    found = {}
    for role, path in (("efi", efi_image), ("bios", bios_image)):
        name, size = lookup(files, path)
        if name is None:
            raise IsoError("%s boot image %s is not in the extracted tree" % (role.upper(), path))
        if not size:
            raise IsoError("%s boot image %s is empty" % (role.upper(), name))
        found[role] = name
    return found


def volume_id(label):
    """A label xorriso writes as it is: ISO9660 d-characters, at most 32."""
    cleaned = re.sub(r"[^A-Z0-9_]", "_", (label or "").upper())[:VOLUME_ID_MAX]
    return cleaned or "WINDOWS_INSTALL"


def xorriso_command(tree, dest, label, boot):
    """The rebuild: BIOS El Torito entry first (etfsboot), then the no-prompt EFI image, Joliet names kept.

    ISO level 3 lets a file exceed 4 GiB (install.wim usually does), split in extents.
    """
    return [
        "xorriso",
        "-as",
        "mkisofs",
        "-iso-level",
        "3",
        "-full-iso9660-filenames",
        "-joliet",
        "-joliet-long",
        "-relaxed-filenames",
        "-volid",
        volume_id(label),
        "-b",
        boot["bios"],
        "-no-emul-boot",
        "-boot-load-size",
        str(BIOS_LOAD_SECTORS),
        "-hide",
        "boot.catalog",
        "-eltorito-alt-boot",
        "-e",
        boot["efi"],
        "-no-emul-boot",
        "-o",
        dest,
        tree,
    ]


_ENTRY = re.compile(r"^El Torito boot img\s*:\s*(\d+)\s+(\S+)\s+(\S+)\s+(\S+)", re.MULTILINE)
_PATH = re.compile(r"^El Torito img path\s*:\s*(\d+)\s+(\S.*?)\s*$", re.MULTILINE)


def el_torito_entries(report):
    """Entries of ``xorriso -report_el_torito plain``: ``[{index, platform, bootable, emulation, path}]``."""
    paths = {int(match.group(1)): match.group(2) for match in _PATH.finditer(report)}
    return [
        {
            "index": int(match.group(1)),
            "platform": match.group(2),
            "bootable": match.group(3) == "y",
            "emulation": match.group(4),
            "path": paths.get(int(match.group(1)), ""),
        }
        for match in _ENTRY.finditer(report)
    ]


def check_boot_entries(entries):
    """The rebuilt ISO must boot both ways; refuses one missing the BIOS or the UEFI entry."""
    platforms = {entry["platform"] for entry in entries if entry["bootable"]}
    missing = [name for name in ("BIOS", "UEFI") if name not in platforms]
    if missing:
        raise IsoError(
            "the rebuilt ISO has no bootable %s El Torito entry (found: %s)"
            % (" or ".join(missing), ", ".join(sorted(platforms)) or "none")
        )


def up_to_date(record, source_sha256, settings, dest_sha256):
    """Whether a previous remaster (its ``record``) already made ``dest`` from this source and settings."""
    if not record or dest_sha256 is None:
        return False
    return (
        record.get("source_sha256") == source_sha256
        and record.get("settings") == settings
        and record.get("sha256") == dest_sha256
    )
