"""The volume Job runner with parameters and observed claims and Jobs (a stand-in for its adapter)."""

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal
from ansible_collections.goldenimage.pipeline.plugins.modules import volume_job

from tests.unit.plugins.modules import support
from tests.unit.plugins.modules.support import Clock


class Cluster:
    """What the adapter would read and write, as plain objects."""

    def __init__(self, claims, job=None, log=""):
        self.claims, self.jobs, self.log, self.created = claims, [job] if job else [], log, []

    def claim(self, namespace, name):
        return self.claims.get(name)

    def job(self, namespace, name):
        return self.jobs[0] if len(self.jobs) == 1 else (self.jobs.pop(0) if self.jobs else None)

    def create(self, definition):
        self.created.append(definition)
        self.jobs = [dict(definition, status={"active": 1})]
        return self.jobs[0]

    def last_pod_log(self, namespace, name):
        return "pod", self.log


def params(**overrides):
    base = {"name": "j", "namespace": "ns", "source": {"claim": "imp"}, "dest": {"claim": "disk"}}
    return support.validated(volume_job.argument_spec(), dict(base, **overrides))


def claims():
    return {
        "imp": {"metadata": {"name": "imp", "namespace": "ns"}, "spec": {"volumeMode": "Filesystem"}},
        "disk": {"metadata": {"name": "disk", "namespace": "ns"}, "spec": {"volumeMode": "Block"}},
    }


def test_creates_the_conversion_and_reports_progress():
    cluster, clock = Cluster(claims(), log="(33.00/100%)\r"), Clock()
    result = volume_job.VolumeJob(params(), cluster, clock=clock, sleeper=clock.sleep).run()
    assert result["changed"] is True and result["done"] is False
    assert result["command"] == [
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
    assert result["line"] == "Job ns/j: running, active=1 succeeded=0 failed=0, progress 33.00% after 0.0s"
    cluster.jobs = [
        dict(cluster.jobs[0], status={"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]})
    ]
    again = volume_job.VolumeJob(params(**result["resume"]), cluster, clock=clock, sleeper=clock.sleep).run()
    assert again["done"] is True and again["changed"] is False and len(cluster.created) == 1


def test_a_completed_job_is_not_run_again():
    done = {"spec": {}, "status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}}
    cluster = Cluster(claims(), job=done)
    result = volume_job.VolumeJob(params(), cluster).run()
    assert result == dict(result, changed=False, done=True) and cluster.created == []


def test_a_failed_job_fails_with_its_condition_and_log():
    failed = {
        "spec": {},
        "status": {
            "failed": 2,
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                }
            ],
        },
    }
    cluster = Cluster(claims(), job=failed, log="qemu-img: Could not open '/source/disk.img'\n")
    with pytest.raises(PipelineError) as caught:
        volume_job.VolumeJob(params(failed_hint="No golden was made."), cluster).run()
    assert caught.value.msg == (
        "Job ns/j failed: BackoffLimitExceeded: Job has reached the specified backoff limit. "
        "No golden was made. "
        "Log of the last pod: qemu-img: Could not open '/source/disk.img'"
    )


def test_a_missing_claim_is_refused_before_anything_is_written():
    cluster = Cluster({"disk": claims()["disk"]})
    with pytest.raises(Refusal, match=r"PersistentVolumeClaim ns/imp \(source\): it does not exist"):
        volume_job.VolumeJob(params(), cluster).run()
    assert cluster.created == []


def test_a_job_gone_in_a_later_round_fails_naming_it():
    with pytest.raises(PipelineError, match="Job ns/j does not exist although it was created"):
        volume_job.VolumeJob(params(started=1.0, last_state="running"), Cluster(claims())).run()


def test_check_mode_predicts_the_create():
    cluster = Cluster(claims())
    result = volume_job.VolumeJob(params(), cluster, check_mode=True).run()
    assert result["changed"] is True and cluster.created == [] and result["diff"]["after"]["kind"] == "Job"


def test_zero_timeout_is_refused_before_anything_is_read():
    with pytest.raises(Refusal, match="option wait_timeout"):
        volume_job.VolumeJob(params(wait_timeout=0), None).run()


def test_check_mode_predicts_with_a_claim_an_earlier_task_would_create():
    cluster = Cluster({"imp": claims()["imp"]})
    result = volume_job.VolumeJob(
        params(dest={"claim": "disk", "file": "x.qcow2"}), cluster, check_mode=True
    ).run()
    assert result["changed"] is True and result["line"].endswith("claims not there yet: disk")
