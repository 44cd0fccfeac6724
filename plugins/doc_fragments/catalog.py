# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # The baked image catalog where a module can do without it (goldenimage.pipeline.catalog).
    # (Literal strings: ansible-test reads doc fragments without running them.)
    DOCUMENTATION = r"""
options:
  catalog:
    description:
      - The baked image catalog, a ConfigMap (O(catalog.namespace), O(catalog.name)) or a file
        (O(catalog.path)). Writers are safe against each other (resourceVersion, retried on a conflict).
    type: dict
    required: false
    suboptions:
      namespace:
        description: Namespace of the catalog ConfigMap.
        type: str
      name:
        description:
          - Name of the catalog ConfigMap (key C(catalog.yaml)); a module that writes the catalog creates it
            when missing.
          - A ConfigMap holds at most 1 MiB, and each revision's package manifest takes about 10 KiB of it;
            a write that would take the catalog past 1000 KiB is refused before it is sent, naming the
            largest revisions (keep such a catalog in a file, O(catalog.path)).
        type: str
      path:
        description: A catalog YAML file instead of a ConfigMap (to keep the catalog in Git).
        type: path
      trust:
        description:
          - The trust policy this run pins, in the shape of the catalog's C(trust) section (C(keys), each
            C({name, public_key, streams, families}), and C(streams), each C({require_signature, reason})).
          - The catalog keeps its policy beside the verdicts it judges, so whoever may write the catalog may
            otherwise add a key of their own, relax a stream, or remove the section (then no signature is
            checked). When given, a catalog whose trust section is not this one (or has none) is refused
            before anything is read from it or written, naming the keys and streams that differ.
          - Keep it where the catalog's writers cannot change it (the playbook's repository, an AWX credential
            or survey the platform team owns).
        type: dict
"""

    # The same option where the module needs it (goldenimage.pipeline.catalog.required).
    REQUIRED = r"""
options:
  catalog:
    description:
      - The baked image catalog, a ConfigMap (O(catalog.namespace), O(catalog.name)) or a file
        (O(catalog.path)). Writers are safe against each other (resourceVersion, retried on a conflict).
    type: dict
    required: true
    suboptions:
      namespace:
        description: Namespace of the catalog ConfigMap.
        type: str
      name:
        description:
          - Name of the catalog ConfigMap (key C(catalog.yaml)); a module that writes the catalog creates it
            when missing.
          - A ConfigMap holds at most 1 MiB, and each revision's package manifest takes about 10 KiB of it;
            a write that would take the catalog past 1000 KiB is refused before it is sent, naming the
            largest revisions (keep such a catalog in a file, O(catalog.path)).
        type: str
      path:
        description: A catalog YAML file instead of a ConfigMap (to keep the catalog in Git).
        type: path
      trust:
        description:
          - The trust policy this run pins, in the shape of the catalog's C(trust) section (C(keys), each
            C({name, public_key, streams, families}), and C(streams), each C({require_signature, reason})).
          - The catalog keeps its policy beside the verdicts it judges, so whoever may write the catalog may
            otherwise add a key of their own, relax a stream, or remove the section (then no signature is
            checked). When given, a catalog whose trust section is not this one (or has none) is refused
            before anything is read from it or written, naming the keys and streams that differ.
          - Keep it where the catalog's writers cannot change it (the playbook's repository, an AWX credential
            or survey the platform team owns).
        type: dict
"""
