# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Mirror I/O: read a source (file or URL), upload it straight to its final key, verify, then publish.

The final key holds the sha256 of the content, so the digest is known before the first byte is sent:
given by the caller, or read from a local file in a first pass, or taken while a stream is spooled to
a temporary file. The bytes then go to the final key as a multipart upload (parts in parallel) while
the sha256 of the whole stream is computed again; only when that digest matches is the upload
completed, with ``If-None-Match: *`` so an existing object is never replaced. Until
CompleteMultipartUpload there is no object under the key at all, so any failure just aborts the upload.
An image smaller than one part is a single PutObject.

Each body is hashed once more, with sha256: that digest is sent as its flexible checksum
(ChecksumSHA256, a signed header, which the server recomputes over the body and refuses on a
mismatch), so it stands for the body in the signature, botocore does not hash the body again and no
md5 is computed. A server that does not answer
with the checksum (it does not keep flexible checksums) gets the older proof instead: the md5 of the
body, compared with the ETag it returned. The stored object is then checked with a HEAD (size, the
composite checksum or the ETag, metadata) without reading it back; one that fails is deleted.

Servers without conditional writes ignore ``If-None-Match``. The window it closes is the time between
the HEAD before the upload and its completion; as the key names the sha256 that was verified before
completion, a write in that window can only put the same bytes back (with its own ``mirrored-at``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import os
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket import mirror
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import redact, rounds
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common._progress_file import append_line
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance
from ansible_collections.goldenimage.pipeline.plugins.module_utils.s3._s3 import (
    call_failed,
    error_code,
    sign_with_sent_checksum,
)

READ_CHUNK = 8 * mirror.MIB
# CopyObject copies at most 5 GiB; a larger object is copied in parts of this size (UploadPartCopy).
COPY_PART_LIMIT = 5 * 1024 * mirror.MIB
_MISSING = ("404", "NoSuchKey", "NotFound")
# An object appeared under the key (412), or another conditional write to it is in flight (409).
_EXISTS = ("PreconditionFailed", "412", "ConditionalRequestConflict", "409")


class SourceError(PipelineError):
    """The upstream image could not be read completely."""


class TransferError(PipelineError):
    """An upload failed; ``cleanup`` (a result field) says what was removed so nothing partial remains."""

    def __init__(self, msg, cleanup=None, **fields):
        super().__init__(msg, cleanup=cleanup or [], **fields)

    @property
    def cleanup(self):
        return self.fields["cleanup"]

    @cleanup.setter
    def cleanup(self, value):
        self.fields["cleanup"] = value or []


class KeyExists(TransferError):
    """The final key holds an object already (found by the HEAD, or refused by ``If-None-Match``)."""

    def __init__(self, bucket, key, when, cleanup=None):
        super().__init__(
            "s3://%s/%s %s; mirrored keys are never overwritten, nothing was written" % (bucket, key, when),
            cleanup,
            key=key,
        )
        self.key = key


# Sources -------------------------------------------------------------------------------------------


class Source:
    """A readable upstream image; ``read(n)`` returns exactly n bytes until the end.

    ``name`` is how messages call it: a URL is redacted (no user-info, no signature) before it is kept.
    """

    def __init__(self, stream, size, name, progress=None):
        self.stream = stream
        self.size = size
        self.name = redact.redact_url(name)
        self.read_bytes = 0
        # progress(source) after every read; ``phase`` says what the reading is for (hash, copy, upload).
        self.progress = progress
        self.phase = "read"

    def read(self, count):
        pieces, wanted = [], count
        while wanted > 0:
            try:
                piece = self.stream.read(wanted)
            except Exception as exc:  # http.client.IncompleteRead, a reset connection, a read timeout
                raise SourceError(
                    "reading %s failed after %d bytes: %s"
                    % (self.name, self.read_bytes, redact.redact_message(str(exc)))
                ) from exc
            if not piece:
                break
            pieces.append(piece)
            wanted -= len(piece)
            self.read_bytes += len(piece)
        data = b"".join(pieces)
        if self.progress is not None:
            self.progress(self)
        if len(data) < count and self.size is not None and self.read_bytes != self.size:
            raise SourceError(
                "%s ended after %d of the %d bytes it announced" % (self.name, self.read_bytes, self.size)
            )
        return data

    def rewind(self):
        """Start again from the first byte; False when the stream cannot seek (an HTTP response)."""
        seekable = getattr(self.stream, "seekable", None)
        if not (seekable and seekable()):
            return False
        self.stream.seek(0)
        self.read_bytes = 0
        return True

    def close(self):
        self.stream.close()


def open_source(path=None, url=None, timeout=60, validate_certs=True, headers=None, progress=None):
    """A Source for a local file or an http(s) URL (read as a stream, never held whole in memory);
    ``progress(source)`` is called after each read."""
    if path:
        try:
            stream = open(path, "rb")  # noqa: SIM115 - the Source owns it and closes it
        except OSError as exc:
            raise SourceError("cannot open %s: %s" % (path, exc)) from exc
        return Source(stream, os.fstat(stream.fileno()).st_size, path, progress)
    from ansible.module_utils.urls import open_url

    request_headers = {"Accept-Encoding": "identity"}
    request_headers.update(headers or {})
    try:
        response = open_url(
            url,
            timeout=timeout,
            validate_certs=validate_certs,
            headers=request_headers,
            http_agent="goldenimage.pipeline-os-mirror",
        )
    except Exception as exc:  # HTTPError, URLError, socket errors: all mean "cannot read the source"
        raise SourceError("GET %s: %s" % (redact.redact_url(url), redact.redact_message(str(exc)))) from exc
    length = response.headers.get("Content-Length")
    return Source(response, int(length) if length and length.isdigit() else None, url, progress)


def hash_source(source):
    """``(sha256 hex, size)`` of a source, read to its end."""
    source.phase = "hash"
    digest = hashlib.sha256()
    while True:
        chunk = source.read(READ_CHUNK)
        digest.update(chunk)
        if len(chunk) < READ_CHUNK:
            return digest.hexdigest(), source.read_bytes


def spool_source(source, directory=None):
    """Copy a stream to an unnamed temporary file while hashing it: ``(Source of the copy, sha256 hex)``.

    The copy is what gets uploaded, so the bytes sent are the bytes hashed, and the upstream is read once.
    """
    stream = tempfile.TemporaryFile(prefix="os-mirror-", dir=directory)  # noqa: SIM115 - returned open
    source.phase = "copy"
    digest = hashlib.sha256()
    try:
        while True:
            chunk = source.read(READ_CHUNK)
            digest.update(chunk)
            stream.write(chunk)
            if len(chunk) < READ_CHUNK:
                break
        stream.seek(0)
    except BaseException:
        stream.close()
        raise
    return Source(stream, source.read_bytes, source.name, source.progress), digest.hexdigest()


# Bucket reads --------------------------------------------------------------------------------------


def head(client, bucket, key):
    """HEAD of an object (with its checksum when the server keeps one), or None when it is absent."""
    try:
        return client.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    except Exception as exc:
        if error_code(exc) in _MISSING:
            return None
        raise


def list_objects(client, bucket, prefix=""):
    """Every object under ``prefix`` as ``{key, size}``, in key order (a bucket created a moment ago
    is waited for by the client's retries: ``_s3.NOT_YET_VISIBLE``)."""
    found = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        found.extend({"key": obj["Key"], "size": obj["Size"]} for obj in page.get("Contents") or [])
    return found


def read_object(client, bucket, key):
    """The body of an object, or None when it is absent."""
    try:
        return client.get_object(Bucket=bucket, Key=key)["Body"].read()
    except Exception as exc:
        if error_code(exc) in _MISSING:
            return None
        raise


def hash_object(client, bucket, key, chunk=8 * 1024 * 1024):
    """The sha256 (hex) of an object's stored bytes, read once in chunks."""
    digest = hashlib.sha256()
    body = client.get_object(Bucket=bucket, Key=key)["Body"]
    for piece in iter(lambda: body.read(chunk), b""):
        digest.update(piece)
    return digest.hexdigest()


def put_small(client, bucket, key, body, content_type="text/plain", **extra):
    """Store a small object (a signature, a provenance envelope, the catalog) in one PutObject with its
    sha256 checksum; ``extra``: more PutObject fields (the catalog's CacheControl)."""
    client.put_object(
        Bucket=bucket,
        Key=key,
        Body=body,
        ContentType=content_type,
        ChecksumSHA256=mirror.b64(hashlib.sha256(body).digest()),
        **extra,
    )


def pending_uploads(client, bucket, prefix=""):
    """Keys of the multipart uploads under ``prefix`` that were neither completed nor aborted."""
    answer = client.list_multipart_uploads(Bucket=bucket, Prefix=prefix)
    return [upload["Key"] for upload in answer.get("Uploads") or []]


# Multipart uploads ---------------------------------------------------------------------------------


class Multipart:
    """One multipart upload to ``key``, created with ``create`` (Metadata, ContentType, ...): ``complete``
    with ``If-None-Match: *`` (an object that appeared under the key meanwhile wins: KeyExists), or
    ``abort``. Upload sends it parts of bytes, ``copy_object`` parts copied from another object."""

    def __init__(self, client, bucket, key, **create):
        self.client, self.bucket, self.key = client, bucket, key
        self.upload_id = client.create_multipart_upload(Bucket=bucket, Key=key, **create)["UploadId"]
        self.completed = False

    def complete(self, parts):
        """``parts``: the CompleteMultipartUpload entries (PartNumber, ETag, checksums), in order."""
        _never_replacing(
            self.bucket,
            self.key,
            lambda: self.client.complete_multipart_upload(
                Bucket=self.bucket,
                Key=self.key,
                UploadId=self.upload_id,
                MultipartUpload={"Parts": parts},
                IfNoneMatch="*",
            ),
        )
        self.completed = True

    def abort(self):
        self.client.abort_multipart_upload(Bucket=self.bucket, Key=self.key, UploadId=self.upload_id)


def _never_replacing(bucket, key, call):
    """``call()``, a write sent with ``If-None-Match: *``; its refusal raises KeyExists."""
    try:
        return call()
    except Exception as exc:
        if error_code(exc) in _EXISTS:
            raise KeyExists(bucket, key, "appeared during the upload (If-None-Match)") from exc
        raise


def copy_object(client, bucket, source_key, key, size, metadata, content_type, progress=None):
    """Make ``key`` a server-side copy of ``source_key`` (``size`` bytes) that carries ``metadata`` and
    ``content_type``, never replacing an object (``If-None-Match: *``): CopyObject up to
    COPY_PART_LIMIT bytes, above it a multipart upload of UploadPartCopy ranges. ``progress(bytes
    copied)`` after each part. Returns the number of parts copied (1 for CopyObject). A failure raises
    TransferError, with the aborted multipart upload in its ``cleanup``; KeyExists passes through."""
    source = {"Bucket": bucket, "Key": source_key}
    where = "s3://%s/%s" % (bucket, key)
    report = progress or (lambda _done: None)
    upload = None
    try:
        if size <= COPY_PART_LIMIT:
            _never_replacing(
                bucket,
                key,
                lambda: client.copy_object(
                    Bucket=bucket,
                    Key=key,
                    CopySource=source,
                    Metadata=metadata,
                    MetadataDirective="REPLACE",
                    ContentType=content_type,
                    IfNoneMatch="*",
                    # The copy's own checksum, of its whole body (the staged parts' was a composite).
                    ChecksumAlgorithm="SHA256",
                ),
            )
            report(size)
            return 1
        upload = Multipart(client, bucket, key, Metadata=metadata, ContentType=content_type)
        parts = []
        for number, start in enumerate(range(0, size, COPY_PART_LIMIT), 1):
            end = min(size, start + COPY_PART_LIMIT) - 1
            answer = client.upload_part_copy(
                Bucket=bucket,
                Key=key,
                UploadId=upload.upload_id,
                PartNumber=number,
                CopySource=source,
                CopySourceRange="bytes=%d-%d" % (start, end),
            )
            parts.append({"PartNumber": number, "ETag": answer["CopyPartResult"]["ETag"]})
            report(end + 1)
        upload.complete(parts)
        return len(parts)
    except BaseException as exc:
        cleanup = []
        if upload is not None and not upload.completed:
            cleanup = _run_steps([("abort the upload to " + where, upload.abort)])
        if isinstance(exc, KeyExists):
            exc.cleanup = cleanup
            raise
        if not isinstance(exc, Exception):
            raise
        raise TransferError(
            "copy s3://%s/%s to %s: %s" % (bucket, source_key, where, redact.redact_message(str(exc))),
            cleanup,
        ) from exc


def _run_steps(steps):
    """Run the cleanup ``steps`` (``(what, call)``): one line per thing removed or not."""
    done = []
    for what, call in steps:
        try:
            call()
            done.append(what)
        except Exception as exc:
            if error_code(exc) in _MISSING + ("NoSuchUpload",):
                continue
            done.append("could not %s: %s" % (what, exc))
    return done


# Upload --------------------------------------------------------------------------------------------


class Upload:
    """One verified publication of a source under its final key; ``run()`` returns the transfer report.

    ``destination(sha256 hex) -> (key, metadata)`` names the key. ``options``: ``expected_sha256`` (the
    digest when known: the source is then read once), ``streamed`` (the key and metadata do not depend
    on the digest: ``destination(None)``, the source is read once and the report carries the sha256
    of what was sent), ``content_type``, ``spool_dir`` (where a stream without a known digest is
    copied first; the default temporary directory otherwise).
    """

    def __init__(self, client, bucket, source, destination, part_size, concurrency=4, **options):
        self.client = sign_with_sent_checksum(client)
        self.bucket = bucket
        self.source = source
        self.destination = destination
        self.part_size = int(part_size)
        self.concurrency = max(1, int(concurrency))
        self.content_type = options.get("content_type") or "application/octet-stream"
        expected = options.get("expected_sha256")
        self.expected = mirror.normalize_sha256(expected) if expected else None
        self.spool_dir = options.get("spool_dir")
        self.streamed = bool(options.get("streamed"))
        self.key = None
        self.metadata = {}
        self.upload = None
        self.written = False
        self.verified = False
        self.parts = []
        self.verified_by = []
        self.action = "start the upload"
        self._spool = None

    def run(self):
        try:
            return self._run()
        except BaseException as exc:
            cleanup = self.cleanup()
            if isinstance(exc, KeyExists):
                exc.cleanup = cleanup
                raise
            if not isinstance(exc, Exception):
                raise
            raise TransferError("%s: %s" % (self.action, redact.redact_message(str(exc))), cleanup) from exc
        finally:
            if self._spool is not None:
                self._spool.close()

    def _run(self):
        source, digest, digest_from = self._digest_first()
        self.key, self.metadata = self.destination(digest)
        metadata = self.metadata
        where = "s3://%s/%s" % (self.bucket, self.key)
        self.action = "check " + where
        if head(self.client, self.bucket, self.key) is not None:
            raise KeyExists(self.bucket, self.key, "already exists")
        self.action = "upload %s to %s" % (source.name, where)
        source.phase = "upload"
        first = source.read(self.part_size)
        if len(first) < self.part_size or source.size == len(first):
            method = "put"
            digest = self._put(source, first, digest, metadata)
        else:
            method = "multipart"
            digest = self._multipart(source, first, digest, metadata)
        return {
            "key": self.key,
            "sha256": digest,
            "size": source.read_bytes,
            "method": method,
            "parts": max(1, len(self.parts)),
            "part_size": self.part_size,
            "bytes_moved": source.read_bytes,
            "digest_from": digest_from,
            "verified_by": self.verified_by,
        }

    def _digest_first(self):
        """``(source to upload, sha256 hex, how the digest was known)``: the key needs it up front."""
        if self.expected:
            return self.source, self.expected, "given"
        if self.streamed:
            return self.source, None, "streamed"
        name = self.source.name
        if self.source.rewind():
            self.action = "hash " + name
            digest = hash_source(self.source)[0]
            self.source.rewind()
            return self.source, digest, "read first"
        self.action = "copy %s to a temporary file" % name
        self._spool, digest = spool_source(self.source, self.spool_dir)
        return self._spool, digest, "spooled"

    def _check_streamed(self, source, digest, streamed):
        """The sha256 of the bytes sent must be the one in the key, before anything is published; returns
        it (the digest of a ``streamed`` upload)."""
        self.action = "verify %s" % source.name
        if self.expected:
            mirror.check_digest(source.name, self.expected, streamed)
        elif digest is not None and streamed != digest:
            raise TransferError(
                "%s changed while it was uploaded: sha256 %s before, %s now; nothing was written under a "
                "final key" % (source.name, digest, streamed)
            )
        self._verified("sha256 of the whole stream (computed while it was sent)")
        return streamed

    # one PutObject ------------------------------------------------------------------------------

    def _put(self, source, body, digest, metadata):
        sha = hashlib.sha256(body).digest()
        digest = self._check_streamed(source, digest, sha.hex())
        self.action = "put s3://%s/%s" % (self.bucket, self.key)
        answer = _never_replacing(
            self.bucket,
            self.key,
            lambda: self.client.put_object(
                Bucket=self.bucket,
                Key=self.key,
                Body=body,
                ChecksumAlgorithm="SHA256",
                ChecksumSHA256=mirror.b64(sha),
                Metadata=metadata,
                ContentType=self.content_type,
                IfNoneMatch="*",
            ),
        )
        self.written = True
        part = self._check_body(answer, body, sha, "the object")
        self._verify(len(body), part["md5"] and part["md5"].hex(), raw_sha256=sha)
        return digest

    # multipart ----------------------------------------------------------------------------------

    def _multipart(self, source, first, digest, metadata):
        self.upload = Multipart(
            self.client,
            self.bucket,
            self.key,
            Metadata=metadata,
            ContentType=self.content_type,
            ChecksumAlgorithm="SHA256",
        )
        whole = self._upload_parts(source, first)
        digest = self._check_streamed(source, digest, whole.hexdigest())
        self.action = "complete the upload of s3://%s/%s" % (self.bucket, self.key)
        # Each part's checksum as sent, whether or not the server answered one: S3 refuses to complete an
        # upload created with a SHA256 checksum without them (InvalidRequest), and a server that keeps no
        # flexible checksums ignores them.
        parts = [
            {"PartNumber": p["number"], "ETag": p["etag"], "ChecksumSHA256": mirror.b64(p["sha256"])}
            for p in self.parts
        ]
        self.upload.complete(parts)
        self.written = True
        md5s = [p["md5"] for p in self.parts]
        etag = mirror.multipart_etag(md5s) if all(md5s) else None
        composite = None
        if all(p["checksum"] for p in self.parts):
            composite = mirror.composite_sha256([p["sha256"] for p in self.parts])
        self._verify(source.read_bytes, etag, composite=composite)
        return digest

    def _upload_parts(self, source, first):
        """Upload ``first`` and the rest of ``source`` as parts; the sha256 of everything read."""
        whole = hashlib.sha256()
        # At most `concurrency` parts uploading and one being read: memory stays (concurrency+1) parts.
        slots = threading.Semaphore(self.concurrency + 1)
        failures, futures = [], []

        def done(future):
            if not future.cancelled() and future.exception() is not None:
                failures.append(future.exception())
            slots.release()

        pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="os-mirror-part")
        try:
            slots.acquire()
            chunk, number = first, 0
            while chunk:
                number += 1
                if number > mirror.MAX_PARTS:
                    raise TransferError(
                        "%s is larger than %d parts of %d bytes; set a larger part_size"
                        % (source.name, mirror.MAX_PARTS, self.part_size)
                    )
                whole.update(chunk)
                future = pool.submit(self._upload_part, number, chunk)
                future.add_done_callback(done)
                futures.append(future)
                if len(chunk) < self.part_size:
                    break
                slots.acquire()
                if failures:
                    raise failures[0]
                chunk = source.read(self.part_size)
                if not chunk:
                    slots.release()
            self.parts = [future.result() for future in futures]
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        return whole

    def _upload_part(self, number, chunk):
        sha = hashlib.sha256(chunk).digest()
        # The server refuses a part whose bytes do not match the (signed) checksum.
        answer = self.client.upload_part(
            Bucket=self.bucket,
            Key=self.key,
            UploadId=self.upload.upload_id,
            PartNumber=number,
            Body=chunk,
            ChecksumAlgorithm="SHA256",
            ChecksumSHA256=mirror.b64(sha),
        )
        part = self._check_body(answer, chunk, sha, "part %d" % number)
        return dict(part, number=number, etag=answer["ETag"], sha256=sha, size=len(chunk))

    # verification -------------------------------------------------------------------------------

    def _check_body(self, answer, body, sha, what):
        """The server's word on one body: its ChecksumSHA256 when it keeps one, else the md5 in its ETag.

        Returns ``{"checksum": what the server answered or None, "md5": raw md5 or None}``; the md5 is
        computed only for a server that answered no checksum.
        """
        checksum = answer.get("ChecksumSHA256")
        if checksum:
            if mirror.checksum_value(checksum) != mirror.b64(sha):
                raise TransferError(
                    "%s: the server stored sha256 %s, not the %s sent" % (what, checksum, mirror.b64(sha))
                )
            self._verified("sha256 of every body (ChecksumSHA256 signed, checked by the server)")
            return {"checksum": checksum, "md5": None}
        md5 = hashlib.md5(body, usedforsecurity=False).digest()
        self._check_etag(answer.get("ETag"), md5.hex(), what)
        return {"checksum": None, "md5": md5}

    def _check_etag(self, etag, expected, what):
        # An encrypted (SSE-KMS, SSE-C) object's ETag is not its md5; Content-MD5 was checked anyway.
        if mirror.is_md5_etag(etag):
            if mirror.etag_value(etag) != expected:
                raise TransferError("%s: the server stored md5 %s, not the %s sent" % (what, etag, expected))
            self._verified("md5 of every body (no checksum answered; ETag compared)")
        else:
            raise TransferError(
                "%s: the server answered neither a ChecksumSHA256 nor an md5 ETag (%s), so nothing proves"
                " what it stored; use a server that keeps flexible checksums" % (what, etag)
            )

    def _verify(self, size, etag, raw_sha256=None, composite=None):
        """A HEAD of the stored object: size, ETag from the parts' md5s (``etag``, when they were
        computed), the sha256 metadata sent, checksum (``raw_sha256`` of a single put, ``composite`` of
        parts)."""
        where = "s3://%s/%s" % (self.bucket, self.key)
        self.action = "verify " + where
        answer = head(self.client, self.bucket, self.key)
        if answer is None:
            raise TransferError("the completed object is not there")
        if answer.get("ContentLength") != size:
            raise TransferError("it holds %s bytes, not the %d sent" % (answer.get("ContentLength"), size))
        stored = answer.get("ETag")
        if etag and mirror.is_md5_etag(stored):
            if mirror.etag_value(stored) != etag:
                raise TransferError("its ETag is %s, not %s from the md5 of what was sent" % (stored, etag))
            self._verified("ETag of the stored object (md5 of its parts)")
        recorded = (answer.get("Metadata") or {}).get(mirror.META_SHA256)
        sent = self.metadata.get(mirror.META_SHA256)
        if recorded != sent:
            raise TransferError("its metadata %s is %r, not %s" % (mirror.META_SHA256, recorded, sent))
        checksum = answer.get("ChecksumSHA256")
        if raw_sha256 is not None and checksum:
            if mirror.checksum_value(checksum) != mirror.b64(raw_sha256):
                raise TransferError(
                    "the server's sha256 of it is %s, not %s" % (checksum, mirror.b64(raw_sha256))
                )
            self._verified("sha256 of the stored object (ChecksumSHA256)")
        if composite is not None:
            if not checksum:
                raise TransferError(
                    "its HEAD carries no ChecksumSHA256, though every part was stored with one"
                )
            if mirror.checksum_value(checksum) != composite:
                raise TransferError(
                    "its composite sha256 is %s, not %s from the parts sent" % (checksum, composite)
                )
            self._verified("composite sha256 of the stored object (ChecksumSHA256 of its parts)")
        self.verified = True

    def _verified(self, what):
        if what not in self.verified_by:
            self.verified_by.append(what)

    # cleanup ------------------------------------------------------------------------------------

    def cleanup(self):
        """Abort or delete whatever this upload left; returns one line per thing removed or not."""
        steps = []
        if self.upload is not None and not self.upload.completed:
            steps.append(("abort the upload to " + self.key, self.upload.abort))
        if self.written and not self.verified:
            steps.append(("delete unverified " + self.key, self._delete))
        return _run_steps(steps)

    def _delete(self):
        self.client.delete_object(Bucket=self.bucket, Key=self.key)


# The runner both upload modules share -------------------------------------------------------------


class UploadRun:
    """A module run around one Upload: the result with its timings, returned or attached to the error.

    Subclasses write ``_run()`` (observe, decide with ``mirror``, upload); ``run()`` returns the result,
    and a PipelineError leaves with the result fields (``changed``, ``bytes_moved``, ``seconds``) added.
    """

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.result = {"changed": False, "bytes_moved": 0, "seconds": 0.0, "throughput_mib_s": 0.0}
        self.started = time.monotonic()
        self.transfer_seconds = None
        self.signing_key = None

    def run(self):
        try:
            self._run()
        except PipelineError as exc:
            self.stamp()
            for name, value in self.result.items():
                exc.fields.setdefault(name, value)
            raise
        return self.stamp()

    def stamp(self):
        """The result with its ``seconds``: the transfer's when there was one, else the whole run's."""
        if self.transfer_seconds is None:
            self.result["seconds"] = round(time.monotonic() - self.started, 3)
        return self.result

    def progress(self):
        """What a Source calls after each read: a line in the action plugin's progress file every 10 % and
        every 30 s of each phase (hash, copy, upload), or None without a progress file."""
        path = self.params.get("progress_file")
        if not path:
            return None
        report = rounds.TransferProgress(None)

        def seen(source):
            report.name = source.name
            line = report.seen(source.read_bytes, source.size, time.monotonic() - self.started, source.phase)
            if line:
                append_line(path, line)

        return seen

    def sign_beside(self, client, bucket, key, digest, statement):
        """``sign_beside`` with this run's module, result and ``self.signing_key``."""
        sign_beside(self.module, self.result, client, bucket, key, digest, statement, self.signing_key)

    def set_diff(self, before, after):
        if self.module._diff:
            self.result["diff"] = {"before": before or {}, "after": after or {}}

    def uploaded(self, report, seconds, source_name):
        """Record a finished Upload's report, its time and throughput, and the diff of the new object."""
        self.result.update(report)
        self.transfer_seconds = round(seconds, 3)
        self.result.update(
            changed=True,
            seconds=self.transfer_seconds,
            throughput_mib_s=mirror.throughput_mib_s(report["bytes_moved"], seconds),
        )
        self.set_diff({}, mirror.object_summary(report["key"], report["size"], report["sha256"], source_name))


def read_companions(client, bucket, key):
    """The texts of ``<key>.sig`` and ``<key>.intoto.jsonl`` in ``bucket`` (None for one that is absent)."""
    texts = []
    for name in provenance.companions(key):
        try:
            body = read_object(client, bucket, name)
        except Exception as exc:
            raise call_failed("read s3://%s/%s" % (bucket, name), exc, bucket=bucket) from exc
        texts.append(None if body is None else body.decode("utf-8", "replace"))
    return texts


def sign_beside(module, result, client, bucket, key, digest, statement, signing_key):
    """Write ``<key>.sig`` and ``<key>.intoto.jsonl`` beside the object with ``signing_key`` unless
    the ones stored verify for its digest with that key and record the same build
    (``provenance.plan_signing``); the bytes are not read again, the digest is the one the upload
    verified. Sets ``result["signed"]``; in check mode nothing is written. Shared by every
    producer that stores in a bucket (the mirror, an exported golden, the export Job's controller side)."""
    started = time.monotonic()
    names = provenance.companions(key)
    before = read_companions(client, bucket, key)
    plan = signing.signing_plan(signing_key, digest, statement, before[0], before[1])
    texts = (plan["signature_text"], plan["envelope_text"])
    writes = [(name, text) for name, text in zip(names, texts, strict=True) if text is not None]
    result["signed"] = {
        "key_id": plan["key_id"],
        "signature_key": names[0],
        "provenance_key": names[1],
        "signature_changed": plan["signature"],
        "provenance_changed": plan["provenance"],
        "provenance": provenance.summary(plan["statement"]),
    }
    if writes:
        result["changed"] = True
    if not module.check_mode:
        for name, text in writes:
            try:
                put_small(client, bucket, name, text.encode("utf-8"))
            except Exception as exc:
                raise call_failed("write s3://%s/%s" % (bucket, name), exc, bucket=bucket) from exc
    result["signed"]["seconds"] = round(time.monotonic() - started, 3)
