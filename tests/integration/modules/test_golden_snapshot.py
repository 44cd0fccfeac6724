"""golden_snapshot against a cluster: the lab by default, any cluster through K8S_AUTH_KUBECONFIG.

Every mutation runs three ways (check mode, real, again), and each test works under its own random
name prefix and removes what it made. Tests that read the lab's audit log or set its fault knobs are
marked ``lab_only``.
"""

from __future__ import annotations

import functools
import json
import re
import time
import uuid

import pytest

from tests.integration.support.runner import kube_play, module_task, run_playbook

GROUP, VERSION = "snapshot.storage.k8s.io", "v1"
FS_NS, BLOCK_NS = "golden-images", "golden-images-block"
DIGEST = "sha256:" + "0123456789abcdef" * 4
MODULE = "goldenimage.pipeline.golden_snapshot"


task = functools.partial(module_task, MODULE)


class Cluster:
    """Just enough kubernetes client to arrange a test and look at the outcome."""

    def __init__(self, api_client, prefix):
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.prefix = prefix

    def ensure_namespace(self, name):
        from kubernetes.client.rest import ApiException

        try:
            self.core.create_namespace({"metadata": {"name": name}})
        except ApiException as exc:
            if exc.status != 409:
                raise

    def pvc(self, namespace, name, mode="Filesystem"):
        body = {
            "metadata": {"name": name},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "volumeMode": mode,
                "resources": {"requests": {"storage": "4Mi"}},
            },
        }
        self.core.create_namespaced_persistent_volume_claim(namespace, body)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            phase = self.core.read_namespaced_persistent_volume_claim(name, namespace).status.phase
            if phase == "Bound":
                return name
            time.sleep(0.2)
        raise AssertionError("PVC %s/%s did not bind (phase %s)" % (namespace, name, phase))

    def snapshot(self, namespace, name, pvc, labels=None, annotations=None):
        body = {
            "apiVersion": "%s/%s" % (GROUP, VERSION),
            "kind": "VolumeSnapshot",
            "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
            "spec": {"source": {"persistentVolumeClaimName": pvc}},
        }
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "volumesnapshots", body)

    def golden(self, name, pvc, family, active=False):
        """A Filesystem golden made by hand, carrying the full contract."""
        labels = {"kube-dc.com/golden-os": family, "kube-dc.com/golden-mode": "Filesystem"}
        if active:
            labels["kube-dc.com/golden-active"] = "true"
        annotations = {
            "kube-dc.com/os-family-id": family,
            "kube-dc.com/os-name": "Debian 12",
            "kube-dc.com/golden-mode": "Filesystem",
        }
        return self.snapshot(FS_NS, name, pvc, labels=labels, annotations=annotations)

    def get_snapshot(self, namespace, name):
        from kubernetes.client.rest import ApiException

        try:
            return self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, "volumesnapshots", name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def wait_snapshot_ready(self, namespace, name, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            obj = self.get_snapshot(namespace, name) or {}
            if (obj.get("status") or {}).get("readyToUse"):
                return obj
            time.sleep(0.2)
        raise AssertionError("snapshot %s/%s not ready: %s" % (namespace, name, obj.get("status")))

    def selection(self, name, family, mode, snapshot):
        body = {
            "apiVersion": "kube-dc.com/v1",
            "kind": "GoldenImageSelection",
            "metadata": {"name": name},
            "spec": {"family": family, "mode": mode, "snapshotName": snapshot, "releaseDigest": DIGEST},
        }
        self.custom.create_namespaced_custom_object("kube-dc.com", "v1", FS_NS, "goldenimageselections", body)

    def cleanup(self):
        from kubernetes.client.rest import ApiException

        def mine(items):
            return [i["metadata"]["name"] for i in items if i["metadata"]["name"].startswith(self.prefix)]

        for namespace in (FS_NS, BLOCK_NS):
            try:
                found = self.custom.list_namespaced_custom_object(
                    "kube-dc.com", "v1", namespace, "goldenimageselections"
                )
                for name in mine(found["items"]):
                    self.custom.delete_namespaced_custom_object(
                        "kube-dc.com", "v1", namespace, "goldenimageselections", name
                    )
            except ApiException as exc:
                if exc.status != 404:
                    raise
            found = self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "volumesnapshots")
            for name in mine(found["items"]):
                self.custom.delete_namespaced_custom_object(
                    GROUP, VERSION, namespace, "volumesnapshots", name
                )
            claims = self.core.list_namespaced_persistent_volume_claim(namespace).to_dict()["items"]
            for name in mine(claims):
                self.core.delete_namespaced_persistent_volume_claim(name, namespace)


@pytest.fixture
def cluster(kube_client):
    prefix = "t%s" % uuid.uuid4().hex[:8]
    arranged = Cluster(kube_client, prefix)
    arranged.ensure_namespace(FS_NS)
    arranged.ensure_namespace(BLOCK_NS)
    try:
        yield arranged
    finally:
        arranged.cleanup()


def make_args(cluster, pvc, **extra):
    """Arguments that make the versioned golden of family ``<prefix>-debian`` from ``pvc``."""
    args = {
        "family": "%s-debian" % cluster.prefix,
        "os_name": "Debian 12",
        "pvc": pvc,
        "date": "2026-08-28",
        "digest": DIGEST,
        "wait_timeout": 60,
        "wait_sleep": 1,
    }
    args.update(extra)
    return args


def versioned(cluster):
    return "golden-%s-debian-20260828-0123456789ab" % cluster.prefix


def test_make_a_golden_three_times(lab, cluster):
    pvc = cluster.pvc(FS_NS, "%s-disk" % cluster.prefix)
    args = make_args(cluster, pvc)
    run = run_playbook(
        kube_play(
            task("predict", check=True, diff=True, **args),
            task("make", diff=True, **args),
            task("again", diff=True, **args),
            task(
                "validate",
                state="validated",
                name=versioned(cluster),
                family=args["family"],
                mode="filesystem",
            ),
        ),
        env=lab.env(),
    )
    assert run.ok, run.log

    predicted = run["predict"]
    assert predicted["changed"] is True
    assert predicted["action"] == "create"
    assert predicted["golden"]["ready"] is False
    assert predicted["diff"]["before"] == {}
    assert predicted["diff"]["after"]["metadata"]["labels"] == {
        "kube-dc.com/golden-os": args["family"],
        "kube-dc.com/golden-mode": "Filesystem",
    }

    made = run["make"]
    assert made["changed"] is True
    assert made["golden"]["name"] == versioned(cluster)
    assert made["golden"]["namespace"] == FS_NS
    assert made["golden"]["ready"] is True
    assert made["golden"]["restore_size"]
    assert made["golden"]["active"] is False
    assert made["golden"]["digest"] == DIGEST
    assert made["progress"][-1] == "Ready"
    assert made["duration"] >= 0
    assert made["diff"]["after"]["metadata"]["annotations"] == {
        "kube-dc.com/os-family-id": args["family"],
        "kube-dc.com/os-name": "Debian 12",
        "kube-dc.com/golden-mode": "Filesystem",
        "goldenimage.pipeline/release-digest": DIGEST,  # the name keeps 12 hex digits of it
    }

    again = run["again"]
    assert again["changed"] is False
    assert again["action"] == "none"
    assert again["diff"]["before"] == again["diff"]["after"]

    assert run["validate"]["problems"] == []

    live = cluster.get_snapshot(FS_NS, versioned(cluster))
    assert "kube-dc.com/golden-active" not in live["metadata"]["labels"]
    assert sorted(k for k in live["metadata"].get("annotations", {}) if k.startswith("kube-dc.com/")) == [
        "kube-dc.com/golden-mode",
        "kube-dc.com/os-family-id",
        "kube-dc.com/os-name",
    ]


FACTS = {
    "schema_version": 1,
    "os_family": "linux",
    "unreadable": [],
    "private_keys": [],
    "machine_id": "empty",
}
FACTS_ANNOTATION = "goldenimage.pipeline/image-facts"


def test_the_facts_read_from_the_bytes_are_recorded_once_and_never_replaced(lab, cluster):
    pvc = cluster.pvc(FS_NS, "%s-disk" % cluster.prefix)
    args = make_args(cluster, pvc)
    other = dict(FACTS, private_keys=[{"path": "/etc/ssh/ssh_host_rsa_key", "kind": "ssh_host_key"}])
    run = run_playbook(
        kube_play(
            task("bare", **args),
            task("record", diff=True, image_facts=FACTS, **args),
            task("again", image_facts=FACTS, **args),
            task("other", ignore_errors=True, image_facts=other, **args),
            task("not-a-document", ignore_errors=True, image_facts={"os": "linux"}, **args),
        ),
        env=lab.env(),
    )
    assert run["bare"]["changed"] is True and run["bare"]["golden"]["image_facts"] is None
    # A golden made before its facts were known gets them; only the annotation changes.
    recorded = run["record"]
    assert recorded["changed"] is True and recorded["golden"]["image_facts"] == FACTS
    assert recorded["diff"]["after"]["metadata"]["annotations"][FACTS_ANNOTATION]
    assert run["again"]["changed"] is False
    assert run.entry("other")["status"] == "ignored"
    assert "records other image facts" in run["other"]["msg"] and "new golden" in run["other"]["msg"]
    assert run.entry("not-a-document")["status"] == "ignored"
    assert "not an image-facts document" in run["not-a-document"]["msg"]
    live = cluster.get_snapshot(FS_NS, versioned(cluster))
    assert json.loads(live["metadata"]["annotations"][FACTS_ANNOTATION]) == FACTS


def test_a_rerun_notices_the_hold_was_deleted_and_the_report_calls_it_unintended(lab, cluster):
    """A GitOps prune deletes the holding selection of a family nothing promoted: the seeder serves its
    only golden by list order. The publish rerun fails naming it instead of reporting success, and
    golden_info reports the serving as a conflict."""
    pvc = cluster.pvc(FS_NS, "%s-disk" % cluster.prefix)
    args = make_args(cluster, pvc)
    first = run_playbook(kube_play(task("publish", **args)), env=lab.env())
    assert first["publish"]["held"].startswith("%s/%s-filesystem" % (FS_NS, args["family"])), first["publish"]
    cluster.custom.delete_namespaced_custom_object(
        "kube-dc.com", "v1", FS_NS, "goldenimageselections", "%s-filesystem" % args["family"]
    )
    run = run_playbook(
        kube_play(
            task("rerun", ignore_errors=True, **args),
            module_task("goldenimage.pipeline.golden_info", "info", family=args["family"]),
        ),
        env=lab.env(),
    )
    assert run.entry("rerun")["status"] == "ignored", run["rerun"]
    assert "by list order" in run["rerun"]["msg"]
    conflicts = [c for c in run["info"]["conflicts"] if c["type"] == "served_unintended"]
    assert [c["names"] for c in conflicts] == [[versioned(cluster)]], run["info"]["conflicts"]


@pytest.mark.lab_only
def test_check_mode_sends_no_mutating_request(lab, cluster):
    pvc = cluster.pvc(FS_NS, "%s-disk" % cluster.prefix)
    bare = "%s-bare" % cluster.prefix
    cluster.snapshot(FS_NS, bare, pvc)
    lab.clear_audit()
    run = run_playbook(
        kube_play(
            task("make", **make_args(cluster, pvc)),
            task("adopt", name=bare, family="%s-debian" % cluster.prefix, os_name="Debian", adopt=True),
            task("delete", state="absent", name=bare),
        ),
        env=lab.env(),
        check=True,
        diff=True,
    )
    assert run.ok, run.log
    assert [run[name]["changed"] for name in ("make", "adopt", "delete")] == [True, True, True]
    assert run["adopt"]["action"] == "stamp"
    assert (
        run["adopt"]["diff"]["after"]["metadata"]["labels"]["kube-dc.com/golden-os"]
        == "%s-debian" % cluster.prefix
    )
    assert run["delete"]["action"] == "delete"
    assert lab.mutating_requests() == []
    assert cluster.get_snapshot(FS_NS, versioned(cluster)) is None
    assert cluster.get_snapshot(FS_NS, bare)["metadata"].get("labels") in (None, {})


@pytest.mark.lab_only
@pytest.mark.suite("idempotence")
def test_a_rerun_writes_nothing_and_discovers_little(lab, cluster):
    pvc = cluster.pvc(FS_NS, "%s-disk" % cluster.prefix)
    args = make_args(cluster, pvc)
    first = run_playbook(kube_play(task("make", **args)), env=lab.env())
    assert first.ok, first.log
    lab.clear_audit()
    second = run_playbook(kube_play(task("make", **args)), env=lab.env())
    assert second.ok, second.log
    assert second["make"]["changed"] is False
    assert lab.mutating_requests() == []
    # A rerun asks the serving truth again (a hold deleted since is noticed): it discovers the groups of
    # what it reads, once each, and no others (no walk over every API group).
    paths = [r["path"] for r in lab.audit()]
    groups = [p.split("/")[2] for p in paths if p.startswith("/apis/") and p.count("/") == 3]
    assert sorted(groups) == sorted(set(groups)), paths
    assert set(groups) <= {"snapshot.storage.k8s.io", "kube-dc.com", "cdi.kubevirt.io", "kubevirt.io"}, paths


def test_block_golden_and_the_refusals(lab, cluster):
    block_pvc = cluster.pvc(BLOCK_NS, "%s-raw" % cluster.prefix, mode="Block")
    fs_pvc_in_block_ns = cluster.pvc(BLOCK_NS, "%s-fs" % cluster.prefix)
    family = "%s-debian" % cluster.prefix
    run = run_playbook(
        kube_play(
            task("block", **make_args(cluster, block_pvc, mode="block")),
            task("other source", ignore_errors=True, **make_args(cluster, fs_pvc_in_block_ns, mode="Block")),
            task(
                "filesystem pvc for block",
                ignore_errors=True,
                **make_args(cluster, fs_pvc_in_block_ns, mode="Block", date="20260901"),
            ),
            task(
                "missing pvc",
                ignore_errors=True,
                **make_args(cluster, "%s-nope" % cluster.prefix, date="20260101"),
            ),
            task("no name", ignore_errors=True, family=family, os_name="Debian"),
        ),
        env=lab.env(),
    )
    assert run.ok, run.log
    made = run["block"]
    assert made["changed"] is True
    assert (made["golden"]["mode"], made["golden"]["namespace"], made["golden"]["ready"]) == (
        "Block",
        BLOCK_NS,
        True,
    )

    # The same versioned name already exists, made from another PVC: refused, never overwritten.
    other = run.entry("other source")
    assert other["status"] == "ignored"
    assert "already exists with source PersistentVolumeClaim %s" % block_pvc in other["result"]["msg"]
    assert "a golden's content never changes" in other["result"]["msg"]

    msg = run["filesystem pvc for block"]["msg"]
    assert "has volumeMode Filesystem, but a Block golden is made from a Block PVC" in msg
    assert (
        "PersistentVolumeClaim golden-images/%s-nope not found" % cluster.prefix in run["missing pvc"]["msg"]
    )
    assert "give name, or family and digest" in run["no name"]["msg"]
    assert all(run.entry(name)["status"] == "ignored" for name in run.task_names()[1:])


def test_adopt_stamps_only_the_contract(lab, cluster):
    pvc = cluster.pvc(FS_NS, "%s-disk" % cluster.prefix)
    name = "%s-by-hand" % cluster.prefix
    cluster.snapshot(FS_NS, name, pvc, labels={"app": "bake"}, annotations={"kube-dc.com/built-by": "packer"})
    cluster.wait_snapshot_ready(FS_NS, name)
    before = cluster.get_snapshot(FS_NS, name)
    family = "%s-win" % cluster.prefix
    args = {"name": name, "family": family, "os_name": "Windows 11"}
    run = run_playbook(
        kube_play(
            task("without consent", ignore_errors=True, **args),
            task("adopt", diff=True, adopt=True, **args),
            task("again", adopt=True, **args),
            task(
                "another family",
                ignore_errors=True,
                adopt=True,
                **{**args, "family": "%s-linux" % cluster.prefix},
            ),
        ),
        env=lab.env(),
    )
    assert run.ok, run.log
    assert "set adopt: true to stamp it" in run["without consent"]["msg"]
    assert run["adopt"]["changed"] is True
    diff = run["adopt"]["diff"]
    assert diff["before"]["spec"] == diff["after"]["spec"]
    assert diff["after"]["metadata"]["labels"] == {
        "app": "bake",
        "kube-dc.com/golden-os": family,
        "kube-dc.com/golden-mode": "Filesystem",
    }
    assert run["adopt"]["unknown_keys"] == ["kube-dc.com/built-by"]
    assert run["again"]["changed"] is False
    assert "carries family %s, not %s-linux" % (family, cluster.prefix) in run["another family"]["msg"]
    after = cluster.get_snapshot(FS_NS, name)
    assert after["spec"] == before["spec"]
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert "kube-dc.com/golden-active" not in after["metadata"]["labels"]


def test_validation_reports_every_problem_and_changes_nothing(lab, cluster):
    pvc = cluster.pvc(FS_NS, "%s-disk" % cluster.prefix)
    family = "%s-mixed" % cluster.prefix
    broken = "%s-broken" % cluster.prefix
    cluster.snapshot(
        FS_NS,
        broken,
        pvc,
        labels={"kube-dc.com/golden-os": family, "kube-dc.com/golden-mode": "Block"},
        annotations={"kube-dc.com/os-family-id": "%s-other" % cluster.prefix},
    )
    cluster.wait_snapshot_ready(FS_NS, broken)
    valid = "%s-valid" % cluster.prefix
    cluster.golden(valid, pvc, family)
    cluster.wait_snapshot_ready(FS_NS, valid)
    lab_before = cluster.get_snapshot(FS_NS, broken)
    run = run_playbook(
        kube_play(
            task("one", state="validated", name=broken, fail_on_invalid=False),
            task("one, failing", state="validated", name=broken, ignore_errors=True),
            task("family", state="validated", family=family, fail_on_invalid=False),
            task("absent family", state="validated", family="%s-none" % cluster.prefix, ignore_errors=True),
            task("missing", state="validated", name="%s-missing" % cluster.prefix, ignore_errors=True),
        ),
        env=lab.env(),
    )
    assert run.ok, run.log
    expected = [
        "label kube-dc.com/golden-os (%s) and annotation kube-dc.com/os-family-id (%s-other) disagree"
        % (family, cluster.prefix),
        "annotation kube-dc.com/os-name (the display name) is missing",
        "mode Block does not match namespace golden-images, which serves Filesystem goldens",
    ]
    one = run["one"]
    assert one["changed"] is False
    assert one["problems"] == expected
    assert run.entry("one, failing")["status"] == "ignored"
    assert run["one, failing"]["msg"].startswith(
        "VolumeSnapshot golden-images/%s breaks the golden contract: label kube-dc.com/golden-os" % broken
    )
    goldens = {g["name"]: g["problems"] for g in run["family"]["goldens"]}
    assert goldens == {broken: expected, valid: []}
    assert run["family"]["problems"] == ["%s/%s: %s" % (FS_NS, broken, p) for p in expected]
    assert "no snapshot of family %s-none" % cluster.prefix in run["absent family"]["msg"]
    assert "not found in golden-images or golden-images-block" in run["missing"]["msg"]
    assert cluster.get_snapshot(FS_NS, broken)["metadata"] == lab_before["metadata"]


@pytest.mark.suite("data-loss")
def test_absent_refuses_a_golden_in_service(lab, cluster):
    """What is served, selected or labelled active is never deleted, force or not; force withdraws only a
    staged candidate (newer than what is served) on purpose."""
    pvc = cluster.pvc(FS_NS, "%s-disk" % cluster.prefix)
    family = "%s-debian" % cluster.prefix
    active, selected = "%s-active" % cluster.prefix, "%s-selected" % cluster.prefix
    staged = "%s-zstaged" % cluster.prefix  # created last, and after it by name: the newest
    cluster.golden(active, pvc, family, active=True)
    cluster.golden(selected, pvc, family)
    cluster.golden(staged, pvc, family)
    cluster.selection("%s-sel" % cluster.prefix, family, "filesystem", selected)
    gone = {"state": "absent", "name": staged, "wait_timeout": 120, "wait_sleep": 1}
    lab.clear_audit()
    refused = run_playbook(
        kube_play(
            task("active", ignore_errors=True, force=True, **{**gone, "name": active}),
            task("selected", ignore_errors=True, **{**gone, "name": selected}),
            task("selected, forced", ignore_errors=True, force=True, **{**gone, "name": selected}),
            task("staged", ignore_errors=True, **gone),
        ),
        env=lab.env(),
    )
    assert refused.ok, refused.log
    assert [r for r in lab.mutating_requests() if r["verb"] == "delete"] == []
    run = run_playbook(
        kube_play(
            task("forced, predicted", check=True, diff=True, force=True, **gone),
            task("forced", force=True, **gone),
            task("again", force=True, **gone),
        ),
        env=lab.env(),
    )
    assert run.ok, run.log
    assert (
        "carries kube-dc.com/golden-active=true, so projects of family %s" % family
        in refused["active"]["msg"]
    )
    for name in ("selected", "selected, forced"):
        msg = refused[name]["msg"]
        assert "it is served for %s/Filesystem" % family in msg, msg
        assert "GoldenImageSelection golden-images/%s-sel names it" % cluster.prefix in msg
    assert "it is staged" in refused["staged"]["msg"] and "set force: true" in refused["staged"]["msg"]
    assert run["forced, predicted"]["changed"] is True
    assert run["forced, predicted"]["diff"]["after"] == {}
    assert run["forced"]["changed"] is True
    assert run["again"]["changed"] is False
    assert cluster.get_snapshot(FS_NS, staged) is None
    assert cluster.get_snapshot(FS_NS, selected) is not None
    assert cluster.get_snapshot(FS_NS, active) is not None


@pytest.mark.lab_only
def test_a_stuck_or_failed_snapshot_is_named(lab, cluster):
    pvc = cluster.pvc(FS_NS, "%s-disk" % cluster.prefix)
    stuck = "%s-stuck" % cluster.prefix
    failed = "%s-failed" % cluster.prefix
    lab.faults.set_object("VolumeSnapshot/%s/%s" % (FS_NS, stuck), "stuck")
    lab.faults.set_object("VolumeSnapshot/%s/%s" % (FS_NS, failed), "fail")
    try:
        common = {"family": "%s-debian" % cluster.prefix, "os_name": "Debian", "pvc": pvc, "wait_sleep": 1}
        run = run_playbook(
            kube_play(
                task("stuck", ignore_errors=True, name=stuck, wait_timeout=20, report_every=1, **common),
                task("failed", ignore_errors=True, name=failed, wait_timeout=120, **common),
            ),
            env=lab.env(),
        )
    finally:
        lab.faults.set_object("VolumeSnapshot/%s/%s" % (FS_NS, stuck), None)
        lab.faults.set_object("VolumeSnapshot/%s/%s" % (FS_NS, failed), None)
    assert run.ok, run.log
    timeout = run["stuck"]
    # The wait gave up at its timeout, not before it (how far past it depends on the machine's load).
    waited = re.match(
        r"timed out after (\d+\.\d)s waiting for VolumeSnapshot golden-images/%s to be readyToUse \(stuck"
        % stuck,
        timeout["msg"],
    )
    assert waited and float(waited.group(1)) >= 20, timeout["msg"]
    assert (
        "last observed: readyToUse=unset" in timeout["msg"]
        or "last observed: readyToUse=false" in timeout["msg"]
    )
    assert timeout["stuck"] is True
    # The wait ran in rounds of report_every, each printing the snapshot's state and the time waited; the
    # time-out counts from the first round, not the last.
    # (A module's start-up on a loaded machine can take seconds: 20 s leaves room for two rounds at least.)
    assert timeout["rounds"] >= 2, timeout["lines"]
    assert len(timeout["lines"]) == timeout["rounds"] - 1, timeout["lines"]
    for line in timeout["lines"]:
        assert re.match(r"VolumeSnapshot golden-images/%s: readyToUse=\w+, .* \(\d+s\)$" % stuck, line), line
    assert timeout["changed"] is True  # the snapshot was created before the wait gave up
    assert timeout["golden"]["ready"] is False

    failure = run["failed"]
    assert failure["msg"].startswith("failed while waiting for VolumeSnapshot golden-images/%s" % failed)
    assert "status.error: " in failure["msg"]
    # The wait ended on the error it saw, not at its 120 s timeout.
    assert "timed out" not in failure["msg"] and "stuck" not in failure, failure


@pytest.mark.lab_only
@pytest.mark.suite("data-loss")
def test_absent_asks_who_uses_the_golden_and_deletes_nothing_in_use(lab, cluster):
    """A clone restoring from the golden (directly, and through a project's seeded copy), the project
    copy itself, a selection naming it and a selection recording another golden as its rollback target:
    every delete is refused naming each consumer, force does not pass a clone, and the audit log shows
    no delete request at all."""
    from kubernetes.client.rest import ApiException

    family = "%s-debian" % cluster.prefix
    disk = cluster.pvc(FS_NS, "%s-disk" % cluster.prefix)
    served, previous = "%s-served" % cluster.prefix, "%s-previous" % cluster.prefix
    for name in (served, previous):
        cluster.golden(name, disk, family)
        cluster.wait_snapshot_ready(FS_NS, name)
    sel = "%s-sel" % cluster.prefix
    body = {
        "apiVersion": "kube-dc.com/v1",
        "kind": "GoldenImageSelection",
        "metadata": {"name": sel, "annotations": {"goldenimage.pipeline/previous-snapshot": previous}},
        "spec": {"family": family, "mode": "Filesystem", "snapshotName": served},
    }
    cluster.custom.create_namespaced_custom_object("kube-dc.com", "v1", FS_NS, "goldenimageselections", body)
    project = "%s-project" % cluster.prefix
    cluster.core.create_namespace({"metadata": {"name": project, "labels": {"kube-dc.com/project": "x"}}})
    try:
        copy = "golden-%s" % family
        cluster.wait_snapshot_ready(project, copy)  # the seeder's copy of the selected golden

        def clone(namespace, name, source):
            claim = {
                "metadata": {"name": name},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "4Mi"}},
                    "dataSource": {"apiGroup": GROUP, "kind": "VolumeSnapshot", "name": source},
                },
            }
            cluster.core.create_namespaced_persistent_volume_claim(namespace, claim)

        clone(FS_NS, "%s-direct" % cluster.prefix, served)
        clone(project, "%s-vm-root" % cluster.prefix, copy)
        lab.clear_audit()
        gone = {"state": "absent", "wait_timeout": 30, "wait_sleep": 1, "ignore_errors": True}
        run = run_playbook(
            kube_play(
                task("in use", name=served, **gone),
                task("in use, forced", name=served, force=True, **gone),
                task("in use, predicted", name=served, check=True, **gone),
                task("rollback target", name=previous, **gone),
            ),
            env=lab.env(),
        )
        deletes = [r for r in lab.audit() if r["verb"] in ("delete", "deletecollection")]
        assert deletes == []
        assert cluster.get_snapshot(FS_NS, served) is not None
        assert cluster.get_snapshot(FS_NS, previous) is not None
        for name in ("in use", "in use, forced", "in use, predicted"):
            refused = run[name]
            assert run.entry(name)["status"] == "ignored", (name, refused)
            assert refused["refused"] is True and refused["changed"] is False
            msg = refused["msg"]
            assert msg.startswith("VolumeSnapshot %s/%s: refusing to delete it" % (FS_NS, served)), msg
            assert (
                "PersistentVolumeClaim %s/%s-direct restores from it directly" % (FS_NS, cluster.prefix)
                in msg
            )
            assert (
                "PersistentVolumeClaim %s/%s-vm-root restores from it through the project copy %s/%s"
                % (project, cluster.prefix, project, copy)
                in msg
            )
            assert (
                "VolumeSnapshot %s/%s is a project's seeded copy on its snapshot handle" % (project, copy)
                in msg
            )
            assert "it is served for %s/Filesystem" % family in msg
            kinds = sorted((c["kind"], c["namespace"], c["name"]) for c in refused["consumers"])
            assert ("PersistentVolumeClaim", FS_NS, "%s-direct" % cluster.prefix) in kinds
        assert (
            "GoldenImageSelection %s/%s names it in spec.snapshotName" % (FS_NS, sel) in run["in use"]["msg"]
        )
        target = run["rollback target"]
        assert target["refused"] is True, target
        assert target["msg"].startswith("VolumeSnapshot %s/%s: refusing to delete it: " % (FS_NS, previous))
        assert "it is the recorded rollback target of %s/Filesystem" % family in target["msg"]
        assert (
            "GoldenImageSelection %s/%s records it as the rollback target (annotation "
            "goldenimage.pipeline/previous-snapshot)" % (FS_NS, sel) in target["msg"]
        )
    finally:
        for namespace, name in ((FS_NS, "%s-direct" % cluster.prefix),):
            try:
                cluster.core.delete_namespaced_persistent_volume_claim(name, namespace)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        cluster.core.delete_namespace(project)
        for content in cluster.custom.list_cluster_custom_object(GROUP, VERSION, "volumesnapshotcontents")[
            "items"
        ]:
            if content["metadata"]["name"].startswith("kdc-%s-" % project):
                cluster.custom.delete_cluster_custom_object(
                    GROUP, VERSION, "volumesnapshotcontents", content["metadata"]["name"]
                )


@pytest.mark.lab_only
@pytest.mark.suite("data-loss")
def test_a_datasource_or_a_vm_template_naming_a_golden_keeps_it(lab, cluster):
    """Tenants consume goldens through CDI DataSources and VirtualMachine dataVolumeTemplates as well as
    claims: an old golden (not served, staged or a rollback target) that a DataSource or a VM's template
    names is not deleted, not even with force, and golden_info counts both as its clones."""
    family = "%s-debian" % cluster.prefix
    disk = cluster.pvc(FS_NS, "%s-disk" % cluster.prefix)
    old_a, old_b, served = ("%s-%s" % (cluster.prefix, n) for n in ("a", "b", "served"))
    for name in (old_a, old_b, served):
        cluster.golden(name, disk, family)
        cluster.wait_snapshot_ready(FS_NS, name)
    cluster.selection("%s-sel" % cluster.prefix, family, "Filesystem", served)
    tenant = "%s-tenant" % cluster.prefix
    cluster.ensure_namespace(tenant)
    try:
        cluster.custom.create_namespaced_custom_object(
            "cdi.kubevirt.io",
            "v1beta1",
            tenant,
            "datasources",
            {
                "apiVersion": "cdi.kubevirt.io/v1beta1",
                "kind": "DataSource",
                "metadata": {"name": "debian"},
                "spec": {"source": {"snapshot": {"namespace": FS_NS, "name": old_a}}},
            },
        )
        template = {
            "metadata": {"name": "root"},
            "spec": {
                "source": {"snapshot": {"namespace": FS_NS, "name": old_b}},
                "storage": {"resources": {"requests": {"storage": "4Mi"}}},
            },
        }
        cluster.custom.create_namespaced_custom_object(
            "kubevirt.io",
            "v1",
            tenant,
            "virtualmachines",
            {
                "apiVersion": "kubevirt.io/v1",
                "kind": "VirtualMachine",
                "metadata": {"name": "db"},
                "spec": {
                    "runStrategy": "Halted",
                    "dataVolumeTemplates": [template],
                    # KubeVirt's admission wants each dataVolumeTemplate used by a volume, and memory.
                    "template": {
                        "spec": {
                            "domain": {
                                "devices": {"disks": [{"name": "root"}]},
                                "resources": {"requests": {"memory": "1Gi"}},
                            },
                            "volumes": [{"name": "root", "dataVolume": {"name": "root"}}],
                        }
                    },
                },
            },
        )
        lab.clear_audit()
        gone = {"state": "absent", "force": True, "wait_timeout": 30, "wait_sleep": 1, "ignore_errors": True}
        run = run_playbook(
            kube_play(
                task("datasource", name=old_a, **gone),
                task("template", name=old_b, **gone),
                module_task("goldenimage.pipeline.golden_info", "info", family=family),
            ),
            env=lab.env(),
        )
        assert [r for r in lab.audit() if r["verb"] in ("delete", "deletecollection")] == []
        assert run["datasource"]["refused"] is True, run["datasource"]
        assert (
            "DataSource %s/debian names it as its source (every clone of the DataSource restores from it)"
            % tenant
            in run["datasource"]["msg"]
        )
        assert run["template"]["refused"] is True, run["template"]
        assert (
            "VirtualMachine %s/db restores a disk from it in its dataVolumeTemplates" % tenant
            in (run["template"]["msg"])
        )
        assert cluster.get_snapshot(FS_NS, old_a) and cluster.get_snapshot(FS_NS, old_b)
        clones = {e["name"]: e for e in run["info"]["clones"] if e["golden"]}
        assert clones[old_a]["datasources"] == [{"namespace": tenant, "name": "debian", "via": "golden"}]
        assert clones[old_b]["vms"] == [{"namespace": tenant, "name": "db", "via": "golden"}]
        assert clones[old_a]["count"] == clones[old_b]["count"] == 1
    finally:
        cluster.core.delete_namespace(tenant)


@pytest.mark.lab_only
@pytest.mark.suite("bad-input")
def test_a_zero_or_negative_wait_is_refused_before_anything_is_written(lab, cluster):
    pvc = cluster.pvc(FS_NS, "%s-disk" % cluster.prefix)
    lab.clear_audit()
    run = run_playbook(
        kube_play(
            task("zero", ignore_errors=True, **make_args(cluster, pvc, wait_timeout=0)),
            task("negative sleep", ignore_errors=True, **make_args(cluster, pvc, wait_sleep=-1)),
        ),
        env=lab.env(),
    )
    assert [r for r in lab.audit() if r["verb"] not in ("get", "list", "watch")] == []
    assert run["zero"]["refused"] is True
    assert run["zero"]["msg"].startswith("option wait_timeout: 0 is not a duration"), run["zero"]
    assert run["negative sleep"]["msg"].startswith("option wait_sleep: -1 is not a duration")
    assert cluster.get_snapshot(FS_NS, versioned(cluster)) is None
