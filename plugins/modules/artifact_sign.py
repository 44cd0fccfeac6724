#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: artifact_sign
short_description: Sign an artifact file the way cosign sign-blob does and write its signed provenance
version_added: 0.1.0
description:
  - Writes a detached signature of O(path) in the format C(cosign sign-blob --key) writes and
    C(cosign verify-blob --key) reads (ECDSA P-256 over the SHA-256 of the bytes, ASN.1 DER, base64) to
    O(signature_path).
  - Writes the artifact's provenance to O(provenance_path), an in-toto Statement v1 with a SLSA provenance v1
    predicate naming the artifact (O(name) and its digest), the O(inputs), the builder (collection version,
    O(builder.playbook), O(builder.host)) and the time, in a DSSE envelope signed with the same key, as
    C(cosign attest-blob) writes it (C(cosign verify-blob-attestation) reads it).
  - Signs in-process with the Python library C(cryptography); no cosign binary is needed. Nothing reaches a
    transparency log or a keyless signing service.
  - An existing signature that verifies for the same bytes with the same key is kept, and so is an existing
    provenance envelope the same key signed for the same subject, inputs and builder (C(changed=false)).
  - The key is read and checked, the inputs validated, before anything is written. Exactly one of O(key_path)
    and O(key) is required.
author:
  - goldenimage.pipeline maintainers (@goldenimage)
requirements:
  - cryptography (on the controller)
options:
  path:
    description: The artifact to sign (a qcow2, a manifest, any file).
    type: path
    required: true
  name:
    description:
      - The artifact's name recorded as the provenance subject, which a verifier compares with the name it
        expects, so that another revision's signature does not verify this one.
      - Defaults to the file name of O(path).
    type: str
  signature_path:
    description: Where the detached signature goes. Defaults to C(<path>.sig).
    type: path
  provenance_path:
    description: Where the provenance envelope goes (one JSON line). Defaults to C(<path>.intoto.jsonl).
    type: path
  inputs:
    description:
      - What the artifact was made from, each recorded by name and digest; give each name once.
      - The producers use C(upstream), C(packer-template), C(provisioning-script), C(package-manifest) and
        C(image-facts); other names are recorded as given.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The input's name.
        type: str
        required: true
      digest:
        description:
          - C(sha256:<hex>) or C(sha512:<hex>).
          - Exactly one of O(inputs[].digest) and O(inputs[].path) is required.
        type: str
      path:
        description:
          - A local file whose SHA-256 is recorded.
          - For C(image-facts), the JSON record is read and the digest of its canonical serialization
            recorded, as goldens and reports digest the facts they hold, so its formatting does not matter.
        type: path
  time:
    description: The build time recorded, RFC 3339 UTC. Defaults to now.
    type: str
  force:
    description: Sign again even when the existing signature and provenance verify.
    type: bool
    default: false
extends_documentation_fragment:
  - goldenimage.pipeline.signing
  - goldenimage.pipeline.signing.builder
  - goldenimage.pipeline.attributes
attributes:
  check_mode:
    support: full
    details: In check mode the key is read and the existing files verified; nothing is written.
  diff_mode:
    support: full
    details: The signer key id and the provenance summary before and after.
  idempotent:
    support: full
    details: A signature and an envelope that still verify for the same bytes, key and inputs are kept.
notes:
  - "Runs where the key is; use C(delegate_to: localhost) to sign on the controller."
  - ECDSA signatures are randomised, so a new signature differs from the old one byte for byte; that is why
    an existing one is verified instead of compared.
  - "One key serves both tools: make it as PEM (C(openssl ecparam -genkey -name prime256v1 -noout |
    openssl pkcs8 -topk8 -nocrypt -out signing.pem)), give it here, and give cosign the same key with
    C(cosign import-key-pair --key signing.pem); the public half (RV(public_key), or C(cosign.pub)) is what
    verifiers are given."
  - Nothing is sent to a transparency log (Rekor) or a keyless signing service (Fulcio); verification is by
    key. Where a Rekor log is run, C(cosign sign-blob --key) on the same artifact can add an entry that
    proves when the signature existed; this module does not write one.
seealso:
  - module: goldenimage.pipeline.artifact_verify
"""

EXAMPLES = r"""
- name: Sign a baked revision where it is made
  goldenimage.pipeline.artifact_sign:
    path: /srv/baked-images/ubuntu-2404-postgres-v20261201-2404.qcow2
    key_path: /etc/goldenimage/signing.pem
    inputs:
      - name: upstream
        digest: "sha256:{{ upstream_sha256 }}"
      - name: packer-template
        path: /srv/build/ubuntu-2404-postgres.pkr.hcl
      - name: provisioning-script
        path: /srv/build/provision.sh
      - name: image-facts
        path: /srv/baked-images/ubuntu-2404-postgres-v20261201-2404.facts.json
    builder:
      playbook: publish.yml
      host: "{{ inventory_hostname }}"
  delegate_to: localhost
  register: signed

- name: Sign with a key kept in a Kubernetes Secret
  goldenimage.pipeline.artifact_sign:
    path: /srv/export/windows-11-golden.qcow2
    key: "{{ signing_secret.resources[0].data['cosign.pem'] | b64decode }}"
  no_log: true
"""

RETURN = r"""
path:
  description: The artifact signed.
  returned: always
  type: str
name:
  description: The subject name recorded.
  returned: always
  type: str
  sample: ubuntu-2404-postgres-v20261201-2404.qcow2
digest:
  description: The artifact's SHA-256 and SHA-512, both recorded in the provenance subject.
  returned: always
  type: dict
  sample: {sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08, sha512: "0b8e...7a1c"}
key_id:
  description:
    - The signing key's id, the SHA-256 (hex) of its DER SubjectPublicKeyInfo, as the trust policy names it.
  returned: always
  type: str
public_key:
  description: The signing key's public half (PEM), as cosign.pub holds it.
  returned: always
  type: str
signature_path:
  description: The detached signature file.
  returned: always
  type: str
provenance_path:
  description: The provenance envelope file.
  returned: always
  type: str
signature_changed:
  description: Whether the detached signature was (or in check mode would be) written.
  returned: always
  type: bool
provenance_changed:
  description: Whether the provenance envelope was (or in check mode would be) written.
  returned: always
  type: bool
provenance:
  description: The statement's V(subject), V(inputs), V(builder) and V(time) (the kept one when kept).
  returned: always
  type: dict
"""

import datetime
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import artifact
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import inputs as checks
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import run_module
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance


def argument_spec():
    return dict(
        path=dict(type="path", required=True),
        name=dict(type="str"),
        signature_path=dict(type="path"),
        provenance_path=dict(type="path"),
        inputs=dict(
            type="list",
            elements="dict",
            default=[],
            options=dict(
                name=dict(type="str", required=True), digest=dict(type="str"), path=dict(type="path")
            ),
            mutually_exclusive=[("digest", "path")],
            required_one_of=[("digest", "path")],
        ),
        builder=provenance.builder_option(),
        time=dict(type="str"),
        force=dict(type="bool", default=False),
        **provenance.key_options(),
    )


RULES = dict(mutually_exclusive=[("key_path", "key")], required_one_of=[("key_path", "key")])


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _inputs(given):
    found = []
    for entry in given or []:
        if entry.get("path"):
            path = entry["path"]
            checks.require_file(
                path, os.path.isfile(path), "input %s (%s)" % (entry["name"], path), "give its digest"
            )
            if entry["name"] == provenance.FACTS:
                # A facts record is digested as a document, the way goldens and reports digest theirs, so
                # the digest does not depend on how the file was formatted.
                facts = signing.read_facts(path)
                found.append({"name": entry["name"], "digest": provenance.facts_digest(facts)})
            else:
                found.append({"name": entry["name"], "digest": signing.file_digests(path)})
        else:
            found.append({"name": entry["name"], "digest": entry["digest"]})
    return found


def run(params, check_mode=False, now=_now):
    """The runner: reads the key and the artifact, keeps what still verifies, writes the rest; never exits."""
    p = params
    path = p["path"]
    checks.require_file(path, os.path.isfile(path), "artifact %s" % path, "build it before signing it")
    key = signing.private_key_from(p)
    name = p["name"] or os.path.basename(path)
    # Both digests: a consumer that serves the bytes by their SHA-512 (Harvester's checksum) finds it signed.
    digest = signing.file_digests(path, ("sha256", "sha512"))
    wanted = provenance.statement(
        {"name": name, "digest": digest},
        _inputs(p["inputs"]),
        signing.builder(p["builder"]),
        p["time"] or now(),
    )
    sig_path, env_path = provenance.companions(path)
    sig_path, env_path = p["signature_path"] or sig_path, p["provenance_path"] or env_path
    for target in (sig_path, env_path):
        folder = os.path.dirname(os.path.abspath(target))
        artifact.check_dest_folder(target, folder, os.path.isdir(folder), os.path.isdir(target))

    plan = signing.signing_plan(
        key, digest["sha256"], wanted, signing.read_text(sig_path), signing.read_text(env_path), p["force"]
    )
    result = {
        "path": path,
        "name": name,
        "digest": digest,
        "key_id": plan["key_id"],
        "public_key": signing.public_pem(key),
        "signature_path": sig_path,
        "provenance_path": env_path,
        "signature_changed": plan["signature"],
        "provenance_changed": plan["provenance"],
        "provenance": provenance.summary(plan["statement"]),
    }
    result["changed"] = result["signature_changed"] or result["provenance_changed"]
    if result["changed"]:
        result["diff"] = {
            "before": plan["before"],
            "after": {"signer": plan["key_id"], "provenance": provenance.summary(wanted)},
        }
    if check_mode:
        return result
    if plan["signature_text"] is not None:
        signing.write_text(sig_path, plan["signature_text"])
    if plan["envelope_text"] is not None:
        signing.write_text(env_path, plan["envelope_text"])
    return result


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True, **RULES)
    run_module(module, lambda: run(module.params, module.check_mode))


if __name__ == "__main__":
    main()
