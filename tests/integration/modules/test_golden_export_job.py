"""golden_export_job in the lab: a Job next to an RBD-like claim converts and uploads, the controller never
sees the disk; reruns write nothing; a key holding another export and a Secret without the keys are refused
before anything is written.

The sealed claim is on `lab-rbd`, whose PersistentVolumes name no path (as Ceph RBD's): only the Job's pod
reaches the bytes. The Job runs the collection's program with the host's python3 and qemu-img; the upload
goes to the lab's S3 with the credentials of a Secret, signed by that program.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid

import pytest

from tests.integration.support import disks
from tests.integration.support.runner import kube_play, module_task, run_playbook
from tests.lab.access import MUTATING_VERBS

pytestmark = [pytest.mark.lab_only, pytest.mark.usefixtures("venv_python_first")]

MIB = 1024 * 1024
MODULE = "goldenimage.pipeline.golden_export_job"


@pytest.fixture(scope="module")
def sealed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("export")
    return disks.windows_disk(folder / "sealed.raw", disks.sealed_windows_files())["path"]


class Env:
    def __init__(self, lab, kube_client, namespace, sealed):
        from kubernetes import client

        self.lab, self.namespace, self.raw = lab, namespace, sealed
        self.core = client.CoreV1Api(kube_client)
        self.batch = client.BatchV1Api(kube_client)
        self.s3 = lab.s3.client()
        self.bucket = "export-" + uuid.uuid4().hex[:8]
        self.s3.create_bucket(Bucket=self.bucket)
        self.core.create_namespaced_secret(
            namespace,
            {
                "metadata": {"name": "bucket-creds"},
                "stringData": {"accessKeyId": lab.s3.access_key, "secretKey": lab.s3.secret_key},
            },
        )

    def claim(self, name: str) -> dict:
        from tests.lab.controllers.volumes import volume_path

        body = {
            "metadata": {"name": name},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "volumeMode": "Block",
                "storageClassName": "lab-rbd",
                "resources": {"requests": {"storage": "128Mi"}},
            },
        }
        self.core.create_namespaced_persistent_volume_claim(self.namespace, body)
        deadline = time.monotonic() + 30
        while not self.core.read_namespaced_persistent_volume_claim(name, self.namespace).spec.volume_name:
            assert time.monotonic() < deadline, "claim %s did not bind" % name
            time.sleep(0.1)
        claim = self.lab.store.get(
            self.lab.store.resource("", "v1", "persistentvolumeclaims"), self.namespace, name
        )
        pv = self.lab.store.get(
            self.lab.store.resource("", "v1", "persistentvolumes"), None, claim["spec"]["volumeName"]
        )
        # RBD-like: nothing on the volume tells the controller where the bytes are.
        assert "hostPath" not in pv["spec"] and "local" not in pv["spec"] and pv["spec"]["csi"]
        disks.run("cp", "--sparse=always", self.raw, volume_path(self.lab.controller_manager.lab, claim))
        return claim

    def task(self, title: str, pvc: str, key: str, check=None, ignore_errors=False, **extra) -> dict:
        s3 = self.lab.s3
        params = dict(
            name="exp-" + uuid.uuid4().hex[:6] if "name" not in extra else extra.pop("name"),
            namespace=self.namespace,
            pvc=pvc,
            bucket=self.bucket,
            key=key,
            credentials_secret="bucket-creds",
            endpoint_url=s3.endpoint_url,
            access_key=s3.access_key,
            secret_key=s3.secret_key,
            scratch_size="256Mi",
            scratch_storage_class="lab-rbd",
            image="registry.example.com/tools/golden-export:1",
            wait_timeout=180,
            wait_sleep=1,
            report_every=5,
        )
        params.update(extra)
        return module_task(MODULE, title, check=check, ignore_errors=ignore_errors, **params)

    def writes(self) -> list[tuple]:
        return [
            (r["verb"], r["resource"], r["name"])
            for r in self.lab.audit()
            if r["verb"] in MUTATING_VERBS and not r.get("dry_run") and r["namespace"] == self.namespace
        ]

    def leftovers(self) -> list[str]:
        found = ["job/%s" % j.metadata.name for j in self.batch.list_namespaced_job(self.namespace).items]
        found += ["pod/%s" % p.metadata.name for p in self.core.list_namespaced_pod(self.namespace).items]
        found += [
            "configmap/%s" % c.metadata.name
            for c in self.core.list_namespaced_config_map(self.namespace).items
            if c.metadata.name != "kube-root-ca.crt"
        ]
        found += [
            "pvc/%s" % c.metadata.name
            for c in self.core.list_namespaced_persistent_volume_claim(self.namespace).items
            if c.metadata.name.endswith("-scratch") and not c.metadata.deletion_timestamp
        ]
        return found


@pytest.fixture
def env(lab, kube_client, kube_namespace, sealed):
    return Env(lab, kube_client, kube_namespace, sealed)


@pytest.mark.suite("idempotence")
def test_an_export_job_uploads_from_a_volume_the_controller_cannot_see(env, tmp_path):
    claim = env.claim("win11-sealed")
    key = "windows/11/2026-08-09/windows11-x64-golden.qcow2"
    env.lab.clear_audit()
    run = run_playbook(
        kube_play(
            env.task("predict", "win11-sealed", key, check=True),
            env.task("export", "win11-sealed", key),
        ),
        env=env.lab.env(),
    )
    assert run.ok, run.log
    writes = env.writes()
    stored = env.s3.head_object(Bucket=env.bucket, Key=key)
    # The second run, alone in the audit log: it must find the export and send no mutating request at all.
    env.lab.clear_audit()
    rerun = run_playbook(
        kube_play(
            env.task("again", "win11-sealed", key), env.task("check again", "win11-sealed", key, check=True)
        ),
        env=env.lab.env(),
    )
    assert rerun.ok, rerun.log
    assert env.lab.mutating_requests() == [], env.lab.mutating_requests()
    again_stored = env.s3.head_object(Bucket=env.bucket, Key=key)
    assert (again_stored["ETag"], again_stored["LastModified"]) == (stored["ETag"], stored["LastModified"])
    assert [o["Key"] for o in env.s3.list_objects_v2(Bucket=env.bucket).get("Contents", [])] == [key]
    assert rerun["check again"]["changed"] is False and rerun["check again"]["action"] == "skip"

    # Check mode predicted the export and wrote nothing.
    predict = run["predict"]
    assert predict["changed"] is True and predict["action"] == "upload"

    # The Job converted and uploaded: a compressed qcow2 of exactly the sealed disk, its sha256 recorded.
    out = run["export"]
    assert out["changed"] is True and out["action"] == "upload", out
    got = env.s3.get_object(Bucket=env.bucket, Key=key)
    body = got["Body"].read()
    digest = hashlib.sha256(body).hexdigest()
    assert out["sha256"] == digest and out["size"] == len(body)
    assert got["Metadata"]["sha256"] == digest
    assert got["Metadata"]["source-url"] == "pvc://%s/win11-sealed" % env.namespace
    assert got["Metadata"]["source-uid"] == claim["metadata"]["uid"]
    assert got["ContentType"] == "application/x-qemu-disk"
    assert body[:4] == b"QFI\xfb"
    exported, back = tmp_path / "exported.qcow2", tmp_path / "back.raw"
    exported.write_bytes(body)
    disks.run("qemu-img", "convert", "-O", "raw", exported, back)
    assert back.read_bytes()[: env.raw.stat().st_size] == env.raw.read_bytes()
    assert out["parts"] >= 1 and out["job"]["namespace"] == env.namespace
    assert any("phase" in line for line in out.get("lines") or [out["line"]])
    assert env.s3.list_multipart_uploads(Bucket=env.bucket).get("Uploads", []) == []

    # Nothing is left: the Job, its pod, the ConfigMap and the scratch claim are gone.
    assert env.leftovers() == []

    # The rerun found the claim's export and wrote nothing at all.
    again = rerun["again"]
    assert again["changed"] is False and again["action"] == "skip" and again["sha256"] == digest
    made = [w for w in writes if w[0] == "create"]
    assert sorted(w[1] for w in made) == ["configmaps", "jobs", "persistentvolumeclaims"], writes


@pytest.mark.suite("data-loss")
def test_a_key_holding_another_export_is_refused_before_anything_is_written(env):
    env.claim("first")
    env.claim("second")
    key = "windows/11/2026-08-10/windows11-x64-golden.qcow2"
    first = run_playbook(kube_play(env.task("first", "first", key)), env=env.lab.env())
    assert first.ok, first.log
    before = env.s3.head_object(Bucket=env.bucket, Key=key)
    env.lab.clear_audit()
    run = run_playbook(kube_play(env.task("second", "second", key, ignore_errors=True)), env=env.lab.env())
    out = run["second"]
    assert run.entry("second")["status"] == "ignored" and out["refused"] is True, out
    assert "s3://%s/%s" % (env.bucket, key) in out["msg"] and "new key" in out["msg"], out["msg"]
    assert "pvc://%s/first" % env.namespace in out["msg"]
    assert env.writes() == []
    now = env.s3.head_object(Bucket=env.bucket, Key=key)
    assert (now["ETag"], now["LastModified"]) == (before["ETag"], before["LastModified"])


@pytest.mark.suite("bad-input")
def test_bad_input_is_refused_before_anything_is_written(env):
    env.claim("sealed")
    env.core.create_namespaced_secret(
        env.namespace, {"metadata": {"name": "no-keys"}, "stringData": {"user": "x"}}
    )
    env.lab.clear_audit()
    tasks = [
        env.task("no keys", "sealed", "a/b.qcow2", credentials_secret="no-keys", ignore_errors=True),
        env.task("no secret", "sealed", "a/b.qcow2", credentials_secret="absent", ignore_errors=True),
        env.task("no claim", "absent", "a/b.qcow2", ignore_errors=True),
        env.task("bad key", "sealed", "../b.qcow2", ignore_errors=True),
        env.task(
            "url secret",
            "sealed",
            "a/b.qcow2",
            pod_endpoint_url="http://user:pw@s3.local",
            ignore_errors=True,
        ),
        env.task("no scratch", "sealed", "a/b.qcow2", scratch_size="0", ignore_errors=True),
        env.task("negative", "sealed", "a/b.qcow2", wait_timeout=-5, ignore_errors=True),
    ]
    run = run_playbook(kube_play(*tasks), env=env.lab.env())
    messages = {
        t: run[t]["msg"]
        for t in ("no keys", "no secret", "no claim", "bad key", "url secret", "no scratch", "negative")
    }
    assert all(run.entry(t)["status"] == "ignored" for t in messages), messages
    assert "Secret %s/no-keys" % env.namespace in messages["no keys"] and "accessKeyId" in messages["no keys"]
    assert "Secret %s/absent" % env.namespace in messages["no secret"]
    assert "PersistentVolumeClaim %s/absent" % env.namespace in messages["no claim"]
    assert "option key" in messages["bad key"]
    assert "pw" not in messages["url secret"] and "pod_endpoint_url" in messages["url secret"]
    assert "scratch_size" in messages["no scratch"]
    assert "wait_timeout" in messages["negative"]
    assert env.writes() == []
    assert env.s3.list_objects_v2(Bucket=env.bucket).get("KeyCount", 0) == 0


@pytest.mark.suite("data-loss")
def test_a_timeout_leaves_no_object_no_parts_and_no_objects_behind(env):
    """The Job's deadline is the wait's: past it the Job is killed, what the export made is deleted and a
    multipart upload it left is aborted; the key stays free. The disk is 120 MiB of random bytes, which
    compress to nothing: the export cannot finish inside the one-second deadline, even on a fast host."""
    from tests.lab.controllers.volumes import volume_path

    claim = env.claim("slow")
    with open(volume_path(env.lab.controller_manager.lab, claim), "r+b") as disk:
        disk.write(os.urandom(120 * MIB))
    key = "windows/11/2026-08-11/windows11-x64-golden.qcow2"
    run = run_playbook(
        kube_play(env.task("late", "slow", key, wait_timeout=1, wait_sleep=1, ignore_errors=True)),
        env=env.lab.env(),
    )
    out = run["late"]
    assert run.entry("late")["status"] == "ignored", out
    assert "timed out" in out["msg"] or "failed" in out["msg"], out["msg"]
    assert env.leftovers() == []
    assert env.s3.list_objects_v2(Bucket=env.bucket).get("KeyCount", 0) == 0
    assert env.s3.list_multipart_uploads(Bucket=env.bucket).get("Uploads", []) == []


@pytest.mark.suite("data-loss")
def test_names_taken_by_objects_it_did_not_make_are_refused_and_never_deleted(env):
    """The scratch claim's name is derived from the Job's: an unrelated claim under it (here the sealed
    disk itself, and another team's volume) is refused before any write and never deleted."""
    env.claim("db-scratch")  # someone's volume that happens to carry the scratch name of Job "db"
    env.claim("vol-scratch")  # a sealed disk named like the scratch claim of Job "vol"
    env.lab.clear_audit()
    run = run_playbook(
        kube_play(
            env.task("taken", "vol-scratch", "a/b.qcow2", name="db", ignore_errors=True),
            env.task("itself", "vol-scratch", "a/c.qcow2", name="vol", ignore_errors=True),
        ),
        env=env.lab.env(),
    )
    for title, claim in (("taken", "db-scratch"), ("itself", "vol-scratch")):
        out = run[title]
        assert run.entry(title)["status"] == "ignored" and out["refused"] is True, out
        assert "PersistentVolumeClaim %s/%s" % (env.namespace, claim) in out["msg"]
        assert "another name" in out["msg"]
    assert env.writes() == []
    names = [c.metadata.name for c in env.core.list_namespaced_persistent_volume_claim(env.namespace).items]
    assert sorted(names) == ["db-scratch", "vol-scratch"]
    assert env.s3.list_objects_v2(Bucket=env.bucket).get("KeyCount", 0) == 0


def leave_export_objects(env, name):
    """The ConfigMap and scratch claim an export Job ``name`` made, with its mark; returns the mark."""
    mark = {"goldenimage.pipeline/export-job": name}
    env.core.create_namespaced_config_map(env.namespace, {"metadata": {"name": name, "labels": mark}})
    env.core.create_namespaced_persistent_volume_claim(
        env.namespace,
        {
            "metadata": {"name": name + "-scratch", "labels": mark},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}},
        },
    )
    return mark


@pytest.mark.suite("data-loss")
def test_state_absent_removes_what_an_interrupted_export_left_and_nothing_else(env):
    """A killed controller leaves the Job running, its ConfigMap, its scratch claim and a pending upload;
    state=absent removes exactly those. A claim under another export's scratch name that this collection
    did not make is reported, never deleted; check mode and a rerun write nothing."""
    mark = leave_export_objects(env, "left")
    env.batch.create_namespaced_job(
        env.namespace,
        {
            "metadata": {"name": "left", "labels": mark},
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "metadata": {"labels": mark},
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {"name": "export", "image": "golden-export:1", "command": ["sleep", "300"]}
                        ],
                    },
                },
            },
        },
    )
    env.claim("other-scratch")  # another team's claim, under the scratch name of export "other"
    key = "windows/11/2026-08-12/windows11-x64-golden.qcow2"
    pending = env.s3.create_multipart_upload(Bucket=env.bucket, Key=key)["UploadId"]
    deadline = time.monotonic() + 30
    while not env.core.list_namespaced_pod(env.namespace, label_selector="job-name=left").items:
        assert time.monotonic() < deadline, "the Job's pod did not start"
        time.sleep(0.2)
    s3 = env.lab.s3
    auth = dict(endpoint_url=s3.endpoint_url, access_key=s3.access_key, secret_key=s3.secret_key)

    def absent(title, name, check=None, **extra):
        return module_task(
            MODULE,
            title,
            check=check,
            name=name,
            namespace=env.namespace,
            state="absent",
            **dict(auth, **extra),
        )

    env.lab.clear_audit()
    run = run_playbook(
        kube_play(
            absent("predict", "left", check=True, bucket=env.bucket, key=key),
            absent("remove", "left", bucket=env.bucket, key=key),
            absent("again", "left", bucket=env.bucket, key=key),
            absent("foreign", "other"),
        ),
        env=env.lab.env(),
    )
    assert run.ok, run.log
    predict, remove, again, foreign = (run[t] for t in ("predict", "remove", "again", "foreign"))
    assert predict["changed"] is True and "Job %s/left" % env.namespace in predict["removed"], predict
    assert remove["changed"] is True and remove["aborted_uploads"] == [pending], remove
    # The Job's pod is deleted and waited for by the module, unless the garbage collector was first.
    assert {r.split()[0] for r in remove["removed"]} - {"Pod"} == {
        "ConfigMap",
        "Job",
        "PersistentVolumeClaim",
    }
    assert again["changed"] is False and again["removed"] == []
    assert foreign["changed"] is False and foreign["removed"] == []
    assert foreign["left_alone"] == ["PersistentVolumeClaim %s/other-scratch" % env.namespace]
    deleted = sorted((w[1], w[2]) for w in env.writes() if w[0] == "delete" and w[1] != "pods")
    assert deleted == [("configmaps", "left"), ("jobs", "left"), ("persistentvolumeclaims", "left-scratch")]
    assert env.leftovers() == ["pvc/other-scratch"]
    assert env.s3.list_multipart_uploads(Bucket=env.bucket).get("Uploads", []) == []


@pytest.mark.suite("data-loss")
def test_state_absent_refuses_while_anything_else_uses_the_scratch_claim(env):
    """The scratch claim carries the export's mark, but a debugging pod (not the Job's) mounts it: who uses
    it is asked first, the task is refused naming the pod, and nothing at all is deleted."""
    leave_export_objects(env, "held")
    env.core.create_namespaced_pod(
        env.namespace,
        {
            "metadata": {"name": "debug"},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "sh",
                        "image": "busybox:1",
                        "command": ["sleep", "300"],
                        "volumeMounts": [{"name": "s", "mountPath": "/s"}],
                    }
                ],
                "volumes": [{"name": "s", "persistentVolumeClaim": {"claimName": "held-scratch"}}],
            },
        },
    )
    s3 = env.lab.s3
    env.lab.clear_audit()
    run = run_playbook(
        kube_play(
            module_task(
                MODULE,
                "held",
                ignore_errors=True,
                name="held",
                namespace=env.namespace,
                state="absent",
                endpoint_url=s3.endpoint_url,
                access_key=s3.access_key,
                secret_key=s3.secret_key,
            )
        ),
        env=env.lab.env(),
    )
    out = run["held"]
    assert run.entry("held")["status"] == "ignored" and out["refused"] is True, out
    assert (
        "Pod %s/debug mounts PersistentVolumeClaim %s/held-scratch" % (env.namespace, env.namespace)
        in out["msg"]
    )
    assert [w for w in env.writes() if w[0] == "delete"] == []
    assert (
        env.core.read_namespaced_persistent_volume_claim(
            "held-scratch", env.namespace
        ).metadata.deletion_timestamp
        is None
    )
    assert env.core.read_namespaced_config_map("held", env.namespace)


@pytest.mark.parametrize("kind", ["private", "getonly"])
def test_a_licensed_export_proves_its_bucket_private_in_the_job_before_its_first_byte(env, kind):
    """The Job's program reads the bucket's controls and an anonymously probed canary before it converts:
    a bucket granting anonymous s3:GetObject without s3:ListBucket is refused, a private one exported to;
    an anonymous poller reads nothing either way."""
    import json

    from tests.integration.modules.test_exposure_before_upload import Poller

    key = "licensed/windows/11/2026-09-02/windows11-x64-golden.qcow2"
    if kind == "getonly":
        statement = {
            "Effect": "Allow",
            "Principal": "*",
            "Action": "s3:GetObject",
            "Resource": "arn:aws:s3:::%s/*" % env.bucket,
        }
        env.s3.put_bucket_policy(Bucket=env.bucket, Policy=json.dumps({"Statement": [statement]}))
    env.claim("sealed-" + kind)
    task = env.task("export", "sealed-" + kind, key, ignore_errors=True, license="kms")
    with Poller(env.lab.s3.endpoint_url, env.bucket, key, key.rpartition("/")[0] + "/") as poller:
        run = run_playbook(kube_play(task), env=env.lab.env())
    out = run["export"]
    assert poller.rounds > 0 and poller.reads == 0
    keys = [o["Key"] for o in env.s3.list_objects_v2(Bucket=env.bucket).get("Contents", [])]
    if kind == "private":
        assert run.entry("export")["status"] == "ok" and out["changed"] is True, out
        assert out["exposure"]["verdict"] == "private" and out["exposure"]["canary_deleted"] is True
        assert keys == [key]
    else:
        assert run.entry("export")["status"] == "ignored" and out["refused"] is True, out
        assert out["code"] == "exposed"
        assert "bucket %s is public" % env.bucket in out["msg"]
        assert "anonymous get of the canary HTTP 200" in out["msg"] and "source.s3" in out["msg"]
        assert keys == []
    assert env.leftovers() == []


@pytest.mark.suite("idempotence")
def test_an_export_job_signs_what_it_exports_and_a_bad_key_writes_nothing(env, tmp_path):
    """Given a signing key, the controller signs the object the Job stored (over the sha256 it read back):
    the .sig and .intoto.jsonl beside it verify with the trust policy's key for the object's digest and
    name the exported claim; a key that cannot be read is refused before the first request."""
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    env.claim("win11-signed")
    obj = "windows/11/2026-08-10/windows11-x64-golden.qcow2"
    env.lab.clear_audit()
    bad = run_playbook(
        kube_play(
            env.task(
                "bad key", "win11-signed", obj, ignore_errors=True, signing_key_path=str(tmp_path / "none")
            )
        ),
        env=env.lab.env(),
    )
    assert "signing_key_path" in bad["bad key"]["msg"] and "cannot be read" in bad["bad key"]["msg"]
    assert env.writes() == [] and env.lab.mutating_requests() == [], env.lab.mutating_requests()
    run = run_playbook(
        kube_play(
            env.task("export", "win11-signed", obj, signing_key=pem, builder={"playbook": "export.yml"})
        ),
        env=env.lab.env(),
    )
    assert run.ok, run.log
    out = run["export"]
    assert out["signed"]["key_id"] == signing.key_id(key), out
    texts = [
        env.s3.get_object(Bucket=env.bucket, Key=name)["Body"].read().decode()
        for name in provenance.companions(obj)
    ]
    policy = provenance.normalize_policy(
        {"rules": [{"public_key": signing.public_pem(key), "name": "export"}]}
    )
    ring = signing.keyring(provenance.public_keys(policy))
    signature, found = signing.evidence(ring, texts[0], texts[1], out["sha256"])
    verdict = provenance.judge(
        {"name": obj, "digest": {"sha256": out["sha256"]}}, "windows-11", None, policy, signature, found
    )
    assert verdict["verdict"] == "verified", verdict
    inputs = {i["name"]: i for i in provenance.summary(found["statement"])["inputs"]}
    assert inputs["exported-volume"]["uri"] == "pvc://%s/win11-signed" % env.namespace
    assert provenance.summary(found["statement"])["builder"]["playbook"] == "export.yml"
    # Signed over other bytes, the same files are refused.
    other = provenance.judge(
        {"name": obj, "digest": {"sha256": "0" * 64}},
        "windows-11",
        None,
        policy,
        *signing.evidence(ring, texts[0], texts[1], "0" * 64),
    )
    assert other["verdict"] == "signature_mismatch", other

    # A run stopped between the upload and the signing leaves the object unsigned: the next run reads the
    # claim again and signs the digest its Job computes; the object is not written again.
    stored = env.s3.head_object(Bucket=env.bucket, Key=obj)
    for name in provenance.companions(obj):
        env.s3.delete_object(Bucket=env.bucket, Key=name)
    again = run_playbook(
        kube_play(
            env.task("unsigned", "win11-signed", obj, signing_key=pem, builder={"playbook": "export.yml"}),
            env.task("signed", "win11-signed", obj, signing_key=pem, builder={"playbook": "export.yml"}),
        ),
        env=env.lab.env(),
    )
    assert again.ok, again.log
    resigned, kept = again["unsigned"], again["signed"]
    assert resigned["changed"] is True and resigned["action"] == "skip", resigned
    assert resigned["signed"]["signature_changed"] and resigned["signed"]["provenance_changed"], resigned
    assert resigned["sha256"] == out["sha256"] and "job" in resigned, resigned
    assert env.s3.head_object(Bucket=env.bucket, Key=obj)["ETag"] == stored["ETag"]
    texts = [
        env.s3.get_object(Bucket=env.bucket, Key=name)["Body"].read().decode()
        for name in provenance.companions(obj)
    ]
    assert signing.evidence(ring, texts[0], texts[1], out["sha256"])[0]["key"] == signing.key_id(key)
    assert kept["changed"] is False and kept["action"] == "skip", kept
    assert env.leftovers() == []
