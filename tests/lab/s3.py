"""The lab's S3: moto's store behind a front that authenticates and authorises as S3 does.

moto keeps buckets, objects, ACLs, policies and public access blocks, but it checks no signature and
serves a private bucket to anyone. Every request passes the front (``CheckingS3``) first:
- ``Authorization: AWS4-HMAC-SHA256 ...``: the Signature Version 4 is verified (sigv4.py: signature,
  access key, time within 15 minutes, every ``x-amz-*`` header signed) and so is the body against
  the ``X-Amz-Content-SHA256`` it was signed with (400 XAmzContentSHA256Mismatch);
- a presigned URL (``X-Amz-Signature`` in the query): signature, access key, ``X-Amz-Expires`` (at
  most seven days) and expiry ("Request has expired");
- any other ``Authorization`` (HTTP basic auth, which CDI sends for an http source's ``secretRef``)
  gets S3's 400 InvalidArgument "Unsupported Authorization Type"; Signature Version 2 (``AWS`` header,
  ``AWSAccessKeyId``/``Signature`` query) gets the 400 of a region that only takes version 4;
- an unsigned request is anonymous: s3access.py decides it from the bucket's policy, ACLs and
  public access block, and a refusal is 403 AccessDenied.
A signed request is the owner's (the lab has one identity, ``S3Endpoint``'s keys), and the owner's
writes meet the public access block (BlockPublicPolicy, BlockPublicAcls: 403 AccessDenied).
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import unquote

from . import s3access
from .sigv4 import ALGORITHM, Refused, SignedRequest, check_header, check_presigned, query_pairs

HEADERS_KEY = "lab.s3.headers"  # the request's headers as sent, for the canonical request
# moto picks the service from an Authorization header and checks no signature: an anonymous request
# the front let through carries this one, so moto serves it as S3 and judges nothing itself.
ANONYMOUS_AUTHORIZATION = (
    "AWS4-HMAC-SHA256 Credential=anonymous/20260101/us-east-1/s3/aws4_request, "
    "SignedHeaders=host, Signature=0"
)
V2_ONLY = "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256."
SPOOL_IN_MEMORY = 8 * 1024 * 1024


@dataclass
class Fault:
    """An answer ``status``/``code`` the front gives instead of serving a request that
    ``when(method, path, query names, headers by lower-case name)`` selects: after letting ``after`` of
    them through, ``times`` times (then it serves them again). ``hits`` counts the answers given."""

    when: Callable[[str, str, set, dict], bool]
    status: int = 503
    code: str = "SlowDown"
    times: int = 1
    after: int = 0
    hits: int = 0
    seen: int = 0

    def answers(self, method: str, path: str, names: set, headers: dict) -> bool:
        if not self.when(method, path, names, headers):
            return False
        self.seen += 1
        if self.seen <= self.after or self.hits >= self.times:
            return False
        self.hits += 1
        return True


@dataclass
class S3Endpoint:
    endpoint_url: str
    access_key: str = "lab-access-key"
    secret_key: str = "lab-secret-key"
    region: str = "us-east-1"
    # The server's CheckingS3 (its ``faults``), when this process serves it.
    front: object = field(default=None, repr=False, compare=False)

    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "S3_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
        }

    def client(self):
        return s3_client(self.env())


def s3_client(env: dict[str, str]):
    """A boto3 S3 client (path-style, Signature Version 4 also for presigned URLs) from AWS_* variables
    such as S3Endpoint.env() or lab.env() give."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env.get("AWS_DEFAULT_REGION") or "us-east-1",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )


def error(environ, start_response, status: int, code: str, message: str):
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code><Message>%s</Message></Error>'
        % (code, message.replace("&", "&amp;").replace("<", "&lt;"))
    ).encode()
    reason = {
        400: "Bad Request",
        403: "Forbidden",
        500: "Internal Server Error",
        501: "Not Implemented",
        503: "Slow Down",
    }.get(status, "Error")
    start_response(
        "%d %s" % (status, reason), [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))]
    )
    return [b"" if environ.get("REQUEST_METHOD") == "HEAD" else body]


def _spool_body(environ, wanted_sha256: str | None) -> bytes:
    """Read the body into a spooled file that replaces ``wsgi.input``; check it against the signed hash.

    Returns the body's first bytes (an ACL or policy document is small) for the write checks."""
    length = environ.get("CONTENT_LENGTH")
    stream = environ["wsgi.input"]
    # The app reads it as wsgi.input; an unlinked temporary file, freed with the request.
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY)  # noqa: SIM115
    digest = hashlib.sha256()
    # No length: a chunked body (the server dechunks it, to its end), else none at all.
    remaining = int(length) if length else (None if environ.get("wsgi.input_terminated") else 0)
    while remaining is None or remaining > 0:
        chunk = stream.read(1024 * 1024 if remaining is None else min(remaining, 1024 * 1024))
        if not chunk:
            break
        digest.update(chunk)
        spool.write(chunk)
        if remaining is not None:
            remaining -= len(chunk)
    size = spool.tell()
    spool.seek(0)
    head = spool.read(256 * 1024)
    spool.seek(0)
    environ["wsgi.input"] = spool
    environ["CONTENT_LENGTH"] = str(size)
    environ.pop("HTTP_TRANSFER_ENCODING", None)
    environ["wsgi.input_terminated"] = False
    if wanted_sha256 is not None and digest.hexdigest() != wanted_sha256:
        raise Refused(
            "XAmzContentSHA256Mismatch",
            "The provided 'x-amz-content-sha256' header does not match what was computed.",
            400,
        )
    return head


class CheckingS3:
    """WSGI front of moto's application: authentication, anonymous access, the public access block."""

    def __init__(self, app, secrets: dict[str, str]):
        self.app = app
        self.secrets = secrets
        # Subresources this server answers 501 NotImplemented, as some S3-compatible stores do for
        # policyStatus or publicAccessBlock; empty: every one moto knows is answered, as AWS does.
        self.not_implemented: set[str] = set()
        # Answers given instead of serving the requests they select (a server that is briefly unwell).
        self.faults: list[Fault] = []
        self._faults_lock = threading.Lock()

    def __call__(self, environ, start_response):
        request = SignedRequest(
            method=environ["REQUEST_METHOD"],
            raw_path=(environ.get("RAW_URI") or environ.get("PATH_INFO") or "/").partition("?")[0],
            query=environ.get("QUERY_STRING", ""),
            headers=environ.get(HEADERS_KEY) or [],
        )
        names = {name for name, _value in query_pairs(request.query)}
        authorization = request.header("authorization") or ""
        headers = {name.lower(): value for name, value in request.headers}
        with self._faults_lock:
            fault = next(
                (
                    f
                    for f in self.faults
                    if f.answers(request.method, unquote(request.raw_path), names, headers)
                ),
                None,
            )
        if fault is not None:
            _spool_body(environ, None)  # read, so the connection is ready for the retry
            return error(environ, start_response, fault.status, fault.code, "injected by the lab")
        try:
            if names & self.not_implemented:
                raise Refused(
                    "NotImplemented",
                    "A header you provided implies functionality that is not implemented",
                    501,
                )
            if authorization.startswith("AWS ") or {"AWSAccessKeyId", "Signature"} <= names:
                raise Refused("InvalidRequest", V2_ONLY, 400)
            if authorization and not authorization.startswith(ALGORITHM + " "):
                raise Refused("InvalidArgument", "Unsupported Authorization Type", 400)
            presigned = bool({"X-Amz-Signature", "X-Amz-Algorithm", "X-Amz-Credential"} & names)
            if authorization and presigned:
                raise Refused(
                    "InvalidArgument",
                    "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, Signature "
                    "query string parameter or the Authorization header should be specified",
                    400,
                )
            if authorization or presigned:
                verified = (check_header if authorization else check_presigned)(request, self.secrets)
                head = b""
                if verified.payload_sha256 is not None or names & {"acl", "policy"}:
                    head = _spool_body(environ, verified.payload_sha256)
            else:
                self._anonymous(environ, request, names)
                return self.app(environ, start_response)
            self._owner_write(request, names, head)
        except Refused as exc:
            return error(environ, start_response, exc.status, exc.code, exc.message)
        return self.app(environ, start_response)

    # ----------------------------------------------------------------- decisions
    @staticmethod
    def _split(request: SignedRequest) -> tuple[str, str]:
        bucket, _slash, key = unquote(request.raw_path).lstrip("/").partition("/")
        return bucket, key

    def _anonymous(self, environ, request: SignedRequest, names: set) -> None:
        bucket_name, key = self._split(request)
        if not bucket_name:
            raise Refused("AccessDenied", "Access Denied")  # ListBuckets needs a signature
        bucket = _buckets().get(bucket_name)
        if bucket is None:
            if request.method in ("GET", "HEAD"):
                return  # NoSuchBucket, as S3 tells anyone
            raise Refused("AccessDenied", "Access Denied")  # CreateBucket and every write need a signature
        obj = bucket.keys.get(key) if key else None
        action = s3access.action_of(request.method, key, names - {"x-id"})
        target = s3access.Target(
            bucket=bucket_name,
            key=key,
            policy=bucket.policy,
            bucket_grants=getattr(bucket.acl, "grants", None),
            object_grants=getattr(obj.acl, "grants", None) if obj is not None else None,
            block=_block(bucket),
        )
        if not s3access.anonymous_answer(target, action, obj is not None):
            raise Refused("AccessDenied", "Access Denied")
        environ["HTTP_AUTHORIZATION"] = ANONYMOUS_AUTHORIZATION

    def _owner_write(self, request: SignedRequest, names: set, head: bytes) -> None:
        if request.method not in ("PUT", "POST"):
            return
        bucket = _buckets().get(self._split(request)[0])
        block = _block(bucket) if bucket is not None else s3access.Block()
        headers = {name.lower(): value for name, value in request.headers}
        if block.block_public_acls and s3access.grants_public_acl(headers, names, head):
            raise Refused(
                "AccessDenied", "Access Denied: the bucket's public access block refuses public ACLs"
            )
        if block.block_public_policy and "policy" in names and request.method == "PUT":
            try:
                public = s3access.public_policy(head)
            except ValueError:
                return  # moto answers MalformedPolicy
            if public:
                raise Refused(
                    "AccessDenied", "Access Denied: the bucket's public access block refuses a public policy"
                )


def _buckets() -> dict:
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    return s3_backends[DEFAULT_ACCOUNT_ID]["aws"].buckets


def _block(bucket) -> s3access.Block:
    block = getattr(bucket, "public_access_block", None)
    if block is None:
        return s3access.Block()
    return s3access.Block(
        bool(block.block_public_acls),
        bool(block.ignore_public_acls),
        bool(block.block_public_policy),
        bool(block.restrict_public_buckets),
    )


def _request_handler():
    from moto.moto_server.werkzeug_app import MotoRequestHandler

    class Handler(MotoRequestHandler):
        """moto's handler, keeping the headers exactly as sent for the signature check."""

        def make_environ(self):
            environ = super().make_environ()
            environ[HEADERS_KEY] = list(self.headers.items())
            return environ

    return Handler


class S3Server:
    """``start()`` serves the lab's S3 on 127.0.0.1 (``port``, default any free one) and returns its
    ``S3Endpoint``; the endpoint's keys (the lab's, unless given) are the only identity it accepts.
    Servers in one process share moto's store. ``stop()`` closes it."""

    def __init__(self, port: int = 0, access_key: str | None = None, secret_key: str | None = None):
        self.port = port
        lab = S3Endpoint("")
        self._keys = S3Endpoint("", access_key or lab.access_key, secret_key or lab.secret_key)
        self._server = None
        self._thread = None
        self.front: CheckingS3 | None = None
        self.endpoint: S3Endpoint | None = None

    def start(self) -> S3Endpoint:
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
        from werkzeug.serving import make_server

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per S3 request is noise
        keys = self._keys
        app = CheckingS3(DomainDispatcherApplication(create_backend_app), {keys.access_key: keys.secret_key})
        self.front = app
        self._server = make_server("127.0.0.1", self.port, app, True, request_handler=_request_handler())
        self._thread = threading.Thread(target=self._server.serve_forever, name="lab-s3", daemon=True)
        self._thread.start()
        host, port = self._server.server_address[:2]
        self.endpoint = S3Endpoint("http://%s:%d" % (host, port), keys.access_key, keys.secret_key, front=app)
        return self.endpoint

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=10)
            self._server = None
