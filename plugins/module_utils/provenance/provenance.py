# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Who made an artifact, from what, and whether a consumer may trust it: the rules, no I/O.

Three documents and one judgement live here; the cryptography is the adapter's (``_signing``).

* The statement: an in-toto Statement v1 whose subject is the artifact (its name and digest) and whose
  predicate is SLSA provenance v1 naming the inputs (each ``{name, digest: {sha256|sha512: hex}}``: the
  upstream image, the Packer template, the provisioning scripts, the package manifest, the image-facts
  record), the builder (collection version, playbook, host) and the time.
* The envelope: DSSE, ``{"payloadType", "payload" (base64), "signatures": [{"keyid", "sig"}]}``, the shape
  ``cosign attest-blob`` writes and ``cosign verify-blob-attestation`` reads. A signature covers the
  pre-authentication encoding ``pae(type, body)``, never the bare payload.
* The trust policy: which key ids may sign which families and streams, and the families whose
  ``require_signature`` is relaxed, each with the reason recorded.

``judge`` turns what the adapter proved (which key, if any, verifies the detached signature over these
bytes; which key verifies the envelope; what its statement says) into a verdict. A signature binds an
artifact's name and digest: the detached signature covers the bytes, the statement names the artifact, so
an older revision's bytes and signatures replayed under a newer revision's name are refused.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import binascii
import datetime
import hashlib
import json
import re

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
# cosign attest-blob still writes the v0.1 header; the fields read here are the same in both.
STATEMENT_TYPES = (STATEMENT_TYPE, "https://in-toto.io/Statement/v0.1")
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
BUILD_TYPE = "https://goldenimage.pipeline/build/v1"
BUILDER_ID = "urn:goldenimage.pipeline:builder"

# The input names the producers record; others are accepted (a producer may name more).
UPSTREAM = "upstream"
TEMPLATE = "packer-template"
PROVISIONING = "provisioning-script"
PACKAGES = "package-manifest"
FACTS = "image-facts"
# The disk a micro-VM image was cut from.
SOURCE_DISK = "source-disk"
INPUT_NAMES = (UPSTREAM, TEMPLATE, PROVISIONING, PACKAGES, FACTS, SOURCE_DISK)

# The version the builder records (galaxy.yml's; a unit test keeps them equal).
COLLECTION_VERSION = "0.1.0"

ALGORITHMS = {"sha256": 64, "sha512": 128}
KEY_ID = re.compile(r"^[0-9a-f]{64}$")
ANY = "*"

# Verdicts of a verification, the check each one names.
VERIFIED = "verified"
RELAXED = "unsigned_allowed"
UNSIGNED = "unsigned"
UNTRUSTED_KEY = "untrusted_key"
OTHER_BYTES = "signature_mismatch"
SUBJECT_DIGEST = "subject_digest_differs"
REPLAYED = "replayed_revision"
VERDICTS = (VERIFIED, RELAXED, UNSIGNED, UNTRUSTED_KEY, OTHER_BYTES, SUBJECT_DIGEST, REPLAYED)


class ProvenanceError(PipelineError):
    """A statement, an envelope or a trust policy that cannot be read; the message names it."""


# --- digests and resources ----------------------------------------------------------------------------


def digest_set(value, what):
    """``{"sha256": hex}`` (or sha512) from ``"sha256:<hex>"`` or a dict with one or both; hex lowercased."""
    if isinstance(value, str):
        algorithm, sep, hexdigest = value.partition(":")
        if not sep:
            raise ProvenanceError("%s: digest %r is not <algorithm>:<hex> (sha256 or sha512)" % (what, value))
        value = {algorithm: hexdigest}
    if not isinstance(value, dict) or not value:
        raise ProvenanceError(
            "%s: the digest must be sha256:<hex> or {sha256: <hex>}, got %r" % (what, value)
        )
    found = {}
    for algorithm, hexdigest in value.items():
        algorithm = str(algorithm).lower()
        hexdigest = str(hexdigest).lower()
        if algorithm not in ALGORITHMS:
            raise ProvenanceError("%s: digest algorithm %s is not sha256 or sha512" % (what, algorithm))
        if not re.match(r"^[0-9a-f]{%d}$" % ALGORITHMS[algorithm], hexdigest):
            raise ProvenanceError(
                "%s: the %s digest must be %d hex digits, got %r"
                % (what, algorithm, ALGORITHMS[algorithm], hexdigest)
            )
        found[algorithm] = hexdigest
    return found


def resource(name, digest, what="input", uri=None):
    """An in-toto resource descriptor ``{"name", "digest"}`` (and ``uri`` when given), validated."""
    if not isinstance(name, str) or not name.strip():
        raise ProvenanceError("%s: every input needs a non-empty name" % what)
    found = {"name": name, "digest": digest_set(digest, "%s %s" % (what, name))}
    if uri:
        found["uri"] = str(uri)
    return found


def digests_agree(expected, seen):
    """True when the two digest sets share an algorithm and agree on every one they share."""
    shared = set(expected) & set(seen)
    return bool(shared) and all(expected[a] == seen[a] for a in shared)


# --- the statement ------------------------------------------------------------------------------------


def statement(subject, inputs, builder, time, parameters=None):
    """The in-toto statement of ``subject`` (``{name, digest}``) built from ``inputs`` by ``builder``.

    ``builder`` is ``{"collection_version", "playbook", "host"}``; ``time`` an RFC 3339 UTC string;
    ``parameters`` what else the build was told (a micro-VM image's kernel version), recorded beside the
    playbook. Inputs are sorted by name so the same build gives the same statement.
    """
    subject = resource(subject.get("name"), subject.get("digest"), "subject")
    check_time(time)
    deps = [resource(i.get("name"), i.get("digest"), uri=i.get("uri")) for i in inputs or []]
    names = [d["name"] for d in deps]
    twice = sorted(set(n for n in names if names.count(n) > 1))
    if twice:
        raise ProvenanceError("inputs: %s named more than once; give each input once" % ", ".join(twice))
    builder = builder or {}
    return {
        "_type": STATEMENT_TYPE,
        "subject": [subject],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": dict(parameters or {}, playbook=builder.get("playbook") or ""),
                "internalParameters": {"host": builder.get("host") or ""},
                "resolvedDependencies": sorted(deps, key=lambda d: d["name"]),
            },
            "runDetails": {
                "builder": {
                    "id": BUILDER_ID,
                    "version": {"goldenimage.pipeline": builder.get("collection_version") or ""},
                },
                "metadata": {"startedOn": time, "finishedOn": time},
            },
        },
    }


def check_time(value):
    """A statement's time is RFC 3339 UTC to the second (``2026-12-01T09:30:00Z``), the form every producer
    writes and every report compares; anything else is refused before it is signed."""
    try:
        datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ")
    except (TypeError, ValueError):
        raise ProvenanceError(
            "time %r is not an RFC 3339 UTC time to the second; give it as 2026-12-01T09:30:00Z" % (value,)
        ) from None


def serialize(doc):
    """The bytes a statement is signed as: compact JSON with sorted keys (the same dict, the same bytes)."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")


def parse_statement(payload):
    """The statement in an envelope's payload bytes; refuses anything but an in-toto SLSA v1 statement."""
    try:
        doc = json.loads(payload.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProvenanceError("provenance: the payload is not a JSON document (%s)" % exc) from None
    if not isinstance(doc, dict) or doc.get("_type") not in STATEMENT_TYPES:
        raise ProvenanceError(
            "provenance: the payload is not an in-toto statement (_type %s)" % " or ".join(STATEMENT_TYPES)
        )
    if doc.get("predicateType") != PREDICATE_TYPE:
        raise ProvenanceError(
            "provenance: predicateType is %r, not %s" % (doc.get("predicateType"), PREDICATE_TYPE)
        )
    subjects = doc.get("subject")
    if not isinstance(subjects, list) or not subjects:
        raise ProvenanceError("provenance: the statement names no subject")
    for entry in subjects:
        resource((entry or {}).get("name"), (entry or {}).get("digest"), "provenance subject")
    return doc


def summary(doc):
    """What a report shows of a statement: subject, inputs, builder, time."""
    predicate = doc.get("predicate") or {}
    build = predicate.get("buildDefinition") or {}
    run = predicate.get("runDetails") or {}
    return {
        "subject": doc.get("subject") or [],
        "inputs": build.get("resolvedDependencies") or [],
        "builder": {
            "id": (run.get("builder") or {}).get("id"),
            "collection_version": ((run.get("builder") or {}).get("version") or {}).get(
                "goldenimage.pipeline"
            ),
            "playbook": (build.get("externalParameters") or {}).get("playbook"),
            "host": (build.get("internalParameters") or {}).get("host"),
        },
        "parameters": dict(
            (k, v) for k, v in (build.get("externalParameters") or {}).items() if k != "playbook"
        ),
        "time": (run.get("metadata") or {}).get("finishedOn"),
    }


def same_build(doc, other):
    """True when two statements record the same subject, inputs and builder (the time aside)."""
    first, second = summary(doc), summary(other)
    first.pop("time")
    second.pop("time")
    return first == second


def already_signed(keyid, name, sha256_hex, signature, found):
    """True when ``keyid`` signed the artifact ``name`` with sha256 ``sha256_hex`` already: its signature
    verifies over that digest, and its provenance, signed by the same key, has that subject. A producer
    that finds its artifact stored and did not read the bytes this run signs nothing; without both files
    it must read the source again to sign what it computes, never what the store says it holds."""
    if (signature or {}).get("key") != keyid or (found or {}).get("key") != keyid:
        return False
    return any(
        s.get("name") == name and (s.get("digest") or {}).get("sha256") == sha256_hex
        for s in summary(found.get("statement") or {})["subject"]
    )


def input_digest(doc, name):
    """The digest set the statement records for the input ``name``, or None."""
    for dep in summary(doc)["inputs"]:
        if dep.get("name") == name:
            return dep.get("digest")
    return None


def plan_signing(keyid, wanted, signature, found, force=False):
    """What a producer writes, from what the existing files prove (``_signing.evidence``'s pair).

    Returns ``{"signature": bool, "provenance": bool, "statement": the statement kept or wanted}``: an
    existing signature the same key made over the same bytes is kept, and so is an envelope the same key
    signed for the same subject, inputs and builder (the time aside). ECDSA signatures are randomised, so
    what is on disk is verified, never compared byte for byte.
    """
    sign = force or (signature or {}).get("key") != keyid
    kept = None
    if not force and (found or {}).get("key") == keyid and same_build(found["statement"], wanted):
        kept = found["statement"]
    return {"signature": sign, "provenance": kept is None, "statement": kept or wanted}


# Where a stored artifact's signature and provenance go: beside it, as cosign names them.
SIGNATURE_SUFFIX = ".sig"
PROVENANCE_SUFFIX = ".intoto.jsonl"


def companions(name):
    """``(signature name, provenance name)`` of an artifact stored as ``name`` (a path or an object key)."""
    return name + SIGNATURE_SUFFIX, name + PROVENANCE_SUFFIX


def companion_of(name):
    """The artifact a signature or provenance file ``name`` belongs to, or None for any other name."""
    for suffix in (SIGNATURE_SUFFIX, PROVENANCE_SUFFIX):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return None


def bundle_problem(text):
    """``(problem, move)`` when a signature file's text is a cosign bundle (``sign-blob --bundle``: JSON with
    ``base64Signature``, or a Sigstore bundle with ``messageSignature``) rather than the plain signature;
    None for anything else."""
    try:
        doc = json.loads(text or "")
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    if "base64Signature" in doc:
        field = ".base64Signature"
    elif isinstance(doc.get("messageSignature"), dict) or "sigstore.bundle" in str(doc.get("mediaType")):
        field = ".messageSignature.signature"
    else:
        return None
    return (
        "it is a cosign bundle (JSON holding the signature with its certificate or log entry), not the plain "
        "base64 signature cosign sign-blob --output-signature writes",
        "give the plain signature: sign with cosign sign-blob --output-signature <file>, or take it out of "
        "the bundle with jq -r '%s'" % field,
    )


# --- DSSE ---------------------------------------------------------------------------------------------


def pae(payload_type, body):
    """DSSE v1 pre-authentication encoding: ``DSSEv1 SP len(type) SP type SP len(body) SP body``.

    Lengths are the byte counts in ASCII decimal; ``payload_type`` is encoded as UTF-8.
    """
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(body), body)


def envelope(payload_type, payload, signatures):
    """The DSSE envelope of ``payload`` bytes with ``[(keyid, der_signature)]``."""
    return {
        "payloadType": payload_type,
        "payload": base64.b64encode(payload).decode("ascii"),
        "signatures": [
            {"keyid": keyid or "", "sig": base64.b64encode(sig).decode("ascii")} for keyid, sig in signatures
        ],
    }


def envelope_line(doc):
    """The envelope as one JSON line, as an ``.intoto.jsonl`` file holds it."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n"


def _b64(value, what):
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, TypeError, ValueError):
        raise ProvenanceError("%s is not base64" % what) from None


def parse_envelope(text, what="provenance"):
    """``(payload_type, payload bytes, [(keyid, signature bytes)])`` from an envelope's JSON text.

    An ``.intoto.jsonl`` file holds one envelope per line; the first is read.
    """
    line = next((part for part in (text or "").splitlines() if part.strip()), "")
    try:
        doc = json.loads(line)
    except ValueError as exc:
        raise ProvenanceError("%s: not a DSSE envelope, the JSON does not parse (%s)" % (what, exc)) from None
    if not isinstance(doc, dict) or not {"payloadType", "payload", "signatures"} <= set(doc):
        raise ProvenanceError("%s: not a DSSE envelope (payloadType, payload and signatures expected)" % what)
    if doc["payloadType"] != PAYLOAD_TYPE:
        raise ProvenanceError("%s: payloadType is %r, not %s" % (what, doc["payloadType"], PAYLOAD_TYPE))
    payload = _b64(doc["payload"], "%s: the payload" % what)
    sigs = []
    for entry in doc["signatures"] or []:
        sigs.append(
            ((entry or {}).get("keyid") or "", _b64((entry or {}).get("sig"), "%s: a signature" % what))
        )
    return doc["payloadType"], payload, sigs


# --- the trust policy ---------------------------------------------------------------------------------


PEM_PUBLIC = re.compile(r"^-----BEGIN PUBLIC KEY-----\s*([A-Za-z0-9+/=\s]+?)\s*-----END PUBLIC KEY-----\s*$")


def pem_key_id(pem, where="public_key"):
    """The key id of a PEM public key: the SHA-256 (hex) of the DER SubjectPublicKeyInfo its body holds.

    Only the PEM's shape is read here; whether it is a P-256 key is the adapter's to find out.
    """
    match = PEM_PUBLIC.match(pem.strip()) if isinstance(pem, str) else None
    if not match:
        raise ProvenanceError(
            "%s is not a PEM public key (-----BEGIN PUBLIC KEY----- ... -----END PUBLIC KEY-----); give the "
            "public half as artifact_sign returns it (public_key) or cosign.pub holds it" % where
        )
    der = _b64("".join(match.group(1).split()), where)
    return hashlib.sha256(der).hexdigest()


# A policy matches names exactly; a pattern would be read as a literal name and match nothing it meant to.
GLOB = re.compile(r"[*?\[]")


def _literal(name, where, field, wildcard=False):
    """``name`` when it holds no glob character (``*`` alone, where ``wildcard`` allows it, means any)."""
    if GLOB.search(name) and not (wildcard and name == ANY):
        raise ProvenanceError(
            "trust policy %s: %s %r is a pattern, and names are matched exactly (no * ? [ globs); list each "
            "name%s" % (where, field, name, ", or give %s alone for any" % ANY if wildcard else "")
        )
    return name


def _names(value, where, field):
    if value is None:
        return [ANY]
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise ProvenanceError(
            "trust policy %s: %s must be a non-empty list of names (or %s)" % (where, field, ANY)
        )
    return sorted(set(_literal(v, where, field, wildcard=True) for v in value))


def normalize_policy(doc):
    """``{"rules": [{key, name, families, streams, public_key}], "relaxed": {family: reason},
    "relaxed_streams": {stream: reason}}`` from a trust policy.

    A rule lets the key id ``key`` (64 hex digits, the SHA-256 of its DER SubjectPublicKeyInfo) sign the
    ``families`` and ``streams`` it lists (``*`` or left out: any). A rule may give the key as ``public_key``
    (PEM) instead, or as well: then the key id is the PEM's, and a ``key`` naming another is refused.
    ``relaxed`` lists the families or streams whose ``require_signature`` is off, each with the reason,
    which is recorded in every verdict it decides.
    """
    doc = doc or {}
    if not isinstance(doc, dict):
        raise ProvenanceError(
            "trust policy: expected a mapping with rules and relaxed, got %r" % type(doc).__name__
        )
    unknown = sorted(set(doc) - {"rules", "relaxed"})
    if unknown:
        raise ProvenanceError(
            "trust policy: unknown fields %s; it has rules and relaxed" % ", ".join(unknown)
        )
    rules = []
    for index, rule in enumerate(doc.get("rules") or []):
        rules.append(_rule(rule, "rule %d" % (index + 1)))
    _distinct_names(rules)
    relaxed, relaxed_streams = {}, {}
    entries = doc.get("relaxed") or []
    for index, entry in enumerate(entries):
        what = "relaxed entry %d" % (index + 1)
        if not isinstance(entry, dict) or bool(entry.get("family")) == bool(entry.get("stream")):
            raise ProvenanceError(
                "trust policy %s: needs a family or a stream (one of them) and a reason" % what
            )
        scope = "family" if entry.get("family") else "stream"
        reason = str(entry.get("reason") or "").strip()
        if not reason:
            raise ProvenanceError(
                "trust policy %s (%s): require_signature is relaxed only with the reason "
                "recorded; give reason" % (what, entry[scope])
            )
        name = _literal(str(entry[scope]), what, scope)
        (relaxed if scope == "family" else relaxed_streams)[name] = reason
    return {"rules": rules, "relaxed": relaxed, "relaxed_streams": relaxed_streams}


def _distinct_names(rules):
    """A verdict names its signer by the rule's name: two rules of one name, or a name that reads as another
    key's id, would let one key be reported as another."""
    seen = {}
    for rule in rules:
        other = seen.get(rule["name"])
        if other is not None and other["key"] != rule["key"]:
            raise ProvenanceError(
                "trust policy: keys %s and %s are both named %s, and a verdict names its signer by the name; "
                "give each key its own name" % (other["key"], rule["key"], rule["name"])
            )
        seen[rule["name"]] = rule
        if KEY_ID.match(str(rule["name"]).lower()):
            raise ProvenanceError(
                "trust policy: key %s is named %s, which reads as a key id (64 hex digits), so a verdict "
                "would show it as that key; give it a name that is not a key id" % (rule["key"], rule["name"])
            )


def _rule(rule, where):
    if not isinstance(rule, dict):
        raise ProvenanceError("trust policy %s: expected a mapping with key, families and streams" % where)
    key = str(rule.get("key") or "").lower()
    pem = rule.get("public_key")
    if pem is not None:
        from_pem = pem_key_id(pem, "trust policy %s: public_key" % where)
        if key and key != from_pem:
            raise ProvenanceError(
                "trust policy %s: key %s is not the id of its public_key (%s); give one of them, or both "
                "for the same key" % (where, key, from_pem)
            )
        key = from_pem
    if not KEY_ID.match(key):
        raise ProvenanceError(
            "trust policy %s: key %r is not a key id (64 hex digits, the SHA-256 of the public key's DER "
            "SubjectPublicKeyInfo, as artifact_sign returns it)" % (where, rule.get("key"))
        )
    found = {
        "key": key,
        "name": str(rule.get("name") or key[:12]),
        "families": _names(rule.get("families"), where, "families"),
        "streams": _names(rule.get("streams"), where, "streams"),
    }
    if pem is not None:
        found["public_key"] = pem.strip() + "\n"
    return found


def public_keys(policy):
    """``[(source, pem bytes)]`` of the rules that carry their public key, the keyring a verifier builds."""
    return [
        ("trust policy key %s (%s)" % (r["name"], r["key"]), r["public_key"].encode("ascii"))
        for r in policy["rules"]
        if r.get("public_key")
    ]


def _covers(names, value):
    return ANY in names or value in names


def trusted_rule(policy, keyid, family, stream):
    """The rule letting ``keyid`` sign (family, stream), or None."""
    for rule in policy["rules"]:
        if rule["key"] == keyid and _covers(rule["families"], family) and _covers(rule["streams"], stream):
            return rule
    return None


def check_signer(keyid, family, stream, policy):
    """A module that signs what it publishes and verifies it against ``policy`` refuses a signing key the
    policy would not accept, before anything is written: signing first would publish an image that its
    own check then refuses, under the tag people pull."""
    if (
        policy is None
        or trusted_rule(policy, keyid, family, stream)
        or relaxed_reason(policy, family, stream)
    ):
        return
    raise ProvenanceError(
        "signing key %s: the trust policy does not let it sign family %s%s (the keys trusted for it: %s); "
        "nothing was pushed. Add the key to the policy for that family, or sign with a trusted key"
        % (keyid, family, " stream %s" % stream if stream else "", _trusted_for(policy, family, stream))
    )


def relaxed_reason(policy, family, stream=None):
    """Why ``family`` (or ``stream``) may go unsigned, or None when a signature is required."""
    found = policy["relaxed"].get(family)
    if found is None and stream is not None:
        found = (policy.get("relaxed_streams") or {}).get(stream)
    return found


def _trusted_for(policy, family, stream):
    """The keys the policy lets sign (family, stream), as a refusal names them."""
    keys = [
        "%s (%s)" % (r["name"], r["key"])
        for r in policy["rules"]
        if _covers(r["families"], family) and _covers(r["streams"], stream)
    ]
    return ", ".join(keys) if keys else "none"


def trust_policy_spec(required=False):
    """The ``public_keys`` and ``trust_policy`` options of a verifying module (doc fragment
    ``goldenimage.pipeline.provenance.trust_policy``)."""
    rule = dict(
        key=dict(type="str", no_log=False),
        public_key=dict(type="str", no_log=False),
        name=dict(type="str"),
        families=dict(type="list", elements="str"),
        streams=dict(type="list", elements="str"),
    )
    relaxed = dict(family=dict(type="str"), stream=dict(type="str"), reason=dict(type="str", required=True))
    return dict(
        public_keys=dict(type="list", elements="str", default=[], no_log=False),
        trust_policy=dict(
            type="dict",
            required=required,
            options=dict(
                rules=dict(type="list", elements="dict", default=[], options=rule),
                relaxed=dict(type="list", elements="dict", default=[], options=relaxed),
            ),
        ),
    )


def key_options(prefix=""):
    """The options a module takes its signing key with, the same in every module that signs (doc fragments
    ``goldenimage.pipeline.signing`` and, with ``prefix`` ``signing_`` where ``key`` already names something
    else, ``goldenimage.pipeline.signing.prefixed``)."""
    return {
        prefix + "key_path": dict(type="path", no_log=False),
        prefix + "key": dict(type="str", no_log=True),
        prefix + "key_password": dict(type="str", no_log=True),
    }


def builder_option():
    """The option naming who made an artifact, as its provenance records it (doc fragment
    ``goldenimage.pipeline.signing.builder``)."""
    options = dict(playbook=dict(type="str"), host=dict(type="str"), collection_version=dict(type="str"))
    return dict(type="dict", default={}, options=options)


# --- the verdict --------------------------------------------------------------------------------------


# How a verdict speaks of a file (artifact_verify) and of an OCI image in a registry (microvm_image).
FILE_WORDS = {
    "kind": "artifact",
    "signature": "detached signature",
    "sign": "sign it with artifact_sign where it is made",
    "changed": "the artifact was changed after signing or the signature belongs to another artifact",
}
IMAGE_WORDS = {
    "kind": "image",
    "signature": "cosign signature (sha256-<hex>.sig)",
    "sign": "sign it where it is built (microvm_image with signing_key, or cosign sign and cosign attest)",
    "changed": "the signature was altered or belongs to another image",
}


def _words(artifact):
    return artifact.get("words") or FILE_WORDS


def _label(artifact):
    kind = _words(artifact)["kind"]
    digest = artifact.get("digest") or {}
    if not digest:
        return "%s %s (no local file read)" % (kind, artifact["name"])
    algorithm = "sha256" if "sha256" in digest else sorted(digest)[0]
    return "%s %s (%s:%s)" % (kind, artifact["name"], algorithm, digest[algorithm])


def _verdict(code, artifact, check, detail, key=None, move=None, **extra):
    msg = "%s: %s check failed: %s" % (_label(artifact), check, detail)
    if move:
        msg = "%s; %s" % (msg, move)
    return dict(extra, verdict=code, ok=False, check=check, key=key, message=msg)


def _unknown_signer(policy, signature, provenance):
    """The key id an envelope names when neither the signature nor the envelope verifies with a key the
    policy holds and the policy does not know that id; None otherwise."""
    if (signature or {}).get("key") is not None or (provenance or {}).get("key") is not None:
        return None
    known = set(r["key"] for r in policy["rules"])
    named = sorted(k for k in (provenance or {}).get("named") or [] if k and k not in known)
    return named[0] if named else None


def judge(artifact, family, stream, policy, signature, provenance):
    """The verdict of one verification, from what the adapter proved.

    ``artifact`` is ``{name, digest}`` of the bytes at hand. ``signature`` is None when there is no detached
    signature, else ``{"key": keyid or None}``: the keyring key that verifies it over these bytes (None when
    none does). ``provenance`` is None when there is no envelope, else ``{"key": keyid or None,
    "statement": dict, "named": [the key ids its signatures name]}``; a key id named there that the policy
    does not hold, when nothing verifies, is reported as the untrusted signer. Returns ``{verdict, ok,
    check, key, message}`` (``signer`` and ``relaxed`` too).
    """
    relaxed = relaxed_reason(policy, family, stream)
    if signature is None and provenance is None and relaxed:
        scope = "family %s" % family if family in policy["relaxed"] else "stream %s" % stream
        return {
            "verdict": RELAXED,
            "ok": True,
            "check": "signature",
            "key": None,
            "relaxed": relaxed,
            "message": "%s: unsigned, allowed for %s: %s" % (_label(artifact), scope, relaxed),
        }
    where = "family %s stream %s" % (family, stream or ANY)
    trusted = "the keys trusted for %s: %s" % (where, _trusted_for(policy, family, stream))
    stranger = _unknown_signer(policy, signature, provenance)
    if stranger:
        return _verdict(
            UNTRUSTED_KEY,
            artifact,
            "signature",
            "key %s signed it (its provenance envelope names the key), and the trust policy holds no such "
            "key, so nothing it signed verifies (%s)" % (stranger, trusted),
            key=stranger,
            move="add the key's public half to the trust policy if it is meant to sign %s" % where,
        )
    if signature is None and provenance is not None:
        return _verdict(
            UNSIGNED,
            artifact,
            "signature",
            "a provenance without its signature: the signed provenance statement is there and the %s is "
            "not%s"
            % (
                _words(artifact)["signature"],
                " (the relaxation of %s lets an unsigned artifact go, not a half-signed one)" % where
                if relaxed
                else ", and %s requires one (%s)" % (where, trusted),
            ),
            move=_words(artifact)["sign"] + " (both files), or remove the stray provenance",
        )
    for what, evidence in (("signature", signature), ("provenance", provenance)):
        if evidence is None:
            return _verdict(
                UNSIGNED,
                artifact,
                what,
                "no %s found, and %s requires one (%s)"
                % (
                    _words(artifact)["signature"] if what == "signature" else "signed provenance statement",
                    where,
                    trusted,
                ),
                move=_words(artifact)["sign"] + ", or relax require_signature for the family "
                "with the reason in the trust policy",
            )
        if evidence.get("key") is None and evidence.get("unreadable"):
            return _verdict(OTHER_BYTES, artifact, what, evidence["error"], move=evidence["unreadable"])
        if evidence.get("key") is None:
            return _verdict(
                OTHER_BYTES,
                artifact,
                what,
                "the %s does not verify over these bytes with any key of the keyring (signed for other "
                "bytes, or by a key not given; %s)"
                % (_words(artifact)["signature"] if what == "signature" else "envelope signature", trusted),
                move=_words(artifact)["changed"],
            )
        rule = trusted_rule(policy, evidence["key"], family, stream)
        if rule is None:
            return _verdict(
                UNTRUSTED_KEY,
                artifact,
                what,
                "key %s signed it but the trust policy does not let that key sign %s"
                % (evidence["key"], where),
                key=evidence["key"],
                move="add a rule for the key to the trust policy if it is meant to sign this family",
            )
    doc = provenance["statement"]
    subjects = doc.get("subject") or []
    named = [s for s in subjects if s.get("name") == artifact["name"]]
    if not named:
        others = ", ".join(sorted(str(s.get("name")) for s in subjects))
        replay = any(digests_agree(artifact["digest"], s.get("digest") or {}) for s in subjects)
        return _verdict(
            REPLAYED,
            artifact,
            "provenance subject",
            "the statement key %s signed is for %s, not %s%s"
            % (
                provenance["key"],
                others,
                artifact["name"],
                ": another revision's bytes and signatures replayed under this name" if replay else "",
            ),
            key=provenance["key"],
            move="serve the revision the provenance names, or sign this revision",
        )
    if not any(digests_agree(artifact["digest"], s.get("digest") or {}) for s in named):
        return _verdict(
            SUBJECT_DIGEST,
            artifact,
            "provenance subject",
            "the statement key %s signed records digest %s for %s, the bytes have %s"
            % (
                provenance["key"],
                ", ".join("%s:%s" % kv for s in named for kv in sorted(s["digest"].items())),
                artifact["name"],
                ", ".join("%s:%s" % kv for kv in sorted(artifact["digest"].items())),
            ),
            key=provenance["key"],
            move="the provenance belongs to other bytes; sign the artifact again where it is made",
        )
    rule = trusted_rule(policy, signature["key"], family, stream)
    return {
        "verdict": VERIFIED,
        "ok": True,
        "check": "all",
        "key": signature["key"],
        "signer": rule["name"],
        "message": "%s: signed by %s (%s), provenance subject matches"
        % (
            _label(artifact),
            rule["name"],
            signature["key"],
        ),
    }


# --- OCI images, as cosign signs them ---------------------------------------------------------------
#
# An image is signed by its manifest digest: the simple-signing payload names the repository and the digest,
# the signature (ECDSA over the payload's SHA-256) rides in the annotation of the layer holding the payload,
# in a manifest under the tag ``sha256-<hex>.sig``; the provenance is a DSSE envelope whose statement's
# subject is the repository with the digest, under ``sha256-<hex>.att``. The image's name in a verdict and in
# a statement is the repository with its registry host, as cosign names it.

SIMPLE_SIGNING_TYPE = "cosign container image signature"


def simple_signing(repository, digest):
    """The payload cosign signs for ``repository`` (``host/path``) at ``digest`` (``sha256:<hex>``), bytes."""
    doc = {
        "critical": {
            "identity": {"docker-reference": repository},
            "image": {"docker-manifest-digest": digest},
            "type": SIMPLE_SIGNING_TYPE,
        },
        "optional": None,
    }
    return serialize(doc)


def signed_digest(payload):
    """The manifest digest a simple-signing payload names, or None when it is not one (any other JSON)."""
    try:
        doc = json.loads(payload.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    critical = doc.get("critical") if isinstance(doc, dict) else None
    if not isinstance(critical, dict) or critical.get("type") != SIMPLE_SIGNING_TYPE:
        return None
    return ((critical.get("image") or {}).get("docker-manifest-digest")) or None


def _trusted_first(entries, trusted):
    """``entries`` with those whose key ``trusted(key)`` accepts first, in their order otherwise."""
    if trusted is None:
        return list(entries)
    return [e for e in entries if trusted(e["key"])] + [e for e in entries if not trusted(e["key"])]


def image_signature(signatures, digest, trusted=None):
    """What an image's signature layers prove, as ``judge`` takes it, from ``[{"key", "digest"}]``: the key
    that verifies each layer's payload (None when no keyring key does) and the digest the payload names.

    None when there is no layer; ``{"key": keyid}`` from a layer a key verifies for ``digest`` (one whose key
    ``trusted(key)`` accepts before any other: cosign appends the signatures of every signer to the tag);
    else ``{"key": None, "other": (keyid, digest)}`` naming a verified signature made for another image."""
    if not signatures:
        return None
    verified = [e for e in signatures if e.get("key")]
    for entry in _trusted_first(verified, trusted):
        if entry.get("digest") == digest:
            return {"key": entry["key"]}
    other = next(((e["key"], e.get("digest")) for e in verified), None)
    return {"key": None, "other": other}


def image_provenance(envelopes, name, digest, trusted=None):
    """The envelope ``judge`` takes from ``[{"key", "statement", "named"}]`` (one per ``.att`` layer): one a
    key verified whose statement names ``name`` at ``digest`` (a key ``trusted`` accepts first), else the
    first a key verified, else the first; None when there is none."""
    if not envelopes:
        return None
    want = digest_set(digest, "image %s" % name)
    verified = [e for e in envelopes if e.get("key") and e.get("statement")]
    for entry in _trusted_first(verified, trusted):
        for subject in entry["statement"].get("subject") or []:
            if subject.get("name") == name and digests_agree(want, subject.get("digest") or {}):
                return entry
    return (verified or envelopes)[0]


def judge_image(name, digest, family, stream, policy, signatures, envelopes):
    """The verdict on the image ``name`` (``host/path``) at ``digest`` (``sha256:<hex>``), as ``judge``
    gives it, from its signature layers (``[{"key", "digest"}]``) and its attestation envelopes (``[{"key",
    "statement", "named"}]``); a signature a known key made for another image's digest is named as such."""
    image = {"name": name, "digest": digest_set(digest, "image %s" % name), "words": IMAGE_WORDS}

    def trusted(key):
        return trusted_rule(policy, key, family, stream) is not None

    signature = image_signature(signatures, digest, trusted)
    found = image_provenance(envelopes, name, digest, trusted)
    other = (signature or {}).get("other")
    if other:
        where = "family %s stream %s" % (family, stream or ANY)
        return _verdict(
            OTHER_BYTES,
            image,
            "signature",
            "key %s signed docker-manifest-digest %s, not this image's %s: a signature made for another "
            "image (the keys trusted for %s: %s)"
            % (other[0], other[1], digest, where, _trusted_for(policy, family, stream)),
            key=other[0],
            move=IMAGE_WORDS["sign"],
        )
    return judge(image, family, stream, policy, signature, found)


def policy_document(policy):
    """The stored form of a normalized policy (``normalize_policy`` reads it back to the same policy)."""
    rules = []
    for rule in policy["rules"]:
        entry = {"key": rule["key"], "name": rule["name"]}
        entry.update((field, rule[field]) for field in ("families", "streams") if rule[field] != [ANY])
        if rule.get("public_key"):
            entry["public_key"] = rule["public_key"]
        rules.append(entry)
    relaxed = [{"family": f, "reason": r} for f, r in sorted(policy["relaxed"].items())]
    relaxed += [{"stream": s, "reason": r} for s, r in sorted((policy.get("relaxed_streams") or {}).items())]
    return {"rules": rules, "relaxed": relaxed}


# --- the verdict a consumer records, judged again later -----------------------------------------------


def verdict_record(verdict, artifact, sha256, family, doc=None, evidence=None):
    """What a consumer records of a verification on what it made (no key material): the verdict, the key
    and its policy name, the artifact and the digest verified, the family it was judged for, and the
    inputs, builder and time the verified statement ``doc`` names.

    A verified record carries its ``evidence`` too: the ``.sig`` and ``.intoto.jsonl`` texts as read where
    the artifact was verified (given as that pair, recorded as ``{"signature", "provenance"}``). The verdict
    is only a claim, written as easily as any annotation; the evidence is what ``recorded_verdict_problem``
    verifies again wherever what was made is used.
    """
    record = {
        "verdict": verdict["verdict"],
        "key": verdict.get("key"),
        "artifact": artifact,
        "sha256": sha256,
        "family": family,
    }
    for field in ("signer", "relaxed"):
        if verdict.get(field):
            record[field] = verdict[field]
    if doc is not None and verdict["verdict"] == VERIFIED:
        found = summary(doc)
        record.update(inputs=found["inputs"], builder=found["builder"], time=found["time"])
    if evidence and verdict["verdict"] == VERIFIED:
        record[EVIDENCE] = {"signature": evidence[0], "provenance": evidence[1]}
    return record


# The field of a record holding the texts verified, and its two entries.
EVIDENCE = "evidence"
EVIDENCE_FIELDS = ("signature", "provenance")


def recorded_evidence(record):
    """``(signature text, envelope text)`` the verified ``record`` carries (None for one it lacks), or None
    when it carries neither: a record written before evidence was kept, or by hand."""
    found = (record or {}).get(EVIDENCE)
    if not isinstance(found, dict):
        return None
    texts = tuple(found.get(f) if isinstance(found.get(f), str) else None for f in EVIDENCE_FIELDS)
    return texts if any(t is not None for t in texts) else None


def recorded_sha256(record):
    """The SHA-256 (hex, lowercased) a record names, or None when it names none that is one."""
    value = str((record or {}).get("sha256") or "").lower()
    return value if re.match(r"^[0-9a-f]{64}$", value) else None


def recorded_verdict_problem(
    policy, record, proof, what, family, stream=None, digest=None, facts=None, artifact=None, **wording
):
    """Why the verdict ``record`` recorded on ``what`` does not hold under ``policy`` today, as ``(problem,
    move)``; None when it holds. The one rule every consumer of a golden applies (publishing, the promotion
    gate, the report, a worker golden that exists).

    A recorded verdict is a claim anyone who can write the annotation can write, so it is never taken on its
    word. ``family`` and ``stream`` are those of what is used (the golden's), never the family the record
    names; ``digest`` (``{algorithm: hex}``) the digest it is known by (the golden's release digest);
    ``facts`` the image facts recorded on it (None when none are); ``artifact`` the name it must have been
    verified under, when the consumer knows it (a worker image's Factory path); ``proof`` what the keys of
    the policy prove about the evidence the record carries (``_signing.record_proof``, ``{"signature",
    "provenance", "keys"}``), None when it carries none.

    * ``verified``: the record names its artifact (``artifact``, when given) and a digest that is
      ``digest``; its evidence verifies (the signature over that digest, by a key the policy trusts for
      ``family`` and ``stream``; the envelope signed by a trusted key; its subject that artifact with that
      digest); the key is the one the record names; the inputs, builder and time it records are the signed
      statement's; and the image facts the statement names, when it names them, are ``facts``.
    * anything else: the policy relaxes ``family`` (or ``stream``) today.

    ``wording`` is ``record_problem``'s (``moves``, ``scope``, ``done``, ``policy_name``).
    """
    record = record or {}
    found = record_problem(policy, record, what, family, stream, **wording)
    if found or record.get("verdict") != VERIFIED:
        return found
    move = (wording.get("moves") or _RECORD_MOVES)[1]
    key = record.get("key")
    if not record.get("artifact") or not recorded_sha256(record):
        return (
            "%s records a signature verified by key %s naming no artifact or no sha256 digest, which cannot "
            "be told from another artifact's verdict replayed on it" % (what, key),
            move,
        )
    found = record_binding(record, artifact or record["artifact"], digest, what, move)
    if found:
        return ("%s (the verdict names key %s; binding check failed)" % (found[0], key), found[1])
    if proof is None:
        return (
            "%s records a signature verified by key %s with no evidence (the signature and the provenance "
            "read where it was verified), so nothing proves it: a recorded verdict alone is a claim anyone "
            "who can write the annotation can make (evidence check failed)" % (what, key),
            move,
        )
    # Every digest the record binds (the ones the consumer serves by) is judged against the signed subject.
    recorded = dict((a, str(record[a]).lower()) for a in ALGORITHMS if record.get(a))
    artifact = {"name": record["artifact"], "digest": dict(recorded, sha256=recorded_sha256(record))}
    judged = judge(artifact, family, stream, policy, proof.get("signature"), proof.get("provenance"))
    if judged["verdict"] != VERIFIED:
        return (
            "%s records a signature verified by key %s, and the evidence it carries does not verify under "
            "the trust policy (keys with a public key in it: %s): %s"
            % (what, key, ", ".join(proof.get("keys") or []) or "none", judged["message"]),
            move,
        )
    if judged["key"] != key:
        return (
            "%s records key %s, and the evidence it carries is signed by key %s (key check failed)"
            % (what, key, judged["key"]),
            move,
        )
    statement = proof["provenance"]["statement"]
    unsigned = _unsigned_digests(statement, record["artifact"], digest)
    if unsigned:
        return (
            "%s is served by its %s digest, which the statement key %s signed does not name for %s, so "
            "nothing signed binds the bytes served to the bytes signed (subject check failed)"
            % (what, "/".join(unsigned), key, record["artifact"]),
            "sign the artifact again with goldenimage.pipeline.artifact_sign (its subject names sha256 and "
            "sha512), then %s" % move,
        )
    signed = summary(statement)
    differs = [f for f in ("inputs", "builder", "time") if record.get(f) != signed[f]]
    if differs:
        return (
            "%s records %s other than the statement key %s signed names (statement check failed)"
            % (what, ", ".join(differs), key),
            move,
        )
    named = input_digest(statement, FACTS)
    if named and facts is not None:
        named = dict((a, str(v).lower()) for a, v in named.items())
        if not digests_agree(named, facts_digest(facts)):
            return (
                "%s records image facts (sha256:%s) other than the ones the statement key %s signed names "
                "(%s): the facts are not of the bytes that were signed (facts check failed)"
                % (
                    what,
                    facts_digest(facts)["sha256"],
                    key,
                    ", ".join("%s:%s" % kv for kv in sorted(named.items())),
                ),
                "read the facts from the golden's own bytes again, or make the golden again from the signed "
                "artifact",
            )
    return None


def _unsigned_digests(statement, name, digest):
    """The algorithms of ``digest`` (what a consumer serves by) that the statement's subject ``name`` does
    not carry."""
    carried = set()
    for subject in statement.get("subject") or []:
        if subject.get("name") == name:
            carried.update(subject.get("digest") or {})
    return sorted(a for a, v in (digest or {}).items() if v and a not in carried)


_RECORD_MOVES = (
    "make it again from an artifact signed by a trusted key, or trust the key again in the policy",
    "make it again from a signed artifact, verified where it is imported",
)


def record_problem(policy, record, what, family, stream=None, **wording):
    """Why the verdict ``record`` recorded on ``what`` does not hold under ``policy`` today, as
    ``(problem, move)``; None when it holds.

    The bytes are not at hand where a golden or a revision is used: what its import proved (the verdict, the
    key) is judged again, so a key withdrawn from the policy, or a relaxation taken back, stops it from
    serving. ``wording`` may name the ``scope`` judged (``family <family>``), how it was ``done``
    (``imported``), the ``policy_name`` (``the trust policy``) and the ``moves`` (after a withdrawn key,
    after a missing or withdrawn signature).
    """
    record = record or {}
    scope = wording.get("scope") or "family %s" % family
    policy_name = wording.get("policy_name") or "the trust policy"
    moves = wording.get("moves") or _RECORD_MOVES
    if record.get("verdict") == VERIFIED:
        if trusted_rule(policy, record.get("key"), family, stream) is not None:
            return None
        return (
            "%s was signed by key %s, which %s no longer lets sign %s"
            % (what, record.get("key"), policy_name, scope),
            moves[0],
        )
    if relaxed_reason(policy, family, stream):
        return None
    if record.get("verdict") == RELAXED:
        problem = "was %s unsigned under a relaxation of %s that the trust policy no longer grants" % (
            wording.get("done") or "imported",
            scope,
        )
    else:
        problem = "has no verified signature recorded, and the trust policy requires one for %s" % scope
    return ("%s %s" % (what, problem), moves[1])


def record_binding(record, artifact, digest, what, move):
    """Why the verified ``record`` is not the verdict on ``artifact`` with ``digest`` (``{algorithm: hex}``,
    what the consumer is about to serve), as ``(problem, move)``; None when it is, or when the record is no
    verified one (``record_problem`` judges those).

    A record is copied as easily as any other field: one verified for another revision, or for bytes other
    than the ones the entry serves, proves nothing about this one. A record naming no artifact or no digest
    the entry carries cannot be told from a replayed one and is refused as well.
    """
    record = record or {}
    if record.get("verdict") != VERIFIED:
        return None
    if record.get("artifact") != artifact:
        return (
            "%s records a signature verified for %s, not for its own artifact %s: another revision's "
            "verdict replayed under this name"
            % (what, record.get("artifact") or "no named artifact", artifact),
            move,
        )
    recorded = dict((a, str(record[a]).lower()) for a in ALGORITHMS if record.get(a))
    served = dict((a, str(v).lower()) for a, v in (digest or {}).items() if v)
    if not digests_agree(recorded, served):
        return (
            "%s records a signature verified over %s, and the bytes it serves have %s: the signature is of "
            "other bytes"
            % (
                what,
                ", ".join("%s:%s" % kv for kv in sorted(recorded.items())) or "no digest",
                ", ".join("%s:%s" % kv for kv in sorted(served.items())) or "no digest recorded",
            ),
            move,
        )
    return None


def facts_digest(facts):
    """The digest a statement records for an image-facts document: SHA-256 of its signed serialization."""
    return {"sha256": hashlib.sha256(serialize(facts)).hexdigest()}


def signed_report(record, facts=None):
    """What a report shows of the verdict ``record`` on a served artifact (a golden, a revision): who signed
    it (key and policy name), from what inputs, by which builder and when, and ``facts_match``: whether the
    image facts recorded now are the ones the signed statement names (None when either is missing).

    The one rule golden_info and the drift report read, so both say the same of the same record.
    """
    record = record or {}
    signed = None
    for entry in record.get("inputs") or []:
        if isinstance(entry, dict) and entry.get("name") == FACTS:
            signed = entry.get("digest") or None
    match = None
    if signed and facts is not None:
        match = digests_agree(dict((a, str(v).lower()) for a, v in signed.items()), facts_digest(facts))
    return {
        "verdict": record.get("verdict"),
        "key": record.get("key"),
        "signer": record.get("signer"),
        "relaxed": record.get("relaxed"),
        "inputs": record.get("inputs") or [],
        "builder": record.get("builder"),
        "time": record.get("time"),
        "facts_match": match,
    }


def bytes_differ(artifact, seen, key=None):
    """The verdict on bytes whose digest ``seen`` is not the one ``artifact`` is named and signed for."""
    recorded = ", ".join("%s:%s" % kv for kv in sorted(artifact["digest"].items()))
    found = ", ".join("%s:%s" % kv for kv in sorted(seen.items()))
    return _verdict(
        OTHER_BYTES,
        artifact,
        "digest",
        "the stored bytes have %s, not the %s the artifact is named and signed for" % (found, recorded),
        key=key,
        move="the artifact was changed after it was stored; mirror or export it again under a new name",
    )
