# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Kubernetes side of a Job that works on claims: read the claims, create the Job so that a lost or
refused create cannot pass for success, read it back, read the log of its last pod.

I/O only; what the Job looks like and how it ended are decided in ``jobs``. ``_seal_job.VerifierJob``
does the same three things (create, wait, last pod's log) for the seal verifier and can be built on
``JobClient``: ``create`` for its Job and ConfigMap, ``job`` as its wait's fetch, ``last_pod_log``
instead of its own ``pod_log``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.goldenimage.pipeline.plugins.module_utils._kube import TRANSIENT_STATUS, KubeError

CREATE_ATTEMPTS = 3
CREATE_PAUSE = 1.0


class JobClient(object):
    def __init__(self, module, sleeper=time.sleep):
        self.module = module
        self.sleeper = sleeper

    def claim(self, namespace, name):
        return self.module.get("v1", "PersistentVolumeClaim", name, namespace)

    def job(self, namespace, name):
        """The Job, or None; transient errors raise (the wait rides them out)."""
        return self.module.fetch("batch/v1", "Job", name, namespace)

    def create(self, definition):
        """Create ``definition`` and return the object the server holds.

        A 409 means it exists (a retry after a lost reply, or a concurrent run): it is read and returned.
        A 5xx or a dropped connection is retried after reading whether the create went through anyway.
        """
        meta = definition["metadata"]
        api_version, kind = definition["apiVersion"], definition["kind"]
        for attempt in range(1, CREATE_ATTEMPTS + 1):
            try:
                return self.module.create(definition)
            except KubeError as exc:
                status = exc.fields.get("status")
                if status != 409 and status not in TRANSIENT_STATUS and status is not None:
                    raise
                if status is None and exc.fields.get("reason") != "ConnectionError":
                    raise
                found = self.module.get(api_version, kind, meta["name"], meta.get("namespace"))
                if found is not None:
                    return found
                if attempt == CREATE_ATTEMPTS:
                    raise
                self.sleeper(CREATE_PAUSE * attempt)
        return None

    def last_pod_log(self, namespace, job_name):
        """``(pod name, log)`` of the Job's newest pod; ``(None, "")`` when it has none or no log yet."""
        pods = self.module.list("v1", "Pod", namespace, label_selector="job-name=%s" % job_name)
        if not pods:
            return None, ""
        pod = sorted(pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")[-1]
        name = pod["metadata"]["name"]
        try:
            response = self.module.resource("v1", "Pod").log.get(
                name=name, namespace=namespace, serialize=False
            )
        except Exception:
            # A pod that has not started has no log yet; that is not an error of the Job.
            return name, ""
        data = response.data
        return name, data.decode("utf-8", "replace") if isinstance(data, bytes) else data
