"""The golden_export_job runner called with parameters, observed objects (the in-memory adapter and a Job
client stand-in) and the lab's loopback S3: one round returns a result or raises a PipelineError, and
never exits."""

import json

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket import mirror
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import jobs
from ansible_collections.goldenimage.pipeline.plugins.module_utils.windows import _export_cli
from ansible_collections.goldenimage.pipeline.plugins.modules import golden_export_job as module_
from fake_kube import FakeKube

from tests.unit.plugins.modules import support
from tests.unit.plugins.modules._bucket_lab import connection, keys, new_bucket
from tests.unit.plugins.modules.support import Clock

NS, NAME, KEY = "golden", "export-w11", "windows/11/w11.qcow2"
DIGEST = "ab" * 32


def claim(name="sealed", uid="uid-sealed"):
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": NS, "uid": uid},
        "spec": {"volumeMode": "Filesystem"},
    }


SECRET = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {"name": "s3", "namespace": NS},
    "data": {"accessKeyId": "YQ==", "secretKey": "Yg=="},
}


class Jobs:
    """What the Job client reads and writes: the claim, the export's Job and its last pod's log."""

    def __init__(self, kube, log=""):
        self.kube, self.log = kube, log

    def claim(self, namespace, name):
        return self.kube.get("v1", "PersistentVolumeClaim", name, namespace)

    def job(self, namespace, name):
        return self.kube.get("batch/v1", "Job", name, namespace)

    def create(self, definition):
        return self.kube.create(definition)

    def last_pod_log(self, namespace, name, strict=False):
        return "pod", self.log


def runner(s3, bucket, objects=(), log="", check_mode=False, clock=None, **given):
    params = dict(
        connection(s3[0]),
        name=NAME,
        namespace=NS,
        pvc="sealed",
        bucket=bucket,
        key=KEY,
        credentials_secret="s3",
        image="exporter:1",
    )
    params.update(given)
    params = support.validated(module_.argument_spec(), params)
    kube = FakeKube(params, list(objects), check_mode=check_mode)
    clock = clock or Clock(1000.0)
    job = module_.ExportJob(params, kube, Jobs(kube, log), check_mode, clock=clock, sleeper=clock.sleep)
    return job, kube


def made(kube):
    return sorted((kind, name) for (_api, kind, _ns, name) in kube.objects if kind not in ("Secret",))


def test_the_first_round_makes_the_scratch_claim_the_program_and_the_job(s3):
    bucket = new_bucket(s3[1])
    job, kube = runner(s3, bucket, [claim(), SECRET], report_every=5)
    result = job.run()
    assert result["changed"] is True and result["done"] is False and result["action"] == "upload"
    assert made(kube) == [
        ("ConfigMap", NAME),
        ("Job", NAME),
        ("PersistentVolumeClaim", NAME + "-scratch"),
        ("PersistentVolumeClaim", "sealed"),
    ]
    program = kube.get("v1", "ConfigMap", NAME, NS)
    # The program, the facts and partition readers and their rules, the exposure rule it decides with (and
    # that rule's two helpers), the S3 adapter and the transfer code with their rules, the provenance rules
    # and signing code the mirror's rules read, and the error base.
    assert sorted(program["data"]) == [
        "bucket._mirror_transfer.py",
        "bucket.exposure.py",
        "bucket.mirror.py",
        "common._progress_file.py",
        "common.errors.py",
        "common.inputs.py",
        "common.redact.py",
        "common.rounds.py",
        "disk._disk.py",
        "disk._partitions.py",
        "disk._qemu_img.py",
        "disk.image_facts.py",
        "disk.seal.py",
        "provenance._signing.py",
        "provenance.provenance.py",
        "s3._s3.py",
        "windows._export_cli.py",
    ]
    env = kube.get("batch/v1", "Job", NAME, NS)["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {
        "name": "EXPORT_ACCESS_KEY_ID",
        "valueFrom": {"secretKeyRef": {"name": "s3", "key": "accessKeyId"}},
    } in env
    assert keys(s3[1], bucket) == []


def test_the_job_is_told_every_reason_the_bytes_are_sensitive(s3):
    """The Job's program proves the destination private when any reason is given: the declared licence's
    and those read from the image, each passed as --sensitive-reason; none, and it only reports."""
    bucket = new_bucket(s3[1])
    job, kube = runner(
        s3, bucket, [claim(), SECRET], license="kms", sensitive_reasons=["Winlogon DefaultPassword set"]
    )
    job.run()
    args = kube.get("batch/v1", "Job", NAME, NS)["spec"]["template"]["spec"]["containers"][0]["command"]
    given = [args[i + 1] for i, arg in enumerate(args) if arg == "--sensitive-reason"]
    assert given == ["declared licence kms (KMS-configured)", "Winlogon DefaultPassword set"]
    plain, kube = runner(s3, new_bucket(s3[1]), [claim(), SECRET])
    plain.run()
    args = kube.get("batch/v1", "Job", NAME, NS)["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--sensitive-reason" not in args


def test_check_mode_predicts_the_upload_and_writes_nothing(s3):
    job, kube = runner(s3, new_bucket(s3[1]), [claim(), SECRET], check_mode=True)
    result = job.run()
    assert result["changed"] is True and result["done"] is True and kube.writes == []
    assert result["line"].endswith("would be exported (check mode)")


def test_a_key_holding_this_claims_export_is_skipped(s3):
    bucket = new_bucket(s3[1])
    metadata = {mirror.META_SHA256: DIGEST, mirror.META_SOURCE_UID: "uid-sealed"}
    s3[1].put_object(Bucket=bucket, Key=KEY, Body=b"qcow2", Metadata=metadata)
    job, kube = runner(s3, bucket, [claim(), SECRET])
    result = job.run()
    assert result["action"] == "skip" and result["changed"] is False and result["done"] is True
    assert kube.writes == []


def test_a_finished_job_is_verified_against_the_stored_object_and_cleaned_up(s3):
    bucket = new_bucket(s3[1])
    s3[1].put_object(Bucket=bucket, Key=KEY, Body=b"qcow2", Metadata={mirror.META_SHA256: DIGEST})
    objects = [claim(), SECRET, claim(NAME + "-scratch", "uid-scratch")]
    for obj in objects[2:]:
        obj["metadata"]["labels"] = {jobs.EXPORT_MARK: NAME}
    done = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": NAME, "namespace": NS, "labels": {jobs.EXPORT_MARK: NAME}},
        "status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]},
    }
    outcome = {"action": "upload", "sha256": DIGEST, "size": 5, "parts": 1}
    log = "phase upload: 100%\n" + _export_cli.MARKER + json.dumps(outcome) + "\n"
    job, kube = runner(s3, bucket, objects + [done], log=log, started=900.0, last_state="running")
    result = job.run()
    assert result["done"] is True and result["changed"] is True and result["sha256"] == DIGEST
    assert made(kube) == [("PersistentVolumeClaim", "sealed")]  # the Job and the scratch claim are gone


def test_a_job_that_reports_another_digest_than_the_stored_object_fails(s3):
    bucket = new_bucket(s3[1])
    s3[1].put_object(Bucket=bucket, Key=KEY, Body=b"qcow2", Metadata={mirror.META_SHA256: "cd" * 32})
    done = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": NAME, "namespace": NS, "labels": {jobs.EXPORT_MARK: NAME}},
        "status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]},
    }
    log = _export_cli.MARKER + json.dumps({"action": "upload", "sha256": DIGEST}) + "\n"
    job, _kube = runner(s3, bucket, [claim(), SECRET, done], log=log, started=900.0, last_state="running")
    with pytest.raises(
        PipelineError, match="reported s3://%s/%s stored with sha256 %s" % (bucket, KEY, DIGEST)
    ):
        job.run()


def test_a_failed_job_leaves_no_staging_upload_or_object_behind(s3):
    """A Job killed mid-export leaves the upload to its staging key pending, or the staging object it
    completed: the module aborts the one and deletes the other, and leaves the bucket's other keys alone."""
    bucket = new_bucket(s3[1])
    job, kube = runner(s3, bucket, [claim(), SECRET])
    job.run()
    argv = kube.get("batch/v1", "Job", NAME, NS)["spec"]["template"]["spec"]["containers"][0]["command"]
    staging = argv[argv.index("--staging-key") + 1]
    assert staging == "%s.partial-%s-%s" % (KEY, NS, NAME)
    pending = s3[1].create_multipart_upload(Bucket=bucket, Key=staging)["UploadId"]
    s3[1].put_object(Bucket=bucket, Key=staging, Body=b"parts")
    s3[1].put_object(Bucket=bucket, Key=KEY + ".partial-other-export", Body=b"not ours")
    failed = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": NAME, "namespace": NS, "labels": {jobs.EXPORT_MARK: NAME}},
        "status": {"failed": 1, "conditions": [{"type": "Failed", "status": "True"}]},
    }
    log = _export_cli.MARKER + json.dumps({"error": "killed", "code": "s3"}) + "\n"
    job, _kube = runner(s3, bucket, [claim(), SECRET, failed], log=log, started=900.0, last_state="running")
    with pytest.raises(PipelineError, match="killed") as raised:
        job.run()
    assert raised.value.fields["aborted_uploads"] == [pending, "s3://%s/%s" % (bucket, staging)]
    assert keys(s3[1], bucket) == [KEY + ".partial-other-export"]
    assert s3[1].list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


@pytest.mark.parametrize(
    "objects, given, words",
    [
        ([claim()], {}, "Secret golden/s3: it does not exist"),
        ([SECRET], {}, "PersistentVolumeClaim golden/sealed: it does not exist"),
        ([claim(), SECRET], {"scratch_size": "0"}, "an empty scratch claim holds no qcow2"),
        ([claim(), SECRET], {"name": "x" * 57}, "it is longer than 56 characters"),
        ([claim(), SECRET], {"wait_timeout": 0}, "option wait_timeout"),
    ],
)
def test_refusals_come_before_any_write(s3, objects, given, words):
    bucket = new_bucket(s3[1])
    job, kube = runner(s3, bucket, objects, **given)
    with pytest.raises(Refusal, match=words):
        job.run()
    assert kube.writes == [] and keys(s3[1], bucket) == []


def test_the_pod_needs_an_endpoint_it_reaches_and_present_needs_its_inputs(monkeypatch):
    for variable in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):  # endpoint_url's fallbacks
        monkeypatch.delenv(variable, raising=False)
    spec, rules = module_.argument_spec(), module_.ARGUMENT_RULES
    present = {
        "name": NAME,
        "namespace": NS,
        "pvc": "sealed",
        "bucket": "b",
        "key": KEY,
        "credentials_secret": "s3",
        "image": "exporter:1",
    }
    assert support.rejected(spec, rules, present) == [
        "state is present but any of the following are missing: pod_endpoint_url, endpoint_url"
    ]
    assert support.rejected(spec, rules, dict(present, pod_endpoint_url="http://s3.local")) == []
    assert support.rejected(spec, rules, {"name": NAME, "namespace": NS, "state": "absent"}) == []
