#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: os_mirror_verify
short_description: Verify a mirrored image's signature and provenance against the mirror's trust policy
version_added: 0.1.0
description:
  - Read-only. Verifies one object of the OS mirror (or an exported golden stored beside it by
    M(goldenimage.pipeline.golden_export_object)) before it is imported, and refuses it with the verdict
    otherwise, naming the object, the key and the check that failed.
  - An object outside the mirror layout (an exported golden) names neither its digest nor its family in its
    key; O(sha256) and O(family) are then required, and its C(sha256) metadata must be O(sha256).
  - The trust policy is pinned by the caller, never taken from the bucket on the bucket's word (anyone who
    can write the bucket could add a key or a relaxation to it). Either O(trust_policy) gives it (the
    catalog is then not read), or O(catalog_public_keys) names the keys that may sign the catalog, and the
    policy the catalog holds (O(catalog_key), written by M(goldenimage.pipeline.os_mirror_catalog)
    O(goldenimage.pipeline.os_mirror_catalog#module:trust)) is read only once C(<catalog_key>.sig), the
    detached signature os_mirror_catalog writes, verifies over the catalog's bytes with one of them. With
    neither the object is refused; an unsigned catalog, one whose signature does not verify, and one
    without a policy are refused before any verdict.
  - The policy's keys' public halves (and O(public_keys)) are the keyring.
  - The object's digest is the sha256 its key names; its C(sha256) metadata must agree, and so must
    O(sha256) when given (the digest the import pins). With O(read_object) the stored bytes are hashed as
    well (a full read of the object), so bytes changed under the key are caught here and not only by the
    import.
  - C(<key>.sig) (a detached signature as C(cosign sign-blob --key) writes it) must verify over that digest
    with a key the policy lets sign the object's family and version (its stream), and C(<key>.intoto.jsonl)
    (a DSSE envelope as C(cosign attest-blob) writes it) must verify with such a key and name the object's
    key with that digest as its subject.
  - "The verdicts: V(unsigned), V(signature_mismatch) (signed for other bytes), V(untrusted_key),
    V(subject_digest_differs) and V(replayed_revision) (the provenance names another object: another
    version's signature replayed under this key) refuse; V(verified) and V(unsigned_allowed) (a family or
    version the policy relaxes, with its reason) pass."
  - RV(record) is what a golden made from the object records of the verdict
    (M(goldenimage.pipeline.golden_snapshot) O(goldenimage.pipeline.golden_snapshot#module:provenance)).
author:
  - goldenimage.pipeline maintainers (@goldenimage)
requirements:
  - cryptography (on the controller)
options:
  url:
    description:
      - The plain path-style object URL (C(<scheme>://<host>/<bucket>/<key>)), as an import source names it.
      - Exactly one of O(url) and O(key) is required; O(key) needs O(bucket).
    type: str
  bucket:
    description: The mirror bucket, with O(key).
    type: str
  key:
    description: The object's key, C(<family>/<version>/sha256-<hex>/<filename>) in the mirror layout.
    type: str
  family:
    description:
      - The family the trust policy judges the object for. Defaults to the family in its key; for a key in
        the mirror layout, a family other than the key's is refused.
    type: str
  sha256:
    description: The digest the import pins (C(sha256:<hex>) or C(<hex>)); it must be the one the key names.
    type: str
  catalog_key:
    description: Key of the mirror's catalog, which holds the trust policy, read with O(catalog_public_keys).
    type: str
    default: catalog.json
  catalog_public_keys:
    description:
      - The keys that may sign the catalog, each a PEM public key or the path of a file holding one; the
        catalog's signature must verify with one of them before its policy is read.
      - Exactly one of O(catalog_public_keys) and O(trust_policy) is required.
    type: list
    elements: str
  read_object:
    description: Hash the stored bytes too (reads the whole object once).
    type: bool
    default: false
extends_documentation_fragment:
  - goldenimage.pipeline.provenance.trust_policy
  - goldenimage.pipeline.s3
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.info_module
  - goldenimage.pipeline.attributes.actiongroup_s3
notes:
  - "Runs on the controller; use C(delegate_to: localhost) when the play targets other hosts."
  - Verification is by key, offline; nothing is asked of a transparency log (Rekor) or a keyless signing
    service (Fulcio).
seealso:
  - module: goldenimage.pipeline.os_mirror_object
  - module: goldenimage.pipeline.os_mirror_catalog
  - module: goldenimage.pipeline.artifact_verify
"""

EXAMPLES = r"""
- name: Verify the mirrored image before it is imported, against the policy of the signed catalog
  goldenimage.pipeline.os_mirror_verify:
    url: https://s3.example.com/cdi-os-images/debian-12/20260801/sha256-0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9/debian-12.qcow2
    sha256: "sha256:0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9"
    catalog_public_keys:
      - "{{ lookup('ansible.builtin.file', 'keys/catalog.pub') }}"
  register: verified

- name: Or with the trust policy given here (the catalog is not read)
  goldenimage.pipeline.os_mirror_verify:
    url: "{{ mirrored_image_url }}"
    trust_policy:
      rules:
        - name: mirror-2026
          public_key: "{{ lookup('ansible.builtin.file', 'keys/mirror.pub') }}"
          families: [debian-12]

- name: Say who signed it, and from what
  ansible.builtin.debug:
    msg: "{{ verified.signer }} signed it from {{ verified.provenance.inputs }}"
"""

RETURN = r"""
bucket:
  description: The bucket read.
  returned: always
  type: str
key:
  description: The object verified.
  returned: always
  type: str
verdict:
  description: V(verified) or V(unsigned_allowed); a refusal carries the other verdicts.
  returned: always
  type: str
  sample: verified
check:
  description: The check that decided (V(all) when every check passed).
  returned: always
  type: str
message:
  description: The verdict in one line, naming the object, the key and the check.
  returned: always
  type: str
key_id:
  description:
    - The id of the key that signed (the SHA-256 of its DER public key, hex), None when unsigned; the name
      M(goldenimage.pipeline.artifact_sign) and M(goldenimage.pipeline.artifact_verify) return it under
      (RV(key) is the object).
  returned: always
  type: str
signer:
  description: The policy's name of that key.
  returned: when RV(verdict) is V(verified)
  type: str
relaxed:
  description: The reason the policy records for letting the family go unsigned.
  returned: when RV(verdict) is V(unsigned_allowed)
  type: str
sha256:
  description: The object's sha256.
  returned: always
  type: str
provenance:
  description: The statement's V(subject), V(inputs) (the upstream URL and digest), V(builder) and V(time).
  returned: when RV(verdict) is V(verified)
  type: dict
record:
  description:
    - The verdict as a golden records it (V(verdict), V(key) (in a stored record, the key id), V(signer),
      V(artifact), V(sha256), V(family)), and for a verified object V(evidence), the texts of its
      C(.sig) (V(signature)) and C(.intoto.jsonl) (V(provenance)) as read, which every consumer of the
      golden verifies again under its trust policy (a verdict without them proves nothing).
  returned: always
  type: dict
trust_policy:
  description:
    - The trust policy the verdict was judged by (O(trust_policy), or the signed catalog's) in its stored
      form, as the consumers of the golden judge it again.
  returned: always
  type: dict
seconds:
  description: Time taken by the verification.
  returned: always
  type: float
"""

import hashlib
import time

from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket import _mirror_transfer as transfer
from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket import exposure, mirror
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import inputs
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal, run_module
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance
from ansible_collections.goldenimage.pipeline.plugins.module_utils.s3._s3 import call_failed, check_endpoint
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
        family=dict(type="str"),
        sha256=dict(type="str"),
        catalog_key=dict(type="str", default=mirror.DEFAULT_CATALOG_KEY, no_log=False),
        catalog_public_keys=dict(type="list", elements="str", no_log=False),
        read_object=dict(type="bool", default=False),
        **provenance.trust_policy_spec(),
    )


def build_module():
    return s3_module(
        argument_spec(),
        ("url",),
        mutually_exclusive=[("url", "key"), ("url", "bucket"), ("trust_policy", "catalog_public_keys")],
        required_one_of=[("url", "key")],
        required_together=[("bucket", "key")],
    )


def _read(client, bucket, key):
    try:
        return transfer.read_object(client, bucket, key)
    except Exception as exc:
        raise call_failed("read s3://%s/%s" % (bucket, key), exc, bucket=bucket) from exc


def _text(body):
    return None if body is None else body.decode("utf-8", "replace")


def run(params):
    """The runner: takes the pinned policy (or reads the catalog's, signed by a pinned key), the object's
    HEAD and its companions; judges; returns or refuses before anything is imported."""
    p = params
    started = time.monotonic()
    check_endpoint(p["endpoint_url"])
    if p["url"]:
        endpoint, bucket, key = exposure.presign_target(p["url"])
        p = dict(p, endpoint_url=p["endpoint_url"] or endpoint)
    else:
        bucket, key = p["bucket"], p["key"]
    catalog_key = inputs.object_key(p["catalog_key"], "catalog_key")
    where = "s3://%s/%s" % (bucket, key)
    in_layout = mirror.parse_key(key)
    parsed = in_layout or mirror.named_object(key, p["sha256"], p["family"], where)
    digest = parsed["sha256"]
    if p["sha256"] and mirror.normalize_sha256(p["sha256"]) != digest:
        raise Refusal(
            where,
            "the import pins sha256 %s, and the key names %s"
            % (mirror.normalize_sha256(p["sha256"]), digest),
            "import the object whose key names the pinned digest",
        )
    family = mirror.judged_family(in_layout, p["family"], where)
    catalog = "catalog s3://%s/%s" % (bucket, catalog_key)
    # The policy is the caller's, or the catalog's once a key the caller pins proves its bytes.
    policy = mirror.pinned_policy(p["trust_policy"], p["catalog_public_keys"], catalog, where)
    catalog_ring = signing.keyring_of(p["catalog_public_keys"], "catalog_public_keys")
    client = s3_client_from_params(p)
    if policy is None:
        body = _read(client, bucket, catalog_key)
        sig = _read(client, bucket, provenance.companions(catalog_key)[0]) if body is not None else None
        body_digest = hashlib.sha256(body).hexdigest() if body is not None else None
        signed, _unused = signing.evidence(catalog_ring, _text(sig), None, body_digest)
        policy = mirror.signed_catalog_policy(body, signed, catalog, where)
    try:
        held = transfer.head(client, bucket, key)
    except Exception as exc:
        raise call_failed("read the metadata of %s" % where, exc, bucket=bucket) from exc
    if held is None:
        raise Refusal(where, "it does not exist", "mirror it with os_mirror_object first")
    seen = {"sha256": ((held.get("Metadata") or {}).get(mirror.META_SHA256) or "").lower()}
    if p["read_object"]:
        seen["sha256"] = transfer.hash_object(client, bucket, key)
    companions = provenance.companions(key)
    texts = [_text(_read(client, bucket, name)) for name in companions]
    ring = signing.keyring_of(p["public_keys"], extra=provenance.public_keys(policy))
    # The signatures are checked over the digest the key names: an object whose bytes (or metadata)
    # differ from it is refused as signed for other bytes.
    signature, found = signing.evidence(ring, texts[0], texts[1], digest)
    artifact = {"name": key, "digest": {"sha256": digest}}
    verdict = provenance.judge(artifact, family, parsed["version"], policy, signature, found)
    if seen["sha256"] != digest:
        verdict = provenance.bytes_differ(artifact, seen, verdict.get("key"))
    result = dict(verdict, changed=False)
    result.update(key_id=result.pop("key"), bucket=bucket, key=key, sha256=digest)
    result["record"] = provenance.verdict_record(
        verdict, key, digest, family, (found or {}).get("statement"), texts
    )
    result["trust_policy"] = provenance.policy_document(policy)
    result["seconds"] = round(time.monotonic() - started, 3)
    if not result.pop("ok"):
        raise Refusal(None, result.pop("message"), **result)
    doc = (found or {}).get("statement")
    if doc is not None and verdict["verdict"] == provenance.VERIFIED:
        result["provenance"] = provenance.summary(doc)
    return result


def main():
    module = build_module()
    run_module(module, lambda: run(module.params))


if __name__ == "__main__":
    main()
