# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # What makes an image's bytes sensitive, for every module that moves them or judges where they go.
    DOCUMENTATION = r"""
options:
  license:
    description:
      - License state of the image. V(none), V(byol) and V(evaluation) do not make its bytes sensitive (the
        proof of the destination is still made and reported).
      - V(volume), V(kms), V(key) and V(activated) do. Sensitive bytes go only to a destination proven private
        (C(exposure.prove_private)); anything else is refused before the first byte, naming the bucket, what
        answered and the supported move.
    type: str
    choices: [none, byol, evaluation, volume, kms, key, activated]
    default: none
  sensitive_reasons:
    description:
      - Further declared reasons the image's bytes are sensitive; any reason counts as a licensed O(license)
        does, whatever O(license) says.
      - Where the module reads the image's facts from its bytes, the reasons found there are added to these;
        a declaration can add reasons, never take one away.
    type: list
    elements: str
    default: []
"""
