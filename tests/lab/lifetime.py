"""A lab never outlives its owner: every long-lived child process dies with the process that started it.

The kernel's parent-death signal (prctl PR_SET_PDEATHSIG, set by util-linux's `setpriv --pdeathsig KILL`
between fork and exec, so no Python runs in the child) sends SIGKILL to the child when the thread that
started it ends: a test run killed by a time limit, a `kill -9` or a crash leaves no kube-apiserver, etcd,
kube-controller-manager, snapshot controller, Job process or CDI conversion behind, reparented to init.
The signal follows the starting thread, so a child must be started by a thread that lives at least as
long as it does (the main thread for the servers, a pod's or an import's own thread for the others).
"""

from __future__ import annotations

import shutil


class NoParentDeathSignal(RuntimeError):
    """setpriv is missing: the lab would leave processes behind when killed, so it does not start them."""


def tied(argv: list[str]) -> list[str]:
    """`argv` run so that it is killed when the starting thread of this process ends."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise NoParentDeathSignal(
            "setpriv (util-linux) is not on PATH: the lab starts its child processes through "
            "`setpriv --pdeathsig KILL` so that none outlives it; install util-linux"
        )
    return [setpriv, "--pdeathsig", "KILL", "--", *argv]


__all__ = ["NoParentDeathSignal", "tied"]
