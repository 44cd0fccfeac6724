# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Kubernetes side of a Job that works on claims: read the claims, create the Job so that a lost or
refused create cannot pass for success, read it back, read the log of its last pod.

I/O only; what the Job looks like and how it ended are decided in ``jobs``. ``volume_job`` and the seal
verifier (``_seal_job.VerifierJob``) both run their Jobs through ``JobClient``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import io
import random

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import (
    CREATE_REQUEST_LABEL,
    status_code,
)

# A Job's log is read to its end; one far larger than this is not the log of the program it runs.
MAX_LOG_BYTES = 16 * 1024 * 1024


class JobClient(object):
    def __init__(self, module):
        self.module = module

    def claim(self, namespace, name):
        return self.module.get("v1", "PersistentVolumeClaim", name, namespace)

    def job(self, namespace, name):
        """The Job, or None; transient errors raise (the wait rides them out)."""
        return self.module.fetch("batch/v1", "Job", name, namespace)

    def create(self, definition):
        """Create ``definition`` and return the object the server holds.

        It carries this request's own marker label, so the adapter's one rule for a 409 (the object is
        adopted only when it holds every field sent: a reply lost after the server committed it) can only
        recognise this very request; any other object of that name is refused, naming it. Transient
        failures are retried by the adapter, once, not here again.
        """
        definition = copy.deepcopy(definition)
        marker = "%016x" % random.getrandbits(64)
        definition["metadata"].setdefault("labels", {})[CREATE_REQUEST_LABEL] = marker
        return self.module.create(definition)

    def last_pod_log(self, namespace, job_name, strict=False, limit=MAX_LOG_BYTES):
        """``(pod name, log)`` of the Job's newest pod; ``(None, "")`` when it has none.

        The log is streamed (at most ``limit`` bytes). A pod that has not started has no log yet (the
        API answers 400): ``(name, "")``. Any other failure gives ``(name, "")`` too for a progress line,
        or raises with ``strict`` (a verdict read from the log must not pass for an empty log).
        """
        pods = self.module.list("v1", "Pod", namespace, label_selector="job-name=%s" % job_name)
        if not pods:
            return None, ""
        pod = sorted(pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")[-1]
        name = pod["metadata"]["name"]
        out = io.BytesIO()
        try:
            self.module.download(
                "/api/v1/namespaces/%s/pods/%s/log" % (namespace, name),
                out,
                limit=limit,
                action="read the log of Pod %s/%s" % (namespace, name),
            )
        except PipelineError as exc:
            if strict and status_code(exc) != 400:
                raise
            return name, ""
        return name, out.getvalue().decode("utf-8", "replace")
