#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: volume_job
short_description: Run the qemu-img conversion of one claim into another as a Job, printing its progress
version_added: 0.1.0
description:
  - Converts the raw image of the claim O(source) into the claim O(dest) with C(qemu-img convert), in the
    Job O(namespace)/O(name), either onto a Block O(dest) in place (the golden's source volume), or
    into the file O(dest.file) of a Filesystem O(dest) (for example a compressed qcow2 to upload).
  - Each claim is presented by its C(volumeMode), a Block claim as a device and a Filesystem claim as a
    directory holding O(source.file) or O(dest.file), so the caller does not have to know it.
  - A Job of that name that has completed is the proof the conversion ran; it is not run again
    (C(changed=false)). A Job that failed fails the task with its condition and the end of its last pod's
    log; delete the Job to convert again. A running Job is waited for.
  - The create cannot pass for success when it was not. A C(409) reads the Job back, a C(5xx) or a dropped
    connection reads whether it went through and otherwise retries, and a Job that is then absent fails the
    wait at once, naming it.
  - Long waits talk. One call waits at most O(report_every) seconds and returns C(done), a C(line) (the
    Job's counts and qemu-img's percent from the pod log) and C(resume); the action plugin of the same name
    calls it again and prints each line until the Job has completed, has failed, or O(wait_timeout) passed.
  - The Job's C(activeDeadlineSeconds) is O(wait_timeout), so the cluster stops a conversion nobody waits for.
author:
  - goldenimage.pipeline maintainers (@goldenimage)
options:
  name:
    description: Name of the Job (at most 63 characters, a label value).
    type: str
    required: true
  namespace:
    description: Namespace of the Job and of both claims.
    type: str
    required: true
  source:
    description: The claim holding the raw image to convert; mounted read-only.
    type: dict
    required: true
    suboptions:
      claim:
        description: Name of the PersistentVolumeClaim.
        type: str
        required: true
      file:
        description: For a Filesystem claim, the image file in it (CDI writes C(disk.img)).
        type: str
        default: disk.img
  dest:
    description: The claim the conversion writes.
    type: dict
    required: true
    suboptions:
      claim:
        description: Name of the PersistentVolumeClaim.
        type: str
        required: true
      file:
        description: For a Filesystem claim, the file written in it; required then.
        type: str
  format:
    description: Format written, V(raw) or V(qcow2).
    type: str
    choices: [raw, qcow2]
    default: raw
  compress:
    description: Compress the qcow2 (C(qemu-img convert -c)); only with O(format=qcow2).
    type: bool
    default: false
  image:
    description: Container image of the Job; it must ship C(qemu-img) (CDI's importer image does).
    type: str
    default: quay.io/kubevirt/cdi-importer:v1.60.0
  privileged:
    description:
      - Run the container privileged. Not needed to write a volume device; a namespace that enforces the
        baseline Pod Security level refuses privileged pods.
    type: bool
    default: false
  backoff_limit:
    description: Retries of a failed pod before the Job fails.
    type: int
    default: 1
  labels:
    description: Labels of the Job and its pod.
    type: dict
    default: {}
  failed_hint:
    description: Sentence added to the message of a failed Job or of a time-out (what did not happen).
    type: str
    default: ""
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.actiongroup_k8s
  - goldenimage.pipeline.wait_rounds
attributes:
  check_mode:
    support: full
    details:
      - In check mode the claims and the Job are read; a missing Job is reported as created, and nothing is
        sent or waited for.
  diff_mode:
    support: full
    details: A created Job is shown as the diff's C(after).
  idempotent:
    support: full
    details: A completed Job of that name is not run again.
seealso:
  - module: goldenimage.pipeline.datavolume_wait
"""

EXAMPLES = r"""
- name: Write the imported raw image onto the golden's Block volume
  goldenimage.pipeline.volume_job:
    name: golden-debian-12-20260828-0123456789ab-convert
    namespace: golden-images-block
    source:
      claim: golden-debian-12-20260828-0123456789ab-import
    dest:
      claim: golden-debian-12-20260828-0123456789ab-disk
    wait_timeout: 1800

- name: Convert a sealed disk into a compressed qcow2 on a scratch volume
  goldenimage.pipeline.volume_job:
    name: win11-bake-disk-export
    namespace: golden-images-build
    source:
      claim: win11-bake-disk
    dest:
      claim: win11-bake-disk-export-scratch
      file: windows11-x64-golden.qcow2
    format: qcow2
    compress: true
"""

RETURN = r"""
done:
  description: Whether the Job has completed.
  returned: always
  type: bool
  sample: true
job:
  description: The Job's name and namespace.
  returned: always
  type: dict
  sample: {name: x-convert, namespace: golden-images-block}
command:
  description: The qemu-img command line the Job runs.
  returned: always
  type: list
  elements: str
  sample: [qemu-img, convert, -p, -f, raw, -O, raw, -n, /source/disk.img, /dev/dest]
progress:
  description: The last percent qemu-img printed, when its log has one.
  returned: always
  type: str
  sample: "45.20%"
line:
  description: The progress line of the last round (also printed by the action plugin).
  returned: always
  type: str
  sample: "Job golden-images-block/x-convert: Complete, active=0 succeeded=1 failed=0 after 14.0s"
lines:
  description: Every line printed while the task waited.
  returned: always
  type: list
  elements: str
log:
  description: The end of the last pod's log, when the Job failed or timed out.
  returned: failure
  type: str
resume:
  description: The options that continue this wait in another call.
  returned: when the wait is not over
  type: dict
"""

import time

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import rounds as rounds_
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common._object_wait import ObjectWait
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import (
    PipelineError,
    run_module,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import jobs
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import (
    KubeModule,
    is_transient,
    object_diff,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._volume_job import JobClient

SOURCE_PATH = "/source"
DEST_PATH = "/dest"


def argument_spec():
    return rounds_.object_arg_spec(
        source={
            "type": "dict",
            "required": True,
            "options": {
                "claim": {"type": "str", "required": True},
                "file": {"type": "str", "default": "disk.img"},
            },
        },
        dest={
            "type": "dict",
            "required": True,
            "options": {"claim": {"type": "str", "required": True}, "file": {"type": "str"}},
        },
        format={"type": "str", "choices": list(jobs.FORMATS), "default": "raw"},
        compress={"type": "bool", "default": False},
        image={"type": "str", "default": "quay.io/kubevirt/cdi-importer:v1.60.0"},
        privileged={"type": "bool", "default": False},
        backoff_limit={"type": "int", "default": 1},
        labels={"type": "dict", "default": {}},
        failed_hint={"type": "str", "default": ""},
    )


class VolumeJob(ObjectWait):
    """One round: lay the Job out from the claims, create it when absent, wait for it up to a round."""

    def __init__(self, params, client, check_mode=False, transient=None, clock=time.time, sleeper=None):
        def job():
            return client.job(params["namespace"], params["name"])

        super(VolumeJob, self).__init__(params, job, check_mode, transient, clock, sleeper)
        self.client = client

    def claims(self):
        p = self.p
        self.predicted = []
        found = []
        for role, path, read_only in (("source", SOURCE_PATH, True), ("dest", DEST_PATH, False)):
            claim = self.client.claim(p["namespace"], p[role]["claim"])
            if claim is None and self.check_mode:
                # Check mode: an earlier task of the same run would have created it. Its mode is the one this
                # Job's options imply (a file names an image in a Filesystem volume; none, the Block device).
                mode = "Filesystem" if p[role]["file"] else "Block"
                claim = {
                    "metadata": {"name": p[role]["claim"], "namespace": p["namespace"]},
                    "spec": {"volumeMode": mode},
                }
                self.predicted.append(p[role]["claim"])
            jobs.require_claim(
                claim,
                p["namespace"],
                p[role]["claim"],
                "create it first; nothing was written",
                role,
                "it does not exist, so there is nothing to convert %s"
                % ("from" if role == "source" else "into"),
            )
            volume = {"name": role, "path": path, "file": p[role]["file"], "read_only": read_only}
            if jobs.claim_mode(claim) == "Block":
                volume["path"] = "/dev/%s" % role
            image, mount, device = jobs.present(volume, claim)
            found.append((volume, claim, mount, device, image))
        return found

    def definition(self):
        p = self.p
        (src, src_claim, src_mount, src_dev, src_image), (dst, dst_claim, dst_mount, dst_dev, dst_image) = (
            self.claims()
        )
        command = jobs.convert_command(src_image, dst_image, p["format"], p["compress"], dst_dev is not None)
        volumes = [(src, src_claim, src_mount, src_dev), (dst, dst_claim, dst_mount, dst_dev)]
        definition = jobs.job_definition(
            p["name"],
            p["namespace"],
            p["labels"],
            p["image"],
            command,
            volumes,
            p["wait_timeout"],
            p["backoff_limit"],
            p["privileged"],
        )
        return definition, command

    def run(self):
        p = self.p
        ref = {"name": p["name"], "namespace": p["namespace"]}
        now = self.clock()
        rounds = rounds_.from_params(p, now)
        job = self.client.job(p["namespace"], p["name"])
        result = {"changed": False, "job": ref}
        if job is None:
            if p["last_state"] is not None:
                raise PipelineError(jobs.absent_message(p["namespace"], p["name"]), job=ref)
            definition, command = self.definition()
            result.update(changed=True, command=command, diff=object_diff(None, definition))
            if self.check_mode:
                line = "Job %s/%s: would be created (check mode)" % (p["namespace"], p["name"])
                if self.predicted:
                    line += "; claims not there yet: %s" % ", ".join(self.predicted)
                return dict(result, done=False, line=line, progress=None)
            job = self.client.create(definition)
        else:
            result["command"] = ((kinds_containers(job) or [{}])[0]).get("command") or []
        self.rounds, self.result, self.first, self.percent = rounds, result, job, None
        return self.runner(rounds, stop=self.check_mode or not p["wait"]).run(self)

    def observe(self):
        """``(job, kind, last pod's log)``: the Job read before the wait first, then read anew."""
        p = self.p
        job = ObjectWait.observe(self)
        if job is None:
            raise PipelineError(jobs.absent_message(p["namespace"], p["name"]), job=self.result["job"])
        kind, _cond = jobs.outcome(job)
        log = None
        if kind != jobs.COMPLETE:
            _pod, log = self.client.last_pod_log(p["namespace"], p["name"])
            if kind != jobs.FAILED:
                self.percent = jobs.log_progress(log) or self.percent
        return job, kind, log

    def state(self, seen):
        return jobs.state_key(seen[0], self.percent)

    def verdict(self, seen, now):
        return seen[1] == jobs.COMPLETE, seen[1] == jobs.FAILED and "failed"

    def line(self, seen, now):
        return jobs.line(self.p["namespace"], self.p["name"], seen[0], self.percent, self.rounds.elapsed(now))

    def failed(self, seen, failure, now):
        p, (job, _kind, log) = self.p, seen
        return PipelineError(
            jobs.failed_message(p["namespace"], p["name"], job, log, p["failed_hint"]),
            job=self.result["job"],
            log=jobs.log_tail(log),
            line=self.line(seen, now),
        )

    def timed_out(self, seen, now, stuck, words):
        p, (job, _kind, log) = self.p, seen
        return PipelineError(
            jobs.timeout_message(
                p["namespace"], p["name"], job, self.percent, p["wait_timeout"], words, log, p["failed_hint"]
            ),
            job=self.result["job"],
            stuck=stuck,
            line=self.line(seen, now),
            log=jobs.log_tail(log),
            duration=round(self.rounds.elapsed(now), 3),
        )

    def report(self, seen, now, done, going_on):
        result = dict(self.result, done=done, line=self.line(seen, now), progress=self.percent)
        if going_on:
            result["resume"] = self.rounds.resume()
        return result


def kinds_containers(job):
    return (((job.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers")


def main():
    module = KubeModule(argument_spec=argument_spec(), supports_check_mode=True)
    p = module.params

    def runner():
        try:
            return VolumeJob(p, JobClient(module), module.check_mode, transient=is_transient).run()
        except PipelineError:
            raise
        except Exception as exc:
            module.fail_from_exception("run Job %s/%s" % (p["namespace"], p["name"]), exc)

    run_module(module, runner)


if __name__ == "__main__":
    main()
