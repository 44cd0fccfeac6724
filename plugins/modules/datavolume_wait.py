#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: datavolume_wait
short_description: Wait for a CDI DataVolume's import, printing its phase and progress while it runs
version_added: 0.1.0
description:
  - Waits until the C(DataVolume) O(namespace)/O(name) reaches phase C(Succeeded).
  - Only phase C(Failed) is terminal, and fails the wait at once with the importer's reason (the message
    of the C(Running) condition, else of any condition). Any other phase may still succeed (CDI restarts a
    failing importer by itself, counting C(restartCount)) and is waited for until O(wait_timeout).
  - A DataVolume that stays absent for O(absent_timeout) seconds fails the wait at once, naming it. A
    create that was lost or swallowed (a C(409) reported as unchanged) will not fix itself by waiting.
  - Long waits talk. Each call of the module waits at most O(report_every) seconds (less when the phase,
    progress or restart count changes) and returns C(done), a progress C(line) and C(resume). The action
    plugin of the same name calls it again with C(resume) and prints each line, so the task prints a line
    such as C(DataVolume ns/x, phase ImportInProgress, progress 45.20%, restarts 0 after 12.3s) at least
    every O(report_every) seconds until the import is done, has failed, or O(wait_timeout) has passed.
  - The time-out names the last phase, progress, restart count and condition message, and says whether the
    import was C(stuck) (nothing changed since the wait began) or C(still working).
  - Never writes anything.
author:
  - goldenimage.pipeline maintainers (@goldenimage)
options:
  name:
    description: Name of the DataVolume.
    type: str
    required: true
  namespace:
    description: Namespace of the DataVolume.
    type: str
    required: true
  label:
    description:
      - Words shown in brackets after the DataVolume's name in every line and message, for example
        C(ISO sha256 0123456789ab).
    type: str
  failed_hint:
    description: Sentence appended to the message of a failed import (what to do next).
    type: str
    default: ""
  timeout_hint:
    description: Sentence appended to the time-out message (what to do next).
    type: str
    default: ""
  absent_timeout:
    description:
      - Seconds the DataVolume may read as absent before the wait fails (the time between a create and the
        first read that sees it).
    type: int
    default: 10
  absent_since:
    description: Since when the DataVolume reads as absent (from C(resume)); set by the action plugin.
    type: float
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.actiongroup_k8s
  - goldenimage.pipeline.wait_rounds
  - goldenimage.pipeline.attributes.wait_only
seealso:
  - module: goldenimage.pipeline.volume_job
"""

EXAMPLES = r"""
- name: Wait for the import of the golden's source, printing its progress
  goldenimage.pipeline.datavolume_wait:
    name: golden-debian-12-20260828-0123456789ab-import
    namespace: golden-images-block
    wait_timeout: 1800
    wait_sleep: 5
    timeout_hint: Raise linux_golden_import_timeout for a large image.
  register: import_wait

- name: Show how it ended
  ansible.builtin.debug:
    msg: "{{ import_wait.line }}"
"""

RETURN = r"""
done:
  description: Whether the DataVolume has reached phase C(Succeeded).
  returned: always
  type: bool
  sample: true
phase:
  description: The DataVolume's last observed phase (empty before CDI set one, or when it is absent).
  returned: always
  type: str
  sample: ImportInProgress
progress:
  description: The DataVolume's last observed progress as CDI writes it, or C(N/A).
  returned: always
  type: str
  sample: "45.20%"
restarts:
  description: The importer's restart count.
  returned: always
  type: int
  sample: 0
message:
  description: Why the import is where it is (the C(Running) condition's message, else any condition's).
  returned: always
  type: str
  sample: Import Complete
line:
  description: The progress line of the last round (also printed by the action plugin).
  returned: always
  type: str
  sample: "DataVolume golden-images-block/x-import: phase Succeeded, progress 100.0%, restarts 0 after 41.2s"
lines:
  description: Every line printed while the task waited, one per round.
  returned: always
  type: list
  elements: str
elapsed:
  description: Seconds since the wait began.
  returned: always
  type: float
  sample: 41.2
resume:
  description:
    - The options that continue this wait in another call (C(started), C(last_state), C(changed_at),
      C(absent_since)).
  returned: when the wait is not over
  type: dict
last_state:
  description: The last observed state, on failure.
  returned: failure
  type: str
stuck:
  description: On time-out, whether nothing changed since the wait began.
  returned: failure (time-out)
  type: bool
"""

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import rounds as rounds_
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common._object_wait import (
    ObjectWait,
    run_object_wait,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import datavolume
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeModule

API_VERSION = "cdi.kubevirt.io/v1beta1"


def argument_spec():
    return rounds_.object_arg_spec(
        label={"type": "str"},
        failed_hint={"type": "str", "default": ""},
        timeout_hint={"type": "str", "default": ""},
        absent_timeout={"type": "int", "default": datavolume.ABSENT_GRACE},
        absent_since={"type": "float"},
    )


class DataVolumeWait(ObjectWait):
    """One round of the wait. ``fetch()`` returns the DataVolume or None."""

    def run(self):
        p = self.p
        self.rounds = rounds_.from_params(p, self.clock(), ("absent_timeout",))
        self.absent_since = p["absent_since"]
        # The first state of a wait is shown with the first change, or when the round is over.
        runner = self.runner(self.rounds, quiet_first=True, stop=self.check_mode or not p["wait"])
        return runner.run(self, datavolume.observe(None))

    def observe(self):
        return datavolume.observe(ObjectWait.observe(self))

    def state(self, seen):
        return datavolume.state_key(seen)

    def verdict(self, seen, now):
        self.absent_since = (self.absent_since or now) if not seen["exists"] else None
        absent_for = now - self.absent_since if self.absent_since else 0.0
        return datavolume.verdict(seen, absent_for, self.p["absent_timeout"])

    def fields(self, seen, now):
        p = self.p
        elapsed = self.rounds.elapsed(now)
        return {
            "phase": seen["phase"],
            "progress": seen["progress"],
            "restarts": seen["restarts"],
            "message": seen["message"],
            "elapsed": round(elapsed, 1),
            "line": datavolume.line(p["namespace"], p["name"], seen, elapsed, p["label"]),
            "last_state": datavolume.last_seen(seen),
            "duration": round(elapsed, 3),
        }

    def failed(self, seen, failure, now):
        p = self.p
        if failure == "absent":
            msg = datavolume.absent_message(
                p["namespace"], p["name"], now - self.absent_since, p["failed_hint"]
            )
        else:
            msg = datavolume.failed_message(p["namespace"], p["name"], seen, p["failed_hint"])
        return PipelineError(msg, **self.fields(seen, now))

    def timed_out(self, seen, now, stuck, words):
        p = self.p
        return PipelineError(
            datavolume.timeout_message(
                p["namespace"], p["name"], seen, p["wait_timeout"], words, p["timeout_hint"]
            ),
            stuck=stuck,
            **self.fields(seen, now),
        )

    def report(self, seen, now, done, going_on):
        result = dict(self.fields(seen, now), changed=False, done=done)
        result.pop("last_state")
        if going_on:
            result["resume"] = dict(self.rounds.resume(), absent_since=self.absent_since)
        return result


def main():
    module = KubeModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_object_wait(module, DataVolumeWait, API_VERSION, "DataVolume")


if __name__ == "__main__":
    main()
