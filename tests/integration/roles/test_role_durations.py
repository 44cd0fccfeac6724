"""Bad durations given to a role are refused by its first step, naming the role variable, before anything
is written: golden_promote (before the promotion is written), harvester_upload (before the bucket is made
or written), worker_image (before the goldens are created). Writes are counted from the lab's audit log
and the bucket's listing."""

from __future__ import annotations

import uuid

import pytest

from tests.integration.modules.test_golden_retention import golden_name
from tests.integration.modules.test_golden_snapshot import BLOCK_NS, FS_NS, Cluster
from tests.integration.support.runner import kube_play, run_playbook
from tests.lab.s3 import s3_client

pytestmark = pytest.mark.lab_only

SCHEMATIC = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"


def include(role, **role_vars):
    return {
        "name": role,
        "ansible.builtin.include_role": {"name": "goldenimage.pipeline." + role},
        "vars": role_vars,
    }


def refused_by(run, task, variable):
    """The message of the first failed item of ``task``; the run stopped there."""
    assert not run.ok, run.log
    assert run.tasks[-1]["task"] == task, run.task_names()
    messages = [r.get("msg", "") for r in run[task]["results"] if r.get("failed")]
    assert messages and "option %s:" % variable in messages[0], messages
    assert "is not a duration" in messages[0], messages
    return messages[0]


@pytest.fixture
def golden(kube_client):
    """A Ready golden of its own family, nothing selected yet."""
    cluster = Cluster(kube_client, "t%s" % uuid.uuid4().hex[:8])
    cluster.ensure_namespace(FS_NS)
    cluster.ensure_namespace(BLOCK_NS)
    family = "%s-debian" % cluster.prefix
    name = golden_name(family, "20260101")
    cluster.golden(name, cluster.pvc(FS_NS, "%s-disk" % cluster.prefix), family)
    cluster.wait_snapshot_ready(FS_NS, name)
    try:
        yield family, name
    finally:
        cluster.cleanup()


@pytest.mark.suite("bad-input")
@pytest.mark.parametrize(
    "variable, value", [("golden_promote_verify_timeout", 0), ("golden_promote_verify_interval", -1)]
)
def test_golden_promote_refuses_a_bad_verification_duration_before_the_promotion(
    lab, golden, variable, value
):
    family, name = golden
    role_vars = {
        "golden_promote_family": family,
        "golden_promote_snapshot": name,
        "golden_promote_gate": False,
        "golden_promote_verify_timeout": 30,
        "golden_promote_verify_interval": 1,
    }
    role = include("golden_promote", **dict(role_vars, **{variable: value}))
    lab.clear_audit()
    run = run_playbook(kube_play(role), env=lab.env())
    refused_by(
        run,
        "Refuse zero or negative timeouts and intervals of the verification before anything is written",
        variable,
    )
    assert lab.mutating_requests() == []


@pytest.mark.suite("bad-input")
@pytest.mark.parametrize(
    "variable, value", [("harvester_upload_wait_timeout", 0), ("harvester_upload_wait_sleep", -1)]
)
def test_harvester_upload_refuses_a_bad_wait_before_the_bucket_is_written(
    lab, kube_namespace, tmp_path, variable, value
):
    artifact = tmp_path / "ubuntu-2204-postgres-v20261129.qcow2"
    artifact.write_bytes(b"QFI\xfb" + bytes(4096))
    bucket = "durations-%s" % uuid.uuid4().hex[:8]
    role = include(
        "harvester_upload",
        harvester_upload_artifact=str(artifact),
        harvester_upload_revision="v20261129",
        harvester_upload_os_version="22.04",
        harvester_upload_pg_versions=["16"],
        harvester_upload_bucket=bucket,
        harvester_upload_namespace=kube_namespace,
        harvester_upload_replicas=1,
        **{variable: value},
    )
    lab.clear_audit()
    run = run_playbook(kube_play(role), env=lab.env())
    refused_by(run, "Refuse zero or negative timeouts and intervals before anything is written", variable)
    assert lab.mutating_requests() == []
    buckets = [b["Name"] for b in s3_client(lab.env()).list_buckets()["Buckets"]]
    assert bucket not in buckets, "the bucket was made before the refusal"


@pytest.mark.suite("bad-input")
@pytest.mark.parametrize(
    "variable, value", [("worker_image_wait_timeout", 0), ("worker_image_poll_seconds", -5)]
)
def test_worker_image_refuses_a_bad_wait_before_the_goldens_are_created(lab, kube_namespace, variable, value):
    entry = {
        "schematicID": SCHEMATIC,
        "version": "v1.13.0",
        "imageFactoryURL": "%s/factory-%s" % (lab.env()["AWS_ENDPOINT_URL"], kube_namespace),
        "storage": "64Mi",
        "storageClass": "",
    }
    role = include(
        "worker_image",
        worker_image_images=[entry],
        worker_image_namespace=kube_namespace,
        **{variable: value},
    )
    lab.clear_audit()
    run = run_playbook(kube_play(role), env=lab.env())
    refused_by(run, "Refuse zero or negative timeouts and intervals before anything is written", variable)
    assert lab.mutating_requests() == []
