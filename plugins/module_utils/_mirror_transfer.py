# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Mirror I/O: read a source (file or URL) once, upload it in parallel parts, verify, then publish.

The bytes go to a temporary key under ``.incoming/`` as a multipart upload; each part carries its md5
and sha256 so the server checks what it received, and the answers are compared with what was sent.
Only when the whole upload is verified is it copied, server side, to its final key, and the final
object is verified again. Any failure aborts the upload and deletes the temporary key (and a final
object that failed verification), so no partial object is ever left under a final key.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.goldenimage.pipeline.plugins.module_utils import mirror
from ansible_collections.goldenimage.pipeline.plugins.module_utils._s3 import error_code, jittered_backoff

READ_CHUNK = 8 * mirror.MIB
_MISSING = ("404", "NoSuchKey", "NotFound")


class SourceError(Exception):
    """The upstream image could not be read completely."""


class TransferError(Exception):
    """An upload failed; ``cleanup`` says what was removed so nothing partial remains."""

    def __init__(self, msg, cleanup=None):
        super().__init__(msg)
        self.cleanup = cleanup or []


# Sources -------------------------------------------------------------------------------------------


class Source:
    """A readable upstream image; ``read(n)`` returns exactly n bytes until the end."""

    def __init__(self, stream, size, name):
        self.stream = stream
        self.size = size
        self.name = name
        self.read_bytes = 0

    def read(self, count):
        pieces, wanted = [], count
        while wanted > 0:
            try:
                piece = self.stream.read(wanted)
            except Exception as exc:  # http.client.IncompleteRead, a reset connection, a read timeout
                raise SourceError(
                    "reading %s failed after %d bytes: %s" % (self.name, self.read_bytes, exc)
                ) from exc
            if not piece:
                break
            pieces.append(piece)
            wanted -= len(piece)
            self.read_bytes += len(piece)
        data = b"".join(pieces)
        if len(data) < count and self.size is not None and self.read_bytes != self.size:
            raise SourceError(
                "%s ended after %d of the %d bytes it announced" % (self.name, self.read_bytes, self.size)
            )
        return data

    def close(self):
        self.stream.close()


def open_source(path=None, url=None, timeout=60, validate_certs=True, headers=None):
    """A Source for a local file or an http(s) URL (read as a stream, never held whole in memory)."""
    if path:
        try:
            stream = open(path, "rb")  # noqa: SIM115 - the Source owns it and closes it
        except OSError as exc:
            raise SourceError("cannot open %s: %s" % (path, exc)) from exc
        return Source(stream, os.fstat(stream.fileno()).st_size, path)
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
        raise SourceError("GET %s: %s" % (url, exc)) from exc
    length = response.headers.get("Content-Length")
    return Source(response, int(length) if length and length.isdigit() else None, url)


def hash_source(source):
    """``(sha256 hex, size)`` of a source, read to its end."""
    digest = hashlib.sha256()
    while True:
        chunk = source.read(READ_CHUNK)
        digest.update(chunk)
        if len(chunk) < READ_CHUNK:
            return digest.hexdigest(), source.read_bytes


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
    """Every object under ``prefix`` as ``{key, size}``, in key order."""
    # A bucket created a moment ago may answer NoSuchBucket for a while.
    pages = jittered_backoff(retries=4, delay=0.5, max_delay=4.0)(_list_pages)
    return pages(client, bucket, prefix)


def _list_pages(client, bucket, prefix):
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


def pending_uploads(client, bucket, prefix=mirror.INCOMING_PREFIX):
    """Multipart uploads not completed nor aborted under ``prefix``."""
    answer = client.list_multipart_uploads(Bucket=bucket, Prefix=prefix)
    return [upload["Key"] for upload in answer.get("Uploads") or []]


# Upload --------------------------------------------------------------------------------------------


class Upload:
    """One verified publication of a source into the bucket; ``run()`` returns the transfer report."""

    def __init__(self, client, bucket, temp_key, source, destination, part_size, concurrency=4, **options):
        self.client = client
        self.bucket = bucket
        self.temp_key = temp_key
        self.source = source
        # destination(sha256 hex) -> (final key, metadata); the key depends on the digest streamed.
        self.destination = destination
        self.part_size = part_size
        self.concurrency = max(1, int(concurrency))
        self.content_type = options.get("content_type") or "application/octet-stream"
        self.expected = options.get("expected_sha256")
        self.copy_limit = options.get("copy_limit") or mirror.MAX_COPY_SIZE
        self.upload_id = None
        self.final_upload_id = None
        self.temp_written = False
        self.temp_etag = None
        self.final_key = None
        self.final_written = False
        self.final_verified = False
        self.parts = []
        self.verified_by = []
        self.action = "start the upload"

    def run(self):
        try:
            report = self._run()
        except BaseException as exc:
            cleanup = self.cleanup()
            if not isinstance(exc, Exception):
                raise
            raise TransferError("%s: %s" % (self.action, exc), cleanup) from exc
        warnings = self._delete_temp()
        report["warnings"] = warnings
        return report

    def _run(self):
        self.action = "upload %s to s3://%s/%s" % (self.source.name, self.bucket, self.temp_key)
        whole, size = self._upload_parts()
        digest = whole.hexdigest()
        self.action = "verify %s" % self.source.name
        mirror.check_digest(self.source.name, self.expected, digest)
        self._complete()
        self._verify_temp(size)
        self.final_key, metadata = self.destination(digest)
        self.action = "copy s3://%s/%s to %s" % (self.bucket, self.temp_key, self.final_key)
        if size > self.copy_limit:
            self._copy_in_parts(metadata)
        else:
            self.client.copy_object(
                Bucket=self.bucket,
                Key=self.final_key,
                CopySource={"Bucket": self.bucket, "Key": self.temp_key},
                CopySourceIfMatch=self.temp_etag,
                MetadataDirective="REPLACE",
                Metadata=metadata,
                ContentType=self.content_type,
                ChecksumAlgorithm="SHA256",
            )
        self.final_written = True
        self.action = "verify s3://%s/%s" % (self.bucket, self.final_key)
        self._verify_final(size, whole.digest(), digest)
        self.final_verified = True
        return {
            "key": self.final_key,
            "sha256": digest,
            "size": size,
            "parts": len(self.parts),
            "part_size": self.part_size,
            "bytes_moved": size,
            "temp_key": self.temp_key,
            "verified_by": self.verified_by,
        }

    # parts -------------------------------------------------------------------------------------

    def _upload_parts(self):
        answer = self.client.create_multipart_upload(
            Bucket=self.bucket, Key=self.temp_key, ContentType=self.content_type, ChecksumAlgorithm="SHA256"
        )
        self.upload_id = answer["UploadId"]
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
            number = 0
            while True:
                slots.acquire()
                if failures:
                    raise failures[0]
                chunk = self.source.read(self.part_size)
                if number and not chunk:
                    slots.release()
                    break
                number += 1
                if number > mirror.MAX_PARTS:
                    raise TransferError(
                        "%s is larger than %d parts of %d bytes; set a larger part_size"
                        % (self.source.name, mirror.MAX_PARTS, self.part_size)
                    )
                whole.update(chunk)
                future = pool.submit(self._upload_part, number, chunk)
                future.add_done_callback(done)
                futures.append(future)
                if len(chunk) < self.part_size:
                    break
            self.parts = [future.result() for future in futures]
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        return whole, self.source.read_bytes

    def _upload_part(self, number, chunk):
        md5 = hashlib.md5(chunk, usedforsecurity=False).digest()
        sha = hashlib.sha256(chunk).digest()
        answer = self.client.upload_part(
            Bucket=self.bucket,
            Key=self.temp_key,
            UploadId=self.upload_id,
            PartNumber=number,
            Body=chunk,
            ContentMD5=mirror.b64(md5),
            ChecksumSHA256=mirror.b64(sha),
        )
        etag = answer["ETag"]
        if mirror.is_md5_etag(etag) and mirror.etag_value(etag) != md5.hex():
            raise TransferError(
                "part %d: the server stored md5 %s, not the %s sent" % (number, etag, md5.hex())
            )
        checksum = answer.get("ChecksumSHA256")
        if checksum and mirror.checksum_value(checksum) != mirror.b64(sha):
            raise TransferError(
                "part %d: the server stored sha256 %s, not the %s sent" % (number, checksum, mirror.b64(sha))
            )
        return {"number": number, "etag": etag, "md5": md5, "sha256": sha, "size": len(chunk)}

    def _complete(self):
        self.action = "complete the upload of s3://%s/%s" % (self.bucket, self.temp_key)
        parts = [
            {"PartNumber": p["number"], "ETag": p["etag"], "ChecksumSHA256": mirror.b64(p["sha256"])}
            for p in self.parts
        ]
        self.client.complete_multipart_upload(
            Bucket=self.bucket, Key=self.temp_key, UploadId=self.upload_id, MultipartUpload={"Parts": parts}
        )
        self.temp_written = True

    # verification ------------------------------------------------------------------------------

    def _verify_temp(self, size):
        self.action = "verify s3://%s/%s" % (self.bucket, self.temp_key)
        answer = head(self.client, self.bucket, self.temp_key)
        if answer is None:
            raise TransferError("the completed upload is not there")
        self._check_size(answer, size)
        self.temp_etag = answer["ETag"]
        self._check_parts(answer, "uploaded")

    def _check_parts(self, answer, what):
        """Compare a multipart object's ETag and composite checksum with the parts' digests."""
        etag = mirror.etag_value(answer.get("ETag"))
        if mirror.is_md5_etag(etag) and "-" in etag:
            expected = mirror.multipart_etag([p["md5"] for p in self.parts])
            if etag != expected:
                raise TransferError(
                    "%s object has ETag %s, expected %s from its parts" % (what, etag, expected)
                )
            self._verified("md5 of every part (ETag)")
        checksum = answer.get("ChecksumSHA256")
        if checksum:
            expected = mirror.composite_sha256([p["sha256"] for p in self.parts])
            if mirror.checksum_value(checksum) != expected:
                raise TransferError("%s object has checksum %s, expected %s" % (what, checksum, expected))
            self._verified("sha256 of every part (ChecksumSHA256)")

    def _verify_final(self, size, raw_sha256, digest):
        answer = head(self.client, self.bucket, self.final_key)
        if answer is None:
            raise TransferError("the copied object is not there")
        self._check_size(answer, size)
        recorded = (answer.get("Metadata") or {}).get(mirror.META_SHA256)
        if recorded != digest:
            raise TransferError("metadata %s is %r, not %s" % (mirror.META_SHA256, recorded, digest))
        checksum = answer.get("ChecksumSHA256")
        if self.final_upload_id is not None:
            self._check_parts(answer, "copied")
        elif checksum:
            if mirror.checksum_value(checksum) != mirror.b64(raw_sha256):
                raise TransferError("the server's sha256 of the copy is %s, not %s" % (checksum, digest))
            self._verified("sha256 of the final object (ChecksumSHA256)")
        if not checksum:
            self._read_back(digest)

    def _read_back(self, digest):
        """Without a server checksum, read the final object and hash it."""
        body = self.client.get_object(Bucket=self.bucket, Key=self.final_key)["Body"]
        hasher = hashlib.sha256()
        for chunk in iter(lambda: body.read(READ_CHUNK), b""):
            hasher.update(chunk)
        if hasher.hexdigest() != digest:
            raise TransferError(
                "reading the copy back gives sha256 %s, not %s" % (hasher.hexdigest(), digest)
            )
        self._verified("sha256 of the final object (read back)")

    def _check_size(self, answer, size):
        if answer.get("ContentLength") != size:
            raise TransferError(
                "the object holds %s bytes, not the %d read" % (answer.get("ContentLength"), size)
            )

    def _verified(self, what):
        if what not in self.verified_by:
            self.verified_by.append(what)

    # copy of an object over 5 GiB ----------------------------------------------------------------

    def _copy_in_parts(self, metadata):
        answer = self.client.create_multipart_upload(
            Bucket=self.bucket,
            Key=self.final_key,
            Metadata=metadata,
            ContentType=self.content_type,
            ChecksumAlgorithm="SHA256",
        )
        self.final_upload_id = answer["UploadId"]
        offsets, start = [], 0
        for part in self.parts:
            offsets.append((part, start, start + part["size"] - 1))
            start += part["size"]
        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="os-mirror-copy") as pool:
            copied = list(pool.map(lambda item: self._copy_part(*item), offsets))
        self.client.complete_multipart_upload(
            Bucket=self.bucket,
            Key=self.final_key,
            UploadId=self.final_upload_id,
            MultipartUpload={"Parts": copied},
        )
        self.final_written = True

    def _copy_part(self, part, first, last):
        answer = self.client.upload_part_copy(
            Bucket=self.bucket,
            Key=self.final_key,
            UploadId=self.final_upload_id,
            PartNumber=part["number"],
            CopySource={"Bucket": self.bucket, "Key": self.temp_key},
            CopySourceIfMatch=self.temp_etag,
            CopySourceRange="bytes=%d-%d" % (first, last),
        )["CopyPartResult"]
        etag = answer["ETag"]
        if mirror.is_md5_etag(etag) and mirror.etag_value(etag) != part["md5"].hex():
            raise TransferError(
                "copied part %d has md5 %s, not %s" % (part["number"], etag, part["md5"].hex())
            )
        return {"PartNumber": part["number"], "ETag": etag, "ChecksumSHA256": mirror.b64(part["sha256"])}

    # cleanup -----------------------------------------------------------------------------------

    def cleanup(self):
        """Abort and delete whatever this upload left; returns one line per thing removed or not."""
        done = []
        steps = []
        if self.upload_id is not None and not self.temp_written:
            steps.append(
                ("abort the upload of " + self.temp_key, self._abort, (self.temp_key, self.upload_id))
            )
        if self.temp_written:
            steps.append(("delete " + self.temp_key, self._delete, (self.temp_key,)))
        if self.final_upload_id is not None and not self.final_verified:
            steps.append(
                ("abort the copy to " + self.final_key, self._abort, (self.final_key, self.final_upload_id))
            )
        if self.final_written and not self.final_verified:
            steps.append(("delete unverified " + self.final_key, self._delete, (self.final_key,)))
        for what, call, args in steps:
            try:
                call(*args)
                done.append(what)
            except Exception as exc:
                if error_code(exc) in _MISSING + ("NoSuchUpload",):
                    continue
                done.append("could not %s: %s" % (what, exc))
        return done

    def _abort(self, key, upload_id):
        self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)

    def _delete(self, key):
        self.client.delete_object(Bucket=self.bucket, Key=key)

    def _delete_temp(self):
        try:
            self._delete(self.temp_key)
        except Exception as exc:
            return ["the final object is verified, but deleting %s failed: %s" % (self.temp_key, exc)]
        return []
