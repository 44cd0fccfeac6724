# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Is a bucket object readable by anyone? The verdict from anonymous answers, and the BYOL rule.

Also the rules of a presigned object URL (what may be signed, for how long), used by bucket_object_url.

Pure functions; the unsigned requests are made by the bucket_exposure module through ``_s3.py``.
Only the answers count: a key prefix such as ``private/`` is a naming convention, so the key is
never part of the verdict.

An anonymous read is *allowed* when the server served it (2xx, 304, a 416 for a range past the end
of an empty object) or looked for the object on the caller's behalf and found none (404
``NoSuchKey``). It is *denied* on 401/403. Anything else (no answer, 5xx, a redirect, a missing
bucket) says nothing, and a licensed image is never uploaded on an answer that says nothing.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from urllib.parse import unquote, urlsplit

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import inputs, redact
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal

ALLOWED = "allowed"
DENIED = "denied"
UNKNOWN = "unknown"

PUBLIC = "public"
PRIVATE = "private"

# License states of an image. Only the first group may go to a bucket anyone can read (BYOL: the
# tenant brings the licence; the golden holds no key and is not activated).
UNLICENSED = ("none", "byol", "evaluation")
LICENSED = ("volume", "kms", "key", "activated")
LICENSE_CHOICES = UNLICENSED + LICENSED
LICENSE_WORDS = {
    "volume": "volume-licensed",
    "kms": "KMS-configured",
    "key": "key-bearing",
    "activated": "activated",
}

_SERVED = (200, 204, 206, 304, 416)
_REFUSED = (401, 403)
_MISSING_KEY = ("NoSuchKey", "NotFound", "404")


# Signature Version 4 refuses a presigned URL that lives longer than seven days.
MAX_EXPIRY = 7 * 24 * 3600
# What to do instead of writing keys into an object URL.
URL_CREDENTIALS_MOVE = (
    "give the plain object URL; the keys go in access_key/secret_key (or AWS_ACCESS_KEY_ID/"
    "AWS_SECRET_ACCESS_KEY), which are never logged"
)
PRESIGN_CREDENTIALS_MOVE = (
    "give the plain object URL and the keys in access_key/secret_key; this module presigns it, and "
    "CDI's http source cannot use user-info or basic auth against S3 anyway"
)


class ExposureError(PipelineError):
    """An input that cannot be probed, or a refusal; the message says what to change."""


# Where to look ---------------------------------------------------------------------------------


def parse_url(url, option="url", move=URL_CREDENTIALS_MOVE):
    """``(endpoint_url or None, bucket, key)`` of ``s3://bucket/key`` or a path-style http(s) URL.

    A URL with user-info is refused (``move`` names what to do instead): the endpoint taken from it
    would carry the credentials into every message and result.
    """
    redact.refuse_credentials(url, option, move)
    shown = redact.redact_url(url)
    parts = urlsplit(str(url or ""))
    scheme = parts.scheme.lower()
    if scheme == "s3":
        bucket, key = parts.netloc, unquote(parts.path.lstrip("/"))
        endpoint = None
    elif scheme in ("http", "https"):
        bucket, _slash, key = unquote(parts.path.lstrip("/")).partition("/")
        endpoint = "%s://%s" % (scheme, parts.netloc)
    else:
        raise ExposureError(
            "url %r is neither s3://<bucket>/<key> nor a path-style http(s)://<host>/<bucket>/<key>" % shown
        )
    if not bucket or not key:
        raise ExposureError("url %r names no bucket and key: expected .../<bucket>/<key>" % shown)
    return endpoint, bucket, key


def presign_target(url):
    """``(endpoint, bucket, key)`` of the plain path-style http(s) object URL a presigned URL is made from.

    Refused: credentials in it, a query string or fragment (it may be signed already), no host, no key.
    """
    redact.refuse_credentials(url, "url", PRESIGN_CREDENTIALS_MOVE)
    shown = redact.redact_url(url)
    parts = urlsplit(url or "")
    if parts.query or parts.fragment:
        raise Refusal(
            "url %r" % shown, "it already has a query string (a signed URL?)", "give the plain object URL"
        )
    try:
        endpoint, bucket, key = parse_url(url)
    except ExposureError as exc:
        raise Refusal("url %r" % shown, "it does not name an object: %s" % exc.msg, None) from exc
    if endpoint is None:
        raise Refusal(
            "url %r" % shown,
            "it has no host to sign for",
            "give the http(s) URL the importer reaches, <scheme>://<host>/<bucket>/<key>",
        )
    return endpoint, bucket, key


def check_expiry(expiry, option="expiry"):
    """Seconds a presigned URL lives: more than zero, at most the seven days Signature Version 4 allows."""
    inputs.positive(expiry, option)
    if expiry > MAX_EXPIRY:
        raise Refusal(
            "option %s" % option,
            "%s is out of range: a presigned URL lives 1 to %d seconds" % (expiry, MAX_EXPIRY),
            "keep it as short as the import needs",
        )
    return expiry


def check_signing_keys(access_key, secret_key, bucket, key):
    """Presigning needs a key pair: a URL signed with no credentials opens nothing."""
    if not access_key or not secret_key:
        raise Refusal(
            "signing s3://%s/%s" % (bucket, key),
            "it needs access_key and secret_key (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY): a URL "
            "signed with no credentials opens nothing",
            "give the keys of an identity that may read the object",
        )


def signed_result(url):
    """What a module returns for a presigned URL: ``url`` (a bearer credential) and ``url_redacted``."""
    return {"url": url, "url_redacted": redact.redact_url(url)}


def key_prefix(key):
    """The prefix an object sits under: everything up to its last ``/`` (empty at the bucket root)."""
    head, slash, _name = str(key).rpartition("/")
    return head + slash


# Reading the answers ---------------------------------------------------------------------------


def classify(status, code=None):
    """ALLOWED, DENIED or UNKNOWN for one anonymous answer (HTTP status, S3 error code)."""
    try:
        status = int(status or 0)
    except (TypeError, ValueError):
        return UNKNOWN
    if status in _SERVED:
        return ALLOWED
    if status in _REFUSED:
        return DENIED
    # A 404 from a HEAD carries no body: unless the GET said NoSuchBucket, it is a missing key.
    if status == 404 and (code is None or str(code) in _MISSING_KEY):
        return ALLOWED
    return UNKNOWN


def verdict(answers):
    """The verdict of ``answers``: a dict of probe name -> ``(status, code)``.

    Returns ``{"exposed", "verdict", "allowed", "denied", "unknown"}``; ``verdict`` is PUBLIC when
    any anonymous read is allowed, PRIVATE when every probe was refused, UNKNOWN otherwise.
    """
    classes = {name: classify(*answer) for name, answer in answers.items()}
    allowed = sorted(name for name, found in classes.items() if found == ALLOWED)
    denied = sorted(name for name, found in classes.items() if found == DENIED)
    unknown = sorted(name for name, found in classes.items() if found == UNKNOWN)
    if allowed:
        state = PUBLIC
    elif denied and not unknown:
        state = PRIVATE
    else:
        state = UNKNOWN
    return {
        "exposed": bool(allowed),
        "verdict": state,
        "allowed": allowed,
        "denied": denied,
        "unknown": unknown,
    }


# BYOL ------------------------------------------------------------------------------------------


def normalize_license(value):
    """The license state in lowercase; ExposureError for a value that is not documented."""
    text = str(value if value is not None else "none").strip().lower()
    if text not in LICENSE_CHOICES:
        raise ExposureError(
            "license %r is not one of %s; an image carrying any licence (%s) must say so"
            % (value, ", ".join(LICENSE_CHOICES), ", ".join(LICENSED))
        )
    return text


def is_licensed(value):
    return normalize_license(value) in LICENSED


def worth_sampling(get, head):
    """Whether the object's answers leave open a bucket that serves existing keys (403/404 for both)."""
    return get[0] in (403, 404) and head[0] in (403, 404)


def block_advice(bucket, prefix, allowed):
    """What to change so anonymous reads of ``prefix`` in ``bucket`` are refused (no import advice)."""
    actions = []
    if any(name != "list" for name in allowed):
        actions.append("s3:GetObject on arn:aws:s3:::%s/%s*" % (bucket, prefix))
    if "list" in allowed:
        actions.append("s3:ListBucket on arn:aws:s3:::%s" % bucket)
    return (
        "Block public access on bucket %s (PutPublicAccessBlock with BlockPublicAcls, IgnorePublicAcls, "
        "BlockPublicPolicy and RestrictPublicBuckets all true), or give it a bucket policy with no statement "
        'allowing Principal "*" and no public-read ACL, so that anonymous %s is refused. A key prefix such '
        "as private/ is a name, not protection, and a Rook ObjectBucketClaim drops a hand-applied bucket "
        "policy when it reconciles" % (bucket, " and ".join(actions) or "reads are")
    )


def remedy(bucket, prefix, allowed):
    """What to add so anonymous reads of ``prefix`` in ``bucket`` are refused, and how to import then."""
    return "%s; then %s" % (block_advice(bucket, prefix, allowed), PRIVATE_IMPORT_MOVE)


def byol_refusal(license_state, bucket, key, prefix, result, statuses):
    """None when the image may go to ``bucket``; else the refusal message (naming bucket and remedy).

    ``result`` is a ``verdict()``; ``statuses`` maps probe name -> HTTP status for the message.
    """
    state = normalize_license(license_state)
    if state not in LICENSED:
        return None
    if result["verdict"] == PRIVATE:
        return None
    seen = ", ".join("%s %s" % (name, statuses.get(name)) for name in sorted(statuses))
    target = "s3://%s/%s" % (bucket, key)
    if result["verdict"] == PUBLIC:
        return (
            "refusing to upload a %s image to %s: anonymous reads succeed there (%s; anonymous answers: %s). "
            "A licensed image never goes where anyone can read it. %s."
            % (
                LICENSE_WORDS[state],
                target,
                ", ".join(result["allowed"]),
                seen,
                remedy(bucket, prefix, result["allowed"]),
            )
        )
    return (
        "refusing to upload a %s image to %s: the anonymous probes did not prove that bucket %s refuses "
        "anonymous reads (%s; anonymous answers: %s). Check that the endpoint answers and the bucket exists; "
        "a licensed image is uploaded only where every anonymous read is refused with 401/403."
        % (LICENSE_WORDS[state], target, bucket, ", ".join(result["unknown"]) or "no answer", seen)
    )


# Importing anonymously -------------------------------------------------------------------------


def anonymous_import_refusal(url, bucket, key, get):
    """The refusal for an object CDI would read anonymously (an http source without presign or secret_ref)
    when the anonymous GET of it, ``get`` as ``(status, code)``, was refused; None otherwise.

    Only a refused read stops the import before it starts: an answer that says nothing (no answer, a
    server that is not S3) leaves the import to find out.
    """
    if classify(*get) != DENIED:
        return None
    return Refusal(
        "http source %s" % redact.redact_url(url),
        "an anonymous GET of s3://%s/%s was refused (HTTP %s %s), and CDI reads a source with neither "
        "presign nor secret_ref anonymously, so the import would fail (S3 also answers 403 for a missing "
        "key to anyone who may not list the bucket)" % (bucket, key, get[0], get[1] or "refused"),
        "nothing was written; for a private S3 or Ceph RGW bucket import with source.s3 and a secret_ref (a "
        "Secret with accessKeyId and secretKey; CDI signs its requests), or set presign: true on the http "
        "source (a bearer URL in the DataVolume until it expires); an http secret_ref is sent as HTTP basic "
        "auth, which S3 and RGW refuse",
        bucket=bucket,
        key=key,
        get_status=get[0],
    )


# Proving a destination private before sensitive bytes move ---------------------------------------
#
# The proof has two halves, both read by the adapters and judged here:
# - the bucket's controls, as the owner reads them: GetBucketPolicyStatus, GetBucketAcl and
#   GetPublicAccessBlock. An API that does not answer (501 NotImplemented, AccessDenied, no answer) is
#   recorded as "not answered", never as private;
# - a throw-away canary object written under the destination prefix with the run's own credentials,
#   then read anonymously four ways (GET, ranged GET, HEAD, and a listing of the prefix). A bucket that
#   grants anonymous s3:GetObject but not s3:ListBucket answers 403 for a missing key and serves an
#   existing one: only an object that exists proves anything, so the canary exists before it is probed.
# Any 2xx of a probe, or a control that says public, makes the destination public. It is private only
# when the canary was written and every probe was refused with 401/403.

CANARY_PROBES = ("get", "range_get", "head", "list")
CONTROLS = ("policy_status", "acl", "public_access_block")
ANSWERED = "answered"
NOT_ANSWERED = "not answered"
PUBLIC_GROUP_URIS = (
    "http://acs.amazonaws.com/groups/global/AllUsers",
    "http://acs.amazonaws.com/groups/global/AuthenticatedUsers",
)
# The one group grantee that is not the public: S3's log delivery. Any other grant to a Group counts as
# public, whatever the server calls it: versitygw names AllUsers {"ID": "all-users", "Type": "Group"}
# with no URI, and a reader that knew only the URIs would call its public-read bucket private.
PRIVATE_GROUP_URIS = ("http://acs.amazonaws.com/groups/s3/LogDelivery",)


def public_grantee(grantee, grantee_type=None):
    """Whether an ACL grantee (its URI, or its ID when it has none) is the public: AllUsers or
    AuthenticatedUsers by URI, or a Group by any other name than log delivery."""
    if grantee in PUBLIC_GROUP_URIS:
        return True
    return grantee_type == "Group" and grantee not in PRIVATE_GROUP_URIS


BLOCK_SETTINGS = ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets")
# S3 errors that answer a control read: there is no such configuration on the bucket.
_NO_CONFIGURATION = {
    "policy_status": ("NoSuchBucketPolicy",),
    "acl": (),
    "public_access_block": ("NoSuchPublicAccessBlockConfiguration",),
}
CANARY_BODY = b"goldenimage.pipeline exposure canary: not an image, safe to delete\n"
CANARY_NAME = ".goldenimage-exposure-canary-"

# What to do instead of putting a licensed or key-bearing image where anyone reads it.
PRIVATE_IMPORT_MOVE = (
    "import it with CDI's source.s3 and a secretRef (a Secret with accessKeyId and secretKey; CDI signs "
    "its requests), so no bearer URL sits in a DataVolume spec"
)


def licence_reasons(license_state):
    """The reasons a declared licence makes an image's bytes sensitive (empty for none/byol/evaluation)."""
    state = normalize_license(license_state)
    return ["declared licence %s (%s)" % (state, LICENSE_WORDS[state])] if state in LICENSED else []


def sensitive_reasons(license_state=None, facts=None, facts_reasons=None):
    """Every reason the bytes about to move are sensitive: the declared licence's, plus what the image's
    facts say (``image_facts.exposure_reasons(facts)`` when ``facts`` is given; ``facts_reasons``, a list
    already derived from them, is added as given). Order kept, duplicates dropped.

    ``facts`` given but image_facts not importable is an error, never a silent "nothing found"."""
    reasons = licence_reasons(license_state)
    if facts is not None:
        try:
            from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import image_facts
        except ImportError as exc:
            raise ExposureError(
                "image facts were given but image_facts.exposure_reasons is not available to read them"
            ) from exc
        reasons += [str(r) for r in image_facts.exposure_reasons(facts) or []]
    reasons += [str(r) for r in facts_reasons or []]
    seen = set()
    return [r for r in reasons if r and not (r in seen or seen.add(r))]


# The metadata an export records on its object: whether its bytes were sensitive when it was made.
SENSITIVE_META = "sensitive"


def sensitive_mark(reasons):
    """The value of the SENSITIVE_META metadata for bytes with these reasons."""
    return "yes" if reasons else "no"


def held_needs_proof(metadata, reasons):
    """Whether an object the key already holds (the same bytes, so the run writes nothing) must still be
    proven unreadable anonymously: sensitive by this run's reasons, or by the mark its export recorded. An
    object without the mark is not known to be harmless."""
    return bool(reasons) or (metadata or {}).get(SENSITIVE_META) != "no"


def held_refusal(bucket, key, answers, reasons):
    """The refusal for sensitive bytes already at ``bucket/key`` that anonymous reads reach (``answers``:
    probe -> ``(status, code)`` of an unsigned GET and HEAD of the object), or None when all are refused.
    The object is left in place: the run did not write it, and the supported move is the bucket's."""
    found = verdict(answers)
    if found["verdict"] == PRIVATE:
        return None
    return (
        "s3://%s/%s already holds these bytes, but anonymous reads of it are not refused (%s), and they are "
        "sensitive (%s); nothing was written or deleted. %s"
        % (
            bucket,
            key,
            ", ".join("%s %s" % (name, answer[0]) for name, answer in sorted(answers.items())),
            "; ".join(reasons) or "as its export recorded them, or it recorded no verdict at all",
            remedy(bucket, key_prefix(key), found["allowed"] or ["get"]),
        )
    )


def canary_key(key, token):
    """The key of the throw-away canary object for destination ``key``: under the same prefix, unique per
    run, and ending with the same file name, so a policy statement that matches the destination by its
    prefix or by its suffix (``.../*.qcow2``) matches the canary too."""
    return "%s%s%s-%s" % (key_prefix(key), CANARY_NAME, token, key.rpartition("/")[2])


def _probe_state(status):
    try:
        status = int(status or 0)
    except (TypeError, ValueError):
        return UNKNOWN
    if 200 <= status < 300:
        return ALLOWED
    if status in _REFUSED:
        return DENIED
    return UNKNOWN


def judge_control(name, status, code=None, value=None):
    """One control read by the owner, as a dict: ``state`` ANSWERED or NOT_ANSWERED, ``public`` (bool),
    ``detail`` (what it said). ``value``: policy_status -> IsPublic (bool); acl -> the grants as
    ``[(grantee URI or id, permission)]``; public_access_block -> the configuration dict."""
    try:
        status = int(status or 0)
    except (TypeError, ValueError):
        status = 0
    out = {"status": status, "code": code or "", "state": NOT_ANSWERED, "public": False, "detail": ""}
    if status == 404 and code in _NO_CONFIGURATION.get(name, ()):
        out.update(state=ANSWERED, detail="none configured (%s)" % code)
        return out
    if not 200 <= status < 300:
        out["detail"] = "not answered (HTTP %s %s)" % (status, code or "no answer")
        return out
    out["state"] = ANSWERED
    if name == "policy_status":
        out["public"] = bool(value)
        out["detail"] = "IsPublic %s" % ("true" if value else "false")
    elif name == "acl":
        public = sorted(
            "%s:%s" % (grant[0].rsplit("/", 1)[-1], grant[1])
            for grant in value or []
            if public_grantee(grant[0], grant[2] if len(grant) > 2 else None)
        )
        out["public"] = bool(public)
        out["detail"] = (
            "grants %s" % ", ".join(public) if public else "no grant to AllUsers/AuthenticatedUsers"
        )
    elif name == "public_access_block":
        config = dict(value or {})
        out["config"] = {setting: bool(config.get(setting)) for setting in BLOCK_SETTINGS}
        on = [s for s in BLOCK_SETTINGS if out["config"][s]]
        out["detail"] = "%s on" % ", ".join(on) if on else "all four settings off"
    return out


def prove_private(bucket, prefix, controls, canary, sensitive=()):
    """The one decision on a destination before licensed, key-bearing or credential-bearing bytes move.

    ``controls``: control name -> ``(status, code, value)`` as read by the owner (see ``judge_control``;
    a missing name is "not answered"). ``canary``: ``{"key", "written": (status, code), "probes": {probe:
    (status, code)}, "deleted": (status, code) or None}``; ``sensitive``: the reasons the bytes are
    sensitive (``sensitive_reasons``).

    Returns a dict: ``verdict`` (PUBLIC, PRIVATE or UNKNOWN), ``exposed``, ``public_by`` (the controls and
    probes that say public, e.g. ``probe range_get HTTP 206``), ``controls`` (judged), ``not_answered``,
    ``probes`` (probe -> status), ``canary_key``, ``canary_deleted`` (bool), ``canary_problem`` (a
    sentence, or ""), ``sensitive`` (the reasons), ``allowed`` (may the bytes move) and ``refusal`` (the
    message when they may not, naming the bucket, what answered and the supported move; else "").
    """
    judged = {}
    for name in CONTROLS:
        status, code, value = (tuple(controls.get(name) or ()) + (0, None, None))[:3]
        judged[name] = judge_control(name, status, code, value)
    block = judged["public_access_block"].get("config") or {}
    public_by = []
    if judged["policy_status"]["public"] and not block.get("RestrictPublicBuckets"):
        public_by.append("GetBucketPolicyStatus IsPublic true")
    if judged["acl"]["public"] and not block.get("IgnorePublicAcls"):
        public_by.append("GetBucketAcl %s" % judged["acl"]["detail"])
    probes = dict((canary or {}).get("probes") or {})
    written = tuple((canary or {}).get("written") or (0, None))
    states = {name: _probe_state((probes.get(name) or (0, None))[0]) for name in CANARY_PROBES}
    for name in CANARY_PROBES:
        if states[name] == ALLOWED:
            what = "list of the prefix" if name == "list" else "%s of the canary" % name.replace("_", " ")
            public_by.append("anonymous %s HTTP %s" % (what, probes[name][0]))
    written_ok = _probe_state(written[0]) == ALLOWED
    if public_by:
        verdict_ = PUBLIC
    elif written_ok and all(states[name] == DENIED for name in CANARY_PROBES):
        verdict_ = PRIVATE
    else:
        verdict_ = UNKNOWN
    deleted = (canary or {}).get("deleted")
    key = (canary or {}).get("key") or ""
    canary_deleted = not written_ok or (deleted is not None and _probe_state(deleted[0]) == ALLOWED)
    problem = ""
    if written_ok and not canary_deleted:
        problem = "the canary s3://%s/%s could not be deleted (%s); delete it by hand" % (
            bucket,
            key,
            "HTTP %s %s" % deleted if deleted else "no delete was sent",
        )
    sensitive = list(sensitive or ())
    result = {
        "verdict": verdict_,
        "exposed": verdict_ == PUBLIC,
        "public_by": public_by,
        "controls": judged,
        "not_answered": [name for name in CONTROLS if judged[name]["state"] == NOT_ANSWERED],
        "probes": {name: (probes.get(name) or (0, None))[0] for name in CANARY_PROBES},
        "canary_key": key,
        "canary_written": written_ok,
        "canary_deleted": canary_deleted,
        "canary_problem": problem,
        "sensitive": sensitive,
        "allowed": not sensitive or verdict_ == PRIVATE,
        "refusal": "",
    }
    if not result["allowed"]:
        result["refusal"] = _proof_refusal(bucket, prefix, result, written)
    return result


def _proof_refusal(bucket, prefix, result, written):
    why = "; ".join(result["sensitive"])
    where = "s3://%s/%s" % (bucket, prefix)
    seen = ", ".join("%s %s" % (name, result["probes"][name]) for name in CANARY_PROBES)
    unanswered = ", ".join(result["not_answered"]) or "none"
    tail = " Nothing of the image was written."
    if result["canary_problem"]:
        tail += " Also: %s." % result["canary_problem"]
    if result["verdict"] == PUBLIC:
        allowed = [name for name in CANARY_PROBES if _probe_state(result["probes"][name]) == ALLOWED]
        allowed_reads = ["list" if name == "list" else "get" for name in allowed] or ["get"]
        return (
            "refusing to write sensitive bytes (%s) to %s: bucket %s is public, %s (anonymous canary "
            "answers: %s; controls not answered: %s). %s, and %s.%s"
            % (
                why,
                where,
                bucket,
                "; ".join(result["public_by"]),
                seen,
                unanswered,
                block_advice(bucket, prefix, allowed_reads),
                PRIVATE_IMPORT_MOVE,
                tail,
            )
        )
    if not result["canary_written"]:
        cause = (
            "the canary object could not be written there (HTTP %s %s), so nothing proves who reads it"
            % (
                written[0],
                written[1] or "no answer",
            )
        )
    else:
        cause = "the anonymous reads of the canary were not all refused with 401/403 (answers: %s)" % seen
    return (
        "refusing to write sensitive bytes (%s) to %s: bucket %s is not proven private: %s (controls not "
        "answered: %s). Give credentials that may write and delete under the prefix and an endpoint that "
        "answers, on a bucket that refuses anonymous reads; then %s.%s"
        % (why, where, bucket, cause, unanswered, PRIVATE_IMPORT_MOVE, tail)
    )
