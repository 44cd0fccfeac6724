# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""What a CDI DataVolume's import is doing, and when a wait for it is over.

Pure: no I/O. Only phase ``Succeeded`` is done and only phase ``Failed`` is terminal: CDI restarts a
failing importer pod by itself (``restartCount`` grows, the Running condition says why), so any other
phase may still succeed and is waited for until the time-out, which then says whether the import was
stuck or still working. A DataVolume that stays absent is an error at once: a create that was lost
or swallowed, or a deletion, will not fix itself by waiting.

A DataVolume left ``Failed`` by an earlier run stops the next run before it writes (``rerun_refusal``):
writing the same name again only patches the spec, which does not start a new import, and the wait would
then report the old failure as the new run's.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import kinds

SUCCEEDED = "Succeeded"
FAILED = "Failed"
# A DataVolume read as absent for this long fails the wait (a lag between create and read is shorter).
ABSENT_GRACE = 10


def condition_message(dv):
    """Why the import is where it is: the Running condition's message, else any condition's."""
    conditions = kinds.status(dv).get("conditions") or []
    running = [c.get("message") for c in conditions if c.get("type") == "Running" and c.get("message")]
    other = [c.get("message") for c in conditions if c.get("message")]
    return (running + other + ["no condition message"])[0]


def observe(dv):
    """The fields a wait reports: exists, phase, progress, restarts, message."""
    if dv is None:
        return {"exists": False, "phase": "", "progress": "N/A", "restarts": 0, "message": "not found"}
    status = kinds.status(dv)
    return {
        "exists": True,
        "phase": status.get("phase") or "",
        "progress": str(status.get("progress") or "N/A"),
        "restarts": int(status.get("restartCount") or 0),
        "message": condition_message(dv),
    }


def state_key(seen):
    """What counts as a change: phase, progress or restarts (a message alone is not news)."""
    if not seen["exists"]:
        return "absent"
    return "%s/%s/%s" % (seen["phase"], seen["progress"], seen["restarts"])


def subject(namespace, name, label=None):
    text = "DataVolume %s/%s" % (namespace, name)
    return "%s (%s)" % (text, label) if label else text


def line(namespace, name, seen, elapsed, label=None):
    """``DataVolume ns/n: phase ImportInProgress, progress 45.20%, restarts 0 after 12.3s``."""
    if seen["exists"]:
        what = "phase %s, progress %s, restarts %d" % (
            seen["phase"] or "(none yet)",
            seen["progress"],
            seen["restarts"],
        )
    else:
        what = "not found"
    return "%s: %s after %.1fs" % (subject(namespace, name, label), what, elapsed)


def last_seen(seen):
    return "last seen phase %s, progress %s, restartCount %d (%s)" % (
        seen["phase"] or "(none)",
        seen["progress"],
        seen["restarts"],
        seen["message"],
    )


def verdict(seen, absent_for, absent_grace=ABSENT_GRACE):
    """``(done, failure)``: done on Succeeded; a failure on Failed or on an absence that persists."""
    if not seen["exists"]:
        if absent_for >= absent_grace:
            return False, "absent"
        return False, None
    if seen["phase"] == SUCCEEDED:
        return True, None
    if seen["phase"] == FAILED:
        return False, "failed"
    return False, None


def failed_message(namespace, name, seen, hint=""):
    msg = "%s failed to import (phase Failed, progress %s, restartCount %d): %s." % (
        subject(namespace, name),
        seen["progress"],
        seen["restarts"],
        seen["message"],
    )
    return "%s %s" % (msg, hint) if hint else msg


def absent_message(namespace, name, absent_for, hint=""):
    msg = (
        "%s does not exist (read as absent for %.0fs): it was never created (a lost or refused create) or "
        "it was deleted while importing; waiting will not bring it back, run again to create it"
        % (subject(namespace, name), absent_for)
    )
    return "%s. %s" % (msg, hint) if hint else msg + "."


def timeout_message(namespace, name, seen, timeout, verdict_words, hint=""):
    msg = "timed out after %ss waiting for %s to reach phase Succeeded (%s): %s." % (
        timeout,
        subject(namespace, name),
        verdict_words,
        last_seen(seen),
    )
    return "%s %s" % (msg, hint) if hint else msg


def blocks_rerun(dv):
    """Whether the DataVolume as read before a run writes it (None: absent) is a failed import."""
    return dv is not None and observe(dv)["phase"] == FAILED


def rerun_refusal(dv, replace_option):
    """The message that stops a run over a Failed DataVolume, or ``""`` when ``dv`` does not block it.

    ``replace_option`` names the setting that has the run delete the DataVolume and create it anew.
    """
    if not blocks_rerun(dv):
        return ""
    seen = observe(dv)
    where = "%s/%s" % (kinds.namespace(dv), kinds.name(dv))
    return (
        "%s is Failed from an earlier import (progress %s, restartCount %d): %s. Nothing was written: "
        "patching it would not import again, and the wait would report that failure as this run's. Fix the "
        "source if it is wrong, then delete the Failed DataVolume %s first, or set %s: true to have it "
        "deleted and created anew."
        % (
            subject(kinds.namespace(dv), kinds.name(dv)),
            seen["progress"],
            seen["restarts"],
            seen["message"],
            where,
            replace_option,
        )
    )
