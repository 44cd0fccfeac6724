"""volume_job on the lab: a conversion Job run once, then the same task again against the completed Job."""

from __future__ import annotations

import time

import pytest

from tests.integration.support.runner import KUBE_DEFAULTS, module_task, play, run_playbook

MODULE = "goldenimage.pipeline.volume_job"
CDI = ("cdi.kubevirt.io", "v1beta1", "datavolumes")


def blank_volume(custom, namespace, name, mode):
    """A DataVolume with an empty sparse disk (CDI's blank source), in ``mode``, waited for."""
    body = {
        "apiVersion": "%s/%s" % CDI[:2],
        "kind": "DataVolume",
        "metadata": {"name": name},
        "spec": {
            "source": {"blank": {}},
            "storage": {"volumeMode": mode, "resources": {"requests": {"storage": "16Mi"}}},
        },
    }
    custom.create_namespaced_custom_object(*CDI[:2], namespace, CDI[2], body)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        obj = custom.get_namespaced_custom_object(*CDI[:2], namespace, CDI[2], name)
        if (obj.get("status") or {}).get("phase") == "Succeeded":
            return name
        time.sleep(0.2)
    raise AssertionError("DataVolume %s did not succeed: %s" % (name, obj.get("status")))


@pytest.mark.lab_only
@pytest.mark.suite("idempotence")
def test_a_completed_job_is_not_run_again(lab, kube_client, kube_namespace):
    from kubernetes import client

    custom = client.CustomObjectsApi(kube_client)
    source = blank_volume(custom, kube_namespace, "vj-source", "Filesystem")
    dest = blank_volume(custom, kube_namespace, "vj-dest", "Block")
    args = dict(name="vj-convert", namespace=kube_namespace, source={"claim": source}, dest={"claim": dest})

    first = run_playbook(
        play(module_task(MODULE, "convert", **args), module_defaults=KUBE_DEFAULTS), env=lab.env()
    )
    assert first.ok, first.log
    assert first["convert"]["changed"] is True and first["convert"]["done"] is True, first["convert"]

    lab.clear_audit()
    again = run_playbook(
        play(module_task(MODULE, "again", diff=True, **args), module_defaults=KUBE_DEFAULTS), env=lab.env()
    )
    assert again.ok, again.log
    result = again["again"]
    # The completed Job is the proof the conversion ran: it is read, not created or run again.
    assert result["changed"] is False and result["done"] is True, result
    assert result["job"] == {"name": "vj-convert", "namespace": kube_namespace}
    assert lab.mutating_requests() == []
    jobs = client.BatchV1Api(kube_client).list_namespaced_job(kube_namespace).items
    assert [j.metadata.name for j in jobs] == ["vj-convert"]
    assert jobs[0].status.succeeded == 1


def job_body(namespace, name, command):
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/managed-by": "x"}},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "run", "image": "busybox", "command": command}],
                }
            },
        },
    }


@pytest.mark.lab_only
@pytest.mark.suite("data-loss")
def test_a_409_adopts_only_this_requests_own_job(lab, kube_namespace):
    """A Job of the same name that this request did not make, even one with an equal spec, is refused and
    named; a create whose reply is lost after the commit still returns the one object it made."""
    from ansible.module_utils.testing import patch_module_args
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import _retry
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeError, KubeModule
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._volume_job import JobClient

    # Through the fault proxy: the last create loses its reply there.
    with patch_module_args({"kubeconfig": str(lab.fault_kubeconfig)}):
        module = KubeModule(argument_spec={}, supports_check_mode=True)
        module.backoff = _retry.kubernetes(base=0.05, cap=0.5)
        client = JobClient(module)
        for name, theirs in (("vj-other", ["rm", "-rf", "/data"]), ("vj-same", ["true"])):
            module.create(job_body(kube_namespace, name, theirs))
            with pytest.raises(KubeError) as refused:
                client.create(job_body(kube_namespace, name, ["true"]))
            assert "Job %s/%s" % (kube_namespace, name) in refused.value.msg
            assert "already exists and is not the object this run sent" in refused.value.msg
        lab.faults.reset()
        lab.faults.update({"commit_drop_rate": 1.0})
        try:
            made = client.create(job_body(kube_namespace, "vj-lost", ["true"]))
        finally:
            lab.faults.reset()
    assert made["metadata"]["name"] == "vj-lost"
