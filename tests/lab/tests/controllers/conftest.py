"""Controller tests on a lab of the module's own (the real API server): a fresh namespace per test.

Tests read and write through the lab's ``ApiStore``, as the controllers do, and reach the controllers and
their context (state directory, allowed commands) directly; the object faults are cleared after each test.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from tests.lab import Lab
from tests.lab.apistore import ApiStore
from tests.lab.controllers import LabContext
from tests.lab.controllers.volumes import HOSTPATH_CSI_DRIVER
from tests.lab.faults import Faults
from tests.lab.objects import ApiError, ResourceType

PROVISIONER = HOSTPATH_CSI_DRIVER  # lab-fs's and lab-wffc's provisioner, the driver of their volumes
SNAP = "snapshot.storage.k8s.io"


@dataclass
class MiniLab:
    store: ApiStore
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

    def events(self, name: str, reason: str | None = None, wait: float = 10.0) -> list[dict]:
        """The events about `name` (of `reason`), in recording order. A reason asked for is waited for up
        to `wait` seconds: controllers record an event after the status write a test waits on."""
        end = time.monotonic() + (wait if reason else 0.0)
        while True:
            items, _ = self.store.list(self.rt("", "events"), self.namespace)
            items += self.store.list(self.rt("", "events"), "default")[0]
            mine = [
                e
                for e in items
                if (e.get("involvedObject") or {}).get("name") == name and reason in (None, e.get("reason"))
            ]
            if mine or time.monotonic() >= end:
                return sorted(mine, key=lambda e: int(e["metadata"]["resourceVersion"]))  # recording order
            time.sleep(0.1)


def until(check: Callable[[], bool], timeout: float = 15, what: str = "condition") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting: {what}")


def install_classes(store: ApiStore) -> None:
    """The classes the lab does not start with: a Retain VolumeSnapshotClass, of lab-snap's driver."""
    vsc_rt = store.resource(SNAP, "v1", "volumesnapshotclasses")
    driver = store.get(vsc_rt, None, "lab-snap")["driver"]
    body = {"metadata": {"name": "lab-snap-retain"}, "driver": driver, "deletionPolicy": "Retain"}
    try:
        store.create(vsc_rt, body)
    except ApiError as exc:
        if exc.code != 409:
            raise


@pytest.fixture(scope="module")
def controller_lab(tmp_path_factory):
    """A lab (the real API server and every controller) for one test module, with the classes controller
    tests use. One per module, not the session's: tests here change cluster-wide defaults (the default
    StorageClass or VolumeSnapshotClass) and stop controllers."""
    lab = Lab(tmp_path_factory.mktemp("controllers")).start()
    try:
        install_classes(lab.store)
        yield lab
    finally:
        lab.stop()


@contextlib.contextmanager
def visit(lab, cls: type[MiniLab] = MiniLab):
    """A `cls` view of `lab` in a fresh namespace; afterwards the namespace is deleted (the real
    namespace controller empties it) and the knobs a test may turn are restored."""
    namespace = "t-" + uuid.uuid4().hex[:8]
    lab.store.create(lab.store.resource("", "v1", "namespaces"), {"metadata": {"name": namespace}})
    context = lab.controller_manager.lab
    saved = set(context.allowed_commands)
    try:
        yield cls(lab.store, context, lab.faults, namespace, lab.controller_manager.controllers)
    finally:
        context.allowed_commands = saved
        lab.faults.reset()
        try:
            lab.store.delete(lab.store.resource("", "v1", "namespaces"), None, namespace)
        except ApiError as exc:
            if exc.code != 404:
                raise


@pytest.fixture
def mini(controller_lab):
    with visit(controller_lab) as view:
        yield view
