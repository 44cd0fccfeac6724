"""Job runner of the lab: batch/v1 Jobs run as real processes on this machine.

Each attempt is a Pod `<job>-<5 chars>` whose first container's command runs as a subprocess when its
executable is allow-listed. The pod's PersistentVolumeClaims are bound first (releasing
WaitForFirstConsumer) and every argument, environment value or working directory under a mountPath or
devicePath is rewritten to the volume's real file or directory. Output becomes the pod log.
"""

from __future__ import annotations

import atexit
import calendar
import os
import pathlib
import random
import shutil
import signal
import subprocess
import threading
import time
import weakref
from dataclasses import dataclass, field

from ..lifetime import tied
from ..objects import ApiError, ResourceType, clone, now_rfc3339
from . import Controller, LabContext
from .attach import COMPONENT as ATTACHER
from .attach import multi_attach_error, place
from .kit import CORE, condition, modify, record_event
from .pods import (
    ALLOWED_COMMANDS,
    Plan,
    PodNotReady,
    StartError,
    allowed_commands,
    plan_pod,
    rewrite_arg,
)

DEFAULT_TIMEOUT_SECONDS = 600.0  # a pod runs at most this long when the Job sets no activeDeadlineSeconds
RETRY_BACKOFF_SECONDS = 0.1  # Kubernetes waits 10s doubling per failure; the lab keeps the shape, faster
RETRY_BACKOFF_MAX_SECONDS = 1.0
LOG_LIMIT_BYTES = 4 * 1024 * 1024
COMPONENT = "job-controller"
KUBELET = "kubelet"
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"

# Processes run in their own sessions and would outlive the interpreter; stop them when it exits.
_live_runners: weakref.WeakSet[JobRunner] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for runner in list(_live_runners):
        runner.stop()


@dataclass
class _Run:
    namespace: str
    pod: str
    pod_uid: str
    job_uid: str
    cancel: threading.Event = field(default_factory=threading.Event)
    cancel_reason: str = ""
    thread: threading.Thread | None = None


def _started_epoch(job: dict) -> float | None:
    start = (job.get("status") or {}).get("startTime")
    if not start:
        return None
    return calendar.timegm(time.strptime(start, "%Y-%m-%dT%H:%M:%SZ"))


def _deadline_left(job: dict) -> float | None:
    """Seconds until activeDeadlineSeconds runs out, None without a deadline."""
    deadline = (job.get("spec") or {}).get("activeDeadlineSeconds")
    if deadline is None:
        return None
    started = _started_epoch(job)
    return float(deadline) if started is None else started + float(deadline) - time.time()


def _timeout(job: dict) -> float:
    """How long the process may run: the Job controller enforces a deadline itself, so the process
    limit only backs it up; without one the lab default applies."""
    left = _deadline_left(job)
    return DEFAULT_TIMEOUT_SECONDS if left is None else max(0.0, left) + 5.0


# ---------------------------------------------------------------------------- controller


def _set_condition(status: dict, ctype: str, value: str, reason: str, message: str) -> None:
    now = now_rfc3339()
    conditions = status.setdefault("conditions", [])
    for cond in conditions:
        if cond.get("type") == ctype:
            if cond.get("status") != value:
                cond["lastTransitionTime"] = now
            cond.update(status=value, reason=reason, message=message, lastProbeTime=now)
            return
    conditions.append(
        {
            "type": ctype,
            "status": value,
            "reason": reason,
            "message": message,
            "lastProbeTime": now,
            "lastTransitionTime": now,
        }
    )


def _finished(job: dict) -> bool:
    return any((condition(job, t) or {}).get("status") == "True" for t in ("Complete", "Failed"))


def _controller_of(pod: dict) -> dict | None:
    for ref in pod["metadata"].get("ownerReferences") or ():
        if ref.get("controller") and ref.get("kind") == "Job":
            return ref
    return None


def _phase(pod: dict) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


class JobRunner(Controller):
    """The Job controller and the kubelet in one: pods are created, scheduled and run here."""

    name = "job-runner"
    watches = (("batch", "jobs"), (CORE, "pods"))

    def __init__(self, lab: LabContext):
        super().__init__(lab)
        self._lock = threading.Lock()
        self._runs: dict[str, _Run] = {}  # pod uid -> run
        self._failed_at: dict[str, float] = {}  # job uid -> monotonic time of its last failed pod
        _live_runners.add(self)

    def stop(self) -> None:
        """Kill every running process and wait for its pod to be marked; the lab is shutting down."""
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            self._cancel(run, "Killing", "the lab is stopping")
        for run in runs:
            if run.thread is not None:
                run.thread.join(timeout=10)

    # --- dispatch
    def reconcile(self, rt: ResourceType, obj: dict) -> float | None:
        if rt.plural == "pods" and obj["metadata"].get("deletionTimestamp"):
            self._confirm_deletion(obj)
            return None
        if rt.plural == "pods":
            ref = _controller_of(obj)
            if ref is None:
                return None
            job_rt = self.lab.store.resource("batch", "v1", "jobs")
            try:
                job = self.lab.store.get(job_rt, obj["metadata"]["namespace"], ref.get("name", ""))
            except ApiError:
                return None
            if job["metadata"]["uid"] != ref.get("uid"):
                return None
            if (
                self.lab.faults.object_fault("Job", job["metadata"]["namespace"], job["metadata"]["name"])
                == "stuck"
            ):
                return None
            return self._sync(job_rt, job)
        return self._sync(rt, obj)

    def deleted(self, rt: ResourceType, obj: dict) -> None:
        uid = obj["metadata"]["uid"]
        with self._lock:
            runs = [
                r for r in self._runs.values() if (r.pod_uid if rt.plural == "pods" else r.job_uid) == uid
            ]
        for run in runs:
            self._cancel(
                run, "Killing", "the pod was deleted" if rt.plural == "pods" else "the Job was deleted"
            )
        if rt.plural == "jobs":
            self._failed_at.pop(uid, None)

    # --- the Job
    def _sync(self, rt: ResourceType, job: dict) -> float | None:
        meta, spec = job["metadata"], job.get("spec") or {}
        if meta.get("deletionTimestamp"):
            self._cancel_job(meta["uid"], "the Job is being deleted")
            return None
        if _finished(job):
            self._cancel_job(meta["uid"], "the Job has finished")
            return self._expire(rt, job)
        pods = self._pods(job)
        active = [p for p in pods if _phase(p) in ("Pending", "Running")]
        succeeded = sum(1 for p in pods if _phase(p) == "Succeeded")
        failed = sum(1 for p in pods if _phase(p) == "Failed")
        if spec.get("suspend"):
            # A pod the suspension stopped fails while it terminates: that is not a failure of the Job.
            failed = sum(
                1 for p in pods if _phase(p) == "Failed" and not p["metadata"].get("deletionTimestamp")
            )
            for pod in active:  # a suspended Job's pods are deleted, not counted as failures
                self._stop_pod(pod, "the Job was suspended")
                self._delete_pod(pod)
                deleted = f"Deleted pod: {pod['metadata']['name']}"
                record_event(self.lab.store, job, "Normal", "SuccessfulDelete", deleted, COMPONENT)
            self._write_status(rt, job, 0, succeeded, failed, suspended=True)
            return None
        job = self._write_status(rt, job, len(active), succeeded, failed, suspended=False)
        completions = int(spec.get("completions") or 1)
        backoff_limit = int(spec.get("backoffLimit") if spec.get("backoffLimit") is not None else 6)
        if succeeded >= completions:
            return self._finish(
                rt, job, "Complete", "CompletionsReached", "Reached expected number of succeeded pods"
            )
        left = _deadline_left(job)
        if left is not None and left <= 0:
            for pod in active:
                self._stop_pod(pod, "the Job was active longer than specified deadline")
            return self._finish(
                rt, job, "Failed", "DeadlineExceeded", "Job was active longer than specified deadline"
            )
        if failed > backoff_limit:
            return self._finish(
                rt, job, "Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit"
            )
        if not active:
            wait = self._backoff_left(meta["uid"], failed)
            if wait > 0:
                return wait
            active = [self._create_pod(job)]
            job = self._write_status(rt, job, 1, succeeded, failed, suspended=False)
        for pod in active:
            if _phase(pod) == "Pending" and not self._has_run(pod):
                self._start(job, pod)
        return 1.0 if left is None else max(0.05, min(1.0, left))

    def _pods(self, job: dict) -> list[dict]:
        pod_rt = self.lab.store.resource(CORE, "v1", "pods")
        selector = f"batch.kubernetes.io/controller-uid={job['metadata']['uid']}"
        pods = self.lab.store.list(pod_rt, job["metadata"]["namespace"], label_selector=selector)[0]
        return [p for p in pods if (_controller_of(p) or {}).get("uid") == job["metadata"]["uid"]]

    def _backoff_left(self, job_uid: str, failed: int) -> float:
        if not failed:
            return 0.0
        with self._lock:
            last = self._failed_at.get(job_uid)
        if last is None:
            return 0.0
        delay = min(RETRY_BACKOFF_SECONDS * 2 ** (failed - 1), RETRY_BACKOFF_MAX_SECONDS)
        return max(0.0, last + delay - time.monotonic())

    def _write_status(
        self, rt: ResourceType, job: dict, active: int, succeeded: int, failed: int, suspended: bool
    ) -> dict:
        meta = job["metadata"]
        events: list[tuple[str, str, str]] = []

        def counts(obj: dict) -> None:
            status = obj.setdefault("status", {})
            for key, value in (("active", active), ("succeeded", succeeded), ("failed", failed)):
                if value:
                    status[key] = value
                else:
                    status.pop(key, None)  # zero counts are omitted, as the API does
            status["ready"] = sum(1 for r in self._runs_of(meta["uid"]))
            status["terminating"] = 0
            status.setdefault("uncountedTerminatedPods", {})
            cond = condition(obj, "Suspended")
            if suspended:
                if (cond or {}).get("status") != "True":
                    _set_condition(status, "Suspended", "True", "JobSuspended", "Job suspended")
                    events.append(("Normal", "Suspended", "Job suspended"))
                status.pop("startTime", None)
            else:
                if cond is not None and cond.get("status") == "True":
                    _set_condition(status, "Suspended", "False", "JobResumed", "Job resumed")
                    events.append(("Normal", "Resumed", "Job resumed"))
                status.setdefault("startTime", now_rfc3339())

        job = modify(self.lab.store, rt, meta["namespace"], meta["name"], counts, status=True)
        for event in events:
            record_event(self.lab.store, job, *event, COMPONENT)
        return job

    def _finish(self, rt: ResourceType, job: dict, ctype: str, reason: str, message: str) -> float | None:
        meta = job["metadata"]
        self._cancel_job(meta["uid"], message)
        target = "SuccessCriteriaMet" if ctype == "Complete" else "FailureTarget"

        def finish(obj: dict) -> None:
            status = obj.setdefault("status", {})
            _set_condition(status, target, "True", reason, message)
            _set_condition(status, ctype, "True", reason, message)
            status.pop("active", None)
            status["ready"] = 0
            if ctype == "Complete":
                status["completionTime"] = now_rfc3339()

        job = modify(self.lab.store, rt, meta["namespace"], meta["name"], finish, status=True)
        if ctype == "Complete":
            record_event(self.lab.store, job, "Normal", "Completed", "Job completed", COMPONENT)
        else:
            record_event(self.lab.store, job, "Warning", reason, message, COMPONENT)
        return self._expire(rt, job)

    def _expire(self, rt: ResourceType, job: dict) -> float | None:
        """ttlSecondsAfterFinished: the TTL-after-finished controller deletes the Job and its pods."""
        ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
        if ttl is None:
            return None
        finished = [
            c.get("lastTransitionTime")
            for c in (job.get("status") or {}).get("conditions") or ()
            if c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        ]
        if not finished or not finished[0]:
            return None
        at = calendar.timegm(time.strptime(finished[0], "%Y-%m-%dT%H:%M:%SZ"))
        left = at + float(ttl) - time.time()
        if left > 0:
            return left
        try:
            self.lab.store.delete(rt, job["metadata"]["namespace"], job["metadata"]["name"], "Background")
        except ApiError as exc:
            if exc.code != 404:
                raise
        return None

    # --- pods
    def _create_pod(self, job: dict) -> dict:
        meta, template = job["metadata"], clone((job.get("spec") or {}).get("template") or {})
        tmeta = template.get("metadata") or {}
        labels = dict(tmeta.get("labels") or {})
        labels.update(
            {
                "batch.kubernetes.io/controller-uid": meta["uid"],
                "batch.kubernetes.io/job-name": meta["name"],
                "controller-uid": meta["uid"],
                "job-name": meta["name"],
            }
        )
        owner = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        pod_rt = self.lab.store.resource(CORE, "v1", "pods")
        base = meta["name"][:57] + "-"
        for _ in range(20):
            body = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": base + "".join(random.choice(_NAME_CHARS) for _ in range(5)),
                    "namespace": meta["namespace"],
                    "labels": labels,
                    "annotations": dict(tmeta.get("annotations") or {}),
                    "ownerReferences": [owner],
                },
                "spec": template.get("spec") or {},
            }
            try:
                pod = self.lab.store.create(pod_rt, body)
                break
            except ApiError as exc:
                if exc.code != 409:
                    raise
        else:
            raise ApiError(500, "InternalError", f"could not name a pod for Job {meta['name']}")
        created = f"Created pod: {pod['metadata']['name']}"
        record_event(self.lab.store, job, "Normal", "SuccessfulCreate", created, COMPONENT)
        return pod

    def _has_run(self, pod: dict) -> bool:
        with self._lock:
            return pod["metadata"]["uid"] in self._runs

    def _runs_of(self, job_uid: str) -> list[_Run]:
        with self._lock:
            return [r for r in self._runs.values() if r.job_uid == job_uid]

    def _pod_status(self, pod: dict, mutate) -> dict | None:
        pod_rt = self.lab.store.resource(CORE, "v1", "pods")
        meta = pod["metadata"]
        try:
            return modify(self.lab.store, pod_rt, meta["namespace"], meta["name"], mutate, status=True)
        except ApiError as exc:
            if exc.code != 404:
                raise
            return None

    def _bind(self, pod: dict, node: str) -> dict:
        """Assign the pod to the lab's node as a scheduler does: a real API server takes it only through
        the pods/binding subresource (spec.nodeName of an existing pod is immutable)."""
        pod_rt = self.lab.store.resource(CORE, "v1", "pods")
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        reply = self.lab.store.request("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/binding", binding)
        if reply.status >= 300 and reply.status != 409:  # 409: bound already (a resync)
            raise ApiError(reply.status, reply.reason or "", (reply.data or b"").decode("utf-8", "replace"))
        return self.lab.store.get(pod_rt, namespace, name)

    def _start(self, job: dict, pod: dict) -> None:
        """Schedule and start the pod, or leave it Pending with the reason, or fail it at start."""
        jmeta = job["metadata"]
        try:
            if self.lab.faults.object_fault("Job", jmeta["namespace"], jmeta["name"]) == "fail":
                raise StartError("injected failure: the container could not be started")
            plan = plan_pod(self.lab, pod, _timeout(job))
        except PodNotReady as wait:
            self._hold(pod, wait)
            return
        except StartError as exc:
            self._fail_start(job, pod, str(exc))
            return
        container = pod["spec"]["containers"][0]

        if not pod["spec"].get("nodeName"):
            node = place(self.lab, pod["metadata"]["namespace"], pod["spec"])
            pod = self._bind(pod, node)
            node_msg = (
                f"Successfully assigned {pod['metadata']['namespace']}/{pod['metadata']['name']} to {node}"
            )
            record_event(self.lab.store, pod, "Normal", "Scheduled", node_msg, "default-scheduler")
        blocked = multi_attach_error(self.lab, pod)
        if blocked is not None:
            # Scheduled, but the volume is attached elsewhere: ContainerCreating until it is released.
            shutil.rmtree(plan.scratch, ignore_errors=True)
            self._hold(
                pod, PodNotReady("ContainerCreating", blocked, False), ("FailedAttachVolume", ATTACHER)
            )
            return
        run = _Run(
            pod["metadata"]["namespace"], pod["metadata"]["name"], pod["metadata"]["uid"], jmeta["uid"]
        )
        run.thread = threading.Thread(
            target=self._execute, args=(run, pod, container, plan), name=f"lab-pod-{run.pod}", daemon=True
        )
        with self._lock:
            self._runs[run.pod_uid] = run
        run.thread.start()

    def _hold(self, pod: dict, wait: PodNotReady, event: tuple[str, str] | None = None) -> None:
        def pending(obj: dict) -> bool:
            status = obj.setdefault("status", {})
            before = clone(status)
            status["phase"] = "Pending"
            if wait.scheduling:
                _set_condition(status, "PodScheduled", "False", wait.reason, wait.message)
            else:
                name = pod["spec"]["containers"][0].get("name", "") if pod["spec"].get("containers") else ""
                status["containerStatuses"] = [
                    {
                        "name": name,
                        "image": pod["spec"]["containers"][0].get("image", "") if name else "",
                        "ready": False,
                        "restartCount": 0,
                        "started": False,
                        "state": {"waiting": {"reason": wait.reason, "message": wait.message}},
                    }
                ]
            for cond in status.get("conditions") or ():
                before_cond = next(
                    (c for c in before.get("conditions") or () if c["type"] == cond["type"]), None
                )
                if before_cond and {k: v for k, v in before_cond.items() if k != "lastProbeTime"} == {
                    k: v for k, v in cond.items() if k != "lastProbeTime"
                }:
                    cond["lastProbeTime"] = before_cond.get("lastProbeTime")
            return status != before

        pod = self._pod_status(pod, pending)
        if pod is not None:
            reason = "FailedScheduling" if wait.scheduling else "Failed"
            component = "default-scheduler" if wait.scheduling else KUBELET
            reason, component = event or (reason, component)
            record_event(self.lab.store, pod, "Warning", reason, wait.message, component)

    def _fail_start(self, job: dict, pod: dict, message: str) -> None:
        """The container never ran: terminated with StartError, exit code 128, as a runtime reports it."""
        now = now_rfc3339()
        container = (pod["spec"].get("containers") or [{}])[0]

        def failed(obj: dict) -> None:
            obj["status"] = {
                "phase": "Failed",
                "startTime": now,
                "hostIP": "127.0.0.1",
                "conditions": _pod_conditions("False", "PodFailed"),
                "containerStatuses": [
                    {
                        "name": container.get("name", ""),
                        "image": container.get("image", ""),
                        "imageID": "",
                        "ready": False,
                        "started": False,
                        "restartCount": 0,
                        "state": {
                            "terminated": {
                                "exitCode": 128,
                                "reason": "StartError",
                                "message": message,
                                "startedAt": now,
                                "finishedAt": now,
                            }
                        },
                    }
                ],
            }

        with self._lock:
            self._failed_at[job["metadata"]["uid"]] = time.monotonic()
        self.lab.store.set_pod_log(pod["metadata"]["namespace"], pod["metadata"]["name"], message + "\n")
        pod = self._pod_status(pod, failed)
        if pod is not None:
            record_event(self.lab.store, pod, "Warning", "Failed", f"Error: {message}", KUBELET)

    def _stop_pod(self, pod: dict, reason: str) -> None:
        with self._lock:
            run = self._runs.get(pod["metadata"]["uid"])
        if run is not None:
            self._cancel(run, "Killing", reason)
        elif _phase(pod) == "Pending":
            self._pod_status(
                pod, lambda o: o.setdefault("status", {}).update(phase="Failed", reason="DeadlineExceeded")
            )

    def _confirm_deletion(self, pod: dict) -> None:
        """The kubelet's part of a graceful pod deletion: stop the container, then remove the pod.

        The API server only marks a pod bound to a node (deletionTimestamp, a grace period) and waits
        for the node to confirm; the lab is the node of the pods it runs.
        """
        meta = pod["metadata"]
        if not (pod.get("spec") or {}).get("nodeName"):
            return  # never scheduled: the API server removes it at once
        with self._lock:
            runs = [r for r in self._runs.values() if r.pod_uid == meta["uid"]]
        for run in runs:
            self._cancel(run, "Killing", "the pod was deleted")
        for run in runs:
            if run.thread is not None:
                run.thread.join(timeout=10)
        pod_rt = self.lab.store.resource(CORE, "v1", "pods")
        try:
            self.lab.store.delete(
                pod_rt, meta["namespace"], meta["name"], grace_period=0, preconditions={"uid": meta["uid"]}
            )
        except ApiError as exc:
            if exc.code not in (404, 409):
                raise

    def _delete_pod(self, pod: dict) -> None:
        pod_rt = self.lab.store.resource(CORE, "v1", "pods")
        try:
            self.lab.store.delete(pod_rt, pod["metadata"]["namespace"], pod["metadata"]["name"])
        except ApiError as exc:
            if exc.code != 404:
                raise

    def _cancel(self, run: _Run, reason: str, message: str) -> None:
        if not run.cancel.is_set():
            run.cancel_reason = message
            run.cancel.set()

    def _cancel_job(self, job_uid: str, message: str) -> None:
        for run in self._runs_of(job_uid):
            self._cancel(run, "Killing", message)

    # --- the process
    def _execute(self, run: _Run, pod: dict, container: dict, plan: Plan) -> None:
        log_file = plan.scratch / "output.log"
        started = now_rfc3339()
        code: int | None = None
        message = ""
        try:
            with open(log_file, "wb") as out:
                proc = subprocess.Popen(
                    tied(plan.argv),  # killed with the lab, were it killed before it can stop the pod
                    cwd=plan.cwd,
                    env=plan.env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self._running(run, pod, container, proc.pid, started)
            code, message = self._wait(run, proc, plan, log_file)
        except OSError as exc:
            code, message = 128, f"failed to start the container process: {exc}"
            log_file.write_text(message + "\n")
        except Exception as exc:  # the pod must not stay Running forever
            code, message = 128, f"lab runner error: {exc}"
        finally:
            self._terminated(run, pod, container, code, message, started, plan, log_file)
            shutil.rmtree(plan.scratch, ignore_errors=True)
            with self._lock:
                self._runs.pop(run.pod_uid, None)

    def _running(self, run: _Run, pod: dict, container: dict, pid: int, started: str) -> None:
        def running(obj: dict) -> None:
            obj["status"] = {
                "phase": "Running",
                "startTime": started,
                "hostIP": "127.0.0.1",
                "podIP": "127.0.0.1",
                "podIPs": [{"ip": "127.0.0.1"}],
                "conditions": _pod_conditions("True", ""),
                "containerStatuses": [
                    {
                        "name": container.get("name", ""),
                        "image": container.get("image", ""),
                        "imageID": "",
                        "containerID": f"lab://{pid}",
                        "ready": True,
                        "started": True,
                        "restartCount": 0,
                        "state": {"running": {"startedAt": started}},
                    }
                ],
            }

        pod = self._pod_status(pod, running) or pod
        name = container.get("name", "")
        record_event(self.lab.store, pod, "Normal", "Started", f"Started container {name}", KUBELET)

    def _wait(self, run: _Run, proc: subprocess.Popen, plan: Plan, log_file: pathlib.Path) -> tuple[int, str]:
        deadline = time.monotonic() + plan.timeout
        next_check = time.monotonic() + 1.0
        pod_rt = self.lab.store.resource(CORE, "v1", "pods")
        while True:
            try:
                return proc.wait(timeout=0.1), ""
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            if run.cancel.is_set():
                _kill(proc)
                return 137, run.cancel_reason
            if now >= deadline:
                _kill(proc)
                return 137, f"the container ran longer than {plan.timeout:.0f}s and was killed"
            if now >= next_check:  # publish the log so far; a deleted pod stops its process
                next_check = now + 1.0
                if self.lab.store.exists(pod_rt, run.namespace, run.pod):
                    self.lab.store.set_pod_log(
                        run.namespace, run.pod, plan.as_seen_in_pod(_read_log(log_file))
                    )
                else:
                    run.cancel.set()

    def _terminated(
        self,
        run: _Run,
        pod: dict,
        container: dict,
        code: int | None,
        message: str,
        started: str,
        plan: Plan,
        log_file: pathlib.Path,
    ) -> None:
        code = 128 if code is None else code
        code = 128 + (-code) if code < 0 else code  # killed by a signal, as a container runtime reports it
        finished = now_rfc3339()
        log = plan.as_seen_in_pod(_read_log(log_file)) if log_file.exists() else ""
        if message and code != 0:
            log += ("" if not log or log.endswith("\n") else "\n") + message + "\n"
        pod_rt = self.lab.store.resource(CORE, "v1", "pods")
        if not self.lab.store.exists(pod_rt, run.namespace, run.pod):
            return
        self.lab.store.set_pod_log(run.namespace, run.pod, log)
        if code != 0:
            with self._lock:
                self._failed_at[run.job_uid] = time.monotonic()
        terminated = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": started,
            "finishedAt": finished,
            "containerID": (pod.get("status") or {}).get("containerStatuses", [{}])[0].get("containerID", ""),
        }
        if message:
            terminated["message"] = message

        def done(obj: dict) -> None:
            status = obj.setdefault("status", {})
            status["phase"] = "Succeeded" if code == 0 else "Failed"
            status["conditions"] = _pod_conditions("False", "PodCompleted" if code == 0 else "PodFailed")
            status.setdefault("startTime", started)
            statuses = status.get("containerStatuses") or [
                {
                    "name": container.get("name", ""),
                    "image": container.get("image", ""),
                    "imageID": "",
                    "restartCount": 0,
                }
            ]
            statuses[0].update(ready=False, started=False, state={"terminated": terminated})
            statuses[0]["containerID"] = statuses[0].get("containerID") or terminated["containerID"]
            status["containerStatuses"] = statuses

        self._pod_status(pod, done)


def _pod_conditions(ready: str, reason: str) -> list[dict]:
    now = now_rfc3339()
    out = []
    for ctype in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"):
        value = ready if ctype in ("Ready", "ContainersReady") else "True"
        cond = {"type": ctype, "status": value, "lastProbeTime": None, "lastTransitionTime": now}
        if value == "False" and reason:
            cond["reason"] = reason
        out.append(cond)
    return out


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _read_log(path: pathlib.Path) -> str:
    size = path.stat().st_size
    with open(path, "rb") as handle:
        if size > LOG_LIMIT_BYTES:
            handle.seek(size - LOG_LIMIT_BYTES)
        return handle.read().decode(errors="replace")


CONTROLLERS = [JobRunner]

__all__ = [
    "ALLOWED_COMMANDS",
    "CONTROLLERS",
    "DEFAULT_TIMEOUT_SECONDS",
    "JobRunner",
    "allowed_commands",
    "rewrite_arg",
]
