#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: artifact_verify
short_description: Verify an artifact file against its signature, its provenance and a trust policy
version_added: 0.1.0
description:
  - Read-only. Verifies O(path) before a consumer acts on it, and refuses it with the verdict otherwise.
  - The detached signature (O(signature_path), as C(cosign sign-blob --key) writes it) must verify over these
    exact bytes with a key of O(public_keys); the provenance envelope (O(provenance_path), DSSE, as
    C(cosign attest-blob) writes it) must verify with a key of O(public_keys); O(trust_policy) must let both
    keys sign O(family) and O(stream); the statement's subject must name O(name) with the bytes' digest.
  - "The verdicts: V(unsigned) (no signature or no provenance), V(signature_mismatch) (it does not verify over
    these bytes with any key given: the artifact changed, or the signature is another artifact's),
    V(untrusted_key) (a valid signature by a key the policy does not let sign this family or stream),
    V(subject_digest_differs) (the statement names this artifact with other bytes' digest) and
    V(replayed_revision) (the statement names another artifact, typically an older revision's bytes and
    signatures served under a newer name)."
  - A family the trust policy relaxes goes unsigned with the verdict V(unsigned_allowed) and the recorded
    reason; a family it relaxes is still verified whenever signatures are present.
  - Verifies in-process with the Python library C(cryptography); no cosign binary, no transparency log.
author:
  - goldenimage.pipeline maintainers (@goldenimage)
requirements:
  - cryptography (on the controller)
options:
  path:
    description: The artifact to verify.
    type: path
    required: true
  name:
    description:
      - The name the artifact is expected to carry as the provenance subject (the revision being served).
      - Defaults to the file name of O(path).
    type: str
  family:
    description: The family the artifact belongs to, as the trust policy's rules name it.
    type: str
    required: true
  stream:
    description: The stream the artifact belongs to, when the trust policy's rules name streams.
    type: str
  signature_path:
    description: The detached signature. Defaults to C(<path>.sig); an absent file means unsigned.
    type: path
  provenance_path:
    description: The provenance envelope. Defaults to C(<path>.intoto.jsonl); an absent file means unsigned.
    type: path
  facts_path:
    description:
      - The image-facts record (JSON) as it is now; the digest of its canonical serialization is compared
        with the C(image-facts) input the provenance recorded at signing (RV(facts_match)).
    type: path
extends_documentation_fragment:
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.info_module
  - goldenimage.pipeline.provenance.trust_policy
notes:
  - "Runs where the files are; use C(delegate_to: localhost) on the controller."
  - cosign writes an empty C(keyid) in its envelopes; such a signature is tried with every key of the keyring.
seealso:
  - module: goldenimage.pipeline.artifact_sign
"""

EXAMPLES = r"""
- name: Refuse to import an exported golden nobody trusted signed
  goldenimage.pipeline.artifact_verify:
    path: /srv/import/windows-11-golden-20260828.qcow2
    family: windows-11-golden
    stream: stable
    public_keys:
      - "{{ lookup('ansible.builtin.file', 'keys/release.pub') }}"
    trust_policy:
      rules:
        - key: 3f1c0a9a1d6b4e0f9c2b7d5e8a4f6c1b0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b
          name: release-2026
          families: [windows-11-golden, debian-12]
      relaxed:
        - family: lab-scratch
          reason: throwaway images of the lab, never served to tenants
    facts_path: /srv/import/windows-11-golden-20260828.facts.json
  delegate_to: localhost
  register: verified

- name: Say who signed it, and from what
  ansible.builtin.debug:
    msg: "{{ verified.signer }} signed it from {{ verified.provenance.inputs }}"
"""

RETURN = r"""
verdict:
  description: V(verified) or V(unsigned_allowed); on a refusal the failed result carries the other verdicts.
  returned: always
  type: str
  sample: verified
check:
  description: The check that decided (V(all) when every check passed).
  returned: always
  type: str
  sample: all
message:
  description: The verdict in one line, naming the artifact, the key and the check.
  returned: always
  type: str
key_id:
  description:
    - The id of the key that signed (the SHA-256 of its DER public key, hex), None when unsigned; the name
      M(goldenimage.pipeline.artifact_sign) and M(goldenimage.pipeline.os_mirror_verify) return it under.
  returned: always
  type: str
signer:
  description: The policy's name of that key.
  returned: when RV(verdict) is V(verified)
  type: str
  sample: release-2026
relaxed:
  description: The reason the policy records for letting the family go unsigned.
  returned: when RV(verdict) is V(unsigned_allowed)
  type: str
digest:
  description: The artifact's SHA-256.
  returned: always
  type: dict
provenance:
  description: The statement's V(subject), V(inputs), V(builder) and V(time).
  returned: when RV(verdict) is V(verified)
  type: dict
facts_match:
  description:
    - Whether O(facts_path) still has the digest recorded for the C(image-facts) input; None when either is
      missing.
  returned: always
  type: bool
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import inputs as checks
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal, run_module
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance


def argument_spec():
    return dict(
        path=dict(type="path", required=True),
        name=dict(type="str"),
        family=dict(type="str", required=True),
        stream=dict(type="str"),
        signature_path=dict(type="path"),
        provenance_path=dict(type="path"),
        facts_path=dict(type="path"),
        **provenance.trust_policy_spec(),
    )


def _facts_match(facts_path, doc):
    if not doc or not facts_path or not os.path.isfile(facts_path):
        return None
    # The rule golden_info and the drift report read: the record's digest as a document.
    record = {"inputs": provenance.summary(doc)["inputs"]}
    return provenance.signed_report(record, signing.read_facts(facts_path))["facts_match"]


def run(params):
    """The runner: verifies the files with the keyring, judges with the policy, returns or refuses."""
    p = params
    path = p["path"]
    checks.require_file(path, os.path.isfile(path), "artifact %s" % path, "give the artifact to verify")
    if p["trust_policy"] is None:
        raise Refusal(
            "artifact %s" % path, "no trust_policy: nothing says which keys may sign it", "give trust_policy"
        )
    policy = provenance.normalize_policy(p["trust_policy"])
    ring = signing.keyring_of(p["public_keys"], extra=provenance.public_keys(policy))
    name = p["name"] or os.path.basename(path)
    digest, signature, found = signing.file_evidence(ring, path, p["signature_path"], p["provenance_path"])
    verdict = provenance.judge(
        {"name": name, "digest": digest}, p["family"], p["stream"], policy, signature, found
    )
    doc = (found or {}).get("statement")
    result = dict(verdict, digest=digest, facts_match=_facts_match(p["facts_path"], doc), changed=False)
    result["key_id"] = result.pop("key")  # the name every signing and verifying module returns it under
    if not result.pop("ok"):
        raise Refusal(None, result.pop("message"), **result)
    if verdict["verdict"] == provenance.VERIFIED:
        result["provenance"] = provenance.summary(doc)
    return result


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(module, lambda: run(module.params))


if __name__ == "__main__":
    main()
