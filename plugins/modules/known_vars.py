#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: known_vars
short_description: Refuse unknown variables in a role's or playbook's namespace before anything runs
version_added: 0.1.0
description:
  - Every variable of the host whose name starts with one of O(prefix) must be one the role or playbook
    takes; otherwise the task fails, naming each unknown variable and the closest known one, before
    anything is read or written. A misspelt option (C(repave_windw)) would otherwise silently mean its
    default (no window at all).
  - Inside a role, the known variables are the options of the role's argument spec
    (C(meta/argument_specs.yml), for the entry point the role runs) and its defaults; in a playbook, the
    play's C(vars); plus O(known) in both. The play's C(vars) are the playbook's own declarations and are
    known inside its roles too, so what is checked is what comes from outside (extra vars, an AWX survey,
    inventory) and what a play passes to a role.
  - Variables that tasks registered or set as facts are results, not options, and are not checked.
  - Every role and playbook of this collection that takes namespaced variables runs it first.
author:
  - goldenimage.pipeline maintainers (@goldenimage)
options:
  prefix:
    description: The namespace(s), for example V(repave_) or V([publish_, packer_build_]).
    type: raw
    required: true
  known:
    description: Known variables besides the argument spec or the play's C(vars), such as required ones.
    type: list
    elements: str
    default: []
  roles:
    description:
      - Roles of this collection whose argument specs (every entry point) are known too, for a playbook
        that reads a role's namespace without running the role, such as a step that undoes what the role
        did and receives the same answers.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - goldenimage.pipeline.attributes
attributes:
  idempotent:
    support: full
  check_mode:
    support: full
    details: Variables are compared the same way in check mode.
  diff_mode:
    support: N/A
    details: Only variables are read; no object or file is written.
notes:
  - An action plugin; it runs on the controller and reads only the variables of the run.
"""

EXAMPLES = r"""
- name: Refuse unknown repave_* variables before reading anything
  goldenimage.pipeline.known_vars:
    prefix: repave_
    known: [repave_namespace, repave_catalog]

- name: Refuse unknown golden_promote_* variables (the role's options are known here too)
  goldenimage.pipeline.known_vars:
    prefix: golden_promote_
    roles: [goldenimage.pipeline.golden_promote]
"""

RETURN = r"""
checked:
  description: The variables in the namespace that were found, all known.
  returned: success
  type: list
  elements: str
  sample: [repave_catalog, repave_namespace, repave_window]
unknown:
  description: The unknown variables.
  returned: failure
  type: list
  elements: str
  sample: [repave_windw]
"""

from ansible.module_utils.basic import AnsibleModule


def argument_spec():
    return dict(
        prefix=dict(type="raw", required=True),
        known=dict(type="list", elements="str", default=[]),
        roles=dict(type="list", elements="str", default=[]),
    )


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    module.fail_json(msg="known_vars reads the variables of the run: it runs as an action plugin only")


if __name__ == "__main__":
    main()
