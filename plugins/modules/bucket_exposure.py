#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: bucket_exposure
short_description: Tell whether anyone can read a bucket object, by asking anonymously
version_added: 0.1.0
description:
  - Makes three unsigned (anonymous) requests, as anyone on the network could, and reports what the server
    answered, a GET of the first byte of the object, a HEAD of the object and a listing (ListObjectsV2) of
    its prefix.
  - RV(exposed) is true when any of them is allowed, that is served (2xx, 304, 416) or answered with
    C(NoSuchKey) (the server looked for the object on the caller's behalf). Only 401 and 403 count as
    refused. A key prefix named C(private/) is not protection; the module never reads meaning into a key.
  - When the object does not exist yet and credentials are available, one object that does exist under the
    prefix (or, failing that, anywhere in the bucket) is found with a signed listing and probed anonymously
    too, because a bucket whose policy grants anonymous C(s3:GetObject) but not C(s3:ListBucket) answers 403
    for a missing key while serving every existing one.
  - With O(license) set to a licensed value, the module is the BYOL guard, it fails unless every anonymous
    read is refused, naming the bucket and the public access block or bucket policy to add.
author:
  - goldenimage.pipeline maintainers (@goldenimage)
options:
  url:
    description:
      - The object as C(s3://<bucket>/<key>) or a path-style C(http(s)://<host>/<bucket>/<key>) URL; the
        latter also sets O(endpoint_url).
      - Give either O(url), or O(bucket) and O(key).
      - A URL with credentials in it (C(https://user:password@host/...)) is refused; give the keys in
        O(access_key) and O(secret_key). The probes are anonymous anyway.
    type: str
  bucket:
    description:
      - Bucket of the object.
    type: str
  key:
    description:
      - Key of the object. It need not exist yet (probe the key an upload is about to write).
    type: str
  prefix:
    description:
      - Prefix to list anonymously. Defaults to the key up to its last C(/).
    type: str
  probe_existing:
    description:
      - When the object does not exist, also probe an existing object under the prefix (found with a signed
        listing, so only when credentials are available).
    type: bool
    default: true
  canary:
    description:
      - Prove the destination the way the export modules do before their first byte
        (C(exposure.prove_private)), read the bucket's controls as its owner (GetBucketPolicyStatus,
        GetBucketAcl, GetPublicAccessBlock; an API that does not answer is recorded as not answered, never as
        private), write a throw-away canary object under the key's prefix (named like the key) with the
        credentials, read it anonymously with a GET, a ranged GET, a HEAD and a listing of the prefix, and
        delete it. Any 2xx, or a control that says public, makes the destination public; it is private only
        when the canary was written and all four reads were refused with 401/403.
      - This is what catches a bucket whose policy grants anonymous C(s3:GetObject) without
        C(s3:ListBucket) while the prefix is still empty.
      - With a licensed O(license) or any O(sensitive_reasons), the module fails unless the destination is
        proven private. In check mode no canary is written; only the controls are read.
      - A canary that could not be deleted is reported in RV(proof) and warned about.
    type: bool
    default: false
  anonymous_import:
    description:
      - The object is about to be imported by someone without credentials, such as a CDI http source with
        neither a presigned URL nor a C(secretRef).
      - "Fail, naming the fix (CDI's C(source.s3) with a C(secret_ref), or C(presign: true), for an S3 or Ceph
        RGW bucket), when the anonymous GET of it is refused with 401/403. An answer that proves nothing does
        not fail."
    type: bool
    default: false
  timeout:
    description:
      - Seconds to wait for each anonymous answer. Zero or less is refused.
    type: int
    default: 20
extends_documentation_fragment:
  - goldenimage.pipeline.exposure
  - goldenimage.pipeline.s3
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.actiongroup_s3
attributes:
  check_mode:
    support: full
    details:
      - Reads only, in check mode as in a normal run.
  diff_mode:
    support: none
  idempotent:
    support: full
notes:
  - The credentials options are used only to find an existing object for O(probe_existing); the three probes
    are never signed.
  - "Runs on the controller; use C(delegate_to: localhost) when the play targets other hosts."
  - With O(canary=true) the module writes (the canary and its delete) and reports C(changed) false all the
    same, since nothing is left behind.
seealso:
  - module: goldenimage.pipeline.golden_export_object
"""

EXAMPLES = r"""
- name: Who can read the export prefix?
  goldenimage.pipeline.bucket_exposure:
    bucket: cdi-os-images
    key: private/windows/11/2026-08-27/windows11-x64-golden.qcow2
    endpoint_url: https://s3.stage.example.com
  register: exposure

- name: BYOL guard before uploading a KMS-configured image
  goldenimage.pipeline.bucket_exposure:
    url: https://s3.example.com/licensed-images/windows/11/2026-08-27/windows11-x64-golden.qcow2
    license: kms

- name: Before CDI imports the object without credentials, stop if anyone is refused
  goldenimage.pipeline.bucket_exposure:
    url: http://rook-ceph-rgw-my-store.rook-ceph.svc/cdi-os-images/ubuntu/24.04/noble.qcow2
    probe_existing: false
    anonymous_import: true
"""

RETURN = r"""
exposed:
  description: Whether any anonymous read was allowed.
  returned: always
  type: bool
  sample: true
verdict:
  description: V(public) (a read was allowed), V(private) (every probe refused with 401/403) or V(unknown).
  returned: always
  type: str
  sample: public
get_status:
  description: HTTP status of the anonymous ranged GET of the object; 0 when there was no answer.
  returned: always
  type: int
  sample: 206
head_status:
  description: HTTP status of the anonymous HEAD of the object.
  returned: always
  type: int
  sample: 200
list_status:
  description: HTTP status of the anonymous listing of the prefix.
  returned: always
  type: int
  sample: 403
errors:
  description: S3 error code (or the connection error) of each probe that was not served.
  returned: always
  type: dict
  sample: {"list": "AccessDenied"}
allowed:
  description: The probes that were allowed (V(get), V(head), V(list), V(sample_get), V(sample_head)).
  returned: always
  type: list
  elements: str
  sample: ["get", "head"]
bucket:
  description: The bucket probed.
  returned: always
  type: str
  sample: cdi-os-images
key:
  description: The key probed.
  returned: always
  type: str
  sample: private/windows/11/2026-08-27/windows11-x64-golden.qcow2
prefix:
  description: The prefix listed.
  returned: always
  type: str
  sample: private/windows/11/2026-08-27/
sample_key:
  description: The existing object also probed when the key was absent; empty when none was.
  returned: always
  type: str
  sample: private/windows/11/2026-08-01/windows11-x64-golden.qcow2
sample_status:
  description: HTTP status of the anonymous GET of RV(sample_key); 0 when none was probed.
  returned: always
  type: int
  sample: 206
licensed:
  description: Whether O(license) marks a licensed image.
  returned: always
  type: bool
  sample: false
proof:
  description:
    - With O(canary), the decision of C(exposure.prove_private) on the destination.
    - C(verdict) (V(public), V(private) or V(unknown)), C(exposed), C(public_by) (the controls and probes
      that say public), C(controls) (each with C(status), C(code), C(state) V(answered) or V(not answered),
      C(public), C(detail)), C(not_answered), C(probes) (probe -> HTTP status, for C(get), C(range_get),
      C(head), C(list)), C(canary_key), C(canary_written), C(canary_deleted), C(canary_problem),
      C(sensitive) (the reasons), C(allowed) and C(refusal).
  returned: when O(canary) is true
  type: dict
  sample:
    verdict: public
    public_by: ["GetBucketPolicyStatus IsPublic true", "anonymous get of the canary HTTP 200"]
    probes: {get: 200, range_get: 206, head: 200, list: 403}
    not_answered: []
    canary_deleted: true
    allowed: false
"""

import os

from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket import exposure
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import inputs
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import (
    PipelineError,
    run_module,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.redact import redact_message
from ansible_collections.goldenimage.pipeline.plugins.module_utils.s3 import _s3
from ansible_collections.goldenimage.pipeline.plugins.module_utils.s3._s3 import (
    anonymous_client,
    canary_answers,
    check_endpoint,
    has_credentials,
    read_controls,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.s3._s3_module import (
    s3_arg_spec,
    s3_client_from_params,
    s3_module,
)


def argument_spec():
    return s3_arg_spec(
        url=dict(type="str"),
        bucket=dict(type="str"),
        key=dict(type="str", no_log=False),
        prefix=dict(type="str"),
        probe_existing=dict(type="bool", default=True),
        license=dict(type="str", default="none", choices=list(exposure.LICENSE_CHOICES)),
        anonymous_import=dict(type="bool", default=False),
        sensitive_reasons=dict(type="list", elements="str", default=[]),
        canary=dict(type="bool", default=False),
        timeout=dict(type="int", default=20),
    )


def build_module():
    return s3_module(
        argument_spec(),
        ("url",),
        mutually_exclusive=[("url", "bucket"), ("url", "key")],
        required_one_of=[("url", "bucket")],
        required_together=[("bucket", "key")],
    )


def _answer(call):
    """``(status, code)`` of one request (the adapter's ``answer_of`` without the response)."""
    return _s3.answer_of(call)[:2]


def probe_object(client, bucket, key):
    get = _answer(lambda: client.get_object(Bucket=bucket, Key=key, Range="bytes=0-0"))
    head = _answer(lambda: client.head_object(Bucket=bucket, Key=key))
    if head[0] == 404 and get[1] == "NoSuchBucket":
        head = (404, "NoSuchBucket")  # a HEAD has no body to say which is missing; the GET said
    return get, head


def existing_sample(params, bucket, prefix):
    """A key that exists under ``prefix`` (else anywhere in the bucket), found with a signed listing."""
    signed = s3_client_from_params(params, max_attempts=2)
    for where in (prefix, "") if prefix else ("",):
        page = signed.list_objects_v2(Bucket=bucket, Prefix=where, MaxKeys=5)
        for obj in page.get("Contents") or []:
            if not obj["Key"].endswith("/"):
                return obj["Key"]
    return None


def prove(module, anonymous, bucket, key, sensitive):
    """The destination's controls and, outside check mode, a canary named like ``key`` read anonymously;
    ``exposure.prove_private`` decides."""
    signed = s3_client_from_params(module.params, max_attempts=2)
    controls = read_controls(signed, bucket)
    canary = None
    if not module.check_mode:
        canary = canary_answers(
            signed, anonymous, bucket, exposure.canary_key(key, os.urandom(8).hex()), exposure.CANARY_BODY
        )
    proof = exposure.prove_private(bucket, exposure.key_prefix(key), controls, canary, sensitive)
    if proof["canary_problem"]:
        module.warn(proof["canary_problem"])
    return proof


def run(module):
    """Probe anonymously, classify with ``exposure.verdict``, apply the BYOL rule; returns the result."""
    p = module.params
    endpoint = check_endpoint(p["endpoint_url"])
    bucket, key = p["bucket"], p["key"]
    if p["url"]:
        url_endpoint, bucket, key = exposure.parse_url(p["url"])
        endpoint = url_endpoint or endpoint
    licensed = exposure.is_licensed(p["license"])
    sensitive = exposure.sensitive_reasons(p["license"], facts_reasons=p["sensitive_reasons"])
    inputs.positive(p["timeout"], "timeout")
    prefix = p["prefix"] if p["prefix"] is not None else exposure.key_prefix(key)
    client = anonymous_client(
        endpoint, p.get("region"), p["validate_certs"], p.get("ca_bundle"), timeout=p["timeout"]
    )
    get, head = probe_object(client, bucket, key)
    listing = _answer(lambda: client.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1))
    answers = {"get": get, "head": head, "list": listing}
    result = dict(
        changed=False,
        bucket=bucket,
        key=key,
        prefix=prefix,
        get_status=get[0],
        head_status=head[0],
        list_status=listing[0],
        sample_key="",
        sample_status=0,
        licensed=licensed,
    )
    if p["probe_existing"] and exposure.worth_sampling(get, head) and has_credentials(p):
        try:
            sample = existing_sample(p, bucket, prefix)
        except Exception as exc:
            module.warn(
                "could not list s3://%s/%s with the credentials: %s"
                % (bucket, prefix, redact_message(str(exc)))
            )
            sample = None
        if sample:
            sample_get, sample_head = probe_object(client, bucket, sample)
            answers.update(sample_get=sample_get, sample_head=sample_head)
            result.update(sample_key=sample, sample_status=sample_get[0])
    found = exposure.verdict(answers)
    result.update(
        exposed=found["exposed"],
        verdict=found["verdict"],
        allowed=found["allowed"],
        errors={name: answer[1] for name, answer in answers.items() if answer[1]},
    )
    statuses = {name: answer[0] for name, answer in answers.items()}
    if p["canary"]:
        proof = prove(module, client, bucket, key, sensitive)
        result.update(proof=proof, exposed=result["exposed"] or proof["exposed"])
        if proof["verdict"] == exposure.PUBLIC:
            result["verdict"] = exposure.PUBLIC
        if not proof["allowed"] and (not module.check_mode or proof["verdict"] == exposure.PUBLIC):
            raise PipelineError(proof["refusal"], refused=True, **result)
    else:
        refusal = exposure.byol_refusal(p["license"], bucket, key, prefix, found, statuses)
        if not refusal and sensitive and found["verdict"] != exposure.PRIVATE:
            refusal = exposure.byol_refusal("key", bucket, key, prefix, found, statuses)
        if refusal:
            raise PipelineError(refusal, refused=True, **result)
    if p["anonymous_import"]:
        unreadable = exposure.anonymous_import_refusal(
            p["url"] or "s3://%s/%s" % (bucket, key), bucket, key, get
        )
        if unreadable:
            unreadable.fields.update(result)
            raise unreadable
    return result


def main():
    module = build_module()
    run_module(module, lambda: run(module))


if __name__ == "__main__":
    main()
