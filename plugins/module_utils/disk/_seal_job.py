# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Run the seal verifier in a Job next to a PersistentVolumeClaim and read its verdict from the log.

The verifier's files travel in a ConfigMap mounted at /verifier, so the Job runs exactly the rules of
the module that started it, whatever the image. The Job, its pod and the ConfigMap are deleted
afterwards, also on failure and timeout (a finished pod still holds its claim); what could not be
deleted is reported by name with the command that removes it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import time
import uuid

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import errors, rounds
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import (
    _disk,
    _partitions,
    image_facts,
    seal,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import _seal_cli as seal_cli
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import jobs
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._volume_job import JobClient

MOUNT = "/verifier"
DISK_DIR = "/disk"
DISK_FILE = "disk.img"
BLOCK_DEVICE = "/dev/golden-disk"
LABELS = {"app.kubernetes.io/name": "seal-verify", "app.kubernetes.io/managed-by": "goldenimage.pipeline"}
LOG_TAIL_LINES = 20

# An image without dissect is not fixed behind the user's back (no network install unless asked).
MISSING_LIBRARY_HINT = (
    "; the verifier image %s lacks %s: build the image from images/seal-verifier/Containerfile "
    "(or mirror it), or set install_missing=true to pip-install the pinned packages from a package index "
    "the pod reaches"
)


def _source(module):
    loader = getattr(module, "__loader__", None)
    if loader is not None and hasattr(loader, "get_source"):
        text = loader.get_source(module.__name__)
        if text:
            return text
    with open(module.__file__) as fh:
        return fh.read()


def module_files(*modules):
    """ConfigMap data: the source of each module under its file name, for a Job that runs them."""
    return {jobs.code_key(m.__name__): _source(m) for m in modules}


def verifier_files():
    """ConfigMap data: the verifier and its siblings, under their keys (jobs.code_key)."""
    return module_files(seal, image_facts, _disk, _partitions, errors, seal_cli)


def configmap_definition(name, namespace, files):
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(LABELS)},
        "data": files,
    }


def verifier_args(options):
    args = []
    if options.get("os_name"):
        args += ["--os", options["os_name"]]
    if options.get("partition") is not None:
        args += ["--partition", str(options["partition"])]
    args += [
        "--build-failed",
        options["build_failed"],
        "--bootstrap-script",
        options["bootstrap_script"],
        "--bootstrap-log",
        options["bootstrap_log"],
        "--final-line",
        options["final_line"],
        "--max-log-bytes",
        str(options["max_log_bytes"]),
        "--remote-desktop-port",
        str(options.get("remote_desktop_port") or 0),
    ]
    for cluster in options.get("postgresql_clusters") or ():
        args += ["--postgresql-cluster", cluster]
    return args


def job_definition(name, namespace, pvc, volume_mode, image, command, options, timeout, files):
    """The verifier Job: the claim read-only, as a file (Filesystem) or a device (Block)."""
    container = {
        "name": "verify",
        "image": image,
        "command": list(command),
        "env": [{"name": "PYTHONPATH", "value": MOUNT}, {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}],
        "volumeMounts": [{"name": "verifier", "mountPath": MOUNT, "readOnly": True}],
    }
    if volume_mode == "Block":
        device = BLOCK_DEVICE
        container["volumeDevices"] = [{"name": "disk", "devicePath": BLOCK_DEVICE}]
    else:
        device = "%s/%s" % (DISK_DIR, DISK_FILE)
        container["volumeMounts"].append({"name": "disk", "mountPath": DISK_DIR, "readOnly": True})
    container["args"] = [device] + verifier_args(options)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(LABELS)},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": max(1, int(timeout)),
            "template": {
                "metadata": {"labels": dict(LABELS)},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [container],
                    "volumes": [
                        {"name": "verifier", "configMap": {"name": name, "items": jobs.code_items(files)}},
                        {"name": "disk", "persistentVolumeClaim": {"claimName": pvc, "readOnly": True}},
                    ],
                },
            },
        },
    }


def parse_log(text):
    """The verdict the verifier printed, or None when it printed none."""
    for line in reversed((text or "").splitlines()):
        if line.startswith(seal_cli.MARKER):
            try:
                return json.loads(line[len(seal_cli.MARKER) :])
            except ValueError:
                return None
    return None


def job_finished(job):
    """Wait predicate: done when the Job has a True Complete or Failed condition (the log says which
    verdict)."""
    return bool(jobs.outcome(job)[0]), None


def describe_job(job):
    return "Job not found" if job is None else jobs.counts(job)


class VerifierJob:
    """The Job's life: create, wait, read the verdict, delete. Raises PipelineError; never exits."""

    def __init__(self, module, namespace, pvc, client=None, report=None):
        self.module = module
        self.report = report  # report(line): where progress lines go while the Job runs
        self.client = client or JobClient(module)
        self.namespace = namespace
        self.pvc = pvc
        self.name = "seal-verify-%s" % uuid.uuid4().hex[:8]
        self.job = {"name": self.name, "namespace": namespace}
        self.image = None

    def error(self, msg, **extra):
        return PipelineError(msg, job=dict(self.job), **extra)

    def run(self, image, command, options):
        self.image = image
        claim = self.client.claim(self.namespace, self.pvc)
        if claim is None:
            raise self.error("PersistentVolumeClaim %s/%s not found" % (self.namespace, self.pvc))
        mode = (claim.get("spec") or {}).get("volumeMode") or "Filesystem"
        files = verifier_files()
        params = self.module.params
        job = job_definition(
            self.name, self.namespace, self.pvc, mode, image, command, options, params["wait_timeout"], files
        )
        try:
            self.client.create(configmap_definition(self.name, self.namespace, files))
            self.client.create(job)
            result = self.verdict(params["wait_timeout"], params["wait_sleep"])
        except PipelineError as exc:
            left = self.cleanup()
            if left:
                exc.fields["left_behind"] = left
                exc.msg += "; %s" % self.leftover_note(left)
            raise
        left = self.cleanup()
        if left:
            fields = dict(result, left_behind=left)
            raise PipelineError(
                "verified PersistentVolumeClaim %s/%s, but %s"
                % (self.namespace, self.pvc, self.leftover_note(left)),
                **fields,
            )
        return result

    def verdict(self, timeout, sleep):
        started, reporter = time.monotonic(), rounds.Reporter()

        def progress(job):
            state, now = describe_job(job), time.monotonic()
            if self.report is not None and reporter.due(state, now):
                self.report(
                    "seal_verify: Job %s/%s verifying PersistentVolumeClaim %s: %s (%ds)"
                    % (self.namespace, self.name, self.pvc, state, now - started)
                )

        try:
            finished, duration = self.module.wait(
                "batch/v1",
                "Job",
                self.name,
                self.namespace,
                job_finished,
                describe_job,
                "the verifier Job %s/%s to finish" % (self.namespace, self.name),
                timeout,
                sleep,
                progress=progress,
            )
        except PipelineError as exc:
            exc.fields["job"] = dict(self.job)
            raise
        pod, log = self.client.last_pod_log(self.namespace, self.name, strict=True)
        info = {"name": self.name, "namespace": self.namespace, "pod": pod, "duration": round(duration, 3)}
        result = parse_log(log)
        tail = "\n".join((log or "").splitlines()[-LOG_TAIL_LINES:])
        if result is None:
            raise self.error(
                "the verifier Job %s/%s printed no verdict (%s); its log ends with:\n%s"
                % (self.namespace, self.name, describe_job(finished), tail or "(empty)"),
                log=tail,
            )
        if result.get("error"):
            msg = "cannot verify PersistentVolumeClaim %s/%s: %s" % (
                self.namespace,
                self.pvc,
                result["error"],
            )
            if result.get("missing"):
                msg += MISSING_LIBRARY_HINT % (self.image, result["missing"])
            raise self.error(msg, log=tail)
        result["job"] = info
        return result

    def cleanup(self):
        """Delete the Job, its pods (the API orphans them by default) and the ConfigMap.

        Each delete rides the adapter's retries; what still cannot be deleted is returned by name.
        """
        left = []
        timeout, sleep = self.module.params["wait_timeout"], self.module.params["wait_sleep"]

        def delete_or_note(kind, call):
            try:
                call()
            except PipelineError as exc:
                left.append({"kind": kind, "name": self.name, "error": exc.msg})

        delete_or_note(
            "Job",
            lambda: self.module.delete(
                "batch/v1", "Job", self.name, self.namespace, propagation="Background"
            ),
        )
        try:
            pods = self.module.list("v1", "Pod", self.namespace, label_selector="job-name=%s" % self.name)
        except PipelineError as exc:
            pods = []
            left.append({"kind": "Pod", "name": "job-name=%s" % self.name, "error": exc.msg})
        for pod in pods:
            name = pod["metadata"]["name"]
            try:
                # A pod that still exists still holds the claim: wait until it is gone.
                self.module.delete_and_wait("v1", "Pod", name, self.namespace, timeout, sleep, before=pod)
            except PipelineError as exc:
                left.append({"kind": "Pod", "name": name, "error": exc.msg})
        delete_or_note("ConfigMap", lambda: self.module.delete("v1", "ConfigMap", self.name, self.namespace))
        return left

    def leftover_note(self, left):
        names = ", ".join("%s %s/%s" % (item["kind"], self.namespace, item["name"]) for item in left)
        objects = " ".join("%s/%s" % (item["kind"].lower(), item["name"]) for item in left)
        return "could not delete %s; remove them with: kubectl -n %s delete %s" % (
            names,
            self.namespace,
            objects,
        )
