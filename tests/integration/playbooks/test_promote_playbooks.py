"""playbooks/promote_golden.yml and rollback_golden.yml run as an operator runs them, against the lab.

Three goldens of one family are made through the lab: qcow2 disks in the loopback bucket, imported by
CDI DataVolumes (a real download, checksum and qemu-img conversion), snapshotted with the golden
contract. Two are bootable Linux disks, the incumbent served by the legacy active label; the third is a
disk of zeros. The playbooks then promote the candidate through the clone gate, refuse the disk that
does not boot without writing anything, promote the same candidate again without a change, and roll
back. Every run is ``ansible-playbook -e`` on the playbook file itself.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid

import pytest

from tests.integration.support import disks
from tests.integration.support.runner import ROOT, run_playbook
from tests.lab.controllers.kubevirt import probe_template
from tests.lab.s3 import make_public

pytestmark = pytest.mark.lab_only

FS_NS = "golden-images"
PROMOTE = ROOT / "playbooks" / "promote_golden.yml"
ROLLBACK = ROOT / "playbooks" / "rollback_golden.yml"
DATE = "20260828"
SEL = ("kube-dc.com", "v1")
SNAP = ("snapshot.storage.k8s.io", "v1")
CDI = ("cdi.kubevirt.io", "v1beta1")
WRITE = "Write the promotion or the rollback"
GATE = "Boot a tenant-style clone of the golden (the clone gate)"
GATE_VERDICT = "Stop unless the clone booted and its remote port answered (fail closed, nothing written)"
VERIFY = "Verify every project resolved to the selected golden"
SUMMARY = "Show what each project is served"
GATE_PASSED = "goldenimage.pipeline/gate"


def incumbent_gate(name):
    """The record clone_gate wrote on the incumbent when it was promoted, long ago (no digest, no handle)."""
    return json.dumps(
        {"at": "2026-01-01T00:00:00Z", "verdict": "passed", "candidate": "%s/%s" % (FS_NS, name)}
    )


def build_disks(folder):
    """Two sealed Linux disks that differ in one file (so in digest), and a disk of zeros, as qcow2."""
    images = {}
    for name in ("incumbent", "candidate"):
        tree = disks.ext4_tree(folder / ("%s-tree" % name), {"etc/golden-release": name + "\n"})
        raw = disks.linux_disk(folder / ("%s.raw" % name), tree)["path"]
        images[name] = disks.qcow2(raw, folder / ("%s.qcow2" % name))
    zeros = folder / "broken.raw"
    disks.run("truncate", "-s", "64M", zeros)
    images["broken"] = disks.qcow2(zeros, folder / "broken.qcow2")
    return images


def poll(read, done, what, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        found = read()
        if done(found):
            return found
        if time.monotonic() > deadline:
            raise AssertionError("%s: gave up after %ds: %s" % (what, timeout, found))
        time.sleep(0.2)


class Stage:
    """The goldens, the projects, and reads of what the playbooks changed."""

    def __init__(self, lab, api_client, folder):
        from kubernetes import client

        self.lab = lab
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.prefix = "t%s" % uuid.uuid4().hex[:8]
        self.family = "%s-deb" % self.prefix
        self.selector = "kube-dc.com/project=%s" % self.prefix
        self.selection_name = "%s-filesystem" % self.family
        self.gate_project = "%s-gate" % self.prefix
        self.projects = ["%s-p1" % self.prefix, "%s-p2" % self.prefix, self.gate_project]
        self.goldens = {}
        self.digests = {}
        self.folder = folder

    def bucket_urls(self, images):
        """Upload each disk under its digest into a bucket of the loopback S3 server: {role: (url, hex)}."""
        s3 = self.lab.s3.client()
        bucket = "%s-mirror" % self.prefix
        s3.create_bucket(Bucket=bucket)
        make_public(s3, bucket)
        urls = {}
        for role, path in images.items():
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            key = "%s/sha256-%s/%s" % (self.family, digest, path.name)
            s3.upload_file(str(path), bucket, key)
            urls[role] = ("%s/%s/%s" % (self.lab.s3.endpoint_url, bucket, key), digest)
        return urls

    def make_goldens(self):
        """Import every disk with CDI, then snapshot each volume as a golden carrying the contract."""
        urls = self.bucket_urls(build_disks(self.folder))
        for role, (url, digest) in urls.items():
            body = {
                "apiVersion": "%s/%s" % CDI,
                "kind": "DataVolume",
                "metadata": {"name": "%s-%s" % (self.prefix, role)},
                "spec": {
                    "source": {"http": {"url": url, "checksum": "sha256:" + digest}},
                    "storage": {"volumeMode": "Filesystem", "resources": {"requests": {"storage": "64Mi"}}},
                },
            }
            self.custom.create_namespaced_custom_object(*CDI, FS_NS, "datavolumes", body)
            self.goldens[role] = "golden-%s-%s-%s" % (self.family, DATE, digest[:12])
            self.digests[role] = "sha256:" + digest
        for role in urls:
            name = "%s-%s" % (self.prefix, role)
            poll(
                lambda name=name: self.custom.get_namespaced_custom_object(*CDI, FS_NS, "datavolumes", name),
                lambda dv: (dv.get("status") or {}).get("phase") == "Succeeded",
                "import %s" % name,
            )
            labels = {"kube-dc.com/golden-os": self.family, "kube-dc.com/golden-mode": "Filesystem"}
            annotations = {
                "kube-dc.com/os-family-id": self.family,
                "kube-dc.com/os-name": "Debian 12",
                "kube-dc.com/golden-mode": "Filesystem",
            }
            if role == "incumbent":
                labels["kube-dc.com/golden-active"] = "true"  # served by the legacy label path
                annotations[GATE_PASSED] = incumbent_gate(self.goldens[role])  # gated when promoted, long ago
            golden = {
                "apiVersion": "%s/%s" % SNAP,
                "kind": "VolumeSnapshot",
                "metadata": {"name": self.goldens[role], "labels": labels, "annotations": annotations},
                "spec": {"source": {"persistentVolumeClaimName": name}},
            }
            self.custom.create_namespaced_custom_object(*SNAP, FS_NS, "volumesnapshots", golden)
        for golden in self.goldens.values():
            poll(
                lambda golden=golden: self.custom.get_namespaced_custom_object(
                    *SNAP, FS_NS, "volumesnapshots", golden
                ),
                lambda vs: (vs.get("status") or {}).get("readyToUse"),
                "golden %s" % golden,
            )

    def ensure_golden_namespace(self):
        from kubernetes.client.rest import ApiException

        try:
            self.core.create_namespace({"metadata": {"name": FS_NS}})
        except ApiException as exc:
            if exc.status != 409:
                raise

    def make_projects(self):
        for name in self.projects:
            labels = {"kube-dc.com/project": self.prefix}
            self.core.create_namespace({"metadata": {"name": name, "labels": labels}})

    def selection(self):
        from kubernetes.client.rest import ApiException

        try:
            return self.custom.get_namespaced_custom_object(
                *SEL, FS_NS, "goldenimageselections", self.selection_name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def golden(self, role):
        return self.custom.get_namespaced_custom_object(*SNAP, FS_NS, "volumesnapshots", self.goldens[role])

    def forget_gate(self, role):
        body = {"metadata": {"annotations": {GATE_PASSED: None}}}
        self.custom.patch_namespaced_custom_object(*SNAP, FS_NS, "volumesnapshots", self.goldens[role], body)

    def gate_vars(self):
        return {
            "golden_promote_gate_project_namespace": self.gate_project,
            "golden_promote_gate_agent_timeout": 10,
            "golden_promote_gate_port_timeout": 5,
            "golden_promote_gate_provision_timeout": 30,
            "golden_promote_gate_poll_interval": 1,
            "golden_promote_gate_port_probe": probe_template(22),
        }

    def promote(self, role, check=False, **extra):
        extra_vars = {
            "golden_promote_family": self.family,
            "golden_promote_mode": "Filesystem",
            "golden_promote_snapshot": self.goldens[role],
            "golden_promote_release_digest": self.digests[role],
            **self.gate_vars(),
            "golden_promote_project_selector": self.selector,
            "golden_promote_verify_timeout": 30,
            "golden_promote_verify_interval": 1,
        }
        extra_vars.update(extra)
        return run_playbook(PROMOTE, env=self.lab.env(), extra_vars=extra_vars, check=check, timeout=180)

    def rollback(self, gated=False, target=None):
        extra_vars = {
            "golden_promote_family": self.family,
            "golden_promote_mode": "filesystem",
            "golden_promote_project_selector": self.selector,
            "golden_promote_verify_timeout": 30,
            "golden_promote_verify_interval": 1,
        }
        if gated:
            extra_vars.update(self.gate_vars(), golden_promote_rollback_gate=True)
        if target:
            extra_vars["golden_promote_snapshot"] = target
        return run_playbook(ROLLBACK, env=self.lab.env(), extra_vars=extra_vars, timeout=180)

    def cleanup(self):
        from kubernetes.client.rest import ApiException

        def quietly(call, *args):
            try:
                call(*args)
            except ApiException as exc:
                if exc.status != 404:
                    raise

        quietly(
            self.custom.delete_namespaced_custom_object,
            *SEL,
            FS_NS,
            "goldenimageselections",
            self.selection_name,
        )
        for name in self.goldens.values():
            quietly(self.custom.delete_namespaced_custom_object, *SNAP, FS_NS, "volumesnapshots", name)
        for role in self.goldens:
            name = "%s-%s" % (self.prefix, role)
            quietly(self.custom.delete_namespaced_custom_object, *CDI, FS_NS, "datavolumes", name)
        for name in self.projects:
            quietly(self.core.delete_namespace, name)
        contents = self.custom.list_cluster_custom_object(*SNAP, "volumesnapshotcontents")["items"]
        for content in contents:
            name = content["metadata"]["name"]
            if any(name.startswith("kdc-%s-" % project) for project in self.projects):
                quietly(self.custom.delete_cluster_custom_object, *SNAP, "volumesnapshotcontents", name)


def writes_outside_the_gate(audit, stage):
    """Mutating requests other than the gate's clone: objects in the gate's project namespace and the
    cluster-scoped content it publishes there (a create names no object in its path; the rest gate-*)."""
    return [
        r
        for r in audit
        if r["verb"] not in ("get", "list", "watch")
        and r["namespace"] != stage.gate_project
        and not (r["resource"] == "volumesnapshotcontents" and (r["name"] or "gate-").startswith("gate-"))
    ]


@pytest.fixture(scope="module")
def promoted(lab, kube_client, tmp_path_factory):
    """The whole story once (a playbook start costs seconds); each test reads one chapter of it."""
    stage = Stage(lab, kube_client, tmp_path_factory.mktemp("promote"))
    try:
        stage.ensure_golden_namespace()
        stage.make_projects()
        stage.make_goldens()
        story = {"stage": stage}
        lab.clear_audit()
        story["predict"] = stage.promote("candidate", check=True)
        story["predict writes"] = lab.mutating_requests()
        story["after predict"] = stage.selection()
        story["promote"] = stage.promote("candidate")
        story["after promote"] = stage.selection()
        lab.clear_audit()
        story["broken"] = stage.promote("broken", golden_promote_gate_agent_timeout=3)
        story["broken audit"] = lab.audit()
        story["after broken"] = stage.selection()
        lab.clear_audit()
        story["again"] = stage.promote("candidate")
        story["again audit"] = lab.audit()
        story["rollback"] = stage.rollback()
        story["after rollback"] = stage.selection()
        lab.clear_audit()
        story["rollback again"] = stage.rollback()
        story["rollback again writes"] = lab.mutating_requests()
        story["after rollback again"] = stage.selection()
        lab.clear_audit()
        # Rolling back once more is a choice, so it names its target.
        story["gated rollback"] = stage.rollback(gated=True, target=stage.goldens["candidate"])
        story["gated rollback audit"] = lab.audit()
        story["after gated rollback"] = stage.selection()
        story["candidate after promote"] = stage.golden("candidate")
        # The recorded previous golden now carries no record of a pass (as one served by the label path and
        # never gated): restoring it needs the gate, which then records the pass.
        stage.forget_gate("incumbent")
        lab.clear_audit()
        story["ungated rollback"] = stage.rollback(target=stage.goldens["incumbent"])
        story["ungated rollback writes"] = lab.mutating_requests()
        lab.clear_audit()
        story["gated ungated rollback"] = stage.rollback(gated=True, target=stage.goldens["incumbent"])
        story["gated ungated rollback audit"] = lab.audit()
        story["incumbent after gated rollback"] = stage.golden("incumbent")
        story["after gated ungated rollback"] = stage.selection()
        yield story
    finally:
        stage.cleanup()


def assert_projects_served(run, stage, role):
    verified = run[VERIFY]
    assert sorted(p["namespace"] for p in verified["projects"]) == sorted(stage.projects), verified
    assert all(p["match"] for p in verified["projects"]), verified["projects"]
    assert verified["selected"]["snapshot"] == stage.goldens[role]


def test_check_mode_predicts_and_writes_nothing(promoted):
    stage, run = promoted["stage"], promoted["predict"]
    assert run.ok, run.log
    assert run.entry(GATE)["status"] == "skipped"  # a boot cannot be predicted
    assert [o["kind"] for o in run[GATE]["would_create"]][-2:] == ["PersistentVolumeClaim", "VirtualMachine"]
    assert run[WRITE]["changed"] is True
    assert run[WRITE]["selected"]["snapshot"] == stage.goldens["candidate"]
    assert promoted["predict writes"] == []
    assert promoted["after predict"] is None


def test_promote_with_the_gate(promoted):
    stage, run = promoted["stage"], promoted["promote"]
    assert run.ok, run.log
    gate = run[GATE]
    assert gate["verdict"] == "passed", gate
    assert [p["name"] for p in gate["phases"]] == ["provision", "start", "agent", "disk", "port"]
    assert gate["source"]["namespace"] == stage.gate_project
    assert gate["kept"] is False and run.entry(GATE)["changed"] is False

    written = run[WRITE]
    assert written["changed"] is True
    # The first selection records what the label path served, so a rollback can restore it.
    assert written["previous"] == {
        "snapshot": stage.goldens["incumbent"],
        "release_digest": None,
        "path": "label",
    }
    selection = promoted["after promote"]
    assert (
        selection["metadata"]["annotations"]["goldenimage.pipeline/previous-snapshot"]
        == stage.goldens["incumbent"]
    )
    assert selection["spec"] == {
        "family": stage.family,
        "mode": "Filesystem",
        "snapshotName": stage.goldens["candidate"],
        "releaseDigest": stage.digests["candidate"],
    }
    assert_projects_served(run, stage, "candidate")

    table = run[SUMMARY]["golden_promote_summary"]
    assert table[0] == "%s/Filesystem serves %s (selection path, previously %s)" % (
        stage.family,
        stage.goldens["candidate"],
        stage.goldens["incumbent"],
    )
    assert table[1] == "project | match | handle | reason"
    assert sorted(line.split(" | ")[:2] for line in table[2:]) == [
        [p, "True"] for p in sorted(stage.projects)
    ]
    assert table[0] in run.stdout  # printed for the operator, not only returned


def test_a_candidate_that_does_not_boot_is_refused_and_nothing_is_written(promoted):
    stage, run = promoted["stage"], promoted["broken"]
    assert not run.ok, run.log
    assert run[GATE]["verdict"] == "no_boot", run[GATE]
    refusal = run.entry(GATE_VERDICT)
    assert refusal["status"] == "failed"
    msg = refusal["result"]["msg"]
    assert "clone gate verdict no_boot" in msg and stage.goldens["broken"] in msg, msg
    assert "nothing was written" in msg
    assert WRITE not in run.task_names() and VERIFY not in run.task_names()
    # Read back: the selection is the one the previous promotion wrote, untouched.
    before, after = promoted["after promote"], promoted["after broken"]
    assert after["spec"] == before["spec"]
    assert after["metadata"]["annotations"] == before["metadata"]["annotations"]
    # The one write outside the gate's clone is its verdict, recorded on the broken golden.
    writes = writes_outside_the_gate(promoted["broken audit"], stage)
    assert [(w["verb"], w["resource"], w["name"]) for w in writes] == [
        ("patch", "volumesnapshots", stage.goldens["broken"])
    ], writes
    created = [(o["kind"], o["name"]) for o in run[GATE]["created"]]
    assert created and all(name.startswith("gate-") for _kind, name in created)
    audit = promoted["broken audit"]
    assert [r["resource"] for r in audit if r["verb"] == "create"] == [k.lower() + "s" for k, _n in created]
    deleted = {(r["resource"], r["name"]) for r in audit if r["verb"] == "delete"}
    assert {(kind.lower() + "s", name) for kind, name in created} <= deleted


@pytest.mark.suite("idempotence")
def test_promoting_the_same_candidate_again_changes_no_selection(promoted):
    stage, run = promoted["stage"], promoted["again"]
    assert run.ok, run.log
    assert run[GATE]["verdict"] == "passed"
    assert run[WRITE]["changed"] is False
    assert run[WRITE]["selected"]["snapshot"] == stage.goldens["candidate"]
    assert [t["task"] for t in run.tasks if t["changed"]] == []
    assert writes_outside_the_gate(promoted["again audit"], stage) == []


def test_rollback_restores_the_previous_golden(promoted):
    stage, run = promoted["stage"], promoted["rollback"]
    assert run.ok, run.log
    assert run.entry(GATE)["status"] == "skipped"  # no gate on a rollback unless asked
    written = run[WRITE]
    assert written["changed"] is True
    assert written["previous"]["snapshot"] == stage.goldens["candidate"]
    selection = promoted["after rollback"]
    assert selection["spec"] == {
        "family": stage.family,
        "mode": "Filesystem",
        "snapshotName": stage.goldens["incumbent"],
    }
    notes = selection["metadata"]["annotations"]
    assert notes["goldenimage.pipeline/previous-snapshot"] == stage.goldens["candidate"]
    assert_projects_served(run, stage, "incumbent")
    assert run[SUMMARY]["golden_promote_summary"][0].startswith(
        "%s/Filesystem serves %s" % (stage.family, stage.goldens["incumbent"])
    )


def test_a_gated_rollback_boots_the_restored_golden_before_writing(promoted):
    stage, run = promoted["stage"], promoted["gated rollback"]
    assert run.ok, run.log
    # The first rollback recorded the candidate as previous: the gated one restores it, booted first.
    gate = run[GATE]
    assert gate["verdict"] == "passed", gate
    assert gate["invocation"]["module_args"]["snapshot"] == stage.goldens["candidate"]
    written = run[WRITE]
    assert written["changed"] is True
    assert written["previous"]["snapshot"] == stage.goldens["incumbent"]
    assert promoted["after gated rollback"]["spec"]["snapshotName"] == stage.goldens["candidate"]
    assert_projects_served(run, stage, "candidate")
    # Besides the gate's clone (created and removed), the one write is the selection: the gate's verdict for
    # these bytes was recorded when the candidate was promoted, and is kept.
    writes = writes_outside_the_gate(promoted["gated rollback audit"], stage)
    assert [(w["verb"], w["resource"]) for w in writes] == [("patch", "goldenimageselections")], writes


@pytest.mark.suite("idempotence")
def test_a_rollback_run_twice_does_not_flip_back(promoted):
    stage, run = promoted["stage"], promoted["rollback again"]
    assert run.ok, run.log
    assert run[WRITE]["changed"] is False
    assert run[WRITE]["selected"]["snapshot"] == stage.goldens["incumbent"]
    assert run[WRITE]["rollback"]["noop"] is True
    plan = run["Find the snapshot the rollback restores"]
    assert "already rolled back to %s" % stage.goldens["incumbent"] in plan["rollback"]["reason"]
    assert promoted["rollback again writes"] == []
    assert promoted["after rollback again"]["spec"] == promoted["after rollback"]["spec"]
    assert_projects_served(run, stage, "incumbent")


def test_a_passing_gate_is_recorded_on_the_promoted_golden(promoted):
    run = promoted["promote"]
    record = json.loads(promoted["candidate after promote"]["metadata"]["annotations"][GATE_PASSED])
    assert record["verdict"] == "passed" and record["project"] == promoted["stage"].gate_project
    assert record["memory"] == run[GATE]["memory"] and record["at"].endswith("Z")
    assert run[WRITE]["gate_passed"] == record


def test_a_rollback_to_a_golden_no_gate_passed_is_refused_unless_gated(promoted):
    stage, refused = promoted["stage"], promoted["ungated rollback"]
    incumbent = stage.goldens["incumbent"]
    assert not refused.ok
    failed = refused.entry("Find the snapshot the rollback restores")
    assert failed["status"] == "failed"
    msg = failed["result"]["msg"]
    assert msg.startswith("VolumeSnapshot %s/%s: refusing to serve it through " % (FS_NS, incumbent)), msg
    assert "no clone gate ever recorded a pass for it" in msg
    assert (
        "golden_promote_rollback_gate: true" in msg and "golden_promote_rollback_allow_ungated: true" in msg
    )
    assert GATE not in refused.task_names() and WRITE not in refused.task_names()
    assert promoted["ungated rollback writes"] == []

    # The same rollback with the gate: the clone boots, the pass is recorded on the golden, then the write.
    gated = promoted["gated ungated rollback"]
    assert gated.ok, gated.log
    assert gated[GATE]["verdict"] == "passed"
    assert promoted["after gated ungated rollback"]["spec"]["snapshotName"] == incumbent
    notes = promoted["incumbent after gated rollback"]["metadata"]["annotations"]
    assert json.loads(notes[GATE_PASSED])["verdict"] == "passed"
    writes = writes_outside_the_gate(promoted["gated ungated rollback audit"], stage)
    assert [(w["verb"], w["resource"], w["name"]) for w in writes] == [
        ("patch", "volumesnapshots", incumbent),
        ("patch", "goldenimageselections", stage.selection_name),
    ], writes
