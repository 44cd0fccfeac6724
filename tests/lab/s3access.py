"""The part of S3's access rules the lab's relay front plays, because versitygw v1.8.0 lacks it: the
public access block (versitygw answers its API 501; tests/lab/README.md "Its S3").

- RestrictPublicBuckets: a bucket whose policy is public refuses every anonymous request;
- IgnorePublicAcls: public grants count for nothing, so an anonymous request is served only when a
  bucket policy statement for Principal ``*`` allows its action (an explicit Deny wins over any Allow);
  the action is named from the method, the key and the subresource (``GET /b/k`` is s3:GetObject,
  ``GET /b`` s3:ListBucket, ...), one this module cannot name is refused;
- BlockPublicPolicy refuses the owner's public bucket policy, BlockPublicAcls a write that grants a
  public ACL (canned, ``x-amz-grant-*`` or an ACL document).
Everything else about anonymous requests (policies, bucket ACLs) is versitygw's own decision.

Statements with a ``Condition`` are not evaluated: such an Allow grants nothing and such a Deny
refuses nothing here, and a policy whose only public statements carry one is not public.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

ALL_USERS = "http://acs.amazonaws.com/groups/global/AllUsers"
AUTHENTICATED_USERS = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers"
PUBLIC_GROUPS = (ALL_USERS, AUTHENTICATED_USERS)
PUBLIC_CANNED = ("public-read", "public-read-write", "authenticated-read")
GRANT_HEADERS = ("x-amz-grant-read", "x-amz-grant-write", "x-amz-grant-read-acp", "x-amz-grant-write-acp")
GRANT_HEADERS += ("x-amz-grant-full-control",)

# Subresource (query name) -> action, for a bucket and for an object, by method.
BUCKET_READS = {
    "acl": "s3:GetBucketAcl",
    "policy": "s3:GetBucketPolicy",
    "policyStatus": "s3:GetBucketPolicyStatus",
    "location": "s3:GetBucketLocation",
    "versions": "s3:ListBucketVersions",
    "uploads": "s3:ListBucketMultipartUploads",
    "versioning": "s3:GetBucketVersioning",
    "tagging": "s3:GetBucketTagging",
    "publicAccessBlock": "s3:GetBucketPublicAccessBlock",
}
BUCKET_WRITES = {"acl": "s3:PutBucketAcl", "policy": "s3:PutBucketPolicy"}
OBJECT_READS = {
    "acl": "s3:GetObjectAcl",
    "tagging": "s3:GetObjectTagging",
    "uploadId": "s3:ListMultipartUploadParts",
    "versionId": "s3:GetObjectVersion",
}
OBJECT_PUTS = {"acl": "s3:PutObjectAcl", "tagging": "s3:PutObjectTagging"}
# Query names of a listing (ListObjects and ListObjectsV2): no subresource.
LIST_PARAMS = frozenset(
    ("list-type", "prefix", "delimiter", "marker", "max-keys", "continuation-token", "start-after")
    + ("fetch-owner", "encoding-type")
)


@dataclass
class Block:
    """A bucket's public access block (all False when it has none)."""

    block_public_acls: bool = False
    ignore_public_acls: bool = False
    block_public_policy: bool = False
    restrict_public_buckets: bool = False


def _list(value):
    return value if isinstance(value, list) else [value]


def _anyone(principal) -> bool:
    if principal == "*":
        return True
    return isinstance(principal, dict) and "*" in _list(principal.get("AWS", []))


def _wildcard(pattern: str, text: str, fold: bool) -> bool:
    """IAM matching: ``*`` any run of characters, ``?`` one character, nothing else special."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, text, re.IGNORECASE if fold else 0) is not None


def _statements(policy):
    if not policy:
        return []
    document = json.loads(policy) if isinstance(policy, (bytes, str)) else policy
    return [s for s in _list(document.get("Statement", [])) if isinstance(s, dict)]


def policy_effect(policy, action: str, resource: str) -> str | None:
    """ "Deny", "Allow" or None: what the statements for anyone say about ``action`` on ``resource``."""
    effects = set()
    for statement in _statements(policy):
        if not _anyone(statement.get("Principal")) or statement.get("Condition"):
            continue
        if any(_wildcard(a, action, True) for a in _list(statement.get("Action", []))) and any(
            _wildcard(r, resource, False) for r in _list(statement.get("Resource", []))
        ):
            effects.add(statement.get("Effect"))
    return "Deny" if "Deny" in effects else ("Allow" if "Allow" in effects else None)


def public_policy(policy) -> bool:
    """Whether a policy grants anything to anyone (an Allow for Principal ``*`` without a Condition)."""
    return any(
        s.get("Effect") == "Allow" and _anyone(s.get("Principal")) and not s.get("Condition")
        for s in _statements(policy)
    )


def grants_public_acl(headers: dict, subresources: set, body: bytes) -> bool:
    """Whether a write asks for a public ACL: a public canned ACL, a public ``x-amz-grant-*``, or (a PUT
    of ``?acl``) an ACL document granting to AllUsers or AuthenticatedUsers. ``headers``: lower-case."""
    if headers.get("x-amz-acl") in PUBLIC_CANNED:
        return True
    if any(group in headers.get(name, "") for name in GRANT_HEADERS for group in PUBLIC_GROUPS):
        return True
    return "acl" in subresources and any(group.encode() in body for group in PUBLIC_GROUPS)


def _named(table: dict, subresources: set) -> str | None:
    return next((action for name, action in table.items() if name in subresources), None)


def action_of(method: str, key: str, subresources: set) -> str | None:
    """The S3 action of a request on a bucket (``key`` empty) or an object; None when not named here."""
    if not key:
        if method in ("GET", "HEAD"):
            named = _named(BUCKET_READS, subresources)
            return named or (None if subresources - LIST_PARAMS else "s3:ListBucket")
        return _named(BUCKET_WRITES, subresources) if method == "PUT" else None
    if method in ("GET", "HEAD"):
        return _named(OBJECT_READS, subresources) or "s3:GetObject"
    if method == "PUT":
        return _named(OBJECT_PUTS, subresources) or "s3:PutObject"
    if method == "POST" and subresources & {"uploads", "uploadId"}:
        return "s3:PutObject"
    if method == "DELETE":
        return "s3:AbortMultipartUpload" if "uploadId" in subresources else "s3:DeleteObject"
    return None
