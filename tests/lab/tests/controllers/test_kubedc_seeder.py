"""The Kube-DC per-project seeder of the lab: both resolution paths, their flaws, re-pointing, stamping."""

from __future__ import annotations

import pytest

from tests.lab import Lab
from tests.lab.apistore import ApiStore
from tests.lab.controllers import ControllerManager, kubedc, storage
from tests.lab.controllers.kubedc import CLONE_MIN_SIZE, SEEDED_FROM
from tests.lab.objects import ApiError

from .conftest import SNAP, install_classes, until

FS_NS, BLOCK_NS = "golden-images", "golden-images-block"
KDC = "kube-dc.com"
PROJECTS = ("acme", "globex")


class Seeded:
    """A lab of its own (the seeder reads every project of the cluster) with golden namespaces, two
    projects, the storage controllers and the seeder."""

    def __init__(self, store: ApiStore, manager: ControllerManager):
        self.store, self.manager = store, manager

    def rt(self, group: str, plural: str):
        return self.store.resource(group, "v1", plural)

    def golden(
        self, name: str, family: str = "debian", mode: str = "Filesystem", active: bool = False, **labels
    ):
        namespace = BLOCK_NS if mode == "Block" else FS_NS
        meta_labels = {"kube-dc.com/golden-os": family, "kube-dc.com/golden-mode": mode, **labels}
        if active:
            meta_labels["kube-dc.com/golden-active"] = "true"
        body = {
            "metadata": {"name": name, "namespace": namespace, "labels": meta_labels},
            "spec": {"source": {"persistentVolumeClaimName": f"src-{mode.lower()}"}},
        }
        self.store.create(self.rt(SNAP, "volumesnapshots"), body)
        until(lambda: self.ready(namespace, name), 20, f"golden {name} ready")
        return self.store.get(self.rt(SNAP, "volumesnapshots"), namespace, name)

    def ready(self, namespace: str, name: str) -> bool:
        vs = self.store.get(self.rt(SNAP, "volumesnapshots"), namespace, name)
        return bool((vs.get("status") or {}).get("readyToUse"))

    def handle(self, namespace: str, name: str) -> str:
        vs = self.store.get(self.rt(SNAP, "volumesnapshots"), namespace, name)
        content = self.store.get(
            self.rt(SNAP, "volumesnapshotcontents"), None, vs["status"]["boundVolumeSnapshotContentName"]
        )
        return content["status"]["snapshotHandle"]

    def resolved(self, project: str, snapshot: str) -> str | None:
        """The handle a project's copy resolves to, read as verification reads it."""
        try:
            vs = self.store.get(self.rt(SNAP, "volumesnapshots"), project, snapshot)
            content_name = (vs.get("status") or {}).get("boundVolumeSnapshotContentName")
            if not content_name:
                return None
            content = self.store.get(self.rt(SNAP, "volumesnapshotcontents"), None, content_name)
        except ApiError:
            return None
        return content["spec"]["source"]["snapshotHandle"]

    def all_resolve(self, snapshot: str, handle: str, timeout: float = 10) -> None:
        until(
            lambda: all(self.resolved(p, snapshot) == handle for p in PROJECTS),
            timeout,
            f"projects on {handle}",
        )

    def label(self, name: str, active: bool) -> None:
        vs = self.store.get(self.rt(SNAP, "volumesnapshots"), FS_NS, name)
        labels = vs["metadata"].setdefault("labels", {})
        if active:
            labels["kube-dc.com/golden-active"] = "true"
        else:
            labels.pop("kube-dc.com/golden-active", None)
        self.store.update(self.rt(SNAP, "volumesnapshots"), vs)

    def select(self, name: str, family: str, mode: str, snapshot: str) -> None:
        rt = self.rt(KDC, "goldenimageselections")
        body = {
            "metadata": {"name": name, "namespace": FS_NS},
            "spec": {"family": family, "mode": mode, "snapshotName": snapshot},
        }
        if self.store.exists(rt, FS_NS, name):
            current = self.store.get(rt, FS_NS, name)
            current["spec"] = body["spec"]
            self.store.update(rt, current)
        else:
            self.store.create(rt, body)

    def selection(self, name: str) -> dict:
        return self.store.get(self.rt(KDC, "goldenimageselections"), FS_NS, name)

    def events(self, reason: str) -> list[dict]:
        items = []
        for namespace in (FS_NS, BLOCK_NS):
            items += self.store.list(self.rt("", "events"), namespace)[0]
        return [e for e in items if e["reason"] == reason]


@pytest.fixture
def seeded(tmp_path):
    # Resyncs every 0.2 s (the platform's, and the lab's default, is 15 minutes): the tests below wait on
    # passes no watch event starts (a project's copy deleted by hand, seeded again).
    controllers = [*storage.CONTROLLERS, *kubedc.CONTROLLERS]
    lab = Lab(tmp_path, with_s3=False, controllers=controllers, kubedc_resync=0.2).start()
    store = lab.store
    install_classes(store)
    ns_rt = store.resource("", "v1", "namespaces")
    for name in (FS_NS, BLOCK_NS):  # the lab starts with them, enforcing PodSecurity baseline
        assert store.exists(ns_rt, None, name)
    for name in PROJECTS:
        store.create(ns_rt, {"metadata": {"name": name, "labels": {"kube-dc.com/project": name}}})
    store.create(ns_rt, {"metadata": {"name": "not-a-project"}})
    pvc_rt = store.resource("", "v1", "persistentvolumeclaims")
    for namespace, mode in ((FS_NS, "Filesystem"), (BLOCK_NS, "Block")):
        body = {
            "metadata": {"name": f"src-{mode.lower()}", "namespace": namespace},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "volumeMode": mode,
                "resources": {"requests": {"storage": "2Mi"}},
            },
        }
        store.create(pvc_rt, body)
    try:
        yield Seeded(store, lab.controller_manager)
    finally:
        lab.stop()


def test_label_path_zero_then_two_active_then_promotion(seeded):
    first = seeded.golden("golden-debian-2025-01-01-aaaaaaaaaaaa")
    seeded.golden("golden-debian-2025-02-01-bbbbbbbbbbbb")
    old, new = (
        seeded.handle(FS_NS, n)
        for n in ("golden-debian-2025-01-01-aaaaaaaaaaaa", "golden-debian-2025-02-01-bbbbbbbbbbbb")
    )
    # zero active: the first in list order, and nobody is told
    seeded.all_resolve("golden-debian", old)
    assert not seeded.events("ActiveGoldenConflict")
    vs = seeded.store.get(seeded.rt(SNAP, "volumesnapshots"), "acme", "golden-debian")
    notes, labels = vs["metadata"]["annotations"], vs["metadata"]["labels"]
    assert notes[CLONE_MIN_SIZE] == first["status"]["restoreSize"] == "2Mi"
    assert notes[SEEDED_FROM] == f"{FS_NS}/golden-debian-2025-01-01-aaaaaaaaaaaa"
    assert labels == {"kube-dc.com/golden-os": "debian", "kube-dc.com/golden-mode": "Filesystem"}
    content = seeded.store.get(seeded.rt(SNAP, "volumesnapshotcontents"), None, "kdc-acme-debian-fs")
    assert content["spec"]["deletionPolicy"] == "Retain"
    assert content["spec"]["volumeSnapshotRef"]["name"] == "golden-debian"
    assert not seeded.store.exists(seeded.rt(SNAP, "volumesnapshots"), "not-a-project", "golden-debian")

    # two active: a conflict Event, and seeding proceeds with the first of them anyway
    seeded.label("golden-debian-2025-02-01-bbbbbbbbbbbb", True)
    seeded.all_resolve("golden-debian", new)  # the active one sorts first
    seeded.label("golden-debian-2025-01-01-aaaaaaaaaaaa", True)
    until(lambda: seeded.events("ActiveGoldenConflict"), 15, "a conflict Event")
    event = seeded.events("ActiveGoldenConflict")[0]
    assert (
        event["type"] == "Warning"
        and "seeding from golden-debian-2025-01-01-aaaaaaaaaaaa" in event["message"]
    )
    seeded.all_resolve("golden-debian", old)  # list order among the active: the older one

    # promotion done right: the projects are re-pointed (copy and content replaced)
    seeded.label("golden-debian-2025-01-01-aaaaaaaaaaaa", False)
    seeded.all_resolve("golden-debian", new)
    vs = seeded.store.get(seeded.rt(SNAP, "volumesnapshots"), "globex", "golden-debian")
    assert vs["metadata"]["annotations"][SEEDED_FROM] == f"{FS_NS}/golden-debian-2025-02-01-bbbbbbbbbbbb"


def test_selection_path_seeds_the_selected_handle_and_fails_closed(seeded):
    seeded.golden("golden-debian-a", active=True)
    seeded.golden("golden-debian-b")
    seeded.golden("golden-debian-blk", mode="Block")
    a, b = seeded.handle(FS_NS, "golden-debian-a"), seeded.handle(FS_NS, "golden-debian-b")
    seeded.all_resolve("golden-debian", a)
    seeded.all_resolve("golden-debian-block", seeded.handle(BLOCK_NS, "golden-debian-blk"))
    assert seeded.store.exists(seeded.rt(SNAP, "volumesnapshotcontents"), None, "kdc-acme-debian-block")

    # the selection wins over the label, mode compared case-insensitively
    seeded.select("debian-filesystem", "debian", "filesystem", "golden-debian-b")
    seeded.all_resolve("golden-debian", b)
    until(
        lambda: (seeded.selection("debian-filesystem").get("status") or {}).get("ready") is True, 5, "ready"
    )
    assert seeded.selection("debian-filesystem")["status"]["snapshotHandle"] == b

    # a broken selection skips the family: projects keep the copy they have, nothing falls back
    seeded.select("debian-filesystem", "debian", "Filesystem", "golden-debian-missing")
    until(lambda: seeded.selection("debian-filesystem")["status"]["ready"] is False, 15, "not ready")
    assert "not found" in seeded.selection("debian-filesystem")["status"]["message"]
    seeded.label("golden-debian-a", False)
    seeded.golden("golden-debian-c", active=True)  # a label change would re-point on the label path
    seeded.manager.controllers[-1].sync()
    assert all(seeded.resolved(p, "golden-debian") == b for p in PROJECTS)

    # two selections naming different snapshots: a conflict on the selections, the family held (the
    # first selection alone may serve golden-debian-a before the second one exists; nothing moves after)
    seeded.select("debian-filesystem", "debian", "Filesystem", "golden-debian-a")
    seeded.select("debian-fs-other", "debian", "FILESYSTEM", "golden-debian-c")
    until(
        lambda: len({e["involvedObject"]["name"] for e in seeded.events("GoldenSelectionConflict")}) == 2,
        15,
        "conflict",
    )
    for name in ("debian-filesystem", "debian-fs-other"):
        status = seeded.selection(name)["status"]
        assert status["ready"] is False and "conflicting" in status["message"]
    held = {p: seeded.resolved(p, "golden-debian") for p in PROJECTS}
    assert set(held.values()) <= {a, b}, held
    seeded.manager.controllers[-1].sync()
    assert {p: seeded.resolved(p, "golden-debian") for p in PROJECTS} == held
