"""A loopback S3 endpoint that answers anonymous requests as S3 does: moto, plus public-access rules.

moto stores buckets, objects, ACLs and bucket policies, but it lists any bucket for anyone and
answers an unsigned GET of a missing key with 404 even in a private bucket. This endpoint serves
moto's own application (the same in-process backend as the lab's S3 server) and, for unsigned
requests only, applies S3's rules to the state moto keeps: a bucket policy statement for
Principal "*" (Deny wins, then Allow), then the ACLs (AllUsers READ on the bucket lists it, on an
object reads it). A refused request gets 403 AccessDenied; a missing key is 404 only for a caller
allowed to list the bucket, else 403. Signed requests go to moto untouched, except that presigned
URLs are verified (signature and expiry, tests/integration/support/sigv4.py) when the endpoint is given the
secret keys, and an Authorization header that is not an AWS signature (HTTP basic auth) gets S3's
400 InvalidArgument "Unsupported Authorization Type".
"""

from __future__ import annotations

import fnmatch
import json
import threading
from urllib.parse import unquote

from moto.core import DEFAULT_ACCOUNT_ID
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from moto.s3.models import s3_backends
from werkzeug.serving import make_server

from tests.integration.support.sigv4 import Refused, check_presigned
from tests.lab.s3 import S3Endpoint

ALL_USERS = "http://acs.amazonaws.com/groups/global/AllUsers"
# moto reads the service and region from an Authorization header; it checks no signature.
ANONYMOUS_AUTHORIZATION = (
    "AWS4-HMAC-SHA256 Credential=anonymous/20260101/us-east-1/s3/aws4_request, "
    "SignedHeaders=host, Signature=0"
)
DENIED_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
    b"<Message>Access Denied</Message></Error>"
)
AWS_SCHEMES = ("AWS4-HMAC-SHA256 ", "AWS ")


def _list(value):
    return value if isinstance(value, list) else [value]


def _anyone(principal) -> bool:
    if principal == "*":
        return True
    if isinstance(principal, dict):
        return "*" in _list(principal.get("AWS", []))
    return False


def policy_effect(policy: bytes | None, action: str, resource: str) -> str | None:
    """ "Deny", "Allow" or None: what the bucket policy says about anonymous ``action`` on ``resource``."""
    if not policy:
        return None
    effects = set()
    for statement in _list(json.loads(policy).get("Statement", [])):
        if not _anyone(statement.get("Principal")) or statement.get("Condition"):
            continue
        actions = _list(statement.get("Action", []))
        resources = _list(statement.get("Resource", []))
        if any(fnmatch.fnmatchcase(action, a) for a in actions) and any(
            fnmatch.fnmatchcase(resource, r) for r in resources
        ):
            effects.add(statement.get("Effect"))
    return "Deny" if "Deny" in effects else ("Allow" if "Allow" in effects else None)


def _acl_public_read(acl) -> bool:
    for grant in getattr(acl, "grants", None) or []:
        reads = "READ" in grant.permissions or "FULL_CONTROL" in grant.permissions
        if reads and any(getattr(g, "uri", None) == ALL_USERS for g in grant.grantees):
            return True
    return False


def _signed(environ) -> bool:
    query = environ.get("QUERY_STRING", "")
    return bool(environ.get("HTTP_AUTHORIZATION")) or "Signature=" in query or "X-Amz-Signature=" in query


class AnonymousRules:
    """WSGI middleware deciding unsigned bucket and object reads from moto's state."""

    def __init__(self, app, secrets=None):
        self.app = app
        self.secrets = secrets  # access key -> secret key: presigned URLs are verified

    def __call__(self, environ, start_response):
        authorization = environ.get("HTTP_AUTHORIZATION", "")
        if authorization and not authorization.startswith(AWS_SCHEMES):
            return self._error(
                environ,
                start_response,
                "400 Bad Request",
                "InvalidArgument",
                "Unsupported Authorization Type",
            )
        if self.secrets is not None and "X-Amz-Signature=" in environ.get("QUERY_STRING", ""):
            raw_path = (environ.get("RAW_URI") or environ.get("REQUEST_URI") or "").partition("?")[0]
            try:
                check_presigned(
                    environ["REQUEST_METHOD"],
                    raw_path,
                    environ["QUERY_STRING"],
                    {"host": environ.get("HTTP_HOST", "")},
                    self.secrets,
                )
            except Refused as exc:
                return self._error(environ, start_response, "403 Forbidden", exc.code, exc.message)
            return self.app(environ, start_response)
        if _signed(environ) or environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            return self.app(environ, start_response)
        bucket_name, _slash, key = unquote(environ.get("PATH_INFO", "")).lstrip("/").partition("/")
        bucket = s3_backends[DEFAULT_ACCOUNT_ID]["aws"].buckets.get(bucket_name)
        if bucket is None:
            return self.app(environ, start_response)
        policy = bucket.policy
        may_list = self._decide(policy, "s3:ListBucket", "arn:aws:s3:::%s" % bucket_name, bucket.acl)
        if not key:
            allowed = may_list
        else:
            obj = bucket.keys.get(key)
            resource = "arn:aws:s3:::%s/%s" % (bucket_name, key)
            if obj is None:
                allowed = may_list and policy_effect(policy, "s3:GetObject", resource) != "Deny"
            else:
                allowed = self._decide(policy, "s3:GetObject", resource, obj.acl)
        if not allowed:
            return self._deny(environ, start_response)
        # Decided here: moto would otherwise judge a HEAD by a "s3:HeadObject" action S3 does not have.
        environ["HTTP_AUTHORIZATION"] = ANONYMOUS_AUTHORIZATION
        return self.app(environ, start_response)

    @staticmethod
    def _decide(policy, action, resource, acl) -> bool:
        effect = policy_effect(policy, action, resource)
        if effect is not None:
            return effect == "Allow"
        return _acl_public_read(acl)

    @staticmethod
    def _deny(environ, start_response):
        body = b"" if environ.get("REQUEST_METHOD") == "HEAD" else DENIED_BODY
        start_response(
            "403 Forbidden", [("Content-Type", "application/xml"), ("Content-Length", str(len(DENIED_BODY)))]
        )
        return [body]

    @staticmethod
    def _error(environ, start_response, status, code, message):
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code><Message>%s</Message></Error>'
            % (code, message)
        ).encode()
        start_response(status, [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
        return [b"" if environ.get("REQUEST_METHOD") == "HEAD" else body]


class AnonymousAwareS3:
    """``start()`` -> endpoint URL on 127.0.0.1; ``stop()`` closes it."""

    def __init__(self, secrets=None):
        self._server = None
        self._thread = None
        self.endpoint_url = None
        self.secrets = secrets

    def start(self) -> str:
        app = AnonymousRules(DomainDispatcherApplication(create_backend_app), self.secrets)
        self._server = make_server("127.0.0.1", 0, app, True, request_handler=MotoRequestHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        host, port = self._server.server_address[:2]
        self.endpoint_url = "http://%s:%d" % (host, port)
        return self.endpoint_url

    def client(self, access_key: str, secret_key: str):
        """A boto3 client of this endpoint with path-style addressing."""
        return S3Endpoint(self.endpoint_url, access_key, secret_key).client()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=10)
            self._server = None
