# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # The keyring and the trust policy a verifying module judges with (provenance.trust_policy_spec).
    TRUST_POLICY = r"""
options:
  public_keys:
    description:
      - The keyring, each entry a PEM public key (C(-----BEGIN PUBLIC KEY-----), as C(cosign.pub) holds it) or
        the path of a file holding one.
      - A key in the keyring is not trusted by being there; O(trust_policy) says what it may sign.
    type: list
    elements: str
    default: []
  trust_policy:
    description:
      - Which keys may sign which families and streams, and which families may go unsigned.
      - Required by M(goldenimage.pipeline.artifact_verify); without it a module that also signs verifies
        nothing.
    type: dict
    suboptions:
      rules:
        description: One entry per key and what it may sign.
        type: list
        elements: dict
        default: []
        suboptions:
          key:
            description:
              - The key id (64 hex digits, as M(goldenimage.pipeline.artifact_sign) returns it).
              - One of O(trust_policy.rules[].key) and O(trust_policy.rules[].public_key) is required; given
                both, they must name the same key.
            type: str
          public_key:
            description:
              - The key as a PEM public key, as a catalog's trust section keeps it; it joins the keyring.
            type: str
          name:
            description: A name for the key, reported as the signer.
            type: str
          families:
            description: The families it may sign; C(*) or left out for any.
            type: list
            elements: str
          streams:
            description: The streams it may sign; C(*) or left out for any.
            type: list
            elements: str
      relaxed:
        description:
          - The families or streams whose C(require_signature) is off, each with the reason, which is
            reported.
        type: list
        elements: dict
        default: []
        suboptions:
          family:
            description:
              - The family; each entry names one of O(trust_policy.relaxed[].family) and
                O(trust_policy.relaxed[].stream).
            type: str
          stream:
            description: The stream.
            type: str
          reason:
            description: Why it may go unsigned.
            type: str
            required: true
"""

    # The signing key of a module that signs what it makes (provenance.signing_key_spec).
    SIGNING_KEY = r"""
options:
  signing_key_path:
    description:
      - The ECDSA P-256 private key that signs, a PEM file (PKCS#8, encrypted PKCS#8 or SEC1
        C(EC PRIVATE KEY)), as M(goldenimage.pipeline.artifact_sign) reads it.
      - cosign's own encrypted key format (C(ENCRYPTED SIGSTORE PRIVATE KEY)) is refused, the library has no
        XSalsa20 to open it; give the PEM that C(cosign import-key-pair --key) was given.
      - At most one of O(signing_key_path) and O(signing_key); without either nothing is signed.
    type: path
  signing_key:
    description: The private key as PEM text (for example from a Kubernetes Secret), as O(signing_key_path).
    type: str
  signing_key_password:
    description: The password of an encrypted PKCS#8 signing key.
    type: str
"""

    # Who built what a module signs (provenance.builder_spec), recorded in its provenance.
    BUILDER = r"""
options:
  builder:
    description: Who built the artifact.
    type: dict
    default: {}
    suboptions:
      playbook:
        description: The playbook that made it.
        type: str
      host:
        description: The host that made it.
        type: str
      collection_version:
        description: The version of goldenimage.pipeline that made it (the running collection's when omitted).
        type: str
"""
