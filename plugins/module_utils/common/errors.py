# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The one error base of the collection and the one way a module exits.

Pure: no I/O. Every domain refusal and every adapter failure derives from ``PipelineError``, which
carries the message and the result fields the module returns with it. A module's ``main()`` builds
its module and hands its runner to ``run_module``; runners return a result dict and never exit, so
they can be unit-tested with parameters and observed state and no ``SystemExit`` to catch.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class PipelineError(Exception):
    """An action that cannot (or must not) go on. ``result`` is what the module fails with."""

    def __init__(self, msg, **fields):
        super(PipelineError, self).__init__(msg)
        self.msg = msg
        self.fields = fields

    @property
    def result(self):
        result = dict(self.fields)
        result["msg"] = self.msg
        return result


class InvalidValue(PipelineError):
    """A value a domain rule cannot read (a date, a window, a version); a caller that adds the option's
    name to the message catches it (or the base) and raises its own."""


class Refusal(PipelineError):
    """A request refused before anything is written: the object, the rule it breaks, the supported move.

    ``Refusal("DataVolume cozy-public/x", "its storage class differs from the golden's", "create a new
    entry")`` reads ``DataVolume cozy-public/x: its storage class differs from the golden's; create a new
    entry``. ``refused`` is always True in the result so callers can tell a refusal from a failure.
    """

    def __init__(self, subject, rule, move=None, **fields):
        msg = "%s: %s" % (subject, rule) if subject else rule
        if move:
            msg = "%s; %s" % (msg, move)
        fields.setdefault("refused", True)
        super(Refusal, self).__init__(msg, **fields)
        self.subject = subject
        self.rule = rule
        self.move = move


def run_module(module, runner):
    """Call ``runner()`` (which returns the result dict) and exit the module once, either way."""
    try:
        result = runner()
    except PipelineError as exc:
        module.fail_json(**exc.result)
    module.exit_json(**result)
