# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The I/O half of the wait modules that poll one object in rounds: the clock, the sleeper and the read.

A wait built on ``ObjectWait`` gets its object from ``fetch()``, decides with the pure rules (``rounds``,
``datavolume``, ``bake``, ``console``, ``jobs``) and is run by ``_wait.RoundRunner``; tests hand it a fake
clock and a list of objects.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common._wait import RoundRunner, Wait
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import run_module
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import is_transient


class ObjectWait(Wait):
    """The hooks of a wait for one object, with the module's parameters; ``runner()`` runs them."""

    def __init__(self, params, fetch, check_mode=False, transient=None, clock=time.time, sleeper=None):
        self.p = params
        self.fetch = fetch
        self.check_mode = check_mode
        self.transient = transient or (lambda exc: False)
        self.clock = clock
        self.sleeper = sleeper

    # An object read before the wait began: the first poll judges it instead of reading again.
    first = None

    def observe(self):
        seen, self.first = self.first, None
        return self.fetch() if seen is None else seen

    def runner(self, rounds, **options):
        """The shared runner over ``rounds``, polling every ``wait_sleep`` on this wait's clock."""
        return RoundRunner(rounds, self.p["wait_sleep"], self.clock, self.sleeper, self.transient, **options)

    def read(self, last):
        """The object now; the last one when the read hit a transient error (a 5xx, a dropped connection)."""
        try:
            return self.fetch()
        except Exception as exc:
            if self.transient(exc):
                return last
            raise


def run_object_wait(module, runner_class, api_version, kind):
    """Run ``runner_class`` on the object the module's ``name`` and ``namespace`` name, and exit once."""
    p = module.params

    def fetch():
        try:
            return module.fetch(api_version, kind, p["name"], p["namespace"])
        except Exception as exc:
            if is_transient(exc):
                raise
            module.fail_from_exception("read %s %s/%s" % (kind, p["namespace"], p["name"]), exc)

    run_module(module, lambda: runner_class(p, fetch, module.check_mode, transient=is_transient).run())
