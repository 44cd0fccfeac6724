#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: os_mirror_catalog
short_description: Rebuild the OS mirror's catalog document from what the bucket holds
version_added: 0.1.0
description:
  - Lists the mirror bucket, reads the metadata of every object under the mirror layout
    C(<family>/<version>/sha256-<hex>/<filename>) with a HEAD, and writes the catalog the UI reads
    (O(catalog_key), C(catalog.json) at the bucket root by default).
  - The catalog is JSON, per family the C(latest) version and every version with its C(key), C(filename),
    C(size), C(sha256), C(source_url) and C(mirrored_at). Families are in name order, versions in natural
    order (C(9) before C(10)), and the keys of each object are sorted, so the same bucket always gives the
    same bytes.
  - The catalog is written only when its content differs from what the bucket holds.
  - An object whose C(sha256) metadata does not match the digest in its key is left out and reported in
    RV(problems); keys outside the layout are reported in RV(ignored).
  - An image signed where it was mirrored (M(goldenimage.pipeline.os_mirror_object) given a key) lists the
    keys of its C(signature) and C(provenance) objects; those objects are not catalogued themselves.
  - The catalog holds the trust policy of the mirror (O(trust)), which the imports of mirrored images
    (M(goldenimage.pipeline.os_mirror_verify), the C(goldenimage.pipeline.linux_golden) role) verify
    against, once the catalog's signature verifies with a key they pin. Left out, the policy the catalog
    already holds is kept.
  - Given a signing key (O(key_path) or O(key)), the catalog is signed where it is written,
    C(<catalog_key>.sig), a detached signature over its bytes as C(cosign sign-blob --key) writes it,
    which M(goldenimage.pipeline.os_mirror_verify)
    O(goldenimage.pipeline.os_mirror_verify#module:catalog_public_keys) verifies before it reads the
    policy. A signature the key already made over the same bytes is kept.
  - Each C(source_url) is written redacted (no user-info, no signature or token query values), also for
    an object stored before the mirror refused such URLs.
author:
  - goldenimage.pipeline maintainers (@goldenimage)
options:
  bucket:
    description:
      - Name of the mirror bucket.
    type: str
    required: true
  catalog_key:
    description:
      - Key the catalog document is written to. It follows the collection's one key rule (at most 1,024
        bytes, no leading C(/), no empty, C(.) or C(..) segment), checked before anything is read.
    type: str
    default: catalog.json
  trust:
    description:
      - The trust policy stored in the catalog, checked before anything is read.
      - V(rules) lists the keys that may sign, each with V(public_key) (PEM, as C(cosign.pub) holds it; the
        verifier needs nothing but the catalog), V(name) (reported as the signer), and the V(families) and
        V(streams) (mirror versions) it may sign (left out, any). V(key), the key id, may be given as well
        and must match.
      - V(relaxed) lists the families (V(family)) or versions (V(stream)) whose C(require_signature) is off,
        each with the V(reason), which every verdict it decides records.
      - Without a policy in the catalog, an import of a mirrored image that asks for verification is
        refused.
    type: dict
extends_documentation_fragment:
  - goldenimage.pipeline.signing
  - goldenimage.pipeline.s3
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.actiongroup_s3
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  idempotent:
    support: full
notes:
  - "Runs on the controller; use C(delegate_to: localhost) when the play targets other hosts."
seealso:
  - module: goldenimage.pipeline.os_mirror_object
"""

EXAMPLES = r"""
- name: Keep the trust policy of the mirror in its catalog, signed by the catalog key
  goldenimage.pipeline.os_mirror_catalog:
    bucket: cdi-os-images
    key_path: keys/catalog.pem
    trust:
      rules:
        - name: mirror-2026
          public_key: "{{ lookup('ansible.builtin.file', 'keys/mirror.pub') }}"
          families: [debian-12, ubuntu-24.04]
      relaxed:
        - family: lab-scratch
          reason: throwaway images of the lab, never served to tenants

- name: Rebuild the catalog the UI dropdown reads
  goldenimage.pipeline.os_mirror_catalog:
    bucket: cdi-os-images
    endpoint_url: https://s3.example.com
  register: catalog

- name: Rebuild it with the endpoint and keys set once for every module of the s3 group
  module_defaults:
    group/goldenimage.pipeline.s3:
      endpoint_url: https://s3.example.com
      access_key: "{{ mirror_access_key }}"
      secret_key: "{{ mirror_secret_key }}"
  goldenimage.pipeline.os_mirror_catalog:
    bucket: cdi-os-images

- name: Show the latest version of each family
  ansible.builtin.debug:
    msg: "{{ catalog.catalog.families | dict2items | map(attribute='value.latest') | list }}"
"""

RETURN = r"""
changed:
  description: Whether the catalog was (or, in check mode, would be) written.
  returned: always
  type: bool
  sample: true
key:
  description: The catalog's key.
  returned: always
  type: str
  sample: catalog.json
catalog:
  description: The catalog document.
  returned: success
  type: dict
  sample:
    schema: goldenimage.pipeline/os-mirror-catalog/v1
    bucket: cdi-os-images
    families:
      ubuntu-24.04:
        latest: "20260801"
        versions:
          - version: "20260801"
            filename: n.img
            key: >-
              ubuntu-24.04/20260801/sha256-5e6b9a6f8bb1d2a0c3b3f2d4b2b6c1e0f1a2b3c4d5e6f708192a3b4c5d6e7f80/n.img
            size: 614465536
            sha256: 5e6b9a6f8bb1d2a0c3b3f2d4b2b6c1e0f1a2b3c4d5e6f708192a3b4c5d6e7f80
            source_url: https://cloud-images.ubuntu.com/noble/20260801/noble-server-cloudimg-amd64.img
            mirrored_at: "2026-08-01T04:00:12Z"
entries:
  description: Number of images in the catalog.
  returned: success
  type: int
  sample: 12
ignored:
  description: Keys outside the mirror layout (not in the catalog).
  returned: success
  type: list
  elements: str
  sample: [README.txt]
signature:
  description: The catalog's detached signature, when a signing key is given.
  returned: when a signing key is given
  type: dict
  contains:
    key:
      description: Its object key, C(<catalog_key>.sig).
      type: str
    key_id:
      description: The signing key's id, the SHA-256 (hex) of its DER SubjectPublicKeyInfo.
      type: str
    changed:
      description: Whether it was (or, in check mode, would be) written.
      type: bool
problems:
  description: Objects left out because their metadata does not prove their digest.
  returned: success
  type: list
  elements: str
  sample: ["debian-12/1/sha256-0123.../d.qcow2: metadata sha256 is None, not the sha256 in its key"]
"""

import hashlib
import json

from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket import _mirror_transfer as transfer
from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket import mirror
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import inputs
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import (
    PipelineError,
    run_module,
)
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
        catalog_key=dict(type="str", default=mirror.DEFAULT_CATALOG_KEY, no_log=False),
        trust=dict(type="dict"),
        **provenance.key_options(),
    )


def build_module():
    return s3_module(argument_spec(), mutually_exclusive=[("key_path", "key")])


def _parse(body):
    try:
        return json.loads(body.decode("utf-8"))
    except ValueError:
        return {"unreadable": body[:200].decode("utf-8", "replace")}


def _sign(module, client, bucket, key, body, signing_key):
    """Sign the catalog's bytes beside it (``<key>.sig``) unless the signature there is the key's over
    them."""
    name = provenance.companions(key)[0]
    digest = hashlib.sha256(body).hexdigest()
    held = transfer.read_object(client, bucket, name)
    keyid = signing.key_id(signing_key)
    # ECDSA signatures are randomised: the one there is verified, never compared byte for byte.
    proven = signing.evidence(
        {keyid: signing_key.public_key()},
        None if held is None else held.decode("utf-8", "replace"),
        None,
        digest,
    )[0]
    found = {"key": name, "key_id": keyid, "changed": (proven or {}).get("key") != keyid}
    if found["changed"] and not module.check_mode:
        text = signing.signature_text(signing.sign_digest(signing_key, digest)).encode("ascii")
        transfer.put_small(client, bucket, name, text, CacheControl="no-cache")
    return found


def run(module):
    """List and HEAD the bucket, build the catalog (``mirror.catalog_from_listing``), write it if changed."""
    p = module.params
    bucket = p["bucket"]
    key = inputs.object_key(p["catalog_key"], "catalog_key")
    check_endpoint(p["endpoint_url"])
    # Checked before the first request; left out, the policy the catalog holds is kept.
    trust = mirror.trust_section(p["trust"]) if p["trust"] is not None else None
    signing_key = signing.private_key_from(p)
    result = {"changed": False, "key": key}
    action = "list s3://%s" % bucket
    try:
        client = s3_client_from_params(p)
        objects = transfer.list_objects(client, bucket)
        held = mirror.signed_companions(objects)
        for obj in objects:
            if mirror.parse_key(obj["key"]) is not None and not mirror.is_companion(obj["key"], held):
                action = "read the metadata of s3://%s/%s" % (bucket, obj["key"])
                obj["metadata"] = (transfer.head(client, bucket, obj["key"]) or {}).get("Metadata") or {}
        action = "read s3://%s/%s" % (bucket, key)
        current = transfer.read_object(client, bucket, key)
        if trust is None and current is not None:
            kept = (_parse(current) or {}).get(mirror.TRUST)
            trust = mirror.trust_section(kept) if kept is not None else None
        document, ignored, problems = mirror.catalog_from_listing(bucket, objects, key, trust)
        body = mirror.render_catalog(document)
        result.update(catalog=document, ignored=ignored, problems=problems)
        result["entries"] = sum(len(family["versions"]) for family in document["families"].values())
        if current != body:
            result["changed"] = True
            if not module.check_mode:
                action = "write s3://%s/%s" % (bucket, key)
                transfer.put_small(client, bucket, key, body, "application/json", CacheControl="no-cache")
        if signing_key is not None:
            action = "sign s3://%s/%s" % (bucket, key)
            result["signature"] = _sign(module, client, bucket, key, body, signing_key)
            result["changed"] = result["changed"] or result["signature"]["changed"]
    except Exception as exc:
        error = call_failed(action, exc)
        if not isinstance(exc, PipelineError):
            error.fields.setdefault("error_code", None)
        for name, value in result.items():
            error.fields.setdefault(name, value)
        raise error from exc
    if module._diff:
        result["diff"] = {"before": _parse(current) if current is not None else {}, "after": document}
    return result


def main():
    module = build_module()
    run_module(module, lambda: run(module))


if __name__ == "__main__":
    main()
