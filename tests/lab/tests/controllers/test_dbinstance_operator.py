"""The lab's DBInstance operator through the API: provisioning, drift conditions, repave steps, the
pre-flight refusals and the guard, the repave faults, and the history tests read from the controller."""

from __future__ import annotations

import json
import re
import time

import pytest
import yaml

from tests.lab.controllers.dbinstance import (
    CATALOG_ENV,
    INITIAL_REVISION,
    STEP_ENV,
    STEPS,
    TODAY_ENV,
    TRIGGER_ENV,
    DBInstanceOperator,
)

from .conftest import until

pytestmark = pytest.mark.lab_only  # reads the lab's controller and fault knobs

VERSION = "v1alpha1"
PLURAL = "dbinstances"
TRIGGER = "repave-trigger"
OLD, TIP = "v20260301", "v20260615"


def catalog_doc(tip: str = TIP, tip_majors=("16", "17"), extra_streams: dict | None = None) -> dict:
    streams = {"22.04": {"tip": tip, "validated": True}}
    streams.update(extra_streams or {})
    return {
        "version": 1,
        "default_stream": "22.04",
        "streams": streams,
        "images": {
            OLD: {"os_version": "22.04", "pg_versions": ["15", "16", "17"]},
            TIP: {"os_version": "22.04", "pg_versions": list(tip_majors)},
            "v20260901": {"os_version": "22.04", "pg_versions": ["15", "16", "17"]},
            "v20261201-2404": {"os_version": "24.04", "pg_versions": ["16", "17"]},
        },
    }


class Api:
    """DBInstances and their catalog in one namespace, through the kubernetes client."""

    def __init__(self, lab, kube_client, namespace: str):
        from kubernetes import client

        self.lab = lab
        self.namespace = namespace
        self.group = getattr(lab, "dbinstance_group", None) or "db.goldenimage.io"
        self.version = getattr(lab, "dbinstance_version", None) or VERSION
        self.custom = client.CustomObjectsApi(kube_client)
        self.core = client.CoreV1Api(kube_client)
        self.operator = next(
            c for c in lab.controller_manager.controllers if isinstance(c, DBInstanceOperator)
        )

    def put_catalog(self, doc: dict) -> None:
        from kubernetes.client.rest import ApiException

        body = {"metadata": {"name": "catalog"}, "data": {"catalog.yaml": yaml.safe_dump(doc)}}
        try:
            self.core.replace_namespaced_config_map("catalog", self.namespace, body)
        except ApiException as exc:
            if exc.status != 404:
                raise
            self.core.create_namespaced_config_map(self.namespace, body)

    def create(
        self, name: str, engine: str | None = "16", os_version: str = "", revision: str = "", notes=None
    ):
        """A DBInstance; ``engine`` None leaves engineVersion out of the spec (the CRD keeps it optional)."""
        annotations = dict(notes or {})
        if revision:
            annotations[INITIAL_REVISION] = revision
        spec = {"engineVersion": engine} if engine is not None else {}
        if os_version:
            spec["osVersion"] = os_version
        body = {
            "apiVersion": f"{self.group}/{self.version}",
            "kind": "DBInstance",
            "metadata": {"name": name, "annotations": annotations},
            "spec": spec,
        }
        return self.custom.create_namespaced_custom_object(
            self.group, self.version, self.namespace, PLURAL, body
        )

    def get(self, name: str) -> dict:
        return self.custom.get_namespaced_custom_object(
            self.group, self.version, self.namespace, PLURAL, name
        )

    def annotate(self, name: str, value: str | None = "now", key: str = TRIGGER) -> None:
        patch = {"metadata": {"annotations": {key: value}}}
        self.custom.patch_namespaced_custom_object(
            self.group, self.version, self.namespace, PLURAL, name, patch
        )

    def wait(self, name: str, check, timeout: float = 10, what: str = "") -> dict:
        end = time.monotonic() + timeout
        last = None
        while time.monotonic() < end:
            last = self.get(name)
            if check(last):
                return last
            time.sleep(0.03)
        raise AssertionError(f"{name}: {what or 'expected state'} not reached; last: {last}")

    def events(self, name: str) -> list:
        items = self.core.list_namespaced_event(self.namespace).items
        mine = [e for e in items if e.involved_object.name == name]
        return sorted(mine, key=lambda e: e.event_time)

    def raw_events(self, name: str) -> list[dict]:
        answer = self.core.list_namespaced_event(self.namespace, _preload_content=False)
        items = json.loads(answer.data)["items"]
        return [e for e in items if e["involvedObject"]["name"] == name]


def phase(obj: dict) -> str:
    return (obj.get("status") or {}).get("phase") or ""


def cond(obj: dict, ctype: str) -> str | None:
    for item in (obj.get("status") or {}).get("conditions") or ():
        if item["type"] == ctype:
            return item["status"]
    return None


def applied(obj: dict) -> str:
    return ((obj.get("status") or {}).get("appliedSpec") or {}).get("imageRevision") or ""


def annotation(obj: dict, key: str = TRIGGER) -> str | None:
    return (obj["metadata"].get("annotations") or {}).get(key)


def available_on(revision: str):
    return lambda o: phase(o) == "Available" and applied(o) == revision


def repaved(revision: str, key: str = TRIGGER):
    return lambda o: available_on(revision)(o) and annotation(o, key) is None


@pytest.fixture
def db(lab, kube_client, kube_namespace, monkeypatch):
    monkeypatch.setenv(CATALOG_ENV, f"{kube_namespace}/catalog")
    monkeypatch.setenv(STEP_ENV, "0.05")
    monkeypatch.setenv(TODAY_ENV, "2026-07-01")
    monkeypatch.delenv(TRIGGER_ENV, raising=False)
    api = Api(lab, kube_client, kube_namespace)
    api.put_catalog(catalog_doc())
    yield api
    lab.faults.reset()


# --------------------------------------------------------------------------------- provisioning


@pytest.mark.parametrize("engine", [None, ""], ids=["absent", "empty"])
def test_new_instance_gets_the_newest_supported_major_of_the_default_tip(db, engine):
    created = db.create("fresh", engine=engine)
    assert created["spec"].get("engineVersion", "absent") == ("absent" if engine is None else "")
    obj = db.wait("fresh", lambda o: phase(o) == "Available", what="Available")
    assert obj["status"]["appliedSpec"] == {"imageRevision": TIP, "osVersion": "22.04", "engineVersion": "17"}
    assert obj["spec"]["engineVersion"] == "17"  # defaulted as the defaulting webhook would
    assert (cond(obj, "Ready"), cond(obj, "OSUpdateAvailable"), cond(obj, "PGVersionEOL")) == (
        "True",
        "False",
        "False",
    )


def test_status_preset_through_the_subresource_is_honoured(db):
    db.create("moved", engine="16")
    status = {"appliedSpec": {"imageRevision": OLD, "engineVersion": "16"}}
    # A merge patch: a PUT needs the kind and the resourceVersion on the real API server (400, 422).
    db.custom.patch_namespaced_custom_object_status(
        db.group, db.version, db.namespace, PLURAL, "moved", {"status": status}
    )
    obj = db.wait("moved", available_on(OLD), what="Available on the pre-set revision")
    assert obj["status"]["appliedSpec"]["osVersion"] == "22.04"
    assert cond(obj, "OSUpdateAvailable") == "True"


def test_new_instance_passes_through_provisioning(db, monkeypatch):
    monkeypatch.setenv(STEP_ENV, "0.6")
    db.create("slow", engine="16")
    obj = db.wait("slow", lambda o: phase(o) == "Provisioning", what="Provisioning")
    assert cond(obj, "Ready") == "False"
    db.wait("slow", available_on(TIP), what="Available on the tip")


@pytest.mark.parametrize(
    "engine, today, words",
    [
        ("15", "2026-07-01", "not in revision"),
        ("16", "2028-11-10", "end of life"),
        ("19", "2026-07-01", "not in"),
    ],
)
def test_unknown_or_eol_major_fails_unsupported(db, monkeypatch, engine, today, words):
    monkeypatch.setenv(TODAY_ENV, today)
    db.create("bad", engine=engine)
    obj = db.wait("bad", lambda o: phase(o) == "Failed", what="Failed")
    assert obj["status"]["reason"] == "UnsupportedEngineVersion"
    assert words in obj["status"]["message"]
    assert "appliedSpec" not in obj["status"]


# ------------------------------------------------------------------------------------- drift


def test_drift_conditions_are_exclusive_and_follow_the_catalog(db):
    db.create("patchable", engine="16", revision=OLD)
    db.create("stranded", engine="15", revision=OLD)
    db.create("current", engine="16", revision=TIP)
    both = ("OSUpdateAvailable", "PGVersionEOL")

    def verdict(name: str, wanted: tuple[str, str]) -> None:
        db.wait(name, lambda o: tuple(cond(o, c) for c in both) == wanted, what=f"{both} == {wanted}")

    verdict("patchable", ("True", "False"))
    verdict("stranded", ("False", "True"))  # the tip dropped PG 15: a repave is never offered
    verdict("current", ("False", "False"))
    assert phase(db.get("stranded")) == "Available" and cond(db.get("stranded"), "Ready") == "True"

    # A new tip carrying 15 again: the catalog change is seen without waiting for a resync.
    db.put_catalog(catalog_doc(tip="v20260901"))
    for name in ("patchable", "stranded", "current"):
        verdict(name, ("True", "False"))


def test_pg_eol_date_turns_an_update_into_pg_version_eol(db, monkeypatch):
    db.create("ageing", engine="16", revision=OLD)
    db.wait("ageing", lambda o: cond(o, "OSUpdateAvailable") == "True")
    monkeypatch.setenv(TODAY_ENV, "2028-11-10")  # the day after PG 16's final minor
    obj = db.wait("ageing", lambda o: cond(o, "PGVersionEOL") == "True", what="PGVersionEOL")
    assert cond(obj, "OSUpdateAvailable") == "False"


# ------------------------------------------------------------------------------------ repave


def test_repave_walks_the_four_steps_and_clears_the_trigger(db):
    db.create("web", engine="16", revision=OLD)
    db.wait("web", available_on(OLD))
    db.annotate("web")
    seen = set()

    def watch(o: dict) -> bool:
        step = ((o.get("status") or {}).get("repave") or {}).get("step")
        if step:
            seen.add(step)
            assert o["status"]["repave"]["targetRevision"] == TIP
            assert phase(o) == "Repaving"
        return repaved(TIP)(o)

    obj = db.wait("web", watch, what="repaved to the tip")
    assert seen <= set(STEPS)  # polling sees some steps; the Events below prove all four in order
    assert "repave" not in obj["status"]
    assert obj["status"]["appliedSpec"]["engineVersion"] == "16"
    assert (cond(obj, "OSUpdateAvailable"), cond(obj, "Ready")) == ("False", "True")

    # The operator records its Event after the status write, as a real one does: wait for it.
    until(lambda: db.events("web")[-1].reason == "RepaveCompleted", what="the RepaveCompleted event")
    events = db.events("web")
    reasons = [e.reason for e in events]
    assert reasons[0] == "RepaveStarted" and reasons[-1] == "RepaveCompleted"
    steps = [e.message.split(" ")[0] for e in events if e.reason == "RepaveStep"]
    assert steps == list(STEPS)
    stamps = [e["eventTime"] for e in db.raw_events("web")]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", t) for t in stamps), stamps
    assert len(set(stamps)) == len(stamps)  # microseconds keep them apart
    assert db.operator.repaves(db.namespace, "web") == 1


def test_a_running_instance_without_engine_version_repaves_with_the_default_major(db):
    """Adopted on an old revision with no engineVersion: it gets the newest supported major of the
    default stream's tip, written back as a defaulting webhook would, and a repave keeps that major."""
    created = db.create("legacy", engine=None, revision=OLD)
    assert "engineVersion" not in created["spec"]
    obj = db.wait("legacy", available_on(OLD), what="Available on the old revision")
    assert obj["spec"]["engineVersion"] == "17" and obj["status"]["appliedSpec"]["engineVersion"] == "17"
    assert cond(obj, "OSUpdateAvailable") == "True"
    db.annotate("legacy")
    obj = db.wait("legacy", repaved(TIP), what="repaved to the tip")
    assert obj["status"]["appliedSpec"] == {"imageRevision": TIP, "osVersion": "22.04", "engineVersion": "17"}
    assert db.operator.repaves(db.namespace, "legacy") == 1


def test_trigger_key_is_configurable(db, monkeypatch):
    monkeypatch.setenv(TRIGGER_ENV, "example.com/repave")
    db.create("custom", engine="17", revision=OLD)
    db.wait("custom", available_on(OLD))
    db.annotate("custom", key=TRIGGER)  # the default key means nothing now
    time.sleep(0.3)
    assert applied(db.get("custom")) == OLD
    db.annotate("custom", key="example.com/repave")
    db.wait("custom", repaved(TIP, key="example.com/repave"), what="repaved through the custom key")
    assert annotation(db.get("custom")) == "now"  # not ours to clear


def test_invalid_stream_refusal_clears_the_trigger_and_keeps_its_reason(db):
    db.put_catalog(catalog_doc(extra_streams={"24.04": {"tip": "v20261201-2404", "validated": False}}))
    db.create("early", engine="16", os_version="24.04", revision=OLD)
    db.wait("early", available_on(OLD))
    db.annotate("early")
    obj = db.wait("early", lambda o: phase(o) == "Failed" and annotation(o) is None, what="refused")
    assert obj["status"]["reason"] == "InvalidOSStream"
    assert "24.04 is not validated" in obj["status"]["message"]
    time.sleep(0.3)  # later reconciles must not turn it into the generic guard message
    again = db.get("early")
    assert (again["status"]["reason"], again["status"]["message"]) == (
        "InvalidOSStream",
        obj["status"]["message"],
    )
    assert [e.reason for e in db.events("early")] == ["RepaveBlocked"]


def test_pg_eol_refusal_clears_the_trigger(db):
    db.create("legacy", engine="15", revision=OLD)
    db.wait("legacy", lambda o: cond(o, "PGVersionEOL") == "True")
    db.annotate("legacy")
    obj = db.wait("legacy", lambda o: phase(o) == "Failed" and annotation(o) is None, what="refused")
    assert obj["status"]["reason"] == "RepaveBlockedPGVersionEOL"
    assert "pg_dump" in obj["status"]["message"]
    assert applied(obj) == OLD
    history = [h[3] for h in db.operator.snapshot(db.namespace) if h[2] == "legacy"]
    assert history == ["RepaveBlocked:RepaveBlockedPGVersionEOL"]


def test_guard_keeps_the_trigger_when_not_available(db):
    db.create("broken", engine="14")
    db.wait("broken", lambda o: phase(o) == "Failed")
    db.annotate("broken")
    obj = db.wait(
        "broken",
        lambda o: (o["status"].get("message") or "").startswith("repave-trigger requires"),
        what="guard message",
    )
    assert obj["status"]["message"] == "repave-trigger requires phase Available (is Failed)"
    assert obj["status"]["reason"] == "UnsupportedEngineVersion"
    assert annotation(obj) == "now"


def test_guard_on_a_refused_instance_keeps_the_refusal_reason(db):
    db.create("legacy", engine="15", revision=OLD)
    db.wait("legacy", available_on(OLD))
    db.annotate("legacy")
    db.wait("legacy", lambda o: phase(o) == "Failed" and annotation(o) is None)
    db.annotate("legacy")  # asked again: the guard answers, the refusal reason stays
    obj = db.wait("legacy", lambda o: "requires phase Available" in (o["status"].get("message") or ""))
    assert obj["status"]["reason"] == "RepaveBlockedPGVersionEOL"
    assert annotation(obj) == "now"


def test_instance_already_on_the_tip_is_not_repaved(db):
    db.create("tipped", engine="16", revision=TIP)
    db.wait("tipped", available_on(TIP))
    db.annotate("tipped")
    db.wait("tipped", lambda o: annotation(o) is None, what="trigger cleared")
    assert db.operator.repaves(db.namespace, "tipped") == 0


# ------------------------------------------------------------------------------------- faults


def fault(db, name: str, value: str | None) -> None:
    db.lab.faults.set_object(f"DBInstance/{db.namespace}/{name}", value)


def test_stop_hangs_until_the_fault_is_lifted(db):
    db.create("hang", engine="16", revision=OLD)
    db.wait("hang", available_on(OLD))
    fault(db, "hang", "stop-hangs")
    db.annotate("hang")
    db.wait("hang", lambda o: (o["status"].get("repave") or {}).get("step") == "StoppingVM")
    time.sleep(0.5)  # ten step lengths
    obj = db.get("hang")
    assert (phase(obj), obj["status"]["repave"]["step"]) == ("Repaving", "StoppingVM")
    assert annotation(obj) == "now"
    fault(db, "hang", None)
    db.wait("hang", repaved(TIP), what="repaved once the stop completes")


def test_swap_conflict_fails_keeps_the_trigger_and_retries(db):
    db.create("swap", engine="16", revision=OLD)
    db.wait("swap", available_on(OLD))
    fault(db, "swap", "swap-conflict")
    db.annotate("swap")
    obj = db.wait("swap", lambda o: phase(o) == "Failed", what="SwapFailed")
    assert obj["status"]["reason"] == "SwapFailed"
    assert annotation(obj) == "now"
    until(
        lambda: sum(h[3] == "RepaveStarted" for h in db.operator.snapshot(db.namespace)) >= 2,
        5,
        "a retry from the start",
    )
    fault(db, "swap", None)
    obj = db.wait("swap", repaved(TIP), what="repaved after the conflict cleared")
    assert "reason" not in obj["status"]
    assert db.operator.repaves(db.namespace, "swap") == 1
    until(lambda: "RepaveCompleted" in {e.reason for e in db.events("swap")}, what="RepaveCompleted")
    reasons = {e.reason for e in db.events("swap")}
    assert {"RepaveStarted", "RepaveFailed"} <= reasons


def test_no_agent_waits_in_starting_vm(db):
    db.create("mute", engine="16", revision=OLD)
    db.wait("mute", available_on(OLD))
    fault(db, "mute", "no-agent")
    db.annotate("mute")
    obj = db.wait("mute", lambda o: (o["status"].get("repave") or {}).get("step") == "StartingVM")
    obj = db.wait("mute", lambda o: o["status"].get("message") == "waiting for the guest agent")
    time.sleep(0.4)
    obj = db.get("mute")
    assert (phase(obj), obj["status"]["repave"]["step"], annotation(obj)) == ("Repaving", "StartingVM", "now")
    fault(db, "mute", None)
    db.wait("mute", repaved(TIP))


# ------------------------------------------------------------------------------------ history


def test_history_counts_repaves_and_concurrency(db):
    for name in ("a", "b", "c", "d", "e"):
        db.create(name, engine="16", revision=OLD)
    for name in ("a", "b", "c", "d", "e"):
        db.wait(name, available_on(OLD))
    for name in ("a", "b"):  # one after the other
        db.annotate(name)
        db.wait(name, repaved(TIP))
    assert db.operator.repaving_at_once(db.namespace) == 1
    for name in ("c", "d", "e"):  # together
        db.annotate(name)
    for name in ("c", "d", "e"):
        db.wait(name, repaved(TIP))
    assert db.operator.repaving_at_once(db.namespace) == 3
    assert [db.operator.repaves(db.namespace, n) for n in "abcde"] == [1, 1, 1, 1, 1]
    times = [h[0] for h in db.operator.snapshot(db.namespace)]
    assert times == sorted(times)


def test_instance_with_trigger_at_creation_repaves_once_available(db):
    db.create("eager", engine="17", revision=OLD, notes={TRIGGER: "now"})
    db.wait("eager", repaved(TIP))
    assert db.operator.repaves(db.namespace, "eager") == 1
