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
