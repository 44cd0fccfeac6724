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
    Phase 2, C(port) is a TCP connection to the remote port (O(port); RDP 3389 for Windows, SSH 22 for
    Linux) within O(port_timeout), from where tenants reach it (O(port_probe)).
  - The verdict keeps "did not boot" (V(no_boot)) apart from "booted, port unreachable"
    (V(port_unreachable)). The second is a firewall or service problem in the guest, not a boot failure.
  - A O(memory) below the catalog minimum (O(min_memory), C(8Gi) for Windows by default) makes the gate
    V(inconclusive). The module refuses to run instead of reporting a boot failure that says nothing about
    the image.
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
        written, and so is a namespace that does not match O(project_selector).
    type: str
    required: true
  project_selector:
    description:
      - How a project namespace is recognised, a label selector on the Namespace. O(project_namespace) must
        exist and match it, or the gate refuses before anything is written. The default is Kube-DC's
        convention, every project namespace carries the C(kube-dc.com/project) label.
      - An empty selector is refused. It would recognise every namespace.
    type: str
    default: kube-dc.com/project
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
      - The catalog's C(minMemory) for this OS. A lower O(memory) makes the gate V(inconclusive) (it does
        not run, and the verdict is never V(no_boot)).
      - Defaults to C(8Gi) for Windows (Kube-DC's catalog minimum for Windows 11) and C(1Gi) for Linux.
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
  port:
    description:
      - The guest's remote port the gate probes. Defaults to the OS's contract port, C(3389) (Remote
        Desktop) for Windows and C(22) (SSH) for Linux.
      - The Windows bake (role C(goldenimage.pipeline.windows_bake)) enables Remote Desktop and its
        firewall rule group, and M(goldenimage.pipeline.seal_verify) asserts both in the sealed disk's
        registry on its O(goldenimage.pipeline.seal_verify#module:remote_desktop_port). Give the same
        port to both when the image opens another one.
    type: int
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
  report_every:
    description:
      - Longest time, in seconds, one call of the module waits before it returns a progress C(line). The
        action plugin of the same name calls it again with C(resume) and prints each line, so every wait
        of the gate (the published snapshot, the VM instance, the guest agent, the port) prints its
        phase, what it waits for, the last state and the elapsed time at least this often.
    type: int
    default: 20
  started:
    description:
      - When the gate began, in seconds since the epoch. Set by the action plugin; leave it out to start now.
    type: float
  gate_state:
    description:
      - What one call of the gate hands the next (its run, phase and result so far). Set by the action
        plugin from C(resume); never set it by hand.
    type: dict
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.actiongroup_k8s
attributes:
  action:
    description: An action plugin of the same name runs on the controller around the module.
    support: full
    details: The action plugin calls the module round after round and prints each round's line as it comes.
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
  - Every timeout, O(wait_sleep) and O(report_every) must be greater than zero; another value is refused
    before anything is written.
  - "Long waits talk. Each call of the module waits at most O(report_every) seconds and returns a progress
    C(line) naming the phase, what it waits for, the last state seen and the seconds elapsed, in total and
    of the phase's timeout, for example C(clone gate of golden-images/g1 in acme: phase agent, waiting for
    the guest agent to connect ...; 45s elapsed, 40s of 1200s in this phase). A phase that runs out of its
    timeout ends with a message naming what was still pending and the last state seen."
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
memory:
  description: The guest memory of the gate's VM (O(memory), else O(min_memory)).
  returned: unless refused before the memory was resolved
  type: str
  sample: 8Gi
min_memory:
  description: The catalog minimum the memory was held to.
  returned: unless refused before the memory was resolved
  type: str
  sample: 8Gi
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
  description:
    - The kubectl command that removes what the run left behind, by its run label. With O(keep=true) the
      message also names the kept objects (the VM, its claim, and what the gate published) and this command.
  returned: when cleanup failed, or objects were kept with O(keep=true)
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
line:
  description: The progress line of the last round (also printed by the action plugin).
  returned: unless skipped in check mode
  type: str
lines:
  description: Every progress line printed while the gate waited, one per round.
  returned: always
  type: list
  elements: str
rounds:
  description: How many calls of the module the gate took.
  returned: always
  type: int
resume:
  description: The options that continue the gate in another call (C(gate_state)).
  returned: when the gate is not over
  type: dict
done:
  description: Whether the gate is over (a verdict); false in a round that returns to be called again.
  returned: unless skipped in check mode
  type: bool
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
        project_selector=dict(type="str", default=gate.PROJECT_SELECTOR),
        os=dict(type="str", choices=["windows", "linux"], default="windows"),
        memory=dict(type="str"),
        min_memory=dict(type="str"),
        agent_timeout=dict(type="int", default=1200),
        port_timeout=dict(type="int", default=300),
        wait_timeout=dict(type="int", default=600, aliases=["provision_timeout"]),
        wait_sleep=dict(type="int", default=2, aliases=["poll_interval"]),
        keep=dict(type="bool", default=False),
        storage_class=dict(type="str"),
        port=dict(type="int"),
        port_probe=dict(type="str", default="auto"),
        vm_annotations=dict(type="dict", default={}),
        fail_on_reject=dict(type="bool", default=True),
        cleanup_timeout=dict(type="int", default=120),
        report_every=dict(type="int", default=gate.REPORT_EVERY),
        started=dict(type="float"),
        gate_state=dict(type="dict"),
    )


DURATIONS = ("agent_timeout", "port_timeout", "wait_timeout", "wait_sleep", "cleanup_timeout", "report_every")


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

    def __init__(self, module, run_id=None, clock=time.time):
        self.module = module
        self.p = module.params
        self.clock = clock
        # What the rounds carry from one call to the next (gate_state): the run, its stage, the result.
        self.state = dict(self.p.get("gate_state") or {})
        self.run_id = self.state.get("run_id") or run_id or binascii.hexlify(os.urandom(4)).decode()
        self.candidate_id = gate.candidate_id(self.p["snapshot_namespace"], self.p["snapshot"])
        self.marks = {"candidate": self.candidate_id, "kept": bool(self.p["keep"])}
        now = self.clock()
        self.started = float(self.p.get("started") or now)
        self.round_end = now + (self.p.get("report_every") or gate.REPORT_EVERY)
        self.line = None
        self.result = self.state.get("result") or {
            "changed": False,
            "created": [],
            "kept": False,
            "phases": [],
            "swept": [],
        }
        self.created = self.result["created"]

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
        """Wait in this round for ``predicate``: ``(obj, True)`` once it holds, ``(last, False)`` when the
        round ends first. ``timeout`` counts from when the stage began, across rounds; running out of it
        raises WaitTimeout naming what was pending and the last state seen."""
        st = self.state
        deadline = st["stage_started"] + timeout
        budget = max(0.0, min(deadline, self.round_end) - self.clock())
        try:
            obj, _seconds = self.module.wait(
                api, kind, name, namespace, predicate, describe, pending, budget, self.p["wait_sleep"]
            )
            return obj, True
        except WaitTimeout as exc:
            st["last_state"] = exc.state
            if self.clock() < deadline:
                return exc.last, False
            elapsed = self.clock() - st["stage_started"]
            raise WaitTimeout(
                gate.timeout_message(pending, elapsed, exc.state),
                last=exc.last,
                state=exc.state,
                elapsed=elapsed,
            ) from None

    # --- the run -------------------------------------------------------------------------------

    def first_round(self):
        """Every check before anything is written, then the plan of the rounds (the state they carry)."""
        p = self.p
        inputs.positive_all(p, DURATIONS)
        gate.refuse_project_namespace(p["project_namespace"], p["snapshot_namespace"])
        gate.port_for(p["os"], p["port"])
        memory, min_memory = gate.gate_memory(p["os"], p["memory"], p["min_memory"])
        self.result.update(memory=memory, min_memory=min_memory)
        problem = gate.memory_problem(memory, min_memory)
        if problem:
            raise PipelineError(problem, verdict=gate.INCONCLUSIVE, passed=False, **self.result)
        project = _retried(self.module.get, "v1", "Namespace", p["project_namespace"])
        try:
            gate.refuse_non_project(project, p["project_namespace"], p["project_selector"])
        except PipelineError as exc:
            for key, value in dict(self.result, verdict=gate.INCONCLUSIVE, passed=False).items():
                exc.fields.setdefault(key, value)
            raise
        candidate, content, handle, mode = self.candidate()
        if self.module.check_mode:
            return self.predict(handle)
        self.state.update(
            run_id=self.run_id,
            handle=handle,
            mode=mode,
            driver=kinds.spec(content).get("driver") or "",
            restore=kinds.status(candidate).get("restoreSize"),
            memory=memory,
            result=self.result,
        )
        self.next_stage("sweep")
        return None

    def run(self):
        if not self.state.get("stage"):
            predicted = self.first_round()
            if predicted is not None:
                return predicted
        try:
            finished = self.advance()
        except Exception as exc:
            extra = self.cleanup()
            message = extra.pop("cleanup_message", None)
            if not isinstance(exc, PipelineError):
                raise
            for key, value in self.result.items():
                exc.fields.setdefault(key, value)
            exc.fields.update(extra)
            if self.line:
                exc.fields.setdefault("line", self.line)
            if message:
                exc.msg = "%s; %s" % (exc.msg, message)
            raise
        if not finished:
            return dict(
                self.result,
                done=False,
                line=self.line,
                resume={"gate_state": self.state},
            )
        extra = self.cleanup()
        message = extra.pop("cleanup_message", None)
        self.result.update(extra)
        if message:
            self.result["msg"] = "%s; %s" % (self.result["msg"], message)
        self.result["done"] = True
        self.result["line"] = self.line
        if self.result["verdict"] != gate.PASSED and self.p["fail_on_reject"]:
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

    # --- the stages: each returns True when done (the next one starts) or False when the round ended ---

    def advance(self):
        """Run stages until the verdict (True) or the end of this round (False)."""
        while self.state["stage"] != "done":
            if not getattr(self, "stage_" + self.state["stage"])():
                return False
        return True

    def next_stage(self, stage):
        self.state.update(stage=stage, stage_started=self.clock(), last_state=None)
        return True

    def pending(self, what, timeout, state=None):
        """The round ends with the stage still waiting for ``what``: the progress line says so."""
        st = self.state
        now = self.clock()
        self.line = gate.progress_line(
            "%s/%s" % (self.p["snapshot_namespace"], self.p["snapshot"]),
            self.p["project_namespace"],
            st["stage"],
            what,
            state or st.get("last_state"),
            now - self.started,
            now - st["stage_started"],
            timeout,
        )
        return False

    def stage_elapsed(self):
        return self.clock() - self.state["stage_started"]

    def stage_sweep(self):
        self.sweep()
        return self.next_stage("publish")

    def stage_publish(self):
        st = self.state
        names = self.names()
        seeded = self.published(st["handle"])
        self.result["source"] = self.source(seeded, names, st["handle"])
        if seeded is None:
            self.publish(names, st["handle"], st["driver"], st["mode"])
        return self.next_stage("provision")

    def stage_provision(self):
        p, st = self.p, self.state
        source = self.result["source"]
        ns = p["project_namespace"]
        pending = "the published snapshot to be ready"
        if source["published_by"] == "gate":

            def ready(obj):
                return bool(kinds.status(obj).get("readyToUse")), None

            def describe(obj):
                status = kinds.status(obj)
                return "readyToUse=%s%s" % (
                    status.get("readyToUse"),
                    " error: %s" % status["error"].get("message") if status.get("error") else "",
                )

            try:
                seeded, done = self.wait(
                    SNAP, "VolumeSnapshot", source["name"], ns, ready, describe, pending, p["wait_timeout"]
                )
            except WaitError as exc:
                raise PipelineError(str(exc), verdict=gate.INCONCLUSIVE, passed=False) from None
            if not done:
                return self.pending(pending, p["wait_timeout"])
            detail = "published %s/%s on handle %s" % (ns, source["name"], st["handle"])
        else:
            seeded = _retried(self.module.get, SNAP, "VolumeSnapshot", source["name"], ns) or {}
            detail = "existing project copy %s/%s" % (ns, source["name"])
        self.phase("provision", True, self.stage_elapsed(), detail)
        restore = kinds.status(seeded).get("restoreSize") or st["restore"]
        size = gate.clone_size(restore, kinds.annotations(seeded).get(gate.CLONE_MIN_SIZE))
        vm_name = self.names()["vs"]
        self.create(
            gate.pvc_definition(
                vm_name, ns, source["name"], size, st["mode"], p["storage_class"], self.run_id, **self.marks
            )
        )
        self.create(
            gate.vm_definition(
                vm_name, ns, vm_name, st["memory"], self.run_id, p["vm_annotations"], **self.marks
            )
        )
        return self.next_stage("start")

    def publish(self, names, handle, driver, mode):
        p = self.p
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

    def stage_start(self):
        """Wait for the VMI to run: scheduling and volume restore, no verdict on the image yet."""
        ns, name = self.p["project_namespace"], self.names()["vs"]
        pending = "the VM instance to run"

        def running(obj):
            phase = kinds.status(obj).get("phase")
            return phase == "Running", (
                "the instance failed before the guest ran" if phase == "Failed" else None
            )

        try:
            vmi, done = self.wait(
                VM,
                "VirtualMachineInstance",
                name,
                ns,
                running,
                kinds.describe_vmi,
                pending,
                self.p["wait_timeout"],
            )
        except WaitError as exc:
            vm = _retried(self.module.get, VM, "VirtualMachine", name, ns) or {}
            printable = kinds.status(vm).get("printableStatus")
            self.phase("start", False, self.stage_elapsed(), "%s (VM %s)" % (exc.state, printable))
            raise PipelineError(
                "the clone never started, so the gate says nothing about the image (VM status %s): %s"
                % (printable, exc),
                verdict=gate.INCONCLUSIVE,
                passed=False,
            ) from None
        if not done:
            return self.pending(pending, self.p["wait_timeout"])
        self.phase("start", True, self.stage_elapsed(), kinds.describe_vmi(vmi))
        return self.next_stage("agent")

    def stage_agent(self):
        ns, name = self.p["project_namespace"], self.names()["vs"]
        pending = "the guest agent to connect (AgentConnected)"

        def connected(obj):
            if kinds.agent_connected(obj):
                return True, None
            phase = kinds.status(obj).get("phase")
            if obj is None or phase in ("Failed", "Succeeded"):
                return False, "the instance ended (%s) before its agent connected" % (phase or "deleted")
            return False, None

        try:
            _vmi, done = self.wait(
                VM,
                "VirtualMachineInstance",
                name,
                ns,
                connected,
                kinds.describe_vmi,
                pending,
                self.p["agent_timeout"],
            )
        except (WaitTimeout, WaitFailed) as exc:
            self.phase("agent", False, self.stage_elapsed(), "guest agent never connected: %s" % exc.state)
            self.line = str(exc)
            return self.finish(False, False, str(exc))
        if not done:
            return self.pending(pending, self.p["agent_timeout"])
        self.phase("agent", True, self.stage_elapsed(), "AgentConnected")
        self.state["probe_attempts"] = 0
        return self.next_stage("port")

    def stage_port(self):
        st = self.state
        ns, name = self.p["project_namespace"], self.names()["vs"]
        port = gate.port_for(self.p["os"], self.p["port"])
        deadline = st["stage_started"] + self.p["port_timeout"]
        pending = "port %d to accept a TCP connection" % port
        while True:
            try:
                vmi = self.module.fetch(VM, "VirtualMachineInstance", name, ns)
            except Exception as exc:
                if not is_transient(exc):
                    raise
                vmi = None
            address = gate.probe_address(self.p["port_probe"], vmi, port) if vmi else None
            if address is None:
                st["last_state"] = "no address yet"
            else:
                st["probe_attempts"] = st.get("probe_attempts", 0) + 1
                self.result["probe"] = "%s:%d" % address
                error = tcp_connect(address, max(0.5, min(5.0, deadline - self.clock())))
                if error is None:
                    self.phase("port", True, self.stage_elapsed(), "%s:%d accepted a connection" % address)
                    return self.finish(True, True)
                st["last_state"] = "%s:%d: %s" % (address[0], address[1], error)
            now = self.clock()
            if now >= deadline:
                detail = "%s (%d attempts)" % (st["last_state"], st.get("probe_attempts", 0))
                self.phase("port", False, self.stage_elapsed(), detail)
                self.line = gate.timeout_message(pending, self.stage_elapsed(), st["last_state"])
                return self.finish(True, False, self.line)
            if now >= self.round_end:
                return self.pending(pending, self.p["port_timeout"])
            time.sleep(min(self.p["wait_sleep"], max(0.0, min(deadline, self.round_end) - now)))

    def finish(self, agent_ok, port_ok, why=None):
        p = self.p
        verdict = gate.verdict(agent_ok, port_ok)
        port = gate.port_for(p["os"], p["port"])
        msg = gate.explain(verdict, p["os"], port, self.result.get("probe", "-"))
        if why:
            msg = "%s (%s)" % (msg, why)
        self.result.update(verdict=verdict, passed=verdict == gate.PASSED, msg=msg)
        self.state["stage"] = "done"
        return True

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
            if not self.created:
                return {"kept": False}
            command = gate.cleanup_command(self.run_id, self.p["project_namespace"])
            return {
                "kept": True,
                "cleanup_command": command,
                "cleanup_message": "kept %s for diagnosis (keep: true); delete them with: %s"
                % (gate.describe_left(gate.removal_order(list(self.created))), command),
            }
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
