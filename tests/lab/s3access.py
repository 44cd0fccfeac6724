"""Who may do what in the lab's S3: S3's rules for anonymous requests and its public access block.

An anonymous (unsigned) request is decided from the bucket's state as S3 decides it:
- the action is named from the method, the key and the subresource (``GET /b/k`` is s3:GetObject,
  ``GET /b`` s3:ListBucket, ``PUT /b/k?acl`` s3:PutObjectAcl, ...); one this module cannot name is refused;
- a bucket policy statement for Principal ``*`` that matches the action and the resource decides
  (an explicit Deny wins over any Allow), then the ACL grants to AllUsers (the bucket's ACL for
  listing and writing objects, the object's for reading it);
- the public access block: RestrictPublicBuckets makes a bucket whose policy is public refuse every
  anonymous request, IgnorePublicAcls makes public grants count for nothing;
- a missing key answers 404 only to a caller allowed s3:ListBucket (and not denied the read), else 403.
The two other settings act on writes by the owner: BlockPublicPolicy refuses a public bucket policy,
BlockPublicAcls a request that grants a public ACL (canned, ``x-amz-grant-*`` or an ACL document).

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
# What an ACL permission grants, on the bucket's ACL and on an object's.
BUCKET_ACL = {
    "READ": ("s3:ListBucket", "s3:ListBucketVersions", "s3:ListBucketMultipartUploads"),
    "WRITE": ("s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"),
    "READ_ACP": ("s3:GetBucketAcl",),
    "WRITE_ACP": ("s3:PutBucketAcl",),
}
OBJECT_ACL = {
    "READ": ("s3:GetObject", "s3:GetObjectVersion"),
    "READ_ACP": ("s3:GetObjectAcl",),
    "WRITE_ACP": ("s3:PutObjectAcl",),
}


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


def public_grants(grants) -> set[str]:
    """The permissions ``grants`` (moto's FakeGrant objects) give AllUsers."""
    permissions = set()
    for grant in grants or []:
        if any(getattr(g, "uri", None) == ALL_USERS for g in grant.grantees):
            permissions.update(grant.permissions)
    return permissions


def acl_allows(grants, action: str, table: dict) -> bool:
    permissions = public_grants(grants)
    if "FULL_CONTROL" in permissions:
        return any(action in actions for actions in table.values())
    return any(action in table.get(permission, ()) for permission in permissions)


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


@dataclass
class Target:
    """What an anonymous request acts on: the bucket's policy, ACL grants and block, and the object's
    grants (None when the key does not exist or the request is on the bucket)."""

    bucket: str
    key: str
    policy: bytes | None
    bucket_grants: list
    object_grants: list | None
    block: Block


def anonymous_allowed(target: Target, action: str | None) -> bool:
    """Whether S3 serves an anonymous request for ``action`` on ``target`` (before a missing key)."""
    if action is None:
        return False
    if target.block.restrict_public_buckets and public_policy(target.policy):
        return False
    arn = "arn:aws:s3:::%s" % target.bucket + ("/%s" % target.key if target.key else "")
    effect = policy_effect(target.policy, action, arn)
    if effect is not None:
        return effect == "Allow"
    if target.block.ignore_public_acls:
        return False
    on_object = target.key and action in {a for actions in OBJECT_ACL.values() for a in actions}
    if on_object:
        return target.object_grants is not None and acl_allows(target.object_grants, action, OBJECT_ACL)
    return acl_allows(target.bucket_grants, action, BUCKET_ACL)


def anonymous_answer(target: Target, action: str | None, exists: bool) -> bool:
    """True when the request goes on to the store; False for S3's 403 AccessDenied.

    A read of a missing key is decided by the listing: a caller who may list the bucket learns that the
    key is missing (404), unless the policy denies the read; anyone else gets 403, as for a private key.
    """
    if target.key and not exists and action in ("s3:GetObject", "s3:GetObjectVersion"):
        listing = Target(target.bucket, "", target.policy, target.bucket_grants, None, target.block)
        arn = "arn:aws:s3:::%s/%s" % (target.bucket, target.key)
        denied = policy_effect(target.policy, action, arn) == "Deny"
        return anonymous_allowed(listing, "s3:ListBucket") and not denied
    return anonymous_allowed(target, action)
