# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""The clone gate's I/O: it reads the candidate, creates the run's objects, waits, probes the port and
cleans up, round after round; what each observation means and what comes next is gate.py's.

Every request rides on the Kubernetes adapter's one retry layer (throttling, 5xx, dropped connections;
a create whose reply was lost is read back, a delete that meets 404 on a retry is done). Each call is
one round: it runs stages until one has to wait past ``report_every`` and returns what the next call
needs (``gate_state``), or the verdict.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import binascii
import io
import json
import os
import time

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import inputs
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common._wait import (
    WaitError,
    WaitFailed,
    WaitTimeout,
    wait_for,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.rounds import Rounds
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import (
    _guest_ssh,
    gate,
    golden,
    selection,
    serving,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden._probe import (
    read_banner,
    tcp_connect,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import kinds
from ansible_collections.goldenimage.pipeline.plugins.module_utils.windows import _guest_winrm, _screen

SNAP = gate.SNAPSHOT_API
VM = gate.VM_API
DURATIONS = (
    "agent_timeout",
    "disk_timeout",
    "port_timeout",
    "wait_timeout",
    "wait_sleep",
    "cleanup_timeout",
    "report_every",
)
FILESYSTEMS_PATH = (
    "/apis/subresources.kubevirt.io/v1/namespaces/{namespace}/virtualmachineinstances/{name}/filesystemlist"
)


class Gate:
    """The runner: ``run()`` returns the result or raises a PipelineError; it never exits.

    Whatever ends the run (a verdict, a refusal, an API error), what it created is removed first,
    unless kept, and anything it could not remove is reported by name with the command to remove it.
    """

    def __init__(
        self,
        module,
        run_id=None,
        clock=time.time,
        probe=tcp_connect,
        banner=read_banner,
        ssh=_guest_ssh,
        winrm=_guest_winrm,
    ):
        self.module = module
        self.p = module.params
        self.clock = clock
        self.probe = probe
        self.banner = banner
        self.ssh = ssh
        # How the in-guest check logs in, per OS.
        self.login = {"linux": ssh, "windows": winrm}
        # What the rounds carry from one call to the next (gate_state): the run, its stage, the result.
        self.state = dict(self.p.get("gate_state") or {})
        self.run_id = self.state.get("run_id") or run_id or binascii.hexlify(os.urandom(4)).decode()
        self.candidate_id = gate.candidate_id(self.p["snapshot_namespace"], self.p["snapshot"])
        self.marks = {"candidate": self.candidate_id, "kept": bool(self.p["keep"])}
        self.project = self.p["project_namespace"]
        self.names = gate.run_names(self.run_id, self.project)
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

    # --- reading -------------------------------------------------------------------------------

    def candidate(self):
        p = self.p
        where = "VolumeSnapshot %s/%s" % (p["snapshot_namespace"], p["snapshot"])
        vs = self.module.get(SNAP, "VolumeSnapshot", p["snapshot"], p["snapshot_namespace"])
        try:
            content = self.module.get(SNAP, "VolumeSnapshotContent", gate.candidate_content(vs, where))
            handle, mode, driver = gate.candidate_source(vs, content, where)
        except PipelineError as exc:
            exc.fields.update((k, v) for k, v in self.result.items() if k not in exc.fields)
            raise
        return vs, handle, mode, driver

    def published(self, handle):
        """The project's ready snapshot on this handle (the seeder's copy), or None."""
        candidates = gate.copy_candidates(self.module.list(SNAP, "VolumeSnapshot", self.project))
        contents = {}
        for _vs, name in candidates:
            contents[name] = self.module.get(SNAP, "VolumeSnapshotContent", name)
            found = gate.seeded_copy(candidates, contents, handle)
            if found is not None:
                return found
        return None

    # --- bookkeeping ---------------------------------------------------------------------------

    def create(self, definition):
        """Create an object of this run. It is recorded before the request, so an object whose reply
        was lost after the server committed it is still cleaned up (the adapter reads it back)."""
        self.created.append(gate.ref(definition))
        self.result["changed"] = True
        return self.module.create(definition)

    def phase(self, name, passed, seconds, detail):
        self.result["phases"].append(
            {"name": name, "passed": passed, "seconds": round(seconds, 3), "detail": detail}
        )

    def wait(self, api, kind, name, predicate, describe, timeout, pending=None):
        """Wait in this round for ``predicate``: ``(obj, True)`` once it holds, ``(last, False)`` when the
        round ends first. ``timeout`` counts from when the stage began, across rounds; running out of it
        raises WaitTimeout naming what was pending and the last state seen."""
        st = self.state
        pending = pending or gate.PENDING[st["stage"]]
        rounds = Rounds.span(st["stage_started"], timeout, self.round_end)
        try:
            obj, done = self.module.wait_round(
                rounds, api, kind, name, self.project, predicate, describe, pending, self.p["wait_sleep"]
            )
        except WaitTimeout as exc:
            st["last_state"] = exc.state
            elapsed = self.clock() - st["stage_started"]  # on the gate's clock, as its lines are
            raise exc.reworded(gate.timeout_message(pending, elapsed, exc.state)) from None
        if not done:
            st["last_state"] = describe(obj)
        return obj, done

    def poll(self, look, timeout):
        """Look again until ``look()`` finds no problem (it returns None: the port accepted, the volume
        grew): ``passed``; ``failed`` when the stage's ``timeout`` (from when it began, across rounds) ran
        out; ``pending`` when this round is over first."""
        rounds = Rounds.span(self.state["stage_started"], timeout, self.round_end)
        try:
            _problem, seconds = wait_for(
                look,
                lambda problem: (problem is None, None),
                timeout,
                self.p["wait_sleep"],
                describe=str,
                clock=self.clock,
                rounds=rounds,
            )
        except WaitTimeout:
            return "failed"
        return "pending" if seconds is None else "passed"

    # --- the run -------------------------------------------------------------------------------

    def first_round(self):
        """Every check before anything is written, then the plan of the rounds (the state they carry)."""
        p = self.p
        inputs.positive_all(p, DURATIONS)
        gate.refuse_project_namespace(self.project, p["snapshot_namespace"])
        gate.port_for(p["os"], p["port"])
        self.check_credentials()
        memory, min_memory = gate.gate_memory(p["os"], p["memory"], p["min_memory"])
        self.result.update(memory=memory, min_memory=min_memory)
        problem = gate.memory_problem(memory, min_memory)
        if problem:
            raise PipelineError(problem, verdict=gate.INCONCLUSIVE, passed=False, **self.result)
        project = self.module.get("v1", "Namespace", self.project)
        try:
            gate.refuse_non_project(project, self.project, p["project_selector"])
        except PipelineError as exc:
            for key, value in dict(self.result, verdict=gate.INCONCLUSIVE, passed=False).items():
                exc.fields.setdefault(key, value)
            raise
        self.check_expand_disks()
        candidate, handle, mode, driver = self.candidate()
        # A release_digest given must be the golden's own: the record is written for the golden's.
        selection.served_digest(candidate, p.get("release_digest"), p["snapshot"])
        if self.module.check_mode:
            return self.predict(handle)
        self.state.update(
            run_id=self.run_id,
            handle=handle,
            mode=mode,
            driver=driver,
            restore=kinds.status(candidate).get("restoreSize"),
            memory=memory,
            digest=golden.release_digest(candidate),
            result=self.result,
        )
        self.enter("sweep")
        return None

    def check_credentials(self):
        """guest_credentials that cannot log in are refused before anything is written."""
        p = self.p
        creds = p.get("guest_credentials")
        problem = gate.credentials_problem(creds, p["os"])
        if problem:
            supported = "give username and password or private_key"
            if p["os"] == "windows":
                supported = "give username and password, and transport ntlm, kerberos or credssp (or https)"
            raise Refusal("option guest_credentials", problem, supported)
        if creds and p["os"] == "windows" and not self.login["windows"].available():
            raise Refusal(
                "option guest_credentials",
                _guest_winrm.MISSING,
                "install pywinrm, or leave guest_credentials out: the guest agent then reports C:\\",
            )
        if creds and creds.get("private_key") and self.ssh.public_of(creds["private_key"]) is None:
            raise Refusal(
                "option guest_credentials",
                "its private_key is not an OpenSSH private key that opens without a passphrase",
                "give an unencrypted private key (PEM or OpenSSH format)",
            )
        if p.get("release_digest"):
            p["release_digest"] = golden.normalize_digest(p["release_digest"])

    def check_expand_disks(self):
        """Link 1 of a disk that grows, before anything is written: a gate that clones larger than the
        golden proves nothing on a KubeVirt that would not grow the image."""
        grows = gate.parse_quantity(self.p["grow_by"])  # a bad quantity is refused here, before writes
        if not self.p["require_expand_disks"] or not grows:
            return
        problem, detail = gate.expand_disks(self.module.list(VM, "KubeVirt"))
        if problem:
            raise PipelineError(problem, verdict=gate.INCONCLUSIVE, passed=False, **self.result)
        self.result["expand_disks"] = detail

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
            return dict(self.result, done=False, line=self.line, resume={"gate_state": self.state})
        extra = self.cleanup()
        message = extra.pop("cleanup_message", None)
        self.result.update(extra)
        if message:
            self.result["msg"] = "%s; %s" % (self.result["msg"], message)
        self.result["done"] = True
        self.result["line"] = self.line
        self.record()
        if self.result["verdict"] != gate.PASSED and self.p["fail_on_reject"]:
            raise PipelineError(**self.result)
        return self.result

    def record(self):
        """Write the gate record on the golden: promotion reads it there (serving.gate_pass) for the release
        digest the golden carried when the gate began, so no caller can declare a pass. No verdict, none."""
        record = self.result.get("gate_record")
        if not record or record.get("verdict") in (None, gate.INCONCLUSIVE):
            return
        p = self.p
        current = self.module.get(SNAP, "VolumeSnapshot", p["snapshot"], p["snapshot_namespace"])
        if not serving.record_changes(current, record):
            return  # the same verdict for the same bytes is recorded already: the first one is kept
        text = json.dumps(record, sort_keys=True, separators=(",", ":"))
        patch = {"metadata": {"annotations": {serving.GATE_RECORD: text}}}
        self.module.patch(
            SNAP, "VolumeSnapshot", p["snapshot"], p["snapshot_namespace"], patch, before=current
        )
        self.result["changed"] = True

    def predict(self, handle):
        seeded = self.published(handle)
        plan = gate.plan(self.names, seeded, self.project)
        return dict(
            changed=False,
            skipped=True,
            msg="check mode: a clone gate boots a VM and cannot be predicted; it would create %s"
            % ", ".join("%s %s" % (o["kind"], o["name"]) for o in plan),
            would_create=plan,
            would_sweep=[gate.ref(o) for o in self.leftovers()],
            source=gate.source(seeded, self.names, handle, self.project),
            created=[],
            kept=False,
        )

    # --- the stages: each returns True when done (the next one starts) or False when the round ended ---

    def advance(self):
        """Run stages until the verdict (True) or the end of this round (False)."""
        while self.state["stage"] != "done":
            if not getattr(self, "stage_" + self.state["stage"])():
                return False
        return True

    def enter(self, stage):
        self.state.update(stage=stage, stage_started=self.clock(), last_state=None)
        return True

    def done_with(self, stage):
        return self.enter(gate.next_stage(stage))

    def pending(self, timeout, state=None, what=None):
        """The round ends with the stage still waiting: the progress line says for what."""
        st = self.state
        now = self.clock()
        self.line = gate.progress_line(
            "%s/%s" % (self.p["snapshot_namespace"], self.p["snapshot"]),
            self.project,
            st["stage"],
            what or gate.PENDING[st["stage"]],
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
        return self.done_with("sweep")

    def stage_publish(self):
        handle = self.state["handle"]
        seeded = self.published(handle)
        self.result["source"] = gate.source(seeded, self.names, handle, self.project)
        if seeded is None:
            self.publish(handle, self.state["driver"], self.state["mode"])
        return self.done_with("publish")

    def publish(self, handle, driver, mode):
        names = self.names
        self.create(
            gate.content_definition(
                names["content"], handle, driver, mode, names["vs"], self.project, self.run_id, **self.marks
            )
        )
        self.create(
            gate.snapshot_definition(names["vs"], self.project, names["content"], self.run_id, **self.marks)
        )

    def stage_provision(self):
        p, st = self.p, self.state
        source = self.result["source"]
        if source["published_by"] == "gate":
            try:
                seeded, done = self.wait(
                    SNAP,
                    "VolumeSnapshot",
                    source["name"],
                    gate.snapshot_ready,
                    gate.describe_snapshot,
                    p["wait_timeout"],
                )
            except WaitError as exc:
                raise PipelineError(str(exc), verdict=gate.INCONCLUSIVE, passed=False) from None
            if not done:
                return self.pending(p["wait_timeout"])
            detail = "published %s/%s on handle %s" % (self.project, source["name"], st["handle"])
        else:
            seeded = self.module.get(SNAP, "VolumeSnapshot", source["name"], self.project) or {}
            detail = "existing project copy %s/%s" % (self.project, source["name"])
        self.phase("provision", True, self.stage_elapsed(), detail)
        restore = kinds.status(seeded).get("restoreSize") or st["restore"]
        size = gate.clone_size(restore, kinds.annotations(seeded).get(gate.CLONE_MIN_SIZE), p["grow_by"])
        st.update(golden_size=restore, clone_size=size)
        name = self.names["vs"]
        self.create(
            gate.pvc_definition(
                name,
                self.project,
                source["name"],
                size,
                st["mode"],
                p["storage_class"],
                self.run_id,
                **self.marks,
            )
        )
        user_data = None
        if p["os"] == "linux":
            # A one-time key when no credentials are given: cloud-init wants a key to authorise, and its
            # private half is dropped at once (nobody logs in with it).
            creds = p.get("guest_credentials") or {}
            public = None
            if creds.get("private_key"):
                public = self.ssh.public_of(creds["private_key"])
            public = public or self.ssh.keypair()[1]
            user_data = gate.seed_user_data(public, password_login=bool(creds.get("password")))
        self.create(
            gate.vm_definition(
                name,
                self.project,
                name,
                st["memory"],
                self.run_id,
                p["vm_annotations"],
                user_data=user_data,
                **self.marks,
            )
        )
        return self.done_with("provision")

    def stage_start(self):
        """Wait for the VMI to run: scheduling and volume restore, no verdict on the image yet."""
        name = self.names["vs"]
        try:
            vmi, done = self.wait(
                VM,
                "VirtualMachineInstance",
                name,
                gate.vmi_running,
                kinds.describe_vmi,
                self.p["wait_timeout"],
            )
        except WaitError as exc:
            vm = self.module.get(VM, "VirtualMachine", name, self.project) or {}
            printable = kinds.status(vm).get("printableStatus")
            self.phase("start", False, self.stage_elapsed(), "%s (VM %s)" % (exc.state, printable))
            raise PipelineError(
                "the clone never started, so the gate says nothing about the image (VM status %s): %s"
                % (printable, exc),
                verdict=gate.INCONCLUSIVE,
                passed=False,
            ) from None
        if not done:
            return self.pending(self.p["wait_timeout"])
        self.phase("start", True, self.stage_elapsed(), kinds.describe_vmi(vmi))
        return self.done_with("start")

    def stage_agent(self):
        """The boot proof: the guest agent connecting, or on Linux the SSH server's banner (a stock cloud
        image ships no agent); whichever comes first, in the one wait of the rounds."""
        p = self.p
        linux = p["os"] == "linux"
        timeout = p["agent_timeout"]
        port = gate.port_for(p["os"], p["port"])
        seen = {}

        def booted(vmi):
            connected, failed = gate.agent_ready(vmi)
            seen.pop("ssh", None)
            if connected or failed or not (linux and vmi):
                return connected, failed
            address = gate.probe_address(p["port_probe"], vmi, port)
            if address is None:
                return False, None
            deadline = self.state["stage_started"] + timeout
            data, error = self.banner(address, max(0.5, min(5.0, deadline - self.clock())))
            problem = error or gate.banner_problem(data)
            if problem is None:
                seen["banner"] = (gate.banner_text(data), address)
                return True, None
            seen["ssh"] = "; SSH %s:%d: %s" % (address[0], address[1], problem)
            return False, None

        def describe(vmi):
            return (kinds.describe_vmi(vmi) if vmi else "no instance") + seen.get("ssh", "")

        pending = gate.PENDING["agent-linux" if linux else "agent"]
        try:
            _vmi, done = self.wait(
                VM, "VirtualMachineInstance", self.names["vs"], booted, describe, timeout, pending
            )
        except (WaitTimeout, WaitFailed) as exc:
            self.phase("agent", False, self.stage_elapsed(), "no boot proof: %s" % exc.state)
            self.line = str(exc)
            self.read_console()
            return self.finish(False, False, str(exc))
        if not done:
            return self.pending(timeout, what=pending)
        if "banner" in seen:
            text, address = seen["banner"]
            self.result["probe"] = "%s:%d" % address
            detail = "%s from %s:%d (no guest agent connected)" % (text, address[0], address[1])
            self.phase("boot", True, self.stage_elapsed(), detail)
            return self.proved(gate.PROOF_SSH)
        self.phase("agent", True, self.stage_elapsed(), "AgentConnected")
        return self.proved(gate.PROOF_AGENT)

    def proved(self, proof):
        self.result["proof"] = proof
        self.state["probe_attempts"] = 0
        return self.done_with("agent")

    def filesystems(self):
        """The guest agent's filesystems of the clone, or None while the agent has none to report."""
        buffer = io.BytesIO()
        name = self.names["vs"]
        try:
            self.module.download(
                FILESYSTEMS_PATH.format(namespace=self.project, name=name),
                buffer,
                timeout=10,
                limit=1 << 20,
                action="read the guest filesystems of VirtualMachineInstance %s/%s" % (self.project, name),
            )
        except PipelineError as exc:
            if getattr(exc, "status", None) == 409:  # virt-api: the guest agent is not connected yet
                return None
            raise
        return json.loads(buffer.getvalue() or b"{}").get("items") or []

    def stage_disk(self):
        """The OS volume the guest agent reports must have grown into the clone's larger disk."""
        st = self.state
        if not gate.parse_quantity(self.p["grow_by"]):
            return self.done_with("disk")
        if self.p.get("guest_credentials"):
            return self.disk_in_guest()
        if self.result.get("proof") != gate.PROOF_AGENT:
            detail = "no guest agent reports the guest's filesystems and no guest_credentials were given"
            self.phase("disk", False, self.stage_elapsed(), detail)
            self.line = detail
            return self.finish(True, False, None, disk_grown=None)
        seen = {}

        def look():
            items = self.filesystems()
            volume = seen["volume"] = gate.os_volume(items, self.p["os"]) if items is not None else None
            problem = gate.growth_problem(volume, self.p["os"], st["golden_size"], st["clone_size"])
            if volume is not None:
                self.result["os_volume"] = {
                    k: volume.get(k) for k in ("mountPoint", "totalBytes", "usedBytes")
                }
            st["last_state"] = problem
            return problem

        step = self.poll(look, self.p["disk_timeout"])
        problem = st["last_state"]
        if step == "passed":
            detail = gate.growth_words(seen["volume"], st["golden_size"], st["clone_size"])
            self.result["disk_check"] = {"name": gate.CHECK_AGENT, "detail": detail}
            self.phase("disk", True, self.stage_elapsed(), detail)
            return self.done_with("disk")
        if step == "failed":
            self.result["disk_check"] = {"name": gate.CHECK_AGENT, "detail": problem}
            self.phase("disk", False, self.stage_elapsed(), problem)
            self.line = problem
            return self.finish(True, False, problem, disk_grown=False)
        return self.pending(self.p["disk_timeout"])

    def disk_in_guest(self):
        """The OS volume read inside the guest with guest_credentials: the root filesystem's size over SSH
        (Linux), or C:'s partition and the size it could take over WinRM (Windows)."""
        st, p = self.state, self.p
        os_name, creds = p["os"], p["guest_credentials"]
        check, command, over, shown = {
            "linux": (gate.CHECK_SSH, gate.ROOT_SIZE_COMMAND, "SSH", gate.ROOT_SIZE_COMMAND),
            "windows": (gate.CHECK_WINRM, gate.PARTITION_SCRIPT, "WinRM", gate.PARTITION_CHECK),
        }[os_name]
        port = gate.login_port(os_name, creds, p["port"])
        deadline = st["stage_started"] + p["disk_timeout"]
        seen = {}

        def look():
            vmi = self.module.fetch(VM, "VirtualMachineInstance", self.names["vs"], self.project)
            address = gate.probe_address(creds.get("address") or p["port_probe"], vmi, port) if vmi else None
            problem, volume, words = "no address yet", None, None
            if address is not None:
                code, out, err = self.login[os_name].run(
                    address, creds, command, max(1, min(30, deadline - self.clock()))
                )
                volume, problem, words = gate.guest_reading(
                    os_name, code, out, err, st["golden_size"], st["clone_size"]
                )
                if volume is None:
                    problem = "%s %s@%s:%d %s" % (over, creds["username"], address[0], address[1], problem)
                else:
                    self.result["os_volume"] = dict(volume, usedBytes=None)
            seen.update(volume=volume, words=words)
            st["last_state"] = problem
            return problem

        step = self.poll(look, p["disk_timeout"])
        if step == "pending":
            return self.pending(p["disk_timeout"], what="the guest's OS volume over %s" % over)
        problem, volume = st["last_state"], seen["volume"]
        detail = problem
        if volume is not None:
            detail = "%s (read over %s: %s)" % (problem or seen["words"], over, shown)
        self.result["disk_check"] = {"name": check, "detail": detail}
        self.phase("disk", step == "passed", self.stage_elapsed(), detail)
        if step == "passed":
            return self.done_with("disk")
        self.line = problem
        # A login that never worked proves nothing about the disk: unproven, not "not grown".
        return self.finish(True, False, detail, disk_grown=False if volume is not None else None)

    def stage_port(self):
        st = self.state
        port = gate.port_for(self.p["os"], self.p["port"])
        deadline = st["stage_started"] + self.p["port_timeout"]
        pending = "port %d to accept a TCP connection" % port
        seen = {}

        def look():
            vmi = self.module.fetch(VM, "VirtualMachineInstance", self.names["vs"], self.project)
            address = seen["address"] = gate.probe_address(self.p["port_probe"], vmi, port) if vmi else None
            error = "no address yet"
            if address is None:
                st["last_state"] = error
            else:
                st["probe_attempts"] = st.get("probe_attempts", 0) + 1
                self.result["probe"] = "%s:%d" % address
                error = self.probe(address, max(0.5, min(5.0, deadline - self.clock())))
                if error is not None:
                    st["last_state"] = "%s:%d: %s" % (address[0], address[1], error)
            return error

        step = self.poll(look, self.p["port_timeout"])
        if step == "passed":
            self.phase("port", True, self.stage_elapsed(), "%s:%d accepted a connection" % seen["address"])
            return self.finish(True, True)
        if step == "failed":
            detail = "%s (%d attempts)" % (st["last_state"], st.get("probe_attempts", 0))
            self.phase("port", False, self.stage_elapsed(), detail)
            self.line = gate.timeout_message(pending, self.stage_elapsed(), st["last_state"])
            return self.finish(True, False, self.line)
        return self.pending(self.p["port_timeout"], what=pending)

    def read_console(self):
        """The clone's console as the agent timed out: its class, or why it could not be read."""
        screen = _screen.last_screen(self.module, self.project, self.names["vs"])
        self.result["console"] = (
            {"error": screen["error"]}
            if screen.get("error")
            else {k: screen[k] for k in ("base_class", "confidence", "fingerprint")}
        )
        self.result["console_class"] = screen.get("base_class", "")

    def finish(self, agent_ok, port_ok, why=None, disk_grown=True):
        p = self.p
        verdict = gate.verdict(agent_ok, port_ok, disk_grown)
        port = gate.port_for(p["os"], p["port"])
        proof = self.result.setdefault("proof", gate.PROOF_NONE)
        msg = gate.explain(
            verdict, p["os"], port, self.result.get("probe", "-"), self.result.get("console"), proof
        )
        if why:
            msg = "%s (%s)" % (msg, why)
        self.result.update(verdict=verdict, passed=verdict == gate.PASSED, msg=msg)
        self.result["gate_record"] = gate.gate_record(
            self.result,
            "%s/%s" % (p["snapshot_namespace"], p["snapshot"]),
            self.state.get("digest"),
            self.state.get("handle"),
            self.run_id,
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock())),
            self.project,
        )
        self.state["stage"] = "done"
        return True

    # --- sweep and cleanup -----------------------------------------------------------------------

    def leftovers(self, selector=None):
        """Gate objects in the project carrying ``selector`` (default: earlier runs of this candidate)."""
        selector = selector or gate.sweep_selector(self.candidate_id)
        found = []
        for api, kind, _plural, namespaced in gate.CREATED_KINDS:
            namespace = self.project if namespaced else None
            found.extend(self.module.list(api, kind, namespace, label_selector=selector))
        return gate.removal_order(gate.swept(found, self.project))

    def sweep(self):
        """Remove what earlier runs of this candidate left in the project before this one starts."""
        old = [gate.ref(o) for o in self.leftovers()]
        if not old:
            return
        left, errors = self.remove_all(old)
        self.result["swept"] = [o for o in old if o not in left]
        if left:
            candidate = "%s/%s" % (self.p["snapshot_namespace"], self.p["snapshot"])
            raise PipelineError(
                gate.sweep_refusal(candidate, left, self.project, errors), left_behind=left, **self.result
            )

    def cleanup(self):
        """Delete what this run created (and anything else carrying its run label), newest first."""
        if self.p["keep"]:
            return gate.kept_report(self.created, self.run_id, self.project)
        selector = "%s=%s" % (gate.GATE_LABEL, self.run_id)
        targets = gate.removal_order(list(self.created))
        try:
            targets += [o for o in (gate.ref(x) for x in self.leftovers(selector)) if o not in targets]
        except PipelineError as exc:
            self.module.warn("could not list the objects of clone gate run %s: %s" % (self.run_id, exc.msg))
        left, errors = self.remove_all(gate.removal_order(targets))
        report = gate.left_report(left, errors, self.run_id, self.project)
        if report is None:
            return {"kept": False}
        self.module.warn("clone gate " + report["cleanup_message"])
        return report

    def remove_all(self, objects):
        left, errors = [], []
        for obj in objects:
            error = self.remove(obj)
            if error:
                left.append(obj)
                errors.append("%s %s: %s" % (obj["kind"], obj["name"], error))
        return left, errors

    def remove(self, obj):
        """Delete one object and wait until it is gone (its VM's instance too); None, or why not."""
        try:
            self.module.delete(obj["apiVersion"], obj["kind"], obj["name"], obj["namespace"])
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
            gate.gone,
            lambda found: "still there" if found else "gone",
            "%s %s to be deleted" % (obj["kind"], obj["name"]),
            self.p["cleanup_timeout"],
            self.p["wait_sleep"],
        )
