"""The lab's Job runner: real processes, volumes mapped to real files, pod logs, Job conditions."""

from __future__ import annotations

import base64
import hashlib
import os
import pathlib
import shutil
import subprocess
import time

import pytest

from tests.lab.controllers import jobs
from tests.lab.controllers.jobs import rewrite_arg
from tests.lab.controllers.kit import modify
from tests.lab.controllers.storage import volume_path

from .conftest import until

MIB = 1024 * 1024


def job_body(name: str, command: list[str], backoff: int = 0, **pod) -> dict:
    container = {"name": "main", "image": "quay.io/lab/tools:1", "command": command}
    container.update(pod.pop("container", {}))
    spec = {"restartPolicy": "Never", "containers": [container], **pod}
    return {"metadata": {"name": name}, "spec": {"backoffLimit": backoff, "template": {"spec": spec}}}


def claim(name: str, size: str, mode: str = "Filesystem", sc: str = "lab-fs") -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "volumeMode": mode,
            "storageClassName": sc,
            "resources": {"requests": {"storage": size}},
        },
    }


def cond(job: dict, ctype: str) -> dict | None:
    return next((c for c in (job.get("status") or {}).get("conditions") or () if c["type"] == ctype), None)


def finished(job: dict) -> bool:
    return any((cond(job, t) or {}).get("status") == "True" for t in ("Complete", "Failed"))


def job_pods(mini, job_name: str) -> list[dict]:
    pods, _ = mini.store.list(mini.rt("", "pods"), mini.namespace, label_selector=f"job-name={job_name}")
    return sorted(pods, key=lambda p: p["metadata"]["creationTimestamp"] + p["metadata"]["resourceVersion"])


def log_of(mini, pod: dict) -> str:
    return mini.store.pod_log(mini.namespace, pod["metadata"]["name"])


@pytest.fixture(scope="module", autouse=True)
def qemu_img():
    if shutil.which("qemu-img") is None:
        subprocess.run(["apt-get", "install", "-y", "qemu-utils"], check=True, capture_output=True)
    assert shutil.which("qemu-img")


def test_rewrite_arg_maps_paths_under_mounts():
    mounts = [
        ("/data/sub", pathlib.Path("/real/b")),
        ("/data", pathlib.Path("/real/a")),
        ("/dev/xvda", pathlib.Path("/v/x.img")),
    ]
    assert rewrite_arg("/data/disk.img", mounts) == "/real/a/disk.img"
    assert rewrite_arg("/data/sub/f", mounts) == "/real/b/f"
    assert rewrite_arg("/data", mounts) == "/real/a"
    assert rewrite_arg("/database", mounts) == "/database"
    assert rewrite_arg("of=/dev/xvda", mounts) == "of=/v/x.img"
    assert rewrite_arg("--target=/data/x", mounts) == "--target=/real/a/x"
    assert rewrite_arg("-O", mounts) == "-O"


def test_successful_job_runs_a_real_process(mini):
    mini.create(
        "batch",
        "jobs",
        job_body("hello", ["echo", "hello", "$(WHO)"], container={"env": [{"name": "WHO", "value": "lab"}]}),
    )
    job = mini.wait("batch", "jobs", "hello", finished)
    assert cond(job, "Complete")["status"] == "True"
    assert cond(job, "Complete")["reason"] == "CompletionsReached"
    assert cond(job, "SuccessCriteriaMet")["status"] == "True"
    assert job["status"]["succeeded"] == 1 and "active" not in job["status"] and "failed" not in job["status"]
    assert job["status"]["startTime"] and job["status"]["completionTime"]
    (pod,) = job_pods(mini, "hello")
    meta = pod["metadata"]
    assert meta["name"].startswith("hello-") and len(meta["name"]) == len("hello-") + 5
    assert meta["labels"]["job-name"] == "hello"
    assert meta["labels"]["batch.kubernetes.io/job-name"] == "hello"
    assert meta["labels"]["controller-uid"] == job["metadata"]["uid"]
    owner = meta["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "Job",
        "hello",
        job["metadata"]["uid"],
        True,
    )
    assert pod["status"]["phase"] == "Succeeded"
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 0 and terminated["reason"] == "Completed"
    assert log_of(mini, pod) == "hello lab\n"
    reasons = [e["reason"] for e in mini.events("hello")]
    assert reasons == ["SuccessfulCreate", "Completed"]
    assert [e["reason"] for e in mini.events(meta["name"])] == ["Scheduled", "Started"]


def test_failing_command_retries_until_the_backoff_limit(mini):
    mini.create("batch", "jobs", job_body("broken", ["cat", "/nonexistent/file"], backoff=2))
    job = mini.wait("batch", "jobs", "broken", finished, timeout=20)
    failed = cond(job, "Failed")
    assert failed["status"] == "True" and failed["reason"] == "BackoffLimitExceeded"
    assert failed["message"] == "Job has reached the specified backoff limit"
    assert cond(job, "FailureTarget")["reason"] == "BackoffLimitExceeded"
    assert job["status"]["failed"] == 3
    assert "completionTime" not in job["status"] and cond(job, "Complete") is None
    pods = job_pods(mini, "broken")
    assert len(pods) == 3 and len({p["metadata"]["name"] for p in pods}) == 3
    for pod in pods:
        assert pod["status"]["phase"] == "Failed"
        terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
        assert terminated["exitCode"] == 1 and terminated["reason"] == "Error"
        assert "No such file or directory" in log_of(mini, pod)
    assert mini.events("broken", "BackoffLimitExceeded")[0]["type"] == "Warning"


def test_disallowed_command_is_refused(mini):
    mini.create("batch", "jobs", job_body("shell", ["/bin/sh", "-c", "echo pwned > /tmp/x"]))
    job = mini.wait("batch", "jobs", "shell", finished)
    assert cond(job, "Failed")["reason"] == "BackoffLimitExceeded"
    (pod,) = job_pods(mini, "shell")
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["reason"] == "StartError" and terminated["exitCode"] == 128
    assert 'command "sh" is not allowed in the lab' in terminated["message"]
    assert "not allowed" in log_of(mini, pod)
    assert "not allowed" in mini.events(pod["metadata"]["name"], "Failed")[0]["message"]


def test_allow_list_can_be_extended_per_lab(mini):
    mini.create("batch", "jobs", job_body("counted", ["wc", "-c", "/etc/hostname"]))
    job = mini.wait("batch", "jobs", "counted", finished)
    assert cond(job, "Failed") is not None
    mini.context.allowed_commands = {"wc"}
    mini.create("batch", "jobs", job_body("counted-again", ["wc", "-c", "/etc/hostname"]))
    job = mini.wait("batch", "jobs", "counted-again", finished)
    assert cond(job, "Complete") is not None
    assert "wc" not in jobs.ALLOWED_COMMANDS


def test_qemu_img_convert_into_a_block_claim(mini):
    mini.create("", "persistentvolumeclaims", claim("work", "256Mi"))
    mini.create("", "persistentvolumeclaims", claim("target", "64Mi", "Block", sc="lab-wffc"))
    work = mini.wait("", "persistentvolumeclaims", "work", lambda o: o["status"]["phase"] == "Bound")
    payload = os.urandom(MIB) + b"\0" * (3 * MIB) + os.urandom(4096)
    (volume_path(mini.context, work) / "source.raw").write_bytes(payload)
    volumes = [
        {"name": "work", "persistentVolumeClaim": {"claimName": "work"}},
        {"name": "target", "persistentVolumeClaim": {"claimName": "target"}},
    ]
    mounts = {"volumeMounts": [{"name": "work", "mountPath": "/work"}]}
    to_qcow2 = ["qemu-img", "convert", "-f", "raw", "-O", "qcow2", "/work/source.raw", "/work/disk.qcow2"]
    mini.create("batch", "jobs", job_body("to-qcow2", to_qcow2, volumes=volumes[:1], container=mounts))
    assert cond(mini.wait("batch", "jobs", "to-qcow2", finished), "Complete")
    info = subprocess.run(
        ["qemu-img", "info", "--output=json", str(volume_path(mini.context, work) / "disk.qcow2")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert '"format": "qcow2"' in info.stdout

    # the Block claim waits for its first consumer: this Job
    target = mini.get("", "persistentvolumeclaims", "target")
    assert target["status"]["phase"] == "Pending"
    devices = dict(mounts, volumeDevices=[{"name": "target", "devicePath": "/dev/xvdb"}])
    to_block = ["qemu-img", "convert", "-n", "-f", "qcow2", "-O", "raw", "/work/disk.qcow2", "/dev/xvdb"]
    mini.create("batch", "jobs", job_body("to-block", to_block, volumes=volumes, container=devices))
    job = mini.wait("batch", "jobs", "to-block", finished, timeout=20)
    assert cond(job, "Complete"), job_pods(mini, "to-block")
    target = mini.get("", "persistentvolumeclaims", "target")
    assert target["status"]["phase"] == "Bound"
    block = volume_path(mini.context, target)
    assert block.stat().st_size == 64 * MIB
    with open(block, "rb") as handle:
        assert handle.read(len(payload)) == payload

    check = ["sha256sum", "/dev/xvdb"]
    mini.create(
        "batch",
        "jobs",
        job_body(
            "checksum", check, volumes=volumes[1:], container={"volumeDevices": devices["volumeDevices"]}
        ),
    )
    mini.wait("batch", "jobs", "checksum", finished)
    (pod,) = job_pods(mini, "checksum")
    digest = hashlib.sha256(block.read_bytes()).hexdigest()
    assert log_of(mini, pod).split()[0] == digest


def test_dd_writes_through_a_device_path(mini):
    mini.create("", "persistentvolumeclaims", claim("raw", "8Mi", "Block"))
    command = ["dd", "if=/dev/zero", "of=/dev/disk", "bs=1M", "count=2", "seek=1", "conv=notrunc,sparse"]
    body = job_body(
        "zero",
        command,
        volumes=[{"name": "disk", "persistentVolumeClaim": {"claimName": "raw"}}],
        container={"volumeDevices": [{"name": "disk", "devicePath": "/dev/disk"}]},
    )
    mini.create("batch", "jobs", body)
    assert cond(mini.wait("batch", "jobs", "zero", finished), "Complete")
    (pod,) = job_pods(mini, "zero")
    assert "2097152 bytes" in log_of(mini, pod)
    assert volume_path(mini.context, mini.get("", "persistentvolumeclaims", "raw")).stat().st_size == 8 * MIB


def test_env_from_a_secret_and_a_config_map_volume(mini):
    secret = {"metadata": {"name": "creds"}, "data": {"token": base64.b64encode(b"s3cr3t").decode()}}
    mini.create("", "secrets", secret)
    mini.create("", "configmaps", {"metadata": {"name": "settings"}, "data": {"mode": "fast\n"}})
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}]
    mini.create(
        "batch",
        "jobs",
        job_body("secret-env", ["echo", "token=$(TOKEN)", "$$(TOKEN)"], container={"env": env}),
    )
    body = job_body(
        "config-file",
        ["cat", "/etc/app/mode"],
        volumes=[{"name": "cfg", "configMap": {"name": "settings"}}],
        container={"volumeMounts": [{"name": "cfg", "mountPath": "/etc/app"}]},
    )
    mini.create("batch", "jobs", body)
    for name, expected in (("secret-env", "token=s3cr3t $(TOKEN)\n"), ("config-file", "fast\n")):
        assert cond(mini.wait("batch", "jobs", name, finished), "Complete")
        (pod,) = job_pods(mini, name)
        assert log_of(mini, pod) == expected


def test_missing_secret_keeps_the_pod_pending(mini):
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "token"}}}]
    mini.create("batch", "jobs", job_body("waits", ["true"], container={"env": env}))
    until(lambda: job_pods(mini, "waits"), what="a pod")
    pod_name = job_pods(mini, "waits")[0]["metadata"]["name"]
    pod = mini.wait(
        "", "pods", pod_name, lambda p: (p["status"].get("containerStatuses") or [{}])[0].get("state")
    )
    waiting = pod["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting["reason"] == "CreateContainerConfigError"
    mini.create("", "secrets", {"metadata": {"name": "absent"}, "stringData": {"token": "now"}})
    assert cond(mini.wait("batch", "jobs", "waits", finished), "Complete")


def test_unbound_claim_keeps_the_pod_unschedulable(mini):
    body = job_body(
        "needs-disk", ["true"], volumes=[{"name": "v", "persistentVolumeClaim": {"claimName": "later"}}]
    )
    mini.create("batch", "jobs", body)
    until(lambda: job_pods(mini, "needs-disk"), what="a pod")
    pod_name = job_pods(mini, "needs-disk")[0]["metadata"]["name"]
    pod = mini.wait(
        "",
        "pods",
        pod_name,
        lambda p: any(c["type"] == "PodScheduled" for c in p["status"].get("conditions") or ()),
    )
    scheduled = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert (
        scheduled["status"] == "False" and 'persistentvolumeclaim "later" not found' in scheduled["message"]
    )
    # The scheduler records its event after it writes the condition.
    until(lambda: mini.events(pod_name, "FailedScheduling"), what="the FailedScheduling event")
    mini.create("", "persistentvolumeclaims", claim("later", "1Mi"))
    assert cond(mini.wait("batch", "jobs", "needs-disk", finished), "Complete")


def test_fail_fault_fails_pods_without_running_them(mini, tmp_path):
    marker = tmp_path / "ran"
    mini.faults.set_object(f"Job/{mini.namespace}/faulty", "fail")
    mini.create("batch", "jobs", job_body("faulty", ["truncate", "-s", "1", str(marker)], backoff=1))
    job = mini.wait("batch", "jobs", "faulty", finished)
    assert cond(job, "Failed")["reason"] == "BackoffLimitExceeded"
    assert len(job_pods(mini, "faulty")) == 2
    assert not marker.exists()
    assert "injected failure" in log_of(mini, job_pods(mini, "faulty")[0])


def test_stuck_fault_leaves_the_job_alone(mini):
    mini.faults.set_object(f"Job/{mini.namespace}/frozen", "stuck")
    mini.create("batch", "jobs", job_body("frozen", ["true"]))
    with pytest.raises(AssertionError):
        until(lambda: job_pods(mini, "frozen"), timeout=1.5)
    mini.faults.set_object(f"Job/{mini.namespace}/frozen", None)
    assert cond(mini.wait("batch", "jobs", "frozen", finished), "Complete")


def test_deleting_the_job_kills_its_process(mini):
    mini.create("batch", "jobs", job_body("sleeper", ["sleep", "300"]))
    until(lambda: any(p["status"]["phase"] == "Running" for p in job_pods(mini, "sleeper")), what="running")
    (pod,) = job_pods(mini, "sleeper")
    pid = int(pod["status"]["containerStatuses"][0]["containerID"].removeprefix("lab://"))
    os.kill(pid, 0)
    mini.delete("batch", "jobs", "sleeper", "Background")
    until(lambda: not os.path.exists(f"/proc/{pid}") or "zombie" in _proc_state(pid), 15, "process killed")
    mini.wait_gone("", "pods", pod["metadata"]["name"])


def test_stopping_the_runner_kills_running_processes(mini):
    mini.create("batch", "jobs", job_body("left-running", ["sleep", "300"]))
    until(
        lambda: any(p["status"]["phase"] == "Running" for p in job_pods(mini, "left-running")), what="running"
    )
    (pod,) = job_pods(mini, "left-running")
    pid = int(pod["status"]["containerStatuses"][0]["containerID"].removeprefix("lab://"))
    runner = next(c for c in mini.controllers if isinstance(c, jobs.JobRunner))
    runner.stop()
    assert not os.path.exists(f"/proc/{pid}") or "zombie" in _proc_state(pid)
    pod = mini.get("", "pods", pod["metadata"]["name"])
    assert pod["status"]["phase"] == "Failed"
    assert "the lab is stopping" in log_of(mini, pod)


def _proc_state(pid: int) -> str:
    try:
        return pathlib.Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return "zombie"


def test_active_deadline_fails_the_job(mini):
    # The deadline is shortened once the pod runs (activeDeadlineSeconds is mutable): a deadline that
    # runs out before the pod starts fails the Job with no pod at all, as Kubernetes does.
    body = job_body("slow", ["sleep", "300"])
    body["spec"]["activeDeadlineSeconds"] = 300
    mini.create("batch", "jobs", body)
    until(lambda: any(p["status"]["phase"] == "Running" for p in job_pods(mini, "slow")), what="running")
    (pod,) = job_pods(mini, "slow")
    mini.store.patch(
        mini.rt("batch", "jobs"), mini.namespace, "slow", "merge", {"spec": {"activeDeadlineSeconds": 1}}
    )
    job = mini.wait("batch", "jobs", "slow", finished, timeout=15)
    failed = cond(job, "Failed")
    assert failed["reason"] == "DeadlineExceeded"
    assert failed["message"] == "Job was active longer than specified deadline"
    pod = mini.wait("", "pods", pod["metadata"]["name"], lambda p: p["status"]["phase"] == "Failed")
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137


def test_suspended_job_waits(mini):
    body = job_body("paused", ["true"])
    body["spec"]["suspend"] = True
    mini.create("batch", "jobs", body)
    job = mini.wait("batch", "jobs", "paused", lambda j: (cond(j, "Suspended") or {}).get("status") == "True")
    assert not job_pods(mini, "paused")
    job["spec"]["suspend"] = False
    mini.store.update(mini.rt("batch", "jobs"), job)
    job = mini.wait("batch", "jobs", "paused", finished)
    assert cond(job, "Complete") and cond(job, "Suspended")["status"] == "False"


def test_suspending_a_running_job_deletes_its_pod(mini):
    mini.create("batch", "jobs", job_body("interrupted", ["sleep", "300"]))
    until(
        lambda: any(p["status"]["phase"] == "Running" for p in job_pods(mini, "interrupted")), what="running"
    )
    (pod,) = job_pods(mini, "interrupted")
    # Read-modify-write as a client does: the controller writes the Job's status meanwhile (a 409).
    modify(
        mini.store,
        mini.rt("batch", "jobs"),
        mini.namespace,
        "interrupted",
        lambda j: j["spec"].update(suspend=True),
    )
    mini.wait_gone("", "pods", pod["metadata"]["name"])
    job = mini.wait(
        "batch", "jobs", "interrupted", lambda j: (cond(j, "Suspended") or {}).get("status") == "True"
    )
    assert "failed" not in job["status"] and "active" not in job["status"]
    assert mini.events("interrupted", "SuccessfulDelete")


def test_finished_job_is_deleted_after_its_ttl(mini):
    body = job_body("brief", ["true"])
    body["spec"]["ttlSecondsAfterFinished"] = 0
    mini.create("batch", "jobs", body)
    mini.wait_gone("batch", "jobs", "brief")


# ------------------------------------------------------------------ through the API server


def poll(read, check, timeout: float = 30):
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        last = read()
        if check(last):
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out; last seen: {last}")


def api_finished(job) -> bool:
    return any(c.type in ("Complete", "Failed") and c.status == "True" for c in job.status.conditions or ())


@pytest.mark.lab_only
def test_qemu_img_job_through_the_api(lab, kube_client, kube_namespace):
    from kubernetes import client

    core, batch = client.CoreV1Api(kube_client), client.BatchV1Api(kube_client)
    ns = kube_namespace
    core.create_namespaced_persistent_volume_claim(ns, claim("scratch", "64Mi", sc="lab-wffc"))
    pvc = core.read_namespaced_persistent_volume_claim("scratch", ns)
    assert pvc.status.phase == "Pending"
    body = job_body(
        "make-disk",
        ["qemu-img", "create", "-f", "qcow2", "/data/disk.qcow2", "32M"],
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "scratch"}}],
        container={"volumeMounts": [{"name": "data", "mountPath": "/data"}]},
    )
    batch.create_namespaced_job(ns, body)
    job = poll(lambda: batch.read_namespaced_job("make-disk", ns), api_finished)
    assert [c.type for c in job.status.conditions if c.status == "True"] == ["SuccessCriteriaMet", "Complete"]
    assert job.status.succeeded == 1 and job.status.completion_time is not None

    pods = core.list_namespaced_pod(ns, label_selector="job-name=make-disk").items
    assert len(pods) == 1 and pods[0].status.phase == "Succeeded"
    log = core.read_namespaced_pod_log(pods[0].metadata.name, ns)
    assert log.startswith("Formatting '/data/disk.qcow2', fmt=qcow2")  # paths as the container sees them

    pvc = core.read_namespaced_persistent_volume_claim("scratch", ns)
    assert pvc.status.phase == "Bound"
    # A CSI volume: the lab's volume store has its bytes, the PersistentVolume does not say where.
    pv = lab.store.get(lab.store.resource("", "v1", "persistentvolumes"), None, pvc.spec.volume_name)
    image = volume_path(lab.controller_manager.lab, pv) / "disk.qcow2"
    info = subprocess.run(
        ["qemu-img", "info", "--output=json", str(image)], capture_output=True, text=True, check=True
    )
    assert '"virtual-size": 33554432' in info.stdout

    events = [e for e in core.list_namespaced_event(ns).items if e.involved_object.name == "make-disk"]
    assert {"SuccessfulCreate", "Completed"} <= {e.reason for e in events}


@pytest.mark.lab_only
def test_failing_job_through_the_api(lab, kube_client, kube_namespace):
    from kubernetes import client

    core, batch = client.CoreV1Api(kube_client), client.BatchV1Api(kube_client)
    ns = kube_namespace
    batch.create_namespaced_job(ns, job_body("bad-image", ["qemu-img", "info", "/no/such.qcow2"], backoff=1))
    job = poll(lambda: batch.read_namespaced_job("bad-image", ns), api_finished)
    failed = next(c for c in job.status.conditions if c.type == "Failed")
    assert failed.reason == "BackoffLimitExceeded" and job.status.failed == 2
    for pod in core.list_namespaced_pod(ns, label_selector="job-name=bad-image").items:
        assert "Could not open '/no/such.qcow2'" in core.read_namespaced_pod_log(pod.metadata.name, ns)
