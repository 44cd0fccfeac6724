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

import re


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


# A private key pasted into an option that is not no_log (a public key, a trust policy) would be echoed in
# the result's invocation and in any message quoting the value.
PRIVATE_PEM = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?-----END [A-Z0-9 ]*PRIVATE KEY-----", re.S)


def private_key_texts(value):
    """Every private-key PEM block in ``value`` (strings inside lists and dicts too), and each line of its
    body, so neither the block nor a line quoted from it is shown."""
    found = set()
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for item in value:
            found |= private_key_texts(item)
    elif isinstance(value, str):
        for block in PRIVATE_PEM.findall(value):
            found.add(block)
            found.update(line.strip() for line in block.splitlines()[1:-1] if len(line.strip()) >= 16)
    return found


def run_module(module, runner):
    """Call ``runner()`` (which returns the result dict) and exit the module once, either way; a private
    key found in any option is masked in what the module returns."""
    module.no_log_values.update(private_key_texts(module.params))
    try:
        result = runner()
    except PipelineError as exc:
        module.fail_json(**exc.result)
    module.exit_json(**result)
