# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Is a rebuild due? APT repository metadata against the manifest of the default stream's tip.

Pure: parsing and decisions over text and bytes already fetched and a signature already checked
(``_apt_fetch.py`` does the HTTP and runs gpgv). A Release file lists, with their SHA256 and size, the
index files of its suite; a Packages index holds one paragraph per package version. A rebuild is due when
the repositories offer, for a package the image has installed:

- a newer PostgreSQL minor of a baked major (``postgresql-<major>``, from any configured suite),
- a security update (a newer version in a suite whose name ends in ``-security``),
- a new Ubuntu point release (a newer ``base-files``, which carries the release's number).

Other newer versions are counted but do not make a rebuild due: a build that would change nothing of
those three is not run.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from email.utils import parsedate_to_datetime

from ansible_collections.goldenimage.pipeline.plugins.module_utils import debversion
from ansible_collections.goldenimage.pipeline.plugins.module_utils.errors import PipelineError

POINT_RELEASE_PACKAGE = "base-files"
_PG = re.compile(r"^postgresql-(\d+)$")
# Index file names in the order they are preferred (smallest download first).
INDEX_NAMES = ("Packages.xz", "Packages.gz", "Packages")


class AptError(PipelineError):
    def __init__(self, msg, **fields):
        fields.setdefault("refused", True)
        super(AptError, self).__init__(msg, **fields)


def paragraphs(text):
    """deb822 paragraphs as dicts (continuation lines joined with newlines; field names as given)."""
    out, current, last = [], {}, None
    for line in text.splitlines():
        if not line.strip():
            if current:
                out.append(current)
            current, last = {}, None
            continue
        if line[0] in " \t" and last is not None:
            current[last] = current[last] + "\n" + line.strip()
            continue
        name, colon, value = line.partition(":")
        if not colon:
            raise AptError("not a deb822 line: %r" % line[:80])
        last = name.strip()
        current[last] = value.strip()
    if current:
        out.append(current)
    return out


def parse_release(text, where):
    """The fields of a Release file and its SHA256 list ``{path: (sha256, size)}``."""
    found = paragraphs(text)
    if not found:
        raise AptError("%s: the Release file is empty" % where)
    fields = found[0]
    files = {}
    for line in (fields.get("SHA256") or "").splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue
        digest, size, path = parts
        files[path] = (digest.lower(), int(size))
    if not files:
        raise AptError(
            "%s: the Release file lists no SHA256 checksums, so its indexes cannot be verified; use a "
            "repository that publishes SHA256" % where
        )
    return {"fields": fields, "files": files}


def check_fresh(release, now, where):
    """Refuse a Release past its ``Valid-Until`` (an old signed Release replayed hides newer updates).

    ``now`` is an aware datetime; a Release without ``Valid-Until`` (PGDG's) is taken as it is.
    """
    until = release["fields"].get("Valid-Until")
    if not until:
        return
    try:
        expiry = parsedate_to_datetime(until)
    except (TypeError, ValueError):
        raise AptError("%s: Valid-Until %r is not a date" % (where, until)) from None
    if expiry.tzinfo is None:
        expiry = expiry.replace(tzinfo=now.tzinfo)
    if expiry < now:
        raise AptError(
            "%s: the Release file expired on %s (Valid-Until), so it may hide newer updates; the mirror is "
            "stale or replayed: sync it or use another" % (where, until)
        )


def clearsigned_text(text):
    """The signed text inside an InRelease file's PGP SIGNED MESSAGE armour (dash-escaping undone).

    Only for showing what was fetched: the text whose signature gpgv checked is what ``gpgv --output``
    writes, and that is what is parsed.
    """
    lines = text.splitlines()
    try:
        start = lines.index("-----BEGIN PGP SIGNED MESSAGE-----")
        end = lines.index("-----BEGIN PGP SIGNATURE-----")
    except ValueError:
        raise AptError("not a clearsigned message") from None
    body = lines[start + 1 : end]
    while body and body[0].strip():  # armour headers (Hash: SHA512)
        body = body[1:]
    return "\n".join(line[2:] if line.startswith("- ") else line for line in body[1:]) + "\n"


def index_path(component, architecture, name="Packages"):
    return "%s/binary-%s/%s" % (component, architecture, name)


def pick_index(release, component, architecture, where):
    """``(path, sha256, size)`` of the Packages index to fetch for a component and architecture."""
    for name in INDEX_NAMES:
        path = index_path(component, architecture, name)
        if path in release["files"]:
            digest, size = release["files"][path]
            return path, digest, size
    raise AptError(
        "%s: the Release file lists no Packages index for %s/%s (looked for %s); check components and "
        "architectures" % (where, component, architecture, ", ".join(INDEX_NAMES))
    )


def check_index(where, path, digest, size, got_digest, got_size):
    if got_size != size or got_digest.lower() != digest:
        raise AptError(
            "%s: %s does not match the Release file (sha256 %s, %d bytes; got %s, %d bytes); the mirror is "
            "inconsistent or tampered with: retry later or use another mirror"
            % (where, path, digest, size, got_digest, got_size)
        )


def packages(text):
    """``{package: version}`` of a Packages index, the highest version of each package."""
    out = {}
    for para in paragraphs(text):
        name, version = para.get("Package"), para.get("Version")
        if not name or not version:
            continue
        if name not in out or debversion.newer(version, out[name]):
            out[name] = version
    return out


def pocket(suite):
    """``security``, ``updates`` or ``release`` of a suite name (``jammy-security`` -> ``security``)."""
    for name in ("security", "updates", "backports", "proposed"):
        if suite.endswith("-" + name):
            return name
    return "release"


# -------------------------------------------------------------------------------- manifest


def need_manifest_file(revision, path):
    """The catalog records no manifest for ``revision`` (the tip, None without a catalog): the build
    manifest must be given as a file (``path``)."""
    if not path:
        raise AptError(
            "%s has no manifest in the catalog; give manifest (the build manifest of that revision)"
            % (revision or "the tip")
        )


def manifest_revision(path, manifest, revision):
    """The revision compared: the catalog's tip (``revision``), which a manifest file of another revision
    may not stand in for; without a catalog, the one the file names."""
    named = (manifest or {}).get("revision")
    if revision and named and named != revision:
        raise AptError(
            "manifest %s is of revision %s but the default stream's tip is %s; give the tip's manifest"
            % (path, named, revision)
        )
    return revision or named


def manifest_packages(manifest, where):
    """``{package: version}`` the image has installed, from a build manifest or catalog entry."""
    listed = (manifest or {}).get("packages")
    if not listed:
        raise AptError(
            "%s has no package list, so nothing can be compared; publish the revision with a build "
            "manifest (provision.sh writes one) or give manifest" % where
        )
    out = {}
    if isinstance(listed, dict):
        out = {str(k): str(v) for k, v in listed.items()}
    else:
        for item in listed:
            name, sep, version = str(item).partition("=")
            if not sep:
                raise AptError("%s: package entry %r is not name=version" % (where, item))
            out[name.split(":")[0]] = version
    return out


def baked_majors(manifest):
    pg = (manifest or {}).get("pg_versions") or (manifest or {}).get("postgresql") or []
    if isinstance(pg, dict):
        return sorted(str(k) for k in pg)
    return sorted(str(item.get("major") if isinstance(item, dict) else item) for item in pg)


# -------------------------------------------------------------------------------- decision


def decide(installed, majors, offers):
    """``(reasons, other_updates)``.

    ``installed`` is ``{package: version}``, ``majors`` the baked PostgreSQL majors, ``offers`` a list of
    ``{"package", "version", "suite", "repository"}`` (each index's highest version of each package).
    A reason is ``{kind, package, manifest_version, available_version, pocket, suite, repository}``, kind
    ``postgresql-minor``, ``security`` or ``point-release``; one per package and kind, the highest version.
    """
    best = {}
    others = {}
    for offer in offers:
        name = offer["package"]
        have = installed.get(name)
        if have is None or not debversion.newer(offer["version"], have):
            continue
        kind = None
        match = _PG.match(name)
        if match and match.group(1) in majors:
            kind = "postgresql-minor"
        elif pocket(offer["suite"]) == "security":
            kind = "security"
        elif name == POINT_RELEASE_PACKAGE:
            kind = "point-release"
        if kind is None:
            if name not in others or debversion.newer(offer["version"], others[name]):
                others[name] = offer["version"]
            continue
        key = (kind, name)
        if key not in best or debversion.newer(offer["version"], best[key]["available_version"]):
            best[key] = {
                "kind": kind,
                "package": name,
                "manifest_version": have,
                "available_version": offer["version"],
                "pocket": pocket(offer["suite"]),
                "suite": offer["suite"],
                "repository": offer["repository"],
            }
    reasons = [best[k] for k in sorted(best)]
    return reasons, others


def reason_line(reason):
    return "%s: %s %s -> %s (%s, %s)" % (
        reason["kind"],
        reason["package"],
        reason["manifest_version"],
        reason["available_version"],
        reason["suite"],
        reason["repository"],
    )
