"""The lab's S3: moto's store behind a front that authenticates and authorises as S3 does (LAB_S3=moto,
the default), or versitygw behind a relay front for what it lacks (LAB_S3=versitygw, below).

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
import http.client
import logging
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import ThreadingHTTPServer
from urllib.parse import unquote
from xml.etree import ElementTree

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


class MotoS3Server:
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


# ----------------------------------------------------------------------------------------------- versitygw
VERSITYGW_SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "tools" / "build-versitygw.sh"
HOP_HEADERS = ("connection", "keep-alive", "expect", "proxy-connection", "te", "upgrade")
BLOCK_XMLNS = "http://s3.amazonaws.com/doc/2006-03-01/"
BLOCK_ROOT = "PublicAccessBlockConfiguration"
SIGNED_QUERY = {"X-Amz-Signature", "X-Amz-Credential", "X-Amz-Algorithm", "AWSAccessKeyId", "Signature"}
NOT_IMPLEMENTED = "A header you provided implies functionality that is not implemented"


def versitygw_binary() -> pathlib.Path:
    """versitygw, built by tools/build-versitygw.sh when missing (LAB_VERSITYGW_BIN: its directory)."""
    from .apiserver import built_dir

    return built_dir(VERSITYGW_SCRIPT, "LAB_VERSITYGW_BIN") / "versitygw"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class VersityGW:
    """versitygw serving the directory ``root`` with its POSIX backend on 127.0.0.1: its root account
    (``access_key``/``secret_key``) is the one identity; buckets are ``root``'s directories."""

    def __init__(self, root: pathlib.Path, access_key: str, secret_key: str, region: str = "us-east-1"):
        self.root = pathlib.Path(root)
        self.access_key, self.secret_key, self.region = access_key, secret_key, region
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def start(self, timeout: float = 30) -> str:
        (self.root / "data").mkdir(parents=True, exist_ok=True)
        port = free_port()
        argv = [str(versitygw_binary()), "--port", "127.0.0.1:%d" % port, "--region", self.region]
        argv += ["--health", "/lab-health", "--quiet", "posix", str(self.root / "data")]
        # A child dies with the process that started it (setpriv's parent-death signal), and the keys
        # reach it through its environment, not its command line.
        setpriv = shutil.which("setpriv")
        if setpriv:
            argv = [setpriv, "--pdeathsig", "KILL", "--", *argv]
        env = dict(os.environ, ROOT_ACCESS_KEY=self.access_key, ROOT_SECRET_KEY=self.secret_key)
        log_path = self.root / "versitygw.log"
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
            )
        self.url = "http://127.0.0.1:%d" % port
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    "versitygw exited with %s:\n%s"
                    % (self.proc.returncode, log_path.read_text(errors="replace")[-3000:])
                )
            try:
                with urllib.request.urlopen(self.url + "/lab-health", timeout=2) as reply:
                    if reply.status == 200:
                        return self.url
            except OSError as exc:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        "versitygw not listening on %s after %.0fs" % (self.url, timeout)
                    ) from exc
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def _error_body(code: str, message: str) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code><Message>%s</Message></Error>'
        % (code, message.replace("&", "&amp;").replace("<", "&lt;"))
    ).encode()


class RelayFront:
    """A pass-through in front of versitygw for what it lacks; everything else is versitygw's answer.

    - The public access block: versitygw v1.8.0 answers Put/Get/DeletePublicAccessBlock 501
      NotImplemented (after authenticating the request, so such a 501 is the owner's request). The
      front keeps the configuration and plays its effects (s3access.py): RestrictPublicBuckets refuses
      anonymous requests to a bucket whose policy is public, IgnorePublicAcls lets only the policy grant
      them; BlockPublicPolicy and BlockPublicAcls refuse the owner's public policy or ACL (403).
    - CopyObject with ``If-None-Match: *``: versitygw v1.8.0 ignores the header and replaces the key;
      S3 answers 412 PreconditionFailed when the destination exists (the collection's copies rely on it).
    - Authorization it answers otherwise than S3: HTTP basic auth (CDI's http source with a secretRef)
      and Signature Version 2 headers get S3's 400s (versitygw: 403 "AWS authentication requires a
      valid Date or x-amz-date header"); an access key it does not know gets S3's 403
      InvalidAccessKeyId (versitygw: 404 XAdminUserNotFound).
    - Anonymous object reads as S3 answers them: versitygw serves an object on the bucket's READ grant
      (S3: only the policy or the object's ACL, which versitygw does not keep, serve it), and tells a
      missing key 404 to a caller allowed s3:GetObject alone (S3: 403 unless it may list the bucket).
    - The tests' knobs: ``faults`` (answers given instead of serving a request), ``not_implemented``
      (subresources answered 501, as some S3-compatible stores do) and ``request_log``.
    """

    def __init__(self, upstream: str, endpoint_keys: S3Endpoint):
        self.upstream = urllib.parse.urlsplit(upstream)
        self.keys = endpoint_keys
        self.not_implemented: set[str] = set()
        self.faults: list[Fault] = []
        self.blocks: dict[str, s3access.Block] = {}
        # Every request the endpoint was sent, as (method, percent-decoded path with its query), from when
        # a test sets it to a list (None: nothing kept).
        self.request_log: list[tuple[str, str]] | None = None
        self._lock = threading.Lock()
        self._owner = None

    # ---------------------------------------------------------------- decisions
    def fault_for(self, method: str, path: str, names: set, headers: dict) -> Fault | None:
        with self._lock:
            return next((f for f in self.faults if f.answers(method, path, names, headers)), None)

    def owner_client(self):
        if self._owner is None:
            self._owner = s3_client(dict(self.keys.env(), AWS_ENDPOINT_URL=self.upstream.geturl()))
        return self._owner

    def policy_of(self, bucket: str) -> str | None:
        from botocore.exceptions import ClientError

        try:
            return self.owner_client().get_bucket_policy(Bucket=bucket)["Policy"]
        except ClientError:
            return None

    def authorization_answer(self, query: str, headers: dict) -> tuple[int, str, str] | None:
        """S3's answer to an Authorization versitygw answers otherwise, or None to let it answer."""
        authorization = headers.get("authorization", "")
        if authorization.startswith("AWS "):
            return 400, "InvalidRequest", V2_ONLY
        if authorization and not authorization.startswith(ALGORITHM + " "):
            return 400, "InvalidArgument", "Unsupported Authorization Type"
        credential = re.search(r"Credential=([^/,\s]+)/", authorization)
        if not authorization:
            pairs = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
            credential = re.match(r"([^/]+)/", pairs.get("X-Amz-Credential", ""))
        if credential and credential.group(1) != self.keys.access_key:
            return (
                403,
                "InvalidAccessKeyId",
                "The AWS Access Key Id you provided does not exist in our records",
            )
        return None

    @staticmethod
    def anonymous(names: set, headers: dict) -> bool:
        """Unsigned: no Authorization header, no presigned query (version 4, or version 2's)."""
        return "authorization" not in headers and not names & SIGNED_QUERY

    def policy_allows_read(self, bucket: str, key: str) -> bool:
        """Whether the bucket policy lets anyone GetObject ``key``. versitygw has no object ACLs, so on S3
        nothing else could serve the object to anyone; versitygw also serves it on the bucket's READ grant,
        which on S3 lets anyone list the bucket, not read its objects."""
        from botocore.exceptions import ClientError

        try:
            policy = self.owner_client().get_bucket_policy(Bucket=bucket)["Policy"]
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "NoSuchBucket":
                return True  # versitygw answers NoSuchBucket, as S3 tells anyone
            policy = None
        arn = "arn:aws:s3:::%s/%s" % (bucket, key)
        return s3access.policy_effect(policy, "s3:GetObject", arn) == "Allow"

    def anonymous_may_list(self, bucket: str) -> bool:
        """Whether an anonymous listing of ``bucket`` is served (versitygw decides, the block applies):
        S3 tells a missing key (404) only to a caller who may list the bucket, anyone else gets 403;
        versitygw tells it anyone allowed s3:GetObject."""
        names = {"list-type", "max-keys"}
        if self.refusal("GET", bucket, "", names, {}, b""):
            return False
        connection = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=30)
        try:
            connection.request("GET", "/%s?list-type=2&max-keys=0" % urllib.parse.quote(bucket))
            reply = connection.getresponse()
            reply.read()
            return 200 <= reply.status < 300
        finally:
            connection.close()

    def copy_onto_existing(self, method: str, bucket: str, key: str, headers: dict) -> bool:
        """A CopyObject that must not replace ``key`` (``If-None-Match: *``), which exists."""
        from botocore.exceptions import ClientError

        if method != "PUT" or not key or "x-amz-copy-source" not in headers:
            return False
        if headers.get("if-none-match", "").strip() != "*":
            return False
        try:
            self.owner_client().head_object(Bucket=bucket, Key=key)
        except ClientError:
            return False
        return True

    def refusal(self, method: str, bucket: str, key: str, names: set, headers: dict, body: bytes) -> str:
        """Why the public access block refuses this request ("" when it does not)."""
        block = self.blocks.get(bucket)
        if block is None:
            return ""
        anonymous = self.anonymous(names, headers)
        if anonymous and (block.restrict_public_buckets or block.ignore_public_acls):
            policy = self.policy_of(bucket)
            if block.restrict_public_buckets and s3access.public_policy(policy):
                return "Access Denied"
            arn = "arn:aws:s3:::%s" % bucket + ("/%s" % key if key else "")
            action = s3access.action_of(method, key, names - {"x-id"})
            if block.ignore_public_acls and s3access.policy_effect(policy, action or "", arn) != "Allow":
                return "Access Denied"
        if anonymous or method not in ("PUT", "POST"):
            return ""
        if block.block_public_acls and s3access.grants_public_acl(headers, names, body):
            return "Access Denied: the bucket's public access block refuses public ACLs"
        if block.block_public_policy and "policy" in names and method == "PUT":
            try:
                public = s3access.public_policy(body)
            except ValueError:
                return ""  # versitygw answers MalformedPolicy
            if public:
                return "Access Denied: the bucket's public access block refuses a public policy"
        return ""

    def block_answer(self, method: str, bucket: str, body: bytes) -> tuple[int, str, bytes]:
        """The answer to the owner's Put/Get/DeletePublicAccessBlock: (status, error code, body)."""
        if method == "PUT":
            try:
                root = ElementTree.fromstring(body)
            except ElementTree.ParseError:
                return 400, "MalformedXML", b""
            values = {child.tag.rpartition("}")[2]: (child.text or "").strip() == "true" for child in root}
            self.blocks[bucket] = s3access.Block(
                values.get("BlockPublicAcls", False),
                values.get("IgnorePublicAcls", False),
                values.get("BlockPublicPolicy", False),
                values.get("RestrictPublicBuckets", False),
            )
            return 200, "", b""
        if method == "DELETE":
            self.blocks.pop(bucket, None)
            return 204, "", b""
        block = self.blocks.get(bucket)
        if block is None:
            return 404, "NoSuchPublicAccessBlockConfiguration", b""
        settings = (
            ("BlockPublicAcls", block.block_public_acls),
            ("IgnorePublicAcls", block.ignore_public_acls),
            ("BlockPublicPolicy", block.block_public_policy),
            ("RestrictPublicBuckets", block.restrict_public_buckets),
        )
        xml = "".join("<%s>%s</%s>" % (name, "true" if on else "false", name) for name, on in settings)
        document = '<?xml version="1.0" encoding="UTF-8"?>\n<%s xmlns="%s">%s</%s>' % (
            BLOCK_ROOT,
            BLOCK_XMLNS,
            xml,
            BLOCK_ROOT,
        )
        return 200, "", document.encode()


# Subresources whose request bodies are small documents the front reads (ACLs, policies, the block).
SMALL_BODIES = {"acl", "policy", "publicAccessBlock"}


def _relay_handler(front: RelayFront):
    from http.server import BaseHTTPRequestHandler

    class Relay(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        upstream_connection = None

        def log_message(self, format, *args):
            pass

        def do_request(self):
            if front.request_log is not None:
                front.request_log.append((self.command, urllib.parse.unquote(self.path)))
            raw_path, _mark, query = self.path.partition("?")
            names = {name for name, _value in urllib.parse.parse_qsl(query, keep_blank_values=True)}
            headers = {name.lower(): value for name, value in self.headers.items()}
            path = urllib.parse.unquote(raw_path)
            bucket, _slash, key = path.lstrip("/").partition("/")
            fault = front.fault_for(self.command, path, names, headers)
            if fault is not None or names & front.not_implemented:
                self.read_body()  # read, so the connection is ready for the retry
                if fault is not None:
                    return self.answer(fault.status, fault.code, "injected by the lab")
                return self.answer(501, "NotImplemented", NOT_IMPLEMENTED)
            answer = front.authorization_answer(query, headers)
            if answer is not None:
                self.read_body()
                return self.answer(*answer)
            if "authorization" in headers and front.copy_onto_existing(self.command, bucket, key, headers):
                self.read_body()
                return self.answer(
                    412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold"
                )
            small = bucket and (names & SMALL_BODIES or "x-amz-acl" in headers)
            body = self.read_body() if small else None
            refused = front.refusal(self.command, bucket, key, names, headers, body or b"")
            object_read = key and self.command in ("GET", "HEAD") and front.anonymous(names, headers)
            if not refused and object_read and not front.policy_allows_read(bucket, key):
                refused = "Access Denied"
            if refused:
                return self.answer(403, "AccessDenied", refused)
            reply = self.forward(body)
            if object_read and reply.status == 404 and not front.anonymous_may_list(bucket):
                reply.read()
                return self.answer(403, "AccessDenied", "Access Denied")
            if "publicAccessBlock" in names and not key and reply.status == 501:
                reply.read()
                status, code, document = front.block_answer(self.command, bucket, body or b"")
                if code:
                    return self.answer(status, code, "The public access block configuration was not found")
                return self.send(status, [("Content-Type", "application/xml")], document)
            if self.command == "DELETE" and not key and not names and reply.status == 204:
                front.blocks.pop(bucket, None)
            self.relay(reply)

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_request

        # ------------------------------------------------------------ the wire
        def read_body(self) -> bytes:
            if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                return b"".join(self.chunks())
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def chunks(self):
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return
                yield self.rfile.read(size)
                self.rfile.readline()

        def body_stream(self):
            length = int(self.headers.get("Content-Length") or 0)
            while length > 0:
                chunk = self.rfile.read(min(length, 1024 * 1024))
                if not chunk:
                    return
                length -= len(chunk)
                yield chunk

        def forward(self, body: bytes | None):
            for attempt in (1, 2):
                if self.upstream_connection is None:
                    self.upstream_connection = http.client.HTTPConnection(
                        front.upstream.hostname, front.upstream.port, timeout=600
                    )
                connection = self.upstream_connection
                chunked = "chunked" in (self.headers.get("Transfer-Encoding") or "").lower()
                try:
                    connection.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                    for name, value in self.headers.items():
                        lower = name.lower()
                        if lower in HOP_HEADERS or (body is not None and lower == "transfer-encoding"):
                            continue
                        connection.putheader(name, value)
                    if body is not None and chunked:
                        connection.putheader("Content-Length", str(len(body)))
                    connection.endheaders()
                    if body is not None:
                        connection.send(body)
                    elif chunked:
                        for chunk in self.chunks():
                            connection.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        connection.send(b"0\r\n\r\n")
                    else:
                        for chunk in self.body_stream():
                            connection.send(chunk)
                    return connection.getresponse()
                except (ConnectionError, http.client.RemoteDisconnected):
                    # a kept connection versitygw closed while idle: once more on a new one, if the
                    # body is still at hand
                    connection.close()
                    self.upstream_connection = None
                    streamed = body is None and self.headers.get("Content-Length") not in (None, "0")
                    if attempt == 2 or streamed:
                        raise
            raise AssertionError("unreachable")

        def relay(self, reply) -> None:
            headers = [(k, v) for k, v in reply.getheaders() if k.lower() not in HOP_HEADERS]
            length = reply.getheader("Content-Length")
            if self.command == "HEAD" or reply.status in (204, 304) or length is None:
                body = b"" if self.command == "HEAD" else reply.read()
                headers = [(k, v) for k, v in headers if k.lower() != "transfer-encoding"]
                if self.command != "HEAD" and length is None:
                    headers.append(("Content-Length", str(len(body))))
                self.head(reply.status, reply.reason, headers)
                self.wfile.write(body)
            else:
                self.head(reply.status, reply.reason, headers)
                while chunk := reply.read(1024 * 1024):
                    self.wfile.write(chunk)
            if reply.will_close:
                self.upstream_connection.close()
                self.upstream_connection = None

        def head(self, status: int, reason: str, headers) -> None:
            lines = ["HTTP/1.1 %d %s" % (status, reason)] + ["%s: %s" % pair for pair in headers]
            self.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

        def send(self, status: int, headers, body: bytes) -> None:
            headers = [*headers, ("Content-Length", "0" if self.command == "HEAD" else str(len(body)))]
            self.head(status, HTTPStatus(status).phrase, headers)
            if self.command != "HEAD":
                self.wfile.write(body)

        def answer(self, status: int, code: str, message: str) -> None:
            self.send(status, [("Content-Type", "application/xml")], _error_body(code, message))

        def finish(self):
            super().finish()
            if self.upstream_connection is not None:
                self.upstream_connection.close()

    return Relay


class _RelayServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that hangs up (a poller stopped, a ranged read cut short) is not the lab's error.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class VersityS3Server:
    """``start()`` serves the lab's S3 on 127.0.0.1 (``port``, default any free one): versitygw behind
    the RelayFront, and returns its ``S3Endpoint``. Each server keeps its buckets in its own directory
    (``root``, default a temporary one removed by ``stop()``)."""

    def __init__(
        self,
        port: int = 0,
        access_key: str | None = None,
        secret_key: str | None = None,
        root: pathlib.Path | None = None,
    ):
        self.port = port
        lab = S3Endpoint("")
        self._keys = S3Endpoint("", access_key or lab.access_key, secret_key or lab.secret_key)
        self._root = pathlib.Path(root) if root else None
        self._own_root = root is None
        self.gateway: VersityGW | None = None
        self.front: RelayFront | None = None
        self.endpoint: S3Endpoint | None = None
        self._server = None
        self._thread = None

    def start(self) -> S3Endpoint:
        if self._root is None:
            self._root = pathlib.Path(tempfile.mkdtemp(prefix="lab-s3-"))
        keys = self._keys
        self.gateway = VersityGW(self._root, keys.access_key, keys.secret_key, keys.region)
        upstream = self.gateway.start()
        self.front = RelayFront(upstream, keys)
        self._server = _RelayServer(("127.0.0.1", self.port), _relay_handler(self.front))
        self._thread = threading.Thread(target=self._server.serve_forever, name="lab-s3", daemon=True)
        self._thread.start()
        host, port = self._server.server_address[:2]
        url = "http://%s:%d" % (host, port)
        self.endpoint = S3Endpoint(url, keys.access_key, keys.secret_key, front=self.front)
        return self.endpoint

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=10)
            self._server = None
        if self.gateway is not None:
            self.gateway.stop()
            self.gateway = None
        if self._own_root and self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None


def S3Server(*args, **kwargs):
    """The lab's S3 server: versitygw (LAB_S3=versitygw) or moto behind the checking front (LAB_S3=moto)."""
    backend = os.environ.get("LAB_S3", "versitygw")
    if backend == "versitygw":
        return VersityS3Server(*args, **kwargs)
    if backend == "moto":
        return MotoS3Server(*args, **kwargs)
    raise ValueError("LAB_S3=%s: the lab's S3 is versitygw or moto" % backend)
