#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: golden_export_object
short_description: Upload an exported golden image to a chosen bucket key, verified, with its sha256
version_added: 0.1.0
description:
  - Uploads a local file (an exported golden, for example C(windows11-x64-golden.qcow2)) to O(key) of
    O(bucket) with the mirror's upload path. The file's sha256 is known before the first byte goes up (from
    O(sha256), else from a first read); the bytes then go to O(key) as a multipart upload, every part sent
    with its Content-MD5 and its ETag compared, while the sha256 is computed again. Only when it matches is
    the upload completed (with C(If-None-Match) so an object that appeared meanwhile is never replaced), with
    the C(sha256), C(source-url) and C(mirrored-at) metadata, and the stored object is checked with a HEAD.
  - A failure aborts the upload, leaving nothing under O(key) and no pending upload.
  - Given a signing key (O(signing_key_path) or O(signing_key)), the exported golden is signed where it
    is made. C(<key>.sig) beside it holds a detached signature in the format C(cosign sign-blob --key)
    writes, and C(<key>.intoto.jsonl) its provenance (SLSA provenance v1 in a DSSE envelope) whose subject
    is O(key) and its sha256 and whose inputs are the exported volume (O(source)) and the image facts read
    from the file, with the builder (O(builder)) and the time. Signatures that still verify for the object
    with the same key are kept, so a rerun writes nothing.
  - O(key) holds one content for ever. When it already holds an object whose C(sha256) metadata matches the
    file, nothing is written; when it holds anything else, the module refuses. Export a changed image under a
    new key (a new date).
  - The object records whether its bytes were sensitive (metadata C(sensitive), V(yes) or V(no)). When the
    key already holds the same bytes and they are sensitive (by this run's reasons or by that record; an
    object without it counts as sensitive), the object is read anonymously (a ranged GET and a HEAD); if
    either is answered, the module refuses, naming the object and the supported move, and deletes nothing.
  - Before the first byte of a new upload the destination is proven (C(exposure.prove_private)), the
    bucket's controls are read (GetBucketPolicyStatus, GetBucketAcl, GetPublicAccessBlock; an API that does
    not answer is recorded as not answered, never as private), and a throw-away canary object, named like
    O(key) under its prefix, is written with the module's credentials, read anonymously with a GET, a ranged
    GET, a HEAD and a listing of the prefix, and deleted. Any 2xx, or a control that says public, makes the
    destination public. When the bytes are sensitive (a reason read from the file, a licensed O(license),
    or any O(sensitive_reasons)), the module uploads only to a destination proven private and otherwise
    refuses, naming the bucket, what answered 2xx, and the supported move; nothing of the image is written.
  - Unless O(read_facts=false), the image's facts are read from the file first, with the reader of
    M(goldenimage.pipeline.seal_verify) (RV(image_facts)), which finds product keys, KMS settings,
    passwords left in answer files or Winlogon, BitLocker, and private keys left in a Linux image. Each is a
    reason the bytes are sensitive (RV(sensitive_reasons)), and so is a file whose OS cannot be told or that
    cannot be read.
  - After a sensitive upload, the object itself is read anonymously once more; if anyone can read it, it is
    deleted again and the module fails.
author:
  - goldenimage.pipeline maintainers (@goldenimage)
options:
  bucket:
    description:
      - Bucket to upload to. It must exist.
    type: str
    required: true
  key:
    description:
      - Final key of the object, for example C(windows/11/2026-08-09/windows11-x64-golden.qcow2).
      - It follows the collection's one key rule, checked before anything is read or written; at most
        1,024 bytes (the S3 limit), no leading C(/), no empty, C(.) or C(..) segment (C(../escape.qcow2)
        and C(windows/../../b.qcow2) are refused), no control characters or backslashes.
    type: str
    required: true
  path:
    description:
      - The file to upload, on the host the module runs on.
    type: path
    required: true
  sha256:
    description:
      - Expected sha256 of the file (C(sha256:<hex>) or C(<hex>)); a file that does not match is refused
        before anything reaches O(key).
    type: str
  source:
    description:
      - What the file was exported from, recorded as the C(source-url) metadata (for example
        C(pvc://golden-images-build/win11-sealed)). Defaults to O(path).
      - A value with credentials in it (C(https://user:password@host/...)) is refused; it would be stored in
        the object's metadata, which anyone who can read the object can read. Any signature or token
        query values are redacted before the value is stored or printed.
    type: str
  concurrency:
    description:
      - Parts uploaded at the same time, 1 or more.
    type: int
    default: 4
  part_size:
    description:
      - Size of a multipart part, as bytes or with a unit (V(16M), V(64MB)); raised to 8 MiB at least.
        Zero or less is refused.
    type: raw
    default: 16M
  content_type:
    description:
      - C(Content-Type) of the object.
    type: str
    default: application/octet-stream
  read_facts:
    description:
      - Read the image's facts from O(path) before anything is uploaded (a raw or qcow2 disk).
      - Set V(false) only for a file that is not a VM disk (an installer ISO, a compressed vendor image),
        whose facts cannot be read; then only O(license) and O(sensitive_reasons) decide, and RV(image_facts)
        is null.
    type: bool
    default: true
extends_documentation_fragment:
  - goldenimage.pipeline.exposure
  - goldenimage.pipeline.s3
  - goldenimage.pipeline.signing.prefixed
  - goldenimage.pipeline.signing.builder
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.actiongroup_s3
  - goldenimage.pipeline.wait_rounds.background
attributes:
  check_mode:
    support: full
    details:
      - A HEAD of O(key); the file is hashed only when O(key) already exists and O(sha256) is not given.
      - For a free O(key), the bucket's controls are read; no canary is written, so check mode refuses only
        a destination its controls already show public.
  diff_mode:
    support: full
  idempotent:
    support: full
notes:
  - Runs where the file is; the k8s modules of a play usually run on the controller.
seealso:
  - module: goldenimage.pipeline.os_mirror_object
  - module: goldenimage.pipeline.bucket_exposure
"""

EXAMPLES = r"""
- name: Upload the exported Windows golden
  goldenimage.pipeline.golden_export_object:
    bucket: cdi-os-images
    key: windows/11/2026-08-09/windows11-x64-golden.qcow2
    path: /srv/export/windows11-x64-golden.qcow2
    source: pvc://golden-images-build/win11-sealed
    endpoint_url: https://s3.example.com
  register: exported

- name: Upload a KMS-configured golden, only to a bucket proven private
  goldenimage.pipeline.golden_export_object:
    bucket: licensed-images
    key: windows/11/2026-08-09/windows11-x64-golden.qcow2
    path: /srv/export/windows11-x64-golden.qcow2
    license: kms
    endpoint_url: https://s3.example.com
"""

RETURN = r"""
signed:
  description:
    - The signature and provenance written beside the object (or kept, or in check mode to be written), as
      RV(goldenimage.pipeline.os_mirror_object#module:signed) describes them.
  returned: when a signing key is given and the digest is known
  type: dict
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
action:
  description: V(upload) or V(skip) (the key already holds these bytes).
  returned: success
  type: str
  sample: upload
key:
  description: The key written (or found).
  returned: success
  type: str
  sample: windows/11/2026-08-09/windows11-x64-golden.qcow2
sha256:
  description: sha256 of the file (hex); empty in check mode when it is not known without reading the file.
  returned: success
  type: str
  sample: 5e6b9a6f8bb1d2a0c3b3f2d4b2b6c1e0f1a2b3c4d5e6f708192a3b4c5d6e7f80
size:
  description: Size in bytes.
  returned: success
  type: int
  sample: 6818156544
bytes_moved:
  description: Bytes uploaded by this run.
  returned: always
  type: int
  sample: 6818156544
seconds:
  description: Wall time of the run.
  returned: always
  type: float
  sample: 41.2
throughput_mib_s:
  description: RV(bytes_moved) in MiB per second.
  returned: always
  type: float
  sample: 157.8
parts:
  description: Multipart parts uploaded (predicted in check mode).
  returned: when an upload is done or predicted
  type: int
  sample: 407
verified_by:
  description: The comparisons that proved the stored bytes equal the bytes read.
  returned: when uploaded
  type: list
  elements: str
  sample:
    - sha256 of the whole stream (computed while it was sent)
    - ETag of the stored object (md5 of its parts)
image_facts:
  description:
    - The image-facts document read from O(path) (the shape of
      RV(goldenimage.pipeline.seal_verify#module:facts)); null with O(read_facts=false).
  returned: always
  type: dict
  sample: {schema_version: 1, os_family: linux, unreadable: [], private_keys: []}
sensitive_reasons:
  description: Every reason the bytes are sensitive, read from the file and declared; empty when none.
  returned: always
  type: list
  elements: str
  sample: ["key-bearing: /etc/ssl/private/ssl-cert-snakeoil.key is left in the image (tls, PRIVATE KEY)"]
exposure:
  description:
    - The proof made before the upload (C(exposure.prove_private)); absent when O(key) already held the file.
    - C(verdict) (V(public), V(private) or V(unknown)), C(exposed), C(public_by) (the controls and probes that
      say public), C(controls) (each with C(status), C(code), C(state) V(answered) or V(not answered),
      C(public), C(detail)), C(not_answered), C(probes) (probe -> HTTP status, for C(get), C(range_get),
      C(head), C(list)), C(canary_key), C(canary_written), C(canary_deleted), C(canary_problem) (a canary
      that could not be deleted, also warned about), C(sensitive) (the reasons), C(allowed) and C(refusal).
  returned: when O(key) was free
  type: dict
  sample:
    verdict: private
    public_by: []
    probes: {get: 403, range_get: 403, head: 403, list: 403}
    not_answered: [public_access_block]
    canary_deleted: true
    sensitive: ["declared licence kms (KMS-configured)"]
    allowed: true
cleanup:
  description: On a failed transfer, what was aborted or deleted.
  returned: on failure of a transfer
  type: list
  elements: str
  sample: ["abort the upload to windows/11/2026-08-09/windows11-x64-golden.qcow2"]
"""

import datetime
import os
import time

from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket import _mirror_transfer as transfer
from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket import exposure, mirror
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import inputs
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import (
    PipelineError,
    run_module,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import _disk
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance
from ansible_collections.goldenimage.pipeline.plugins.module_utils.s3._s3 import (
    anonymous_client,
    call_failed,
    canary_answers,
    check_endpoint,
    object_reads,
    read_controls,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.s3._s3_module import (
    s3_arg_spec,
    s3_client_from_params,
    s3_module,
)


def argument_spec():
    return s3_arg_spec(
        bucket=dict(type="str", required=True),
        key=dict(type="str", required=True, no_log=False),
        path=dict(type="path", required=True),
        sha256=dict(type="str"),
        source=dict(type="str"),
        concurrency=dict(type="int", default=4),
        part_size=dict(type="raw", default="16M"),
        content_type=dict(type="str", default="application/octet-stream"),
        license=dict(type="str", default="none", choices=list(exposure.LICENSE_CHOICES)),
        sensitive_reasons=dict(type="list", elements="str", default=[]),
        read_facts=dict(type="bool", default=True),
        progress_file=dict(type="path"),
        builder=provenance.builder_option(),
        **provenance.key_options("signing_"),
    )


def build_module():
    return s3_module(argument_spec(), ("source",), mutually_exclusive=[("signing_key_path", "signing_key")])


class ExportObject(transfer.UploadRun):
    """HEAD the key, decide with ``mirror.plan_export``, upload with ``transfer.Upload``."""

    def inputs(self):
        """Every input rule, before the first request."""
        p = self.params
        inputs.object_key(p["key"], "key")
        check_endpoint(p["endpoint_url"])
        mirror.check_export_source(p["source"])
        mirror.check_concurrency(p["concurrency"])
        requested = mirror.part_size_bytes(p["part_size"])
        expected = mirror.normalize_sha256(p["sha256"]) if p["sha256"] else None
        path = p["path"]
        inputs.require_file(
            path, os.path.isfile(path), "option path (%s)" % path, "give the exported image file"
        )
        facts = self.read_facts(path) if p["read_facts"] else None
        self.sensitive = exposure.sensitive_reasons(
            p["license"], facts=facts, facts_reasons=p["sensitive_reasons"]
        )
        self.result.update(image_facts=facts, sensitive_reasons=self.sensitive)
        # The key is read and checked before the first request, so a bad key writes nothing.
        self.signing_key = signing.private_key_from(p, "signing_")
        return expected, requested

    def sign(self, client, digest):
        """Sign the exported object where it is made (``UploadRun.sign_beside``)."""
        if self.signing_key is None or not digest:
            return
        p = self.params
        statement = mirror.exported_statement(
            p["key"],
            digest,
            p["source"] or os.path.abspath(p["path"]),
            self.result.get("image_facts"),
            signing.builder(p["builder"]),
            mirror.timestamp(datetime.datetime.now(datetime.timezone.utc)),
        )
        self.sign_beside(client, p["bucket"], p["key"], digest, statement)

    def read_facts(self, path):
        try:
            return _disk.read_facts_or_why(path)
        except _disk.MissingLibrary as exc:
            raise PipelineError(
                "%s, so the image's facts cannot be read from %s: install the collection's Python "
                "requirements on the host the module runs on; nothing was uploaded" % (exc.msg, path)
            ) from exc

    def hash_file(self):
        source = transfer.open_source(path=self.params["path"], progress=self.progress())
        try:
            return transfer.hash_source(source)[0]
        except transfer.SourceError as exc:
            raise transfer.SourceError("hash %s: %s" % (self.params["path"], exc.msg)) from exc
        finally:
            source.close()

    def _run(self):
        p = self.params
        expected, requested = self.inputs()
        client = s3_client_from_params(p, max_pool_connections=max(10, p["concurrency"] + 2))
        try:
            held = transfer.head(client, p["bucket"], p["key"])
        except Exception as exc:
            raise call_failed("HEAD s3://%s/%s" % (p["bucket"], p["key"]), exc, bucket=p["bucket"]) from exc
        size = os.path.getsize(p["path"])
        part_size = mirror.plan_part_size(size, requested)
        self.result.update(key=p["key"], size=size)
        if held is not None:
            digest = expected or self.hash_file()
            recorded = (held.get("Metadata") or {}).get(mirror.META_SHA256)
            self.result["action"] = mirror.plan_export(p["bucket"], p["key"], recorded, digest)
            self.result.update(sha256=digest, size=held.get("ContentLength", size))
            if exposure.held_needs_proof(held.get("Metadata"), self.sensitive):
                refusal = exposure.held_refusal(p["bucket"], p["key"], self.anonymous_reads(), self.sensitive)
                if refusal:
                    raise PipelineError(refusal, refused=True, **self.result)
            summary = mirror.object_summary(p["key"], size, digest)
            self.set_diff(summary, summary)
            self.sign(client, digest)
            return
        self.result.update(
            action="upload",
            sha256=expected or "",
            parts=mirror.part_count(size, part_size),
            part_size=part_size,
        )
        self.prove_private(client)
        if self.module.check_mode:
            self.result["changed"] = True
            self.set_diff({}, mirror.object_summary(p["key"], size, expected or ""))
            self.sign(client, expected)
            return
        self.upload(client, expected, part_size)
        self.check_uploaded(client)
        self.sign(client, self.result.get("sha256"))

    def anonymous(self):
        p = self.params
        return anonymous_client(p["endpoint_url"], p.get("region"), p["validate_certs"], p.get("ca_bundle"))

    def prove_private(self, client):
        """Before the first byte: the destination's controls and, outside check mode, a canary under the
        key's prefix read anonymously; ``exposure.prove_private`` decides. Check mode writes no canary, so
        it refuses only what the controls already show public."""
        p = self.params
        prefix = exposure.key_prefix(p["key"])
        controls = read_controls(client, p["bucket"])
        canary = None
        if not self.module.check_mode:
            key = exposure.canary_key(p["key"], os.urandom(8).hex())
            canary = canary_answers(client, self.anonymous(), p["bucket"], key, exposure.CANARY_BODY)
        proof = exposure.prove_private(p["bucket"], prefix, controls, canary, self.sensitive)
        self.result["exposure"] = proof
        if proof["canary_problem"]:
            self.module.warn(proof["canary_problem"])
        if not proof["allowed"] and (canary is not None or proof["verdict"] == exposure.PUBLIC):
            raise PipelineError(proof["refusal"], refused=True)

    def anonymous_reads(self):
        return object_reads(self.anonymous(), self.params["bucket"], self.params["key"])

    def check_uploaded(self, client):
        """The second check, on the object itself: anonymous reads of sensitive bytes that succeed now get
        the object deleted again and the run failed."""
        if not self.sensitive:
            return
        p = self.params
        answers = self.anonymous_reads()
        found = exposure.verdict(answers)
        if found["verdict"] == exposure.PRIVATE:
            return
        try:
            client.delete_object(Bucket=p["bucket"], Key=p["key"])
            note = "it was deleted again"
        except Exception as exc:
            note = "deleting it failed: %s; delete it by hand" % call_failed("DELETE", exc).msg
        raise PipelineError(
            "s3://%s/%s was uploaded after the destination was proven private, but anonymous reads of it are "
            "not refused now (%s); %s. %s"
            % (
                p["bucket"],
                p["key"],
                ", ".join("%s %s" % (name, answer[0]) for name, answer in sorted(answers.items())),
                note,
                exposure.remedy(p["bucket"], exposure.key_prefix(p["key"]), found["allowed"] or ["get"]),
            ),
            refused=True,
        )

    def upload(self, client, expected, part_size):
        p = self.params
        source_name = p["source"] or os.path.abspath(p["path"])
        exported_at = mirror.timestamp(datetime.datetime.now(datetime.timezone.utc))
        mark = {exposure.SENSITIVE_META: exposure.sensitive_mark(self.sensitive)}
        source = transfer.open_source(path=p["path"], progress=self.progress())
        job = transfer.Upload(
            client,
            p["bucket"],
            source,
            lambda digest: (p["key"], dict(mirror.final_metadata(digest, source_name, exported_at), **mark)),
            part_size,
            p["concurrency"],
            content_type=p["content_type"],
            expected_sha256=expected,
        )
        started = time.monotonic()
        try:
            report = job.run()
        finally:
            source.close()
        seconds = time.monotonic() - started
        for warning in report.pop("warnings", None) or []:
            self.module.warn(warning)
        self.uploaded(report, seconds, source_name)


def main():
    module = build_module()
    run_module(module, lambda: ExportObject(module).run())


if __name__ == "__main__":
    main()
