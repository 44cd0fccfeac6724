# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The baked image catalog: every revision ever registered, the tip of each OS stream, the default stream.

Pure: no I/O (``_catalog_store.py`` reads and writes it). The document is versioned YAML:

    version: 1
    default_stream: "22.04"
    streams:
      "22.04": {tip: v20260615, validated: true}
    images:
      v20260615:
        os_version: "22.04"
        pg_versions: ["15", "16", "17"]
        build_date: "2026-06-15"
        checksum: <sha512 hex>
        source: <download URL without credentials or signature, or upload>
        image: {namespace: harvester-public, name: ubuntu-2204-postgres-v20260615}
        storage_class: lh-<uid>
        imported: true
        manifest: {sha256: <hex>, object: s3://<bucket>/<key>, package_count: 712,
                   encoding: zlib+base64, package_list: <the installed packages>}
        signature: {verdict: verified, key: <key id>, signer: release-2026, artifact: <file name>,
                    sha256: <hex>, sha512: <the checksum>, family: <family>, inputs: [...], builder: {...}}
    trust:
      keys:
        - name: release-2026
          public_key: "-----BEGIN PUBLIC KEY-----\n...\n-----END PUBLIC KEY-----"
          streams: ["22.04", "24.04"]        # left out: every stream
          families: [ubuntu-2204-postgres]    # left out: every family
      streams:
        "24.04": {require_signature: false, reason: <why this stream may go unsigned>}

The ``trust`` section is the policy a registration verifies an artifact's signature and provenance
against (``trust_policy``): which public keys may sign which streams and families, and the streams whose
``require_signature`` is relaxed, each only with its reason recorded. A catalog without one checks no
signature; with one, every stream it does not relax requires a signature.

Images are never removed and never change their content: registering a revision again with another
checksum or source is refused ("build a new revision"). No secret is ever stored: every URL in every
entry is kept without its user-info and without a signed query (a presigned URL is a bearer
credential), whoever wrote the entry; ``normalize`` applies that to each entry, so a catalog read with a
signed entry is written back without it (``unstorable`` names such entries). The default stream is
always validated, so an
untested image cannot reach new databases by accident. Every function returns a new document and
leaves its input alone.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import copy
import datetime
import difflib

from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import eol, revision
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import inputs, redact
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance

CATALOG_VERSION = 1
# How long an instance whose PostgreSQL major reached end of life may run before it is deleted whatever its
# owner does (the seed's "force-deleted at T+3 months"); a catalog may hold its own.
GRACE_KEY = "migration_grace_months"
MIGRATION_GRACE_MONTHS = 3
DATA_KEY = "catalog.yaml"
# The entry's record of the build manifest (apt_release.manifest_record makes it).
MANIFEST = "manifest"
IDENTITY = ("os_version", "pg_versions", "checksum", "source")
_ENTRY_ORDER = (
    "os_version",
    "pg_versions",
    "build_date",
    "checksum",
    "source",
    "image",
    "storage_class",
    "imported",
)


class CatalogError(PipelineError):
    """A catalog change or lookup that the rules refuse; the message says why and what to do."""

    def __init__(self, msg, **fields):
        fields.setdefault("refused", True)
        super(CatalogError, self).__init__(msg, **fields)


def empty():
    return {"version": CATALOG_VERSION, "default_stream": None, "streams": {}, "images": {}}


# --------------------------------------------------------------------------- text


def _yaml():
    import yaml

    return yaml


def load(text):
    """Parse catalog YAML (empty text is an empty catalog) and check its shape."""
    if text is None or not str(text).strip():
        return empty()
    try:
        yaml = _yaml()
        # libyaml's loader when PyYAML has it: a catalog of many revisions is a megabyte of YAML.
        doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except Exception as exc:
        raise CatalogError("the catalog is not valid YAML: %s" % exc) from exc
    return normalize(doc)


def normalize(doc):
    """A checked, normalized copy of a catalog given as a dict."""
    if doc is None:
        return empty()
    if not isinstance(doc, dict):
        raise CatalogError("the catalog must be a mapping with version, default_stream, streams and images")
    version = doc.get("version", CATALOG_VERSION)
    if version != CATALOG_VERSION:
        raise CatalogError(
            "catalog version %r is not understood by this collection (it reads version %d)"
            % (version, CATALOG_VERSION)
        )
    result = empty()
    for name, entry in (doc.get("images") or {}).items():
        if not isinstance(entry, dict):
            raise CatalogError("catalog image %s must be a mapping" % name)
        item = _storable(copy.deepcopy(entry))
        item["os_version"] = revision.validate_stream(item.get("os_version"))
        item["pg_versions"] = _majors(item.get("pg_versions") or [])
        item["imported"] = bool(item.get("imported", False))
        result["images"][str(name)] = item
    for stream, entry in (doc.get("streams") or {}).items():
        entry = entry or {}
        result["streams"][revision.validate_stream(stream)] = {
            "tip": entry.get("tip"),
            "validated": bool(entry.get("validated", False)),
        }
    default = doc.get("default_stream")
    result["default_stream"] = revision.validate_stream(default) if default else None
    if doc.get(GRACE_KEY) is not None:
        result[GRACE_KEY] = _grace(doc[GRACE_KEY])
    if doc.get(TRUST) is not None:
        result[TRUST] = normalize_trust(doc[TRUST])
    return result


def _storable(value):
    """``value`` (an entry or part of one) with every URL that carries a secret made storable."""
    if isinstance(value, dict):
        return {key: _storable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_storable(item) for item in value]
    if isinstance(value, str) and (redact.signed(value) or redact.credentials(value) != (None, None)):
        return redact.storable_url(value)
    return value


def unstorable(text):
    """The revisions whose entry in catalog ``text`` (as stored) holds a signed URL or user-info, which
    the catalog never keeps: a store that reads them writes the catalog back without them."""
    try:
        raw = _yaml().safe_load(text or "")
    except Exception:
        return []  # load() says what is wrong with it
    images = raw.get("images") if isinstance(raw, dict) else None
    if not isinstance(images, dict):
        return []
    return sorted(str(name) for name, entry in images.items() if _storable(entry) != entry)


# A ConfigMap holds at most 1 MiB (etcd's request limit, data and metadata together); the catalog stops
# short of it so the write is refused here, with a move, rather than by the API server.
CONFIGMAP_BUDGET = 1000 * 1024


def check_configmap_size(text, where):
    """Refuses catalog ``text`` too large for a ConfigMap, naming the largest revisions and the moves."""
    size = len(text.encode("utf-8"))
    if size <= CONFIGMAP_BUDGET:
        return
    doc = load(text)
    sizes = sorted(
        ((len(dump({"version": 1, "images": {n: e}}).encode("utf-8")), n) for n, e in doc["images"].items()),
        reverse=True,
    )
    largest = ", ".join("%s (%d KiB)" % (name, bytes_ // 1024) for bytes_, name in sizes[:3])
    raise CatalogError(
        "%s would hold %d KiB, more than a ConfigMap's %d KiB allow with room for its metadata (largest "
        "revisions: %s, most of it their package lists); nothing was written. Keep the catalog in a file "
        "(catalog.path, in Git), which has no such limit"
        % (where, size // 1024, CONFIGMAP_BUDGET // 1024, largest)
    )


def dump(doc):
    """Deterministic YAML: fixed key order, revisions and streams sorted, so Git diffs stay small."""
    doc = normalize(doc)
    streams = {}
    for name in sorted(doc["streams"]):
        streams[name] = {"tip": doc["streams"][name]["tip"], "validated": doc["streams"][name]["validated"]}
    images = {}
    for name in sorted(doc["images"], key=_revision_key):
        entry = doc["images"][name]
        ordered = {key: entry[key] for key in _ENTRY_ORDER if key in entry}
        ordered.update((k, entry[k]) for k in sorted(entry) if k not in ordered)
        images[name] = ordered
    out = {
        "version": doc["version"],
        "default_stream": doc["default_stream"],
        "streams": streams,
        "images": images,
    }
    if GRACE_KEY in doc:
        out[GRACE_KEY] = doc[GRACE_KEY]
    if TRUST in doc:
        out[TRUST] = doc[TRUST]
    yaml = _yaml()
    return yaml.dump(
        out,
        Dumper=_dumper(yaml),
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
    )


def _dumper(yaml):
    """The safe dumper (libyaml's when there), writing a multi-line string (a PEM key of the trust policy) as
    a literal block, as a person writes it in Git."""
    base = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

    class Dumper(base):
        pass

    def text(dumper, value):
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return Dumper


def _revision_key(name):
    try:
        return (0, revision.revision_sort_key(name))
    except PipelineError:
        return (1, name)


def _majors(values):
    try:
        majors = sorted({eol.normalize_pg_major(v) for v in values}, key=int)
    except PipelineError as exc:
        raise CatalogError(exc.msg) from exc
    return majors


# ---------------------------------------------------------------------------- images


def register_image(doc, name, os_version, pg_versions, checksum, source, image=None, **extra):
    """Record revision ``name``; returns ``(new_doc, changed)``.

    A revision already registered with another OS, PG set, checksum or source is refused: its content
    is fixed once published. Other fields (``image``, ``storage_class``, ``imported``) are updated.
    """
    doc = normalize(doc)
    try:
        rev = revision.validate_revision(name, os_version)
    except PipelineError as exc:
        raise CatalogError(exc.msg) from exc
    if not pg_versions:
        raise CatalogError("revision %s: pg_versions is empty; an image carries at least one major" % name)
    wanted = {
        "os_version": rev.os_stream,
        "pg_versions": _majors(pg_versions),
        "checksum": str(checksum or "").strip().lower() or None,
        "source": storable_source(source),
    }
    current = doc["images"].get(name)
    if current is not None:
        differs = [k for k in IDENTITY if wanted[k] is not None and current.get(k) != wanted[k]]
        if differs:
            detail = "; ".join("%s %r, now %r" % (k, current.get(k), wanted[k]) for k in differs)
            raise CatalogError(
                "revision %s is already in the catalog with other content (%s); published images are "
                "immutable: build a new revision" % (name, detail)
            )
        updated = dict(current)
    else:
        updated = dict(wanted, build_date=rev.date.isoformat())
    if image is not None:
        updated["image"] = dict(image)
    _same_manifest(name, current, extra.get(MANIFEST))
    for key, value in extra.items():
        if value is not None:
            updated[key] = value
    updated.setdefault("imported", False)
    updated = _storable(updated)
    if doc["images"].get(name) == updated:
        return doc, False
    doc["images"][name] = updated
    return doc, True


def _same_manifest(name, current, record):
    """A revision's package manifest is part of what was published: once recorded, another one (a
    different file digest) is refused like another checksum."""
    held = (current or {}).get(MANIFEST)
    if not record or not isinstance(held, dict) or not held.get("sha256"):
        return
    if held["sha256"] != record.get("sha256"):
        raise CatalogError(
            "revision %s is already in the catalog with another package manifest (sha256 %s, now %s); "
            "published images are immutable: build a new revision"
            % (name, held["sha256"], record.get("sha256"))
        )


def storable_source(source):
    """A source as the catalog may hold it: a signed query stripped, user-info masked (``upload``
    stays)."""
    return redact.storable_url(source)


def mark_imported(doc, name, imported=True):
    """Note what the cluster reports about revision ``name``'s image; returns ``(new_doc, changed)``.

    ``imported=False`` is for an image found missing or deleted: the catalog never keeps saying
    ``imported: true`` for an image that is gone.
    """
    doc = normalize(doc)
    entry = doc["images"].get(name)
    if entry is None or bool(entry.get("imported")) == bool(imported):
        return doc, False
    doc["images"][name] = dict(entry, imported=bool(imported))
    return doc, True


def records_image(entry, name, image):
    """Whether catalog entry ``entry`` of revision ``name`` stands for the VirtualMachineImage ``image``
    (``{namespace, name}``): it names it, or names no image at all (then nobody can say it does not)."""
    recorded = (entry or {}).get("image")
    if not recorded:
        return True
    return recorded.get("namespace") == image.get("namespace") and recorded.get("name") == image.get("name")


def tips_using(doc, name, image):
    """``[(stream, why)]`` for each stream whose tip is revision ``name`` recorded as ``image``."""
    doc = normalize(doc)
    found = []
    for stream in sorted(doc["streams"]):
        entry = doc["streams"][stream]
        if entry.get("tip") != name or not records_image(doc["images"].get(name), name, image):
            continue
        notes = ["validated" if entry.get("validated") else "not validated"]
        if doc["default_stream"] == stream:
            notes.append("the default stream, which new databases get")
        found.append((stream, "its tip is %s (%s)" % (name, ", ".join(notes))))
    return found


# --------------------------------------------------------------------------- streams


def available_since(name, image):
    """The first day revision ``name`` can have been offered to a database: the later of its build date
    (the catalog's, else its name's) and the day of its last passing smoke test, the evidence its
    validation rests on. A revision built long ago and validated today is available from today, so a date
    counted from it never falls before anyone could have applied it. ISO date or None."""
    days = []
    try:
        built = revision.build_date(image["build_date"]) if image.get("build_date") else None
        days.append(built or revision.parse_revision(name).date)
    except PipelineError:
        pass
    passed = [
        t.get("at") for t in image.get(SMOKE_TESTS) or [] if t.get("result") == "passed" and t.get("at")
    ]
    if passed:
        try:
            days.append(datetime.date.fromisoformat(str(max(passed))[:10]))
        except ValueError:
            pass
    return max(days).isoformat() if days else None


def set_stream(
    doc, os_version, tip=None, validated=None, default=None, imported=None, missing=False, rollback=False
):
    """Move a stream's tip, set ``validated``, make it the default; returns ``(new_doc, changed)``.

    ``imported`` is what the cluster says about ``tip`` (or, without ``tip``, about the stream's
    current tip) right now (None: trust the catalog); ``missing`` says its VirtualMachineImage does
    not exist at all. Neither a moved tip nor a sign-off or default lands on an image that is gone or
    not imported, whatever the catalog's ``imported`` says. Moving the tip resets ``validated`` to
    false unless it is given: the sign-off belongs to a revision. A tip moves back to an older revision
    only with ``rollback``: it offers every instance on the newer one a repave to the older image.
    """
    doc = normalize(doc)
    stream = revision.validate_stream(os_version)
    before = doc["streams"].get(stream)
    entry = dict(before or {"tip": None, "validated": False})
    if tip is not None and tip != entry["tip"]:
        _check_tip(doc, stream, tip, imported, missing)
        if entry["tip"] and not rollback and revision.is_newer(entry["tip"], tip):
            raise CatalogError(
                "revision %s is older than %s, the tip of stream %s: moving the tip back offers every "
                "instance on %s a repave to the older image; give rollback: true to move it back on purpose, "
                "or publish a new revision" % (tip, entry["tip"], stream, entry["tip"])
            )
        entry = {"tip": tip, "validated": False}
    elif tip is not None:
        _check_tip(doc, stream, tip, imported, missing)
    elif entry["tip"] and (validated is True or default is True) and (missing or imported is not None):
        _check_tip(doc, stream, entry["tip"], imported, missing)
    if entry["tip"] is None:
        raise CatalogError("stream %s has no tip yet; give the revision to put at its tip" % stream)
    if validated is not None:
        entry["validated"] = bool(validated)
    is_default = doc["default_stream"] == stream
    if default is True:
        _require_validated(stream, entry)
    if default is False and is_default:
        raise CatalogError(
            "stream %s is the default OS stream; make another validated stream the default instead" % stream
        )
    if is_default and not entry["validated"]:
        raise CatalogError(
            "stream %s is the default OS stream, so its tip must stay validated: move the tip to %s with "
            "validated: true once it is tested, or make another validated stream the default first"
            % (stream, entry["tip"])
        )
    doc["streams"][stream] = entry
    if default is True:
        doc["default_stream"] = stream
    changed = before != entry or (default is True and not is_default)
    return doc, changed


def _require_validated(stream, entry):
    if not entry["validated"]:
        raise CatalogError(
            "stream %s (tip %s) is not validated and cannot become the default OS stream; test it and set "
            "validated: true first" % (stream, entry["tip"])
        )


def default_candidate(doc, os_version):
    """``(stream, tip)`` of a stream that may be the default OS stream, the one new databases get.

    The one gate for a default, whoever records it (the catalog's ``default_stream``, the operator's
    environment): the stream is in the catalog with a registered tip, and that tip is validated.
    """
    doc = normalize(doc)
    stream = revision.validate_stream(os_version)
    entry = doc["streams"].get(stream)
    if entry is None or not entry.get("tip"):
        raise CatalogError(
            "stream %s has no tip in the catalog and cannot become the default OS stream; put a tested "
            "revision at its tip with goldenimage.pipeline.baked_image_stream first" % stream
        )
    if entry["tip"] not in doc["images"]:
        raise CatalogError(
            "stream %s: its tip %s is not a registered revision and cannot become the default OS stream; "
            "register it with goldenimage.pipeline.baked_image first" % (stream, entry["tip"])
        )
    _require_validated(stream, entry)
    return stream, entry["tip"]


def _check_tip(doc, stream, tip, imported, missing=False):
    image = doc["images"].get(tip)
    if image is None:
        raise CatalogError(
            "revision %s is not in the catalog; register it with goldenimage.pipeline.baked_image first" % tip
        )
    if image["os_version"] != stream:
        raise CatalogError(
            "revision %s is an Ubuntu %s image and cannot be the tip of stream %s"
            % (tip, image["os_version"], stream)
        )
    if missing:
        ref = image.get("image") or {}
        raise CatalogError(
            "revision %s: its VirtualMachineImage %s/%s does not exist; register the revision again with "
            "goldenimage.pipeline.baked_image, or put another imported revision at the tip of stream %s"
            % (tip, ref.get("namespace"), ref.get("name"), stream)
        )
    done = image.get("imported") if imported is None else imported
    if not done:
        raise CatalogError(
            "revision %s is not imported yet (its VirtualMachineImage is not Imported=True); wait for the "
            "import to finish before moving a stream to it" % tip
        )


# ------------------------------------------------------------------- engine versions


def default_tip(doc, stream=None):
    """``(stream, revision name, image entry)`` of the tip a new database gets: of ``stream`` (a DBInstance's
    own ``spec.osVersion``) when given, else of the default stream; refuses a stream without a registered,
    validated tip, as the operator does."""
    doc = normalize(doc)
    named = stream not in (None, "")
    stream = str(stream) if named else doc["default_stream"]
    what = "OS stream %s (spec.osVersion)" % stream if named else "the default OS stream %s" % stream
    if not stream:
        raise CatalogError("the catalog has no default OS stream; set one with baked_image_stream")
    if named and stream not in doc["streams"]:
        raise CatalogError(
            "%s is not a stream of the catalog (streams: %s); name one of them, or leave osVersion out to "
            "follow the default stream" % (what, ", ".join(sorted(doc["streams"])) or "none")
        )
    entry = doc["streams"].get(stream) or {}
    tip = entry.get("tip")
    if not tip or tip not in doc["images"]:
        raise CatalogError("%s has no registered tip revision" % what)
    if not entry.get("validated"):
        raise CatalogError("%s (tip %s) is not validated" % (what, tip))
    return stream, tip, doc["images"][tip]


def stream_tips(doc):
    """``[(stream, tip, entry, default, validated)]`` of every stream whose tip is registered, the default
    stream first, then the others by name. A stream without a tip has nothing to compare and is left out."""
    doc = normalize(doc)
    default = doc["default_stream"]
    out = []
    for stream in sorted(doc["streams"], key=lambda s: (s != default, s)):
        entry = doc["streams"][stream]
        tip = entry.get("tip")
        if tip and tip in doc["images"]:
            out.append((stream, tip, doc["images"][tip], stream == default, bool(entry.get("validated"))))
    return out


def supported_engine_versions(doc, today=None, eol_table=None, target=None, stream=None):
    """PG majors a database may run: in ``target`` (a revision; default: the tip of ``stream``, else of the
    default stream) and not past EOL (a major the EOL table does not know is not supported), oldest first."""
    image = doc["images"][target] if target else default_tip(doc, stream)[2]
    day = eol.parse_today(today)
    refused = {v["version"] for v in eol.check_eol(image["pg_versions"], None, day, eol_table)}
    return [major for major in image["pg_versions"] if major not in refused]


# The problems check_engine_version finds.
UNSET, MALFORMED, NOT_CARRIED, PAST_EOL, NO_EOL_DATE, NONE_SUPPORTED = (
    "unset",
    "malformed",
    "not-carried",
    "past-eol",
    "no-eol-date",
    "none-supported",
)


def requested_major(requested, today=None, eol_table=None):
    """What an engineVersion says by itself, no revision involved: ``{requested, major, problem, detail,
    eol_date, past_eol}``. ``major`` is None when it is not set (``problem`` unset) or not a major number
    (``malformed``; ``detail`` says why when it is not even a string); ``eol_date`` is that major's end
    of life (None: the table does not know it), ``past_eol`` whether ``today`` is after it."""
    found = {"requested": requested, "major": None, "problem": None, "detail": None}
    found.update(_end_of_life(None, today, eol_table))
    if requested is None or requested == "":
        found["problem"] = UNSET
        return found
    whole = eol.zeros_major(requested)
    if whole:
        # 16.0 (a YAML number) and "16.0" get the one answer: a major is a whole number.
        found.update(
            problem=MALFORMED,
            detail="engineVersion %r is not a major version: a major is a whole number, so write "
            'engineVersion: "%s"' % (requested, whole),
        )
        return found
    try:
        text = inputs.version_string(requested, "engineVersion")
    except PipelineError as exc:  # not even a string
        found.update(problem=MALFORMED, detail=exc.msg)
        return found
    try:
        found["major"] = eol.normalize_pg_major(text)
    except PipelineError:
        found["problem"] = MALFORMED  # a string, but not a major number
        return found
    found.update(_end_of_life(found["major"], today, eol_table))
    return found


def _end_of_life(major, today, eol_table):
    date = eol.eol_table(eol_table)[eol.PG].get(major) if major else None
    return {"eol_date": date, "past_eol": bool(date and date < eol.parse_today(today))}


def check_engine_version(doc, requested=None, today=None, eol_table=None, target=None, stream=None):
    """The one engineVersion rule, as a verdict; every caller (the engine_version filter, dbinstance_spec,
    the repave pre-flight and drift report) decides with it and words the answer its own way.

    ``target`` None: a new database, on the tip of ``stream`` (its ``spec.osVersion``) or of the default
    stream; an absent or empty engineVersion takes the newest supported major of that tip. ``target`` a
    revision: a running database moving onto it (a repave), whose major cannot be defaulted: an absent one
    is ``unset``.

    Returns ``requested_major``'s fields plus ``revision``, ``stream`` (the revision checked against),
    ``supported`` (its majors not past EOL) and ``defaulted``. ``problem`` is None when the major may
    run there, else, in this order: ``unset``, ``malformed``, ``none-supported`` (nothing to default to),
    ``not-carried`` (the revision lacks the major), ``past-eol`` or ``no-eol-date`` (the EOL table does
    not know the major, so nobody can say it is supported).
    """
    if target:
        if target not in doc["images"]:
            raise CatalogError("revision %s is not in the catalog" % target)
        stream, tip, image = doc["images"][target]["os_version"], target, doc["images"][target]
    else:
        stream, tip, image = default_tip(doc, stream)
    day = eol.parse_today(today)
    found = requested_major(requested, day, eol_table)
    found.update(
        revision=tip,
        stream=stream,
        supported=supported_engine_versions(doc, day, eol_table, tip),
        defaulted=False,
    )
    if found["problem"] == UNSET and not target:
        if not found["supported"]:
            found["problem"] = NONE_SUPPORTED
            return found
        major = found["supported"][-1]
        found.update(major=major, problem=None, defaulted=True, **_end_of_life(major, day, eol_table))
        return found
    if found["problem"]:
        return found
    if found["major"] not in image["pg_versions"]:
        found["problem"] = NOT_CARRIED
    elif found["eol_date"] is None:
        found["problem"] = NO_EOL_DATE
    elif found["past_eol"]:
        found["problem"] = PAST_EOL
    return found


def resolve_engine_version(doc, requested=None, today=None, eol_table=None, stream=None):
    """The PG major a new database gets (``check_engine_version`` decides): empty -> the newest
    supported major of the default stream's tip; a major not in that tip, or past its EOL, is refused
    with the supported list."""
    found = check_engine_version(doc, requested, today, eol_table, stream=stream)
    problem, major, listing = found["problem"], found["major"], ", ".join(found["supported"]) or "none"
    if problem is None:
        return major
    if problem == NONE_SUPPORTED:
        raise CatalogError(
            "no supported PostgreSQL major in %s (OS stream %s): every major it carries is past "
            "end of life" % (found["revision"], found["stream"])
        )
    if problem == MALFORMED and found["detail"]:
        raise CatalogError("%s; supported: %s" % (found["detail"], listing))
    if problem == MALFORMED:
        raise CatalogError(
            "engineVersion %r is set but is not a major version number (such as 16); supported: %s"
            % (requested, listing)
        )
    if problem == NOT_CARRIED:
        raise CatalogError(
            "engineVersion %s is not in revision %s (OS stream %s); supported: %s"
            % (major, found["revision"], found["stream"], listing)
        )
    if problem == NO_EOL_DATE:
        raise CatalogError(
            "engineVersion %s has no end-of-life date in the EOL table, so it is not supported; supported: %s"
            % (major, listing)
        )
    raise CatalogError(
        "engineVersion %s reached end of life on %s; supported: %s"
        % (major, found["eol_date"].isoformat(), listing)
    )


ENGINE_VERSION = "engineVersion"


def dbinstance_subject(definition):
    """How a refusal names the DBInstance: its namespace/name when the manifest has one."""
    meta = (definition or {}).get("metadata") or {}
    if meta.get("name"):
        return "DBInstance %s/%s" % (meta.get("namespace") or "default", meta["name"])
    return "DBInstance spec"


def manifest_spec(definition):
    """The ``spec`` of a DBInstance manifest; a manifest without a spec mapping is refused."""
    spec = (definition or {}).get("spec")
    if not isinstance(spec, dict):
        raise CatalogError(
            "%s: the manifest has no spec mapping; give the DBInstance manifest"
            % dbinstance_subject(definition)
        )
    return spec


OS_VERSION = "osVersion"
# The spec fields the collection reads; a key a letter or two away from one of them is a misspelling that
# would otherwise silently mean "not set" (the operator's schema keeps unknown fields).
SPEC_FIELDS = (ENGINE_VERSION, OS_VERSION)


def misspelt_spec_fields(spec):
    """``[(given key, the field it misspells)]``: keys of ``spec`` that are not a field the collection reads
    but are that close to one that is not set."""
    found = []
    for key in spec:
        if key in SPEC_FIELDS or not isinstance(key, str):
            continue
        for field in SPEC_FIELDS:
            if field not in spec and _near(key.lower(), field.lower()):
                found.append((key, field))
    return found


def _near(one, other):
    """Whether two names are a slip of the keyboard apart (a letter or two swapped, dropped or doubled)."""
    return difflib.SequenceMatcher(None, one, other).ratio() >= 0.8


def dbinstance_spec(doc, spec, today=None, eol_table=None):
    """A DBInstance ``spec`` as it may be applied: ``(new spec, engine version, defaulted, stream)``.

    The one engineVersion rule (``resolve_engine_version``) decides, against the tip of the instance's own
    ``osVersion`` when it names one, else of the default stream: absent or empty takes the newest supported
    major of that tip, and a major not in that tip or past its EOL is refused. A key that misspells
    ``engineVersion`` or ``osVersion`` is refused rather than read as "not set". The spec given is not
    changed; the copy returned carries the resolved ``engineVersion``.
    """
    if not isinstance(spec, dict):
        raise CatalogError("DBInstance spec: expected a mapping, got %s" % type(spec).__name__)
    for key, field in misspelt_spec_fields(spec):
        raise CatalogError(
            "spec.%s is not a DBInstance field the operator reads; it looks like %s misspelt, which would "
            "leave %s unset; rename it to %s" % (key, field, field, field)
        )
    stream = inputs.version_string(spec.get(OS_VERSION), "spec.%s" % OS_VERSION)
    requested = spec.get(ENGINE_VERSION)
    major = resolve_engine_version(doc, requested, today=today, eol_table=eol_table, stream=stream)
    out = copy.deepcopy(spec)
    out[ENGINE_VERSION] = major
    return out, major, requested is None or requested == "", default_tip(doc, stream)[0]


# ------------------------------------------------------------------------ validation

SMOKE_TESTS = "smoke_tests"
PASSED, FAILED = "passed", "failed"
SMOKE_TESTS_KEPT = 10


def smoke_test(doc, name, ref, instance, at, by):
    """The record of a smoke test of revision ``name`` on the DBInstance ``ref`` (``namespace/name``),
    ``instance`` as observed now (None when it does not exist).

    It passes when the test instance reached ``Available`` on that revision (``status.appliedSpec``
    ``imageRevision``) and answers with an ``engineVersion`` the revision carries; otherwise it fails,
    saying why. ``at`` is the time of the observation (ISO 8601), ``by`` who ran it.
    """
    doc = normalize(doc)
    image = doc["images"].get(name)
    if image is None:
        raise CatalogError("revision %s is not in the catalog; register it before testing it" % name)
    status = (instance or {}).get("status") or {}
    applied = status.get("appliedSpec") or {}
    engine = str(applied.get("engineVersion") or "").strip()
    meta = (instance or {}).get("metadata") or {}
    record = {
        "revision": name,
        "dbinstance": ref,
        # What was observed: the same object at the same resourceVersion is the same test, however often a
        # run that lost its reply is repeated.
        "uid": meta.get("uid"),
        "resource_version": meta.get("resourceVersion"),
        "at": at,
        "by": by,
        "phase": status.get("phase"),
        "engine_version": engine or None,
    }
    if not instance:
        reason = "the test DBInstance does not exist"
    elif status.get("phase") != "Available":
        reason = "the test DBInstance is %s, not Available (%s)" % (
            status.get("phase"),
            status.get("message"),
        )
    elif applied.get("imageRevision") != name:
        reason = "the test DBInstance runs %s, not %s" % (applied.get("imageRevision"), name)
    elif not engine:
        reason = "the test DBInstance answers with no engineVersion"
    elif engine not in image["pg_versions"]:
        reason = "the test DBInstance answers engineVersion %s, which %s does not carry" % (engine, name)
    else:
        reason = None
    record.update(result=FAILED if reason else PASSED, reason=reason)
    return record


SMOKE_TEST_IDENTITY = ("dbinstance", "uid", "resource_version", "result")


def same_smoke_test(one, other):
    """Whether two records are one observation: the same DBInstance object, unchanged since, with the same
    result (the time it was looked at and who looked do not make it another test)."""
    return all(one.get(key) == other.get(key) for key in SMOKE_TEST_IDENTITY)


def record_smoke_test(doc, record):
    """The catalog with ``record`` added to its revision's ``smoke_tests`` (the last ten are kept), and
    whether it changed: a record of the observation the last one already holds is not added again."""
    doc = normalize(doc)
    entry = dict(doc["images"][record["revision"]])
    tests = list(entry.get(SMOKE_TESTS) or [])
    if tests and record.get("uid") and same_smoke_test(tests[-1], record):
        return doc, False
    entry[SMOKE_TESTS] = (tests + [dict(record)])[-SMOKE_TESTS_KEPT:]
    doc["images"][record["revision"]] = entry
    return doc, True


def validation_evidence(doc, name):
    """The last smoke test recorded for revision ``name`` when it passed, else None."""
    tests = ((normalize(doc)["images"].get(name) or {}).get(SMOKE_TESTS)) or []
    last = tests[-1] if tests else None
    return last if last and last.get("result") == PASSED else None


def require_validation_evidence(doc, os_version, tip=None):
    """A stream becomes validated only on evidence: the last smoke test recorded for the revision it
    validates (``tip``, default its current tip) passed. A stream already validated on that tip needs
    nothing more. Raises CatalogError naming the revision and how to test it."""
    doc = normalize(doc)
    stream = revision.validate_stream(os_version)
    current = doc["streams"].get(stream) or {}
    name = tip or current.get("tip")
    if name is None or (current.get("tip") == name and current.get("validated")):
        return None
    evidence = validation_evidence(doc, name)
    if evidence is not None:
        return evidence
    tests = (doc["images"].get(name) or {}).get(SMOKE_TESTS) or []
    why = (
        "its last smoke test failed (%s at %s: %s)"
        % (tests[-1]["dbinstance"], tests[-1]["at"], tests[-1]["reason"])
        if tests
        else "no smoke test of it is recorded"
    )
    raise CatalogError(
        "stream %s: revision %s cannot be validated, %s; provision a test DBInstance from %s, wait for it to "
        "be Available, then record the test with baked_image_stream smoke_test: {namespace, name} (a "
        "separate run from the build)" % (stream, name, why, name)
    )


# ----------------------------------------------------------------------------- facts

FACTS = "facts"


def facts_problems(entry):
    """What is wrong with the facts a catalog ``entry`` records about its bytes: [] when they were read
    (baked_image ``artifact``) and say what the entry is declared to be, with no private key and no
    initialized cluster every VM would share."""
    facts = (entry or {}).get(FACTS)
    if not isinstance(facts, dict) or not facts:
        return ["no facts read from its bytes are recorded (it was registered without artifact)"]
    problems = []
    read = (facts.get("os_release") or {}).get("version_id")
    if read != entry.get("os_version"):
        problems.append(
            "its os-release says VERSION_ID=%s, it is declared %s" % (read, entry.get("os_version"))
        )
    try:
        majors = _majors(facts.get("pg_majors") or [])
    except CatalogError:
        majors = list(facts.get("pg_majors") or [])
    if majors != entry.get("pg_versions"):
        problems.append(
            "it holds PostgreSQL %s, it is declared %s"
            % (", ".join(majors) or "none", ", ".join(entry.get("pg_versions") or []) or "none")
        )
    for key in facts.get("private_keys") or []:
        problems.append("it keeps the private key %s every VM would share" % key)
    for cluster in facts.get("initialized_clusters") or []:
        problems.append("it ships the initialized cluster %s every VM would share" % cluster)
    return problems


def require_recorded_facts(doc, os_version, name):
    """A revision reaches a tip (is served, validated, made the default) only when the catalog records the
    facts read from its bytes and they agree with its entry. Raises CatalogError naming the revision,
    what is wrong and the supported move."""
    doc = normalize(doc)
    stream = revision.validate_stream(os_version)
    entry = doc["images"].get(name)
    if entry is None:
        return  # set_stream says the revision is not in the catalog
    problems = facts_problems(entry)
    if not problems:
        return
    if FACTS not in entry or not entry.get(FACTS):
        move = (
            "register it again with goldenimage.pipeline.baked_image artifact: <its image file> (the "
            "harvester_upload role and publish_baked_image always pass it), then move the tip"
        )
    else:
        move = "build a new revision from a sealed image that is what it is declared to be"
    raise CatalogError(
        "stream %s: revision %s cannot be at its tip, validated or the default: %s; %s"
        % (stream, name, "; ".join(problems), move)
    )


# --------------------------------------------------------------------------- stranding


def _grace(value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CatalogError("%s %r: expected a number of months >= 0" % (GRACE_KEY, value))
    return value


def set_grace(doc, months):
    """The catalog holding ``months`` as its migration grace; returns ``(new_doc, changed)``."""
    doc = normalize(doc)
    months = _grace(months)
    if doc.get(GRACE_KEY, MIGRATION_GRACE_MONTHS) == months and GRACE_KEY in doc:
        return doc, False
    doc[GRACE_KEY] = months
    return doc, True


def grace_months(doc):
    """The migration grace the catalog holds (months after a major's end of life), default 3."""
    return normalize(doc).get(GRACE_KEY, MIGRATION_GRACE_MONTHS)


def migration_dates(doc, major, eol_table=None):
    """``{eol_date, migrate_by, deleted_after}`` (ISO dates) of a database running PostgreSQL ``major``:
    its owner migrates it (pg_dump and restore) by the major's end of life, and it is deleted whatever its
    owner does the grace the catalog holds after that. Never counted from a build date: the data format,
    not the image, sets the clock. All None for a major the EOL table does not know."""
    end = eol.eol_table(eol_table)[eol.PG].get(eol.normalize_pg_major(major))
    if end is None:
        return {"eol_date": None, "migrate_by": None, "deleted_after": None}
    index = end.month - 1 + grace_months(doc)
    year, month = end.year + index // 12, index % 12 + 1
    last = calendar.monthrange(year, month)[1]
    return {
        "eol_date": end.isoformat(),
        "migrate_by": end.isoformat(),
        "deleted_after": datetime.date(year, month, min(end.day, last)).isoformat(),
    }


def _carried(doc, stream, major):
    """``(tip, carried)``: the tip of ``stream`` (the default stream when None) and whether it carries
    ``major``."""
    stream = stream or doc["default_stream"]
    tip = (doc["streams"].get(stream) or {}).get("tip") if stream else None
    image = doc["images"].get(tip) if tip else None
    return tip, bool(image and major in image["pg_versions"])


def database_of(obj):
    """What a DBInstance object says about the database it runs: ``{namespace, name, stream, major}``
    (``stream`` None when it follows the default stream), or None when it runs none yet (never provisioned
    or refused at creation: no data to strand)."""
    meta, spec = (obj or {}).get("metadata") or {}, (obj or {}).get("spec") or {}
    applied = ((obj or {}).get("status") or {}).get("appliedSpec") or {}
    if not applied.get("imageRevision"):
        return None
    stream = spec.get("osVersion")
    return {
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "stream": str(stream) if stream not in (None, "") else None,
        "major": applied.get("engineVersion") or spec.get("engineVersion"),
    }


def stranded(before, after, instances, today=None, eol_table=None):
    """The databases a catalog change strands: each instance (``{namespace, name, stream, major}``,
    ``stream`` None for one that follows the default stream) whose PostgreSQL major is not past end of
    life, which the tip of its stream carried before the change and does not carry after it. Its operator
    would mark it ``PGVersionEOL`` and refuse every repave of it: no more OS patches until it is migrated.

    Returns ``[{namespace, name, major, stream, tip, eol_date, migrate_by, deleted_after}]``, by major
    then namespace and name."""
    before, after = normalize(before), normalize(after)
    found = []
    for item in instances:
        try:
            major = eol.normalize_pg_major(item.get("major"))
        except PipelineError:
            continue  # not a major: the operator refuses it whatever the catalog says
        verdict = requested_major(major, today, eol_table)
        if verdict["eol_date"] is None or verdict["past_eol"]:
            continue  # not supported anyway: no publish strands it
        was, now = _carried(before, item.get("stream"), major), _carried(after, item.get("stream"), major)
        if was[1] and not now[1]:
            entry = {
                "namespace": item.get("namespace"),
                "name": item.get("name"),
                "major": major,
                "stream": item.get("stream") or after["default_stream"],
                "tip": now[0],
            }
            entry.update(migration_dates(after, major, eol_table))
            found.append(entry)
    return sorted(found, key=lambda e: (int(e["major"]), e["namespace"] or "", e["name"] or ""))


def require_named_drops(found, dropped):
    """A change that strands databases goes ahead only when the run names every major it drops
    (``dropped``); raises CatalogError listing the instances affected and their dates otherwise."""
    named = {eol.normalize_pg_major(m) for m in dropped or ()}
    missing = sorted({e["major"] for e in found} - named, key=int)
    if not missing:
        return
    shown = [e for e in found if e["major"] in missing]
    listing = "; ".join(
        "%s/%s (PostgreSQL %s on stream %s, supported until %s: migrate by %s, deleted after %s)"
        % (
            e["namespace"],
            e["name"],
            e["major"],
            e["stream"],
            e["eol_date"],
            e["migrate_by"],
            e["deleted_after"],
        )
        for e in shown
    )
    raise CatalogError(
        "the tip would drop PostgreSQL %s, which is not past end of life, while %d database(s) run it: %s. "
        "Each would turn PGVersionEOL and get no OS patches until migrated. Keep the major in the build, or "
        "name it in drops_majors (publish_drop_majors) to drop it knowingly"
        % (", ".join(missing), len(shown), listing),
        stranded=found,
    )


# ---------------------------------------------------------------------------- trust policy

TRUST = "trust"
SIGNATURE = "signature"
_KEY_FIELDS = ("name", "public_key", "streams", "families")
_STREAM_FIELDS = ("require_signature", "reason")


def _trust_error(field, rule, move):
    return CatalogError("catalog trust%s: %s; %s" % ("." + field if field else "", rule, move))


def _fields_of(entry, where, what, fields):
    if not isinstance(entry, dict):
        raise _trust_error(where, "must be a mapping", "give {%s}" % ", ".join(fields))
    extra = sorted(set(entry) - set(fields))
    if extra:
        raise _trust_error(
            "%s.%s" % (where, extra[0]), "is not a field of %s" % what, "it has %s" % ", ".join(fields)
        )


def _listed(entry, field, where, check=None):
    value = entry.get(field)
    if value is None:
        return None
    if isinstance(value, (str, int, float)):
        value = [value]
    if not isinstance(value, list) or not value:
        raise _trust_error("%s.%s" % (where, field), "must be a non-empty list", "leave it out for all")
    try:
        return sorted({check(v) if check else str(v) for v in value})
    except PipelineError as exc:
        raise _trust_error("%s.%s" % (where, field), exc.msg, "name streams as 22.04") from None


def normalize_trust(section):
    """The catalog's ``trust`` section, checked: a malformed one is refused naming the field.

    ``keys``: each a mapping with ``public_key`` (PEM, required: a verifier needs nothing but the catalog),
    an optional ``name``, ``streams`` and ``families``. ``streams``: per stream, ``require_signature``
    (true unless relaxed) and the ``reason`` a relaxation must record.
    """
    if not isinstance(section, dict):
        raise _trust_error("", "must be a mapping with keys and streams", "see the README's trust policy")
    unknown = sorted(set(section) - {"keys", "streams"})
    if unknown:
        raise _trust_error(unknown[0], "is not a field of the trust policy", "it has keys and streams")
    keys = section.get("keys") or []
    if not isinstance(keys, list):
        raise _trust_error("keys", "must be a list of keys", "give each key as {name, public_key}")
    out_keys, names = [], set()
    for index, entry in enumerate(keys):
        where = "keys[%d]" % index
        _fields_of(entry, where, "a key", _KEY_FIELDS)
        try:
            keyid = provenance.pem_key_id(entry.get("public_key"), "catalog trust.%s.public_key" % where)
        except PipelineError as exc:
            raise CatalogError(exc.msg) from None
        name = str(entry.get("name") or keyid[:12])
        if name in names:
            raise _trust_error("%s.name" % where, "%s names two keys" % name, "give each key its own name")
        names.add(name)
        item = {"name": name, "public_key": entry["public_key"].strip() + "\n"}
        for field, check in (("streams", revision.validate_stream), ("families", None)):
            listed = _listed(entry, field, where, check)
            if listed is not None:
                item[field] = listed
        out_keys.append(item)
    streams = section.get("streams") or {}
    if not isinstance(streams, dict):
        raise _trust_error("streams", "must be a mapping of stream to its policy", 'give "22.04": {...}')
    out_streams = {}
    for stream, entry in streams.items():
        try:
            name = revision.validate_stream(stream)
        except PipelineError as exc:
            raise _trust_error("streams", exc.msg, "name streams as 22.04") from None
        where = "streams.%s" % name
        _fields_of(entry, where, "a stream's policy", _STREAM_FIELDS)
        required = entry.get("require_signature", True)
        if not isinstance(required, bool):
            raise _trust_error(
                "%s.require_signature" % where,
                "must be true or false, got %r" % (required,),
                "give a boolean",
            )
        reason = str(entry.get("reason") or "").strip()
        if not required and not reason:
            raise _trust_error(
                "%s.reason" % where,
                "require_signature is relaxed only with the reason recorded",
                "give reason, or leave require_signature true",
            )
        out_streams[name] = {"require_signature": required}
        if reason:
            out_streams[name]["reason"] = reason
    return {"keys": out_keys, "streams": {k: out_streams[k] for k in sorted(out_streams)}}


def set_trust(doc, section):
    """The catalog with trust policy ``section`` (checked); returns ``(new_doc, changed)``."""
    doc = normalize(doc)
    wanted = normalize_trust(section)
    if doc.get(TRUST) == wanted:
        return doc, False
    doc[TRUST] = wanted
    return doc, True


def check_trust_pin(doc, pinned, where):
    """Refuse the catalog ``doc`` (at ``where``) unless its trust section is ``pinned``, the one the caller
    holds (the ``catalog.trust`` option); nothing to check when the caller pins none.

    The catalog keeps its trust policy beside the verdicts it judges, so whoever may write the catalog may
    otherwise widen the policy (a key of their own, a stream relaxed) or remove it (no signature checked at
    all). A run that pins the policy trusts what its caller holds, and a catalog that says otherwise is
    refused before anything is read from it.
    """
    if pinned is None:
        return
    try:
        wanted = normalize_trust(pinned)
    except CatalogError as exc:
        raise CatalogError("catalog.trust (the pinned trust policy): %s" % exc.msg) from None
    held = normalize(doc).get(TRUST)
    if held == wanted:
        return
    raise CatalogError(
        "%s: its trust section is not the trust policy this run pins (catalog.trust): %s. Nothing was read "
        "from it or written; restore the catalog's trust section from the pinned policy, or pin the "
        "catalog's if its change was meant (review who changed it first)"
        % (where, _trust_difference(held, wanted))
    )


def _trust_difference(held, wanted):
    """What the catalog's trust section ``held`` has that the pinned ``wanted`` has not, and the reverse."""
    if held is None:
        return "the catalog has no trust section, so it would check no signature"

    def keys(section):
        return dict(
            (provenance.pem_key_id(k["public_key"], "trust key %s" % k["name"]), k) for k in section["keys"]
        )

    held_keys, wanted_keys = keys(held), keys(wanted)
    said = []
    for keyid in sorted(set(held_keys) - set(wanted_keys)):
        said.append("it trusts key %s (%s), which the pin does not" % (held_keys[keyid]["name"], keyid[:12]))
    for keyid in sorted(set(wanted_keys) - set(held_keys)):
        said.append("it lacks the pinned key %s (%s)" % (wanted_keys[keyid]["name"], keyid[:12]))
    for keyid in sorted(set(held_keys) & set(wanted_keys)):
        if held_keys[keyid] != wanted_keys[keyid]:
            said.append("key %s may sign other streams, families or has another name" % keyid[:12])
    for stream in sorted(set(held["streams"]) | set(wanted["streams"])):
        if held["streams"].get(stream) != wanted["streams"].get(stream):
            found = [_stream_words(section["streams"].get(stream)) for section in (held, wanted)]
            said.append("stream %s: %s in the catalog, %s in the pin" % (stream, found[0], found[1]))
    return "; ".join(said)


def _stream_words(entry):
    if entry is None:
        return "no entry (signature required)"
    if entry["require_signature"]:
        return "signature required"
    return "unsigned allowed (%s)" % entry.get("reason")


def trust_policy(doc):
    """The catalog's trust policy as ``provenance.judge`` reads it, or None when the catalog has none."""
    section = normalize(doc).get(TRUST)
    if section is None:
        return None
    rules = []
    for entry in section["keys"]:
        rule = {"name": entry["name"], "public_key": entry["public_key"]}
        rule.update((field, entry[field]) for field in ("streams", "families") if field in entry)
        rules.append(rule)
    relaxed = [
        {"stream": stream, "reason": entry["reason"]}
        for stream, entry in section["streams"].items()
        if not entry["require_signature"]
    ]
    return provenance.normalize_policy({"rules": rules, "relaxed": relaxed})


def family(os_stream):
    """The family a baked revision of ``os_stream`` belongs to, as a trust policy names it."""
    return "%s%s%s" % (
        revision.ARTIFACT_PREFIX,
        revision.stream_suffix(os_stream),
        revision.ARTIFACT_INFIX[:-1],
    )


def signed_subject(name, os_stream):
    """The subject name a revision's provenance must carry: its artifact's file name."""
    return revision.artifact_name(name, os_stream)


def signature_record(verdict, name, os_stream, digest, doc=None, evidence=None):
    """What a catalog entry records of its artifact's verification (no key material): the verdict, the key
    and signer, the artifact and its SHA-256 and SHA-512 (the checksum Harvester downloads against), the
    inputs, builder and time the verified statement ``doc`` names, and the ``evidence`` (the signature and
    envelope texts) it was verified from, which ``signature_problem`` verifies again where it is used."""
    digest = digest or {}
    record = provenance.verdict_record(
        verdict, signed_subject(name, os_stream), digest.get("sha256"), family(os_stream), doc, evidence
    )
    if digest.get("sha512"):
        record["sha512"] = digest["sha512"]
    return record


def signature_problem(doc, name, prove):
    """Why revision ``name``'s recorded signature does not hold under the catalog's trust policy now, as
    ``(problem, move)``; None when it holds or the catalog has no policy.

    The bytes are not at hand where a revision is used: what its registration proved is judged again by
    today's policy (``provenance.recorded_verdict_problem``, the rule goldens and worker images follow), so
    a key withdrawn from the policy, or a relaxation taken back, stops the revision from reaching another
    disk. The verdict is never taken on its word: the evidence it carries is verified again (``prove``,
    ``_signing.record_proof``) for this revision's artifact, over the SHA-512 its checksum makes Harvester
    download, which the signed statement must name.
    """
    policy = trust_policy(doc)
    entry = normalize(doc)["images"].get(name)
    if policy is None or entry is None:
        return None
    stream = entry["os_version"]
    record = entry.get(SIGNATURE)
    return provenance.recorded_verdict_problem(
        policy,
        record,
        prove(policy, record) if record else None,
        "revision %s" % name,
        family(stream),
        stream,
        digest={"sha512": entry.get("checksum")},
        artifact=signed_subject(name, stream),
        scope="stream %s" % stream,
        done="registered",
        policy_name="the catalog's trust policy",
        moves=(
            "sign a new revision with a trusted key, or trust the key again in the catalog's trust section",
            "register it again with goldenimage.pipeline.baked_image from its own signed artifact",
        ),
    )
