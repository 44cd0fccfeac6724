#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: eol_guard
short_description: Refuse PostgreSQL majors and Ubuntu streams that are past end of life
version_added: 0.1.0
description:
  - Checks every requested PostgreSQL major and the OS stream against the end-of-life table on the later
    of today (the wall clock, UTC) and O(today), the build date. A build date in the past never lets a
    version through that has reached its end of life. A version is supported on its EOL date and refused
    the day after.
  - Fails with a message naming each refused version, its EOL date and the supported set, so a
    build that would bake a past-EOL version stops before anything is built.
  - The table holds the PostgreSQL final-release dates (10 to 18) and Ubuntu LTS end of standard support
    (18.04 to 24.04); ended releases stay in it, so they are refused as past end of life. Ubuntu publishes a
    month (C(2027-04)); a month means its last day.
  - A version the table does not know is refused too; add it with O(eol_overrides).
  - Pure check; it talks to no cluster and changes nothing.
author:
  - goldenimage.pipeline maintainers (@goldenimage)
options:
  pg_versions:
    description:
      - PostgreSQL majors to be built, for example V([15, 16, 17]).
      - Whole numbers (C(16)) or strings of them; C(16.0), as a number or a string, is refused with the one
        answer that a major is a whole number.
    type: list
    elements: raw
    required: true
  os_version:
    description:
      - Ubuntu LTS stream of the image, for example V(22.04). Omit it to check PostgreSQL only.
      - Give it as a quoted string; an unquoted YAML number (C(24.10) reads as C(24.1)) is refused.
    type: raw
  today:
    description:
      - Build date, C(YYYY-MM-DD) or C(YYYYMMDD). Defaults to today (UTC). The check is made on the later
        of this date and today (RV(today)).
    type: str
  eol_overrides:
    description:
      - 'Dates that add to or replace the built-in table, as
        C({"postgresql": {"19": "2031-11-13"}, "ubuntu": {"26.04": "2031-04"}}).'
      - Values are C(YYYY-MM-DD) or C(YYYY-MM) (the month's last day).
      - An override that moves a date the table knows later claims support past its published end; each
        one is reported (RV(extended)) and warned about, and the publishing run records it in the catalog.
    type: dict
    default: {}
extends_documentation_fragment:
  - goldenimage.pipeline.attributes
attributes:
  check_mode:
    support: full
    details: The check is the same in check mode.
  diff_mode:
    support: N/A
    details: This module never changes anything.
  idempotent:
    support: full
notes:
  - Pure; it can run on any host, and the roles run it on the controller.
"""

EXAMPLES = r"""
- name: Stop before Packer when a requested version is past end of life
  goldenimage.pipeline.eol_guard:
    pg_versions: [15, 16, 17]
    os_version: "22.04"
    today: "2026-11-29"

- name: Add a PostgreSQL major the built-in table does not know yet
  goldenimage.pipeline.eol_guard:
    pg_versions: [17, 18, 19]
    os_version: "24.04"
    eol_overrides:
      postgresql:
        "19": "2031-11-13"
"""

RETURN = r"""
today:
  description: The day the check judged on, the later of today (UTC) and the build date O(today).
  returned: always
  type: str
  sample: "2026-11-29"
build_date:
  description: The build date given (O(today)), or today when none was.
  returned: always
  type: str
  sample: "2025-01-01"
extended:
  description: Each override that moves a known end-of-life date later, with C(kind), C(version),
    C(default), C(override) and C(message).
  returned: always
  type: list
  elements: dict
  sample:
    - kind: postgresql
      version: "15"
      default: "2027-11-11"
      override: "2028-05-11"
      message: "PostgreSQL 15: end of life moved from 2027-11-11 to 2028-05-11 by an override"
pg_versions:
  description: The requested PostgreSQL majors, normalized.
  returned: success
  type: list
  elements: str
  sample: ["15", "16", "17"]
pg_supported:
  description: Every PostgreSQL major in support on O(today), oldest first.
  returned: always
  type: list
  elements: str
  sample: ["15", "16", "17", "18"]
os_supported:
  description: Every Ubuntu stream in support on O(today), oldest first.
  returned: always
  type: list
  elements: str
  sample: ["22.04", "24.04"]
violations:
  description: Each refused version with its kind (C(postgresql) or C(ubuntu)), EOL date, reason
    (C(past_eol) or C(unknown)) and message.
  returned: always
  type: list
  elements: dict
  sample:
    - kind: postgresql
      version: "13"
      eol: "2025-11-13"
      reason: past_eol
      supported: ["15", "16", "17", "18"]
      message: "PostgreSQL 13 reached end of life on 2025-11-13; supported: 15, 16, 17, 18"
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import eol
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import inputs
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import (
    InvalidValue,
    PipelineError,
    run_module,
)


def argument_spec():
    return dict(
        pg_versions=dict(type="list", elements="raw", required=True),
        os_version=dict(type="raw"),
        today=dict(type="str"),
        eol_overrides=dict(type="dict", default={}),
    )


def run(params, now=None):
    """Return ``(failed, result)`` for the module's parameters, judged on the later of ``now`` (default:
    the wall clock) and the build date; raises InvalidValue on a value the rules cannot read, a Refusal
    for a version given as a YAML float."""
    build_date = eol.parse_today(params["today"])
    today = eol.judging_day(build_date, now)
    table = params["eol_overrides"] or None
    os_version = inputs.version_string(params["os_version"], "os_version")
    majors = eol.requested_majors(params["pg_versions"])
    if not majors:
        raise InvalidValue("pg_versions is empty: name at least one PostgreSQL major")
    result = dict(
        changed=False,
        today=today.isoformat(),
        build_date=build_date.isoformat(),
        extended=eol.extensions(table),
        pg_versions=majors,
        pg_supported=eol.supported_pg_majors(today, table),
        os_supported=eol.supported_os_streams(today, table),
        violations=[],
    )
    try:
        eol.eol_guard(majors, os_version, today, table)
    except eol.EOLViolation as exc:
        result["violations"] = exc.violations
        result["msg"] = str(exc)
        return True, result
    return False, result


def check(params, now=None):
    """The module's runner: the result when every version is supported, else a PipelineError."""
    try:
        failed, result = run(params, now)
    except InvalidValue as exc:
        raise PipelineError("eol_guard: %s" % exc.msg) from None
    if failed:
        fields = dict(result)
        raise PipelineError(fields.pop("msg"), **fields)
    return result


def checked(module):
    result = check(module.params)
    for item in result["extended"]:
        module.warn(item["message"] + ": support is claimed past its published end")
    return result


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(module, lambda: checked(module))


if __name__ == "__main__":
    main()
