"""``JobClient.last_pod_log``: streamed through the adapter's ``download``, bounded; a pod without a log
yet reads as empty; a strict read (a verdict) does not take a failed read for an empty log."""

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import _seal_job
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._volume_job import JobClient


class Module:
    def __init__(self, pods, log=b"", error=None):
        self.pods, self.log, self.error, self.downloads = pods, log, error, []

    def list(self, api_version, kind, namespace=None, label_selector=None):
        assert (api_version, kind, label_selector) == ("v1", "Pod", "job-name=j")
        return self.pods

    def download(self, path, handle, limit=None, action=None):
        self.downloads.append((path, limit))
        if self.error is not None:
            raise self.error
        handle.write(self.log)
        return len(self.log)


def pod(name, created):
    return {"metadata": {"name": name, "creationTimestamp": created}}


def test_the_newest_pods_log_is_streamed_with_a_bound():
    module = Module([pod("j-new", "2026-12-01T10:01:00Z"), pod("j-old", "2026-12-01T10:00:00Z")], b"ok\n")
    assert JobClient(module).last_pod_log("ns", "j") == ("j-new", "ok\n")
    assert module.downloads == [("/api/v1/namespaces/ns/pods/j-new/log", 16 * 1024 * 1024)]


def test_no_pod_and_no_log_yet_read_as_empty():
    assert JobClient(Module([])).last_pod_log("ns", "j", strict=True) == (None, "")
    starting = KubeError("read the log: container is waiting to start (BadRequest, 400)", status=400)
    module = Module([pod("j-1", "t")], error=starting)
    assert JobClient(module).last_pod_log("ns", "j", strict=True) == ("j-1", "")


def test_a_failed_read_is_empty_for_progress_and_raised_for_a_verdict():
    failed = KubeError("read the log: boom (InternalError, 500) after 6 attempts", status=500)
    assert JobClient(Module([pod("j-1", "t")], error=failed)).last_pod_log("ns", "j") == ("j-1", "")
    with pytest.raises(KubeError, match="boom"):
        JobClient(Module([pod("j-1", "t")], error=failed)).last_pod_log("ns", "j", strict=True)


def test_the_verifier_job_is_finished_by_its_conditions():
    complete = {"status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}}
    failed = {"status": {"failed": 1, "conditions": [{"type": "Failed", "status": "True"}]}}
    assert _seal_job.job_finished(complete) == (True, None)
    assert _seal_job.job_finished(failed) == (True, None)
    assert _seal_job.job_finished({"status": {"active": 1}}) == (False, None)
    assert _seal_job.describe_job(None) == "Job not found"
    assert _seal_job.describe_job({"status": {"active": 1}}) == "active=1 succeeded=0 failed=0"
