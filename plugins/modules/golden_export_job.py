#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: golden_export_job
short_description: Export a sealed disk to a bucket key from a Job next to its claim, with its sha256
version_added: 0.1.0
description:
  - Given a signing key (O(signing_key_path) or O(signing_key)), the exported golden is signed where it is
    made, from the controller once the Job is done and the stored object's sha256 is read back, as
    M(goldenimage.pipeline.golden_export_object) signs. C(<key>.sig) beside it holds a detached signature in
    the format C(cosign sign-blob --key) writes, and C(<key>.intoto.jsonl) its provenance (SLSA provenance
    v1 in a DSSE envelope) whose subject is O(key) and its sha256 and whose inputs are the exported claim
    (O(source), else C(pvc://<namespace>/<pvc>)) and the image facts the Job read, with the builder
    (O(builder)) and the time. The key is read and checked before the first request. The bytes are not read
    again; the signing key never enters the cluster. An export that finds its object already held
    (RV(action) V(skip)) and signed by this key with its provenance writes nothing; held but not signed
    by it (a run stopped between the upload and the signing), the Job reads the claim again, finds the key
    held and computes the digest, and that digest is signed, never the one the bucket records.
  - Exports the sealed disk on the PersistentVolumeClaim O(pvc) the way the operator guide does, inside the
    cluster, so that no byte of it passes through the Ansible controller and any volume works (a Ceph RBD
    volume has no path on the controller). A Job in O(namespace) converts it with C(qemu-img convert -c -O
    qcow2) onto a scratch claim and uploads the qcow2 to O(key) of O(bucket).
  - The Job reads the qcow2 once. It uploads it in parts (multipart, each part with its Content-MD5 and its
    own sha256, which the server checks) to a staging key next to O(key) (C(<key>.partial-<namespace>-<name>))
    while it computes the sha256 of the whole, then makes O(key) by a server-side copy of the staging object
    that records the digest as the C(sha256) metadata (CopyObject, or a multipart copy of ranges above 5 GiB),
    checks the stored object's sha256 and size with a HEAD, and deletes the staging object. Any failure aborts
    the uploads and deletes the staging object, so nothing partial or unchecked is left. The module then reads
    the object's metadata itself, from the controller, and fails unless it names the digest the Job reported.
  - When O(key) already holds an object by the time the Job has converted the disk, the Job only computes the
    qcow2's sha256; the same digest leaves the object alone, another one is refused.
  - Before anything else, the Job reads the image's facts from the disk itself, with the reader of
    M(goldenimage.pipeline.seal_verify) (RV(image_facts)), which finds product keys and KMS settings,
    passwords left in answer files or in Winlogon, BitLocker, and private keys left in a Linux image. Each
    key, credential or place that could not be read is a reason the bytes are sensitive
    (RV(sensitive_reasons)), whatever O(license) says; a disk whose OS cannot be told is unproven, so
    sensitive too.
  - Before it converts anything for a free O(key), the Job proves the destination with its own credentials
    and the same decision as M(goldenimage.pipeline.golden_export_object) (C(exposure.prove_private), shipped
    with the program); it reads the bucket's controls (GetBucketPolicyStatus, GetBucketAcl,
    GetPublicAccessBlock; one that does not answer is recorded as not answered, never as private), writes a
    throw-away canary named like O(key) under its prefix, reads it unsigned with a GET, a ranged GET, a HEAD
    and a listing of the prefix, and deletes it. When the bytes are sensitive (a reason read from the image,
    a licensed O(license) or any O(sensitive_reasons)) and the destination is not proven private, the Job
    stops before its first byte and the module fails with C(code=exposed), naming the bucket, what answered
    2xx and the supported move.
  - The credentials the Job signs with come from the Secret O(credentials_secret) (CDI's C(accessKeyId) and
    C(secretKey) keys by default), never from the task's arguments; the Job talks to S3 with boto3 and needs
    C(python3), C(qemu-img), C(boto3) and the C(dissect) packages in O(image) (images/golden-export in the
    collection's repository installs them). Its program is not part of the image; the module ships it in a
    ConfigMap with the collection's S3 client and transfer code, so the Job always runs the code of this
    module, with the collection's S3 retry policy.
  - Before anything is written, the module reads O(key) from the controller (with the S3 connection options).
    A key that holds an export of this very claim (its C(source-uid) metadata is the claim's uid) is left
    alone and the task reports no change, with no Job; a key that holds anything else is refused. Export a
    changed image under a new key (a new date).
  - The exported object records whether its bytes were sensitive (metadata C(sensitive), V(yes) or V(no)).
    When the key already holds this export and its bytes are sensitive (by this run's reasons or that record;
    an object without it counts as sensitive), the object is read anonymously (a ranged GET and a HEAD) from
    the controller, and by the Job when it finds the key held; if either is answered, the module fails with
    C(code=exposed), naming the object and the supported move, and deletes nothing.
  - The Job, its pod, the ConfigMap and the scratch claim are deleted when the export ends, on failure and on
    timeout too (a multipart upload the killed Job left is aborted and its staging object deleted); what could
    not be deleted is reported by name with the command that removes it.
  - The wait runs in rounds of O(report_every) seconds; the action plugin prints the Job's phase and percent
    (convert, then upload and copy, or sha256 when the key is held) after each round.
  - With O(state=absent) the module removes what an interrupted export (a killed controller) left under
    O(name), the Job with its pods, the ConfigMap and the scratch claim, and aborts the multipart uploads to
    O(key) and to its staging key, and deletes the staging object, when O(bucket) and O(key) are given. Each
    object is read first; one without this export's C(goldenimage.pipeline/export-job) label is not deleted
    and is reported in RV(left_alone). Who uses the scratch claim and the ConfigMap is asked first (pods and
    VirtualMachines mounting them, claims and DataVolumes cloning from the claim, other than the Job's own
    pods); any such consumer refuses the task, naming each, before anything is deleted. At the end of an
    export, an object in use is not deleted and is reported in RV(left_behind).
author:
  - goldenimage.pipeline maintainers (@goldenimage)
options:
  name:
    description:
      - Name of the Job, of its ConfigMap and (with C(-scratch)) of its scratch claim. At most 56
        characters.
    type: str
    required: true
  namespace:
    description:
      - Namespace of O(pvc), where the Job runs.
    type: str
    required: true
  state:
    description:
      - V(present) exports; V(absent) removes what an interrupted export of this O(name) left.
    type: str
    choices: [present, absent]
    default: present
  pvc:
    description:
      - The sealed disk, a Block claim or a Filesystem claim holding O(file).
      - Required with O(state=present).
    type: str
  file:
    description:
      - The disk image file in a Filesystem O(pvc).
    type: str
    default: disk.img
  bucket:
    description:
      - Bucket to upload to. It must exist.
      - Required with O(state=present).
    type: str
  key:
    description:
      - Key of the object, for example C(windows/11/2026-08-09/windows11-x64-golden.qcow2); the collection's
        one key rule applies (no leading C(/), no empty, C(.) or C(..) segment, at most 1,024 bytes).
      - Required with O(state=present).
    type: str
  credentials_secret:
    description:
      - Secret in O(namespace) holding the S3 credentials the Job signs with. Its keys are
        O(access_key_field) and O(secret_key_field) (and, when present, O(session_token_field)).
      - The module checks that the Secret has both keys before anything is written; it never reads or
        prints their values.
      - Required with O(state=present).
    type: str
  access_key_field:
    description:
      - Key of the access key id in O(credentials_secret).
    type: str
    default: accessKeyId
  secret_key_field:
    description:
      - Key of the secret access key in O(credentials_secret).
    type: str
    default: secretKey
  session_token_field:
    description:
      - Key of an optional session token in O(credentials_secret).
    type: str
    default: sessionToken
  pod_endpoint_url:
    description:
      - The S3 endpoint as the Job's pod reaches it (an in-cluster Service, for example). Defaults to
        O(endpoint_url). A URL with credentials in it is refused.
    type: str
  scratch_size:
    description:
      - Size of the scratch claim the qcow2 is written to; at least the compressed image. Zero or less is
        refused.
    type: str
    default: 80Gi
  scratch_storage_class:
    description:
      - StorageClass of the scratch claim; empty means the cluster's default class.
    type: str
    default: ""
  image:
    description:
      - Container image of the Job. It needs C(python3), C(qemu-img) and the C(dissect) packages that read
        the image's facts (an image without them fails the export before anything is converted). Build it
        from C(images/golden-export/Containerfile) in the collection and push it to a registry the cluster
        pulls from (on an air-gapped cluster, the local mirror).
      - Required with O(state=present).
    type: str
  compress:
    description:
      - Write a compressed qcow2 (C(qemu-img convert -c)).
    type: bool
    default: true
  source:
    description:
      - What the export is recorded as coming from (the C(source-url) metadata). Defaults to
        C(pvc://<namespace>/<pvc>). A value with credentials in it is refused.
    type: str
  part_size:
    description:
      - Size of a multipart part, as bytes or with a unit (V(16M)); raised to 8 MiB at least. Zero or less
        is refused.
    type: raw
    default: 16M
  concurrency:
    description:
      - Parts the Job uploads at the same time, 1 or more.
    type: int
    default: 4
  content_type:
    description:
      - C(Content-Type) of the object.
    type: str
    default: application/x-qemu-disk
  labels:
    description:
      - Labels added to the Job, its pod, the ConfigMap and the scratch claim.
    type: dict
    default: {}
  os:
    description:
      - Whose facts the Job reads. Detected from the partitions when omitted (NTFS or BitLocker means
        V(windows), ext means V(linux)); a disk where neither is found is unproven.
    type: str
    choices: [windows, linux]
extends_documentation_fragment:
  - goldenimage.pipeline.exposure
  - goldenimage.pipeline.s3.connection
  - goldenimage.pipeline.signing.prefixed
  - goldenimage.pipeline.signing.builder
  - kubernetes.core.k8s_auth_options
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.actiongroup_k8s
  - goldenimage.pipeline.wait_rounds
attributes:
  check_mode:
    support: full
    details:
      - Reads the claim, the Secret and the key, and reports whether an export would run; creates nothing.
        With O(state=absent), reports what would be deleted.
  diff_mode:
    support: full
  idempotent:
    support: full
    details:
      - A rerun over a key that holds this claim's export sends no mutating request at all.
  action_group:
    description:
      - In both groups - C(group/goldenimage.pipeline.k8s) in C(module_defaults) sets the Kubernetes auth
        options, C(group/goldenimage.pipeline.s3) the S3 endpoint and credentials.
    support: full
    membership:
      - goldenimage.pipeline.k8s
      - goldenimage.pipeline.s3
notes:
  - The S3 connection options (O(endpoint_url), O(access_key), O(secret_key)...) are the controller's, used
    to read the key before and after the export; the Job's credentials come from O(credentials_secret).
    O(validate_certs) applies to both the Kubernetes API and this S3 endpoint (unset, S3 verifies).
  - The Job's proof is made with the Job's credentials, from the pod, against O(pod_endpoint_url). Run
    M(goldenimage.pipeline.bucket_exposure) with O(goldenimage.pipeline.bucket_exposure#module:canary=true)
    before this module to refuse earlier, and again on the uploaded object; the
    M(goldenimage.pipeline.windows_export) role does both.
seealso:
  - module: goldenimage.pipeline.golden_export_object
  - module: goldenimage.pipeline.bucket_exposure
  - module: goldenimage.pipeline.volume_job
"""

EXAMPLES = r"""
- name: Remove what an interrupted export left, aborting its pending upload
  goldenimage.pipeline.golden_export_job:
    name: win11-export
    namespace: golden-images-build
    state: absent
    bucket: cdi-os-images
    key: windows/11/2026-08-09/windows11-x64-golden.qcow2

- name: Export the sealed Windows disk to the image bucket from inside the cluster
  goldenimage.pipeline.golden_export_job:
    name: win11-export
    namespace: golden-images-build
    pvc: win11-sealed
    bucket: cdi-os-images
    key: windows/11/2026-08-09/windows11-x64-golden.qcow2
    credentials_secret: cdi-os-images
    pod_endpoint_url: http://rook-ceph-rgw-objectstore.rook-ceph.svc
    endpoint_url: https://s3.example.com
    scratch_storage_class: rbd-vm
    image: registry.example.com/tools/golden-export:1
  register: exported
"""

RETURN = r"""
signed:
  description:
    - The signature and provenance written beside the object (or kept), as
      RV(goldenimage.pipeline.os_mirror_object#module:signed) describes them.
  returned: when a signing key is given and the object was uploaded by this export
  type: dict
action:
  description: V(upload), or V(skip) when the key already holds this claim's export.
  returned: success
  type: str
  sample: upload
key:
  description: The key written (or found).
  returned: success
  type: str
  sample: windows/11/2026-08-09/windows11-x64-golden.qcow2
sha256:
  description: sha256 of the qcow2 (hex), as the object's metadata records it.
  returned: success, except in check mode for a free key
  type: str
  sample: 5e6b9a6f8bb1d2a0c3b3f2d4b2b6c1e0f1a2b3c4d5e6f708192a3b4c5d6e7f80
size:
  description: Size of the qcow2 in bytes.
  returned: success, except in check mode for a free key
  type: int
  sample: 6818156544
read_bytes:
  description: Bytes of the qcow2 the Job read after converting it, once its size (a single pass).
  returned: when the Job ran
  type: int
  sample: 6818156544
parts:
  description: Multipart parts the Job uploaded.
  returned: when uploaded
  type: int
  sample: 407
seconds:
  description: Time the Job took (conversion and upload), as it measured it.
  returned: when uploaded
  type: float
  sample: 412.5
convert_seconds:
  description: Time of the conversion, as the Job measured it.
  returned: when uploaded
  type: float
  sample: 301.2
removed:
  description: With O(state=absent), the objects deleted (or, in check mode, that would be).
  returned: state is absent
  type: list
  elements: str
  sample: [Job golden-images-build/win11-export, ConfigMap golden-images-build/win11-export]
left_alone:
  description: With O(state=absent), objects under the export's names that it did not make, not deleted.
  returned: state is absent
  type: list
  elements: str
job:
  description: The Job, already deleted.
  returned: always
  type: dict
  sample: {name: win11-export, namespace: golden-images-build}
exposure:
  description:
    - The proof the Job made before its first byte (see M(goldenimage.pipeline.golden_export_object)'s
      RV(goldenimage.pipeline.golden_export_object#module:exposure) for the fields); on a refusal, the
      message names the same.
  returned: when the Job exported to a free key
  type: dict
  sample:
    verdict: private
    probes: {get: 403, range_get: 403, head: 403, list: 403}
    canary_deleted: true
    allowed: true
image_facts:
  description:
    - The image-facts document the Job read from the disk (the shape of
      RV(goldenimage.pipeline.seal_verify#module:facts)); store it with the golden
      (M(goldenimage.pipeline.golden_snapshot)'s O(goldenimage.pipeline.golden_snapshot#module:image_facts)).
  returned: when the Job ran
  type: dict
  sample:
    schema_version: 1
    os_family: windows
    unreadable: []
    image_state: {value: IMAGE_STATE_GENERALIZE_RESEAL_TO_OOBE, generalized: true}
sensitive_reasons:
  description: Every reason the bytes were sensitive, read from the image and declared; empty when none.
  returned: when the Job ran
  type: list
  elements: str
  sample:
    - "key-bearing: C:\\Windows\\Panther\\unattend.xml holds a product key (specialize/ProductKey)"
code:
  description:
    - Why the Job failed, V(exposed) when the destination was not proven private for sensitive bytes, V(facts)
      when the image's facts could not be read at all (the image lacks dissect).
  returned: when the Job failed
  type: str
  sample: exposed
verified_by:
  description: How the stored object was checked.
  returned: when uploaded
  type: list
  elements: str
line:
  description: The progress line of the last round (also printed by the action plugin).
  returned: always
  type: str
lines:
  description: Every line printed while the task waited.
  returned: always
  type: list
  elements: str
left_behind:
  description: Objects that could not be deleted, with the error (C(in_use) when something else uses them).
  returned: when a delete failed or was left to the users of an object
  type: list
  elements: dict
aborted_uploads:
  description: Ids of the multipart uploads to the key or its staging key a failed or timed-out Job left,
    aborted by the module, and the s3:// URL of the staging object it deleted.
  returned: when a failed export left one
  type: list
  elements: str
log:
  description: The end of the Job's log, when it failed or timed out.
  returned: failure
  type: str
resume:
  description: The options that continue this wait in another call.
  returned: when the wait is not over
  type: dict
"""

import datetime
import time

from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket import _mirror_transfer as transfer
from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket import exposure, mirror
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import (
    _progress_file,
    errors,
    inputs,
    redact,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import rounds as rounds_
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common._object_wait import ObjectWait
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import (
    PipelineError,
    run_module,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import (
    _disk,
    _partitions,
    _qemu_img,
    image_facts,
    seal,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk._seal_job import module_files
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import jobs
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import (
    KubeModule,
    is_transient,
    object_diff,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._volume_job import JobClient
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing, provenance
from ansible_collections.goldenimage.pipeline.plugins.module_utils.s3 import _s3
from ansible_collections.goldenimage.pipeline.plugins.module_utils.s3._s3 import (
    anonymous_client,
    call_failed,
    check_endpoint,
    object_reads,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.s3._s3_module import (
    hide_url_secrets,
    s3_arg_spec,
    s3_client_from_params,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.windows import _export_cli as export_cli
from ansible_collections.goldenimage.pipeline.plugins.module_utils.windows._export_job import ExportObjects
from ansible_collections.goldenimage.pipeline.plugins.module_utils.workers import worker


def argument_spec():
    spec = rounds_.object_arg_spec(
        state={"type": "str", "default": "present", "choices": ["present", "absent"]},
        pvc={"type": "str"},
        file={"type": "str", "default": "disk.img"},
        bucket={"type": "str"},
        key={"type": "str", "no_log": False},
        credentials_secret={"type": "str", "no_log": False},
        access_key_field={"type": "str", "default": "accessKeyId", "no_log": False},
        secret_key_field={"type": "str", "default": "secretKey", "no_log": False},
        session_token_field={"type": "str", "default": "sessionToken", "no_log": False},
        pod_endpoint_url={"type": "str"},
        scratch_size={"type": "str", "default": "80Gi"},
        scratch_storage_class={"type": "str", "default": ""},
        image={"type": "str"},
        compress={"type": "bool", "default": True},
        source={"type": "str"},
        part_size={"type": "raw", "default": "16M"},
        concurrency={"type": "int", "default": 4},
        content_type={"type": "str", "default": "application/x-qemu-disk"},
        labels={"type": "dict", "default": {}},
        license={"type": "str", "default": "none", "choices": list(exposure.LICENSE_CHOICES)},
        sensitive_reasons={"type": "list", "elements": "str", "default": []},
        os={"type": "str", "choices": ["windows", "linux"]},
        builder=provenance.builder_option(),
        **provenance.key_options("signing_"),
    )
    s3 = s3_arg_spec()
    # One validate_certs for both connections: kubernetes.core's (unset verifies S3 too).
    del s3["validate_certs"]
    return dict(spec, **s3)


# What the Job reports that the module returns.
RESULT_FIELDS = (
    "sha256",
    "size",
    "read_bytes",
    "parts",
    "seconds",
    "convert_seconds",
    "exposure",
    "image_facts",
    "sensitive_reasons",
)


def program_files():
    """ConfigMap data: the Job's program and what it imports (the facts and partition readers and their
    rules, the exposure rule and its two helpers, the S3 adapter and the transfer code with their rules and
    the provenance rules the mirror's rules read, the error base), under their keys (jobs.code_key)."""
    return module_files(
        export_cli,
        _disk,
        _partitions,
        image_facts,
        seal,
        errors,
        exposure,
        inputs,
        redact,
        _s3,
        transfer,
        mirror,
        provenance,
        _signing,
        _qemu_img,
        rounds_,
        _progress_file,
    )


class ExportJob(ObjectWait):
    """One round: on the first, decide from the key and make the Job; then wait; at the end, verify and
    delete what was made."""

    def __init__(self, params, module, client, check_mode=False, clock=time.time, sleeper=None):
        def job():
            return client.job(params["namespace"], params["name"])

        super(ExportJob, self).__init__(params, job, check_mode, is_transient, clock, sleeper)
        self.module = module
        self.client = client
        self.ref = {"name": params["name"], "namespace": params["namespace"]}
        self.signing_key = None

    # ------------------------------------------------------------ inputs, before any request
    def inputs(self):
        p = self.p
        scratch_bytes = worker.quantity_bytes(p["scratch_size"], "option scratch_size")
        jobs.check_export_request(p["name"], p["scratch_size"], scratch_bytes)
        inputs.object_key(p["key"], "key")
        check_endpoint(p["endpoint_url"])
        check_endpoint(p["pod_endpoint_url"], "pod_endpoint_url")
        mirror.check_export_source(p["source"])
        mirror.check_concurrency(p["concurrency"])
        self.sensitive = exposure.sensitive_reasons(p["license"], facts_reasons=p["sensitive_reasons"])
        return mirror.part_size_bytes(p["part_size"])

    # ------------------------------------------------------------ reads, before any write
    def sealed_claim(self):
        p = self.p
        claim = self.client.claim(p["namespace"], p["pvc"])
        return jobs.require_claim(
            claim, p["namespace"], p["pvc"], "give the claim of the sealed disk; nothing was exported"
        )

    def check_secret(self):
        p = self.p
        return jobs.export_secret(
            p["namespace"],
            p["credentials_secret"],
            self.module.get("v1", "Secret", p["credentials_secret"], p["namespace"]),
            p["access_key_field"],
            p["secret_key_field"],
            p["session_token_field"],
        )

    def prove_held(self, held, result):
        """The key holds this claim's export already: sensitive bytes there (by this run's reasons or the
        mark the export recorded) must not be readable anonymously; nothing is written or deleted."""
        p = self.p
        if not exposure.held_needs_proof(held, self.sensitive):
            return
        validate = p.get("validate_certs")
        anonymous = anonymous_client(
            p["endpoint_url"], p.get("region"), True if validate is None else validate, p.get("ca_bundle")
        )
        refusal = exposure.held_refusal(
            p["bucket"], p["key"], object_reads(anonymous, p["bucket"], p["key"]), self.sensitive
        )
        if refusal:
            raise PipelineError(refusal, refused=True, code="exposed", **result)

    def held(self, client):
        p = self.p
        try:
            found = transfer.head(client, p["bucket"], p["key"])
        except Exception as exc:
            raise call_failed("HEAD s3://%s/%s" % (p["bucket"], p["key"]), exc, bucket=p["bucket"]) from exc
        return None if found is None else dict(found.get("Metadata") or {}, size=found.get("ContentLength"))

    def signed_already(self, client, held):
        """Whether the held export carries this run's key's signature and provenance (or none is asked)."""
        if self.signing_key is None:
            return True
        p, digest = self.p, held.get(mirror.META_SHA256)
        keyid = _signing.key_id(self.signing_key)
        texts = transfer.read_companions(client, p["bucket"], p["key"])
        signature, found = _signing.evidence({keyid: self.signing_key.public_key()}, *texts, digest)
        return provenance.already_signed(keyid, p["key"], digest, signature, found)

    # ------------------------------------------------------------ the run
    def first_round(self, result):
        p = self.p
        part_size = self.inputs()
        claim = self.sealed_claim()
        secret = self.check_secret()
        s3 = s3_client_from_params(p)
        held = self.held(s3)
        action = mirror.plan_claim_export(
            p["bucket"], p["key"], held, jobs.export_source_name(p), claim["metadata"]["uid"]
        )
        summary = {
            "key": p["key"],
            "source": jobs.export_source_name(p),
            "source_uid": claim["metadata"]["uid"],
        }
        if action == "skip" and not self.signed_already(s3, held):
            # Held but not signed by this key (a run stopped between upload and signing): the Job reads
            # the claim again, finds the key held, and the digest signed is the one it computes.
            action = "upload"
        if action == "skip":
            result.update(action="skip", sha256=held.get(mirror.META_SHA256), size=held.get("size"))
            self.prove_held(held, result)
            result["diff"] = {"before": summary, "after": summary}
            return None
        made = jobs.export_definitions(
            p,
            claim,
            secret,
            part_size,
            self.sensitive,
            program_files(),
            datetime.datetime.now(datetime.timezone.utc),
        )
        jobs.refuse_foreign_objects(
            [
                self.module.get(d["apiVersion"], d["kind"], d["metadata"]["name"], p["namespace"])
                for d in made[:2]
            ],
            p["name"],
            p["namespace"],
        )
        result.update(action="upload", changed=True, diff=object_diff(None, made[-1]))
        if self.check_mode:
            return None
        for definition in made:
            self.client.create(definition)
        return self.client.job(p["namespace"], p["name"])

    def run(self):
        p = self.p
        if p["state"] == "absent":
            return self.remove()
        # The key is read and checked before the first request, so a bad key writes nothing.
        self.signing_key = _signing.private_key_from(p, "signing_")
        now = self.clock()
        rounds = rounds_.from_params(p, now)
        result = {"changed": False, "job": dict(self.ref), "key": p["key"]}
        job = self.client.job(p["namespace"], p["name"])
        if job is None:
            if p["last_state"] is not None:
                raise self.ended(jobs.absent_message(p["namespace"], p["name"]))
            job = self.first_round(result)
            if job is None:
                done = result["action"] == "skip" or self.check_mode
                line = "s3://%s/%s: %s" % (
                    p["bucket"],
                    p["key"],
                    "holds this claim's export already"
                    if result["action"] == "skip"
                    else "would be exported (check mode)",
                )
                return dict(result, done=done, line=line)
            result["changed"] = True
        else:
            # A Job of this name from an interrupted export is waited for; any other is not touched.
            jobs.refuse_foreign_objects([job], p["name"], p["namespace"])
            result.update(action="upload", changed=True)
        self.rounds, self.result, self.first, self.percent = rounds, result, job, None
        return self.runner(rounds).run(self)

    def observe(self):
        """``(job, kind, last pod's log, phase)``: the Job read before the wait first, then read anew."""
        p = self.p
        job = ObjectWait.observe(self)
        if job is None:
            raise self.ended(jobs.absent_message(p["namespace"], p["name"]))
        kind, _cond = jobs.outcome(job)
        _pod, log = self.client.last_pod_log(p["namespace"], p["name"], strict=bool(kind))
        self.percent = jobs.log_progress(log) or self.percent
        return job, kind, log, jobs.log_phase(log)

    def state(self, seen):
        return jobs.state_key(seen[0], self.percent) + (seen[3] or "")

    def verdict(self, seen, now):
        return bool(seen[1]), None

    def line(self, seen, now):
        job, _kind, _log, phase = seen
        line = jobs.line(self.p["namespace"], self.p["name"], job, self.percent, self.rounds.elapsed(now))
        return line + ", phase " + phase if phase else line

    def timed_out(self, seen, now, stuck, words):
        p, (job, _kind, log, _phase) = self.p, seen
        return self.ended(
            jobs.timeout_message(
                p["namespace"],
                p["name"],
                job,
                self.percent,
                p["wait_timeout"],
                words,
                log,
                "Nothing partial is left under the key.",
            ),
            stuck=stuck,
            line=self.line(seen, now),
            log=jobs.log_tail(log),
        )

    def report(self, seen, now, done, going_on):
        if done:
            return self.finish(self.result, seen[1], seen[2], self.line(seen, now))
        return dict(
            self.result,
            done=False,
            line=self.line(seen, now),
            progress=self.percent,
            resume=self.rounds.resume(),
        )

    def finish(self, result, kind, log, line):
        p = self.p
        outcome = export_cli.parse_log(log) or {}
        if kind == jobs.FAILED or outcome.get("error") or not outcome:
            why = outcome.get("error") or jobs.failed_message(p["namespace"], p["name"], self.fetch(), log)
            raise self.ended(
                "the export of PersistentVolumeClaim %s/%s failed: %s" % (p["namespace"], p["pvc"], why),
                line=line,
                log=jobs.log_tail(log),
                code=outcome.get("code"),
                refused=outcome.get("code") == "exposed",
                **{k: outcome[k] for k in ("image_facts", "sensitive_reasons", "exposure") if k in outcome},
            )
        left = self.cleanup()
        held = self.held(s3_client_from_params(p))
        where = "s3://%s/%s" % (p["bucket"], p["key"])
        if held is None or held.get(mirror.META_SHA256) != outcome.get("sha256"):
            raise PipelineError(
                "the export Job reported %s stored with sha256 %s, but the controller reads %s"
                % (
                    where,
                    outcome.get("sha256"),
                    "no object" if held is None else "sha256 %s" % held.get(mirror.META_SHA256),
                ),
                job=dict(self.ref),
                left_behind=left,
            )
        for name in RESULT_FIELDS:
            if name in outcome:
                result[name] = outcome[name]
        result["action"] = outcome.get("action", "upload")
        result["changed"] = result["action"] == "upload"
        self.sign(held.get(mirror.META_SHA256), outcome.get("image_facts"), result)
        result["verified_by"] = [
            "sha256 of the qcow2, computed while it was sent (in the Job)",
            "sha256 metadata and size of the stored object, read with a HEAD (in the Job)",
            "Content-MD5 and the ETag of every part (in the Job)",
            "sha256 metadata of the stored object, read from the controller",
        ]
        if left:
            raise PipelineError(
                "exported %s, but %s" % (where, self.leftover_note(left)), left_behind=left, **result
            )
        return dict(result, done=True, line=line + " -> %s %s" % (result["action"], where))

    def sign(self, digest, facts, result):
        """Sign the exported object where it is made, from the controller, as golden_export_object does:
        over the digest the Job computed while sending and the controller read back, never the bytes
        again; its provenance names the exported claim and the image facts the Job read."""
        if self.signing_key is None or not digest:
            return
        p = self.p
        statement = mirror.exported_statement(
            p["key"],
            digest,
            p["source"] or "pvc://%s/%s" % (p["namespace"], p["pvc"]),
            facts,
            _signing.builder(p["builder"]),
            mirror.timestamp(datetime.datetime.now(datetime.timezone.utc)),
        )
        client = s3_client_from_params(p)
        transfer.sign_beside(
            self.module, result, client, p["bucket"], p["key"], digest, statement, self.signing_key
        )

    def ended(self, msg, **fields):
        """The error of an export that will not complete; what it made is deleted first."""
        left = self.cleanup()
        if left:
            msg += "; %s" % self.leftover_note(left)
            fields["left_behind"] = left
        aborted, problem = self.abort_pending()
        if aborted:
            fields["aborted_uploads"] = aborted
        if problem:
            msg += "; %s" % problem
        return PipelineError(msg, job=dict(self.ref), **fields)

    def abort_pending(self):
        """Abort the multipart uploads to the key and to its staging key that a killed Job left (its pod is
        gone by now) and delete the staging object it may have completed, so a failed export leaves no
        stored parts behind either; ``(upload ids and the staging object's s3:// URL, problem or None)``."""
        p = self.p
        aborted, staging = [], jobs.export_staging_key(p)
        try:
            client = s3_client_from_params(p)
            answer = client.list_multipart_uploads(Bucket=p["bucket"], Prefix=p["key"])
            for upload in answer.get("Uploads") or []:
                if upload.get("Key") in (p["key"], staging):
                    client.abort_multipart_upload(
                        Bucket=p["bucket"], Key=upload["Key"], UploadId=upload["UploadId"]
                    )
                    aborted.append(upload["UploadId"])
            if transfer.head(client, p["bucket"], staging) is not None:
                client.delete_object(Bucket=p["bucket"], Key=staging)
                aborted.append("s3://%s/%s" % (p["bucket"], staging))
        except Exception as exc:
            where = "s3://%s/%s" % (p["bucket"], p["key"])
            return aborted, "could not abort the pending uploads to %s: %s" % (
                where,
                call_failed("abort", exc).msg,
            )
        return aborted, None

    def remove(self):
        """state=absent: delete what an interrupted export of this name left, and abort its pending upload."""
        p = self.p
        if p["key"] is not None:
            inputs.object_key(p["key"], "key")
        removed, alone = [], []
        left = self.cleanup(removed, alone, refuse=True)
        result = {
            "changed": bool(removed),
            "done": True,
            "job": dict(self.ref),
            "removed": removed,
            "left_alone": alone,
            "diff": {"before": {"objects": removed}, "after": {"objects": []}},
        }
        if p["bucket"] and p["key"] and not self.check_mode:
            aborted, problem = self.abort_pending()
            if problem:
                raise PipelineError(problem, **result)
            if aborted:
                result.update(changed=True, aborted_uploads=aborted)
        result["line"] = "export %s/%s: %s" % (
            p["namespace"],
            p["name"],
            "%s %s" % ("would remove" if self.check_mode else "removed", ", ".join(removed))
            if removed
            else "nothing to remove",
        )
        if left:
            raise PipelineError(self.leftover_note(left), left_behind=left, **result)
        return result

    def cleanup(self, removed=None, alone=None, refuse=False):
        """Delete what this export made (``_export_job.ExportObjects.cleanup``)."""
        objects = ExportObjects(
            self.module, self.p["namespace"], self.p["name"], self.check_mode, self.p["wait_sleep"]
        )
        return objects.cleanup(removed, alone, refuse)

    def leftover_note(self, left):
        return jobs.export_leftover_note(self.p["namespace"], left)


# Which options go together, checked by Ansible before the runner starts. The pod needs an endpoint
# it reaches: pod_endpoint_url, else the controller's endpoint_url (or AWS_ENDPOINT_URL).
ARGUMENT_RULES = dict(
    mutually_exclusive=[("signing_key_path", "signing_key")],
    required_if=[
        ("state", "present", ("pvc", "bucket", "key", "credentials_secret", "image")),
        ("state", "present", ("pod_endpoint_url", "endpoint_url"), True),
    ],
)


def main():
    module = KubeModule(argument_spec=argument_spec(), supports_check_mode=True, **ARGUMENT_RULES)
    hide_url_secrets(module, ("endpoint_url", "pod_endpoint_url"))
    run_module(module, lambda: ExportJob(module.params, module, JobClient(module), module.check_mode).run())


if __name__ == "__main__":
    main()
