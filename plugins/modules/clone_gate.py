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
  - Unless O(keep=true), everything the module created is deleted before it returns, also on failure and
    timeout. The golden, its content and the seeder's objects are never deleted.
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
  provision_timeout:
    description:
      - Seconds for the published snapshot to become ready and for the VM instance to reach C(Running)
        (volume restore and scheduling). Running out of it is no verdict on the image; the module fails
        with V(inconclusive).
    type: int
    default: 600
  poll_interval:
    description:
      - Longest pause, in seconds, between two polls.
    type: int
    default: 2
  keep:
    description:
      - Keep every object the gate created (VM, claim, and the snapshot and content it published) for
        diagnosis. Delete them yourself afterwards, since they are labelled
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
      - V(auto) uses the VMI's first interface address and the guest port, or a port-forward recorded
        on the VMI as annotation C(lab.goldenimage.io/forwarded-<port>) (which the test lab sets).
      - Otherwise a C(host:port) template; C({ip}), C({port}), C({name}) and C({namespace}) are
        replaced by the VMI's address, the guest port, the VM name and the project namespace. The VMI's pod
        IP is reachable only from inside the cluster network. From outside, name the Service or load
        balancer that tenants use, for example C(rdp-{name}.{namespace}.example.net:3389).
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
    VirtualMachines in the project; get VirtualMachineInstances."
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
  description: Whether the created objects were kept (O(keep=true)).
  returned: always
  type: bool
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
import socket
import time

from ansible_collections.goldenimage.pipeline.plugins.module_utils import gate
from ansible_collections.goldenimage.pipeline.plugins.module_utils._kube import (
    KubeModule,
    error_details,
    is_transient,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils._wait import (
    WaitError,
    WaitFailed,
    WaitTimeout,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.errors import PipelineError

SNAP = gate.SNAPSHOT_API
VM = gate.VM_API


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
        provision_timeout=dict(type="int", default=600),
        poll_interval=dict(type="int", default=2),
        keep=dict(type="bool", default=False),
        storage_class=dict(type="str"),
        port_probe=dict(type="str", default="auto"),
        vm_annotations=dict(type="dict", default={}),
        fail_on_reject=dict(type="bool", default=True),
        cleanup_timeout=dict(type="int", default=120),
    )


class GateModule(KubeModule):
    """Cleans up what the gate created before any failure is reported, whichever helper failed."""

    cleanup = None

    def fail_json(self, msg, **kwargs):
        hook, self.cleanup = self.cleanup, None
        if hook is not None:
            kwargs.update(hook())
        super(GateModule, self).fail_json(msg=msg, **kwargs)


class Gate:
    def __init__(self, module):
        self.module = module
        self.p = module.params
        self.port = gate.port_for(self.p["os"])
        self.run_id = binascii.hexlify(os.urandom(4)).decode()
        self.created = []
        self.result = {"changed": False, "created": self.created, "kept": False, "phases": []}

    # --- reading the candidate -------------------------------------------------------------------

    def candidate(self):
        p = self.p
        vs = self.module.get(SNAP, "VolumeSnapshot", p["snapshot"], p["snapshot_namespace"])
        where = "VolumeSnapshot %s/%s" % (p["snapshot_namespace"], p["snapshot"])
        if vs is None:
            self.fail("%s not found" % where)
        status = vs.get("status") or {}
        if not status.get("readyToUse") or not status.get("boundVolumeSnapshotContentName"):
            self.fail("%s is not ready to use; a clone of it cannot be gated" % where)
        content = self.module.get(SNAP, "VolumeSnapshotContent", status["boundVolumeSnapshotContentName"])
        handle = self.handle(content)
        if not handle:
            self.fail("%s has no snapshot handle on its content" % where)
        labels = (vs.get("metadata") or {}).get("labels") or {}
        mode = (content.get("spec") or {}).get("sourceVolumeMode") or labels.get("kube-dc.com/golden-mode")
        return vs, content, handle, mode or "Filesystem"

    @staticmethod
    def handle(content):
        if not content:
            return None
        return (content.get("status") or {}).get("snapshotHandle") or (
            ((content.get("spec") or {}).get("source") or {}).get("snapshotHandle")
        )

    def published(self, handle):
        """The project's ready snapshot on this handle (the seeder's copy), or None."""
        for vs in sorted(
            self.module.list(SNAP, "VolumeSnapshot", self.p["project_namespace"]),
            key=lambda o: o["metadata"]["name"],
        ):
            status = vs.get("status") or {}
            name = status.get("boundVolumeSnapshotContentName")
            if not status.get("readyToUse") or not name:
                continue
            if self.handle(self.module.get(SNAP, "VolumeSnapshotContent", name)) == handle:
                return vs
        return None

    # --- bookkeeping ---------------------------------------------------------------------------

    def fail(self, msg, **extra):
        self.result.update(extra)
        self.module.fail_json(**dict(self.result, msg=msg))

    def create(self, definition):
        meta = definition["metadata"]
        obj = self.module.create(definition)
        self.created.append(
            {
                "apiVersion": definition["apiVersion"],
                "kind": definition["kind"],
                "name": meta["name"],
                "namespace": meta.get("namespace"),
            }
        )
        self.result["changed"] = True
        return obj

    def phase(self, name, passed, seconds, detail):
        self.result["phases"].append(
            {"name": name, "passed": passed, "seconds": round(seconds, 3), "detail": detail}
        )

    def wait(self, api, kind, name, namespace, predicate, describe, pending, timeout):
        return self.module.wait(
            api, kind, name, namespace, predicate, describe, pending, timeout, self.p["poll_interval"]
        )

    # --- the run -------------------------------------------------------------------------------

    def run(self):
        p = self.p
        min_memory = p["min_memory"] or gate.MIN_MEMORY[p["os"]]
        memory = p["memory"] or min_memory
        try:
            problem = gate.memory_problem(memory, min_memory)
        except gate.GateError as exc:
            self.fail(str(exc))
        if problem:
            self.fail(problem, verdict=gate.INCONCLUSIVE, passed=False)
        candidate, content, handle, mode = self.candidate()
        if self.module.get("v1", "Namespace", p["project_namespace"]) is None:
            self.fail("project namespace %s does not exist" % p["project_namespace"])
        seeded = self.published(handle)
        names = {
            "vs": gate.object_name(self.run_id),
            "content": gate.object_name("%s-%s" % (p["project_namespace"], self.run_id)),
        }
        plan = []
        if seeded is None:
            plan.append({"kind": "VolumeSnapshotContent", "name": names["content"], "namespace": None})
            plan.append({"kind": "VolumeSnapshot", "name": names["vs"], "namespace": p["project_namespace"]})
        for kind in ("PersistentVolumeClaim", "VirtualMachine"):
            plan.append({"kind": kind, "name": names["vs"], "namespace": p["project_namespace"]})
        source = {
            "name": seeded["metadata"]["name"] if seeded else names["vs"],
            "namespace": p["project_namespace"],
            "handle": handle,
            "published_by": "project" if seeded else "gate",
        }
        self.result["source"] = source
        if self.module.check_mode:
            self.module.exit_json(
                changed=False,
                skipped=True,
                msg="check mode: a clone gate boots a VM and cannot be predicted; it would create %s"
                % ", ".join("%s %s" % (o["kind"], o["name"]) for o in plan),
                would_create=plan,
                source=source,
                created=[],
                kept=False,
            )
        self.module.cleanup = self.cleanup
        start = time.monotonic()
        if seeded is None:
            seeded = self.publish(names, handle, content, mode)
            detail = "published %s/%s on handle %s" % (p["project_namespace"], names["vs"], handle)
        else:
            detail = "existing project copy %s/%s" % (p["project_namespace"], seeded["metadata"]["name"])
        self.phase("provision", True, time.monotonic() - start, detail)
        notes = (seeded.get("metadata") or {}).get("annotations") or {}
        restore = (seeded.get("status") or {}).get("restoreSize") or (candidate.get("status") or {}).get(
            "restoreSize"
        )
        try:
            size = gate.clone_size(restore, notes.get(gate.CLONE_MIN_SIZE))
        except gate.GateError as exc:
            self.fail(str(exc))
        vm_name = names["vs"]
        self.create(
            gate.pvc_definition(
                vm_name, p["project_namespace"], source["name"], size, mode, p["storage_class"], self.run_id
            )
        )
        self.create(
            gate.vm_definition(
                vm_name, p["project_namespace"], vm_name, memory, self.run_id, p["vm_annotations"]
            )
        )
        vmi = self.start(vm_name)
        agent_ok, vmi = self.agent(vm_name, vmi)
        port_ok = False
        if agent_ok:
            port_ok = self.probe(vm_name, vmi)
        verdict = gate.verdict(agent_ok, port_ok)
        msg = gate.explain(verdict, p["os"], self.port, self.result.get("probe", "-"))
        self.result.update(verdict=verdict, passed=verdict == gate.PASSED, msg=msg)
        self.module.cleanup = None
        self.result.update(self.cleanup())
        if verdict != gate.PASSED and p["fail_on_reject"]:
            self.module.fail_json(**self.result)
        self.module.exit_json(**self.result)

    def publish(self, names, handle, content, mode):
        p = self.p
        driver = (content.get("spec") or {}).get("driver") or ""
        self.create(
            gate.content_definition(
                names["content"], handle, driver, mode, names["vs"], p["project_namespace"], self.run_id
            )
        )
        self.create(
            gate.snapshot_definition(names["vs"], p["project_namespace"], names["content"], self.run_id)
        )

        def ready(obj):
            status = (obj or {}).get("status") or {}
            return bool(status.get("readyToUse")), None

        def describe(obj):
            status = (obj or {}).get("status") or {}
            return "readyToUse=%s%s" % (
                status.get("readyToUse"),
                " error: %s" % status["error"].get("message") if status.get("error") else "",
            )

        try:
            obj = self.wait(
                SNAP,
                "VolumeSnapshot",
                names["vs"],
                p["project_namespace"],
                ready,
                describe,
                "the published snapshot to be ready",
                p["provision_timeout"],
            )[0]
        except WaitError as exc:
            self.fail(str(exc), verdict=gate.INCONCLUSIVE, passed=False)
        return obj

    def start(self, name):
        """Wait for the VMI to run: scheduling and volume restore, no verdict on the image yet."""
        ns = self.p["project_namespace"]

        def running(obj):
            phase = ((obj or {}).get("status") or {}).get("phase")
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
                gate.describe_vmi,
                "the VM instance to run",
                self.p["provision_timeout"],
            )
        except WaitError as exc:
            vm = self.module.fetch(VM, "VirtualMachine", name, ns) or {}
            printable = (vm.get("status") or {}).get("printableStatus")
            self.phase("start", False, exc.elapsed, "%s (VM %s)" % (exc.state, printable))
            self.fail(
                "the clone never started, so the gate says nothing about the image (VM status %s): %s"
                % (printable, exc),
                verdict=gate.INCONCLUSIVE,
                passed=False,
            )
        self.phase("start", True, seconds, gate.describe_vmi(vmi))
        return vmi

    def agent(self, name, vmi):
        ns = self.p["project_namespace"]

        def connected(obj):
            if gate.agent_connected(obj):
                return True, None
            phase = ((obj or {}).get("status") or {}).get("phase")
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
                gate.describe_vmi,
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
        start = time.monotonic()
        deadline = start + max(0, self.p["port_timeout"])
        last, attempts, address = "no address yet", 0, None
        while True:
            try:
                address = gate.probe_address(self.p["port_probe"], vmi, self.port)
            except gate.GateError as exc:
                self.fail(str(exc))
            if address is not None:
                attempts += 1
                self.result["probe"] = "%s:%d" % address
                remaining = max(0.5, min(5.0, deadline - time.monotonic()))
                try:
                    conn = socket.create_connection(address, timeout=remaining)
                    conn.close()
                    self.phase(
                        "port", True, time.monotonic() - start, "%s:%d accepted a connection" % address
                    )
                    return True
                except (OSError, socket.timeout) as exc:
                    last = "%s:%d: %s" % (address[0], address[1], exc.strerror or exc)
            if time.monotonic() >= deadline:
                break
            time.sleep(min(self.p["poll_interval"], max(0.0, deadline - time.monotonic())))
            try:
                vmi = self.module.fetch(VM, "VirtualMachineInstance", name, ns) or vmi
            except Exception as exc:
                if not is_transient(exc):
                    raise
        self.phase("port", False, time.monotonic() - start, "%s (%d attempts)" % (last, attempts))
        return False

    # --- cleanup -------------------------------------------------------------------------------

    def cleanup(self):
        """Delete what this run created, newest first; never anything it did not create."""
        if self.p["keep"]:
            return {"kept": bool(self.created)}
        errors = []
        for obj in reversed(self.created):
            try:
                res = self.module.resource(obj["apiVersion"], obj["kind"])
                namespace = obj["namespace"] if res.namespaced else None
                try:
                    res.delete(name=obj["name"], namespace=namespace)
                except Exception as exc:
                    if getattr(exc, "status", None) != 404:
                        raise
                self.wait_gone(obj)
                if obj["kind"] == "VirtualMachine":  # its instance goes with it (owner reference)
                    self.wait_gone(dict(obj, kind="VirtualMachineInstance"))
            except Exception as exc:
                errors.append("%s %s: %s" % (obj["kind"], obj["name"], error_details(exc)["message"]))
        extra = {"kept": False}
        if errors:
            extra["cleanup_errors"] = errors
            self.module.warn("clone gate cleanup left objects behind: %s" % "; ".join(errors))
        return extra

    def wait_gone(self, obj):
        def gone(found):
            return found is None, None

        try:
            self.module.wait(
                obj["apiVersion"],
                obj["kind"],
                obj["name"],
                obj["namespace"],
                gone,
                lambda found: "still there" if found else "gone",
                "%s %s to be deleted" % (obj["kind"], obj["name"]),
                self.p["cleanup_timeout"],
                self.p["poll_interval"],
            )
        except WaitError as exc:
            raise RuntimeError(str(exc)) from None


def main():
    module = GateModule(argument_spec=argument_spec(), supports_check_mode=True)
    try:
        p = module.params
        if p["poll_interval"] < 1 or min(p["agent_timeout"], p["port_timeout"], p["provision_timeout"]) < 0:
            module.fail_json(msg="poll_interval must be at least 1 and the timeouts at least 0 (seconds)")
        Gate(module).run()
    except PipelineError as exc:
        module.fail_json(**exc.result)


if __name__ == "__main__":
    main()
