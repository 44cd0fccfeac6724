"""Signature Version 4 of S3 requests, checked as S3 checks them, written from AWS's published algorithm.

Two ways to sign: the ``Authorization`` header (with ``X-Amz-Date`` and ``X-Amz-Content-SHA256``) and
the presigned query (``X-Amz-Algorithm``, ``X-Amz-Credential``, ``X-Amz-Date``, ``X-Amz-Expires``,
``X-Amz-SignedHeaders``, ``X-Amz-Signature``). Both build the same canonical request: the method, the
path (each segment URI-encoded once, as S3 does not normalise it), the query pairs sorted by encoded
name, the signed headers as ``name:value`` lines (values trimmed, inner runs of spaces collapsed),
the signed header names and the payload hash. The string to sign names the algorithm, the time, the
credential scope ``<day>/<region>/<service>/aws4_request`` and the canonical request's SHA-256; the
key is the secret run through HMAC-SHA256 with the day, region, service and ``aws4_request``.

Written apart from botocore on purpose: what a client signs must verify under the published
algorithm, not merely under the library that made it. Every refusal is S3's error code, message and
HTTP status.
"""

from __future__ import annotations

import datetime
import email.utils
import hashlib
import hmac
import re
import string
from dataclasses import dataclass
from urllib.parse import unquote

ALGORITHM = "AWS4-HMAC-SHA256"
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
# aws-chunked bodies whose checksum trails them unsigned: the header signature covers the headers only.
UNSIGNED_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
SIGNED_CHUNKS = ("STREAMING-AWS4-HMAC-SHA256-PAYLOAD", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER")
MAX_SKEW = datetime.timedelta(minutes=15)
MAX_EXPIRES = 7 * 24 * 3600
UNRESERVED = frozenset(string.ascii_letters + string.digits + "-_.~")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_STAMP = "%Y%m%dT%H%M%SZ"


class Refused(Exception):
    """What S3 answers instead: ``code`` (SignatureDoesNotMatch, AccessDenied, ...), a message, the status."""

    def __init__(self, code: str, message: str, status: int = 403):
        super().__init__("%s: %s" % (code, message))
        self.code = code
        self.message = message
        self.status = status


@dataclass
class SignedRequest:
    """A request as it came over the wire: the path still percent-encoded, the raw query string, and the
    headers as ``(name, value)`` pairs in any case (a name may repeat)."""

    method: str
    raw_path: str
    query: str
    headers: list[tuple[str, str]]

    def header(self, name: str) -> str | None:
        values = [value for key, value in self.headers if key.lower() == name]
        return ",".join(values) if values else None


@dataclass
class Verified:
    """A request whose signature holds: who signed it, and the body's SHA-256 it promises (hex), if any."""

    access_key: str
    payload_sha256: str | None


def uri_encode(text: str, keep_slash: bool = False) -> str:
    """Every byte outside A-Z a-z 0-9 - _ . ~ as %XY (upper-case hex); ``/`` kept when asked."""
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        out.append(char if char in UNRESERVED or (keep_slash and char == "/") else "%%%02X" % byte)
    return "".join(out)


def query_pairs(query: str) -> list[tuple[str, str]]:
    """The query's ``(name, value)`` pairs, percent-decoded (a ``+`` stays a plus, as S3 reads it)."""
    pairs = []
    for part in query.split("&"):
        if part:
            name, _eq, value = part.partition("=")
            pairs.append((unquote(name), unquote(value)))
    return pairs


def canonical_query(pairs: list[tuple[str, str]]) -> str:
    return "&".join(sorted("%s=%s" % (uri_encode(name), uri_encode(value)) for name, value in pairs))


def canonical_headers(request: SignedRequest, names: list[str]) -> str:
    lines = []
    for name in names:
        value = request.header(name) or ""
        lines.append("%s:%s\n" % (name, " ".join(value.split())))
    return "".join(lines)


def signature(secret: str, stamp: str, scope: list[str], canonical_request: str) -> str:
    to_sign = "\n".join(
        (ALGORITHM, stamp, "/".join(scope), hashlib.sha256(canonical_request.encode()).hexdigest())
    )
    key = ("AWS4" + secret).encode()
    for part in scope:
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def _canonical_request(request, pairs, signed_names, payload_hash) -> str:
    return "\n".join(
        (
            request.method,
            uri_encode(unquote(request.raw_path), keep_slash=True),
            canonical_query(pairs),
            canonical_headers(request, signed_names),
            ";".join(signed_names),
            payload_hash,
        )
    )


def _time(stamp: str, code: str) -> datetime.datetime:
    try:
        return datetime.datetime.strptime(stamp, _STAMP).replace(tzinfo=datetime.UTC)
    except ValueError as exc:
        raise Refused(
            code, "X-Amz-Date must be in the ISO8601 Long Format yyyyMMdd'T'HHmmss'Z'", 400
        ) from exc


def _scope(credential: str, stamp: str, secrets: dict, code: str) -> tuple[str, list[str]]:
    """(access key, [day, region, service, aws4_request]) of a credential, checked."""
    parts = credential.split("/")
    if len(parts) != 5 or parts[3] != "s3" or parts[4] != "aws4_request":
        raise Refused(code, "the credential must be <access key>/<day>/<region>/s3/aws4_request", 400)
    access_key, day = parts[0], parts[1]
    if day != stamp[:8]:
        raise Refused(code, "Invalid credential date. Date is not the same as X-Amz-Date.", 400)
    if access_key not in secrets:
        raise Refused(
            "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records."
        )
    return access_key, parts[1:]


def _unsigned_amz_headers(request: SignedRequest, signed_names: list[str]) -> None:
    extra = sorted(
        {k.lower() for k, _v in request.headers if k.lower().startswith("x-amz-")} - set(signed_names)
    )
    if extra:
        raise Refused(
            "AccessDenied", "There were headers present in the request which were not signed: %s" % extra
        )


def _matches(expected: str, given: str) -> None:
    if not hmac.compare_digest(expected, given):
        raise Refused(
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided. "
            "Check your key and signing method.",
        )


def check_header(request: SignedRequest, secrets: dict, now: datetime.datetime | None = None) -> Verified:
    """A request signed in its ``Authorization`` header; ``secrets`` maps access keys to secret keys."""
    now = now or datetime.datetime.now(datetime.UTC)
    malformed = "AuthorizationHeaderMalformed"
    authorization = request.header("authorization") or ""
    fields = {}
    for item in authorization[len(ALGORITHM) :].split(","):
        name, _eq, value = item.strip().partition("=")
        fields[name] = value
    if not authorization.startswith(ALGORITHM + " ") or not {
        "Credential",
        "SignedHeaders",
        "Signature",
    } <= set(fields):
        raise Refused(
            malformed, "the authorization header needs Credential, SignedHeaders and Signature", 400
        )
    stamp = request.header("x-amz-date")
    if stamp is None:
        date = request.header("date")
        try:
            stamp = email.utils.parsedate_to_datetime(date).astimezone(datetime.UTC).strftime(_STAMP)
        except (TypeError, ValueError) as exc:
            raise Refused(
                "AccessDenied", "AWS authentication requires a valid Date or x-amz-date header"
            ) from exc
    signed_at = _time(stamp, malformed)
    access_key, scope = _scope(fields["Credential"], stamp, secrets, malformed)
    if abs(now - signed_at) > MAX_SKEW:
        raise Refused(
            "RequestTimeTooSkewed",
            "The difference between the request time and the current time is too large.",
        )
    signed_names = fields["SignedHeaders"].split(";")
    if "host" not in signed_names:
        raise Refused(malformed, "host must be a signed header", 400)
    _unsigned_amz_headers(request, signed_names)
    payload = request.header("x-amz-content-sha256")
    if payload is None:
        raise Refused("InvalidRequest", "Missing required header for this request: x-amz-content-sha256", 400)
    if payload in SIGNED_CHUNKS:
        raise Refused(
            "NotImplemented", "the lab's S3 does not verify signed aws-chunked payloads (%s)" % payload, 501
        )
    if payload not in (UNSIGNED_PAYLOAD, UNSIGNED_TRAILER) and not _HEX64.fullmatch(payload):
        raise Refused(
            "InvalidArgument",
            "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-UNSIGNED-PAYLOAD-TRAILER or a "
            "valid sha256 value.",
            400,
        )
    pairs = query_pairs(request.query)
    expected = signature(
        secrets[access_key], stamp, scope, _canonical_request(request, pairs, signed_names, payload)
    )
    _matches(expected, fields["Signature"])
    return Verified(access_key, payload if _HEX64.fullmatch(payload) else None)


def check_presigned(request: SignedRequest, secrets: dict, now: datetime.datetime | None = None) -> Verified:
    """A request signed in its query (a presigned URL): its signature, credential, time and expiry."""
    now = now or datetime.datetime.now(datetime.UTC)
    malformed = "AuthorizationQueryParametersError"
    pairs = query_pairs(request.query)
    given = dict(pairs)
    if given.get("X-Amz-Algorithm") != ALGORITHM:
        raise Refused(malformed, "X-Amz-Algorithm only supports %s" % ALGORITHM, 400)
    missing = [
        name
        for name in (
            "X-Amz-Credential",
            "X-Amz-Date",
            "X-Amz-Expires",
            "X-Amz-SignedHeaders",
            "X-Amz-Signature",
        )
        if name not in given
    ]
    if missing:
        raise Refused(
            malformed, "Query-string authentication version 4 requires %s" % ", ".join(missing), 400
        )
    stamp = given["X-Amz-Date"]
    signed_at = _time(stamp, malformed)
    access_key, scope = _scope(given["X-Amz-Credential"], stamp, secrets, malformed)
    try:
        expires = int(given["X-Amz-Expires"])
    except ValueError as exc:
        raise Refused(malformed, "X-Amz-Expires should be a number", 400) from exc
    if expires < 0:
        raise Refused(malformed, "X-Amz-Expires must be non-negative", 400)
    if expires > MAX_EXPIRES:
        raise Refused(malformed, "X-Amz-Expires must be less than a week (in seconds) that is 604800", 400)
    signed_names = given["X-Amz-SignedHeaders"].split(";")
    if "host" not in signed_names:
        raise Refused(malformed, "host must be a signed header", 400)
    if signed_at - now > MAX_SKEW:
        raise Refused("AccessDenied", "Request is not valid yet")
    if now > signed_at + datetime.timedelta(seconds=expires):
        raise Refused("AccessDenied", "Request has expired")
    _unsigned_amz_headers(request, signed_names)
    unsigned = [(name, value) for name, value in pairs if name != "X-Amz-Signature"]
    canonical = _canonical_request(request, unsigned, signed_names, UNSIGNED_PAYLOAD)
    _matches(signature(secrets[access_key], stamp, scope, canonical), given["X-Amz-Signature"])
    return Verified(access_key, None)
