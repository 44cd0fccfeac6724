#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: os_mirror_object
short_description: Copy one upstream OS image into the mirror bucket by digest, verified
version_added: 0.1.0
description:
  - Copies an image from a local O(path) or an http(s) O(url) into O(bucket) under the immutable key
    C(<family>/<version>/sha256-<hex>/<filename>), so a VM import never depends on the upstream being up.
  - Skips the copy when the key already holds an object whose C(sha256) metadata matches; that is decided
    by a listing and a HEAD, nothing is downloaded from the bucket.
  - A (family, version, filename) holds one digest for ever. When the source has changed, the module refuses,
    naming the existing key, its digest and the new one; publish the changed image under a new O(version).
  - The final key holds the sha256, so the digest is known before the first byte goes up. It comes from
    O(sha256) (the source is then read once), else from a first read of a local O(path), else by copying
    the O(url) to a temporary file on the controller while hashing it (that copy is uploaded, then deleted).
  - The bytes go straight to the final key as a multipart upload of O(part_size) parts, O(concurrency) at
    a time, each sent with its Content-MD5 and its ETag compared with it, while the sha256 of the whole
    stream is computed again. The C(sha256), C(source-url) (redacted, see O(url)) and C(mirrored-at)
    metadata are set when the upload starts. Only when the sha256 matches is the upload completed, with an
    C(If-None-Match) header of C(*) so an object that appeared under the key meanwhile is never replaced.
    An image smaller than one part is one PutObject with its Content-MD5 and sha256 checksum, under the
    same condition.
  - The stored object is then checked with a HEAD (size, ETag from the md5 of every part, metadata),
    without reading it back.
  - Given a signing key (O(key_path) or O(key)), the object is signed where it is made. C(<key>.sig) beside it
    holds a detached signature in the format C(cosign sign-blob --key) writes (ECDSA P-256 over the image's
    SHA-256, base64), and C(<key>.intoto.jsonl) its provenance, an in-toto statement (SLSA provenance v1)
    whose subject is the object's key and sha256 and whose C(upstream) input names the redacted source URL
    and its sha256, with the builder (O(builder)) and the time, in a DSSE envelope signed with the same key
    (C(cosign verify-blob-attestation) reads it). The image is not read again to sign it, its key names its
    sha256, which the upload verified. A signature and an envelope already stored that verify for the
    object with the same key (and the same upstream and builder) are kept, so a rerun writes nothing.
  - Until the upload is completed no object exists under its key, so a failed run (a download that stops
    short, a digest that does not match, an S3 error) aborts the upload and leaves neither an object nor a
    pending upload; a stored object that fails the HEAD check is deleted.
author:
  - goldenimage.pipeline maintainers (@goldenimage)
options:
  bucket:
    description:
      - Name of the mirror bucket. It must exist (the C(goldenimage.pipeline.os_mirror) role creates it).
    type: str
    required: true
  family:
    description:
      - OS family id, the first key segment, for example C(ubuntu-24.04) or C(windows-11).
      - Lowercase letters, digits, C(.), C(_) and C(-).
    type: str
    required: true
  version:
    description:
      - Version of the image within the family, the second key segment, for example C(20260801).
      - Give it as a quoted string. A YAML number is refused, because C(1.10) reaches the module as C(1.1) and
        would be stored under the wrong, immutable key.
    type: raw
    required: true
  filename:
    description:
      - Last key segment. Defaults to the last segment of O(path) or of O(url)'s path.
    type: str
  path:
    description:
      - Local file to mirror, on the controller. Exactly one of O(path) and O(url) is required.
    type: path
  url:
    description:
      - http or https URL of the upstream image. It is streamed; a response shorter than its
        C(Content-Length) fails the run.
      - A URL with credentials in it (C(https://user:password@host/...)) is refused before anything is
        read, because the URL is recorded in the object's C(source-url) metadata and the catalog, and
        printed in messages. For a private upstream give a presigned URL (its signature and token query
        values are redacted wherever the URL is recorded or printed), or download the image and mirror it
        with O(path).
    type: str
  sha256:
    description:
      - Expected sha256 of the image (C(sha256:<hex>) or C(<hex>)).
      - When given, an already mirrored image is skipped without reading the source at all, and a source whose
        bytes do not match is refused before anything reaches a final key.
      - Without it, the source is hashed before deciding only when the version already holds this filename.
    type: str
  concurrency:
    description:
      - Parts uploaded at the same time. Memory used is about O(part_size) times (O(concurrency) + 1).
    type: int
    default: 4
  part_size:
    description:
      - Size of a multipart part, as bytes or with a unit (V(16M), V(64MB)).
      - Raised to 8 MiB at least, and as far as needed to keep within the 10,000 parts S3 allows. Zero or less
        is refused.
      - An image smaller than one part is uploaded with a single PutObject.
    type: raw
    default: 16M
  content_type:
    description:
      - C(Content-Type) of the final object.
    type: str
    default: application/octet-stream
  url_timeout:
    description:
      - Seconds to wait for the upstream server to answer or send more bytes. Zero or less is refused.
    type: int
    default: 60
  url_validate_certs:
    description:
      - Verify the upstream server's TLS certificate.
    type: bool
    default: true
  spool_dir:
    description:
      - Directory for the temporary copy of an O(url) whose O(sha256) is not given (it needs as much free
        space as the image). Defaults to the controller's temporary directory (C(TMPDIR)).
    type: path
extends_documentation_fragment:
  - goldenimage.pipeline.s3
  - goldenimage.pipeline.signing
  - goldenimage.pipeline.signing.builder
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.actiongroup_s3
  - goldenimage.pipeline.wait_rounds.background
attributes:
  check_mode:
    support: full
    details:
      - Reads only (a listing and HEADs; the source is hashed when that decides the answer). RV(key) is empty
        when the digest is neither given nor needed.
  diff_mode:
    support: full
  idempotent:
    support: full
notes:
  - "Runs on the controller; use C(delegate_to: localhost) when the play targets other hosts."
  - C(If-None-Match) on PutObject and CompleteMultipartUpload is an S3 conditional write (AWS since 2024;
    MinIO, Ceph RGW and versitygw support it). A server without it ignores the header. The race it closes is
    another writer storing the same key between this module's HEAD and its completion; as the key names
    the sha256 verified before completion, such a write can only put the same bytes back.
  - A process killed outright cannot abort its upload. It leaves no object, only a pending multipart
    upload; a bucket lifecycle rule that aborts incomplete multipart uploads after a day removes it.
seealso:
  - module: goldenimage.pipeline.os_mirror_catalog
  - module: amazon.aws.s3_bucket
"""

EXAMPLES = r"""
- name: Mirror the Ubuntu 24.04 cloud image, pinned by digest
  goldenimage.pipeline.os_mirror_object:
    bucket: cdi-os-images
    family: ubuntu-24.04
    version: "20260801"
    url: https://cloud-images.ubuntu.com/noble/20260801/noble-server-cloudimg-amd64.img
    sha256: "sha256:5e6b9a6f8bb1d2a0c3b3f2d4b2b6c1e0f1a2b3c4d5e6f708192a3b4c5d6e7f80"
    endpoint_url: https://s3.example.com
    access_key: "{{ mirror_access_key }}"
    secret_key: "{{ mirror_secret_key }}"
  register: mirrored

- name: Mirror a locally built image with eight parts in flight
  goldenimage.pipeline.os_mirror_object:
    bucket: cdi-os-images
    family: windows-11
    version: "2026-08-09"
    path: /srv/build/windows11-x64-golden.qcow2
    concurrency: 8
    part_size: 64M

- name: Mirror and sign where it is made, with the key kept in a Kubernetes Secret
  goldenimage.pipeline.os_mirror_object:
    bucket: cdi-os-images
    family: debian-12
    version: "20260801"
    url: https://cloud.debian.org/images/cloud/bookworm/20260801-1/debian-12-generic-amd64-20260801-1.qcow2
    sha256: "sha256:0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9"
    key: "{{ signing_secret.resources[0].data['cosign.pem'] | b64decode }}"
    builder:
      playbook: mirror.yml
      host: "{{ inventory_hostname }}"
  no_log: true

- name: Show the transfer
  ansible.builtin.debug:
    msg: "{{ mirrored.key }}: {{ mirrored.bytes_moved }} bytes at {{ mirrored.throughput_mib_s }} MiB/s"
"""

RETURN = r"""
lines:
  description: The progress lines printed while the task ran (hash, copy and upload phases).
  returned: always
  type: list
  elements: str
  sample: ["upload /srv/images/noble.img: 40% (1073741824 of 2684354560 bytes) after 12.5s"]
rounds:
  description: How many calls of the module the task took (always 1).
  returned: always
  type: int
changed:
  description: Whether an object was (or, in check mode, would be) written.
  returned: always
  type: bool
  sample: true
action:
  description: V(upload) or V(skip).
  returned: success
  type: str
  sample: upload
skipped:
  description:
    - Whether the final key already held the same bytes, so nothing was written.
    - When true, Ansible shows the task (or the loop item) as skipped. Read it from a registered
      variable, or use RV(action).
  returned: success
  type: bool
  sample: false
key:
  description: The final key; empty in check mode when the digest is not known without reading the source.
  returned: success
  type: str
  sample: ubuntu-24.04/20260801/sha256-5e6b9a6f8bb1d2a0c3b3f2d4b2b6c1e0f1a2b3c4d5e6f708192a3b4c5d6e7f80/n.img
sha256:
  description: sha256 of the image (hex); empty in check mode when it is not known.
  returned: success
  type: str
  sample: 5e6b9a6f8bb1d2a0c3b3f2d4b2b6c1e0f1a2b3c4d5e6f708192a3b4c5d6e7f80
size:
  description: Size in bytes, when known.
  returned: success
  type: int
  sample: 614465536
bytes_moved:
  description: Bytes uploaded by this run; 0 when skipped and in check mode.
  returned: always
  type: int
  sample: 614465536
seconds:
  description: Wall time of the transfer, from opening the source to the verified final object.
  returned: always
  type: float
  sample: 4.21
throughput_mib_s:
  description: RV(bytes_moved) in MiB per second of RV(seconds).
  returned: always
  type: float
  sample: 139.2
method:
  description: V(multipart), or V(put) for an image smaller than one part.
  returned: when uploaded
  type: str
  sample: multipart
digest_from:
  description:
    - How the sha256 was known before the upload started. V(given) (O(sha256)), V(read first) (a local file
      read once to hash it), or V(spooled) (a URL copied to a temporary file while it was hashed).
  returned: when uploaded
  type: str
  sample: given
parts:
  description: Parts uploaded, 1 for a single PutObject (predicted in check mode when the size is known).
  returned: when an upload is done or predicted
  type: int
  sample: 37
part_size:
  description: Part size used, in bytes.
  returned: when an upload is done or predicted
  type: int
  sample: 16777216
verified_by:
  description: The comparisons that proved the stored bytes equal the bytes read.
  returned: when uploaded
  type: list
  elements: str
  sample:
    - sha256 of the whole stream (computed while it was sent)
    - md5 of every part (Content-MD5 sent, ETag compared)
    - ETag of the stored object (md5 of its parts)
signed:
  description:
    - The signature and provenance written beside the object (or kept, or in check mode to be written).
  returned: when a signing key is given and the key of the object is known
  type: dict
  contains:
    key_id:
      description: The signing key's id, the SHA-256 (hex) of its DER SubjectPublicKeyInfo.
      type: str
    signature_key:
      description: The key of the detached signature object, C(<key>.sig).
      type: str
    provenance_key:
      description: The key of the provenance envelope object, C(<key>.intoto.jsonl).
      type: str
    signature_changed:
      description: Whether the signature was (or would be) written.
      type: bool
    provenance_changed:
      description: Whether the provenance envelope was (or would be) written.
      type: bool
    provenance:
      description: The statement's V(subject), V(inputs), V(builder) and V(time).
      type: dict
    seconds:
      description: Time taken to read the stored signature and envelope, sign and write them.
      type: float
cleanup:
  description: On failure, what was aborted or deleted so nothing partial remains.
  returned: on failure of a transfer
  type: list
  elements: str
  sample: ["abort the upload to ubuntu-24.04/20260801/sha256-5e6b.../noble.img"]
"""

import datetime
import os
import time

from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket import _mirror_transfer as transfer
from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket import mirror
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import inputs
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import (
    run_module,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance
from ansible_collections.goldenimage.pipeline.plugins.module_utils.s3._s3 import (
    call_failed,
    check_endpoint,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.s3._s3_module import (
    s3_arg_spec,
    s3_client_from_params,
    s3_module,
)


def argument_spec():
    return s3_arg_spec(
        bucket=dict(type="str", required=True),
        family=dict(type="str", required=True),
        # raw, so that a YAML float (1.10 read as 1.1) reaches the version rule and is refused.
        version=dict(type="raw", required=True),
        filename=dict(type="str"),
        path=dict(type="path"),
        url=dict(type="str"),
        sha256=dict(type="str"),
        concurrency=dict(type="int", default=4),
        part_size=dict(type="raw", default="16M"),
        content_type=dict(type="str", default="application/octet-stream"),
        url_timeout=dict(type="int", default=60),
        url_validate_certs=dict(type="bool", default=True),
        spool_dir=dict(type="path"),
        progress_file=dict(type="path"),
        builder=provenance.builder_option(),
        **provenance.key_options(),
    )


def build_module():
    return s3_module(
        argument_spec(),
        ("url",),
        mutually_exclusive=[("path", "url"), ("key_path", "key")],
        required_one_of=[("path", "url")],
    )


class MirrorObject(transfer.UploadRun):
    """Observe the version prefix, decide with ``mirror.plan_object``, upload with ``transfer.Upload``."""

    def inputs(self):
        """Every input rule, before the first request."""
        p = self.params
        check_endpoint(p["endpoint_url"])
        mirror.check_source_url(p["url"])
        p["version"] = inputs.version_string(p["version"], "version", required=True)
        filename = p["filename"] or mirror.filename_from_source(p["path"], p["url"])
        mirror.check_filename(filename)
        mirror.version_prefix(p["family"], p["version"])
        expected = mirror.normalize_sha256(p["sha256"]) if p["sha256"] else None
        requested = mirror.part_size_bytes(p["part_size"])
        mirror.check_concurrency(p["concurrency"])
        inputs.positive(p["url_timeout"], "url_timeout")
        if p["path"]:
            path = p["path"]
            inputs.require_file(
                path, os.path.isfile(path), "option path (%s)" % path, "give a file on the controller"
            )
        # The key is read and checked before the first request, so a bad key writes nothing.
        self.signing_key = signing.private_key_from(p)
        return filename, expected, requested

    def existing(self, client, filename):
        """Objects of this version holding ``filename``, with the sha256 metadata from a HEAD of each."""
        p = self.params
        prefix = mirror.version_prefix(p["family"], p["version"])
        try:
            listed = transfer.list_objects(client, p["bucket"], prefix)
            found = []
            for obj in listed:
                parsed = mirror.parse_key(obj["key"])
                if parsed is None or parsed["filename"] != filename:
                    continue
                answer = transfer.head(client, p["bucket"], obj["key"]) or {}
                parsed.update(
                    key=obj["key"],
                    size=answer.get("ContentLength", obj["size"]),
                    metadata_sha256=(answer.get("Metadata") or {}).get(mirror.META_SHA256),
                    source_url=(answer.get("Metadata") or {}).get(mirror.META_SOURCE),
                )
                found.append(parsed)
        except Exception as exc:
            raise call_failed("list s3://%s/%s" % (p["bucket"], prefix), exc, bucket=p["bucket"]) from exc
        return found

    def open_source(self):
        p = self.params
        return transfer.open_source(
            path=p["path"],
            url=p["url"],
            timeout=p["url_timeout"],
            validate_certs=p["url_validate_certs"],
            progress=self.progress(),
        )

    def hash_source(self):
        source = self.open_source()
        try:
            return transfer.hash_source(source)
        except transfer.SourceError as exc:
            raise transfer.SourceError("hash %s: %s" % (source.name, exc.msg)) from exc
        finally:
            source.close()

    def plan(self, filename, digest, existing):
        p = self.params
        try:
            return mirror.plan_object(p["family"], p["version"], filename, digest, existing)
        except mirror.MirrorError as exc:
            exc.fields.update(
                key=mirror.object_key(p["family"], p["version"], digest, filename), sha256=digest
            )
            raise

    def _run(self):
        p = self.params
        filename, expected, requested = self.inputs()
        source_name = p["url"] or p["path"]
        client = s3_client_from_params(p, max_pool_connections=max(10, p["concurrency"] + 2))
        existing = self.existing(client, filename)
        digest, size = expected, (os.path.getsize(p["path"]) if p["path"] else None)
        if digest is None and existing:
            # Only the digest tells "already mirrored" from "changed upstream".
            digest, size = self.hash_source()
        key = None
        if digest is not None:
            plan = self.plan(filename, digest, existing)
            key = plan["key"]
            if plan["action"] == "skip":
                held = next(obj for obj in existing if obj["key"] == key)
                summary = mirror.object_summary(key, held["size"], digest, held.get("source_url"))
                self.result.update(action="skip", skipped=True, key=key, sha256=digest, size=held["size"])
                self.set_diff(summary, summary)
                self.sign(client, key, digest, source_name)
                return
        part_size = mirror.plan_part_size(size, requested)
        self.result.update(
            action="upload", skipped=False, key=key or "", sha256=digest or "", part_size=part_size
        )
        if size is not None:
            self.result.update(size=size, parts=mirror.part_count(size, part_size))
        if self.module.check_mode:
            self.set_diff({}, mirror.object_summary(key or "", size, digest or "", source_name))
            self.result["changed"] = True
            if digest is not None:
                self.sign(client, key, digest, source_name)
            return
        self.upload(client, filename, digest, requested, source_name)
        if self.result.get("key"):
            self.sign(client, self.result["key"], self.result["sha256"], source_name)

    def sign(self, client, key, digest, source_name):
        """Sign the object where it is made (``UploadRun.sign_beside``): its provenance names the upstream."""
        if self.signing_key is None:
            return
        p = self.params
        self.sign_beside(
            client,
            p["bucket"],
            key,
            digest,
            mirror.mirrored_statement(
                key,
                digest,
                p["url"] or os.path.abspath(p["path"]),
                signing.builder(p["builder"]),
                mirror.timestamp(datetime.datetime.now(datetime.timezone.utc)),
            ),
        )

    def upload(self, client, filename, digest, requested, source_name):
        p = self.params
        source = self.open_source()
        part_size = mirror.plan_part_size(source.size, requested)
        mirrored_at = mirror.timestamp(datetime.datetime.now(datetime.timezone.utc))

        def destination(sha256):
            key = mirror.object_key(p["family"], p["version"], sha256, filename)
            return key, mirror.final_metadata(sha256, p["url"] or os.path.abspath(p["path"]), mirrored_at)

        job = transfer.Upload(
            client,
            p["bucket"],
            source,
            destination,
            part_size,
            p["concurrency"],
            content_type=p["content_type"],
            expected_sha256=digest,
            spool_dir=p["spool_dir"],
        )
        started = time.monotonic()
        try:
            report = job.run()
        except transfer.KeyExists as exc:
            return self.written_meanwhile(client, filename, exc)
        except transfer.TransferError as exc:
            exc.fields.setdefault("part_size", part_size)
            raise
        finally:
            source.close()
        seconds = time.monotonic() - started
        if digest and not p["sha256"]:
            report["digest_from"] = "read first"  # hashed above to decide between skip and refuse
        self.uploaded(report, seconds, source_name)

    def written_meanwhile(self, client, filename, exc):
        """The key was stored by someone else during this run: decide again, as a rerun would."""
        digest = mirror.parse_key(exc.key)["sha256"]
        existing = self.existing(client, filename)
        plan = self.plan(filename, digest, existing)
        held = next((obj for obj in existing if obj["key"] == plan["key"]), None)
        if plan["action"] != "skip" or held is None:
            exc.fields.update(sha256=digest)
            raise exc
        self.module.warn("%s was stored by another writer during this run; it holds the same bytes" % exc.key)
        self.result.update(
            action="skip", skipped=True, changed=False, key=exc.key, sha256=digest, size=held["size"]
        )


def main():
    module = build_module()
    run_module(module, lambda: MirrorObject(module).run())


if __name__ == "__main__":
    main()
