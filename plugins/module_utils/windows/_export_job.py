# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The end of an export Job: what it made is read, and deleted when ``jobs.export_leftover`` says so.

The reads and deletes are here; which object is deleted, which is left alone and which is in use are
``jobs``' and ``consumers``' rules.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import consumers
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import jobs, kinds

# How long the end of an export waits for each of its Job's pods to be gone (a pod holds its claims).
POD_GONE_SECONDS = 120
POD_GONE_SLEEP = 2


class ExportObjects(object):
    """The Job, pods, ConfigMap and scratch claim of export ``name`` in ``namespace``; in check mode
    nothing is deleted."""

    def __init__(self, module, namespace, name, check_mode=False, wait_sleep=POD_GONE_SLEEP):
        self.module = module
        self.ns = namespace
        self.name = name
        self.check_mode = check_mode
        self.sleep = min(POD_GONE_SLEEP, wait_sleep)
        self.made = (("ConfigMap", name), ("PersistentVolumeClaim", jobs.export_scratch_name(name)))

    def observe_users(self):
        """The namespace's pods, claims, DataVolumes and VirtualMachines: who may use the scratch claim or
        the ConfigMap (a cluster without CDI or KubeVirt has none of the latter)."""
        observed = {
            "pods": self.module.list("v1", "Pod", self.ns),
            "pvcs": self.module.list("v1", "PersistentVolumeClaim", self.ns),
        }
        for key, api_version, kind in (
            ("datavolumes", "cdi.kubevirt.io/v1beta1", "DataVolume"),
            ("vms", "kubevirt.io/v1", "VirtualMachine"),
        ):
            if self.module.served(api_version, kind):
                observed[key] = self.module.list(api_version, kind, self.ns)
        return observed

    def users(self, refuse):
        """``({kind: users or None}, why they could not be read)`` of the ConfigMap and scratch claim;
        with ``refuse``, a read that fails is raised instead."""
        try:
            observed = self.observe_users()
        except PipelineError as exc:
            if refuse:
                raise consumers.users_unknown(
                    "the scratch claim and ConfigMap of export %s/%s" % (self.ns, self.name), exc
                ) from exc
            return {kind: None for kind, _name in self.made}, exc.msg

        def own(pod):
            return jobs.is_export_pod(pod, self.name)

        return {
            kind: consumers.volume_consumers(kind, self.ns, name, observed, own_pod=own)
            for kind, name in self.made
        }, None

    def cleanup(self, removed=None, alone=None, refuse=False):
        """Delete what this export made, read first: the Job first (an export that ends must not finish
        its upload meanwhile), then its pods (waiting until each is gone), then the ConfigMap and the
        scratch claim when nothing but the Job's own pods uses them. ``refuse`` (state=absent): a
        consumer, or a reference query that fails, refuses before any delete; otherwise what is in use is
        reported in the returned list. ``removed`` and ``alone`` collect what was deleted and what was not
        this export's."""
        left = []
        removed = [] if removed is None else removed
        alone = [] if alone is None else alone
        job = ("batch/v1", "Job", self.name, [], None)
        if not refuse:
            self._remove(job, removed, alone, left, propagation="Background")
        users, unread = self.users(refuse)
        if refuse:
            refusal = consumers.refuse_delete(
                "export %s/%s" % (self.ns, self.name),
                [c for found in users.values() for c in found],
                "stop or delete what uses its claim or ConfigMap, then run again; nothing was deleted",
            )
            if refusal:
                raise refusal
            self._remove(job, removed, alone, left, propagation="Background")
        # Read after the Job is gone, so that it makes no pod after these.
        self._remove_pods(removed, left)
        for kind, name in self.made:
            self._remove(("v1", kind, name, users[kind], unread), removed, alone, left)
        return left

    def _remove(self, target, removed, alone, left, **options):
        api_version, kind, name, users, unread = target
        try:
            found = self.module.get(api_version, kind, name, self.ns)
            verdict, why = jobs.export_leftover(found, self.name, users, unread)
            if verdict == "alone":
                alone.append("%s %s/%s" % (kind, self.ns, name))
            elif verdict == "in use":
                left.append({"kind": kind, "name": name, "error": why, "in_use": True})
            elif verdict == "delete":
                if not self.check_mode:
                    self.module.delete(api_version, kind, name, self.ns, **options)
                removed.append("%s %s/%s" % (kind, self.ns, name))
        except PipelineError as exc:
            left.append({"kind": kind, "name": name, "error": exc.msg})

    def _remove_pods(self, removed, left):
        selector = jobs.export_pod_selector(self.name)
        try:
            pods = self.module.list("v1", "Pod", self.ns, label_selector=selector)
        except PipelineError as exc:
            left.append({"kind": "Pod", "name": selector, "error": exc.msg})
            return
        for pod in pods:
            name = kinds.name(pod)
            try:
                # A pod that still exists still holds the claims: wait until it is gone.
                if not self.check_mode:
                    self.module.delete_and_wait(
                        "v1", "Pod", name, self.ns, POD_GONE_SECONDS, self.sleep, before=pod
                    )
                removed.append("Pod %s/%s" % (self.ns, name))
            except PipelineError as exc:
                left.append({"kind": "Pod", "name": name, "error": exc.msg})
