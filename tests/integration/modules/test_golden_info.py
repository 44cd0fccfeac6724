"""golden_info against a cluster: the lab by default, any cluster through K8S_AUTH_KUBECONFIG.

Each test works under its own random prefix (families, project label value) and removes what it
made. Project copies are made by the cluster's per-project seeder; on a lab started without one the
test makes them itself, in the seeder's layout.
"""

from __future__ import annotations

import functools
import time
import uuid

import pytest

from tests.integration.support import SETTLE_SECONDS
from tests.integration.support.runner import kube_play, module_task, run_playbook

GROUP, VERSION = "snapshot.storage.k8s.io", "v1"
FS_NS, BLOCK_NS = "golden-images", "golden-images-block"
DIGEST = "sha256:" + "f0dea74da9c54ba4728b2f4841316490cadd66b7ab1ed10de46549d457eb5018"[7:]
MODULE = "goldenimage.pipeline.golden_info"


task = functools.partial(module_task, MODULE)


class Arranged:
    """Goldens, selections, projects and clones under one prefix, removed afterwards."""

    def __init__(self, api_client, prefix):
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.prefix = prefix
        self.projects = []
        self.contents = []
        self.made = []  # (group, version, namespace, plural, name)

    def ensure_namespace(self, name, labels=None):
        from kubernetes.client.rest import ApiException

        try:
            self.core.create_namespace({"metadata": {"name": name, "labels": labels or {}}})
        except ApiException as exc:
            if exc.status != 409:
                raise

    def project(self, suffix):
        name = "%s-%s" % (self.prefix, suffix)
        self.ensure_namespace(name, {"kube-dc.com/project": self.prefix})
        self.projects.append(name)
        return name

    def pvc(self, namespace, name, mode="Filesystem", source=None, ref=False):
        spec = {
            "accessModes": ["ReadWriteOnce"],
            "volumeMode": mode,
            "resources": {"requests": {"storage": "4Mi"}},
        }
        if source:
            key = "dataSourceRef" if ref else "dataSource"
            spec[key] = {"apiGroup": GROUP, "kind": "VolumeSnapshot", "name": source}
        self.core.create_namespaced_persistent_volume_claim(
            namespace, {"metadata": {"name": name}, "spec": spec}
        )
        self.made.append(("", "v1", namespace, "persistentvolumeclaims", name))
        return name

    def wait_bound(self, namespace, name, timeout=SETTLE_SECONDS):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.core.read_namespaced_persistent_volume_claim(name, namespace).status.phase == "Bound":
                return name
            time.sleep(0.2)
        raise AssertionError("PVC %s/%s did not bind" % (namespace, name))

    def golden(self, suffix, pvc, family, namespace=FS_NS, active=False, date="20260828"):
        mode = "Block" if namespace == BLOCK_NS else "Filesystem"
        name = "golden-%s-%s-%s" % (family, date, suffix)
        labels = {"kube-dc.com/golden-os": family, "kube-dc.com/golden-mode": mode}
        if active:
            labels["kube-dc.com/golden-active"] = "true"
        body = {
            "apiVersion": "%s/%s" % (GROUP, VERSION),
            "kind": "VolumeSnapshot",
            "metadata": {
                "name": name,
                "labels": labels,
                "annotations": {
                    "kube-dc.com/os-family-id": family,
                    "kube-dc.com/os-name": "Debian 12",
                    "kube-dc.com/golden-mode": mode,
                },
            },
            "spec": {"source": {"persistentVolumeClaimName": pvc}},
        }
        self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "volumesnapshots", body)
        self.made.append((GROUP, VERSION, namespace, "volumesnapshots", name))
        return name

    def snapshot(self, namespace, name):
        from kubernetes.client.rest import ApiException

        try:
            return self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, "volumesnapshots", name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def wait_ready(self, namespace, *names, timeout=SETTLE_SECONDS):
        found = {}
        deadline = time.monotonic() + timeout
        for name in names:
            while True:
                obj = self.snapshot(namespace, name) or {}
                if (obj.get("status") or {}).get("readyToUse"):
                    found[name] = obj
                    break
                if time.monotonic() > deadline:
                    raise AssertionError(
                        "snapshot %s/%s not ready: %s" % (namespace, name, obj.get("status"))
                    )
                time.sleep(0.2)
        return found

    def handle(self, namespace, name):
        bound = self.snapshot(namespace, name)["status"]["boundVolumeSnapshotContentName"]
        content = self.custom.get_cluster_custom_object(GROUP, VERSION, "volumesnapshotcontents", bound)
        return (content.get("status") or {}).get("snapshotHandle") or content["spec"]["source"].get(
            "snapshotHandle"
        )

    def selection(self, suffix, family, snapshot, mode="Filesystem", namespace=FS_NS):
        name = "%s-%s" % (self.prefix, suffix)
        body = {
            "apiVersion": "kube-dc.com/v1",
            "kind": "GoldenImageSelection",
            "metadata": {"name": name},
            "spec": {"family": family, "mode": mode, "snapshotName": snapshot, "releaseDigest": DIGEST},
        }
        self.custom.create_namespaced_custom_object(
            "kube-dc.com", "v1", namespace, "goldenimageselections", body
        )
        self.made.append(("kube-dc.com", "v1", namespace, "goldenimageselections", name))
        return name

    def datavolume(self, namespace, name, source_ns, source):
        body = {
            "apiVersion": "cdi.kubevirt.io/v1beta1",
            "kind": "DataVolume",
            "metadata": {"name": name},
            "spec": {
                "source": {"snapshot": {"namespace": source_ns, "name": source}},
                "storage": {"resources": {"requests": {"storage": "4Mi"}}},
            },
        }
        self.custom.create_namespaced_custom_object(
            "cdi.kubevirt.io", "v1beta1", namespace, "datavolumes", body
        )
        self.made.append(("cdi.kubevirt.io", "v1beta1", namespace, "datavolumes", name))

    def seed(self, project, family, golden_name):
        """A project copy in the per-project seeder's layout: a pre-provisioned content and its snapshot."""
        handle = self.handle(FS_NS, golden_name)
        content = "kdc-%s-%s-fs" % (project, family)
        snap = "golden-%s" % family
        self.custom.create_cluster_custom_object(
            GROUP,
            VERSION,
            "volumesnapshotcontents",
            {
                "apiVersion": "%s/%s" % (GROUP, VERSION),
                "kind": "VolumeSnapshotContent",
                "metadata": {"name": content},
                "spec": {
                    "deletionPolicy": "Retain",
                    "driver": "hostpath.lab.goldenimage.io",
                    "source": {"snapshotHandle": handle},
                    "volumeSnapshotRef": {"name": snap, "namespace": project},
                },
            },
        )
        self.contents.append(content)
        restore = self.snapshot(FS_NS, golden_name)["status"]["restoreSize"]
        body = {
            "apiVersion": "%s/%s" % (GROUP, VERSION),
            "kind": "VolumeSnapshot",
            "metadata": {
                "name": snap,
                "labels": {"kube-dc.com/golden-os": family, "kube-dc.com/golden-mode": "Filesystem"},
                "annotations": {
                    "kube-dc.com/clone-min-size": restore,
                    "kube-dc.com/seeded-from": "%s/%s" % (FS_NS, golden_name),
                },
            },
            "spec": {"source": {"volumeSnapshotContentName": content}},
        }
        self.custom.create_namespaced_custom_object(GROUP, VERSION, project, "volumesnapshots", body)

    def cleanup(self):
        from kubernetes.client.rest import ApiException

        for group, version, namespace, plural, name in reversed(self.made):
            try:
                if group:
                    self.custom.delete_namespaced_custom_object(group, version, namespace, plural, name)
                else:
                    self.core.delete_namespaced_persistent_volume_claim(name, namespace)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        for name in self.projects:
            try:
                self.core.delete_namespace(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        for name in self.contents:
            try:
                self.custom.delete_cluster_custom_object(GROUP, VERSION, "volumesnapshotcontents", name)
            except ApiException as exc:
                if exc.status != 404:
                    raise


@pytest.fixture
def arranged(kube_client):
    prefix = "t%s" % uuid.uuid4().hex[:8]
    made = Arranged(kube_client, prefix)
    made.ensure_namespace(FS_NS)
    made.ensure_namespace(BLOCK_NS)
    try:
        yield made
    finally:
        made.cleanup()


def seeder_runs(lab):
    """A real Kube-DC cluster runs its seeder; the lab runs it when its kubedc controller is loaded."""
    if not getattr(lab, "is_lab", False):
        return True
    manager = getattr(lab, "controller_manager", None)
    return any(type(c).__module__.endswith(".kubedc") for c in getattr(manager, "controllers", []))


def wait_seeded(arranged, lab, family, golden_name, projects, timeout=SETTLE_SECONDS):
    """Every project's copy of ``family`` is Ready and bound to the golden's handle."""
    if not seeder_runs(lab):
        for project in projects:
            arranged.seed(project, family, golden_name)
    want = arranged.handle(FS_NS, golden_name)
    deadline = time.monotonic() + timeout
    for project in projects:
        while True:
            obj = arranged.snapshot(project, "golden-%s" % family) or {}
            if (obj.get("status") or {}).get("readyToUse") and arranged.handle(
                project, obj["metadata"]["name"]
            ) == want:
                break
            if time.monotonic() > deadline:
                raise AssertionError("project %s was not seeded with %s: %s" % (project, golden_name, obj))
            time.sleep(0.25)
    return want


def by(items, **match):
    return [i for i in items if all(i.get(k) == v for k, v in match.items())]


def test_families_candidates_and_every_conflict(lab, arranged):
    p = arranged.prefix
    disk = arranged.wait_bound(FS_NS, arranged.pvc(FS_NS, "%s-disk" % p))
    raw = arranged.wait_bound(BLOCK_NS, arranged.pvc(BLOCK_NS, "%s-raw" % p, mode="Block"))
    deb, alma, win, held, broken = ("%s-%s" % (p, f) for f in ("deb", "alma", "win", "held", "broken"))
    old = arranged.golden("0123456789ab", disk, deb, date="20260101")
    new = arranged.golden("f0dea74da9c5", disk, deb)
    block = arranged.golden("f0dea74da9c5", raw, deb, namespace=BLOCK_NS, active=True)
    alma_a = arranged.golden("aaaaaaaaaaaa", disk, alma, active=True)
    alma_b = arranged.golden("bbbbbbbbbbbb", disk, alma, active=True)
    win_a = arranged.golden("aaaaaaaaaaaa", disk, win)
    win_b = arranged.golden("f0dea74da9c5", disk, win, active=True)
    held_a = arranged.golden("aaaaaaaaaaaa", disk, held)
    held_b = arranged.golden("bbbbbbbbbbbb", disk, held)
    broken_a = arranged.golden("aaaaaaaaaaaa", disk, broken, active=True)
    arranged.wait_ready(FS_NS, old, new, alma_a, alma_b, win_a, win_b, held_a, held_b, broken_a)
    arranged.wait_ready(BLOCK_NS, block)
    arranged.selection("win", win, win_a, mode="filesystem")
    arranged.selection("held-1", held, held_a)
    arranged.selection("held-2", held, held_b, mode="FILESYSTEM")
    arranged.selection("broken", broken, "golden-%s-missing" % broken)
    arranged.selection("idle", "%s-none" % p, win_a)

    selector = {"project_selector": "kube-dc.com/project=%s" % p}
    run = run_playbook(
        kube_play(
            task("all", **selector),
            task("deb", family=deb, **selector),
            task("deb block", family=deb, mode="block", **selector),
            task("deb, check mode", check=True, family=deb, **selector),
            task("bad mode", mode="raw"),
        ),
        env=lab.env(),
    )
    assert not run.ok  # the last task fails by design
    assert run.entry("bad mode")["status"] == "failed"
    assert "mode 'raw' is not a golden mode" in run["bad mode"]["msg"]

    everything = run["all"]
    assert everything["changed"] is False
    mine = {f["family"]: f for f in everything["families"] if f["family"].startswith(p)}
    assert sorted(mine) == sorted([alma, broken, deb, held, win])

    # Zero active among two: served by list order, reported as arbitrary and silent.
    fs = mine[deb]["serving"]["Filesystem"]
    assert (fs["snapshot"], fs["path"], fs["conflicts"]) == (old, "label", ["zero_active"])
    assert mine[deb]["serving"]["Block"]["snapshot"] == block
    assert mine[deb]["serving"]["Block"]["path"] == "label"
    candidates = {c["name"]: c for c in mine[deb]["candidates"]}
    assert candidates[new]["date"] == "20260828"
    assert candidates[new]["digest_prefix"] == "f0dea74da9c5"
    assert candidates[new]["ready"] is True
    assert candidates[new]["size"]
    assert candidates[new]["handle"]
    assert (candidates[block]["mode"], candidates[block]["namespace"]) == ("Block", BLOCK_NS)

    conflicts = [c for c in everything["conflicts"] if str(c["family"]).startswith(p)]
    kinds = {(c["type"], c["family"]) for c in conflicts}
    # The goldens served here were made by hand: nothing gated or promoted them on purpose.
    assert kinds == {
        ("zero_active", deb),
        ("two_active", alma),
        ("two_selections", held),
        ("broken_selection", broken),
        ("governs_nothing", "%s-none" % p),
        ("served_unintended", deb),
        ("served_unintended", alma),
        ("served_unintended", win),
    }
    assert "arbitrary and silent" in by(conflicts, type="zero_active")[0]["message"]
    assert mine[alma]["serving"]["Filesystem"]["snapshot"] == alma_a  # two active: the first anyway
    assert mine[held]["serving"]["Filesystem"]["held"] is True
    assert mine[held]["serving"]["Filesystem"]["snapshot"] is None
    assert mine[broken]["serving"]["Filesystem"]["held"] is True
    win_fs = mine[win]["serving"]["Filesystem"]
    assert (win_fs["snapshot"], win_fs["path"], win_fs["selection"]) == (win_a, "selection", "%s-win" % p)
    selected = {c["name"]: c for c in mine[win]["candidates"]}
    assert (selected[win_a]["selected"], selected[win_a]["serving"], selected[win_a]["digest"]) == (
        True,
        True,
        DIGEST,
    )
    assert selected[win_b]["active"] is True and selected[win_b]["serving"] is False
    assert any("arbitrary and silent" in w for w in everything.get("warnings", []))

    only = run["deb"]
    assert [f["family"] for f in only["families"]] == [deb]
    assert [c["type"] for c in only["conflicts"]] == ["zero_active", "served_unintended", "served_unintended"]
    assert {c["name"] for c in only["clones"]} == {old, new, block}
    block_only = run["deb block"]
    assert list(block_only["families"][0]["serving"]) == ["Block"]
    assert [c["name"] for c in block_only["families"][0]["candidates"]] == [block]
    checked = run["deb, check mode"]
    assert checked["changed"] is False
    assert checked["families"] == only["families"]


def test_block_selections_in_golden_images_and_older_ones_in_golden_images_block(lab, arranged):
    """Selections where the guide puts them (golden-images, one per family and mode, Block included) and an
    older one still in golden-images-block: golden_info reads both. For deb the two name different Block
    goldens, so the pair is held and both are named; alma has only the older one, and it serves."""
    p = arranged.prefix
    raw = arranged.wait_bound(BLOCK_NS, arranged.pvc(BLOCK_NS, "%s-raw" % p, mode="Block"))
    deb, alma = "%s-deb" % p, "%s-alma" % p
    old = arranged.golden("0123456789ab", raw, deb, namespace=BLOCK_NS, date="20260101")
    new = arranged.golden("f0dea74da9c5", raw, deb, namespace=BLOCK_NS)
    alma_old = arranged.golden("0123456789ab", raw, alma, namespace=BLOCK_NS, date="20260101")
    arranged.wait_ready(BLOCK_NS, old, new, alma_old)
    guide = arranged.selection("deb-block", deb, new, mode="Block")
    older = arranged.selection("deb-block-old", deb, old, mode="block", namespace=BLOCK_NS)
    alma_sel = arranged.selection("alma-block-old", alma, alma_old, mode="Block", namespace=BLOCK_NS)

    run = run_playbook(
        kube_play(
            task("deb", family=deb, mode="Block", project_selector="kube-dc.com/project=%s" % p),
            task("alma", family=alma, mode="Block", project_selector="kube-dc.com/project=%s" % p),
        ),
        env=lab.env(),
    )
    assert run.ok, run.log

    held = run["deb"]
    serving = held["families"][0]["serving"]["Block"]
    assert (serving["snapshot"], serving["held"], serving["path"], serving["conflicts"]) == (
        None,
        True,
        "selection",
        ["two_selections"],
    )
    (conflict,) = held["conflicts"]
    assert (conflict["type"], conflict["family"], conflict["mode"]) == ("two_selections", deb, "Block")
    assert sorted(conflict["names"]) == sorted([guide, older])
    assert "%s/%s names %s" % (FS_NS, guide, new) in conflict["message"]
    assert "%s/%s names %s" % (BLOCK_NS, older, old) in conflict["message"]
    candidates = {c["name"]: c for c in held["families"][0]["candidates"]}
    assert {n: (c["selected"], c["serving"]) for n, c in candidates.items()} == {
        old: (True, False),
        new: (True, False),
    }

    served = run["alma"]["families"][0]["serving"]["Block"]
    assert (served["snapshot"], served["namespace"], served["path"], served["selection"]) == (
        alma_old,
        BLOCK_NS,
        "selection",
        alma_sel,
    )
    assert served["held"] is False and served["conflicts"] == []
    assert served["handle"] == arranged.handle(BLOCK_NS, alma_old)
    # Served by the active label, but with neither a gate pass nor an override: the report says so.
    assert [c["type"] for c in run["alma"]["conflicts"]] == ["served_unintended"]


def test_projects_resolution_and_clones(lab, arranged):
    p = arranged.prefix
    family = "%s-deb" % p
    disk = arranged.wait_bound(FS_NS, arranged.pvc(FS_NS, "%s-disk" % p))
    old = arranged.golden("0123456789ab", disk, family, date="20260101")
    new = arranged.golden("f0dea74da9c5", disk, family, active=True)
    arranged.wait_ready(FS_NS, old, new)
    projects = [arranged.project("a"), arranged.project("b")]
    handle = wait_seeded(arranged, lab, family, new, projects)

    arranged.wait_bound(projects[0], arranged.pvc(projects[0], "vm-root", source="golden-%s" % family))
    arranged.pvc(projects[1], "vm-ref", source="golden-%s" % family, ref=True)
    arranged.pvc(FS_NS, "%s-check" % p, source=old)
    arranged.datavolume(projects[1], "dv-root", FS_NS, new)

    args = {"family": family, "project_selector": "kube-dc.com/project=%s" % p}
    first = run_playbook(kube_play(task("report", **args)), env=lab.env())
    assert first.ok, first.log
    report = first["report"]
    entries = {e["namespace"]: e for e in report["projects"]}
    assert sorted(entries) == sorted(projects)
    for entry in entries.values():
        assert (entry["family"], entry["mode"], entry["snapshot"]) == (
            family,
            "Filesystem",
            "golden-%s" % family,
        )
        assert entry["handle"] == handle == entry["expected"]
        assert entry["golden"] == entry["serving"] == "%s/%s" % (FS_NS, new)
        assert entry["match"] is True
        assert entry["seeded_from"] == "%s/%s" % (FS_NS, new)
    assert report["summary"]["matching"] == 2

    clones = {c["name"]: c for c in report["clones"]}
    assert clones[new]["count"] == 3
    assert sorted((c["namespace"], c["name"], c["via"]) for c in clones[new]["pvcs"]) == [
        (projects[0], "vm-root", "%s/golden-%s" % (projects[0], family)),
        (projects[1], "vm-ref", "%s/golden-%s" % (projects[1], family)),
    ]
    assert clones[new]["datavolumes"] == [{"namespace": projects[1], "name": "dv-root", "via": "golden"}]
    assert clones[old]["count"] == 1
    assert clones[old]["pvcs"] == [{"namespace": FS_NS, "name": "%s-check" % p, "via": "golden"}]
    counts = {c["name"]: c["clones"] for c in report["families"][0]["candidates"]}
    assert counts == {old: 1, new: 3}

    # Two selections hold the family: the seeder skips it and projects keep what they have.
    # The one naming the served golden goes first, so the seeder never re-points in between.
    arranged.selection("one", family, new)
    arranged.selection("two", family, old)
    second = run_playbook(kube_play(task("report", **args)), env=lab.env())
    assert second.ok, second.log
    report = second["report"]
    serving = report["families"][0]["serving"]["Filesystem"]
    assert (serving["held"], serving["snapshot"], serving["path"]) == (True, None, "selection")
    for entry in report["projects"]:
        assert (entry["held"], entry["match"], entry["golden"]) == (True, False, "%s/%s" % (FS_NS, new))
        assert "held" in entry["reason"]


@pytest.mark.lab_only
def test_read_only_with_a_fixed_number_of_lists(lab, arranged):
    p = arranged.prefix
    family = "%s-deb" % p
    disk = arranged.wait_bound(FS_NS, arranged.pvc(FS_NS, "%s-disk" % p))
    new = arranged.golden("f0dea74da9c5", disk, family, active=True)
    arranged.wait_ready(FS_NS, new)
    projects = [arranged.project("a")]
    wait_seeded(arranged, lab, family, new, projects)
    args = {"project_selector": "kube-dc.com/project=%s" % p}

    def measured(check):
        lab.clear_audit()
        run = run_playbook(kube_play(task("report", check=check, **args)), env=lab.env())
        assert run.ok, run.log
        records = [r for r in lab.audit() if r["resource"]]
        return run["report"], records

    report, records = measured(False)
    assert len(report["projects"]) >= 1
    lists = sorted((r["resource"], r["namespace"]) for r in records if r["verb"] == "list")
    assert lists == [
        ("datasources", ""),
        ("datavolumes", ""),
        ("goldenimageselections", ""),
        ("namespaces", ""),
        ("persistentvolumeclaims", ""),
        ("virtualmachines", ""),
        ("volumesnapshotcontents", ""),
        ("volumesnapshots", ""),
        ("volumesnapshots", FS_NS),
        ("volumesnapshots", BLOCK_NS),
    ]
    assert [r for r in records if r["verb"] != "list"] == []
    assert lab.mutating_requests() == []

    # Three more projects cost no request more; check mode sends the same reads and no write.
    projects += [arranged.project(s) for s in ("b", "c", "d")]
    wait_seeded(arranged, lab, family, new, projects[1:])
    report, records = measured(True)
    assert len({e["namespace"] for e in report["projects"]}) == 4
    assert all(e["match"] for e in report["projects"] if e["family"] == family)
    assert sorted(r["resource"] for r in records if r["verb"] == "list") == [lst[0] for lst in lists]
    assert [r for r in records if r["verb"] != "list"] == []
    assert lab.mutating_requests() == []
