# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Packer on the controller: short commands through the module, and a build that outlives one module call.

I/O only. A build runs detached under a small Python wrapper that writes Packer's output to
``<workdir>/packer-build.log`` and, when Packer exits, its status to ``packer-build.rc``; each round of the
wait reads those two files, and a time-out stops the build's process group.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import signal
import subprocess
import sys

LOG = "packer-build.log"
RC = "packer-build.rc"
# Runs Packer with its output in a file and writes the exit status beside it, so a later call can read both.
WRAPPER = (
    "import subprocess, sys\n"
    "log, rc = sys.argv[1], sys.argv[2]\n"
    "with open(log, 'ab') as out:\n"
    "    code = subprocess.call(sys.argv[3:], stdout=out, stderr=subprocess.STDOUT)\n"
    "with open(rc + '.part', 'w') as f:\n"
    "    f.write(str(code))\n"
    "import os; os.rename(rc + '.part', rc)\n"
)


class Packer(object):
    def __init__(self, module, binary, workdir, env=None):
        self.module = module
        self.binary = binary
        self.workdir = workdir
        self.env = dict(env or {})

    def run(self, args):
        """``(rc, stdout, stderr)`` of a short Packer command in the work directory."""
        return self.module.run_command(
            [self.binary] + list(args), cwd=self.workdir, environ_update=self.env, check_rc=False
        )

    def paths(self):
        return os.path.join(self.workdir, LOG), os.path.join(self.workdir, RC)

    def start(self, args):
        """Start ``packer <args>`` detached; returns its process id."""
        log, rc = self.paths()
        for path in (log, rc):
            if os.path.exists(path):
                os.unlink(path)
        env = dict(os.environ)
        env.update(self.env)
        proc = subprocess.Popen(
            [sys.executable, "-c", WRAPPER, log, rc, self.binary] + list(args),
            cwd=self.workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        return proc.pid

    def state(self):
        """``(exit status or None while it runs, output so far)``."""
        log, rc = self.paths()
        output = ""
        if os.path.exists(log):
            with open(log, "rb") as handle:
                output = handle.read().decode("utf-8", "replace")
        if not os.path.exists(rc):
            return None, output
        with open(rc) as handle:
            return int(handle.read().strip() or "1"), output

    def stop(self, pid):
        """Stop the build's process group (the wrapper, Packer and the VM it started)."""
        try:
            os.killpg(pid, signal.SIGTERM)
        except (OSError, ProcessLookupError):
            pass

    def alive(self, pid):
        try:
            os.kill(pid, 0)
        except (OSError, ProcessLookupError):
            return False
        return True
