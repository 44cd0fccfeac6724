"""The Linux producer end to end on the lab: a real qcow2 in the loopback bucket, CDI import, a Job
running the real qemu-img into a Block volume, the golden snapshot, and the receiving-cluster path.

Byte comparisons read the lab's volume store, so the whole module is ``lab_only``. Each test works
under its own family prefix and removes what it made.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import subprocess
import uuid

import pytest

from tests.integration.support.runner import ROOT, run_playbook
from tests.integration.support.secrets import cluster_traces, leaks, new_secret, run_traces, with_password
from tests.lab.controllers.cdi import publish_container_disk
from tests.lab.controllers.volumes import snapshot_data
from tests.lab.s3 import make_public

pytestmark = pytest.mark.lab_only

BLOCK_NS, FS_NS = "golden-images-block", "golden-images"
PUBLISH = ROOT / "playbooks" / "publish_linux_golden.yml"
DATE = "2026-08-28"
SIZE = 8 * 1024 * 1024
ROLE = "goldenimage.pipeline.linux_golden"
SOURCE_CHECK = (
    "Check each image's source (refuses credentials in a URL, a tag without a digest, an http source "
    "without a sha256 checksum)"
)


def make_disk(workdir: pathlib.Path, seed: int) -> tuple[pathlib.Path, pathlib.Path]:
    """A raw disk with random data in two places and holes elsewhere, and its qcow2 conversion."""
    raw = workdir / ("disk-%d.raw" % seed)
    with open(raw, "wb") as handle:
        handle.truncate(SIZE)
        for offset in (0, SIZE // 2 + 4096):
            handle.seek(offset)
            handle.write(os.urandom(256 * 1024))
    qcow2 = raw.with_suffix(".qcow2")
    subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(raw), str(qcow2)], check=True)
    return raw, qcow2


def sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Env:
    """Arrange a test's bucket objects and look at what the role made."""

    def __init__(self, lab, api_client, tmp_path):
        from kubernetes import client

        self.lab = lab
        self.core = client.CoreV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.prefix = "t%s" % uuid.uuid4().hex[:8]
        self.tmp = tmp_path
        self.bucket = "%s-mirror" % self.prefix
        self.s3 = self._s3()
        self.s3.create_bucket(Bucket=self.bucket)
        for namespace in (BLOCK_NS, FS_NS):
            self.ensure_namespace(namespace)

    def ensure_namespace(self, name):
        from kubernetes.client.rest import ApiException

        try:
            self.core.create_namespace({"metadata": {"name": name}})
        except ApiException as exc:
            if exc.status != 409:
                raise

    def _s3(self):
        return self.lab.s3.client()

    def key(self, path: pathlib.Path, family: str) -> str:
        """The object's key under the mirror's digest layout."""
        return "%s/1/sha256-%s/%s" % (family, sha256(path), path.name)

    def url(self, path: pathlib.Path, family: str) -> str:
        return "%s/%s/%s" % (self.lab.s3.endpoint_url, self.bucket, self.key(path, family))

    def upload(self, path: pathlib.Path, family: str, public: bool = True) -> tuple[str, str]:
        """(url, sha256 hex) of the object under the mirror's digest key; anonymously readable if public."""
        self.s3.upload_file(str(path), self.bucket, self.key(path, family))
        if public:
            make_public(self.s3, self.bucket, [self.key(path, family)])
        return self.url(path, family), sha256(path)

    def snapshot(self, namespace: str, name: str) -> dict | None:
        from kubernetes.client.rest import ApiException

        try:
            return self.custom.get_namespaced_custom_object(
                "snapshot.storage.k8s.io", "v1", namespace, "volumesnapshots", name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def golden_bytes(self, namespace: str, name: str) -> bytes:
        snap = self.snapshot(namespace, name)
        content = self.custom.get_cluster_custom_object(
            "snapshot.storage.k8s.io",
            "v1",
            "volumesnapshotcontents",
            snap["status"]["boundVolumeSnapshotContentName"],
        )
        path, _size = snapshot_data(self.lab, content["status"]["snapshotHandle"])
        return (path / "disk.img" if path.is_dir() else path).read_bytes()

    def names(self, kind_list, namespace):
        return sorted(i.metadata.name for i in kind_list(namespace).items if self.prefix in i.metadata.name)

    def datavolumes(self, namespace: str) -> list[str]:
        found = self.custom.list_namespaced_custom_object(
            "cdi.kubevirt.io", "v1beta1", namespace, "datavolumes"
        )
        return sorted(i["metadata"]["name"] for i in found["items"] if self.prefix in i["metadata"]["name"])

    def cleanup(self):
        from kubernetes.client.rest import ApiException

        def delete(call, *args, **kwargs):
            # What a DataVolume owned goes with it meanwhile (its import PVC): already gone is done.
            try:
                call(*args, **kwargs)
            except ApiException as exc:
                if exc.status != 404:
                    raise

        snapshots = ("snapshot.storage.k8s.io", "v1")
        for namespace in (BLOCK_NS, FS_NS):
            for name in self.datavolumes(namespace):
                delete(
                    self.custom.delete_namespaced_custom_object,
                    "cdi.kubevirt.io",
                    "v1beta1",
                    namespace,
                    "datavolumes",
                    name,
                )
            found = self.custom.list_namespaced_custom_object(*snapshots, namespace, "volumesnapshots")
            for item in found["items"]:
                if self.prefix in item["metadata"]["name"]:
                    delete(
                        self.custom.delete_namespaced_custom_object,
                        *snapshots,
                        namespace,
                        "volumesnapshots",
                        item["metadata"]["name"],
                    )
            for name in self.names(self.batch.list_namespaced_job, namespace):
                delete(self.batch.delete_namespaced_job, name, namespace, propagation_policy="Background")
            for name in self.names(self.core.list_namespaced_persistent_volume_claim, namespace):
                delete(self.core.delete_namespaced_persistent_volume_claim, name, namespace)
            for name in self.names(self.core.list_namespaced_secret, namespace):
                delete(self.core.delete_namespaced_secret, name, namespace)


@pytest.fixture
def env(lab, kube_client, tmp_path):
    arranged = Env(lab, kube_client, tmp_path)
    try:
        yield arranged
    finally:
        lab.faults.reset()
        arranged.cleanup()


def image(env, family, source, size=SIZE):
    return {"family": family, "os_name": "Test Linux %s" % family, "source": source, "size": str(size)}


def publish(env, images, **extra):
    extra_vars = {"linux_golden_images": images, "linux_golden_date": DATE, "linux_golden_poll_interval": 1}
    extra_vars.update(extra)
    return run_playbook(PUBLISH, env=env.lab.env(), extra_vars=extra_vars, timeout=240)


def golden_name(family, digest_hex):
    return "golden-%s-%s-%s" % (family, DATE.replace("-", ""), digest_hex[:12])


def role_play(*tasks):
    return [{"name": "linux_golden", "hosts": "localhost", "gather_facts": False, "tasks": list(tasks)}]


def include(title, tasks_from="main", rescue_name=None, **role_vars):
    """Include the role; with ``rescue_name`` a failure is recorded by a task of that name instead."""
    entry = {
        "name": title,
        "ansible.builtin.include_role": {"name": ROLE, "tasks_from": tasks_from},
        "vars": dict({"linux_golden_date": DATE, "linux_golden_poll_interval": 1}, **role_vars),
    }
    if rescue_name is None:
        return entry
    return {
        "name": "%s (block)" % title,
        "block": [
            entry,
            {"name": "%s should have failed" % title, "ansible.builtin.fail": {"msg": "accepted"}},
        ],
        "rescue": [
            {
                "name": rescue_name,
                "ansible.builtin.debug": {"msg": "{{ ansible_failed_result.msg }}"},
            }
        ],
    }


# --------------------------------------------------------------------------------------------- tests


@pytest.mark.suite("idempotence")
def test_publish_end_to_end_then_again(env):
    family = "%s-deb" % env.prefix
    raw, qcow2 = make_disk(env.tmp, 1)
    url, digest = env.upload(qcow2, family)
    images = [image(env, family, {"http": {"url": url, "checksum": "sha256:" + digest}})]
    name = golden_name(family, digest)

    first = publish(env, images)
    assert first.ok, first.log
    snap = env.snapshot(BLOCK_NS, name)
    assert snap["status"]["readyToUse"] is True
    assert snap["metadata"]["labels"] == {"kube-dc.com/golden-os": family, "kube-dc.com/golden-mode": "Block"}
    assert "kube-dc.com/golden-active" not in snap["metadata"]["labels"]
    assert [r["problems"] for r in first["Validate each golden against the contract"]["results"]] == [[]]
    # Each change of the import was shown while waiting.
    shown = [r["msg"] for r in first.results("Show the import's phase and progress")]
    assert any("phase Succeeded, progress 100.0%" in m for m in shown), shown
    # The golden holds exactly the raw conversion of the source.
    assert env.golden_bytes(BLOCK_NS, name) == raw.read_bytes()
    # Intermediates are gone; the golden's source volume stays.
    assert env.datavolumes(BLOCK_NS) == []
    assert env.names(env.batch.list_namespaced_job, BLOCK_NS) == []
    assert env.names(env.core.list_namespaced_persistent_volume_claim, BLOCK_NS) == [name + "-disk"]

    env.lab.clear_audit()
    second = publish(env, images)
    assert second.ok, second.log
    changed = [t["task"] for t in second.tasks if t["result"].get("changed")]
    assert changed == [], changed
    assert second["Snapshot the Block volume as golden %s" % name]["action"] == "none"
    # Not one write anywhere: no namespace, Secret, import or snapshot is touched again.
    writes = env.lab.mutating_requests()
    assert writes == [], writes


@pytest.mark.suite("idempotence")
def test_publish_in_check_mode_runs_to_the_end_and_writes_nothing(env):
    """Nothing exists yet, so every step after the import only predicts: the conversion Job is reported as
    what would run, the golden as what would be made, and the run ends without a write."""
    family = "%s-chk" % env.prefix
    _raw, qcow2 = make_disk(env.tmp, 3)
    url, digest = env.upload(qcow2, family)
    images = [image(env, family, {"http": {"url": url, "checksum": "sha256:" + digest}})]
    env.lab.clear_audit()
    run = run_playbook(
        PUBLISH,
        env=env.lab.env(),
        extra_vars={
            "linux_golden_images": images,
            "linux_golden_date": DATE,
            "linux_golden_poll_interval": 1,
        },
        timeout=240,
        check=True,
    )
    assert run.ok, run.log
    assert env.lab.mutating_requests() == []
    assert env.snapshot(BLOCK_NS, golden_name(family, digest)) is None


def test_refusals_write_nothing(env):
    family = "%s-bad" % env.prefix
    images = [
        image(env, family, {"registry": "docker://quay.io/containerdisks/debian:12"}),
        image(env, family + "2", {"http": {"url": "%s/%s/x.qcow2" % (env.lab.s3.endpoint_url, env.bucket)}}),
    ]
    env.lab.clear_audit()
    run = publish(env, images)
    assert not run.ok
    assert env.lab.mutating_requests() == []
    messages = [r.get("msg", "") for r in run[SOURCE_CHECK]["results"]]
    assert "registry source docker://quay.io/containerdisks/debian:12 has no digest" in messages[0]
    assert "pin it as docker://quay.io/containerdisks/debian@sha256:<digest>" in messages[0]
    assert "has no checksum" in messages[1] and "checksum: sha256:<hex" in messages[1]


def test_failed_imports_stop_with_the_cdi_message(env):
    _raw, qcow2 = make_disk(env.tmp, 2)
    faulty, mismatched = "%s-fault" % env.prefix, "%s-sum" % env.prefix
    url, digest = env.upload(qcow2, faulty)
    wrong = hashlib.sha256(b"other bytes").hexdigest()
    env.lab.faults.update(
        {"objects": {"DataVolume/%s/%s-import" % (BLOCK_NS, golden_name(faulty, digest)): "fail"}}
    )
    run = run_playbook(
        role_play(
            include(
                "faulty import",
                rescue_name="faulty import refused",
                linux_golden_images=[
                    image(env, faulty, {"http": {"url": url, "checksum": "sha256:" + digest}})
                ],
            ),
            include(
                "checksum mismatch",
                rescue_name="checksum mismatch refused",
                linux_golden_images=[
                    image(env, mismatched, {"http": {"url": url, "checksum": "sha256:" + wrong}})
                ],
            ),
        ),
        env=env.lab.env(),
        timeout=240,
    )
    assert run.ok, run.log
    faulty_msg = run["faulty import refused"]["msg"]
    assert "DataVolume %s/%s-import failed to import" % (BLOCK_NS, golden_name(faulty, digest)) in faulty_msg
    assert "injected failure: the importer pod failed" in faulty_msg
    mismatch_msg = run["checksum mismatch refused"]["msg"]
    assert "checksum mismatch: expected sha256:%s, calculated sha256:%s" % (wrong, digest) in mismatch_msg
    # The role stopped at the import: no conversion, no golden.
    assert env.names(env.batch.list_namespaced_job, BLOCK_NS) == []
    assert env.snapshot(BLOCK_NS, golden_name(faulty, digest)) is None
    assert env.snapshot(BLOCK_NS, golden_name(mismatched, wrong)) is None


@pytest.mark.parametrize(
    "tasks_from, namespace, suffix, items",
    [
        ("main", BLOCK_NS, "-import", "linux_golden_images"),
        ("distribute", FS_NS, "-disk", "linux_golden_artifacts"),
    ],
)
def test_a_rerun_over_a_failed_import_refuses_it_or_replaces_it(env, tasks_from, namespace, suffix, items):
    """A rerun over a Failed DataVolume writes nothing and names it (a patch would show the old failure as
    new); with linux_golden_replace_failed it is deleted and created anew, and the import succeeds."""
    family = "%s-%s" % (env.prefix, tasks_from[:4])
    raw, qcow2 = make_disk(env.tmp, 8)
    digest = sha256(qcow2)
    # Anonymously readable, but not the bytes its checksum names (a truncated upload): CDI's importer fails.
    url = env.url(qcow2, family)
    truncated = env.tmp / "truncated.qcow2"
    truncated.write_bytes(qcow2.read_bytes()[: qcow2.stat().st_size // 2])
    env.s3.upload_file(str(truncated), env.bucket, env.key(qcow2, family))
    make_public(env.s3, env.bucket, [env.key(qcow2, family)])
    name = golden_name(family, digest)
    dv_name = name + suffix
    role_vars = {items: [image(env, family, {"http": {"url": url, "checksum": "sha256:" + digest}})]}

    def rerun(title):
        return run_playbook(
            role_play(include(title, tasks_from=tasks_from, rescue_name=title + " refused", **role_vars)),
            env=env.lab.env(),
            timeout=240,
        )

    def read_dv():
        return env.custom.get_namespaced_custom_object(
            "cdi.kubevirt.io", "v1beta1", namespace, "datavolumes", dv_name
        )

    first = rerun("truncated object")
    assert first.ok, first.log
    assert "checksum mismatch" in first["truncated object refused"]["msg"], first["truncated object refused"]
    failed = read_dv()
    assert failed["status"]["phase"] == "Failed"

    env.lab.clear_audit()
    again = rerun("rerun")
    assert again.ok, again.log
    refused = again["rerun refused"]["msg"]
    where = "%s/%s" % (namespace, dv_name)
    assert "DataVolume %s is Failed from an earlier import" % where in refused, refused
    assert "checksum mismatch" in refused, refused
    assert (
        "delete the Failed DataVolume %s first, or set linux_golden_replace_failed: true" % where in refused
    )
    # Refused before any write: the DataVolume is the one the first run left, untouched.
    writes = [
        (r["verb"], r["resource"], r["name"])
        for r in env.lab.mutating_requests()
        if r["namespace"] == namespace
    ]
    assert writes == [], writes
    assert read_dv()["metadata"]["resourceVersion"] == failed["metadata"]["resourceVersion"]

    env.upload(qcow2, family)
    env.lab.clear_audit()
    replaced = run_playbook(
        role_play(include("replace", tasks_from=tasks_from, linux_golden_replace_failed=True, **role_vars)),
        env=env.lab.env(),
        timeout=240,
    )
    assert replaced.ok, replaced.log
    dv_writes = [
        r["verb"]
        for r in env.lab.mutating_requests()
        if r["resource"] == "datavolumes" and r["name"] == dv_name and not r["subresource"]
    ]
    # Deleted, then created anew (main then removes it as an intermediate).
    assert dv_writes[:2] == ["delete", "create"], dv_writes
    assert "patch" not in dv_writes, dv_writes
    assert env.snapshot(namespace, name)["status"]["readyToUse"] is True
    assert env.golden_bytes(namespace, name) == raw.read_bytes()
    if tasks_from == "distribute":
        kept = read_dv()
        assert kept["status"]["phase"] == "Succeeded"
        assert kept["metadata"]["uid"] != failed["metadata"]["uid"]


def test_distribute_from_a_private_bucket_and_a_registry_source(env):
    raw, qcow2 = make_disk(env.tmp, 3)
    shipped, from_registry = "%s-win" % env.prefix, "%s-reg" % env.prefix
    url, digest = env.upload(qcow2, shipped, public=False)
    access_key, secret_key = env.lab.s3.access_key, env.lab.s3.secret_key
    raw2, qcow2_2 = make_disk(env.tmp, 4)
    pinned = publish_container_disk(env.lab, qcow2_2)
    reference = "docker://registry.lab/containerdisks/%s@%s" % (from_registry, pinned)
    # The bucket answers no anonymous read, and CDI reads only anonymously or by basic auth: presigned.
    artifact = image(env, shipped, {"http": {"url": url, "checksum": "sha256:" + digest, "presign": True}})
    run = run_playbook(
        role_play(
            include(
                "distribute",
                tasks_from="distribute",
                linux_golden_artifacts=[artifact],
                linux_golden_bucket_access_key_id=access_key,
                linux_golden_bucket_secret_key=secret_key,
            ),
            include("registry", linux_golden_images=[image(env, from_registry, {"registry": reference})]),
        ),
        env=env.lab.env(),
        timeout=240,
    )
    assert run.ok, run.log
    assert secret_key not in run.stdout and access_key not in run.stdout
    assert "X-Amz-Signature" not in run.stdout

    # Receiving cluster: a Filesystem golden of the imported volume, which stays as its source.
    name = golden_name(shipped, digest)
    snap = env.snapshot(FS_NS, name)
    assert snap["status"]["readyToUse"] is True
    assert snap["spec"]["source"]["persistentVolumeClaimName"] == name + "-disk"
    assert snap["metadata"]["annotations"]["kube-dc.com/golden-mode"] == "Filesystem"
    dv = env.custom.get_namespaced_custom_object(
        "cdi.kubevirt.io", "v1beta1", FS_NS, "datavolumes", name + "-disk"
    )
    http = dv["spec"]["source"]["http"]
    assert sorted(http) == ["checksum", "url"] and http["checksum"] == "sha256:" + digest  # no secretRef
    assert http["url"].startswith(url + "?") and "X-Amz-Signature=" in http["url"]
    assert env.names(env.core.list_namespaced_secret, FS_NS) == []
    assert env.golden_bytes(FS_NS, name) == raw.read_bytes()

    # Registry source: the digest in the reference names the golden.
    reg_name = golden_name(from_registry, pinned[len("sha256:") :])
    assert env.snapshot(BLOCK_NS, reg_name)["status"]["readyToUse"] is True
    assert env.golden_bytes(BLOCK_NS, reg_name) == raw2.read_bytes()


def test_distribute_from_a_private_s3_bucket_with_a_presigned_url(env):
    raw, qcow2 = make_disk(env.tmp, 5)
    url, digest = env.upload(qcow2, "%s-private" % env.prefix, public=False)
    signed, basic = "%s-psg" % env.prefix, "%s-bas" % env.prefix
    credentials = {
        "linux_golden_bucket_access_key_id": env.lab.s3.access_key,
        "linux_golden_bucket_secret_key": env.lab.s3.secret_key,
    }

    def artifact(family, **http):
        return image(env, family, {"http": dict({"url": url, "checksum": "sha256:" + digest}, **http)})

    run = run_playbook(
        role_play(
            include(
                "presigned",
                tasks_from="distribute",
                linux_golden_artifacts=[artifact(signed, presign=True)],
                linux_golden_presign_expiry=600,
                **credentials,
            ),
            include(
                "basic auth",
                tasks_from="distribute",
                rescue_name="basic auth refused",
                linux_golden_artifacts=[artifact(basic, secret_ref="%s-basic" % env.prefix)],
                **credentials,
            ),
            include(
                "both",
                tasks_from="distribute",
                rescue_name="both refused",
                linux_golden_artifacts=[artifact("%s-both" % env.prefix, presign=True, secret_ref="x")],
            ),
        ),
        env=env.lab.env(),
        timeout=240,
    )
    assert run.ok, run.log
    assert env.lab.s3.secret_key not in run.stdout and "X-Amz-Signature" not in run.stdout

    name = golden_name(signed, digest)
    assert env.snapshot(FS_NS, name)["status"]["readyToUse"] is True
    assert env.golden_bytes(FS_NS, name) == raw.read_bytes()
    dv = env.custom.get_namespaced_custom_object(
        "cdi.kubevirt.io", "v1beta1", FS_NS, "datavolumes", name + "-disk"
    )
    http = dv["spec"]["source"]["http"]
    assert sorted(http) == ["checksum", "url"] and http["checksum"] == "sha256:" + digest  # no secretRef
    assert http["url"].startswith(url + "?") and "X-Amz-Expires=600" in http["url"]

    # CDI sends a secretRef as basic auth: S3 answers 400 and the import fails with CDI's words.
    refused = run["basic auth refused"]["msg"]
    assert "failed to import" in refused and "got 400" in refused, refused
    assert env.snapshot(FS_NS, golden_name(basic, digest)) is None
    checked = [t for t in run.tasks if t["task"].startswith("Check each artifact's source")]
    assert checked[-1]["status"] == "failed"  # the third include: refused before anything is written
    assert "sets both presign and secret_ref" in checked[-1]["result"]["results"][0]["msg"]


def test_a_private_bucket_without_presign_is_refused_before_any_write(env):
    """An http source with neither presign nor secret_ref on a bucket that refuses anonymous reads: both
    entry points stop at validation, naming the source and presign: true, and send no mutating request."""
    # A bucket on the lab's S3 is private until a policy or ACL opens it, as on S3.
    s3 = {"endpoint": env.lab.s3.endpoint_url, "client": env.lab.s3.client(), "bucket": "prv-" + env.prefix}
    s3["client"].create_bucket(Bucket=s3["bucket"])
    _raw, qcow2 = make_disk(env.tmp, 9)
    digest = sha256(qcow2)
    key = "%s/20260828/disk.qcow2" % env.prefix
    s3["client"].upload_file(str(qcow2), s3["bucket"], key)
    url = "%s/%s/%s" % (s3["endpoint"], s3["bucket"], key)
    source = {"http": {"url": url, "checksum": "sha256:" + digest}}
    env.lab.clear_audit()
    run = run_playbook(
        role_play(
            include(
                "main",
                rescue_name="main refused",
                linux_golden_images=[image(env, "%s-prv" % env.prefix, source)],
            ),
            include(
                "distribute",
                tasks_from="distribute",
                rescue_name="distribute refused",
                linux_golden_artifacts=[image(env, "%s-prd" % env.prefix, source)],
            ),
        ),
        env=env.lab.env(),
        timeout=240,
    )
    assert run.ok, run.log
    assert env.lab.mutating_requests() == []
    probes = [t for t in run.tasks if t["task"].startswith("Ask as anyone would whether CDI can read")]
    assert [[r["get_status"] for r in t["result"]["results"]] for t in probes] == [[403], [403]], probes
    for name in ("main refused", "distribute refused"):
        msg = run[name]["msg"]
        assert msg.startswith(
            "http source %s: an anonymous GET of s3://%s/%s was refused (HTTP 403"
            % (
                url,
                s3["bucket"],
                key,
            )
        ), msg
        assert "source.s3 and a secret_ref" in msg and "nothing was written" in msg
    # Nothing past validation ran: no Secret, no signing, no import.
    assert not [t for t in run.tasks if t["task"].startswith(("Write the bucket", "Sign the bucket"))]
    assert env.datavolumes(BLOCK_NS) == [] and env.datavolumes(FS_NS) == []


@pytest.mark.suite("faults")
def test_creates_survive_injected_conflicts(env):
    """A 409 on create is read back by kube_object (not taken as "unchanged"): both objects are made, and the
    import is waited for; no wait runs on an object that does not exist."""
    family = "%s-409" % env.prefix
    _raw, qcow2 = make_disk(env.tmp, 6)
    url, digest = env.upload(qcow2, family)
    name = golden_name(family, digest)
    item = {
        "golden": name,
        "datavolume": name + "-import",
        "pvc": name + "-disk",
        "size": str(SIZE),
        "source": {"http": {"url": url, "checksum": "sha256:" + digest}},
    }
    env.lab.clear_audit()
    # A fixed sequence in which the first write (the DataVolume's create) is refused with a 409.
    env.lab.faults.update({"conflict_rate": 0.3, "seed": 3})
    try:
        run = run_playbook(
            role_play(include("import", tasks_from="import", _linux_golden_item=item)),
            env=env.lab.env(faults=True),
            timeout=240,
        )
        injected = env.lab.faults.to_dict()["injected"]["conflict"]
    finally:
        env.lab.faults.update({"conflict_rate": 0.0})
    assert run.ok, run.log
    refused = [
        r
        for r in env.lab.audit()
        if r.get("code") == 409 and r.get("verb") == "create" and r.get("namespace") == BLOCK_NS
    ]
    assert injected >= 1 and refused, (injected, refused)
    dv = env.custom.get_namespaced_custom_object(
        "cdi.kubevirt.io", "v1beta1", BLOCK_NS, "datavolumes", item["datavolume"]
    )
    assert dv["status"]["phase"] == "Succeeded"
    assert env.core.read_namespaced_persistent_volume_claim(item["pvc"], BLOCK_NS).spec.volume_mode == "Block"
    assert "phase Succeeded" in run["Show the import's phase and progress"]["msg"]


@pytest.mark.suite("bad-input")
def test_a_zero_timeout_is_refused_before_anything_is_written(env):
    family = "%s-zero" % env.prefix
    _raw, qcow2 = make_disk(env.tmp, 7)
    url, digest = env.upload(qcow2, family)
    env.lab.clear_audit()
    images = [image(env, family, {"http": {"url": url, "checksum": "sha256:" + digest}})]
    run = publish(env, images, linux_golden_import_timeout=0)
    assert not run.ok
    assert env.lab.mutating_requests() == []
    refused = run["Refuse zero or negative timeouts and intervals before anything is written"]
    messages = [r.get("msg", "") for r in refused["results"] if r.get("failed")]
    assert messages and "option linux_golden_import_timeout: 0 is not a duration" in messages[0], messages


@pytest.mark.suite("secrets")
def test_a_password_in_a_source_url_is_refused_before_anything_is_written(env, kube_client):
    password = new_secret()
    family = "%s-secret" % env.prefix
    hex64 = "ab" * 32
    images = [
        image(env, family, {"http": {"url": "{{ http_with_password }}", "checksum": "sha256:" + hex64}}),
        image(
            env, family + "2", {"registry": {"url": "{{ registry_with_password }}", "pull_method": "node"}}
        ),
    ]
    extra_vars = {
        "linux_golden_images": images,
        "linux_golden_date": DATE,
        "linux_golden_poll_interval": 1,
        "linux_golden_import_timeout": 10,
        "http_with_password": with_password(
            "%s/%s/disk.qcow2" % (env.lab.s3.endpoint_url, env.bucket), password
        ),
        "registry_with_password": with_password(
            "docker://quay.io/os/debian@sha256:" + hex64, password, "bot"
        ),
    }
    env.lab.clear_audit()
    run = run_playbook(PUBLISH, env=env.lab.env(), extra_vars=extra_vars, timeout=240, args=["-vvv"])
    assert not run.ok
    assert env.lab.mutating_requests() == []
    messages = [r.get("msg", "") for r in run[SOURCE_CHECK]["results"]]
    assert "option source.http.url (http://REDACTED@" in messages[0], messages
    assert "source.http.secret_ref" in messages[0] and "presign: true" in messages[0]
    assert "option source.registry.url (docker://REDACTED@quay.io/os/debian@sha256:" in messages[1], messages
    assert "source.registry.secret_ref" in messages[1]
    found = run_traces(run) + cluster_traces(kube_client, [BLOCK_NS, FS_NS])
    assert leaks(found, [password]) == []


@pytest.mark.suite("secrets")
def test_distribute_refuses_a_password_in_an_artifact_url_before_anything_is_written(env, kube_client):
    password = new_secret()
    url = "%s/%s/win.qcow2" % (env.lab.s3.endpoint_url, env.bucket)
    artifact = {
        "family": "%s-dist-secret" % env.prefix,
        "os_name": "Windows 11",
        "size": str(SIZE),
        "source": {"http": {"url": "{{ url_with_password }}", "checksum": "sha256:" + "cd" * 32}},
    }
    env.lab.clear_audit()
    run = run_playbook(
        role_play(include("distribute", tasks_from="distribute", linux_golden_artifacts=[artifact])),
        env=env.lab.env(),
        extra_vars={"url_with_password": with_password(url, password)},
        args=["-vvv"],
        timeout=240,
    )
    assert not run.ok
    assert env.lab.mutating_requests() == []
    check = (
        "Check each artifact's source (refuses credentials in a URL and an http source without a sha256 "
        "checksum)"
    )
    msg = run[check]["results"][0]["msg"]
    assert "option source.http.url (http://REDACTED@" in msg and "presign: true" in msg, msg
    found = run_traces(run) + cluster_traces(kube_client, [BLOCK_NS, FS_NS])
    assert leaks(found, [password]) == []


def test_a_new_golden_records_the_facts_read_from_its_volume(env, venv_python_first):
    """The verifier Job reads the converted Block volume: the snakeoil key left in the image is a fact the
    golden carries (annotation goldenimage.pipeline/image-facts), read from the bytes, never declared."""
    from tests.integration.support import disks

    family = "%s-facts" % env.prefix
    tree = disks.ext4_tree(
        env.tmp / "facts.tree",
        {
            "etc/os-release": 'ID=debian\nVERSION_ID="13"\nVERSION_CODENAME=trixie\n',
            "etc/ssl/private/ssl-cert-snakeoil.key": "-----BEGIN PRIVATE KEY-----\nMIIE\n",
        },
    )
    raw = disks.linux_disk(env.tmp / "facts.raw", tree)["path"]
    qcow2 = disks.qcow2(raw, env.tmp / "facts.qcow2")
    url, digest = env.upload(qcow2, family)
    source = {"http": {"url": url, "checksum": "sha256:" + digest}}
    images = [image(env, family, source, size=raw.stat().st_size)]
    run = publish(env, images, linux_golden_verifier_image="registry.example.com/tools/seal-verifier:1")
    assert run.ok, run.log
    snap = env.snapshot(BLOCK_NS, golden_name(family, digest))
    facts = json.loads(snap["metadata"]["annotations"]["goldenimage.pipeline/image-facts"])
    assert facts["os_release"]["id"] == "debian"
    assert [k["path"] for k in facts["private_keys"]] == ["/etc/ssl/private/ssl-cert-snakeoil.key"]


def _signed_upload(env, path, family, key=None):
    """(url, sha256 hex) of ``path`` stored as os_mirror_object stores it (its sha256 in the metadata),
    signed where it is made with ``key`` (its signature and provenance beside it) when one is given."""
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket import mirror
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance

    digest = sha256(path)
    object_key = env.key(path, family)
    env.s3.upload_file(str(path), env.bucket, object_key, ExtraArgs={"Metadata": {"sha256": digest}})
    make_public(env.s3, env.bucket, [object_key])
    if key is not None:
        doc = mirror.mirrored_statement(
            object_key,
            digest,
            "https://upstream.example/%s" % path.name,
            signing.builder({}),
            "2026-08-28T00:00:00Z",
        )
        sig_key, env_key = provenance.companions(object_key)
        env.s3.put_object(
            Bucket=env.bucket, Key=sig_key, Body=signing.signature_text(signing.sign_digest(key, digest))
        )
        env.s3.put_object(
            Bucket=env.bucket,
            Key=env_key,
            Body=provenance.envelope_line(signing.sign_envelope(key, provenance.serialize(doc))),
        )
    return env.url(path, family), digest


@pytest.mark.suite("bad-input")
def test_sources_are_verified_before_any_write_and_a_withdrawn_key_stops_the_golden(env):
    """The mirror's catalog holds the trust policy, signed by the mirror's key which the import pins (with no
    key pinned, the import is refused); an unsigned source is refused before anything is written;
    a signed one makes a golden that records who signed it, from what; golden_info reports it, and once the
    key is withdrawn from the policy, golden_snapshot and promotion's contract check refuse the golden."""
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    trusted, other = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    signed_family, unsigned_family = "%s-sig" % env.prefix, "%s-uns" % env.prefix
    raw, qcow2 = make_disk(env.tmp, 11)
    _raw2, qcow2_2 = make_disk(env.tmp, 12)
    url, digest = _signed_upload(env, qcow2, signed_family, trusted)
    bare_url, bare_digest = _signed_upload(env, qcow2_2, unsigned_family)
    rule = {
        "name": "mirror-2026",
        "public_key": signing.public_pem(trusted),
        "families": [signed_family, unsigned_family],
    }
    policy = {"rules": [rule]}
    withdrawn = {"rules": [{"name": "other", "public_key": signing.public_pem(other)}]}
    pem = trusted.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    catalog = {
        "name": "catalog",
        "goldenimage.pipeline.os_mirror_catalog": {"bucket": env.bucket, "trust": policy, "key": pem},
    }
    verify = {
        "linux_golden_verify_provenance": True,
        "linux_golden_catalog_public_keys": [signing.public_pem(trusted)],
    }
    unsigned = [image(env, unsigned_family, {"http": {"url": bare_url, "checksum": "sha256:" + bare_digest}})]
    signed = [image(env, signed_family, {"http": {"url": url, "checksum": "sha256:" + digest}})]

    env.lab.clear_audit()
    refused = run_playbook(
        role_play(
            catalog,
            include(
                "unpinned",
                rescue_name="refused unpinned",
                linux_golden_images=signed,
                linux_golden_verify_provenance=True,
            ),
            include("unsigned", rescue_name="refused", linux_golden_images=unsigned, **verify),
        ),
        env=env.lab.env(),
        timeout=240,
    )
    assert refused.ok, refused.log
    message = refused["refused"]["msg"]
    assert env.lab.mutating_requests() == []
    unpinned = refused["refused unpinned"]["msg"]
    assert "no trust policy is pinned" in unpinned and "catalog_public_keys" in unpinned, unpinned
    assert env.key(qcow2_2, unsigned_family) in message and "signature check failed" in message, message
    assert "no detached signature found" in message, message

    made = run_playbook(
        role_play(include("signed", linux_golden_images=signed, **verify)), env=env.lab.env(), timeout=240
    )
    assert made.ok, made.log
    name = golden_name(signed_family, digest)
    snap = env.snapshot(BLOCK_NS, name)
    record = json.loads(snap["metadata"]["annotations"]["goldenimage.pipeline/provenance"])
    assert (record["verdict"], record["key"], record["signer"]) == (
        "verified",
        signing.key_id(trusted),
        "mirror-2026",
    )
    assert (record["artifact"], record["sha256"]) == (env.key(qcow2, signed_family), digest)
    assert record["inputs"] == [
        {"name": "upstream", "uri": "https://upstream.example/%s" % qcow2.name, "digest": {"sha256": digest}}
    ]
    assert env.golden_bytes(BLOCK_NS, name) == raw.read_bytes()

    snapshot = {"name": name, "family": signed_family, "mode": "Block"}
    env.lab.clear_audit()
    later = run_playbook(
        role_play(
            {
                "name": "report",
                "goldenimage.pipeline.golden_info": {"family": signed_family, "trust_policy": policy},
            },
            {
                "name": "report withdrawn",
                "goldenimage.pipeline.golden_info": {"family": signed_family, "trust_policy": withdrawn},
            },
            {
                "name": "snapshot again",
                "goldenimage.pipeline.golden_snapshot": dict(
                    snapshot, os_name="Test Linux %s" % signed_family, trust_policy=withdrawn
                ),
                "ignore_errors": True,
            },
            {
                "name": "contract",
                "goldenimage.pipeline.golden_snapshot": dict(
                    snapshot, state="validated", trust_policy=withdrawn
                ),
                "ignore_errors": True,
            },
        ),
        env=env.lab.env(),
        timeout=240,
    )
    assert env.lab.mutating_requests() == []
    (cand,) = later["report"]["families"][0]["candidates"]
    assert cand["provenance"]["signer"] == "mirror-2026" and cand["provenance"]["inputs"] == record["inputs"]
    assert cand["provenance_verifies"] is True and cand["provenance_problem"] is None
    (cand,) = later["report withdrawn"]["families"][0]["candidates"]
    assert cand["provenance_verifies"] is False and signing.key_id(trusted) in cand["provenance_problem"]
    for title in ("snapshot again", "contract"):
        assert later.entry(title)["status"] == "ignored", later.log
        text = later[title]["msg"]
        assert name in text and signing.key_id(trusted) in text and "no longer lets sign" in text, text


def test_the_receiving_cluster_verifies_an_exported_golden_signed_where_it_was_exported(env):
    """golden_export_object signs the exported golden beside it; the receiving cluster's import verifies it
    against the catalog's trust policy before any write and records the verdict on its golden; a tampered
    signature is refused before anything is written."""
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    (env.tmp / "export.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    raw, qcow2 = make_disk(env.tmp, 21)
    _raw2, other = make_disk(env.tmp, 22)
    shipped, tampered = "%s-exp" % env.prefix, "%s-tam" % env.prefix
    object_key, other_key = "windows/11/%s/golden.qcow2" % shipped, "windows/11/%s/golden.qcow2" % tampered
    digest = sha256(qcow2)
    policy = {
        "rules": [
            {"name": "export-2026", "public_key": signing.public_pem(key), "families": [shipped, tampered]}
        ]
    }

    def export(title, path, where):
        return {
            "name": title,
            "goldenimage.pipeline.golden_export_object": {
                "bucket": env.bucket,
                "key": where,
                "path": str(path),
                "source": "pvc://golden-images-build/%s" % path.stem,
                "signing_key_path": str(env.tmp / "export.pem"),
            },
        }

    def artifact(family, where, checksum):
        url = "%s/%s/%s" % (env.lab.s3.endpoint_url, env.bucket, where)
        return image(env, family, {"http": {"url": url, "checksum": "sha256:" + checksum, "presign": True}})

    made = run_playbook(
        role_play(
            export("export", qcow2, object_key),
            export("export other", other, other_key),
            {
                "name": "catalog",
                "goldenimage.pipeline.os_mirror_catalog": {"bucket": env.bucket, "trust": policy},
            },
        ),
        env=env.lab.env(),
        timeout=240,
    )
    assert made.ok, made.log
    # The other export's signature stored beside it is this one's: signed for other bytes.
    sig = env.s3.get_object(Bucket=env.bucket, Key=object_key + ".sig")["Body"].read()
    env.s3.put_object(Bucket=env.bucket, Key=other_key + ".sig", Body=sig)
    credentials = {
        "linux_golden_bucket_access_key_id": env.lab.s3.access_key,
        "linux_golden_bucket_secret_key": env.lab.s3.secret_key,
        "linux_golden_verify_provenance": True,
        # The policy given: the catalog is not read.
        "linux_golden_trust_policy": policy,
    }
    env.lab.clear_audit()
    refused = run_playbook(
        role_play(
            include(
                "tampered",
                tasks_from="distribute",
                rescue_name="refused",
                linux_golden_artifacts=[artifact(tampered, other_key, sha256(other))],
                **credentials,
            )
        ),
        env=env.lab.env(),
        timeout=240,
    )
    assert refused.ok, refused.log
    assert env.lab.mutating_requests() == []
    message = refused["refused"]["msg"]
    assert other_key in message and "signature check failed" in message and "other bytes" in message, message

    received = run_playbook(
        role_play(
            include(
                "receive",
                tasks_from="distribute",
                linux_golden_artifacts=[artifact(shipped, object_key, digest)],
                **credentials,
            )
        ),
        env=env.lab.env(),
        timeout=240,
    )
    assert received.ok, received.log
    name = golden_name(shipped, digest)
    snap = env.snapshot(FS_NS, name)
    record = json.loads(snap["metadata"]["annotations"]["goldenimage.pipeline/provenance"])
    assert (record["verdict"], record["signer"], record["artifact"]) == (
        "verified",
        "export-2026",
        object_key,
    )
    assert {i["name"] for i in record["inputs"]} == {"exported-volume", "image-facts"}
    assert env.golden_bytes(FS_NS, name) == raw.read_bytes()
