# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""What Packer says: its version, whether it has ``packer init``, and where a build is, from its output.

Pure: no I/O. A build's output (``-machine-readable`` is not used: the human lines are what an operator
reads) has ``==> <builder>: <step>`` lines for each step; the last one is the build's phase.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError

# Packer gained `packer init` and `required_plugins` in 1.7.0; 1.6 has the QEMU builder built in.
INIT_SINCE = (1, 7, 0)
LOG_TAIL_CHARS = 4000
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")
_STEP = re.compile(r"^\s*==> (.+)$")


def version(text):
    """``"1.6.6"`` from ``packer version``'s output."""
    found = _VERSION.search(text or "")
    if not found:
        raise PipelineError("packer version printed no version: %r" % (text or "")[:200])
    return found.group(0)


def has_init(semver):
    return tuple(int(part) for part in semver.split(".")) >= INIT_SINCE


def phase(log):
    """The last ``==>`` step of a build's output, or None before the first."""
    steps = [m.group(1).strip() for m in (_STEP.match(line) for line in (log or "").splitlines()) if m]
    return steps[-1] if steps else None


def line(workdir, log, elapsed, running=True):
    step = phase(log) or ("starting" if running else "no step printed")
    return "Packer build in %s: %s after %ds" % (workdir, step, int(elapsed))


def tail(log):
    return (log or "").strip()[-LOG_TAIL_CHARS:] or "(no output)"


def failed_message(workdir, rc, log):
    return "packer build in %s failed (rc %s) at %s. Output ends with:\n%s" % (
        workdir,
        rc,
        phase(log) or "its start",
        tail(log),
    )


def timeout_message(workdir, timeout, words, log):
    return "timed out after %ss waiting for packer build in %s (%s; stopped): last step %s." % (
        timeout,
        workdir,
        words,
        phase(log) or "(none)",
    )
