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

from ansible_collections.goldenimage.pipeline.plugins.module_utils import inputs, redact
from ansible_collections.goldenimage.pipeline.plugins.module_utils.errors import PipelineError, Refusal

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


def remedy(bucket, prefix, allowed):
    """What to add so anonymous reads of ``prefix`` in ``bucket`` are refused."""
    actions = []
    if any(name != "list" for name in allowed):
        actions.append("s3:GetObject on arn:aws:s3:::%s/%s*" % (bucket, prefix))
    if "list" in allowed:
        actions.append("s3:ListBucket on arn:aws:s3:::%s" % bucket)
    return (
        "Block public access on bucket %s (PutPublicAccessBlock with BlockPublicAcls, IgnorePublicAcls, "
        "BlockPublicPolicy and RestrictPublicBuckets all true), or give it a bucket policy with no statement "
        'allowing Principal "*" and no public-read ACL, so that anonymous %s is refused; then import with a '
        "CDI secretRef. A key prefix such as private/ is a name, not protection, and a Rook "
        "ObjectBucketClaim drops a hand-applied bucket policy when it reconciles"
        % (bucket, " and ".join(actions) or "reads are")
    )


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
        "nothing was written; set presign: true on the source for a private S3 or Ceph RGW bucket (the URL "
        "is signed with the bucket's keys; a secret_ref is sent as HTTP basic auth, which S3 and RGW "
        "refuse)",
        bucket=bucket,
        key=key,
        get_status=get[0],
    )
