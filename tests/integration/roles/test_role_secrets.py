"""Secrets suite for the roles that take a bucket, mirror or API URL: windows_bake, windows_export,
harvester_upload and worker_image refuse a URL with a password in it by their first steps, before
anything is written to the cluster (the lab's audit log) or to the bucket (its listing), and the password
is found nowhere: not in the ``-vvv`` output, a task result, nor any object or Event of the namespace.

The URL reaches the play through extra vars, as it would from a vault or an inventory (a playbook's own
lines are quoted back by ansible-core on a failure).
"""

from __future__ import annotations

import uuid

import pytest

from tests.integration.roles.test_windows_bake import bake_play, iso_vars
from tests.integration.support.runner import kube_play, play, run_playbook
from tests.integration.support.secrets import cluster_traces, leaks, new_secret, run_traces, with_password
from tests.lab.s3 import s3_client

pytestmark = pytest.mark.lab_only

SCHEMATIC = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
SECRET_URL = "{{ url_with_password }}"


def include(role, **role_vars):
    return {
        "name": role,
        "ansible.builtin.include_role": {"name": "goldenimage.pipeline." + role},
        "vars": role_vars,
    }


def refusal(run, task):
    """The message of the failed item of ``task``; the run stopped there."""
    assert not run.ok, run.log
    assert run.tasks[-1]["task"] == task, run.task_names()
    messages = [r.get("msg", "") for r in run[task]["results"] if r.get("failed")]
    assert len(messages) == 1, messages
    return messages[0]


def bucket_names(lab):
    return [b["Name"] for b in s3_client(lab.env()).list_buckets()["Buckets"]]


def assert_nothing_written_or_leaked(lab, kube_client, namespace, runs, password, bucket):
    assert lab.mutating_requests() == []
    found = run_traces(*runs) + cluster_traces(kube_client, [namespace])
    assert leaks(found, [password]) == []
    client = s3_client(lab.env())
    if bucket in bucket_names(lab):
        assert client.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0, "an object was written"


@pytest.mark.suite("secrets")
@pytest.mark.parametrize("option", ["windows_bake_iso_url_base", "windows_bake_iso_endpoint_url"])
def test_windows_bake_refuses_a_bucket_url_with_a_password(
    lab, kube_client, kube_namespace, tmp_path, option
):
    endpoint = lab.env()["AWS_ENDPOINT_URL"]
    bucket = "isos-%s" % uuid.uuid4().hex[:8]
    s3_client(lab.env()).create_bucket(Bucket=bucket)
    iso = tmp_path / "noprompt.iso"
    iso.write_bytes(b"CD001" * 4096)
    password = new_secret()
    role_vars = iso_vars(bucket, endpoint, windows_bake_iso_dest=str(iso), **{option: SECRET_URL})
    lab.clear_audit()
    run = run_playbook(
        [bake_play(kube_namespace, **role_vars)],
        env=lab.env(),
        args=["-vvv"],
        extra_vars={"url_with_password": with_password(endpoint, password, user="isos")},
    )
    msg = refusal(run, "Refuse bucket URLs that carry credentials before anything is written")
    assert "option %s (http://REDACTED@%s)" % (option, endpoint.split("://", 1)[1]) in msg, msg
    assert "the URL carries credentials" in msg
    assert (
        "windows_bake_iso_secret_ref" if option.endswith("url_base") else "windows_bake_iso_access_key"
    ) in msg
    assert_nothing_written_or_leaked(lab, kube_client, kube_namespace, [run], password, bucket)


@pytest.mark.suite("secrets")
@pytest.mark.parametrize(
    "option, move",
    [
        ("harvester_upload_public_base_url", "harvester_upload_url_mode=presigned"),
        ("harvester_upload_endpoint_url", "harvester_upload_access_key"),
        ("harvester_upload_harvester_url", "kubeconfig's credentials"),
    ],
)
def test_harvester_upload_refuses_a_url_with_a_password(
    lab, kube_client, kube_namespace, tmp_path, option, move
):
    artifact = tmp_path / "ubuntu-2204-postgres-v20261129.qcow2"
    artifact.write_bytes(b"QFI\xfb" + bytes(4096))
    bucket = "secrets-%s" % uuid.uuid4().hex[:8]
    password = new_secret()
    role = include(
        "harvester_upload",
        harvester_upload_artifact=str(artifact),
        harvester_upload_revision="v20261129",
        harvester_upload_os_version="22.04",
        harvester_upload_pg_versions=["16"],
        harvester_upload_bucket=bucket,
        harvester_upload_url_mode="public" if option.endswith("public_base_url") else "presigned",
        harvester_upload_namespace=kube_namespace,
        harvester_upload_replicas=1,
        **{option: SECRET_URL},
    )
    lab.clear_audit()
    run = run_playbook(
        kube_play(role),
        env=lab.env(),
        args=["-vvv"],
        extra_vars={"url_with_password": with_password("https://s3.example:9000/b", password)},
    )
    msg = refusal(run, "Refuse URLs that carry credentials, before anything is uploaded or registered")
    assert "option %s (https://REDACTED@s3.example:9000/b)" % option in msg and move in msg, msg
    assert bucket not in bucket_names(lab), "the bucket was made before the refusal"
    assert_nothing_written_or_leaked(lab, kube_client, kube_namespace, [run], password, bucket)


@pytest.mark.suite("secrets")
@pytest.mark.parametrize(
    "where, task",
    [
        (
            "worker_image_mirror_base_url",
            "Refuse mirror URLs that carry credentials before anything is written",
        ),
        (
            "worker_image_mirror_endpoint_url",
            "Refuse mirror URLs that carry credentials before anything is written",
        ),
        (
            "worker_image_images[0].imageFactoryURL",
            "Refuse Image Factory URLs that carry credentials before anything is written",
        ),
    ],
)
def test_worker_image_refuses_a_mirror_or_factory_url_with_a_password(
    lab, kube_client, kube_namespace, where, task
):
    password = new_secret()
    bucket = "mirror-%s" % uuid.uuid4().hex[:8]
    entry = {"schematicID": SCHEMATIC, "version": "v1.13.0", "storage": "64Mi", "storageClass": ""}
    role_vars = {
        "worker_image_namespace": kube_namespace,
        "worker_image_mirror_bucket": bucket,
        "worker_image_mirror_base_url": "https://s3.example:9000/%s/talos" % bucket,
        "worker_image_images": [entry],
    }
    if where.startswith("worker_image_images"):
        entry["imageFactoryURL"] = SECRET_URL
    else:
        role_vars[where] = SECRET_URL
    lab.clear_audit()
    run = run_playbook(
        kube_play(include("worker_image", **role_vars)),
        env=lab.env(),
        args=["-vvv"],
        extra_vars={"url_with_password": with_password("https://s3.example:9000/factory", password)},
    )
    msg = refusal(run, task)
    assert "option %s (https://REDACTED@s3.example:9000/factory)" % where in msg, msg
    assert_nothing_written_or_leaked(lab, kube_client, kube_namespace, [run], password, bucket)


@pytest.mark.suite("secrets")
@pytest.mark.parametrize(
    "option",
    ["windows_export_endpoint_url", "windows_export_pod_endpoint_url", "windows_export_import_url_base"],
)
def test_windows_export_refuses_a_bucket_url_with_a_password(lab, kube_client, kube_namespace, option):
    password = new_secret()
    bucket = "exports-%s" % uuid.uuid4().hex[:8]
    role = include(
        "windows_export",
        windows_export_namespace=kube_namespace,
        windows_export_pvc="sealed-disk",
        windows_export_bucket=bucket,
        windows_export_image="registry.example.com/tools/golden-export:1",
        windows_export_import=True,
        **{option: SECRET_URL},
    )
    lab.clear_audit()
    run = run_playbook(
        kube_play(role),
        env=lab.env(),
        args=["-vvv"],
        extra_vars={"url_with_password": with_password("https://s3.example:9000", password)},
    )
    msg = refusal(run, "Refuse bucket URLs that carry credentials before anything is written")
    assert "option %s (https://REDACTED@s3.example:9000)" % option in msg, msg
    assert bucket not in bucket_names(lab)
    assert_nothing_written_or_leaked(lab, kube_client, kube_namespace, [run], password, bucket)


@pytest.mark.suite("secrets")
@pytest.mark.parametrize("option", ["packer_build_pgdg_url", "packer_build_pgdg_key_url"])
def test_packer_build_refuses_a_repository_url_with_a_password(tmp_path, option):
    """The PGDG URLs end up in the image's apt sources: a password there would ship in every golden."""
    password = new_secret()
    out = tmp_path / "out"
    role = include(
        "packer_build",
        packer_build_base_image=str(tmp_path / "base.qcow2"),
        packer_build_base_image_checksum="sha256:" + "0" * 64,
        packer_build_output_dir=str(out),
        **{option: SECRET_URL},
    )
    run = run_playbook(
        play(role),
        args=["-vvv"],
        extra_vars={"url_with_password": with_password("https://apt.example.org/pgdg", password)},
    )
    msg = refusal(run, "Refuse repository URLs that carry credentials before anything is built")
    assert "option %s (https://REDACTED@apt.example.org/pgdg)" % option in msg, msg
    assert "not in the golden" in msg
    assert not out.exists()
    assert leaks(run_traces(run), [password]) == []
