# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The export Job's program: convert a sealed disk to a compressed qcow2 and upload it to a bucket key.

It runs in a pod next to the claim (``golden_export_job`` ships it in a ConfigMap with its siblings), so
no byte of the disk passes through the Ansible controller. It needs ``python3``, ``qemu-img`` and the
``dissect`` packages the seal verifier uses (images/golden-export/Containerfile): the S3 calls are signed
here (AWS Signature Version 4) with the standard library. Credentials come from the environment
(``EXPORT_ACCESS_KEY_ID``, ``EXPORT_SECRET_ACCESS_KEY``, optionally ``EXPORT_SESSION_TOKEN``), which the
Job fills from a Secret; they are never printed.

The steps: the image's facts are read from the disk itself (``_disk.read_facts_or_why``): a key, a
password or a place that could not be read makes the bytes sensitive whatever the run declared, and
sensitive bytes go only to a destination proven private (``exposure.prove_private``). Then ``qemu-img
convert -c -O qcow2`` onto scratch space, then a HEAD of the key.
- The key holds an object (a rerun): the sha256 of the qcow2 is computed (its one read, nothing is sent);
  an object with this sha256 is left alone, anything else is refused.
- The key is free: the qcow2 is read once. Its parts go to a staging key next to the key
  (``--staging-key``, ``<key>.partial-<random>`` by default) as a multipart upload, each part with its
  Content-MD5 and its own sha256 (the server checks both), while the sha256 of the whole is computed; that
  upload is completed with ``If-None-Match: *``. S3 takes metadata only when an object is made, so the key
  is then made (after another HEAD finds it still free) by a server-side copy of the staging object that
  carries the sha256 and the other metadata (``x-amz-metadata-directive: REPLACE``): CopyObject up to
  COPY_PART_LIMIT (5 GiB, S3's limit), above it a multipart upload of UploadPartCopy ranges completed
  with ``If-None-Match: *``. A HEAD checks
  the stored sha256 and size (a mismatch deletes the object again), and the staging object is deleted.
  Any failure aborts the pending upload and deletes the staging object, and the error says so: the key
  never keeps an object that was not checked, and no staging object is left.
The progress phases are ``convert``, then ``upload`` and ``copy`` (or ``sha256`` on a rerun); the result
reports ``read_bytes``, the bytes of the qcow2 read after the conversion. The last line of the log is
``MARKER`` followed by the result as JSON.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import base64
import datetime
import hashlib
import hmac
import http.client
import json
import os
import re
import ssl
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote, urlsplit
from xml.etree import ElementTree

from ansible_collections.goldenimage.pipeline.plugins.module_utils import _disk, exposure
from ansible_collections.goldenimage.pipeline.plugins.module_utils.errors import PipelineError

MARKER = "GOLDEN_EXPORT_RESULT "
READ_CHUNK = 8 * 1024 * 1024
PROGRESS_SECONDS = 10.0
ATTEMPTS = 4
MAX_PARTS = 10000
# CopyObject copies at most 5 GiB; a larger object is copied in parts of this size (UploadPartCopy).
COPY_PART_LIMIT = 5 * 1024 * 1024 * 1024
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
# One byte of an object: enough to learn whether anonymous reads of it are answered.
RANGE = {"Range": "bytes=0-0"}
META = {"sha256": "sha256", "source": "source-url", "uid": "source-uid", "at": "mirrored-at"}


class ExportError(PipelineError):
    """The export cannot go on; ``code`` names the case for the module (``key_exists``, ``s3``...)."""

    def __init__(self, msg, code="failed"):
        super(ExportError, self).__init__(msg)
        self.msg, self.code = msg, code


# ---------------------------------------------------------------- signing (AWS SigV4, S3 flavour)
def _uri_encode(text, safe="-_.~"):
    return quote(text, safe=safe)


def canonical_query(query):
    pairs = sorted((_uri_encode(k), _uri_encode(v)) for k, v in (query or {}).items())
    return "&".join("%s=%s" % pair for pair in pairs)


def sign(method, host, path, query, headers, payload_sha256, access_key, secret_key, region, moment):
    """The headers to send: ``headers`` plus host, x-amz-date, x-amz-content-sha256 and Authorization.

    ``path`` is the decoded path (``/bucket/key``); S3 encodes it once, keeping ``/``.
    """
    amz_date = moment.strftime("%Y%m%dT%H%M%SZ")
    day = amz_date[:8]
    signed = {k.lower(): " ".join(str(v).strip().split()) for k, v in headers.items()}
    signed.update({"host": host, "x-amz-date": amz_date, "x-amz-content-sha256": payload_sha256})
    names = sorted(signed)
    canonical = "\n".join(
        [
            method,
            _uri_encode(path, safe="/-_.~"),
            canonical_query(query),
            "".join("%s:%s\n" % (n, signed[n]) for n in names),
            ";".join(names),
            payload_sha256,
        ]
    )
    scope = "%s/%s/s3/aws4_request" % (day, region)
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode("utf-8")).hexdigest()]
    )
    key = ("AWS4" + secret_key).encode("utf-8")
    for part in (day, region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode("utf-8"), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode("utf-8"), hashlib.sha256).hexdigest()
    out = dict(headers)
    out.update({"x-amz-date": amz_date, "x-amz-content-sha256": payload_sha256})
    out["Authorization"] = "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s" % (
        access_key,
        scope,
        ";".join(names),
        signature,
    )
    return out


# ---------------------------------------------------------------- S3 over http.client
class Answer:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def header(self, name):
        return self.headers.get(name.lower())

    def error_code(self):
        match = re.search(rb"<Code>([^<]+)</Code>", self.body or b"")
        return match.group(1).decode("utf-8", "replace") if match else str(self.status)


class S3:
    def __init__(self, endpoint, region, access_key, secret_key, token=None, ca_file=None, insecure=False):
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ExportError("endpoint %s is not an http(s) URL" % endpoint, "input")
        self.scheme, self.netloc, self.base = parts.scheme, parts.netloc, parts.path.rstrip("/")
        self.region, self.access_key, self.secret_key, self.token = region, access_key, secret_key, token
        self.context = None
        if self.scheme == "https":
            self.context = ssl.create_default_context(cafile=ca_file or None)
            if insecure:
                self.context.check_hostname = False
                self.context.verify_mode = ssl.CERT_NONE

    def _connection(self):
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.netloc, timeout=120, context=self.context)
        return http.client.HTTPConnection(self.netloc, timeout=120)

    def request(
        self,
        method,
        bucket,
        key,
        query=None,
        headers=None,
        body=b"",
        what=None,
        anonymous=False,
        attempts=ATTEMPTS,
    ):
        """One request, retried on 5xx and dropped connections; an Answer for every other status.

        ``anonymous`` sends it unsigned, as anyone on the network can; ``attempts`` bounds the tries."""
        path = "%s/%s/%s" % (self.base, bucket, key) if key else "%s/%s" % (self.base, bucket)
        payload = hashlib.sha256(body).hexdigest() if body else EMPTY_SHA256
        headers = dict(headers or {})
        if self.token and not anonymous:
            headers["x-amz-security-token"] = self.token
        target = _uri_encode(path, safe="/-_.~") + (("?" + canonical_query(query)) if query else "")
        last = None
        for attempt in range(1, attempts + 1):
            moment = datetime.datetime.now(datetime.timezone.utc)
            sent = (
                dict(headers)
                if anonymous
                else sign(
                    method,
                    self.netloc,
                    path,
                    query,
                    headers,
                    payload,
                    self.access_key,
                    self.secret_key,
                    self.region,
                    moment,
                )
            )
            conn = self._connection()
            try:
                conn.request(method, target, body=body or None, headers=sent)
                reply = conn.getresponse()
                answer = Answer(reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read())
            except (OSError, http.client.HTTPException) as exc:
                last = "%s: %s" % (type(exc).__name__, exc)
                answer = None
            finally:
                conn.close()
            if answer is not None and answer.status < 500:
                return answer
            if answer is not None:
                last = "HTTP %d %s" % (answer.status, answer.error_code())
            if attempt < attempts:
                time.sleep(min(8.0, 0.5 * 2**attempt))
        raise ExportError("%s: %s after %d attempts" % (what or method, last, attempts), "s3")


def _expect(answer, status, what):
    if answer.status != status:
        raise ExportError("%s: HTTP %d %s" % (what, answer.status, answer.error_code()), "s3")
    return answer


# ---------------------------------------------------------------- the steps
class Progress:
    """One line per phase change and at most every PROGRESS_SECONDS, qemu-img's ``(x/100%)`` form."""

    def __init__(self, out=sys.stdout, clock=time.monotonic):
        self.out, self.clock, self.last = out, clock, None

    def say(self, text):
        self.out.write(text + "\n")
        self.out.flush()

    def phase(self, name, total):
        self.name, self.total, self.last = name, total, None
        self.say("phase %s: %d bytes" % (name, total))

    def step(self, done, force=False):
        now = self.clock()
        if force or self.last is None or now - self.last >= PROGRESS_SECONDS:
            self.last = now
            percent = 100.0 * done / self.total if self.total else 100.0
            self.say("%s %d/%d bytes (%.2f/100%%)" % (self.name, done, self.total, percent))


def convert(source, dest, compress=True, progress=None):
    argv = ["qemu-img", "convert", "-p", "-f", "raw", "-O", "qcow2"]
    if compress:
        argv.append("-c")
    argv += [source, dest]
    if progress:
        progress.say("phase convert: " + " ".join(argv))
    done = subprocess.run(argv, stdout=sys.stdout, stderr=subprocess.PIPE, check=False)
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip()
        raise ExportError("qemu-img convert failed (exit %d): %s" % (done.returncode, detail), "convert")


def file_sha256(path, progress):
    size = os.path.getsize(path)
    progress.phase("sha256", size)
    digest, done = hashlib.sha256(), 0
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(READ_CHUNK), b""):
            digest.update(chunk)
            done += len(chunk)
            progress.step(done)
    progress.step(done, force=True)
    return digest.hexdigest(), size


def _etag(answer):
    return (answer.header("etag") or "").strip('"')


def object_headers(opts, digest, sensitive):
    """The metadata and Content-Type the exported object carries; ``sensitive``: the reasons."""
    headers = {
        "x-amz-meta-" + META["sha256"]: digest,
        "x-amz-meta-" + META["source"]: opts.source_url,
        "x-amz-meta-" + META["at"]: opts.exported_at,
        "x-amz-meta-" + exposure.SENSITIVE_META: exposure.sensitive_mark(sensitive),
        "Content-Type": opts.content_type,
    }
    if opts.source_uid:
        headers["x-amz-meta-" + META["uid"]] = opts.source_uid
    return headers


def _complete(s3, bucket, key, upload_id, parts, where, appeared):
    """CompleteMultipartUpload with ``If-None-Match: *``: an object that appeared under the key wins."""
    body = "<CompleteMultipartUpload>%s</CompleteMultipartUpload>" % "".join(
        '<Part><PartNumber>%d</PartNumber><ETag>"%s"</ETag></Part>' % (n, e) for n, e in parts
    )
    done = s3.request(
        "POST",
        bucket,
        key,
        {"uploadId": upload_id},
        {"If-None-Match": "*", "Content-Type": "application/xml"},
        body.encode("utf-8"),
        what="CompleteMultipartUpload " + where,
    )
    if done.status in (409, 412):
        raise ExportError(appeared, "key_exists")
    _expect(done, 200, "CompleteMultipartUpload " + where)
    if b"<Error>" in done.body:  # S3 may answer 200 with an error body
        raise ExportError(
            "CompleteMultipartUpload %s: %s" % (where, Answer(500, {}, done.body).error_code()), "s3"
        )


def multipart(s3, bucket, key, headers, send, progress):
    """A multipart upload to ``key``: ``send(upload_id)`` returns ``(parts, value)`` and the upload is
    completed; returns ``(len(parts), value)``. Any failure aborts the upload."""
    where = "s3://%s/%s" % (bucket, key)
    created = _expect(
        s3.request("POST", bucket, key, {"uploads": ""}, headers, what="CreateMultipartUpload " + where),
        200,
        "CreateMultipartUpload " + where,
    )
    upload_id = ElementTree.fromstring(created.body).findtext("{*}UploadId") or ""
    if not upload_id:
        raise ExportError("CreateMultipartUpload %s: no UploadId in the answer" % where, "s3")
    try:
        parts, value = send(upload_id)
        _complete(
            s3, bucket, key, upload_id, parts, where, "%s appeared while the export was written" % where
        )
    except BaseException as exc:
        try:
            answer = s3.request(
                "DELETE", bucket, key, {"uploadId": upload_id}, what="AbortMultipartUpload " + where
            )
            _expect(answer, 204, "AbortMultipartUpload " + where)
            note = "the multipart upload to %s was aborted" % where
        except ExportError as problem:
            note = "the multipart upload %s to %s could not be aborted: %s" % (upload_id, where, problem.msg)
        progress.say(note)
        if isinstance(exc, ExportError):
            exc.msg = "%s; %s" % (exc.msg, note)
        raise
    return len(parts), value


def stage(s3, opts, path, staging, size, progress):
    """The one read of the qcow2: its parts are uploaded to ``staging`` while its sha256 is computed.

    Returns ``(parts, sha256, bytes read)``; the multipart upload is aborted on any failure."""
    parts, (digest, read) = multipart(
        s3,
        opts.bucket,
        staging,
        {"Content-Type": opts.content_type},
        lambda upload_id: _send_parts(s3, opts, path, staging, upload_id, size, progress),
        progress,
    )
    return parts, digest, read


def _send_parts(s3, opts, path, key, upload_id, size, progress):
    progress.phase("upload", size)
    streamed, futures = hashlib.sha256(), []
    # S3 takes at most 10,000 parts: a larger file gets larger parts (whole MiB).
    mib = 1024 * 1024
    per_part = (size + MAX_PARTS - 1) // MAX_PARTS
    part_size = max(opts.part_size, (per_part + mib - 1) // mib * mib)

    def put(number, chunk):
        md5 = hashlib.md5(chunk)
        headers = {"Content-MD5": base64.b64encode(md5.digest()).decode("ascii")}
        what = "UploadPart %d of s3://%s/%s" % (number, opts.bucket, key)
        answer = _expect(
            s3.request(
                "PUT",
                opts.bucket,
                key,
                {"partNumber": str(number), "uploadId": upload_id},
                headers,
                chunk,
                what=what,
            ),
            200,
            what,
        )
        if _etag(answer) != md5.hexdigest():
            raise ExportError(
                "%s: the server stored ETag %s for md5 %s" % (what, _etag(answer), md5.hexdigest()), "s3"
            )
        return number, _etag(answer), len(chunk)

    read = 0
    with ThreadPoolExecutor(max_workers=opts.concurrency) as pool, open(path, "rb") as fh:
        for number, chunk in enumerate(iter(lambda: fh.read(part_size), b""), 1):
            read += len(chunk)
            streamed.update(chunk)
            futures.append(pool.submit(put, number, chunk))
            while sum(1 for f in futures if not f.done()) >= opts.concurrency:
                time.sleep(0.01)
            for f in futures:
                if f.done() and f.exception() is not None:
                    raise f.exception()
            progress.step(sum(f.result()[2] for f in futures if f.done()))
        parts = [f.result() for f in futures]
    progress.step(read, force=True)
    if read != size:
        raise ExportError(
            "the qcow2 changed while it was uploaded (%d bytes, then %d read); nothing was stored"
            % (size, read),
            "changed",
        )
    return [(n, e) for n, e, _l in parts], (streamed.hexdigest(), read)


def publish(s3, opts, staging, digest, size, progress, sensitive):
    """The final key made by a server-side copy of ``staging`` that carries the metadata: CopyObject up to
    COPY_PART_LIMIT bytes, else a multipart copy of ranges. Returns the copy's part count (1 for
    CopyObject)."""
    bucket, key = opts.bucket, opts.key
    where = "s3://%s/%s" % (bucket, key)
    source = {"x-amz-copy-source": "/%s/%s" % (quote(bucket, safe=""), quote(staging, safe="/-_.~"))}
    headers = object_headers(opts, digest, sensitive)
    progress.phase("copy", size)
    if held(s3, bucket, key) is not None:
        raise ExportError(
            "%s appeared while the export was uploaded; nothing was replaced" % where, "key_exists"
        )
    if size <= COPY_PART_LIMIT:
        what = "CopyObject %s to %s" % (staging, where)
        answer = s3.request(
            "PUT",
            bucket,
            key,
            None,
            dict(headers, **source, **{"x-amz-metadata-directive": "REPLACE"}),
            what=what,
        )
        _expect(answer, 200, what)
        if b"<Error>" in answer.body:  # a copy may fail after its 200
            raise ExportError("%s: %s" % (what, answer.error_code()), "s3")
        progress.step(size, force=True)
        return 1

    def copy_parts(upload_id):
        parts = []
        for number, start in enumerate(range(0, size, COPY_PART_LIMIT), 1):
            end = min(size, start + COPY_PART_LIMIT) - 1
            what = "UploadPartCopy %d of %s" % (number, where)
            answer = _expect(
                s3.request(
                    "PUT",
                    bucket,
                    key,
                    {"partNumber": str(number), "uploadId": upload_id},
                    dict(source, **{"x-amz-copy-source-range": "bytes=%d-%d" % (start, end)}),
                    what=what,
                ),
                200,
                what,
            )
            etag = (ElementTree.fromstring(answer.body).findtext("{*}ETag") or "").strip('"')
            if not etag:
                raise ExportError("%s: %s" % (what, answer.error_code()), "s3")
            parts.append((number, etag))
            progress.step(end + 1)
        progress.step(size, force=True)
        return parts, None

    return multipart(s3, bucket, key, headers, copy_parts, progress)[0]


def held(s3, bucket, key):
    """The metadata of what ``key`` holds (``{}`` for none), or None when it is free."""
    answer = s3.request("HEAD", bucket, key, what="HEAD s3://%s/%s" % (bucket, key))
    if answer.status == 404:
        return None
    _expect(answer, 200, "HEAD s3://%s/%s" % (bucket, key))
    found = {k[len("x-amz-meta-") :]: v for k, v in answer.headers.items() if k.startswith("x-amz-meta-")}
    found["content-length"] = answer.header("content-length")
    return found


def object_answers(s3, opts):
    """Unsigned reads of the object at the key: a ranged GET and a HEAD, ``{probe: (status, code)}``."""
    return {
        "get": _reply(s3, "GET", opts.bucket, opts.key, anonymous=True, headers=RANGE)[:2],
        "head": _reply(s3, "HEAD", opts.bucket, opts.key, anonymous=True)[:2],
    }


def _reply(s3, method, bucket, key, query=None, body=b"", anonymous=False, headers=None):
    """``(status, code, Answer or None)`` of one request that must not stop the run: 0 when none answered.

    One attempt for an answer that says "not implemented" (501), a few for a server that is unwell."""
    try:
        answer = s3.request(method, bucket, key, query, headers, body=body, anonymous=anonymous, attempts=2)
    except ExportError as exc:
        return 0, exc.msg, None
    code = None if 200 <= answer.status < 300 else answer.error_code()
    return answer.status, code, answer


def _xml(answer):
    try:
        return ElementTree.fromstring(answer.body) if answer is not None and answer.body else None
    except ElementTree.ParseError:
        return None


def read_controls(s3, bucket):
    """The bucket's controls as the Job's identity reads them, in the shape ``exposure.prove_private``
    takes (the same reads as ``_s3.read_controls``, over http.client)."""
    status, code, answer = _reply(s3, "GET", bucket, "", {"policyStatus": ""})
    tree = _xml(answer) if status == 200 else None
    public = (tree.findtext("{*}IsPublic") or "").strip().lower() == "true" if tree is not None else None
    controls = {"policy_status": (status, code, public)}
    status, code, answer = _reply(s3, "GET", bucket, "", {"acl": ""})
    grants = []
    tree = _xml(answer) if status == 200 else None
    for grant in tree.iter("{*}Grant") if tree is not None else ():
        who = grant.find("{*}Grantee")
        uri = (who.findtext("{*}URI") or who.findtext("{*}ID") or "") if who is not None else ""
        grants.append((uri.strip(), (grant.findtext("{*}Permission") or "").strip()))
    controls["acl"] = (status, code, grants)
    status, code, answer = _reply(s3, "GET", bucket, "", {"publicAccessBlock": ""})
    tree = _xml(answer) if status == 200 else None
    config = None
    if tree is not None:
        config = {
            name: (tree.findtext("{*}" + name) or "").strip().lower() == "true"
            for name in exposure.BLOCK_SETTINGS
        }
    controls["public_access_block"] = (status, code, config)
    return controls


def canary_answers(s3, bucket, key):
    """Write the canary with the Job's credentials, read it unsigned four ways, delete it (the same
    steps as ``_s3.canary_answers``); the delete's answer is returned, never dropped."""
    prefix = exposure.key_prefix(key)
    written = _reply(s3, "PUT", bucket, key, body=exposure.CANARY_BODY)[:2]
    probes, deleted = {}, None
    try:
        if 200 <= written[0] < 300:
            probes["get"] = _reply(s3, "GET", bucket, key, anonymous=True)[:2]
            probes["range_get"] = _reply(s3, "GET", bucket, key, anonymous=True, headers=RANGE)[:2]
            probes["head"] = _reply(s3, "HEAD", bucket, key, anonymous=True)[:2]
            probes["list"] = _reply(
                s3, "GET", bucket, "", {"list-type": "2", "prefix": prefix}, anonymous=True
            )[:2]
    finally:
        if written[0] == 0 or 200 <= written[0] < 300:
            deleted = _reply(s3, "DELETE", bucket, key)[:2]
    return {"key": key, "written": written, "probes": probes, "deleted": deleted}


def read_facts(opts, progress):
    """The image-facts document of the bytes about to move, read from them before anything is converted or
    sent: what the disk holds decides, whatever the run declares. No dissect, no export."""
    progress.say("phase facts: %s" % opts.source)
    try:
        return _disk.read_facts_or_why(opts.source, None if opts.os_family == "auto" else opts.os_family)
    except _disk.MissingLibrary as exc:
        raise ExportError(
            "%s, so the image's facts (keys, passwords) cannot be read from %s: build the export image from "
            "images/golden-export/Containerfile, which installs the dissect packages; nothing was exported"
            % (exc.msg, opts.source),
            "facts",
        ) from exc


def prove_destination(s3, opts, progress, sensitive):
    """Before the first byte: ``exposure.prove_private`` on the bucket's controls and an anonymously read
    canary under the key's prefix; ExportError ``exposed`` when the bytes may not go there."""
    prefix = exposure.key_prefix(opts.key)
    progress.say("phase prove: s3://%s/%s" % (opts.bucket, prefix))
    controls = read_controls(s3, opts.bucket)
    canary = canary_answers(s3, opts.bucket, exposure.canary_key(opts.key, os.urandom(8).hex()))
    proof = exposure.prove_private(opts.bucket, prefix, controls, canary, sensitive)
    progress.say("exposure: %s" % json.dumps({k: proof[k] for k in ("verdict", "public_by", "probes")}))
    if proof["canary_problem"]:
        progress.say("warning: " + proof["canary_problem"])
    if not proof["allowed"]:
        refused = ExportError(proof["refusal"], "exposed")
        refused.fields["exposure"] = proof
        raise refused
    return proof


def export(opts, environ, progress):
    """The whole export; an ExportError raised once the facts are read carries them (and the reasons)."""
    started = time.monotonic()
    access, secret = environ.get("EXPORT_ACCESS_KEY_ID"), environ.get("EXPORT_SECRET_ACCESS_KEY")
    if not access or not secret:
        raise ExportError(
            "EXPORT_ACCESS_KEY_ID and EXPORT_SECRET_ACCESS_KEY are not set: the credentials Secret lacks "
            "the keys",
            "input",
        )
    s3 = S3(
        opts.endpoint,
        opts.region,
        access,
        secret,
        environ.get("EXPORT_SESSION_TOKEN"),
        opts.ca_file,
        opts.insecure,
    )
    facts = read_facts(opts, progress)
    sensitive = exposure.sensitive_reasons(facts=facts, facts_reasons=opts.sensitive_reason)
    try:
        return _export(s3, opts, progress, started, facts, sensitive)
    except ExportError as exc:
        exc.fields.update(image_facts=facts, sensitive_reasons=sensitive)
        raise


def _export(s3, opts, progress, started, facts, sensitive):
    where = "s3://%s/%s" % (opts.bucket, opts.key)
    qcow2 = os.path.join(opts.scratch, opts.filename)
    # A free key is proven private (or its bytes not sensitive) before the conversion: a refusal costs
    # seconds, and nothing of the image is written anywhere before it.
    proof = None
    if held(s3, opts.bucket, opts.key) is None:
        proof = prove_destination(s3, opts, progress, sensitive)
    convert(opts.source, qcow2, opts.compress, progress)
    converted = time.monotonic()
    result = {
        "convert_seconds": round(converted - started, 3),
        "image_facts": facts,
        "sensitive_reasons": sensitive,
    }
    if proof is not None:
        result["exposure"] = proof
    found = held(s3, opts.bucket, opts.key)
    if found is not None:
        digest, size = file_sha256(qcow2, progress)
        if found.get(META["sha256"]) == digest:
            if exposure.held_needs_proof(found, sensitive):
                refusal = exposure.held_refusal(opts.bucket, opts.key, object_answers(s3, opts), sensitive)
                if refusal:
                    raise ExportError(refusal, "exposed")
            return dict(
                result,
                sha256=digest,
                size=size,
                read_bytes=size,
                action="skip",
                bytes_moved=0,
                seconds=round(time.monotonic() - started, 3),
            )
        raise ExportError(
            "%s already holds another object (sha256 %s, from %s); an exported key holds one content for "
            "ever: export under a new key (a new date)"
            % (where, found.get(META["sha256"]) or "unknown", found.get(META["source"]) or "unknown"),
            "key_exists",
        )
    if proof is None:  # the key was held, then freed meanwhile
        result["exposure"] = proof = prove_destination(s3, opts, progress, sensitive)
    size = os.path.getsize(qcow2)
    staging = opts.staging_key or "%s.partial-%s" % (opts.key, os.urandom(6).hex())
    parts, digest, read = stage(s3, opts, qcow2, staging, size, progress)
    try:
        copied = publish(s3, opts, staging, digest, read, progress, sensitive)
        verify(s3, opts, digest, read)
    except BaseException as exc:
        _gone, note = remove_staging(s3, opts.bucket, staging)
        if isinstance(exc, ExportError):
            exc.msg = "%s; %s" % (exc.msg, note)
        raise
    gone, note = remove_staging(s3, opts.bucket, staging)
    if not gone:
        raise ExportError("exported %s, but %s" % (where, note), "staging")
    return dict(
        result,
        sha256=digest,
        size=read,
        read_bytes=read,
        action="upload",
        parts=parts,
        copy_parts=copied,
        part_size=opts.part_size,
        bytes_moved=read,
        seconds=round(time.monotonic() - started, 3),
        upload_seconds=round(time.monotonic() - converted, 3),
    )


def verify(s3, opts, digest, size):
    """The final key holds ``size`` bytes with this sha256 metadata, or it is deleted again."""
    where = "s3://%s/%s" % (opts.bucket, opts.key)
    stored = held(s3, opts.bucket, opts.key) or {}
    if stored.get(META["sha256"]) != digest or str(stored.get("content-length")) != str(size):
        s3.request("DELETE", opts.bucket, opts.key, what="DELETE " + where)
        raise ExportError(
            "%s was stored with sha256 %s and %s bytes, not %s and %d; it was deleted again"
            % (where, stored.get(META["sha256"]), stored.get("content-length"), digest, size),
            "s3",
        )


def remove_staging(s3, bucket, staging):
    """Delete the staging object: ``(gone, a sentence saying so)``."""
    where = "s3://%s/%s" % (bucket, staging)
    try:
        answer = s3.request("DELETE", bucket, staging, what="DELETE " + where)
        if answer.status not in (200, 204):
            raise ExportError("DELETE %s: HTTP %d %s" % (where, answer.status, answer.error_code()), "s3")
    except ExportError as exc:
        return False, "the staging object %s could not be deleted: %s" % (where, exc.msg)
    return True, "the staging object %s was deleted" % where


def parser():
    p = argparse.ArgumentParser(prog="golden-export", description=__doc__.split("\n", maxsplit=1)[0])
    p.add_argument("--source", required=True, help="the sealed disk: a device or disk.img")
    p.add_argument("--scratch", required=True, help="directory the qcow2 is written to")
    p.add_argument("--filename", required=True)
    p.add_argument("--no-compress", dest="compress", action="store_false")
    p.add_argument("--endpoint", required=True)
    p.add_argument("--region", default="us-east-1")
    p.add_argument("--bucket", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--staging-key", default="", help="where the parts go first (default: KEY.partial-RANDOM)")
    p.add_argument("--part-size", type=int, default=16 * 1024 * 1024)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--content-type", default="application/x-qemu-disk")
    p.add_argument("--source-url", required=True)
    p.add_argument("--source-uid", default="")
    p.add_argument("--exported-at", required=True)
    p.add_argument("--ca-file", default="")
    p.add_argument("--insecure", action="store_true")
    p.add_argument(
        "--os-family",
        choices=("auto", "windows", "linux"),
        default="auto",
        help="the OS whose facts are read (auto: from the partitions)",
    )
    p.add_argument(
        "--sensitive-reason",
        action="append",
        default=[],
        help="a declared reason the image's bytes are sensitive (a licence); any makes the export refuse a "
        "destination not proven private, as the reasons read from the image do",
    )
    return p


def main(argv=None, environ=None, out=sys.stdout):
    opts = parser().parse_args(argv)
    progress = Progress(out)
    try:
        result = export(opts, os.environ if environ is None else environ, progress)
        code = 0
    except ExportError as exc:
        result, code = dict(exc.fields, error=exc.msg, code=exc.code), 1
    out.write(MARKER + json.dumps(result, sort_keys=True) + "\n")
    out.flush()
    return code


def parse_log(text):
    """The result the program printed last, or None."""
    for line in reversed((text or "").splitlines()):
        if line.startswith(MARKER):
            try:
                return json.loads(line[len(MARKER) :])
            except ValueError:
                return None
    return None


if __name__ == "__main__":
    raise SystemExit(main())
