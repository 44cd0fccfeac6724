"""An in-process lab for controller tests: a Store, the CRDs, the default classes and the controllers.

No HTTP server: tests read and write through the Store directly, as the controllers do.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from tests.lab.controllers import ControllerManager, LabContext, default_controllers
from tests.lab.crdload import load_crds
from tests.lab.faults import Faults
from tests.lab.store import ApiError, ResourceType, Store

PROVISIONER = "lab.goldenimage.io/hostpath"
SNAP = "snapshot.storage.k8s.io"


@dataclass
class MiniLab:
    store: Store
    context: LabContext
    faults: Faults
    namespace: str
    controllers: list

    def rt(self, group: str, plural: str, version: str = "v1") -> ResourceType:
        return self.store.resource(group, version, plural)

    def create(self, group: str, plural: str, body: dict) -> dict:
        rt = self.rt(group, plural)
        if rt.namespaced:
            body.setdefault("metadata", {}).setdefault("namespace", self.namespace)
        return self.store.create(rt, body)

    def get(self, group: str, plural: str, name: str) -> dict:
        rt = self.rt(group, plural)
        return self.store.get(rt, self.namespace if rt.namespaced else None, name)

    def exists(self, group: str, plural: str, name: str) -> bool:
        rt = self.rt(group, plural)
        return self.store.exists(rt, self.namespace if rt.namespaced else None, name)

    def delete(self, group: str, plural: str, name: str, propagation: str = "Background") -> None:
        rt = self.rt(group, plural)
        self.store.delete(rt, self.namespace if rt.namespaced else None, name, propagation)

    def wait(
        self, group: str, plural: str, name: str, check: Callable[[dict], bool], timeout: float = 15
    ) -> dict:
        """The object once `check` holds; fails with its last state otherwise."""
        end = time.monotonic() + timeout
        last: dict | None = None
        while time.monotonic() < end:
            try:
                last = self.get(group, plural, name)
                if check(last):
                    return last
            except ApiError as exc:
                if exc.code != 404:
                    raise
            time.sleep(0.05)
        raise AssertionError(f"{plural}/{name} did not reach the expected state; last seen: {last}")

    def wait_gone(self, group: str, plural: str, name: str, timeout: float = 15) -> None:
        until(lambda: not self.exists(group, plural, name), timeout, f"{plural}/{name} still exists")

    def events(self, name: str, reason: str | None = None) -> list[dict]:
        items, _ = self.store.list(self.rt("", "events"), self.namespace)
        items += self.store.list(self.rt("", "events"), "default")[0]
        mine = [e for e in items if e["involvedObject"]["name"] == name and reason in (None, e["reason"])]
        return sorted(mine, key=lambda e: int(e["metadata"]["resourceVersion"]))  # recording order


def until(check: Callable[[], bool], timeout: float = 15, what: str = "condition") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting: {what}")


def install_classes(store: Store) -> None:
    crd_rt = store.resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    for crd in load_crds():
        store.create(crd_rt, crd)
    sc_rt = store.resource("storage.k8s.io", "v1", "storageclasses")
    for name, mode, default in (("lab-fs", "Immediate", True), ("lab-wffc", "WaitForFirstConsumer", False)):
        notes = {"storageclass.kubernetes.io/is-default-class": "true"} if default else {}
        body = {"metadata": {"name": name, "annotations": notes}, "provisioner": PROVISIONER}
        store.create(sc_rt, dict(body, reclaimPolicy="Delete", volumeBindingMode=mode))
    vsc_rt = store.resource(SNAP, "v1", "volumesnapshotclasses")
    for name, policy, default in (("lab-snap", "Delete", True), ("lab-snap-retain", "Retain", False)):
        notes = {"snapshot.storage.kubernetes.io/is-default-class": "true"} if default else {}
        body = {
            "metadata": {"name": name, "annotations": notes},
            "driver": PROVISIONER,
            "deletionPolicy": policy,
        }
        store.create(vsc_rt, body)


@pytest.fixture
def mini(tmp_path):
    store = Store()
    install_classes(store)
    namespace = "t-" + uuid.uuid4().hex[:8]
    store.create(store.resource("", "v1", "namespaces"), {"metadata": {"name": namespace}})
    faults = Faults()
    context = LabContext(store=store, state_dir=tmp_path, faults=faults)
    manager = ControllerManager(context, default_controllers())
    manager.start()
    try:
        yield MiniLab(store, context, faults, namespace, manager.controllers)
    finally:
        manager.stop()
        for controller in manager.controllers:
            getattr(controller, "stop", lambda: None)()  # processes of Jobs still running
