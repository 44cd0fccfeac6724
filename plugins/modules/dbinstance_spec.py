#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: dbinstance_spec
short_description: Validate and default a DBInstance spec against the baked image catalog before it is applied
version_added: 0.1.0
description:
  - Checks the C(engineVersion) of a DBInstance spec, or of a whole DBInstance manifest, the way the
    operator will read it, before anyone applies it, and returns the spec with C(engineVersion) filled in.
  - The rule is the collection's one engineVersion rule (the same as the
    P(goldenimage.pipeline.engine_version#filter) filter and the repave pre-flight). An absent or empty
    C(engineVersion) takes the newest PostgreSQL major of the default OS stream's tip that is not past end of
    life. A major that the tip does not carry, a major past its end of life, a YAML float (C(16.0)) and a
    value that is not a major number are refused, naming the supported majors.
  - The majors come from the tip of the instance's own OS stream when its spec names one (C(osVersion),
    quoted; an unquoted C(22.04) arrives as a number and is refused), else of the catalog's default stream,
    as the operator picks them. That stream must have a validated tip; a stream the catalog does not have,
    or one without a validated tip, is refused with the move (M(goldenimage.pipeline.baked_image_stream)).
  - A spec key a letter or two away from C(engineVersion) or C(osVersion) while that field is not set (such
    as C(engineVerison)) is refused naming the field. The operator keeps unknown fields, so the misspelling
    would silently mean "not set" and the default would apply.
  - Reads only; never writes, so it is safe in a CI check of tenant manifests.
author:
  - goldenimage.pipeline maintainers (@goldenimage)
options:
  spec:
    description:
      - The DBInstance C(spec). Mutually exclusive with O(definition).
    type: dict
  definition:
    description:
      - A whole DBInstance manifest (C(apiVersion), C(kind), C(metadata), C(spec)); its C(spec) is checked.
      - Mutually exclusive with O(spec).
    type: dict
  today:
    description: The date end of life is judged on, C(YYYY-MM-DD). Defaults to today (UTC).
    type: str
  eol_overrides:
    description:
      - 'End-of-life dates to add or replace, as for M(goldenimage.pipeline.eol_guard),
        C({"postgresql": {"18": "2030-11-14"}}).'
    type: dict
    default: {}
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - goldenimage.pipeline.catalog.required
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.actiongroup_k8s
attributes:
  check_mode:
    support: full
    details: The module never writes; check mode gives the same answer.
  diff_mode:
    support: none
  idempotent:
    support: full
notes:
  - "Runs on the controller; use C(delegate_to: localhost) when the play targets other hosts."
seealso:
  - module: goldenimage.pipeline.eol_guard
  - module: goldenimage.pipeline.baked_image_stream
"""

EXAMPLES = r"""
- name: Check a tenant's DBInstance and get the spec the operator will act on
  goldenimage.pipeline.dbinstance_spec:
    definition: "{{ lookup('file', 'orders-db.yaml') | from_yaml }}"
    catalog:
      namespace: dbaas-system
      name: baked-image-catalog
  register: checked

- name: Apply it with engineVersion filled in
  kubernetes.core.k8s:
    definition: "{{ checked.definition }}"

- name: Default an empty engineVersion from a catalog kept in Git
  goldenimage.pipeline.dbinstance_spec:
    spec:
      engineVersion: ""
      storage: 20Gi
    catalog:
      path: catalog/baked-images.yaml
"""

RETURN = r"""
changed:
  description: Always false; nothing is written.
  returned: always
  type: bool
spec:
  description: The spec with C(engineVersion) resolved (every other field as given).
  returned: always
  type: dict
  sample: {engineVersion: "17", storage: 20Gi}
definition:
  description: O(definition) with its spec resolved.
  returned: when O(definition) is given
  type: dict
engine_version:
  description: The PostgreSQL major the DBInstance gets.
  returned: always
  type: str
  sample: "17"
defaulted:
  description: Whether C(engineVersion) was absent or empty and so took the default.
  returned: always
  type: bool
default_stream:
  description: The catalog's default OS stream.
  returned: always
  type: str
  sample: "24.04"
stream:
  description: The OS stream the instance gets (its C(osVersion), else the default stream).
  returned: always
  type: str
  sample: "24.04"
tip:
  description: The tip revision of RV(stream) the majors come from.
  returned: always
  type: str
  sample: v20261201-2404
supported:
  description: The majors a new DBInstance may ask for, oldest first.
  returned: always
  type: list
  elements: str
  sample: ["15", "16", "17"]
"""

import copy

from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import catalog, eol
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked._catalog_store import (
    CatalogStore,
    catalog_options,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import (
    PipelineError,
    run_module,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeModule


def argument_spec():
    return dict(
        spec=dict(type="dict"),
        definition=dict(type="dict"),
        today=dict(type="str"),
        eol_overrides=dict(type="dict", default={}),
        catalog=catalog_options(required=True),
    )


def run(module):
    """Resolve the spec's engineVersion; returns the result, raises PipelineError for a refusal."""
    p = module.params
    definition = p["definition"]
    subject = catalog.dbinstance_subject(definition)
    spec = catalog.manifest_spec(definition) if definition is not None else p["spec"]
    store = CatalogStore(module, p["catalog"])
    doc = store.read()
    table = p["eol_overrides"] or None
    try:
        day = eol.parse_today(p["today"])
        resolved, major, defaulted, stream = catalog.dbinstance_spec(doc, spec, today=day, eol_table=table)
        _stream, tip, _image = catalog.default_tip(doc, stream)
        supported = catalog.supported_engine_versions(doc, day, table, stream=stream)
    except catalog.CatalogError as exc:
        raise PipelineError("%s: %s (%s)" % (subject, exc.msg, store.where), refused=True) from None
    except PipelineError as exc:
        raise PipelineError("%s: %s" % (subject, exc.msg), refused=True) from None
    result = dict(
        changed=False,
        spec=resolved,
        engine_version=major,
        defaulted=defaulted,
        default_stream=catalog.normalize(doc)["default_stream"],
        stream=stream,
        tip=tip,
        supported=supported,
    )
    if definition is not None:
        result["definition"] = dict(copy.deepcopy(definition), spec=resolved)
    return result


def main():
    module = KubeModule(
        argument_spec=argument_spec(),
        supports_check_mode=True,
        mutually_exclusive=[("spec", "definition")],
        required_one_of=[("spec", "definition")],
    )
    run_module(module, lambda: run(module))


if __name__ == "__main__":
    main()
