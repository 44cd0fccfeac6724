# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The OS image mirror's rules: key layout, immutability, the skip decision, part sizes, the catalog.

Pure functions; the S3 calls live in ``_mirror_transfer.py``.

An image lives under ``<family>/<version>/sha256-<hex>/<filename>``. The digest is part of the key, so
a key can only ever hold one content, and one (family, version, filename) holds one digest: a changed
upstream file is published as a new version, never written over the old one.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import hashlib
import json
import posixpath
import re
from urllib.parse import unquote, urlsplit

from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import inputs, redact
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal

MIB = 1024 * 1024
MIN_PART_SIZE = 8 * MIB
MAX_PART_SIZE = 5 * 1024 * MIB
MAX_PARTS = 10000
MAX_OBJECT_SIZE = 5 * 1024 * 1024 * MIB

DEFAULT_CATALOG_KEY = "catalog.json"
CATALOG_SCHEMA = "goldenimage.pipeline/os-mirror-catalog/v1"

# Object metadata (x-amz-meta-*) that the mirror writes on every final object.
META_SHA256 = "sha256"
META_SOURCE = "source-url"
META_MIRRORED_AT = "mirrored-at"
META_SOURCE_UID = "source-uid"

_FAMILY = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,62}$")
_FILENAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,254}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_DIGEST_DIR = re.compile(r"^sha256-([0-9a-f]{64})$")


# The supported moves for a source URL that carries a password.
SOURCE_URL_MOVE = (
    "give the URL without user-info; for a private upstream, mirror a presigned URL (its signature is "
    "redacted wherever the URL is recorded) or download it first and mirror the file with path"
)
EXPORT_SOURCE_MOVE = "record where the image came from without credentials (pvc://<namespace>/<claim>)"


class MirrorError(PipelineError):
    """A refusal or an invalid input; the message names the object, the rule and the supported move."""


# Names and keys ------------------------------------------------------------------------------------


def normalize_sha256(value):
    """``sha256:<hex>``, ``sha256-<hex>`` or ``<hex>`` (any case) as 64 lowercase hex digits."""
    text = str(value or "").strip().lower()
    for prefix in ("sha256:", "sha256-"):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    if not _HEX64.match(text):
        raise MirrorError(
            "%r is not a sha256 digest: expected 64 hex digits, optionally after sha256:" % value
        )
    return text


def _check(kind, value, pattern, rule):
    if not isinstance(value, str) or not pattern.match(value):
        raise MirrorError("%s %r is not valid: %s" % (kind, value, rule))
    return value


def check_family(family):
    return _check("family", family, _FAMILY, "lowercase letters, digits, '.', '_' and '-', at most 63")


def check_version(version):
    return _check("version", version, _VERSION, "letters, digits, '.', '_', '+' and '-', at most 63")


def check_filename(filename):
    return _check(
        "filename", filename, _FILENAME, "one path segment of letters, digits, '.', '_', '+' and '-'"
    )


def version_prefix(family, version):
    """Prefix of every object of one version: ``<family>/<version>/``.

    A version that reached the module as a YAML float (``1.10`` read as ``1.1``) is refused: quote it.
    """
    if not isinstance(version, str):
        version = inputs.version_string(version, "version")
    return "%s/%s/" % (check_family(family), check_version(version))


def object_key(family, version, sha256, filename):
    """The immutable key ``<family>/<version>/sha256-<hex>/<filename>``, checked by the one key rule."""
    key = "%ssha256-%s/%s" % (
        version_prefix(family, version),
        normalize_sha256(sha256),
        check_filename(filename),
    )
    return inputs.object_key(key, "key")


def images_with_userinfo(images):
    """``family/version`` of each image whose URL carries user-info (refused before the first write)."""
    found = []
    for image in images or []:
        url = (image or {}).get("url") or ""
        user, password = redact.credentials(url)
        if user is not None or password is not None:
            found.append("%s/%s" % (image.get("family"), image.get("version")))
    return found


def shown_source(image):
    """What a log line shows of an image's source: its URL without user-info, query or fragment, else its
    path (a URL's query may be a signature, its user-info a password)."""
    image = image or {}
    url = image.get("url") or ""
    if not url:
        return image.get("path") or ""
    try:
        return redact.strip_query(url)
    except ValueError:  # not a URL urlsplit can read: show nothing of it
        return redact.MASK


def check_source_url(url, option="url"):
    """An upstream URL the mirror may read and record: http(s), with no credentials in it."""
    if url is None:
        return None
    redact.refuse_credentials(url, option, SOURCE_URL_MOVE)
    if not str(url).lower().startswith(("http://", "https://")):
        raise Refusal(
            "option %s (%s)" % (option, redact.redact_url(url)),
            "it is not an http(s) URL",
            "use path for a local file",
        )
    return url


def check_export_source(source, option="source"):
    """What an export records as its origin (``source-url``): no credentials in it."""
    if source:
        redact.refuse_credentials(source, option, EXPORT_SOURCE_MOVE)
    return source


def check_concurrency(value, option="concurrency"):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise Refusal("option %s" % option, "%r parts at a time uploads nothing" % (value,), "give 1 or more")
    return value


def part_size_bytes(value, option="part_size"):
    """A part size given as bytes or with a unit (``16M``), in bytes; zero or negative is refused."""
    # Imported here: the export Job's program imports this file in a pod without Ansible.
    from ansible.module_utils.common.text.formatters import human_to_bytes

    try:
        size = human_to_bytes(str(value).strip())
    except (TypeError, ValueError):
        size = None
    if size is None or size <= 0:
        raise Refusal(
            "option %s (%r)" % (option, value),
            "a part size must be a positive number of bytes, checked before anything is written",
            "give bytes or a size with a unit, such as 16M",
        )
    return size


def parse_key(key):
    """``{family, version, sha256, filename}`` of a key in the mirror layout, else None."""
    parts = str(key).split("/")
    if len(parts) != 4:
        return None
    family, version, digest_dir, filename = parts
    match = _DIGEST_DIR.match(digest_dir)
    if not (match and _FAMILY.match(family) and _VERSION.match(version) and _FILENAME.match(filename)):
        return None
    return {"family": family, "version": version, "sha256": match.group(1), "filename": filename}


def filename_from_source(path=None, url=None):
    """The last path segment of a local path or of a URL's path (percent-decoded)."""
    if url:
        name = posixpath.basename(unquote(urlsplit(url).path))
    else:
        name = posixpath.basename(str(path or "").replace("\\", "/"))
    if not name:
        raise MirrorError("cannot take a filename from %r; set filename" % (url or path))
    return name


# Deciding ------------------------------------------------------------------------------------------


def same_file(existing, filename):
    """The objects under one version prefix that hold ``filename`` (parsed keys with their HEAD data)."""
    return [obj for obj in existing if obj["filename"] == filename]


def plan_object(family, version, filename, sha256, existing):
    """``{"action": "skip"|"upload", "key": ...}`` for one image, or MirrorError when it is refused.

    ``existing`` lists the objects under ``<family>/<version>/`` with the same filename, each a dict of
    ``key``, ``sha256`` (from the key) and ``metadata_sha256`` (object metadata from a HEAD).
    """
    digest = normalize_sha256(sha256)
    key = object_key(family, version, digest, filename)
    others = [obj for obj in existing if obj["sha256"] != digest]
    if others:
        old = others[0]
        raise MirrorError(
            "refusing to mirror %s: %s %s already holds %s with sha256 %s, and the source now has sha256 %s; "
            "mirrored keys are immutable, so publish the changed image under a new version"
            % (key, family, version, old["key"], old["sha256"], digest)
        )
    for obj in existing:
        if obj.get("metadata_sha256") != digest:
            raise MirrorError(
                "refusing to trust %s: its object metadata %s is %r, not the sha256 in its key (%s), so it "
                "was not written (or not finished) by the mirror; check it and delete it, then mirror again"
                % (obj["key"], META_SHA256, obj.get("metadata_sha256"), digest)
            )
        return {"action": "skip", "key": key}
    return {"action": "upload", "key": key}


def plan_export(bucket, key, recorded, digest):
    """``"skip"`` when ``key`` already holds ``digest`` (its ``sha256`` metadata), else a refusal.

    An exported key holds one content for ever; ``recorded`` is the metadata of what the key holds now.
    """
    if recorded != digest:
        raise Refusal(
            "s3://%s/%s" % (bucket, key),
            "refusing to overwrite it: it holds sha256 %s (metadata), the file has %s, and an exported key "
            "is immutable" % (recorded or "(none)", digest),
            "export the changed image under a new key (a new date)",
            sha256=digest,
        )
    return "skip"


def plan_claim_export(bucket, key, held, source, uid):
    """``"upload"`` when ``key`` is free, ``"skip"`` when it holds an export of this very claim, else a
    refusal; decided before the export Job is made, from the key's metadata (``held``, None when free).

    A claim's export is recognised by the ``source-uid`` metadata the Job records: the uid of the
    claim, which a rebuilt claim of the same name does not share.
    """
    if held is None:
        return "upload"
    recorded = held.get(META_SOURCE_UID)
    if recorded and recorded == uid and held.get(META_SHA256):
        return "skip"
    raise Refusal(
        "s3://%s/%s" % (bucket, key),
        "refusing to overwrite it: it holds sha256 %s exported from %s (uid %s), not an export of %s "
        "(uid %s), and an exported key is immutable"
        % (
            held.get(META_SHA256) or "(none)",
            held.get(META_SOURCE) or "(unknown)",
            recorded or "(none)",
            source,
            uid,
        ),
        "export under a new key (a new date); nothing was converted or uploaded",
    )


def check_digest(key_or_source, expected, actual):
    """Raise when the streamed digest differs from the expected one."""
    if expected and normalize_sha256(expected) != actual:
        raise MirrorError(
            "sha256 of %s is %s, not the expected %s; nothing was written under a final key; check the "
            "source, or correct the expected sha256" % (key_or_source, actual, normalize_sha256(expected))
        )


# Multipart -----------------------------------------------------------------------------------------


def _ceil_div(num, den):
    return -(-num // den)


def plan_part_size(size, requested=16 * MIB):
    """Part size for ``size`` bytes: at least ``requested`` and 8 MiB, whole MiB, at most 10,000 parts."""
    part = max(int(requested or 0), MIN_PART_SIZE)
    if size is None:
        return min(part, MAX_PART_SIZE)
    if size > MAX_OBJECT_SIZE:
        raise MirrorError("%d bytes is more than an S3 object can hold (5 TiB)" % size)
    needed = _ceil_div(_ceil_div(size, MAX_PARTS), MIB) * MIB
    return min(max(part, needed), MAX_PART_SIZE)


def part_count(size, part_size):
    """Parts a ``size``-byte object takes (one, even when empty)."""
    return max(1, _ceil_div(size, part_size))


def b64(digest):
    return base64.b64encode(digest).decode("ascii")


def multipart_etag(md5_digests):
    """The ETag S3 gives a multipart object: md5 of the parts' md5s, then ``-<parts>``."""
    joined = hashlib.md5(b"".join(md5_digests), usedforsecurity=False).hexdigest()
    return "%s-%d" % (joined, len(md5_digests))


def composite_sha256(sha256_digests):
    """A multipart object's checksum: base64 sha256 of the parts' raw sha256 digests."""
    return b64(hashlib.sha256(b"".join(sha256_digests)).digest())


def etag_value(etag):
    """An ETag without quotes, lowercase."""
    return str(etag or "").strip().strip('"').lower()


def is_md5_etag(etag):
    """Whether an ETag is an md5 (hex, or md5-N for multipart), so it can be compared with our digests."""
    return bool(re.match(r"^[0-9a-f]{32}(-\d+)?$", etag_value(etag)))


def checksum_value(checksum):
    """A ChecksumSHA256 without the ``-<parts>`` suffix some servers add to a composite."""
    return str(checksum or "").split("-", maxsplit=1)[0]


def throughput_mib_s(bytes_moved, seconds):
    if not bytes_moved or seconds <= 0:
        return 0.0
    return round(bytes_moved / MIB / seconds, 2)


def object_summary(key, size, sha256, source=None):
    """What --diff shows of an object."""
    summary = {"key": key, "size": size, "sha256": sha256}
    if source:
        summary["source_url"] = redact.redact_url(source)
    return summary


def final_metadata(sha256, source, mirrored_at):
    """The metadata of a final object; the source URL as it may be stored (redacted)."""
    return {
        META_SHA256: normalize_sha256(sha256),
        META_SOURCE: redact.redact_url(source or ""),
        META_MIRRORED_AT: mirrored_at,
    }


def timestamp(moment):
    """UTC ``YYYY-MM-DDTHH:MM:SSZ`` of an aware datetime."""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


# Catalog -------------------------------------------------------------------------------------------


def version_order(version):
    """Natural order: ``9`` before ``10``, ``24.04`` before ``24.10``; ties broken by the text."""
    pieces = re.split(r"(\d+)", version)
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in pieces if p], version


def catalog_entry(key, size, metadata):
    """``(entry, problem)`` for a listed object; ``(None, None)`` when the key is not in the layout."""
    parsed = parse_key(key)
    if parsed is None:
        return None, None
    recorded = (metadata or {}).get(META_SHA256)
    if recorded != parsed["sha256"]:
        return None, "%s: metadata %s is %r, not the sha256 in its key; left out of the catalog" % (
            key,
            META_SHA256,
            recorded,
        )
    entry = dict(parsed)
    entry.update(
        key=key,
        size=int(size),
        # Redacted again: an object stored before the rule held must not leak through the catalog.
        source_url=redact.redact_url((metadata or {}).get(META_SOURCE)) or None,
        mirrored_at=(metadata or {}).get(META_MIRRORED_AT) or None,
    )
    return entry, None


TRUST = "trust"


def catalog_trust(document, where="the mirror catalog"):
    """The trust policy the catalog holds (``provenance.normalize_policy``), or None when it holds none.

    It says which keys may sign which families (and versions, as streams) of the mirror, and which
    families may go unsigned, each with its reason; the imports of mirrored images verify against it.
    """
    section = (document or {}).get(TRUST)
    if section is None:
        return None
    try:
        return provenance.normalize_policy(section)
    except provenance.ProvenanceError as exc:
        raise MirrorError("%s: %s" % (where, exc.msg)) from None


PIN_MOVE = (
    "give trust_policy (the policy itself, as os_mirror_catalog's trust holds it) or catalog_public_keys "
    "(the keys that may sign the catalog; os_mirror_catalog signs it when given key_path or key)"
)


def pinned_policy(trust_policy, catalog_keys, catalog, where):
    """The policy the caller gave (normalized), or None when the catalog's is to be read, signed by one of
    ``catalog_keys``; refused when the caller pins neither: the policy would then come from the bucket it
    judges, on the bucket's word, and whoever can write the bucket could add a key or a relaxation."""
    if trust_policy is not None:
        try:
            return provenance.normalize_policy(trust_policy)
        except provenance.ProvenanceError as exc:
            raise Refusal("option trust_policy", exc.msg, "correct the policy; nothing was read") from None
    if not catalog_keys:
        raise Refusal(
            where,
            "no trust policy is pinned, and the one in %s would be taken from the bucket it judges, on the "
            "bucket's word" % catalog,
            PIN_MOVE,
        )
    return None


def signed_catalog_policy(body, signature, catalog, where):
    """The trust policy the catalog ``body`` (bytes, None when absent) holds, once its detached signature is
    proven by a pinned key (``signature`` as ``_signing.evidence`` gives it: None when absent, else the key
    id that verified it, None when none did). Refused otherwise, before any verdict."""
    if body is None:
        raise Refusal(
            catalog, "it does not exist, so %s cannot be verified" % where, "write it with os_mirror_catalog"
        )
    sig = provenance.companions(catalog.split(" ", 1)[-1])[0]
    if signature is None:
        raise Refusal(
            catalog,
            "it is not signed (no %s), so its trust policy is the bucket's word" % sig,
            "sign it: run os_mirror_catalog with key_path or key (a key catalog_public_keys holds)",
        )
    if signature.get("key") is None:
        raise Refusal(
            catalog,
            "its signature %s does not verify over its bytes with any of catalog_public_keys (%s)"
            % (sig, signature.get("error") or "changed after it was signed, or signed by another key"),
            "write it again with os_mirror_catalog and a key catalog_public_keys holds; nothing was judged",
        )
    try:
        document = json.loads(body.decode("utf-8"))
    except ValueError:
        document = {"unreadable": True}
    policy = catalog_trust(document if isinstance(document, dict) else {}, catalog)
    if policy is None:
        raise Refusal(
            catalog,
            "it holds no trust policy, so %s cannot be verified" % where,
            "give os_mirror_catalog its trust option (the keys that may sign each family)",
        )
    return policy


def judged_family(parsed, family, where):
    """The family an object is judged for: the one its mirror-layout key names (``parsed``, ``parse_key``'s;
    a ``family`` given that differs is refused: a caller could otherwise pick a relaxed family for a signed
    one's object), else ``family`` (an object outside the layout, ``parsed`` None)."""
    if parsed is None:
        return family
    if family and family != parsed["family"]:
        raise Refusal(
            where,
            "family %s was given and the key names family %s; an object is judged for the family its key "
            "names" % (family, parsed["family"]),
            "leave family out for a key in the mirror layout, or verify the object of family %s" % family,
        )
    return family or parsed["family"]


def trust_section(policy):
    """The catalog's ``trust`` section of a policy given to the catalog writer, checked, in stored form."""
    try:
        return provenance.policy_document(provenance.normalize_policy(policy))
    except provenance.ProvenanceError as exc:
        raise MirrorError("option trust: %s" % exc.msg) from None


def build_catalog(bucket, entries, trust=None):
    """The catalog document: families in name order, each with its versions in natural order, and the
    trust policy (stored form) when there is one."""
    families = {}
    for entry in entries:
        families.setdefault(entry["family"], []).append({k: v for k, v in entry.items() if k != "family"})
    document = {"schema": CATALOG_SCHEMA, "bucket": bucket, "families": {}}
    for family in sorted(families):
        versions = sorted(
            families[family], key=lambda e: (version_order(e["version"]), e["filename"], e["key"])
        )
        document["families"][family] = {"latest": versions[-1]["version"], "versions": versions}
    if trust is not None:
        document[TRUST] = trust
    return document


def render_catalog(document):
    """The bytes written to the bucket: sorted keys, two-space indent, a final newline."""
    return (json.dumps(document, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def mirrored_statement(key, sha256, source, builder, time):
    """The provenance of a mirrored object: the object (its key, its sha256) made from the upstream image
    (the redacted source URL, the same sha256: the mirror copies, it never changes a byte)."""
    digest = {"sha256": normalize_sha256(sha256)}
    upstream = {"name": provenance.UPSTREAM, "digest": digest, "uri": redact.redact_url(source or "")}
    return provenance.statement({"name": key, "digest": digest}, [upstream], builder, time)


def exported_statement(key, sha256, source, facts, builder, time):
    """The provenance of an exported golden: the object (its key, its sha256) made from the exported volume
    (``source``, the same bytes) and, when they were read, the image facts (the digest of their JSON)."""
    digest = {"sha256": normalize_sha256(sha256)}
    found = [{"name": "exported-volume", "digest": digest, "uri": redact.redact_url(source or "")}]
    if facts is not None:
        found.append({"name": provenance.FACTS, "digest": provenance.facts_digest(facts)})
    return provenance.statement({"name": key, "digest": digest}, found, builder, time)


def named_object(key, sha256, family, where):
    """``{family, version, sha256}`` of an object outside the mirror layout (an exported golden): its key
    does not name its digest or family, so the pinned ``sha256`` and the ``family`` must be given."""
    if not sha256 or not family:
        raise Refusal(
            where,
            "the key is not in the mirror layout <family>/<version>/sha256-<hex>/<filename>, so it names "
            "neither the digest nor the family the trust policy judges",
            "give sha256 (the digest the import pins) and family",
        )
    return {"family": family, "version": None, "sha256": normalize_sha256(sha256)}


def signed_companions(objects):
    """``{image key: {"signature": key, "provenance": key}}``: the signature and provenance objects stored
    beside each listed image (as ``os_mirror_object`` writes them when given a key)."""
    keys = set(obj["key"] for obj in objects)
    found = {}
    for key in sorted(keys):
        image = provenance.companion_of(key)
        if image in keys and parse_key(image) is not None:
            field = "signature" if key.endswith(provenance.SIGNATURE_SUFFIX) else "provenance"
            found.setdefault(image, {})[field] = key
    return found


def is_companion(key, held):
    """True when ``key`` is the signature or provenance object of an image in ``held`` (signed_companions)."""
    return key in set(k for companions in held.values() for k in companions.values())


def catalog_from_listing(bucket, objects, catalog_key=DEFAULT_CATALOG_KEY, trust=None):
    """``(document, ignored_keys, problems)`` from listed objects (dicts of key, size, metadata)."""
    entries, ignored, problems = [], [], []
    held = signed_companions(objects)
    for obj in objects:
        key = obj["key"]
        if key == catalog_key or is_companion(key, held):
            continue
        entry, problem = catalog_entry(key, obj["size"], obj.get("metadata"))
        if entry is not None:
            entry.update(held.get(key) or {})
            entries.append(entry)
        elif problem is not None:
            problems.append(problem)
        else:
            ignored.append(key)
    return build_catalog(bucket, entries, trust), sorted(ignored), sorted(problems)


def run_report(results):
    """The totals of a mirror run and one line per image, from os_mirror_object's results (a loop's)."""
    items = list(results or [])
    skipped = [item for item in items if item.get("skipped")]
    moved = sum(int(item.get("bytes_moved") or 0) for item in items)
    seconds = sum(float(item.get("seconds") or 0) for item in items)
    lines = []
    for item in items:
        if item.get("skipped"):
            lines.append("%s: already mirrored, skipped" % item.get("key"))
        else:
            lines.append(
                "%s: %s bytes in %s parts at %s MiB/s"
                % (item.get("key"), item.get("bytes_moved"), item.get("parts"), item.get("throughput_mib_s"))
            )
    return {
        "images": len(items),
        "copied": len(items) - len(skipped),
        "skipped": len(skipped),
        "bytes_moved": moved,
        "seconds": round(seconds, 3),
        "throughput_mib_s": throughput_mib_s(moved, seconds),
        "lines": lines,
    }
