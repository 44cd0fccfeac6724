# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""A bake's VM while it installs and seals itself: which statuses are the end, the words of the wait.

Pure: no I/O. sysprep powers the VM off when it has sealed the disk, so ``Stopped`` ends the wait (whether
the disk is sealed is seal_verify's question); the statuses below never come back by themselves.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import kinds

STOPPED = "Stopped"
RUNNING = "Running"
DEAD = (
    "ErrorUnschedulable",
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrorPvcNotFound",
    "ErrorDataVolumeNotFound",
    "DataVolumeError",
    "CrashLoopBackOff",
    "Unknown",
)


def status(vm):
    """The VM's printableStatus ("" before KubeVirt set one)."""
    return kinds.status(vm).get("printableStatus") or "" if vm is not None else ""


def shown(vm):
    if vm is None:
        return "not found"
    return status(vm) or "(no status yet)"


def line(ref, vm, elapsed, console_note=""):
    """``VM ns/n: Running, console setup (0.9) after 120s``."""
    text = "VM %s: %s" % (ref, shown(vm))
    if console_note:
        text += ", " + console_note
    return "%s after %ds" % (text, int(elapsed))


def dead(vm):
    """Why the VM will not finish by itself, or None."""
    if vm is None:
        return "not found"
    if status(vm) in DEAD:
        return status(vm)
    return None


def dead_message(ref, what, elapsed):
    return "VM %s is %s after %ds: it will not finish the install by itself; look at its events." % (
        ref,
        what,
        int(elapsed),
    )


def timeout_message(ref, vm, timeout, verdict_words, hint=""):
    msg = (
        "timed out after %ss waiting for VM %s to stop (sysprep powers it off when sealed; %s): last seen "
        "status %s." % (timeout, ref, verdict_words, status(vm) or "(none)")
    )
    return "%s %s" % (msg, hint) if hint else msg
