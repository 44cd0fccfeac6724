# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The export Job's program: convert a sealed disk to a compressed qcow2 and upload it to a bucket key.

It runs in a pod next to the claim (``golden_export_job`` ships it in a ConfigMap with its siblings), so
no byte of the disk passes through the Ansible controller. It needs ``python3``, ``qemu-img`` and the
``dissect`` packages the seal verifier uses and boto3 (images/golden-export/Containerfile): the S3 calls go
through the collection's S3 adapter (``_s3``: one client, botocore's retry policy) and its transfer code
(``_mirror_transfer``: one multipart upload, one server-side copy), shipped with this program. Credentials
come from the environment
(``EXPORT_ACCESS_KEY_ID``, ``EXPORT_SECRET_ACCESS_KEY``, optionally ``EXPORT_SESSION_TOKEN``), which the
Job fills from a Secret; they are never printed.

The steps: the image's facts are read from the disk itself (``_disk.read_facts_or_why``): a key, a
password or a place that could not be read makes the bytes sensitive whatever the run declared, and
sensitive bytes go only to a destination proven private (``exposure.prove_private``). Then ``qemu-img
convert -c -O qcow2`` onto scratch space, then a HEAD of the key.
- The key holds an object (a rerun): the sha256 of the qcow2 is computed (its one read, nothing is sent);
  an object with this sha256 is left alone, anything else is refused.
- The key is free: the qcow2 is read once. Its parts go to a staging key next to the key
  (``--staging-key``, ``<key>.partial-<random>`` by default) as a multipart upload
  (``_mirror_transfer.Upload``: each part with its signed ChecksumSHA256, which the server checks),
  while the sha256 of the whole is computed; that upload is completed with ``If-None-Match: *``. S3 takes
  metadata only when an object is made, so the key is then made (after another HEAD finds it still free)
  by a server-side copy of the staging object that carries the sha256 and the other metadata
  (``_mirror_transfer.copy_object``: CopyObject up to 5 GiB, above it UploadPartCopy ranges, both with
  ``If-None-Match: *``). A HEAD checks
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
import hashlib
import json
import os
import subprocess
import sys
import time
from urllib.parse import urlsplit

from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket import _mirror_transfer as transfer
from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket import exposure, mirror
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import _disk
from ansible_collections.goldenimage.pipeline.plugins.module_utils.s3._s3 import (
    anonymous_client,
    call_failed,
    canary_answers,
    object_reads,
    read_controls,
    s3_client,
)

MARKER = "GOLDEN_EXPORT_RESULT "
READ_CHUNK = 8 * 1024 * 1024
PROGRESS_SECONDS = 10.0
META = {"sha256": "sha256", "source": "source-url", "uid": "source-uid", "at": "mirrored-at"}
# What the export image installs besides the seal verifier's packages (images/golden-export/requirements.txt;
# a unit test keeps them equal, and equal to the pin the tests run the program with).
S3_REQUIREMENTS = ("boto3==1.44.8",)


class ExportError(PipelineError):
    """The export cannot go on; ``code`` names the case for the module (``key_exists``, ``s3``...)."""

    def __init__(self, msg, code="failed"):
        super(ExportError, self).__init__(msg)
        self.msg, self.code = msg, code


# ---------------------------------------------------------------- S3
def clients(opts, environ):
    """``(signed, anonymous)``: boto3 clients with the Job's credentials and with none (what anyone on the
    network can send)."""
    access, secret = environ.get("EXPORT_ACCESS_KEY_ID"), environ.get("EXPORT_SECRET_ACCESS_KEY")
    if not access or not secret:
        raise ExportError(
            "EXPORT_ACCESS_KEY_ID and EXPORT_SECRET_ACCESS_KEY are not set: the credentials Secret lacks "
            "the keys",
            "input",
        )
    parts = urlsplit(opts.endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ExportError("endpoint %s is not an http(s) URL" % opts.endpoint, "input")
    tls = {"validate_certs": not opts.insecure, "ca_bundle": opts.ca_file or None}
    try:
        signed = s3_client(
            endpoint_url=opts.endpoint,
            access_key=access,
            secret_key=secret,
            session_token=environ.get("EXPORT_SESSION_TOKEN"),
            region=opts.region,
            max_pool_connections=max(10, opts.concurrency + 1),
            **tls,
        )
        return signed, anonymous_client(opts.endpoint, opts.region, **tls)
    except PipelineError as exc:
        raise ExportError(exc.msg, "input") from exc


def s3_call(what, call):
    """``call()``, one boto3 request (retried by botocore); failing is ExportError ``s3`` naming ``what``."""
    try:
        return call()
    except PipelineError:
        raise
    except Exception as exc:
        raise ExportError(call_failed(what, exc).msg, "s3") from exc


def transfer_failed(exc, where):
    """The ExportError of a failed ``_mirror_transfer`` step, with what its cleanup did."""
    if isinstance(exc, transfer.KeyExists):
        return ExportError(
            "%s appeared while the export was written; nothing was replaced" % where, "key_exists"
        )
    done = "; ".join(exc.cleanup)
    return ExportError("%s%s" % (exc.msg, "; " + done if done else ""), "s3")


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


def object_metadata(opts, digest, sensitive):
    """The metadata the exported object carries; ``sensitive``: the reasons."""
    metadata = {
        META["sha256"]: digest,
        META["source"]: opts.source_url,
        META["at"]: opts.exported_at,
        exposure.SENSITIVE_META: exposure.sensitive_mark(sensitive),
    }
    if opts.source_uid:
        metadata[META["uid"]] = opts.source_uid
    return metadata


def stage(s3, opts, path, staging, size, progress):
    """The one read of the qcow2: its parts are uploaded to ``staging`` while its sha256 is computed.

    Returns ``(parts, sha256, bytes read, part size)``; a failed upload leaves nothing (``Upload``)."""
    progress.phase("upload", size)
    part_size = mirror.plan_part_size(size, opts.part_size)
    with open(path, "rb") as fh:
        source = transfer.Source(fh, size, path, lambda read: progress.step(read.read_bytes))
        upload = transfer.Upload(
            s3,
            opts.bucket,
            source,
            lambda _digest: (staging, {}),
            part_size,
            opts.concurrency,
            streamed=True,
            content_type=opts.content_type,
        )
        try:
            report = upload.run()
        except transfer.TransferError as exc:
            raise transfer_failed(exc, "s3://%s/%s" % (opts.bucket, staging)) from exc
    progress.step(report["size"], force=True)
    return report["parts"], report["sha256"], report["size"], part_size


def publish(s3, opts, staging, digest, size, progress, sensitive):
    """The final key made by a server-side copy of ``staging`` that carries the metadata. Returns the
    copy's part count (1 for CopyObject)."""
    where = "s3://%s/%s" % (opts.bucket, opts.key)
    progress.phase("copy", size)
    if held(s3, opts.bucket, opts.key) is not None:
        raise ExportError(
            "%s appeared while the export was uploaded; nothing was replaced" % where, "key_exists"
        )
    try:
        copied = transfer.copy_object(
            s3,
            opts.bucket,
            staging,
            opts.key,
            size,
            object_metadata(opts, digest, sensitive),
            opts.content_type,
            progress.step,
        )
    except transfer.TransferError as exc:
        raise transfer_failed(exc, where) from exc
    progress.step(size, force=True)
    return copied


def held(s3, bucket, key):
    """The metadata of what ``key`` holds (``{}`` for none), or None when it is free."""
    found = s3_call("HEAD s3://%s/%s" % (bucket, key), lambda: transfer.head(s3, bucket, key))
    if found is None:
        return None
    return dict(found.get("Metadata") or {}, **{"content-length": found.get("ContentLength")})


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


def prove_destination(s3, anonymous, opts, progress, sensitive):
    """Before the first byte: ``exposure.prove_private`` on the bucket's controls and an anonymously read
    canary under the key's prefix; ExportError ``exposed`` when the bytes may not go there."""
    prefix = exposure.key_prefix(opts.key)
    progress.say("phase prove: s3://%s/%s" % (opts.bucket, prefix))
    controls = read_controls(s3, opts.bucket)
    key = exposure.canary_key(opts.key, os.urandom(8).hex())
    canary = canary_answers(s3, anonymous, opts.bucket, key, exposure.CANARY_BODY)
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
    s3, anonymous = clients(opts, environ)
    facts = read_facts(opts, progress)
    sensitive = exposure.sensitive_reasons(facts=facts, facts_reasons=opts.sensitive_reason)
    try:
        return _export(s3, anonymous, opts, progress, started, facts, sensitive)
    except ExportError as exc:
        exc.fields.update(image_facts=facts, sensitive_reasons=sensitive)
        raise


def _export(s3, anonymous, opts, progress, started, facts, sensitive):
    where = "s3://%s/%s" % (opts.bucket, opts.key)
    qcow2 = os.path.join(opts.scratch, opts.filename)
    # A free key is proven private (or its bytes not sensitive) before the conversion: a refusal costs
    # seconds, and nothing of the image is written anywhere before it.
    proof = None
    if held(s3, opts.bucket, opts.key) is None:
        proof = prove_destination(s3, anonymous, opts, progress, sensitive)
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
                refusal = exposure.held_refusal(
                    opts.bucket, opts.key, object_reads(anonymous, opts.bucket, opts.key), sensitive
                )
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
        result["exposure"] = proof = prove_destination(s3, anonymous, opts, progress, sensitive)
    size = os.path.getsize(qcow2)
    staging = opts.staging_key or "%s.partial-%s" % (opts.key, os.urandom(6).hex())
    parts, digest, read, part_size = stage(s3, opts, qcow2, staging, size, progress)
    try:
        if read != size:
            raise ExportError(
                "the qcow2 changed while it was uploaded (%d bytes, then %d read); nothing was stored"
                % (size, read),
                "changed",
            )
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
        part_size=part_size,
        bytes_moved=read,
        seconds=round(time.monotonic() - started, 3),
        upload_seconds=round(time.monotonic() - converted, 3),
    )


def verify(s3, opts, digest, size):
    """The final key holds ``size`` bytes with this sha256 metadata, or it is deleted again."""
    where = "s3://%s/%s" % (opts.bucket, opts.key)
    stored = held(s3, opts.bucket, opts.key) or {}
    if stored.get(META["sha256"]) != digest or str(stored.get("content-length")) != str(size):
        s3_call("DELETE " + where, lambda: s3.delete_object(Bucket=opts.bucket, Key=opts.key))
        raise ExportError(
            "%s was stored with sha256 %s and %s bytes, not %s and %d; it was deleted again"
            % (where, stored.get(META["sha256"]), stored.get("content-length"), digest, size),
            "s3",
        )


def remove_staging(s3, bucket, staging):
    """Delete the staging object: ``(gone, a sentence saying so)``."""
    where = "s3://%s/%s" % (bucket, staging)
    try:
        s3_call("DELETE " + where, lambda: s3.delete_object(Bucket=bucket, Key=staging))
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
