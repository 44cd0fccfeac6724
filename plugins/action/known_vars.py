# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""goldenimage.pipeline.known_vars: refuse unknown variables in a role's or playbook's namespace.

What is known is read from where the collection documents it: inside a role, the role's argument spec
(``meta/argument_specs.yml``, the entry point the role runs) and its defaults; in a playbook, the
play's ``vars``; plus the task's ``known``. The play's ``vars`` are known inside its roles too: they are
the playbook's own declarations. What is checked is every variable of the host with one of
the prefixes, except what tasks registered or set as facts (results, not options). ``roles`` adds the
options of other roles of this collection (every entry point of their argument specs): a playbook that
reads a role's namespace without running the role (an undo step beside the role) knows what the role
takes. The rule is ``inputs.unknown_variables``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import yaml
from ansible.plugins.action import ActionBase
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import inputs
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError


def _play(task):
    node = task
    while node is not None:
        play = getattr(node, "_play", None)
        if play is not None:
            return play
        node = getattr(node, "_parent", None)
    return None


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("prefix", "known", "roles"))
    # plugins/action/known_vars.py -> the collection's roles/
    ROLES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "roles")

    @staticmethod
    def argument_specs(role_dir):
        """``{entry point: spec}`` of the role in ``role_dir`` (its ``meta/argument_specs.yml``), read from
        the file: a role loaded by ``include_role`` does not carry them."""
        path = os.path.join(role_dir, "meta", "argument_specs.yml")
        if not os.path.isfile(path):
            return None
        with open(path) as handle:
            return (yaml.safe_load(handle) or {}).get("argument_specs") or {}

    def role_options(self, names):
        """The options of every entry point of these roles of this collection (FQCN or short names)."""
        known = set()
        for name in names:
            specs = self.argument_specs(os.path.join(self.ROLES_DIR, str(name).rsplit(".", 1)[-1]))
            if specs is None:
                raise PipelineError("known_vars: roles: %s is not a role of this collection" % name)
            for entry in specs.values():
                known |= set(((entry or {}).get("options") or {}).keys())
        return known

    def known(self, task_vars):
        """``(known names, where)`` for the task's role, else its play. The play's own ``vars`` are the
        playbook's declarations and always known; what comes from outside (extra vars, an AWX survey,
        inventory) and what a play passes to a role is checked."""
        known = set(self._task.args.get("known") or [])
        known |= self.role_options(self._task.args.get("roles") or [])
        play = _play(self._task)
        if play is not None:
            known |= set((play.vars or {}).keys())
        role = getattr(self._task, "_role", None)
        if role is not None:
            specs = self.argument_specs(getattr(role, "_role_path", "") or "") or {}
            entry = (getattr(role, "_from_files", None) or {}).get("tasks") or "main"
            known |= set(((specs.get(entry) or {}).get("options") or {}).keys())
            known |= set(role.get_default_vars().keys())
            return known, "role %s" % role.get_name()
        if play is not None:
            return known, "playbook %s" % (play.get_name() or "play")
        return known, "this play"

    def results_of_tasks(self, task_vars):
        """Variables tasks registered or set as facts: results, never options."""
        manager = getattr(self._task, "_variable_manager", None)
        host = task_vars.get("inventory_hostname")
        names = set()
        for cache in ("_nonpersistent_fact_cache", "_fact_cache"):
            try:
                names |= set((getattr(manager, cache, None) or {}).get(host, {}) or {})
            except Exception:  # a fact cache backend that cannot be read: nothing to subtract
                continue
        return names

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        task_vars = task_vars or {}
        prefix = self._task.args.get("prefix")
        prefixes = [prefix] if isinstance(prefix, str) else list(prefix or [])
        if not prefixes or not all(isinstance(p, str) and p for p in prefixes):
            result.update(failed=True, msg="known_vars: prefix is required (a string or a list of strings)")
            return result
        try:
            known, where = self.known(task_vars)
            names = set(task_vars) - self.results_of_tasks(task_vars)
            checked = inputs.unknown_variables(names, prefixes, known, where)
        except PipelineError as exc:
            result.update(failed=True, **exc.result)
            return result
        result.update(changed=False, checked=checked)
        return result
