# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # The signing key and the builder of every module that signs what it makes (provenance.key_options,
    # provenance.builder_option).
    # (Literal strings: ansible-test reads doc fragments without running them.)
    DOCUMENTATION = r"""
options:
  key_path:
    description:
      - The ECDSA P-256 private key, a PEM file (PKCS#8, encrypted PKCS#8 or SEC1 C(EC PRIVATE KEY)).
      - cosign's own encrypted key format (C(ENCRYPTED SIGSTORE PRIVATE KEY)) is refused, the library has no
        XSalsa20 to open it; give the PEM that C(cosign import-key-pair --key) was given.
      - At most one of O(key_path) and O(key). The key is read and checked before anything is written.
    type: path
  key:
    description: The private key as PEM text (for example read from a Kubernetes Secret), as O(key_path).
    type: str
  key_password:
    description: The password of an encrypted PKCS#8 key.
    type: str
"""

    # The same options where key names something else (an object key): signing_key_path, signing_key, ...
    PREFIXED = r"""
options:
  signing_key_path:
    description:
      - The ECDSA P-256 private key, a PEM file (PKCS#8, encrypted PKCS#8 or SEC1 C(EC PRIVATE KEY)).
      - cosign's own encrypted key format (C(ENCRYPTED SIGSTORE PRIVATE KEY)) is refused, the library has no
        XSalsa20 to open it; give the PEM that C(cosign import-key-pair --key) was given.
      - At most one of O(signing_key_path) and O(signing_key); without either nothing is signed. The key is
        read and checked before anything is written.
    type: path
  signing_key:
    description:
      - The private key as PEM text (for example read from a Kubernetes Secret), as O(signing_key_path).
    type: str
  signing_key_password:
    description: The password of an encrypted PKCS#8 key.
    type: str
"""

    # Who made the artifact (goldenimage.pipeline.signing.builder).
    BUILDER = r"""
options:
  builder:
    description: Who made the artifact, as its provenance records it.
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
