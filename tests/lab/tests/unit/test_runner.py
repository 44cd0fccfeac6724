"""The controller runner and discovery keep going through a loaded API server's transient answers.

A 5xx or 429 on a read is not a deletion and a 503 on a group's discovery is not its removal: either,
taken for one, would leave an object unreconciled for good with nothing logged.
"""

from __future__ import annotations

import threading
import time

from tests.lab.apistore import ApiStore
from tests.lab.controllers import Controller, ControllerManager, _Runner
from tests.lab.faults import Faults
from tests.lab.objects import ApiError, ResourceType

RT = ResourceType(
    group="db.goldenimage.io",
    version="v1alpha1",
    kind="DBInstance",
    plural="dbinstances",
    namespaced=True,
    subresources=("status",),
)
KEY = ("db.goldenimage.io", "dbinstances", "ns", "one")


class _Subscription:
    def close(self):
        pass


class _Store:
    """Answers get with the queued errors first, then the object."""

    def __init__(self, errors):
        self.errors = list(errors)
        self.gets = 0

    def subscribe(self, kinds):
        return _Subscription()

    def get(self, rt, namespace, name):
        self.gets += 1
        if self.errors:
            raise self.errors.pop(0)
        return {"metadata": {"namespace": namespace, "name": name}}


class _Counting(Controller):
    name = "counting"
    watches = (("db.goldenimage.io", "dbinstances"),)

    def __init__(self):
        self.seen = 0

    def reconcile(self, rt, obj):
        self.seen += 1
        return None


def _runner(errors):
    controller = _Counting()
    store = _Store(errors)
    return _Runner(controller, store, Faults()), controller, store


def test_a_read_failing_with_5xx_or_429_is_retried():
    for code in (500, 503, 504, 429):
        runner, controller, _ = _runner([ApiError(code, "ServiceUnavailable", "loaded")])
        runner._reconcile(RT, KEY)
        assert controller.seen == 0
        assert KEY in runner.due, code  # not forgotten: it comes back


def test_a_read_answering_404_is_dropped():
    runner, controller, _ = _runner([ApiError(404, "NotFound", "gone")])
    runner._reconcile(RT, KEY)
    assert controller.seen == 0 and KEY not in runner.due


def test_settle_waits_for_the_reconcile_in_progress():
    runner, _, _ = _runner([])
    manager = ControllerManager.__new__(ControllerManager)
    manager._runners = [runner]
    settled = threading.Event()
    with runner.busy:
        waiter = threading.Thread(target=lambda: (manager.settle(), settled.set()))
        waiter.start()
        assert not settled.wait(0.2)  # a reconcile holds the runner
    assert settled.wait(5)
    waiter.join()


def _store_answering(answers):
    store = ApiStore.__new__(ApiStore)
    store._types, store._kinds, store._discovered = {}, {}, 0.0
    store._types_lock = threading.Lock()
    store.type_listeners = []

    def _json(method, path, body=None, **kw):
        answer = answers[path]
        if isinstance(answer, ApiError):
            raise answer
        return answer

    store._json = _json
    return store


def _discovery(db_answer):
    return {
        "/apis": {
            "groups": [
                {
                    "versions": [{"groupVersion": "db.goldenimage.io/v1alpha1", "version": "v1alpha1"}],
                    "name": "db.goldenimage.io",
                }
            ]
        },
        "/api/v1": {"resources": []},
        "/apis/db.goldenimage.io/v1alpha1": db_answer,
    }


RESOURCES = {
    "resources": [
        {"name": "dbinstances", "kind": "DBInstance", "namespaced": True, "verbs": ["get", "watch"]},
        {"name": "dbinstances/status", "kind": "DBInstance", "namespaced": True},
    ]
}


def test_a_group_whose_discovery_fails_with_503_keeps_its_types():
    store = _store_answering(_discovery(RESOURCES))
    store.discover()
    assert ("db.goldenimage.io", "v1alpha1", "dbinstances") in store._types
    store._json = _store_answering(_discovery(ApiError(503, "ServiceUnavailable", "loaded")))._json
    store.discover()
    assert ("db.goldenimage.io", "v1alpha1", "dbinstances") in store._types


def test_a_group_answering_404_is_gone():
    store = _store_answering(_discovery(RESOURCES))
    store.discover()
    store._json = _store_answering(_discovery(ApiError(404, "NotFound", "gone")))._json
    store.discover()
    assert ("db.goldenimage.io", "v1alpha1", "dbinstances") not in store._types


def test_a_stalled_runner_logs_where_it_is(monkeypatch, caplog):
    import tests.lab.controllers as controllers

    monkeypatch.setattr(controllers, "STALL_SECONDS", 0.3)
    release = threading.Event()
    runner, _, _ = _runner([])
    runner.thread = threading.Thread(target=lambda: release.wait(10), name="stalled", daemon=True)
    runner.thread.start()
    runner.beat -= 1.0  # last moved on a second ago
    manager = ControllerManager.__new__(ControllerManager)
    manager._runners, manager._stopping = [runner], threading.Event()
    watchdog = threading.Thread(target=manager._watch_stalls, daemon=True)
    with caplog.at_level("WARNING", logger=controllers.__name__):
        watchdog.start()
        deadline = time.monotonic() + 5
        while not caplog.records and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # the same stall is reported once
        manager._stopping.set()
        release.set()
        watchdog.join(5)
    assert len(caplog.records) == 1, [r.getMessage() for r in caplog.records]
    message = caplog.records[0].getMessage()
    assert message.startswith("controller counting: no progress for ") and "release.wait(10)" in message
