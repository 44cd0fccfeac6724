"""The lab's S3: versitygw (github.com/versity/versitygw v1.8.0, its POSIX backend) behind a relay front
that keeps only what versitygw lacks (``RelayFront``, below; tests/lab/README.md "Its S3").

versitygw checks Signature Version 4 (header and presigned, the body against the signed hash, the
checksums), decides anonymous requests by bucket policy and bucket ACL, keeps multipart uploads and
conditional writes. The endpoint's keys (``S3Endpoint``) are its root account, the one identity.
"""

from __future__ import annotations

import http.client
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
from xml.etree import ElementTree

from . import s3access

ALGORITHM = "AWS4-HMAC-SHA256"
V2_ONLY = "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256."


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
    # The server's RelayFront (its ``faults``, ``request_log``), when this process serves it.
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


PUBLIC_SID = "LabPublicReads"


def make_public(client, bucket: str, keys=None) -> None:
    """What S3's public-read ACLs did, by the bucket's policy (versitygw keeps no object ACLs, and a new
    bucket refuses ACLs, as on S3): anyone may GetObject ``keys``, added to those this made public before,
    or, without keys, every object, and list the bucket."""
    import json

    from botocore.exceptions import ClientError

    if keys is None:
        resources = ["arn:aws:s3:::%s" % bucket, "arn:aws:s3:::%s/*" % bucket]
        actions = ["s3:GetObject", "s3:ListBucket"]
    else:
        resources = ["arn:aws:s3:::%s/%s" % (bucket, key) for key in keys]
        actions = ["s3:GetObject"]
        try:
            document = json.loads(client.get_bucket_policy(Bucket=bucket)["Policy"])
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "NoSuchBucketPolicy":
                raise
            document = {"Statement": []}
        for statement in document["Statement"]:
            if statement.get("Sid") == PUBLIC_SID:
                listed = statement["Resource"]
                resources = sorted(set(resources) | set([listed] if isinstance(listed, str) else listed))
    statement = {"Sid": PUBLIC_SID, "Effect": "Allow", "Principal": "*", "Action": actions}
    policy = {"Version": "2012-10-17", "Statement": [dict(statement, Resource=resources)]}
    client.put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy))


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


class S3Server:
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
