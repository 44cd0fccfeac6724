# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Is a rebuild due? APT repository metadata against the package manifest of each stream's tip.

Pure: parsing and decisions over text and bytes already fetched and a signature already checked
(``_apt_fetch.py`` does the HTTP and runs gpgv). A Release file lists, with their SHA256 and size, the
index files of its suite; a Packages index holds one paragraph per package version. A rebuild is due when
the repositories offer, for a package the image has installed:

- a newer PostgreSQL minor of a baked major (``postgresql-<major>``, from any configured suite),
- a security update (a newer version from a security archive, see ``security_archive``),
- a new Ubuntu point release (a newer ``base-files``, which carries the release's number).

Other newer versions are counted but do not make a rebuild due: a build that would change nothing of
those three is not run. Every newer version from a security archive is a security update, whatever else
it is (a PostgreSQL minor of Ubuntu's own ``postgresql-14`` in ``jammy-security`` is both).

The build manifest (what ``provision.sh`` lists and ``packer_build`` writes beside the artifact) is
recorded in the catalog entry of its revision by ``manifest_record``: the package list is kept there
compressed (``package_list``, zlib then base64 of the sorted ``name=version`` lines), as a ConfigMap
holds at most 1 MiB and the catalog keeps every revision ever built. Each stream's tip is compared with
the suites of its own release (``{codename}`` in a suite name stands for it).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import re
import zlib
from email.utils import parsedate_to_datetime

from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import debversion
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError

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


def security_archive(fields, suite):
    """Whether a Release file describes a security archive, read as apt's origin pinning reads it
    (unattended-upgrades' ``origin=Ubuntu,archive=jammy-security``, Debian's
    ``origin=Debian,label=Debian-Security``): its ``Suite`` or ``Codename`` is a ``-security`` pocket
    (Ubuntu's ``jammy-security``, ESM's ``jammy-infra-security``, Debian's ``bookworm-security``), or its
    ``Label`` names a security archive (``Debian-Security``, also buster's ``buster/updates``).

    ``fields`` are the Release file's, ``suite`` the directory it was fetched from: the fields decide, so a
    mirror that serves the security pocket under another directory name is still one, and a directory
    named ``-security`` whose Release says otherwise is not. The directory counts only for a Release that
    names neither its suite nor its codename.
    """
    named = [fields.get(key) or "" for key in ("Suite", "Codename")]
    if any(value.endswith("-security") for value in named):
        return True
    if "security" in (fields.get("Label") or "").lower():
        return True
    if not any(named):
        return pocket(suite) == "security"
    return False


def pocket(suite):
    """``security``, ``updates`` or ``release`` of a suite name (``jammy-security`` -> ``security``)."""
    for name in ("security", "updates", "backports", "proposed"):
        if suite.endswith("-" + name):
            return name
    return "release"


# -------------------------------------------------------------------------------- manifest

# Ubuntu LTS streams and their codenames; a catalog entry's facts (os-release's VERSION_CODENAME, read from
# the bytes) win over this table.
CODENAMES = {"20.04": "focal", "22.04": "jammy", "24.04": "noble"}
CODENAME_FIELD = "{codename}"
PACKAGE_LIST_ENCODING = "zlib+base64"


def manifest_packages(manifest, where):
    """``{package: version}`` the image has installed, from a build manifest or a catalog entry's record."""
    manifest = manifest or {}
    if manifest.get("package_list"):
        return _decoded_packages(manifest, where)
    listed = manifest.get("packages")
    if not listed or not isinstance(listed, (list, dict)):
        raise AptError(
            "%s has no package list, so nothing can be compared; publish the revision with a build "
            "manifest (provision.sh writes one) or give manifest" % where
        )
    return _package_map(listed, where)


def _package_map(listed, where):
    if isinstance(listed, dict):
        return {str(k): str(v) for k, v in listed.items()}
    out = {}
    for item in listed:
        name, sep, version = str(item).partition("=")
        if not sep:
            raise AptError("%s: package entry %r is not name=version" % (where, item))
        out[name.split(":")[0]] = version
    return out


def _decoded_packages(record, where):
    if record.get("encoding", PACKAGE_LIST_ENCODING) != PACKAGE_LIST_ENCODING:
        raise AptError(
            "%s: the package list is encoded as %r, which this collection does not read (it reads %s)"
            % (where, record.get("encoding"), PACKAGE_LIST_ENCODING)
        )
    try:
        text = zlib.decompress(base64.b64decode(record["package_list"], validate=True)).decode("utf-8")
    except (ValueError, TypeError, zlib.error) as exc:
        raise AptError(
            "%s: the recorded package list is not %s (%s); publish the revision's manifest again"
            % (where, PACKAGE_LIST_ENCODING, exc)
        ) from None
    return _package_map([line for line in text.splitlines() if line], where)


def manifest_record(manifest, sha256, location=None):
    """What a catalog entry records of a build manifest (the parsed JSON ``packer_build`` writes): the
    digest of its file (``sha256``), where its copy is (``location``, the bucket object), the kernel and
    PostgreSQL minors, and the package list, compressed (see the module's description).

    A manifest without a package list (an image built elsewhere, given without its build manifest) is
    recorded with ``package_count: 0`` and no list; the rebuild check then says it has nothing to compare.
    """
    manifest = manifest or {}
    listed = manifest.get("packages") or []
    packages = _package_map(listed, "the build manifest") if listed else {}
    record = {"sha256": str(sha256).lower()}
    if location:
        record["object"] = location
    if manifest.get("kernel"):
        record["kernel"] = manifest["kernel"]
    minors = {}
    for item in manifest.get("pg_versions") or []:
        if isinstance(item, dict) and item.get("major") and item.get("minor"):
            minors[str(item["major"])] = str(item["minor"])
    if minors:
        record["postgresql"] = minors
    record["package_count"] = len(packages)
    if packages:
        text = "".join("%s=%s\n" % kv for kv in sorted(packages.items()))
        record["encoding"] = PACKAGE_LIST_ENCODING
        record["package_list"] = base64.b64encode(zlib.compress(text.encode("utf-8"), 9)).decode("ascii")
    return record


def check_manifest_revision(path, manifest, name):
    """A build manifest recorded for revision ``name`` must be that revision's."""
    named = (manifest or {}).get("revision") if isinstance(manifest, dict) else None
    if named != name:
        raise AptError(
            "manifest %s is of revision %s, not %s; give the manifest packer_build wrote beside %s's artifact"
            % (path, named or "(none)", name, name)
        )


def baked_majors(manifest):
    pg = (manifest or {}).get("pg_versions") or (manifest or {}).get("postgresql") or []
    if isinstance(pg, dict):
        return sorted(str(k) for k in pg)
    return sorted(str(item.get("major") if isinstance(item, dict) else item) for item in pg)


def stream_codename(stream, facts=None):
    """The release codename of a stream: os-release's, as the entry's facts record it, else the table's."""
    read = ((facts or {}).get("os_release") or {}).get("version_codename")
    return read or CODENAMES.get(stream)


def suites_for(suites, codename):
    """The suites of a repository read for a stream whose release is ``codename``: each ``{codename}``
    replaced, and each literal suite of that release (``jammy``, ``jammy-security``, ``jammy-pgdg``).
    With no codename known (a manifest file naming no stream) every literal suite is read."""
    out = []
    for suite in suites:
        if CODENAME_FIELD in suite:
            if codename:
                out.append(suite.replace(CODENAME_FIELD, codename))
        elif codename is None or suite == codename or suite.startswith(codename + "-"):
            out.append(suite)
    return out


def check_suites(repositories, codenames):
    """Refuse a suite no stream compared reads (a misspelt ``jamy-security`` would silently drop the
    security check) unless it belongs to a release the table knows, a stream the catalog may get later;
    and ``{codename}`` when a compared stream's codename is not known."""
    known = set(CODENAMES.values()) | {c for c in codenames if c}
    for repo in repositories:
        for suite in repo["suites"]:
            if CODENAME_FIELD in suite:
                if None in codenames:
                    raise AptError(
                        "%s: suite %s names %s, but a manifest compared names no OS stream, so its release "
                        "is not known; give the suite literally" % (repo["url"], suite, CODENAME_FIELD)
                    )
                continue
            if suite.split("-")[0] not in known and None not in codenames:
                raise AptError(
                    "%s: suite %s belongs to no stream compared (releases %s) nor to a known Ubuntu release; "
                    "name the suite after the release (jammy-security) or write %s-security"
                    % (repo["url"], suite, ", ".join(sorted(c for c in codenames if c)), CODENAME_FIELD)
                )


def comparisons(tips, files):
    """``(compared, missing)``: what each stream's tip is compared with.

    ``tips`` is ``[(stream, revision, entry, default, validated)]`` from the catalog (None without one);
    ``files`` is ``[(path, manifest)]`` given as files. A tip's recorded manifest wins; a file stands in
    for the tip whose revision it names, and a file naming no tip is refused. ``compared`` items are
    dicts of ``stream, revision, default, validated, manifest, majors, codename``; ``missing`` lists the
    tips with neither.
    """
    if tips is None and not files:
        raise AptError("nothing to compare: give catalog (every stream's tip is compared) or manifest")
    if tips is not None and not tips:
        raise AptError(
            "the catalog has no stream with a registered tip, so nothing can be compared; publish a revision "
            "and move a stream's tip to it (baked_image_stream)"
        )
    if tips is None:
        compared = []
        for path, data in files:
            stream = (data or {}).get("os_version")
            stream = str(stream) if stream else None
            compared.append(_compared(stream, (data or {}).get("revision") or path, data, None, None, None))
        return compared, []
    by_revision = {}
    for path, data in files:
        named = (data or {}).get("revision")
        if named not in [t[1] for t in tips]:
            raise AptError(
                "manifest %s is of revision %s, which is the tip of no stream (%s); give a tip's manifest"
                % (path, named or "(none)", ", ".join("%s %s" % (t[0], t[1]) for t in tips) or "no tips")
            )
        by_revision[named] = data
    compared, missing = [], []
    for stream, rev, entry, default, validated in tips:
        data = entry.get("manifest") or by_revision.get(rev)
        if data is None:
            missing.append({"stream": stream, "revision": rev, "default": default})
            continue
        compared.append(_compared(stream, rev, data, entry, default, validated))
    return compared, missing


def _compared(stream, rev, data, entry, default, validated):
    return {
        "stream": stream,
        "revision": rev,
        "default": default,
        "validated": validated,
        "manifest": data,
        "majors": [str(m) for m in (entry or {}).get("pg_versions") or []] or baked_majors(data),
        "codename": stream_codename(stream, (entry or {}).get("facts")),
    }


def missing_line(missing):
    return (
        "%s %s records no package manifest in the catalog (it was published before builds recorded one), so "
        "the stream cannot be checked; publish a new revision of it, or give manifest (the tip's build "
        "manifest)" % (missing["stream"], missing["revision"])
    )


# -------------------------------------------------------------------------------- decision


def decide(installed, majors, offers):
    """``(reasons, other_updates)``.

    ``installed`` is ``{package: version}``, ``majors`` the baked PostgreSQL majors, ``offers`` a list of
    ``{"package", "version", "suite", "repository", "security"}`` (each index's highest version of each
    package; ``security`` is whether its Release is a security archive, the suite name's pocket when
    absent). A reason is ``{kind, package, manifest_version, available_version, pocket, suite, repository,
    security}``, kind ``postgresql-minor``, ``security`` or ``point-release``; one per package and kind, the
    highest version. ``security`` says the version comes from a security archive.
    """
    best = {}
    others = {}
    for offer in offers:
        name = offer["package"]
        have = installed.get(name)
        if have is None or not debversion.newer(offer["version"], have):
            continue
        secure = offer.get("security")
        if secure is None:
            secure = pocket(offer["suite"]) == "security"
        kind = None
        match = _PG.match(name)
        if match and match.group(1) in majors:
            kind = "postgresql-minor"
        elif secure:
            kind = "security"
        elif name == POINT_RELEASE_PACKAGE:
            kind = "point-release"
        if kind is None:
            if name not in others or debversion.newer(offer["version"], others[name]):
                others[name] = offer["version"]
            continue
        key = (kind, name)
        held = best.get(key)
        if held is None or debversion.newer(offer["version"], held["available_version"]):
            best[key] = {
                "kind": kind,
                "package": name,
                "manifest_version": have,
                "available_version": offer["version"],
                "pocket": pocket(offer["suite"]),
                "suite": offer["suite"],
                "repository": offer["repository"],
                "security": bool(secure),
            }
        elif secure and offer["version"] == held["available_version"]:
            held["security"] = True  # the same version also comes from a security archive
    reasons = [best[k] for k in sorted(best)]
    # A version a reason already names (Ubuntu puts each security update in -updates too) is no other update.
    named = {(r["package"], r["available_version"]) for r in reasons}
    return reasons, {k: v for k, v in others.items() if (k, v) not in named}


def security_updates(reasons):
    """``package version`` of each reason whose version a security archive offers."""
    return ["%s %s" % (r["package"], r["available_version"]) for r in reasons if r.get("security")]


def reason_line(reason):
    kind = reason["kind"]
    if reason.get("security") and kind != "security":
        kind += " (security)"
    return "%s: %s %s -> %s (%s, %s)" % (
        kind,
        reason["package"],
        reason["manifest_version"],
        reason["available_version"],
        reason["suite"],
        reason["repository"],
    )


def stream_lines(compared, reasons):
    """The lines of one stream's verdict, each led by its stream and tip."""
    head = "%s %s" % (compared["stream"] or "manifest", compared["revision"])
    if compared.get("default"):
        head += " (default stream)"
    if not reasons:
        return [
            "%s: no rebuild due, it has every PostgreSQL minor, security update and point release the "
            "repositories offer" % head
        ]
    return ["%s: %s" % (head, reason_line(r)) for r in reasons]
