"""The claim Job's layout, the one qemu-img conversion, how a Job ended, and qemu-img's percent."""

import datetime

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import jobs


def claim(name, mode=None):
    spec = {"volumeMode": mode} if mode else {}
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": spec}


def test_claims_are_presented_by_their_volume_mode():
    image, mount, device = jobs.present(
        {"name": "source", "path": "/source", "file": "disk.img", "read_only": True}, claim("a")
    )
    assert (image, mount, device) == (
        "/source/disk.img",
        {"name": "source", "mountPath": "/source", "readOnly": True},
        None,
    )
    image, mount, device = jobs.present({"name": "dest", "path": "/dev/dest"}, claim("b", "Block"))
    assert (image, mount, device) == ("/dev/dest", None, {"name": "dest", "devicePath": "/dev/dest"})
    with pytest.raises(Refusal, match="PersistentVolumeClaim ns/c: it is a Filesystem volume"):
        jobs.present({"name": "dest", "path": "/dest"}, claim("c"))


def test_the_one_conversion():
    assert jobs.convert_command("/source/disk.img", "/dev/dest", "raw", dest_is_device=True) == [
        "qemu-img",
        "convert",
        "-p",
        "-f",
        "raw",
        "-O",
        "raw",
        "-n",
        "/source/disk.img",
        "/dev/dest",
    ]
    assert jobs.convert_command("/dev/source", "/dest/x.qcow2", "qcow2", compress=True) == [
        "qemu-img",
        "convert",
        "-p",
        "-f",
        "raw",
        "-O",
        "qcow2",
        "-c",
        "/dev/source",
        "/dest/x.qcow2",
    ]
    with pytest.raises(Refusal, match="only a qcow2 output can be compressed"):
        jobs.convert_command("a", "b", "raw", compress=True)


def test_job_definition_mounts_and_devices():
    src = (
        {"name": "source", "read_only": True},
        claim("imp"),
        {"name": "source", "mountPath": "/source", "readOnly": True},
        None,
    )
    dst = ({"name": "dest"}, claim("disk", "Block"), None, {"name": "dest", "devicePath": "/dev/dest"})
    job = jobs.job_definition("j", "ns", {"a": "b"}, "img", ["qemu-img"], [src, dst], 30, 2)
    pod = job["spec"]["template"]["spec"]
    assert job["spec"]["activeDeadlineSeconds"] == 30 and job["spec"]["backoffLimit"] == 2
    assert pod["volumes"] == [
        {"name": "source", "persistentVolumeClaim": {"claimName": "imp", "readOnly": True}},
        {"name": "dest", "persistentVolumeClaim": {"claimName": "disk"}},
    ]
    container = pod["containers"][0]
    assert container["volumeDevices"] == [{"name": "dest", "devicePath": "/dev/dest"}]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_outcome_counts_and_progress():
    running = {"status": {"active": 1}}
    failed = {
        "status": {
            "failed": 2,
            "conditions": [
                {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "too many"}
            ],
        }
    }
    assert jobs.outcome(running) == ("", None)
    assert jobs.outcome(failed)[0] == "Failed"
    log = "    (0.00/100%)\r    (12.50/100%)\r    (45.20/100%)\r"
    assert jobs.log_progress(log) == "45.20%" and jobs.log_progress("") is None
    assert (
        jobs.line("ns", "j", running, "45.20%", 3)
        == "Job ns/j: running, active=1 succeeded=0 failed=0, progress 45.20% after 3.0s"
    )
    msg = jobs.failed_message("ns", "j", failed, "qemu-img: Could not open\n", "No golden was made.")
    assert (
        msg == "Job ns/j failed: BackoffLimitExceeded: too many. No golden was made. "
        "Log of the last pod: qemu-img: Could not open"
    )


def test_an_export_only_ever_claims_objects_carrying_its_mark():
    ours = {"kind": "ConfigMap", "metadata": {"name": "x", "labels": {jobs.EXPORT_MARK: "x"}}}
    other_job = {"kind": "ConfigMap", "metadata": {"name": "x", "labels": {jobs.EXPORT_MARK: "y"}}}
    foreign = {"kind": "PersistentVolumeClaim", "metadata": {"name": "x-scratch", "labels": {}}}
    assert jobs.is_export_object(ours, "x") and not jobs.is_export_object(other_job, "x")
    jobs.refuse_foreign_objects([None, ours], "x", "ns")  # absent or ours: go on
    with pytest.raises(Refusal) as caught:
        jobs.refuse_foreign_objects([foreign, other_job], "x", "ns")
    assert caught.value.msg.startswith("PersistentVolumeClaim ns/x-scratch, ConfigMap ns/x: it exists")
    assert caught.value.msg.endswith("give the export another name; nothing was written")


def test_a_claim_that_is_not_there_is_refused_naming_it_and_its_role():
    claim = {"metadata": {"name": "disk"}}
    assert jobs.require_claim(claim, "ns", "disk", "create it first") is claim
    with pytest.raises(Refusal) as caught:
        jobs.require_claim(None, "ns", "disk", "give the claim of the sealed disk")
    assert (
        caught.value.msg
        == "PersistentVolumeClaim ns/disk: it does not exist; give the claim of the sealed disk"
    )
    with pytest.raises(Refusal) as caught:
        jobs.require_claim(None, "ns", "imp", "create it first", "source", "nothing to convert from")
    assert (
        caught.value.msg == "PersistentVolumeClaim ns/imp (source): nothing to convert from; create it first"
    )


def test_an_export_name_leaves_room_and_its_scratch_claim_holds_something():
    jobs.check_export_request("x" * jobs.EXPORT_MAX_NAME, "80Gi", 80 * 2**30)
    with pytest.raises(Refusal, match=r"option name .*: it is longer than 56 characters; shorten it"):
        jobs.check_export_request("x" * (jobs.EXPORT_MAX_NAME + 1), "80Gi", 80 * 2**30)
    with pytest.raises(Refusal, match=r"option scratch_size \(0\): an empty scratch claim holds no qcow2"):
        jobs.check_export_request("exp", "0", 0)


def test_the_export_secret_holds_the_named_keys():
    def secret(**data):
        return {"data": data}

    ref = jobs.export_secret(
        "ns", "s3", secret(accessKeyId="a", secretKey="b"), "accessKeyId", "secretKey", "tok"
    )
    assert ref == {
        "name": "s3",
        "access_key": "accessKeyId",
        "secret_key": "secretKey",
        "session_token": None,
    }
    with_token = jobs.export_secret(
        "ns", "s3", {"stringData": {"a": "1", "b": "2", "tok": "3"}}, "a", "b", "tok"
    )
    assert with_token["session_token"] == "tok"
    with pytest.raises(Refusal, match="Secret ns/s3: it does not exist; create it with the bucket's"):
        jobs.export_secret("ns", "s3", None, "a", "b", "t")
    with pytest.raises(Refusal) as caught:
        jobs.export_secret("ns", "s3", secret(user="x"), "accessKeyId", "secretKey", "t")
    assert caught.value.msg.startswith("Secret ns/s3: it has no key accessKeyId and no key secretKey; add")


def marked(kind, name, mark="exp"):
    return {"kind": kind, "metadata": {"name": name, "labels": {jobs.EXPORT_MARK: mark} if mark else {}}}


def test_the_end_of_an_export_deletes_only_its_own_unused_objects():
    user = {"kind": "Pod", "namespace": "ns", "name": "vm-launcher", "why": "mounts it"}
    assert jobs.export_leftover(None, "exp", []) == ("gone", None)
    assert jobs.export_leftover(marked("ConfigMap", "exp", mark="other"), "exp", []) == ("alone", None)
    assert jobs.export_leftover(marked("ConfigMap", "exp", mark=None), "exp", []) == ("alone", None)
    assert jobs.export_leftover(marked("ConfigMap", "exp"), "exp", []) == ("delete", None)
    verdict, why = jobs.export_leftover(marked("PersistentVolumeClaim", "exp-scratch"), "exp", [user])
    assert verdict == "in use" and why.startswith("in use: ") and "vm-launcher" in why
    # Who uses it could not be read: it is kept, saying why.
    assert jobs.export_leftover(marked("ConfigMap", "exp"), "exp", None, "forbidden") == (
        "in use",
        "in use: who uses it could not be read (forbidden)",
    )


def test_the_leftover_note_gives_the_command_for_what_nothing_uses():
    left = [
        {"kind": "ConfigMap", "name": "exp", "error": "timed out"},
        {"kind": "PersistentVolumeClaim", "name": "exp-scratch", "error": "in use: Pod ns/x", "in_use": True},
    ]
    assert jobs.export_leftover_note("ns", left) == (
        "could not delete ConfigMap ns/exp (timed out), "
        "PersistentVolumeClaim ns/exp-scratch (in use: Pod ns/x)"
        "; remove them with: kubectl -n ns delete configmap/exp"
    )
    assert "kubectl" not in jobs.export_leftover_note("ns", left[1:])


def test_the_export_programs_last_phase_and_its_pods():
    log = "phase convert: qcow2\n    (12.00/100%)\nphase upload: 3 parts\nuploaded part 1\n"
    assert jobs.log_phase(log) == "upload"
    assert jobs.log_phase("no phase yet") is None and jobs.log_phase(None) is None
    pod = marked("Pod", "exp-abcde")
    pod["metadata"]["labels"]["job-name"] = "exp"
    assert jobs.is_export_pod(pod, "exp") and not jobs.is_export_pod(marked("Pod", "exp-x"), "exp")
    assert jobs.export_pod_selector("exp") == "job-name=exp,%s=exp" % jobs.EXPORT_MARK


def test_the_export_objects_are_the_scratch_claim_the_program_and_the_job():
    p = {
        "name": "exp",
        "namespace": "ns",
        "labels": {"team": "a"},
        "file": "disk.img",
        "scratch_size": "10Gi",
        "scratch_storage_class": "",
        "key": "goldens/win.qcow2",
        "pod_endpoint_url": None,
        "endpoint_url": "http://s3.example:9000",
        "region": None,
        "bucket": "b",
        "concurrency": 4,
        "content_type": "application/x-qemu-disk",
        "source": None,
        "pvc": "sealed",
        "compress": True,
        "os": "windows",
        "image": "registry.example.com/tools/golden-export:1",
        "wait_timeout": 600,
    }
    sealed = {
        "metadata": {"name": "sealed", "namespace": "ns", "uid": "u-1"},
        "spec": {"volumeMode": "Block"},
    }
    secret = {"name": "s3", "access_key": "id", "secret_key": "key", "session_token": None}
    at = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)
    scratch, configmap, job = jobs.export_definitions(
        p, sealed, secret, 16 << 20, ["license"], {"a.py": "x"}, at
    )
    assert scratch["metadata"]["name"] == "exp-scratch" and "storageClassName" not in scratch["spec"]
    assert configmap["data"] == {"a.py": "x"} and configmap["metadata"]["labels"][jobs.EXPORT_MARK] == "exp"
    args = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert args[args.index("--source") + 1] == "/dev/source"
    assert args[args.index("--staging-key") + 1] == "goldens/win.qcow2.partial-ns-exp"
    assert args[args.index("--source-url") + 1] == "pvc://ns/sealed"
    assert args[-4:] == ["--os-family", "windows", "--sensitive-reason", "license"]
