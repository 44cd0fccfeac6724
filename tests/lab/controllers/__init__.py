"""Controller framework of the lab.

A controller watches some resource types through the store, as a real controller watches the API, and
reconciles one object at a time. Each controller runs in its own thread: watch events queue the object,
`reconcile` may ask to be called again later, and every watched object is re-reconciled periodically.
"""

from __future__ import annotations

import heapq
import importlib
import importlib.util
import inspect
import logging
import pathlib
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..faults import Faults
from ..objects import ApiError, ResourceType

if TYPE_CHECKING:
    from ..apistore import ApiStore

log = logging.getLogger(__name__)

# Modules of this package whose Controller subclasses the lab runs by default.
CONTROLLER_MODULES = (
    "storage",
    "jobs",
    "cdi",
    "kubedc",
    "harvester",
    "longhorn",
    "harvester_vm",
    "kubevirt",
    "dbinstance",
    "deployments",
)
CONFLICT_RETRY_SECONDS = 0.05
EVENT_BATCH_SECONDS = 0.05  # longest a runner takes watch events before it reconciles what is due
STALL_SECONDS = 15.0  # a runner this long in one step is stalled: its stack goes to the log


@dataclass
class LabContext:
    store: ApiStore
    state_dir: pathlib.Path
    faults: Faults
    allowed_commands: set[str] = field(default_factory=set)  # extra executables Jobs may run
    # Kube-DC's seeder resync in seconds (None: LAB_KUBEDC_RESYNC_SECONDS, else 15 min).
    kubedc_resync_seconds: float | None = None

    @property
    def volumes_dir(self) -> pathlib.Path:
        return self.state_dir / "volumes"


class Controller:
    name: str = ""
    watches: tuple[tuple[str, str], ...] = ()
    resync_seconds: float = 2.0

    def __init__(self, lab: LabContext):
        self.lab = lab

    def reconcile(self, rt: ResourceType, obj: dict) -> float | None:
        """React to the current object state; return seconds to requeue, or None."""
        return None

    def deleted(self, rt: ResourceType, obj: dict) -> None:
        """Called with the last state of a watched object once it is gone from the store."""


_Key = tuple[str, str, str, str]  # group, plural, namespace, name


class _Runner:
    """The thread driving one controller."""

    def __init__(self, controller: Controller, store: ApiStore, faults: Faults):
        self.controller = controller
        self.store = store
        self.faults = faults
        self.stopping = threading.Event()
        self.sub = store.subscribe(set(controller.watches))
        self.due: dict[_Key, float] = {}
        self.heap: list[tuple[float, _Key]] = []
        self.types: dict[_Key, ResourceType] = {}
        # Held for one reconcile, fault check included: a fault set before taking it holds every later one.
        self.busy = threading.Lock()
        self.beat = time.monotonic()  # when the loop last moved on (a turn or a reconcile ended)
        name = controller.name or type(controller).__name__
        self.thread = threading.Thread(target=self._run, name=f"lab-controller-{name}", daemon=True)

    def schedule(self, rt: ResourceType, obj: dict, delay: float = 0.0) -> None:
        meta = obj.get("metadata", {})
        key = (rt.group, rt.plural, meta.get("namespace", ""), meta.get("name", ""))
        when = time.monotonic() + delay
        if key in self.due and self.due[key] <= when:
            return
        self.due[key] = when
        self.types[key] = rt
        heapq.heappush(self.heap, (when, key))

    def resync(self) -> None:
        wanted = set(self.controller.watches)
        for rt in self.store.types():
            if (rt.group, rt.plural) not in wanted:
                continue
            try:
                entries, _, _, _ = self.store.list_page(rt)
            except ApiError:
                continue
            for entry in entries:
                self.schedule(rt, entry.obj)
            wanted.discard((rt.group, rt.plural))

    def _run(self) -> None:
        next_resync = 0.0
        while not self.stopping.is_set():
            self.beat = time.monotonic()
            try:
                if time.monotonic() >= next_resync:
                    self.resync()
                    next_resync = time.monotonic() + self.controller.resync_seconds
                self._take_events(next_resync)
                self._drain_due()
            except Exception:
                # A dead runner would silently stop its controller for the rest of the lab's life.
                log.exception("controller %s: runner loop failed; going on", self.controller.name)
                time.sleep(0.05)

    def _take_events(self, next_resync: float) -> None:
        """Queue what the watch delivered, waiting at most until the next due reconcile or resync.

        Taking events is bounded in time so that a steady stream of them cannot hold back requeued work.
        """
        now = time.monotonic()
        wait = min(0.2, max(0.0, next_resync - now))
        if self.heap:
            wait = min(wait, max(0.0, self.heap[0][0] - now))
        event = self.sub.get_shared(timeout=max(wait, 0.001))
        until = time.monotonic() + EVENT_BATCH_SECONDS
        while event is not None:
            self._on_event(event)
            if self.stopping.is_set() or time.monotonic() >= until:
                return
            event = self.sub.get_shared(timeout=0.0001)

    def _on_event(self, event) -> None:
        if event.type == "DELETED":
            meta = event.obj.get("metadata", {})
            key = (event.rt.group, event.rt.plural, meta.get("namespace", ""), meta.get("name", ""))
            self.due.pop(key, None)
            try:
                with self.busy:
                    self.controller.deleted(event.rt, _copy(event.obj))
            except ApiError as exc:  # the API server's answer (a namespace terminating, a conflict)
                log.warning("controller %s: handling deletion: %s", self.controller.name, exc)
            except Exception:
                log.exception("controller %s: handling deletion failed", self.controller.name)
            return
        self.schedule(event.rt, event.obj)

    def _drain_due(self) -> None:
        now = time.monotonic()
        while self.heap and self.heap[0][0] <= now and not self.stopping.is_set():
            when, key = heapq.heappop(self.heap)
            if self.due.get(key) != when:
                continue  # superseded by an earlier schedule
            del self.due[key]
            rt = self.types.pop(key)
            self._reconcile(rt, key)
            self.beat = time.monotonic()

    def _reconcile(self, rt: ResourceType, key: _Key) -> None:
        with self.busy:
            self._reconcile_now(rt, key)

    def _reconcile_now(self, rt: ResourceType, key: _Key) -> None:
        _, _, namespace, name = key
        if self.faults.object_fault(rt.kind, namespace, name) == "stuck":
            return
        try:
            obj = self.store.get(rt, namespace or None, name)
        except ApiError as exc:
            if exc.code != 404:  # a loaded API server's 5xx or 429 is not a deletion: come back
                self.schedule(rt, {"metadata": {"namespace": namespace, "name": name}}, 1.0)
            return  # gone; the DELETED event reports it
        try:
            requeue = self.controller.reconcile(rt, obj)
        except ApiError as exc:
            if exc.code == 409:
                self.schedule(rt, obj, CONFLICT_RETRY_SECONDS)
            else:
                log.warning(
                    "controller %s: %s %s/%s: %s", self.controller.name, rt.kind, namespace, name, exc
                )
                self.schedule(rt, obj, 1.0)
            return
        except Exception:
            log.exception(
                "controller %s: reconcile of %s %s/%s failed", self.controller.name, rt.kind, namespace, name
            )
            self.schedule(rt, obj, 1.0)
            return
        if requeue is not None:
            self.schedule(rt, obj, max(0.0, float(requeue)))

    def stop(self) -> None:
        self.stopping.set()
        self.sub.close()


def _copy(obj: dict) -> dict:
    from ..objects import clone

    return clone(obj)


class ControllerManager:
    def __init__(self, lab: LabContext, controllers: list[type[Controller]]):
        self.lab = lab
        self.controllers = [cls(lab) for cls in controllers]
        self._runners: list[_Runner] = []
        self._stopping = threading.Event()

    def start(self) -> None:
        for controller in self.controllers:
            runner = _Runner(controller, self.lab.store, self.lab.faults)
            self._runners.append(runner)
            runner.thread.start()
        threading.Thread(target=self._watch_stalls, name="lab-controller-watchdog", daemon=True).start()

    def _watch_stalls(self) -> None:
        """Log where a runner is when it has not moved on for STALL_SECONDS (once per stall)."""
        reported: dict[int, float] = {}
        while not self._stopping.wait(STALL_SECONDS / 3):
            now = time.monotonic()
            for runner in list(self._runners):
                beat = runner.beat
                if now - beat < STALL_SECONDS or reported.get(id(runner)) == beat:
                    continue
                reported[id(runner)] = beat
                frame = sys._current_frames().get(runner.thread.ident or -1)
                stack = "".join(traceback.format_stack(frame)) if frame is not None else "(not running)\n"
                log.warning(
                    "controller %s: no progress for %.0f s, at:\n%s",
                    runner.controller.name,
                    now - beat,
                    stack,
                )

    def settle(self) -> None:
        """Wait for the reconciles in progress; the ones after this see the faults set before it."""
        for runner in self._runners:
            with runner.busy:
                pass

    def stop(self) -> None:
        self._stopping.set()
        for runner in self._runners:
            runner.stop()
        for runner in self._runners:
            runner.thread.join(timeout=10)
        self._runners = []
        # Controllers that own work outside their loop (processes, threads) release it here.
        for controller in self.controllers:
            stop = getattr(controller, "stop", None)
            if callable(stop):
                stop()


def default_controllers() -> list[type[Controller]]:
    """Controller classes of the modules in CONTROLLER_MODULES that are present, in module order."""
    found: list[type[Controller]] = []
    for module_name in CONTROLLER_MODULES:
        qualified = f"{__name__}.{module_name}"
        if importlib.util.find_spec(qualified) is None:
            continue
        module = importlib.import_module(qualified)
        explicit = getattr(module, "CONTROLLERS", None)
        if explicit is not None:
            found.extend(explicit)
            continue
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, Controller) and cls is not Controller and cls.__module__ == module.__name__:
                found.append(cls)
    return found


__all__ = ["CONTROLLER_MODULES", "Controller", "ControllerManager", "LabContext", "default_controllers"]
