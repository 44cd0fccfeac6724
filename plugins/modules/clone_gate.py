#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: clone_gate
short_description: Boot a clone of a candidate golden as a tenant would, and judge the boot
version_added: 0.1.0
description:
  - Clones the candidate golden O(snapshot) in a project namespace O(project_namespace) exactly as a tenant's
    VM would use it, boots a KubeVirt VM from the clone, and judges the boot in two phases.
  - If the per-project seeder has already published the candidate in the project (a VolumeSnapshot there
    bound to a content with the candidate's snapshot handle), that copy is used. Otherwise the module
    publishes it the way the seeder does, a cluster-scoped pre-provisioned C(VolumeSnapshotContent) with
    C(deletionPolicy=Retain) on the candidate's handle, and a namespaced C(VolumeSnapshot) bound to it.
  - Then a PersistentVolumeClaim restored from that snapshot (at least the snapshot's C(restoreSize), or the
    seeder's C(kube-dc.com/clone-min-size) when larger) and a VM with C(runStrategy=Always) booting it with
    O(memory).
  - Phase 1, C(agent) is the guest agent connecting (VMI condition C(AgentConnected)) within O(agent_timeout),
    the strongest and earliest proof that the operating system booted.
    Phase 2, C(port) is a TCP connection to the remote port (RDP 3389 for Windows, SSH 22 for Linux)
    within O(port_timeout), from where tenants reach it (O(port_probe)).
  - The verdict keeps "did not boot" (V(no_boot)) apart from "booted, port unreachable"
    (V(port_unreachable)). The second is a firewall or service problem in the guest, not a boot failure.
  - A O(memory) below the catalog minimum (O(min_memory)) makes the gate inconclusive. The module refuses to
    run instead of reporting a failure that says nothing about the image.
  - Every object a run creates carries the labels C(goldenimage.pipeline/clone-gate=<run id>) and
    C(goldenimage.pipeline/clone-gate-candidate=<candidate id>). Unless O(keep=true), everything the run
    created (found by the run's label, so an object whose create reply was lost is found too) is deleted
    before it returns, also on failure and timeout, with retries. What could not be deleted (for example
    with a token that may create but not delete) is reported in RV(left_behind) with RV(cleanup_command),
    and RV(kept) is then true.
  - Before it creates anything, a run removes what earlier runs of the same candidate left in the project
    (by label; objects kept with O(keep=true) are left alone), and refuses to run when it cannot, so
    nothing accumulates in a tenant's namespace. Do not gate one candidate twice at the same time in
    one project.
  - The golden, its content and the seeder's objects are never deleted.
author:
  - goldenimage.pipeline maintainers (@goldenimage)
requirements:
  - kubernetes >= 24.2.0 (on the controller)
  - KubeVirt and the CSI snapshot controller on the cluster
options:
  snapshot:
    description:
      - Name of the candidate golden C(VolumeSnapshot).
    type: str
    required: true
  snapshot_namespace:
    description:
      - Namespace of the candidate, C(golden-images) (Filesystem) or C(golden-images-block) (Block).
    type: str
    default: golden-images
  project_namespace:
    description:
      - The project namespace to clone in, as a tenant. Not the golden namespace, whose PodSecurity level
        does not admit KubeVirt's launcher pods. Do not relax a system namespace to make the gate run.
      - C(golden-images), C(golden-images-block) and O(snapshot_namespace) are refused before anything is
        written.
    type: str
    required: true
  os:
    description:
      - Guest OS, which selects the remote port (V(windows) uses 3389, V(linux) uses 22) and the default
        O(min_memory).
    type: str
    choices: [windows, linux]
    default: windows
  memory:
    description:
      - Guest memory of the VM (C(domain.memory.guest) and the memory request). Defaults to O(min_memory).
    type: str
  min_memory:
    description:
      - The catalog minimum for this OS. A lower O(memory) is refused as inconclusive.
      - Defaults to C(4Gi) for Windows and C(1Gi) for Linux. Set it to your catalog's C(minMemory),
        for example C(8Gi) for Kube-DC's Windows 11.
    type: str
  agent_timeout:
    description:
      - Seconds from the VM instance running to the guest agent connecting. A Windows first boot after
        sysprep (specialize, OOBE) takes minutes.
    type: int
    default: 1200
  port_timeout:
    description:
      - Seconds, after the agent connected, for the remote port to accept a TCP connection.
    type: int
    default: 300
  wait_timeout:
    description:
      - Seconds for the published snapshot to become ready and for the VM instance to reach C(Running)
        (volume restore and scheduling). Running out of it is no verdict on the image; the module fails
        with V(inconclusive).
      - The old name C(provision_timeout) is kept as an alias.
    type: int
    default: 600
    aliases: [provision_timeout]
  wait_sleep:
    description:
      - Longest pause, in seconds, between two polls.
      - The old name C(poll_interval) is kept as an alias.
    type: int
    default: 2
    aliases: [poll_interval]
  keep:
    description:
      - Keep every object the gate created (VM, claim, and the snapshot and content it published) for
        diagnosis. They also carry C(goldenimage.pipeline/clone-gate-kept=true), so later runs do not sweep
        them; delete them yourself afterwards with RV(cleanup_command)'s selector,
        C(goldenimage.pipeline/clone-gate=<run id>).
    type: bool
    default: false
  storage_class:
    description:
      - StorageClass of the clone. Defaults to the cluster's default class. A snapshot restores
        only into a class of the snapshot's driver.
    type: str
  port_probe:
    description:
      - Where to probe the remote port.
      - V(auto) uses the VMI's first interface address and the guest port.
      - Otherwise a C(host:port) template; C({ip}), C({port}), C({name}) and C({namespace}) are
        replaced by the VMI's address, the guest port, the VM name and the project namespace, and
        C({annotations[KEY]}) by the VMI's annotation C(KEY) (for a platform that records where it forwards
        the port; the probe waits while it is absent). The VMI's pod IP is reachable only from inside the
        cluster network. From outside, name the Service or load balancer that tenants use, for example
        C(rdp-{name}.{namespace}.example.net:3389).
    type: str
    default: auto
  vm_annotations:
    description:
      - Extra annotations for the gate's VM (for example ones an admission policy requires).
    type: dict
    default: {}
  fail_on_reject:
    description:
      - Fail the task when the verdict is not V(passed). Set V(false) to only report the verdict.
    type: bool
    default: true
  cleanup_timeout:
    description:
      - Seconds to wait for each created object to be gone when cleaning up.
    type: int
    default: 120
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.actiongroup_k8s
attributes:
  check_mode:
    support: partial
    details:
      - Booting a VM cannot be predicted. In check mode the module reads the candidate, reports what it
        would create (RV(would_create)), and skips.
  diff_mode:
    support: none
  idempotent:
    support: none
    details: Every run boots a new clone.
notes:
  - "Runs on the controller; use C(delegate_to: localhost) when the play targets other hosts."
  - "The RBAC the gate needs: get/list VolumeSnapshots and VolumeSnapshotContents; create/delete
    VolumeSnapshotContents (cluster scope), and VolumeSnapshots, PersistentVolumeClaims and
    VirtualMachines in the project; get/list VirtualMachines and VirtualMachineInstances."
  - Every timeout and O(wait_sleep) must be greater than zero; another value is refused before anything is
    written.
seealso:
  - module: goldenimage.pipeline.seal_verify
  - module: goldenimage.pipeline.golden_selection
"""

EXAMPLES = r"""
- name: Gate a staged Windows golden before promoting it
  goldenimage.pipeline.clone_gate:
    snapshot: golden-windows-11-golden-20260828-f0dea74da9c5
    project_namespace: acme
    os: windows
    memory: 8Gi
    min_memory: 8Gi
    agent_timeout: 2700
    wait_timeout: 900
  register: gate

- name: Keep a failing clone for diagnosis and only report
  goldenimage.pipeline.clone_gate:
    snapshot: golden-ubuntu-24-04-20260828-0123456789ab
    snapshot_namespace: golden-images-block
    project_namespace: acme
    os: linux
    keep: true
    fail_on_reject: false
    port_probe: "ssh-gate.acme.example.net:22"
  register: gate

- name: Say what happened
  ansible.builtin.debug:
    msg: "{{ gate.verdict }}: {{ gate.msg }}"
"""

RETURN = r"""
verdict:
  description:
    - V(passed), V(no_boot) (the guest agent never connected) or V(port_unreachable) (the agent
      connected, so the guest booted, but the port did not answer). On a refusal or an infrastructure
      timeout, V(inconclusive).
  returned: unless skipped in check mode
  type: str
  sample: port_unreachable
passed:
  description: Whether the verdict is V(passed).
  returned: unless skipped in check mode
  type: bool
  sample: false
msg:
  description: The verdict in one sentence.
  returned: always
  type: str
phases:
  description:
    - Each phase that ran, in order, as C({name, passed, seconds, detail}). V(provision) covers the published
      snapshot becoming ready. V(start) covers the VMI reaching C(Running).
      V(agent) covers C(AgentConnected). V(port) covers the TCP probe.
  returned: unless skipped in check mode
  type: list
  elements: dict
  sample:
    - {name: provision, passed: true, seconds: 0.4, detail: existing project copy acme/golden-windows-11}
    - {name: start, passed: true, seconds: 2.1, detail: phase Running}
    - {name: agent, passed: true, seconds: 95.0, detail: AgentConnected}
    - {name: port, passed: false, seconds: 300.0, detail: "10.0.3.7:3389: connection refused"}
probe:
  description: The C(host:port) probed.
  returned: when the port phase ran
  type: str
  sample: 10.0.3.7:3389
source:
  description:
    - The project snapshot the clone was restored from. V(published_by) is V(project) when a ready
      snapshot on the candidate's handle already existed there (the seeder's copy), V(gate) when the gate
      published it.
  returned: unless refused before reading the cluster
  type: dict
  sample: {name: golden-windows-11-golden, namespace: acme, handle: snapshot-7c1f, published_by: project}
created:
  description: Objects the gate created, as C({kind, name, namespace}), in creation order.
  returned: always
  type: list
  elements: dict
kept:
  description:
    - Whether objects the run created are still in the cluster, because O(keep=true) or because the cleanup
      failed (then RV(left_behind) names them).
  returned: always
  type: bool
swept:
  description: Objects earlier runs of the same candidate left in the project, removed before this run.
  returned: unless refused before reading the cluster
  type: list
  elements: dict
would_sweep:
  description: In check mode, the objects of earlier runs a real run would remove first.
  returned: in check mode
  type: list
  elements: dict
left_behind:
  description: Objects the cleanup could not delete, as C({apiVersion, kind, name, namespace, run}).
  returned: when cleanup failed
  type: list
  elements: dict
cleanup_command:
  description: The kubectl command that removes what the run left behind, by its run label.
  returned: when cleanup failed
  type: str
  sample: >-
    kubectl delete -n acme
    virtualmachines.kubevirt.io,persistentvolumeclaims,volumesnapshots.snapshot.storage.k8s.io
    -l goldenimage.pipeline/clone-gate=5f3a9c21 &&
    kubectl delete volumesnapshotcontents.snapshot.storage.k8s.io -l goldenimage.pipeline/clone-gate=5f3a9c21
would_create:
  description: In check mode, the objects a real run would create.
  returned: in check mode
  type: list
  elements: dict
cleanup_errors:
  description: Objects that could not be deleted, with the error.
  returned: when cleanup failed
  type: list
  elements: str
"""

import binascii
import os
import random
import time

from ansible_collections.goldenimage.pipeline.plugins.module_utils import gate, inputs, kinds
from ansible_collections.goldenimage.pipeline.plugins.module_utils._kube import (
    KubeError,
    KubeModule,
    is_transient,
    status_code,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils._probe import tcp_connect
from ansible_collections.goldenimage.pipeline.plugins.module_utils._wait import (
    WaitError,
    WaitFailed,
    WaitTimeout,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.errors import PipelineError, run_module

SNAP = gate.SNAPSHOT_API
VM = gate.VM_API
# A write that failed is sent again this many times (with a jittered pause) unless the answer says
# it never will succeed (401, 403, 422).
ATTEMPTS = 4
FINAL = (400, 401, 403, 404, 422)


def argument_spec():
    return dict(
        snapshot=dict(type="str", required=True),
        snapshot_namespace=dict(type="str", default="golden-images"),
        project_namespace=dict(type="str", required=True),
        os=dict(type="str", choices=["windows", "linux"], default="windows"),
        memory=dict(type="str"),
        min_memory=dict(type="str"),
        agent_timeout=dict(type="int", default=1200),
        port_timeout=dict(type="int", default=300),
        wait_timeout=dict(type="int", default=600, aliases=["provision_timeout"]),
        wait_sleep=dict(type="int", default=2, aliases=["poll_interval"]),
        keep=dict(type="bool", default=False),
        storage_class=dict(type="str"),
        port_probe=dict(type="str", default="auto"),
        vm_annotations=dict(type="dict", default={}),
        fail_on_reject=dict(type="bool", default=True),
        cleanup_timeout=dict(type="int", default=120),
    )


DURATIONS = ("agent_timeout", "port_timeout", "wait_timeout", "wait_sleep", "cleanup_timeout")


def _pause(attempt):
    time.sleep(min(4.0, 0.5 * 2**attempt) * (0.5 + random.random()))


def _ref(obj):
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": kinds.name(obj),
        "namespace": kinds.namespace(obj),
        "run": kinds.labels(obj).get(gate.GATE_LABEL),
    }


def _retried(call, *args, **kwargs):
    """``call(...)``, sent again on throttling, 5xx and dropped connections (jittered, bounded)."""
    for attempt in range(ATTEMPTS):
        try:
            return call(*args, **kwargs)
        except KubeError as exc:
            if attempt + 1 == ATTEMPTS or not is_transient(getattr(exc, "cause", None)):
                raise
        _pause(attempt)


class Gate:
    """The runner: ``run()`` returns the result or raises a PipelineError; it never exits.

    Whatever ends the run (a verdict, a refusal, an API error), what it created is removed first,
    unless kept, and anything it could not remove is reported by name with the command to remove it.
    """

    def __init__(self, module, run_id=None):
        self.module = module
        self.p = module.params
        self.run_id = run_id or binascii.hexlify(os.urandom(4)).decode()
        self.candidate_id = gate.candidate_id(self.p["snapshot_namespace"], self.p["snapshot"])
        self.marks = {"candidate": self.candidate_id, "kept": bool(self.p["keep"])}
        self.created = []
        self.result = {"changed": False, "created": self.created, "kept": False, "phases": [], "swept": []}

    # --- reading the candidate -------------------------------------------------------------------

    def candidate(self):
        p = self.p
        vs = _retried(self.module.get, SNAP, "VolumeSnapshot", p["snapshot"], p["snapshot_namespace"])
        where = "VolumeSnapshot %s/%s" % (p["snapshot_namespace"], p["snapshot"])
        if vs is None:
            raise PipelineError("%s not found" % where, **self.result)
        status = kinds.status(vs)
        if not status.get("readyToUse") or not status.get("boundVolumeSnapshotContentName"):
            raise PipelineError(
                "%s is not ready to use; a clone of it cannot be gated" % where, **self.result
            )
        content = _retried(
            self.module.get, SNAP, "VolumeSnapshotContent", status["boundVolumeSnapshotContentName"]
        )
        handle = kinds.snapshot_handle(content)
        if not handle:
            raise PipelineError("%s has no snapshot handle on its content" % where, **self.result)
        mode = kinds.spec(content).get("sourceVolumeMode") or kinds.labels(vs).get("kube-dc.com/golden-mode")
        return vs, content, handle, mode or "Filesystem"

    def published(self, handle):
        """The project's ready snapshot on this handle (the seeder's copy), or None."""
        for vs in sorted(
            _retried(self.module.list, SNAP, "VolumeSnapshot", self.p["project_namespace"]), key=kinds.name
        ):
            status = kinds.status(vs)
            name = status.get("boundVolumeSnapshotContentName")
            if not status.get("readyToUse") or not name or kinds.terminating(vs):
                continue
            if (
                kinds.snapshot_handle(_retried(self.module.get, SNAP, "VolumeSnapshotContent", name))
                == handle
            ):
                return vs
        return None

    # --- bookkeeping ---------------------------------------------------------------------------

    def create(self, definition):
        """Create an object of this run. It is recorded before the request, so an object whose reply
        was lost after the server committed it is still cleaned up; on retry it is recognised by the
        run's label instead of failing."""
        ref = _ref(definition)
        self.created.append(ref)
        self.result["changed"] = True
        for attempt in range(ATTEMPTS):
            try:
                return self.module.create(definition)
            except KubeError as exc:
                found = _retried(
                    self.module.get, ref["apiVersion"], ref["kind"], ref["name"], ref["namespace"]
                )
                if found is not None and kinds.labels(found).get(gate.GATE_LABEL) == self.run_id:
                    return found
                cause = getattr(exc, "cause", None)
                if attempt + 1 == ATTEMPTS or not (is_transient(cause) or status_code(cause) == 409):
                    raise
            _pause(attempt)

    def phase(self, name, passed, seconds, detail):
        self.result["phases"].append(
            {"name": name, "passed": passed, "seconds": round(seconds, 3), "detail": detail}
        )

    def wait(self, api, kind, name, namespace, predicate, describe, pending, timeout):
        return self.module.wait(
            api, kind, name, namespace, predicate, describe, pending, timeout, self.p["wait_sleep"]
        )

    # --- the run -------------------------------------------------------------------------------

    def run(self):
        p = self.p
        inputs.positive_all(p, DURATIONS)
        gate.refuse_project_namespace(p["project_namespace"], p["snapshot_namespace"])
        min_memory = p["min_memory"] or gate.MIN_MEMORY[p["os"]]
        memory = p["memory"] or min_memory
        problem = gate.memory_problem(memory, min_memory)
        if problem:
            raise PipelineError(problem, verdict=gate.INCONCLUSIVE, passed=False, **self.result)
        candidate, content, handle, mode = self.candidate()
        if _retried(self.module.get, "v1", "Namespace", p["project_namespace"]) is None:
            raise PipelineError("project namespace %s does not exist" % p["project_namespace"], **self.result)
        if self.module.check_mode:
            return self.predict(handle)
        try:
            self.sweep()
            self.gate(candidate, content, handle, mode, memory)
        except Exception as exc:
            extra = self.cleanup()
            message = extra.pop("cleanup_message", None)
            if not isinstance(exc, PipelineError):
                raise
            for key, value in self.result.items():
                exc.fields.setdefault(key, value)
            exc.fields.update(extra)
            if message:
                exc.msg = "%s; %s" % (exc.msg, message)
            raise
        extra = self.cleanup()
        message = extra.pop("cleanup_message", None)
        self.result.update(extra)
        if message:
            self.result["msg"] = "%s; %s" % (self.result["msg"], message)
        if self.result["verdict"] != gate.PASSED and p["fail_on_reject"]:
            raise PipelineError(**self.result)
        return self.result

    def names(self):
        p = self.p
        return {
            "vs": gate.object_name(self.run_id),
            "content": gate.object_name("%s-%s" % (p["project_namespace"], self.run_id)),
        }

    def predict(self, handle):
        p = self.p
        names = self.names()
        seeded = self.published(handle)
        plan = []
        if seeded is None:
            plan.append({"kind": "VolumeSnapshotContent", "name": names["content"], "namespace": None})
            plan.append({"kind": "VolumeSnapshot", "name": names["vs"], "namespace": p["project_namespace"]})
        for kind in ("PersistentVolumeClaim", "VirtualMachine"):
            plan.append({"kind": kind, "name": names["vs"], "namespace": p["project_namespace"]})
        return dict(
            changed=False,
            skipped=True,
            msg="check mode: a clone gate boots a VM and cannot be predicted; it would create %s"
            % ", ".join("%s %s" % (o["kind"], o["name"]) for o in plan),
            would_create=plan,
            would_sweep=[_ref(o) for o in self.leftovers()],
            source=self.source(seeded, names, handle),
            created=[],
            kept=False,
        )

    def source(self, seeded, names, handle):
        return {
            "name": kinds.name(seeded) if seeded else names["vs"],
            "namespace": self.p["project_namespace"],
            "handle": handle,
            "published_by": "project" if seeded else "gate",
        }

    def gate(self, candidate, content, handle, mode, memory):
        p = self.p
        names = self.names()
        seeded = self.published(handle)
        source = self.result["source"] = self.source(seeded, names, handle)
        start = time.monotonic()
        if seeded is None:
            seeded = self.publish(names, handle, content, mode)
            detail = "published %s/%s on handle %s" % (p["project_namespace"], names["vs"], handle)
        else:
            detail = "existing project copy %s/%s" % (p["project_namespace"], kinds.name(seeded))
        self.phase("provision", True, time.monotonic() - start, detail)
        restore = kinds.status(seeded).get("restoreSize") or kinds.status(candidate).get("restoreSize")
        size = gate.clone_size(restore, kinds.annotations(seeded).get(gate.CLONE_MIN_SIZE))
        vm_name = names["vs"]
        self.create(
            gate.pvc_definition(
                vm_name,
                p["project_namespace"],
                source["name"],
                size,
                mode,
                p["storage_class"],
                self.run_id,
                **self.marks,
            )
        )
        self.create(
            gate.vm_definition(
                vm_name,
                p["project_namespace"],
                vm_name,
                memory,
                self.run_id,
                p["vm_annotations"],
                **self.marks,
            )
        )
        vmi = self.start(vm_name)
        agent_ok, vmi = self.agent(vm_name, vmi)
        port_ok = self.probe(vm_name, vmi) if agent_ok else False
        verdict = gate.verdict(agent_ok, port_ok)
        port = gate.port_for(p["os"])
        msg = gate.explain(verdict, p["os"], port, self.result.get("probe", "-"))
        self.result.update(verdict=verdict, passed=verdict == gate.PASSED, msg=msg)

    def publish(self, names, handle, content, mode):
        p = self.p
        driver = kinds.spec(content).get("driver") or ""
        self.create(
            gate.content_definition(
                names["content"],
                handle,
                driver,
                mode,
                names["vs"],
                p["project_namespace"],
                self.run_id,
                **self.marks,
            )
        )
        self.create(
            gate.snapshot_definition(
                names["vs"], p["project_namespace"], names["content"], self.run_id, **self.marks
            )
        )

        def ready(obj):
            return bool(kinds.status(obj).get("readyToUse")), None

        def describe(obj):
            status = kinds.status(obj)
            return "readyToUse=%s%s" % (
                status.get("readyToUse"),
                " error: %s" % status["error"].get("message") if status.get("error") else "",
            )

        try:
            return self.wait(
                SNAP,
                "VolumeSnapshot",
                names["vs"],
                p["project_namespace"],
                ready,
                describe,
                "the published snapshot to be ready",
                p["wait_timeout"],
            )[0]
        except WaitError as exc:
            raise PipelineError(str(exc), verdict=gate.INCONCLUSIVE, passed=False) from None

    def start(self, name):
        """Wait for the VMI to run: scheduling and volume restore, no verdict on the image yet."""
        ns = self.p["project_namespace"]

        def running(obj):
            phase = kinds.status(obj).get("phase")
            return phase == "Running", (
                "the instance failed before the guest ran" if phase == "Failed" else None
            )

        try:
            vmi, seconds = self.wait(
                VM,
                "VirtualMachineInstance",
                name,
                ns,
                running,
                kinds.describe_vmi,
                "the VM instance to run",
                self.p["wait_timeout"],
            )
        except WaitError as exc:
            vm = _retried(self.module.get, VM, "VirtualMachine", name, ns) or {}
            printable = kinds.status(vm).get("printableStatus")
            self.phase("start", False, exc.elapsed, "%s (VM %s)" % (exc.state, printable))
            raise PipelineError(
                "the clone never started, so the gate says nothing about the image (VM status %s): %s"
                % (printable, exc),
                verdict=gate.INCONCLUSIVE,
                passed=False,
            ) from None
        self.phase("start", True, seconds, kinds.describe_vmi(vmi))
        return vmi

    def agent(self, name, vmi):
        ns = self.p["project_namespace"]

        def connected(obj):
            if kinds.agent_connected(obj):
                return True, None
            phase = kinds.status(obj).get("phase")
            if obj is None or phase in ("Failed", "Succeeded"):
                return False, "the instance ended (%s) before its agent connected" % (phase or "deleted")
            return False, None

        try:
            vmi, seconds = self.wait(
                VM,
                "VirtualMachineInstance",
                name,
                ns,
                connected,
                kinds.describe_vmi,
                "AgentConnected",
                self.p["agent_timeout"],
            )
        except (WaitTimeout, WaitFailed) as exc:
            self.phase("agent", False, exc.elapsed, "guest agent never connected: %s" % exc.state)
            return False, exc.last or vmi
        self.phase("agent", True, seconds, "AgentConnected")
        return True, vmi

    def probe(self, name, vmi):
        ns = self.p["project_namespace"]
        port = gate.port_for(self.p["os"])
        start = time.monotonic()
        deadline = start + self.p["port_timeout"]
        last, attempts = "no address yet", 0
        while True:
            address = gate.probe_address(self.p["port_probe"], vmi, port)
            if address is not None:
                attempts += 1
                self.result["probe"] = "%s:%d" % address
                error = tcp_connect(address, max(0.5, min(5.0, deadline - time.monotonic())))
                if error is None:
                    self.phase(
                        "port", True, time.monotonic() - start, "%s:%d accepted a connection" % address
                    )
                    return True
                last = "%s:%d: %s" % (address[0], address[1], error)
            if time.monotonic() >= deadline:
                break
            time.sleep(min(self.p["wait_sleep"], max(0.0, deadline - time.monotonic())))
            try:
                vmi = self.module.fetch(VM, "VirtualMachineInstance", name, ns) or vmi
            except Exception as exc:
                if not is_transient(exc):
                    raise
        self.phase("port", False, time.monotonic() - start, "%s (%d attempts)" % (last, attempts))
        return False

    # --- sweep and cleanup -----------------------------------------------------------------------

    def leftovers(self, selector=None):
        """Gate objects in the project carrying ``selector`` (default: earlier runs of this candidate)."""
        selector = selector or gate.sweep_selector(self.candidate_id)
        found = []
        for api, kind, _plural, namespaced in gate.CREATED_KINDS:
            namespace = self.p["project_namespace"] if namespaced else None
            found.extend(_retried(self.module.list, api, kind, namespace, label_selector=selector))
        return gate.removal_order(gate.swept(found, self.p["project_namespace"]))

    def sweep(self):
        """Remove what earlier runs of this candidate left in the project before this one starts."""
        old = [_ref(o) for o in self.leftovers()]
        if not old:
            return
        left, errors = self.remove_all(old)
        self.result["swept"] = [o for o in old if o not in left]
        if left:
            runs = sorted({o.get("run") for o in left if o.get("run")})
            raise PipelineError(
                "earlier clone gate runs of %s/%s left %s in %s and they could not be removed (%s), so "
                "this run does not add more; remove them with: %s"
                % (
                    self.p["snapshot_namespace"],
                    self.p["snapshot"],
                    gate.describe_left(left),
                    self.p["project_namespace"],
                    "; ".join(errors),
                    " && ".join(gate.cleanup_command(run, self.p["project_namespace"]) for run in runs),
                ),
                left_behind=left,
                **self.result,
            )

    def cleanup(self):
        """Delete what this run created (and anything else carrying its run label), newest first."""
        if self.p["keep"]:
            return {"kept": bool(self.created)}
        selector = "%s=%s" % (gate.GATE_LABEL, self.run_id)
        targets = gate.removal_order(list(self.created))
        try:
            targets += [o for o in (_ref(x) for x in self.leftovers(selector)) if o not in targets]
        except PipelineError as exc:
            self.module.warn("could not list the objects of clone gate run %s: %s" % (self.run_id, exc.msg))
        left, errors = self.remove_all(gate.removal_order(targets))
        if not left:
            return {"kept": False}
        command = gate.cleanup_command(self.run_id, self.p["project_namespace"])
        message = "cleanup left %s behind (%s); remove them with: %s" % (
            gate.describe_left(left),
            "; ".join(errors),
            command,
        )
        self.module.warn("clone gate " + message)
        return {
            "kept": True,
            "left_behind": left,
            "cleanup_errors": errors,
            "cleanup_command": command,
            "cleanup_message": message,
        }

    def remove_all(self, objects):
        left, errors = [], []
        for obj in objects:
            error = self.remove(obj)
            if error:
                left.append(obj)
                errors.append("%s %s: %s" % (obj["kind"], obj["name"], error))
        return left, errors

    def remove(self, obj):
        """Delete one object, retrying what a retry may pass, and wait until it is gone; None or why not."""
        error = None
        for attempt in range(ATTEMPTS):
            try:
                self.module.delete(obj["apiVersion"], obj["kind"], obj["name"], obj["namespace"])
                error = None
                break
            except PipelineError as exc:
                error = exc.msg
                if status_code(getattr(exc, "cause", None)) in FINAL:
                    return error
            _pause(attempt)
        if error:
            return error
        try:
            self.wait_gone(obj)
            if obj["kind"] == "VirtualMachine":  # its instance goes with it (owner reference)
                self.wait_gone(dict(obj, kind="VirtualMachineInstance"))
        except PipelineError as exc:
            return exc.msg
        return None

    def wait_gone(self, obj):
        self.module.wait(
            obj["apiVersion"],
            obj["kind"],
            obj["name"],
            obj["namespace"],
            lambda found: (found is None, None),
            lambda found: "still there" if found else "gone",
            "%s %s to be deleted" % (obj["kind"], obj["name"]),
            self.p["cleanup_timeout"],
            self.p["wait_sleep"],
        )


def main():
    module = KubeModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(module, lambda: Gate(module).run())


if __name__ == "__main__":
    main()
