"""playbooks/publish_windows_golden.yml end to end in the lab, with ansible-playbook on the playbook itself.

A real sealed Windows disk (GPT, ESP, MSR, NTFS C: with a bootstrap log ending on the sysprep line) sits in
a PVC; the playbook verifies its seal, exports it through the BYOL guard to a private bucket, imports it
over http from a presigned URL, snapshots it with the golden contract and gates it with a tenant's clone.
The lab boots the clone only because the disk really is bootable; its port knob closes RDP.

The bucket is on the lab's S3, which answers anonymous requests and checks signatures as S3 does
(tests/lab/s3.py): CDI, which reads anonymously or with basic auth, reads the private bucket presigned.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import sys
import time
import uuid

import pytest

from tests.integration.support import disks
from tests.integration.support.runner import ROOT, run_playbook
from tests.lab.access import MUTATING_VERBS
from tests.lab.controllers.kubevirt import probe_template
from tests.lab.controllers.volumes import parse_quantity

pytestmark = pytest.mark.lab_only

PLAYBOOK = ROOT / "playbooks" / "publish_windows_golden.yml"
PROMOTE = ROOT / "playbooks" / "promote_golden.yml"
MIB = 1024 * 1024
DATE = "2026-08-09"
FAMILY = "win11-chain"
GOLDEN_NS = "golden-images"
GATE_LABEL = "goldenimage.pipeline/clone-gate"
SNAP = ("snapshot.storage.k8s.io", "v1")
CDI = ("cdi.kubevirt.io", "v1beta1")
PORT_OPEN = "lab.goldenimage.io/port-open"


EXPORT_IMAGE = "registry.example.com/tools/golden-export:1"  # the lab runs the host's python3 and qemu-img


def export_secret(lab) -> dict:
    """The Secret the export Job signs with, as CDI's: accessKeyId and secretKey."""
    keys = {"accessKeyId": lab.s3.access_key, "secretKey": lab.s3.secret_key}
    return {"metadata": {"name": "cdi-os-images"}, "stringData": keys}


def key_of(date: str) -> str:
    return "windows/11/%s/windows11-x64-golden.qcow2" % date


class Chain:
    """The lab arranged for the chain: buckets, a build namespace with the sealed PVC, a project namespace."""

    def __init__(self, lab, api_client, folder: pathlib.Path):
        from kubernetes import client

        self.lab, self.endpoint, self.folder = lab, lab.s3.endpoint_url, folder
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.tag = uuid.uuid4().hex[:8]
        self.build, self.project = "build-" + self.tag, "proj-" + self.tag
        self.private, self.public = "winpriv-" + self.tag, "winpub-" + self.tag
        self.s3 = lab.s3.client()
        for bucket in (self.private, self.public):
            self.s3.create_bucket(Bucket=bucket)
        statement = {
            "Effect": "Allow",
            "Principal": "*",
            "Action": ["s3:GetObject", "s3:ListBucket"],
            "Resource": ["arn:aws:s3:::%s" % self.public, "arn:aws:s3:::%s/*" % self.public],
        }
        self.s3.put_bucket_policy(Bucket=self.public, Policy=json.dumps({"Statement": [statement]}))
        self.core.create_namespace({"metadata": {"name": self.build}})
        # The bucket's credentials in the build namespace, for the export Job (the guide's step 0).
        self.core.create_namespaced_secret(self.build, export_secret(lab))
        # A project namespace as Kube-DC labels them: the only kind the clone gate runs in.
        self.core.create_namespace(
            {"metadata": {"name": self.project, "labels": {"kube-dc.com/project": self.tag}}}
        )
        self.raw = self.sealed_pvc("win11-sealed")

    def sealed_pvc(self, name: str) -> pathlib.Path:
        """A sealed 64 MiB Windows disk: disk.img of a Filesystem claim in the build namespace."""
        from tests.lab.controllers.volumes import disk_image_path

        files = disks.sealed_windows_files()
        raw = disks.windows_disk(self.folder / "sealed.raw", files, disk_size=64 * MIB, c_size=16 * MIB)[
            "path"
        ]
        claim = {
            "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}},
        }
        self.core.create_namespaced_persistent_volume_claim(self.build, claim)
        pvc = self.bound(self.build, name)
        disks.run("cp", "--sparse=always", raw, disk_image_path(self.lab.controller_manager.lab, pvc))
        return raw

    def bound(self, namespace: str, name: str) -> dict:
        rt = self.lab.store.resource("", "v1", "persistentvolumeclaims")
        end = time.monotonic() + 20
        while time.monotonic() < end:
            pvc = self.lab.store.get(rt, namespace, name)
            if (pvc.get("status") or {}).get("phase") == "Bound":
                return pvc
            time.sleep(0.05)
        raise AssertionError("claim %s/%s never bound" % (namespace, name))

    def publish(self, bucket: str, date: str = DATE, **extra):
        extra_vars = {
            "windows_export_pvc": "win11-sealed",
            "windows_export_namespace": self.build,
            "windows_export_bucket": bucket,
            "windows_export_license": "volume",
            "windows_export_date": date,
            "windows_export_endpoint_url": self.endpoint,
            "windows_export_scratch_size": "64Mi",
            "windows_export_image": EXPORT_IMAGE,
            "windows_export_poll_interval": 1,
            "windows_export_import_url_base": self.lab.s3.endpoint_url,
            "windows_export_import_presign": True,
            "windows_export_import_access_key_id": self.lab.s3.access_key,
            "windows_export_import_secret_key": self.lab.s3.secret_key,
            "windows_export_family": FAMILY,
            "windows_export_os_name": "Windows 11 (chain)",
            "windows_export_import_size": "64Mi",
            "publish_project_namespace": self.project,
            "publish_gate_agent_timeout": 30,
            "publish_gate_port_timeout": 3,
            "publish_gate_provision_timeout": 60,
            "publish_gate_poll_interval": 1,
            "publish_gate_port_probe": probe_template(3389),
        }
        extra_vars.update(extra)
        env = self.lab.env()
        env["ANSIBLE_PIPELINING"] = "1"
        # The whole chain (export, upload, import, gate VM, staging) as one playbook: minutes when loaded.
        return run_playbook(PLAYBOOK, env=env, extra_vars=extra_vars, timeout=600)

    def promote(self, golden: str):
        """playbooks/promote_golden.yml on the staged golden, as an operator runs it: the OS is not given,
        the gate detects Windows from the golden; memory and disk growth are the role's defaults."""
        extra_vars = {
            "golden_promote_family": FAMILY,
            "golden_promote_snapshot": golden,
            "golden_promote_gate_project_namespace": self.project,
            "golden_promote_gate_agent_timeout": 30,
            "golden_promote_gate_port_timeout": 10,
            "golden_promote_gate_provision_timeout": 60,
            "golden_promote_gate_poll_interval": 1,
            "golden_promote_gate_port_probe": probe_template(3389),
            "golden_promote_project_selector": "kube-dc.com/project=%s" % self.tag,
            "golden_promote_verify_timeout": 60,
            "golden_promote_verify_interval": 1,
        }
        return run_playbook(PROMOTE, env=self.lab.env(), extra_vars=extra_vars, timeout=600)

    def selections_naming(self, golden: str) -> list[str]:
        """``namespace/name`` of every GoldenImageSelection naming ``golden``, in both golden namespaces."""
        found = []
        for namespace in (GOLDEN_NS, GOLDEN_NS + "-block"):
            items = self.custom.list_namespaced_custom_object(
                "kube-dc.com", "v1", namespace, "goldenimageselections"
            )["items"]
            found += [
                "%s/%s" % (namespace, i["metadata"]["name"])
                for i in items
                if (i.get("spec") or {}).get("snapshotName") == golden
            ]
        return found

    def keys(self, bucket: str) -> list[str]:
        return [o["Key"] for o in self.s3.list_objects_v2(Bucket=bucket).get("Contents", [])]

    def snapshots(self) -> dict:
        found = self.custom.list_namespaced_custom_object(*SNAP, GOLDEN_NS, "volumesnapshots")
        return {i["metadata"]["name"]: i for i in found["items"]}

    def leftovers(self) -> list[str]:
        """Everything carrying the gate's label in the project, and the contents bound to its snapshots."""
        store, found = self.lab.store, []
        for group, version, plural, namespace in (
            ("kubevirt.io", "v1", "virtualmachines", self.project),
            ("kubevirt.io", "v1", "virtualmachineinstances", self.project),
            ("", "v1", "persistentvolumeclaims", self.project),
            (*SNAP, "volumesnapshots", self.project),
            (*SNAP, "volumesnapshotcontents", None),
        ):
            items, _rv = store.list(store.resource(group, version, plural), namespace)
            found += [
                "%s/%s" % (plural, o["metadata"]["name"])
                for o in items
                if (
                    GATE_LABEL in (o["metadata"].get("labels") or {})
                    # A content is this project's when bound to its snapshots (kept runs elsewhere are not).
                    and (namespace or (o.get("spec") or {}).get("volumeSnapshotRef", {}).get("namespace"))
                    == self.project
                )
                or (plural == "virtualmachineinstances" and namespace == self.project)
            ]
        return sorted(found)

    def cleanup(self) -> None:
        items = self.custom.list_namespaced_custom_object(
            "kube-dc.com", "v1", GOLDEN_NS, "goldenimageselections"
        )
        for item in items["items"]:
            if (item.get("spec") or {}).get("family") == FAMILY:
                self.custom.delete_namespaced_custom_object(
                    "kube-dc.com", "v1", GOLDEN_NS, "goldenimageselections", item["metadata"]["name"]
                )
        for name in self.snapshots():
            if name.startswith("golden-%s-" % FAMILY):
                self.custom.delete_namespaced_custom_object(*SNAP, GOLDEN_NS, "volumesnapshots", name)
        for item in self.custom.list_namespaced_custom_object(*CDI, GOLDEN_NS, "datavolumes")["items"]:
            if item["metadata"]["name"].startswith("golden-%s-" % FAMILY):
                self.custom.delete_namespaced_custom_object(
                    *CDI, GOLDEN_NS, "datavolumes", item["metadata"]["name"]
                )


@pytest.fixture(scope="module")
def chain(lab, kube_client, tmp_path_factory):
    """Every playbook run of the file, in order; the tests read what they did.

    1. the chain from the sealed PVC to a gated golden; 2. the same chain again with the guest's RDP
    closed by the lab's port knob (also the idempotency run: the object and the golden exist);
    3. the licensed image aimed at a public bucket; 4. the golden of run 1 promoted with
    playbooks/promote_golden.yml, gated again.
    """
    # Jobs in the lab run host executables: the seal verifier's python3 must be the one with dissect.
    path = os.environ.get("PATH", "")
    os.environ["PATH"] = "%s:%s" % (pathlib.Path(sys.executable).parent, path)
    arranged = Chain(lab, kube_client, tmp_path_factory.mktemp("chain"))
    try:
        lab.clear_audit()
        first = arranged.publish(arranged.private)
        seen = {
            "first_audit": lab.audit(),
            "first_keys": arranged.keys(arranged.private),
            "first_leftovers": arranged.leftovers(),
            "uploaded": arranged.s3.head_object(Bucket=arranged.private, Key=key_of(DATE)),
        }
        lab.clear_audit()
        closed = arranged.publish(arranged.private, publish_gate_vm_annotations={PORT_OPEN: "false"})
        seen.update(closed_audit=lab.audit(), closed_leftovers=arranged.leftovers())
        # The refusal does not depend on the seal; the seal check's Job is left out to keep the file fast.
        refused = arranged.publish(arranged.public, publish_verify_seal=False)
        staged = first["Validate the golden against the contract"]["golden"]["name"]
        promoted = arranged.promote(staged)
        seen.update(staged=staged, selections=arranged.selections_naming(staged))
        yield dict(seen, env=arranged, first=first, closed=closed, refused=refused, promoted=promoted)
    finally:
        os.environ["PATH"] = path
        arranged.cleanup()


def gate_of(run) -> dict:
    return next(e["result"] for e in run.tasks if e["task"].startswith("Gate with a tenant's clone in "))


def task_starting(run, prefix: str) -> dict:
    found = [e for e in run.tasks if e["task"].startswith(prefix)]
    assert len(found) == 1, (prefix, run.task_names())
    return found[0]


def test_the_chain_passes_from_a_sealed_pvc_to_a_gated_staged_golden(chain):
    env, run = chain["env"], chain["first"]
    assert run.ok, run.log
    key = key_of(DATE)

    seal = task_starting(run, "Verify the seal of ")["result"]
    assert seal["sealed"] is True and all(c["passed"] for c in seal["checks"]), seal

    # The licensed image goes to a bucket that refuses every anonymous read, and is said to.
    guard = run["BYOL guard, who can read s3://%s/%s" % (env.private, key)]
    assert guard["exposed"] is False and guard["verdict"] == "private", guard
    assert (guard["get_status"], guard["head_status"], guard["list_status"]) == (403, 403, 403)

    # Uploaded once, with the sha256 of its bytes in the metadata; a qcow2 of exactly the sealed disk.
    assert chain["first_keys"] == [key]
    body = env.s3.get_object(Bucket=env.private, Key=key)["Body"].read()
    digest = hashlib.sha256(body).hexdigest()
    assert chain["uploaded"]["Metadata"]["sha256"] == digest
    assert body[:4] == b"QFI\xfb"
    exported = env.folder / "exported.qcow2"
    exported.write_bytes(body)
    back = env.folder / "back.raw"
    disks.run("qemu-img", "convert", "-O", "raw", exported, back)
    assert back.read_bytes() == env.raw.read_bytes()

    # Imported over http from a presigned URL, checked against the sha256, snapshotted with the contract.
    golden = "golden-%s-%s-%s" % (FAMILY, DATE.replace("-", ""), digest[:12])
    dv = env.custom.get_namespaced_custom_object(*CDI, GOLDEN_NS, "datavolumes", golden + "-disk")
    http = dv["spec"]["source"]["http"]
    assert http["url"].startswith("%s/%s/%s?" % (env.lab.s3.endpoint_url, env.private, key))
    assert "secretRef" not in http and http["checksum"] == "sha256:" + digest
    assert "X-Amz-Signature" not in run.stdout
    snap = env.snapshots()[golden]
    assert snap["status"]["readyToUse"] is True
    labels, notes = snap["metadata"]["labels"], snap["metadata"]["annotations"]
    assert labels["kube-dc.com/golden-os"] == FAMILY and notes["kube-dc.com/os-family-id"] == FAMILY
    assert notes["kube-dc.com/os-name"] == "Windows 11 (chain)"
    assert "kube-dc.com/golden-active" not in labels  # staged, not active

    # The gate cloned it in the project namespace and it booted and answered on RDP, with the timings.
    gate = gate_of(run)
    assert gate["verdict"] == "passed" and gate["passed"] is True, gate
    assert [(p["name"], p["passed"]) for p in gate["phases"]] == [
        ("provision", True),
        ("start", True),
        ("agent", True),
        ("disk", True),
        ("port", True),
    ]
    # Each phase reports what it took; that it ended within its timeout is what "passed" says.
    assert all(isinstance(p["seconds"], (int, float)) and p["seconds"] >= 0 for p in gate["phases"])
    # The family is held until its first promotion, so the seeder has published no copy in the project: the
    # gate publishes its own there (a pre-provisioned snapshot on the golden's handle) and restores from it.
    assert gate["source"]["published_by"] == "gate" and gate["source"]["namespace"] == env.project
    assert gate["probe"].startswith("127.0.0.1:")
    summary = "\n".join(run["Summarise the publication"]["msg"])
    assert "gate: passed in %s, provision " % env.project in summary and "agent " in summary
    assert "staged (not active)" in summary and "uploaded;" in summary


def test_the_gate_leaves_nothing_behind(chain):
    for run, audit, left in (
        (chain["first"], chain["first_audit"], chain["first_leftovers"]),
        (chain["closed"], chain["closed_audit"], chain["closed_leftovers"]),
    ):
        gate = gate_of(run)
        assert gate["kept"] is False
        assert [o["kind"] for o in gate["created"]] == [
            "VolumeSnapshotContent",
            "VolumeSnapshot",
            "PersistentVolumeClaim",
            "VirtualMachine",
        ], gate["created"]
        deleted = {(r["resource"], r["name"]) for r in audit if r["verb"] == "delete" and r["code"] < 300}
        for obj in gate["created"]:
            assert (obj["kind"].lower() + "s", obj["name"]) in deleted, obj
        assert left == []


@pytest.mark.suite("idempotence")
def test_a_second_run_uploads_and_imports_nothing_again(chain):
    env, run = chain["env"], chain["closed"]
    key = key_of(DATE)
    upload = run["Upload to s3://%s/%s" % (env.private, key)]
    assert upload["action"] == "skip" and upload["changed"] is False, upload
    assert env.keys(env.private) == [key]
    now = env.s3.head_object(Bucket=env.private, Key=key)
    assert (now["ETag"], now["LastModified"]) == (
        chain["uploaded"]["ETag"],
        chain["uploaded"]["LastModified"],
    )
    assert not env.s3.list_multipart_uploads(Bucket=env.private).get("Uploads")
    # The golden is there: no DataVolume, claim or snapshot written again in the golden namespace; the one
    # write is the gate's new verdict (port unreachable) recorded on the golden.
    writes = [
        (r["verb"], r["resource"], r["name"])
        for r in chain["closed_audit"]
        if r["verb"] in MUTATING_VERBS and not r.get("dry_run") and r["namespace"] == GOLDEN_NS
    ]
    assert [(verb, resource) for verb, resource, _name in writes] == [("patch", "volumesnapshots")], writes
    snapshot = [e for e in run.tasks if e["task"].startswith("Snapshot the imported volume as golden")]
    assert [(e["status"], e["result"]["changed"]) for e in snapshot] == [("ok", False)]
    summary = "\n".join(run["Summarise the publication"]["msg"])
    assert (
        "already there with the same sha256, not uploaded" in summary and "already there, staged" in summary
    )


def test_a_closed_port_is_booted_port_unreachable_and_fails_the_run(chain):
    env, run = chain["env"], chain["closed"]
    assert not run.ok
    gate = gate_of(run)
    assert gate["verdict"] == "port_unreachable" and gate["passed"] is False, gate
    assert [(p["name"], p["passed"]) for p in gate["phases"]][-3:] == [
        ("agent", True),
        ("disk", True),
        ("port", False),
    ]
    assert gate["phases"][-1]["seconds"] >= 3  # it waited the port timeout
    failed = [e for e in run.tasks if e["status"] == "failed"]
    assert [e["task"] for e in failed] == ["Stop when the clone was rejected"], run.log
    msg = failed[0]["result"]["msg"]
    assert "booted, port unreachable" in msg and "did not boot" not in msg
    assert "verdict port_unreachable" in msg and "must not be promoted" in msg
    summary = "\n".join(run["Summarise the publication"]["msg"])
    assert "gate: port_unreachable in %s, provision " % env.project in summary
    # A port problem is not the image's boot: the golden stays, staged.
    golden = run["Validate the golden against the contract"]["golden"]
    assert golden["ready"] is True and golden["active"] is False, golden
    snap = env.snapshots()[golden["name"]]
    assert "kube-dc.com/golden-active" not in snap["metadata"]["labels"]


def test_a_licensed_image_is_refused_for_a_public_bucket_before_any_upload(chain):
    env, run = chain["env"], chain["refused"]
    assert not run.ok
    failed = [e for e in run.tasks if e["status"] == "failed"]
    assert len(failed) == 1, run.log
    assert failed[0]["task"] == "BYOL guard, who can read s3://%s/%s" % (env.public, key_of(DATE))
    result = failed[0]["result"]
    assert result["exposed"] is True and result["list_status"] == 200
    assert "volume-licensed" in result["msg"] and env.public in result["msg"]
    # Nothing written: no object, no pending upload, no conversion, nothing imported or gated.
    assert env.keys(env.public) == []
    assert not env.s3.list_multipart_uploads(Bucket=env.public).get("Uploads")
    assert env.batch.list_namespaced_job(env.build).items == []
    claims = env.core.list_namespaced_persistent_volume_claim(env.build).items
    assert [c.metadata.name for c in claims] == ["win11-sealed"]
    assert not [e for e in run.tasks if e["task"].startswith(("Gate ", "Take the export"))]


def test_the_staged_windows_golden_is_promoted_through_its_gate(chain):
    """publish -> gate -> promote in one lab run: the promote playbook detects Windows from the golden,
    gates it at the catalog's 8Gi with a larger clone whose OS volume grew and RDP answering, then writes
    the one GoldenImageSelection that serves it."""
    env, run, golden = chain["env"], chain["promoted"], chain["staged"]
    assert run.ok, run.log
    gate = run["Boot a tenant-style clone of the golden (the clone gate)"]
    assert gate["invocation"]["module_args"]["os"] == "windows"  # detected, not given
    assert gate["verdict"] == "passed" and gate["passed"] is True, gate
    assert (gate["memory"], gate["min_memory"]) == ("8Gi", "8Gi")
    phases = {p["name"]: p for p in gate["phases"]}
    assert list(phases) == ["provision", "start", "agent", "disk", "port"]
    assert all(p["passed"] for p in phases.values()), gate["phases"]
    # The clone is larger than the golden and the guest's OS volume grew into it.
    restore = env.snapshots()[golden]["status"]["restoreSize"]
    assert gate["os_volume"]["totalBytes"] > parse_quantity(restore), (gate["os_volume"], restore)
    assert "ExpandDisks" in gate["expand_disks"]
    assert "port 3389 answered at %s" % gate["probe"] in gate["msg"], gate["msg"]
    written = run["Write the promotion or the rollback"]
    assert written["changed"] is True and written["selected"]["snapshot"] == golden
    assert written["gate_passed"]["verdict"] == "passed" and written["gate_passed"]["memory"] == "8Gi"
    assert chain["selections"] == ["%s/%s-filesystem" % (GOLDEN_NS, FAMILY)]
    verified = run["Verify every project resolved to the selected golden"]
    assert [(p["namespace"], p["match"]) for p in verified["projects"]] == [(env.project, True)]
