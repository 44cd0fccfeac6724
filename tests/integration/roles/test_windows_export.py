"""windows_export on the lab: a sealed Block volume (a real GPT disk written by a Job), the real
qemu-img compressing it in a Job, the upload with its sha256, the BYOL guard, and the receiving import.

The bucket is on the lab's S3, which answers anonymous requests and checks signatures as S3 does
(tests/lab/s3.py); CDI reads the private bucket from a presigned URL.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import subprocess
import time
import uuid

import pytest

from tests.integration.roles.test_windows_chain import EXPORT_IMAGE, export_secret
from tests.integration.support.runner import run_playbook
from tests.lab.controllers.volumes import snapshot_data

pytestmark = [pytest.mark.lab_only, pytest.mark.usefixtures("venv_python_first")]

MIB = 1024 * 1024
DATE = "2026-08-09"
GOLDEN_NS = "golden-images"
ROLE = "goldenimage.pipeline.windows_export"


def make_sealed_disk(path: pathlib.Path) -> pathlib.Path:
    """32 MiB raw disk: a GPT with an EFI and a basic-data partition, random and repetitive data."""
    with open(path, "wb") as handle:
        handle.truncate(32 * MIB)
    subprocess.run(
        ["sgdisk", "-n", "1:2048:+4M", "-t", "1:ef00", "-n", "2:0:0", "-t", "2:0700", str(path)],
        check=True,
        capture_output=True,
    )
    with open(path, "r+b") as handle:
        handle.seek(6 * MIB)
        handle.write(os.urandom(MIB))
        handle.write(b"C:\\Windows\\System32 sysprep /generalize /oobe /shutdown\r\n" * (4 * MIB // 56))
    return path


class Env:
    def __init__(self, lab, api_client, namespace, tmp_path):
        from kubernetes import client

        self.lab, self.namespace, self.endpoint, self.tmp = lab, namespace, lab.s3.endpoint_url, tmp_path
        self.core = client.CoreV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.tag = uuid.uuid4().hex[:8]
        self.s3 = lab.s3.client()
        self.private = "winpriv-%s" % self.tag
        self.public = "winpub-%s" % self.tag
        self.s3.create_bucket(Bucket=self.private)
        self.s3.create_bucket(Bucket=self.public)
        resources = ["arn:aws:s3:::%s" % self.public, "arn:aws:s3:::%s/*" % self.public]
        statement = {"Effect": "Allow", "Principal": "*", "Action": ["s3:GetObject", "s3:ListBucket"]}
        statement["Resource"] = resources
        self.s3.put_bucket_policy(Bucket=self.public, Policy=json.dumps({"Statement": [statement]}))
        self.core.create_namespaced_secret(namespace, export_secret(lab))
        try:
            self.core.create_namespace({"metadata": {"name": GOLDEN_NS}})
        except client.rest.ApiException as exc:
            if exc.status != 409:
                raise

    def sealed_pvc(self, name: str) -> pathlib.Path:
        """A Block PVC holding a real disk, written by a Job (qemu-img from a hostPath)."""
        raw = make_sealed_disk(self.tmp / "sealed.raw")
        pvc = {
            "metadata": {"name": name},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "volumeMode": "Block",
                "resources": {"requests": {"storage": "32Mi"}},
            },
        }
        self.core.create_namespaced_persistent_volume_claim(self.namespace, pvc)
        container = {
            "name": "write",
            "image": "quay.io/kubevirt/cdi-importer:v1.60.0",
            "command": [
                "qemu-img",
                "convert",
                "-f",
                "raw",
                "-O",
                "raw",
                "-n",
                "/src/sealed.raw",
                "/dev/disk",
            ],
            "volumeMounts": [{"name": "src", "mountPath": "/src"}],
            "volumeDevices": [{"name": "disk", "devicePath": "/dev/disk"}],
        }
        job = {
            "metadata": {"name": name + "-write"},
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [container],
                        "volumes": [
                            {"name": "src", "hostPath": {"path": str(self.tmp)}},
                            {"name": "disk", "persistentVolumeClaim": {"claimName": name}},
                        ],
                    }
                },
            },
        }
        self.batch.create_namespaced_job(self.namespace, job)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            status = self.batch.read_namespaced_job(name + "-write", self.namespace).status
            if status.succeeded:
                self.batch.delete_namespaced_job(
                    name + "-write", self.namespace, propagation_policy="Background"
                )
                return raw
            assert not status.failed, "writing the sealed disk failed"
            time.sleep(0.2)
        raise AssertionError("writing the sealed disk did not finish")

    def keys(self, bucket):
        return [o["Key"] for o in self.s3.list_objects_v2(Bucket=bucket).get("Contents", [])]

    def jobs(self):
        return sorted(j.metadata.name for j in self.batch.list_namespaced_job(self.namespace).items)

    def pvcs(self):
        items = self.core.list_namespaced_persistent_volume_claim(self.namespace).items
        return sorted(p.metadata.name for p in items)

    def snapshots(self, namespace):
        found = self.custom.list_namespaced_custom_object(
            "snapshot.storage.k8s.io", "v1", namespace, "volumesnapshots"
        )
        return {i["metadata"]["name"]: i for i in found["items"]}

    def play(self, **role_vars):
        base = {
            "windows_export_namespace": self.namespace,
            "windows_export_date": DATE,
            "windows_export_endpoint_url": self.endpoint,
            "windows_export_scratch_size": "64Mi",
            "windows_export_image": EXPORT_IMAGE,
            "windows_export_poll_interval": 1,
        }
        base.update(role_vars)
        task = {"name": "export", "ansible.builtin.include_role": {"name": ROLE}, "vars": base}
        env = self.lab.env()
        env["ANSIBLE_PIPELINING"] = "1"
        play = [{"hosts": "localhost", "gather_facts": False, "tasks": [task]}]
        return run_playbook(play, env=env, timeout=300)

    def cleanup(self):
        for name, snap in self.snapshots(GOLDEN_NS).items():
            if self.tag in json.dumps(snap.get("spec", {})) or name.startswith("golden-windows-11-"):
                self.custom.delete_namespaced_custom_object(
                    "snapshot.storage.k8s.io", "v1", GOLDEN_NS, "volumesnapshots", name
                )
        found = self.custom.list_namespaced_custom_object(
            "cdi.kubevirt.io", "v1beta1", GOLDEN_NS, "datavolumes"
        )
        for item in found["items"]:
            if item["metadata"]["name"].startswith("golden-windows-11-"):
                self.custom.delete_namespaced_custom_object(
                    "cdi.kubevirt.io", "v1beta1", GOLDEN_NS, "datavolumes", item["metadata"]["name"]
                )


@pytest.fixture
def env(lab, kube_client, kube_namespace, tmp_path):
    arranged = Env(lab, kube_client, kube_namespace, tmp_path)
    try:
        yield arranged
    finally:
        arranged.cleanup()


def test_export_upload_and_import_a_kms_image_from_a_private_bucket(env):
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    signer = ec.generate_private_key(ec.SECP256R1())
    pem = signer.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    (env.tmp / "export.pem").write_bytes(pem)
    raw = env.sealed_pvc("win11-sealed")
    key = "windows/11/%s/windows11-x64-golden.qcow2" % DATE
    run = env.play(
        windows_export_signing_key_path=str(env.tmp / "export.pem"),
        windows_export_pvc="win11-sealed",
        windows_export_bucket=env.private,
        windows_export_license="kms",
        windows_export_import=True,
        windows_export_import_url_base=env.lab.s3.endpoint_url,
        windows_export_import_presign=True,
        windows_export_import_access_key_id=env.lab.s3.access_key,
        windows_export_import_secret_key=env.lab.s3.secret_key,
        windows_export_import_size="64Mi",
    )
    assert run.ok, run.log

    guard = run["BYOL guard, who can read s3://%s/%s" % (env.private, key)]
    assert (guard["verdict"], guard["get_status"], guard["list_status"]) == ("private", 403, 403)
    # Signed where it was made: the detached signature and the provenance beside the object, over its bytes.
    assert env.keys(env.private) == sorted([key, key + ".intoto.jsonl", key + ".sig"])
    head = env.s3.head_object(Bucket=env.private, Key=key)
    body = env.s3.get_object(Bucket=env.private, Key=key)["Body"].read()
    digest = hashlib.sha256(body).hexdigest()
    signed = run["Upload to s3://%s/%s" % (env.private, key)]["signed"]
    assert signed["key_id"] == signing.key_id(signer), signed
    assert signed["provenance"]["subject"][0]["digest"]["sha256"] == digest, signed
    recorded = run["Record the export"]["ansible_facts"]["windows_export_result"]
    assert recorded["signed"]["key_id"] == signing.key_id(signer)
    assert head["Metadata"]["sha256"] == digest
    assert head["Metadata"]["source-url"] == "pvc://%s/win11-sealed" % env.namespace
    assert not env.s3.list_multipart_uploads(Bucket=env.private).get("Uploads")

    # A compressed qcow2 of exactly the sealed disk.
    exported = env.tmp / "exported.qcow2"
    exported.write_bytes(body)
    info = json.loads(
        subprocess.run(
            ["qemu-img", "info", "--output=json", str(exported)], capture_output=True, check=True
        ).stdout
    )
    assert info["format"] == "qcow2" and info["virtual-size"] == 32 * MIB
    assert body[:4] == b"QFI\xfb" and len(body) < 3 * MIB  # 5 MiB of data, 4 of it repetitive
    back = env.tmp / "back.raw"
    subprocess.run(["qemu-img", "convert", "-O", "raw", str(exported), str(back)], check=True)
    assert back.read_bytes() == raw.read_bytes()

    # The Job and its pod are gone (they would hold the sealed volume), and so is the scratch volume.
    assert env.jobs() == []
    assert env.pvcs() == ["win11-sealed"]

    golden = "golden-windows-11-golden-%s-%s" % (DATE.replace("-", ""), digest[:12])
    snaps = env.snapshots(GOLDEN_NS)
    assert golden in snaps, sorted(snaps)
    snap = snaps[golden]
    assert snap["status"]["readyToUse"] is True
    assert snap["metadata"]["labels"]["kube-dc.com/golden-os"] == "windows-11-golden"
    assert snap["metadata"]["annotations"]["kube-dc.com/os-name"] == "Windows 11"
    dv = env.custom.get_namespaced_custom_object(
        "cdi.kubevirt.io", "v1beta1", GOLDEN_NS, "datavolumes", golden + "-disk"
    )
    http = dv["spec"]["source"]["http"]
    assert sorted(http) == ["checksum", "url"] and http["checksum"] == "sha256:" + digest
    assert http["url"].startswith("%s/%s/%s?" % (env.lab.s3.endpoint_url, env.private, key))
    assert "X-Amz-Signature=" in http["url"] and "X-Amz-Signature" not in run.stdout
    content = env.custom.get_cluster_custom_object(
        "snapshot.storage.k8s.io",
        "v1",
        "volumesnapshotcontents",
        snap["status"]["boundVolumeSnapshotContentName"],
    )
    path = snapshot_data(env.lab, content["status"]["snapshotHandle"])[0]
    imported = (path / "disk.img" if path.is_dir() else path).read_bytes()
    # CDI grows the image to its volume: the disk, then zeroes.
    assert imported[: 32 * MIB] == raw.read_bytes() and not imported[32 * MIB :].strip(b"\0")


@pytest.mark.suite("bad-input")
def test_byol_refuses_a_licensed_image_under_private_of_a_public_bucket(env):
    env.sealed_pvc("win11-licensed")
    run = env.play(
        windows_export_pvc="win11-licensed",
        windows_export_bucket=env.public,
        windows_export_key_pattern="private/windows/11/{date}/windows11-x64-golden.qcow2",
        windows_export_license="volume",
    )
    assert not run.ok
    failed = [entry for entry in run.tasks if entry["status"] == "failed"]
    assert len(failed) == 1, run.log
    msg = failed[0]["result"]["msg"]
    assert failed[0]["task"].startswith("BYOL guard, who can read")
    assert "volume-licensed" in msg
    assert "Block public access on bucket %s" % env.public in msg
    assert "private/ is a name, not protection" in msg
    assert failed[0]["result"]["list_status"] == 200
    # Refused before anything ran or was written.
    assert env.keys(env.public) == []
    assert not env.s3.list_multipart_uploads(Bucket=env.public).get("Uploads")
    assert env.jobs() == []
    assert env.pvcs() == ["win11-licensed"]


@pytest.mark.suite("bad-input")
def test_an_export_cdi_could_not_import_is_refused_before_anything_is_converted(env):
    """Import on, a bucket that refuses anonymous reads, and neither presign nor a Secret: CDI could never
    read the export, so the role stops after the BYOL guard, before the Job, the scratch volume or a key."""
    env.sealed_pvc("win11-noimport")
    env.lab.clear_audit()
    run = env.play(
        windows_export_pvc="win11-noimport",
        windows_export_bucket=env.private,
        windows_export_license="kms",
        windows_export_import=True,
        windows_export_import_url_base=env.lab.s3.endpoint_url,
        windows_export_import_size="64Mi",
    )
    assert not run.ok
    failed = [entry for entry in run.tasks if entry["status"] == "failed"]
    assert [entry["task"] for entry in failed] == ["Refuse an export CDI could not import"], run.log
    msg = failed[0]["result"]["msg"]
    assert "bucket %s refuses anonymous reads" % env.private in msg
    assert "windows_export_import_secret_ref" in msg and "source.s3" in msg
    assert "Nothing was converted or uploaded." in msg
    assert env.keys(env.private) == []
    assert env.jobs() == [] and env.pvcs() == ["win11-noimport"]
    assert [r for r in env.lab.mutating_requests() if r.get("namespace") == env.namespace] == []


def test_a_kms_image_is_imported_from_the_private_bucket_with_source_s3_and_a_secret(env):
    """The supported import from a private bucket: CDI's source.s3 with a secretRef, whose requests CDI
    signs with the Secret's keys; no URL with a signature or token sits in the DataVolume."""
    env.sealed_pvc("win11-s3")
    key = "windows/11/%s/windows11-x64-golden.qcow2" % DATE
    run = env.play(
        windows_export_pvc="win11-s3",
        windows_export_bucket=env.private,
        windows_export_license="kms",
        windows_export_import=True,
        windows_export_import_url_base=env.lab.s3.endpoint_url,
        windows_export_import_secret_ref="image-bucket",
        windows_export_import_access_key_id=env.lab.s3.access_key,
        windows_export_import_secret_key=env.lab.s3.secret_key,
        windows_export_import_size="64Mi",
    )
    assert run.ok, run.log
    digest = env.s3.head_object(Bucket=env.private, Key=key)["Metadata"]["sha256"]
    golden = "golden-windows-11-golden-%s-%s" % (DATE.replace("-", ""), digest[:12])
    dv = env.custom.get_namespaced_custom_object(
        "cdi.kubevirt.io", "v1beta1", GOLDEN_NS, "datavolumes", golden + "-disk"
    )
    assert dv["spec"]["source"] == {
        "s3": {"url": "%s/%s/%s" % (env.lab.s3.endpoint_url, env.private, key), "secretRef": "image-bucket"}
    }
    assert env.snapshots(GOLDEN_NS)[golden]["status"]["readyToUse"] is True
    secret = env.core.read_namespaced_secret("image-bucket", GOLDEN_NS)
    assert sorted(secret.data) == ["accessKeyId", "secretKey"]


@pytest.mark.suite("bad-input")
def test_a_kms_export_to_a_get_only_bucket_is_refused_before_anything_is_converted(env):
    """A policy granting anonymous s3:GetObject but not s3:ListBucket: an empty prefix answers 403 to
    every anonymous probe of a missing key; the guard's canary proves the bucket public before the Job,
    the scratch volume or a key exist, and no anonymous reader ever sees the licensed bytes."""
    from tests.integration.modules.test_exposure_before_upload import Poller

    bucket = "wingetonly-%s" % env.tag
    env.s3.create_bucket(Bucket=bucket)
    statement = {
        "Effect": "Allow",
        "Principal": "*",
        "Action": "s3:GetObject",
        "Resource": "arn:aws:s3:::%s/*" % bucket,
    }
    env.s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps({"Statement": [statement]}))
    env.sealed_pvc("win11-getonly")
    key = "windows/11/%s/windows11-x64-golden.qcow2" % DATE
    with Poller(env.lab.s3.endpoint_url, bucket, key, key.rpartition("/")[0] + "/") as poller:
        run = env.play(
            windows_export_pvc="win11-getonly", windows_export_bucket=bucket, windows_export_license="kms"
        )
    assert poller.rounds > 0 and poller.reads == 0
    assert not run.ok
    failed = [entry for entry in run.tasks if entry["status"] == "failed"]
    assert [entry["task"] for entry in failed] == ["BYOL guard, who can read s3://%s/%s" % (bucket, key)], (
        run.log
    )
    msg = failed[0]["result"]["msg"]
    assert "bucket %s is public" % bucket in msg
    assert "anonymous get of the canary HTTP 200" in msg and "source.s3" in msg
    assert env.keys(bucket) == []
    assert env.jobs() == [] and env.pvcs() == ["win11-getonly"]


FAULTS = {"conflict_rate": 0.2, "error_rate": 0.1, "drop_rate": 0.05, "commit_drop_rate": 0.05}


def committed_writes(lab, namespaces):
    """(verb, resource, name) of every mutating request the server applied (lost replies included)."""
    return [
        (r["verb"], r["resource"], r["name"])
        for r in lab.mutating_requests()
        if r.get("namespace") in namespaces and 200 <= r["code"] < 300
    ]


@pytest.mark.suite("faults")
@pytest.mark.suite("idempotence")
def test_export_and_import_converge_in_one_run_under_faults(env):
    """Conflicts, 5xx answers, dropped connections and replies lost after the commit on every API request:
    the export and its import converge in one run, each object created once (counted from the audit log);
    a rerun changes nothing and sends no mutating request; the cleanup converges under the same faults."""
    env.sealed_pvc("win11-faults")
    role_vars = dict(
        windows_export_pvc="win11-faults",
        windows_export_bucket=env.private,
        windows_export_license="kms",
        windows_export_import=True,
        windows_export_import_url_base=env.lab.s3.endpoint_url,
        windows_export_import_presign=True,
        windows_export_import_access_key_id=env.lab.s3.access_key,
        windows_export_import_secret_key=env.lab.s3.secret_key,
        windows_export_import_size="64Mi",
    )
    namespaces = (env.namespace, GOLDEN_NS)
    env.lab.clear_audit()
    env.lab.faults.update(dict(FAULTS, seed=2031))
    try:
        with env.lab.through_faults():
            run = env.play(**role_vars)
        injected = env.lab.faults.to_dict()["injected"]
    finally:
        env.lab.faults.reset()
    assert run.ok, run.log
    assert injected["conflict"] and injected["error"] and (injected["drop"] or injected["commit_drop"]), (
        injected
    )
    creates = [w for w in committed_writes(env.lab, namespaces) if w[0] == "create"]
    created = sorted(res for _v, res, _n in creates)
    # One scratch claim, one Job, one import DataVolume, one golden snapshot: nothing made twice.
    assert created.count("persistentvolumeclaims") == 1, creates
    assert created.count("jobs") == 1 and created.count("datavolumes") == 1, creates
    assert created.count("volumesnapshots") == 1, creates
    golden = run["Record the golden made"]["ansible_facts"]["windows_export_golden"]
    assert env.snapshots(GOLDEN_NS)[golden["name"]]["status"]["readyToUse"] is True

    env.lab.clear_audit()
    again = env.play(**role_vars)
    assert again.ok, again.log
    assert [t["task"] for t in again.tasks if t["changed"]] == []
    assert env.lab.mutating_requests() == []

    env.lab.faults.update(dict(FAULTS, seed=2028))
    try:
        clean = run_playbook(
            [
                {
                    "hosts": "localhost",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "cleanup",
                            "ansible.builtin.include_role": {"name": ROLE, "tasks_from": "cleanup"},
                            "vars": {
                                "windows_export_namespace": env.namespace,
                                "windows_export_pvc": "win11-faults",
                            },
                        }
                    ],
                }
            ],
            env=env.lab.env(faults=True),
            timeout=300,
        )
    finally:
        env.lab.faults.reset()
    assert clean.ok, clean.log
    assert env.jobs() == [] and env.pvcs() == ["win11-faults"]
