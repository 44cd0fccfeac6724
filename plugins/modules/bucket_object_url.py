#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: bucket_object_url
short_description: Sign a time-limited download URL for a private bucket object, for a CDI http import
version_added: 0.1.0
description:
  - Turns the URL of an object in a private S3-compatible bucket (Ceph RGW, MinIO, AWS S3) into a presigned
    URL (AWS Signature Version 4 in the query string) that CDI's C(http) source downloads with no
    credentials, keeping its C(checksum).
  - A C(secretRef) on the http source does not open such a bucket. CDI sends the Secret's C(accessKeyId)
    and C(secretKey) as HTTP basic auth, which S3 and RGW refuse; they accept a presigned URL.
  - The import that needs no bearer URL at all is CDI's C(source.s3) with a C(secretRef), whose requests CDI
    signs with the Secret's keys (the C(distribute) entry point of the C(goldenimage.pipeline.linux_golden)
    role takes it as C(source.s3)); use a presigned URL where an http source is required.
  - Signing is done locally and writes nothing. The URL is signed for the host in O(url), the one the
    importer pod reaches (often an in-cluster service name the controller cannot reach), so no request is
    needed; O(check_object=true) reads the object first through O(endpoint_url) and refuses a missing one.
  - The signed URL is a bearer credential until it expires. Keep O(expiry) as short as the import needs;
    CDI's importer starts downloading right after the DataVolume is created and retries inside that time.
  - "The result is handled as C(no_log): whether or not the task sets C(no_log: true), its output (the
    task line, C(-vvv), callbacks such as a job log) shows only that the result was hidden. The registered
    variable keeps RV(url) for the task that uses it; show RV(url_redacted) when a person needs to see what
    was signed. Do not put RV(url) in a fact, a file or an object that outlives the import."
author:
  - goldenimage.pipeline maintainers (@goldenimage)
options:
  url:
    description:
      - The object's path-style URL as the importer reaches it, C(<scheme>://<host>[:port]/<bucket>/<key>),
        for example C(http://rook-ceph-rgw-my-store.rook-ceph.svc/licensed-images/windows/11/golden.qcow2).
      - A URL that already carries a query string is refused (it may already be signed).
      - A URL with credentials in it (C(http://user:password@host/...)) is refused before anything is signed;
        give the keys in O(access_key) and O(secret_key).
    type: str
    required: true
  expiry:
    description:
      - Seconds the URL stays valid, from 1 to 604800 (seven days, the most Signature Version 4 allows). Zero
        or less is refused.
    type: int
    default: 3600
  check_object:
    description:
      - Read the object's metadata first (a HEAD through O(endpoint_url), or through the host of O(url) when
        O(endpoint_url) is not set) and fail when it is missing or unreadable with these credentials.
      - Returns its size and the C(sha256) metadata the mirror and export modules store.
    type: bool
    default: false
extends_documentation_fragment:
  - goldenimage.pipeline.s3
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.actiongroup_s3
attributes:
  check_mode:
    support: full
    details:
      - Signing changes nothing, so check mode signs too.
  diff_mode:
    support: none
  idempotent:
    support: full
    details:
      - Never changes anything. Each run signs a new URL (the signing time is part of it).
notes:
  - O(endpoint_url) is only the route for O(check_object); the URL is always signed for the host in O(url).
  - The region signed for is O(region), else C(us-east-1); RGW and MinIO accept their default region.
seealso:
  - module: goldenimage.pipeline.bucket_exposure
  - module: goldenimage.pipeline.golden_export_object
  - name: CDI DataVolume http source
    description: The fields of an http import (url, checksum, secretRef, certConfigMap).
    link: https://github.com/kubevirt/containerized-data-importer/blob/main/doc/datavolumes.md
"""

EXAMPLES = r"""
- name: Sign the Windows golden's URL for a one-hour import
  goldenimage.pipeline.bucket_object_url:
    url: http://rook-ceph-rgw-my-store.rook-ceph.svc/licensed-images/windows/11/20260828/windows11-x64-golden.qcow2
    access_key: "{{ vault_licensed_images_access_key }}"
    secret_key: "{{ vault_licensed_images_secret_key }}"
  register: signed

- name: Say what was signed, without the signature
  ansible.builtin.debug:
    msg: "{{ signed.url_redacted }} until {{ signed.expires_at }}"

- name: Import it with CDI, checksum kept
  kubernetes.core.k8s:
    state: present
    definition:
      apiVersion: cdi.kubevirt.io/v1beta1
      kind: DataVolume
      metadata:
        name: windows-11-golden-disk
        namespace: golden-images
      spec:
        source:
          http:
            url: "{{ signed.url }}"
            checksum: sha256:f0dea74da9c54ba4728b2f4841316490cadd66b7ab1ed10de46549d457eb5018
        storage:
          resources:
            requests:
              storage: 75Gi

- name: Check the object exists first, through the controller's own route to the bucket
  goldenimage.pipeline.bucket_object_url:
    url: http://rook-ceph-rgw-my-store.rook-ceph.svc/cdi-os-images/debian-12/debian-12.qcow2
    endpoint_url: https://s3.example.com
    check_object: true
    expiry: 900
  register: signed
"""

RETURN = r"""
url:
  description:
    - The presigned URL; a bearer credential until RV(expires_at). The task's output is hidden because of it
      (see the description); read it from the registered variable.
  returned: success
  type: str
  sample: http://rgw.example/licensed-images/w.qcow2?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Expires=3600&X-Amz-Signature=...
url_redacted:
  description: RV(url) with its credential and signature query values masked, safe to print.
  returned: success
  type: str
  sample: http://rgw.example/licensed-images/w.qcow2?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=REDACTED&X-Amz-Signature=REDACTED
expires_at:
  description: When the URL stops working (UTC, RFC 3339).
  returned: success
  type: str
  sample: "2026-08-28T13:04:05Z"
bucket:
  description: The bucket, from the path of O(url).
  returned: success
  type: str
  sample: licensed-images
key:
  description: The object key, from the path of O(url).
  returned: success
  type: str
  sample: windows/11/20260828/windows11-x64-golden.qcow2
endpoint:
  description: The endpoint the URL is signed for (scheme and host of O(url)).
  returned: success
  type: str
  sample: http://rook-ceph-rgw-my-store.rook-ceph.svc
size:
  description: The object's size in bytes.
  returned: with O(check_object=true)
  type: int
  sample: 6818156544
sha256:
  description: The object's C(sha256) metadata (hex), empty when it has none.
  returned: with O(check_object=true)
  type: str
  sample: f0dea74da9c54ba4728b2f4841316490cadd66b7ab1ed10de46549d457eb5018
"""

import datetime

from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket import exposure, mirror
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import run_module
from ansible_collections.goldenimage.pipeline.plugins.module_utils.s3._s3 import (
    S3Error,
    check_endpoint,
    error_code,
    s3_client,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.s3._s3_module import (
    s3_arg_spec,
    s3_module,
)


def argument_spec():
    return s3_arg_spec(
        url=dict(type="str", required=True),
        expiry=dict(type="int", default=3600),
        check_object=dict(type="bool", default=False),
    )


def build_module():
    return s3_module(argument_spec(), ("url",))


def head(client, bucket, key):
    """Size and sha256 metadata of the object; S3Error when it is missing or unreadable."""
    try:
        found = client.head_object(Bucket=bucket, Key=key)
    except Exception as exc:
        code = error_code(exc)
        if code in ("404", "NoSuchKey", "NoSuchBucket"):
            raise S3Error(
                "s3://%s/%s does not exist: nothing to import; no URL was signed" % (bucket, key),
                error_code=code,
            ) from exc
        raise S3Error(
            "reading s3://%s/%s failed (%s): check the credentials and endpoint_url; no URL was signed"
            % (bucket, key, code or exc.__class__.__name__),
            error_code=code,
        ) from exc
    metadata = found.get("Metadata") or {}
    return {"size": found.get("ContentLength"), "sha256": metadata.get(mirror.META_SHA256, "")}


def run(module):
    """Check the inputs (``exposure`` presign rules), optionally HEAD the object, sign; returns the result."""
    p = module.params
    endpoint, bucket, key = exposure.presign_target(p["url"])
    exposure.check_expiry(p["expiry"])
    exposure.check_signing_keys(p.get("access_key"), p.get("secret_key"), bucket, key)
    check_endpoint(p.get("endpoint_url"))
    credentials = {
        name: p.get(name) for name in ("access_key", "secret_key", "session_token", "region", "profile")
    }
    tls = {
        "validate_certs": p["validate_certs"],
        "ca_bundle": p.get("ca_bundle"),
        "aws_config": p.get("aws_config"),
    }
    result = {"changed": False, "bucket": bucket, "key": key, "endpoint": endpoint}
    if p["check_object"]:
        reader = s3_client(endpoint_url=p.get("endpoint_url") or endpoint, **dict(credentials, **tls))
        result.update(head(reader, bucket, key))
    signer = s3_client(endpoint_url=endpoint, signature_version="s3v4", **dict(credentials, **tls))
    signed_at = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    url = signer.generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=p["expiry"]
    )
    result.update(exposure.signed_result(url))
    expires = signed_at + datetime.timedelta(seconds=p["expiry"])
    result["expires_at"] = expires.strftime("%Y-%m-%dT%H:%M:%SZ")
    return result


def main():
    module = build_module()
    run_module(module, lambda: run(module))


if __name__ == "__main__":
    main()
