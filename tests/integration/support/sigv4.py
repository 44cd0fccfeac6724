"""Checks an S3 presigned URL (Signature Version 4 in the query string) as S3 does, from AWS's spec.

Written apart from botocore on purpose: a URL the module signs must verify under the published
algorithm, not merely under the library that made it.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
from urllib.parse import parse_qsl, quote

ALGORITHM = "AWS4-HMAC-SHA256"


class Refused(Exception):
    """What S3 would answer: ``code`` (SignatureDoesNotMatch, AccessDenied, ...) and a message."""

    def __init__(self, code: str, message: str):
        super().__init__("%s: %s" % (code, message))
        self.code = code
        self.message = message


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def _encode(text: str) -> str:
    return quote(text, safe="-_.~")


def check_presigned(method: str, raw_path: str, query: str, headers: dict, secrets: dict, now=None) -> str:
    """The access key of a valid presigned request; Refused otherwise.

    ``raw_path`` is the path exactly as sent (still percent-encoded), ``query`` the raw query string,
    ``headers`` lower-case names to values, ``secrets`` access key -> secret key.
    """
    params = parse_qsl(query, keep_blank_values=True)
    given = dict(params)
    if given.get("X-Amz-Algorithm") != ALGORITHM:
        raise Refused("AuthorizationQueryParametersError", "X-Amz-Algorithm must be %s" % ALGORITHM)
    try:
        access_key, day, region, service, terminal = given["X-Amz-Credential"].split("/")
        stamp = given["X-Amz-Date"]
        expires = int(given["X-Amz-Expires"])
        signed_headers = given["X-Amz-SignedHeaders"]
        signature = given["X-Amz-Signature"]
    except (KeyError, ValueError) as exc:
        raise Refused("AuthorizationQueryParametersError", "incomplete presigned query: %s" % exc) from exc
    if service != "s3" or terminal != "aws4_request" or not stamp.startswith(day):
        raise Refused("AuthorizationQueryParametersError", "malformed credential scope")
    if access_key not in secrets:
        raise Refused("InvalidAccessKeyId", "unknown access key %s" % access_key)
    signed_at = datetime.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.UTC)
    now = now or datetime.datetime.now(datetime.UTC)
    if now > signed_at + datetime.timedelta(seconds=expires):
        raise Refused("AccessDenied", "Request has expired")

    names = signed_headers.split(";")
    if "host" not in names:
        raise Refused("AuthorizationQueryParametersError", "host must be a signed header")
    canonical_headers = "".join("%s:%s\n" % (name, " ".join(headers.get(name, "").split())) for name in names)
    canonical_query = "&".join(
        sorted("%s=%s" % (_encode(k), _encode(v)) for k, v in params if k != "X-Amz-Signature")
    )
    canonical_request = "\n".join(
        (method, raw_path, canonical_query, canonical_headers, signed_headers, "UNSIGNED-PAYLOAD")
    )
    scope = "/".join((day, region, service, terminal))
    to_sign = "\n".join((ALGORITHM, stamp, scope, hashlib.sha256(canonical_request.encode()).hexdigest()))
    key = ("AWS4" + secrets[access_key]).encode()
    for part in (day, region, service, terminal):
        key = _hmac(key, part)
    expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature):
        raise Refused("SignatureDoesNotMatch", "the request signature we calculated does not match")
    return access_key
