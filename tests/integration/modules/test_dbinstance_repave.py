"""dbinstance_repave against the lab's DBInstance operator: the drift report, trigger and wait, the
pre-flight refusals, a fleet under max_unavailable, an interrupted roll-out resumed, the maintenance
window with the opt-in types, and a repave that hangs.

What happened is read from the operator's own history (every RepaveStarted and RepaveCompleted with its
monotonic time), not from the module's result, so the module cannot grade its own homework.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import os
import pathlib
import re
import signal
import subprocess
import tempfile
import threading
import time

import pytest
import yaml

from tests.integration.support import SETTLE_SECONDS
from tests.integration.support.runner import (
    ROOT,
    module_task,
    play,
    playbook_command,
    run_playbook,
    write_playbook,
)
from tests.lab.controllers.dbinstance import (
    CATALOG_ENV,
    INITIAL_REVISION,
    STEP_ENV,
    TODAY_ENV,
    TRIGGER_ENV,
    DBInstanceOperator,
)

pytestmark = pytest.mark.lab_only  # reads the operator's history and sets faults

MODULE = "goldenimage.pipeline.dbinstance_repave"
PLURAL = "dbinstances"
TRIGGER = "repave-trigger"
OPT_IN = "goldenimage.pipeline/repave-opt-in"
OLD, TIP, NEWER = "v20260615", "v20260815", "v20261001"
TODAY = "2026-12-01"  # PostgreSQL 14 reached end of life on 2026-11-12
STEP_SECONDS = "0.05"


def catalog_text(tip=TIP, newer=("14", "16", "17")):
    images = {
        OLD: ("22.04", ["14", "15", "16", "17"]),
        TIP: ("22.04", ["14", "16", "17"]),
        NEWER: ("22.04", list(newer)),
        "v20261201-2404": ("24.04", ["16", "17"]),
    }
    doc = {
        "version": 1,
        "default_stream": "22.04",
        "streams": {
            "22.04": {"tip": tip, "validated": True},
            "24.04": {"tip": "v20261201-2404", "validated": False},
        },
        "images": {
            name: {
                "os_version": stream,
                "pg_versions": majors,
                "build_date": "%s-%s-%s" % (name[1:5], name[5:7], name[7:9]),
                "imported": True,
            }
            for name, (stream, majors) in images.items()
        },
    }
    return yaml.safe_dump(doc)


@pytest.fixture(scope="module")
def operator_settings(lab, kube_client):
    """The operator reads its catalog from a ConfigMap of this module, at a fixed date, with short steps."""
    from kubernetes import client

    core = client.CoreV1Api(kube_client)
    namespace = "repave-catalog"
    core.create_namespace({"metadata": {"name": namespace}})
    # "lenient" differs from the operator's: its tip still carries PostgreSQL 15.
    for name, text in (
        ("catalog", catalog_text(TIP)),
        ("newer", catalog_text(NEWER)),
        ("lenient", catalog_text(NEWER, ("15", "16", "17"))),
    ):
        body = {"metadata": {"name": name}, "data": {"catalog.yaml": text}}
        core.create_namespaced_config_map(namespace, body)
    saved = {key: os.environ.get(key) for key in (CATALOG_ENV, TODAY_ENV, STEP_ENV, TRIGGER_ENV)}
    os.environ.update({CATALOG_ENV: namespace + "/catalog", TODAY_ENV: TODAY, STEP_ENV: STEP_SECONDS})
    os.environ.pop(TRIGGER_ENV, None)
    try:
        yield {"namespace": namespace, "name": "catalog"}
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        core.delete_namespace(namespace)


class Fleet:
    """DBInstances of one test namespace, through the kubernetes client, and the operator that runs them."""

    def __init__(self, lab, kube_client, namespace, catalog):
        from kubernetes import client

        self.lab = lab
        self.namespace = namespace
        self.catalog = catalog
        self.group = getattr(lab, "dbinstance_group", None) or "db.goldenimage.io"
        self.version = getattr(lab, "dbinstance_version", None) or "v1alpha1"
        self.custom = client.CustomObjectsApi(kube_client)
        self.operator = next(
            c for c in lab.controller_manager.controllers if isinstance(c, DBInstanceOperator)
        )

    def create(self, name, engine="16", revision=OLD, os_version=None, labels=None):
        """A DBInstance; ``engine`` None leaves engineVersion out of the spec (the CRD keeps it optional)."""
        annotations = {INITIAL_REVISION: revision} if revision else {}
        spec = {"engineVersion": engine} if engine is not None else {}
        if os_version:
            spec["osVersion"] = os_version
        body = {
            "apiVersion": "%s/%s" % (self.group, self.version),
            "kind": "DBInstance",
            "metadata": {"name": name, "annotations": annotations, "labels": labels or {}},
            "spec": spec,
        }
        self.custom.create_namespaced_custom_object(self.group, self.version, self.namespace, PLURAL, body)

    def get(self, name):
        return self.custom.get_namespaced_custom_object(
            self.group, self.version, self.namespace, PLURAL, name
        )

    def items(self):
        found = self.custom.list_namespaced_custom_object(self.group, self.version, self.namespace, PLURAL)
        return {i["metadata"]["name"]: i for i in found["items"]}

    def settle(self, names, phase="Available", timeout=SETTLE_SECONDS):
        """Wait until every named instance is in ``phase`` with no trigger left."""
        deadline = time.monotonic() + timeout
        while True:
            items = self.items()
            waiting = [
                n
                for n in names
                if (items.get(n, {}).get("status") or {}).get("phase") != phase
                or TRIGGER in (items.get(n, {}).get("metadata", {}).get("annotations") or {})
            ]
            if not waiting:
                return items
            if time.monotonic() > deadline:
                raise AssertionError(
                    "not %s: %s" % (phase, {n: items.get(n, {}).get("status") for n in waiting})
                )
            time.sleep(0.05)

    def revision(self, name):
        return ((self.get(name).get("status") or {}).get("appliedSpec") or {}).get("imageRevision")

    def annotations(self, name):
        return self.get(name)["metadata"].get("annotations") or {}

    def history(self, what=None):
        return [h for h in self.operator.snapshot(self.namespace) if what is None or h[3] == what]

    def repaves(self, name):
        return self.operator.repaves(self.namespace, name)

    def args(self, **extra):
        base = {
            "namespace": self.namespace,
            "catalog": self.catalog,
            "today": TODAY,
            "api_version": "%s/%s" % (self.group, self.version),
            "wait_sleep": 0.2,
            # Generous: a loaded machine can pause the lab for many seconds; the timeout tests set their own.
            "wait_timeout": 120,
        }
        if extra.get("state") == "repaved" and not (set(extra) & {"opt_in", "window", "maintenance_policy"}):
            # A roll-out starts only by intent: these runs are due by their forced-apply date (the tip was
            # built months before the wall clock), which applies whatever the window and writes no opt-in.
            base["maintenance_policy"] = {"forced_apply_after_days": 1}
        base.update(extra)
        return base

    def writes(self):
        """Mutating API requests on this namespace's DBInstances, from the lab's audit log."""
        return [
            r
            for r in self.lab.mutating_requests()
            if r["resource"] == PLURAL and r["namespace"] == self.namespace
        ]


@pytest.fixture
def fleet(lab, kube_client, kube_namespace, operator_settings):
    return Fleet(lab, kube_client, kube_namespace, operator_settings)


task = functools.partial(module_task, MODULE)


def failed(run, title):
    """The result of a task that failed (with ignore_errors)."""
    entry = run.entry(title)
    assert entry["status"] == "ignored", (title, entry["result"])
    return entry["result"]


def by_name(result):
    return {e["name"]: e for e in result["instances"]}


def api_requests(lab):
    counts = {}
    for record in lab.audit():
        if record["resource"]:
            key = "%s %s" % (record["verb"], record["resource"])
            counts[key] = counts.get(key, 0) + 1
    return counts


# ---------------------------------------------------------------------------------------------- report


def test_report_verdicts_disagreement_and_constant_requests(lab, fleet):
    fleet.create("current", revision=TIP)
    fleet.create("old", revision=OLD)
    fleet.create("pg14", engine="14", revision=OLD)  # carried by the tip, but past end of life
    fleet.create("pg15", engine="15", revision=OLD)  # not carried by the tip
    fleet.create("noble", revision="v20261201-2404", os_version="24.04")  # stream not validated
    fleet.settle(["current", "old", "pg14", "pg15", "noble"])
    policy = {"auto_apply_after_days": 14, "forced_apply_after_days": 45}
    lab.clear_audit()
    run = run_playbook(play(task("report", **fleet.args(maintenance_policy=policy))), env=lab.env())
    assert run.ok, run.log
    small = api_requests(lab)
    report = run["report"]
    assert report["changed"] is False
    found = by_name(report)
    assert {n: (e["verdict"], e["action"]) for n, e in found.items()} == {
        "current": ("Current", None),
        "old": ("OSUpdateAvailable", "os-repave"),
        "pg14": ("PGVersionEOL", "pg-major-migration"),
        "pg15": ("PGVersionEOL", "pg-major-migration"),
        "noble": ("InvalidOSStream", None),
    }
    assert found["old"]["revision"] == OLD and found["old"]["target"] == TIP
    assert (found["old"]["auto_apply_after"], found["old"]["forced_apply"]) == ("2026-08-29", "2026-09-29")
    assert found["pg14"]["eol_date"] == "2026-11-12" and "end of life" in found["pg14"]["description"]
    assert "does not carry PostgreSQL 15" in found["pg15"]["description"]
    assert "pg_dump" in found["pg15"]["description"]
    assert found["pg15"]["auto_apply_after"] is None  # never offered as maintenance
    assert found["old"]["operator"]["OSUpdateAvailable"]["status"] == "True"
    assert found["pg15"]["operator"]["PGVersionEOL"]["status"] == "True"
    assert all(e["disagreement"] is None for e in found.values())
    assert report["summary"] == {
        "Current": 1,
        "OSUpdateAvailable": 1,
        "PGVersionEOL": 2,
        "InvalidOSStream": 1,
    }
    assert small == {"list dbinstances": 1, "get configmaps": 1}, small
    assert not fleet.writes()

    # Against a catalog whose tip moved on, the operator (still on the old tip) disagrees; the
    # requests stay the same with four times the instances.
    for index in range(15):
        fleet.create("more-%02d" % index, revision=OLD)
    fleet.settle(["more-%02d" % i for i in range(15)])
    lab.clear_audit()
    newer = dict(fleet.catalog, name="newer")
    run = run_playbook(play(task("report", **fleet.args(catalog=newer))), env=lab.env())
    assert run.ok, run.log
    assert api_requests(lab) == small
    found = by_name(run["report"])
    assert len(found) == 20
    assert found["current"]["verdict"] == "OSUpdateAvailable"
    assert "OSUpdateAvailable=False" in found["current"]["disagreement"]
    assert any("current" in w and "operator says" in w for w in run["report"]["warnings"])


def test_an_instance_created_without_engine_version_runs_and_repaves_with_the_default_major(lab, fleet):
    """engineVersion left out: the operator provisions (or adopts) the instance with the newest supported
    major of the default stream's tip, the one the collection's rule gives a new database, and the
    report and the repave go by that major."""
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import catalog

    default = catalog.resolve_engine_version(catalog.load(catalog_text()), None, today=TODAY)
    assert default == "17"  # 14 is past end of life on TODAY
    fleet.create("fresh", engine=None, revision=None)  # provisioned by the operator
    fleet.create("running", engine=None, revision=OLD)  # already runs the old revision
    items = fleet.settle(["fresh", "running"])
    for name in ("fresh", "running"):
        assert items[name]["spec"]["engineVersion"] == default, items[name]
        assert items[name]["status"]["appliedSpec"]["engineVersion"] == default
    assert fleet.revision("fresh") == TIP
    repave = fleet.args(state="repaved", names=["running"])
    run = run_playbook(play(task("report", **fleet.args()), task("repave", **repave)), env=lab.env())
    assert run.ok, run.log
    found = by_name(run["report"])
    assert {n: (e["verdict"], e["engine_version"]) for n, e in found.items()} == {
        "fresh": ("Current", default),
        "running": ("OSUpdateAvailable", default),
    }
    assert "PostgreSQL %s stay" % default in found["running"]["description"]
    assert by_name(run["repave"])["running"]["result"] == "repaved"
    assert fleet.revision("running") == TIP and fleet.repaves("running") == 1
    assert fleet.get("running")["status"]["appliedSpec"]["engineVersion"] == default


# ------------------------------------------------------------------------------------ trigger and wait


@pytest.mark.suite("idempotence")
def test_trigger_and_wait_check_real_again(lab, fleet, monkeypatch):
    monkeypatch.setenv(STEP_ENV, "0.3")  # slow enough for the polls to see every step
    fleet.create("orders", revision=OLD)
    fleet.create("billing", revision=OLD)
    fleet.settle(["orders", "billing"])
    one = fleet.args(state="repaved", names=["orders"])
    lab.clear_audit()
    run = run_playbook(
        play(task("predict", check=True, diff=True, **one), task("repave", diff=True, **one)),
        env=lab.env(),
    )
    assert run.ok, run.log
    writes = fleet.writes()
    # The same repave again, alone, so the audit log holds only its requests.
    lab.clear_audit()
    rerun = run_playbook(play(task("again", **one)), env=lab.env())
    assert rerun.ok, rerun.log
    again_writes = lab.mutating_requests()
    predicted = run["predict"]
    assert predicted["changed"] is True
    assert predicted["batches"] == [["orders"]] and predicted["starts_now"] == ["orders"]
    assert by_name(predicted)["orders"]["result"] == "would-repave"
    assert predicted["diff"] == [
        {
            "before_header": "DBInstance orders",
            "after_header": "DBInstance orders",
            "before": {},
            "after": {TRIGGER: "now"},
        }
    ]

    repaved = run["repave"]
    assert repaved["changed"] is True
    entry = by_name(repaved)["orders"]
    assert entry["result"] == "repaved" and entry["target"] == TIP and entry["duration"] > 0
    assert repaved["diff"][0]["after"] == {TRIGGER: "now"}
    phases = [p["phase"] for p in repaved["progress"]]
    assert "Repaving" in phases and repaved["progress"][-1]["percent"] == 100
    steps = {p["step"] for p in repaved["progress"] if p["step"]}
    assert steps and steps <= {"StoppingVM", "SwappingOSDisk", "StartingVM", "DeletingOldDisk"}

    again = rerun["again"]
    assert again["changed"] is False and by_name(again)["orders"]["result"] == "current"
    # The only write of the first play is the trigger of the real run (check mode wrote nothing), and the
    # rerun sent no mutating request at all.
    assert [(w["verb"], w["name"]) for w in writes] == [("patch", "orders")], writes
    assert again_writes == [], again_writes
    assert fleet.revision("orders") == TIP and TRIGGER not in fleet.annotations("orders")
    assert fleet.repaves("orders") == 1 and fleet.repaves("billing") == 0
    assert fleet.revision("billing") == OLD


def test_each_refusal_leaves_no_annotation(lab, fleet):
    fleet.create("pg15", engine="15")  # RepaveBlockedPGVersionEOL
    fleet.create("noble", revision="v20261201-2404", os_version="24.04")  # InvalidOSStream
    stalled = "DBInstance/%s/stalled" % fleet.namespace
    lab.faults.set_object(stalled, "stuck")  # the operator never provisions it: NotAvailable
    fleet.create("stalled")
    fleet.create("fine")
    fleet.settle(["pg15", "noble", "fine"])
    refused = {"pg15": "RepaveBlockedPGVersionEOL", "noble": "InvalidOSStream", "stalled": "NotAvailable"}
    lab.clear_audit()
    # Halting (the default): nothing is written, and the message names each instance with its rule.
    tasks = [task("all", ignore_errors=True, **fleet.args(state="repaved", max_unavailable=2))]
    # Not halting: refused ones are reported and skipped. The stalled one is down already, so two may be
    # down for "fine" to start.
    tasks.append(task("skip", **fleet.args(state="repaved", halt_on_failure=False, max_unavailable=2)))
    try:
        run = run_playbook(play(*tasks), env=lab.env())
    finally:
        lab.faults.set_object(stalled, None)
    assert run.ok, run.log
    everything = failed(run, "all")
    assert "nothing written" in everything["msg"]
    for name, reason in refused.items():
        assert "%s/%s cannot be repaved (%s)" % (fleet.namespace, name, reason) in everything["msg"]
        assert by_name(everything)[name]["reason"] == reason
    assert by_name(everything)["fine"]["result"] is None  # not triggered either
    skipped = run["skip"]
    assert skipped["changed"] is True
    results = {n: e["result"] for n, e in by_name(skipped).items()}
    assert results == {"pg15": "refused", "noble": "refused", "stalled": "refused", "fine": "repaved"}
    assert len([w for w in skipped["warnings"] if w.startswith("skipped:")]) == 3
    assert [w["name"] for w in fleet.writes()] == ["fine"]
    for name in refused:
        assert TRIGGER not in fleet.annotations(name)
        assert fleet.repaves(name) == 0
    assert fleet.get("pg15")["status"]["phase"] == "Available"  # the operator never saw a trigger


def test_a_target_whose_recorded_signature_the_trust_policy_refuses_is_not_repaved_onto(
    lab, kube_client, fleet
):
    """The tip registered without a verified signature, under a catalog that now requires one, is refused
    before anything is written; so is a tip carrying another revision's verified record (replayed) or a
    record verified over other bytes than its checksum. The same tip recorded as signed by a trusted key,
    for its own artifact and checksum, is a target."""
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import catalog
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance
    from cryptography.hazmat.primitives.asymmetric import ec
    from kubernetes import client

    key, stranger = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    trust = {"keys": [{"name": "release", "public_key": signing.public_pem(key)}]}
    core = client.CoreV1Api(kube_client)
    checksum = "d" * 128

    def record(signer):
        """What baked_image records of ``signer``'s signature over the tip's artifact, evidence included."""
        digest = {"sha256": "c" * 64, "sha512": checksum}
        statement = provenance.statement(
            {"name": catalog.signed_subject(TIP, "22.04"), "digest": digest}, [], {}, "2026-12-01T00:00:00Z"
        )
        texts = (
            signing.signature_text(signing.sign_digest(signer, digest["sha256"])),
            provenance.envelope_line(signing.sign_envelope(signer, provenance.serialize(statement))),
        )
        verdict = {"verdict": "verified", "key": signing.key_id(signer), "signer": "release"}
        return catalog.signature_record(verdict, TIP, "22.04", digest, statement, texts)

    good = record(key)
    refusals = {
        "unsigned": (None, "revision %s has no verified signature recorded" % TIP),
        "replayed": (
            dict(good, artifact=catalog.signed_subject(OLD, "22.04")),
            "verified for %s, not for its own artifact" % catalog.signed_subject(OLD, "22.04"),
        ),
        "otherbytes": (dict(good, sha512="e" * 128), "the signature is of other bytes"),
        # A verdict written into the ConfigMap by hand: it names the trusted key, nothing proves it.
        "forged": ({k: v for k, v in good.items() if k != "evidence"}, "with no evidence"),
        # Evidence a key the policy does not hold made, under a record naming the trusted key.
        "stolen": (dict(good, evidence=record(stranger)["evidence"]), "signature check failed"),
    }
    for name, found in [(n, r) for n, (r, _words) in refusals.items()] + [("signed", good)]:
        doc = catalog.set_trust(catalog.load(catalog_text(TIP)), trust)[0]
        doc["images"][TIP]["checksum"] = checksum
        if found:
            doc["images"][TIP]["signature"] = found
        body = {"metadata": {"name": name}, "data": {"catalog.yaml": catalog.dump(doc)}}
        core.create_namespaced_config_map(fleet.namespace, body)
    # Whoever may write the catalog adds their own key and signs the tip with it; a run pinning the policy
    # refuses the catalog before reading anything from it.
    widened = dict(trust, keys=trust["keys"] + [{"name": "mine", "public_key": signing.public_pem(stranger)}])
    doc = catalog.set_trust(catalog.load(catalog_text(TIP)), widened)[0]
    doc["images"][TIP].update(checksum=checksum, signature=dict(record(stranger), signer="mine"))
    body = {"metadata": {"name": "widened"}, "data": {"catalog.yaml": catalog.dump(doc)}}
    core.create_namespaced_config_map(fleet.namespace, body)
    fleet.create("fine")
    fleet.settle(["fine"])
    lab.clear_audit()
    where = {"namespace": fleet.namespace}
    tasks = [
        task(name, ignore_errors=True, **fleet.args(state="repaved", catalog=dict(where, name=name)))
        for name in refusals
    ]
    tasks.append(
        task("signed", check=True, **fleet.args(state="repaved", catalog=dict(where, name="signed")))
    )
    pinned = dict(where, name="widened", trust=trust)
    tasks.append(task("widened", ignore_errors=True, **fleet.args(state="repaved", catalog=pinned)))
    run = run_playbook(play(*tasks), env=lab.env())
    assert fleet.writes() == [], fleet.writes()
    assert lab.mutating_requests() == [], lab.mutating_requests()
    for name, (_record, words) in refusals.items():
        refused = failed(run, name)
        entry = by_name(refused)["fine"]
        assert entry["reason"] == "UntrustedImage", entry
        assert "%s/fine cannot be repaved (UntrustedImage)" % fleet.namespace in refused["msg"]
        assert words in refused["msg"], refused["msg"]
    widened = failed(run, "widened")
    assert "its trust section is not the trust policy this run pins" in widened["msg"], widened["msg"]
    assert "it trusts key mine (%s)" % signing.key_id(stranger)[:12] in widened["msg"], widened["msg"]
    assert TRIGGER not in fleet.annotations("fine") and fleet.repaves("fine") == 0
    signed = run["signed"]
    assert by_name(signed)["fine"]["target"] == TIP and signed["changed"] is True, signed


# ---------------------------------------------------------------------------------------------- fleet


def most_repaving_at_once(history):
    """From the operator's history: the largest number of instances between RepaveStarted and the end."""
    busy, most = set(), 0
    for _when, _ns, name, what in sorted(history):
        if what == "RepaveStarted":
            busy.add(name)
            most = max(most, len(busy))
        elif what == "RepaveCompleted" or what.startswith("RepaveFailed"):
            busy.discard(name)
    return most


@pytest.mark.slow  # minutes of waiting by design: the slow tier
def test_fleet_of_fifty_under_max_unavailable_in_order(lab, fleet, monkeypatch):
    names = ["db-%02d" % i for i in range(50)]
    standbys = set(names[::7])
    for name in names:
        role = "standby" if name in standbys else "primary"
        fleet.create(name, labels={"fleet": "f50", "role": role})
    fleet.settle(names)
    # A repave takes two seconds, far longer than starting a batch of five even on a loaded machine, so
    # "the limit is used" does not depend on how fast the five triggers are written.
    monkeypatch.setenv(STEP_ENV, "0.5")
    fleet.create("elsewhere", labels={"fleet": "other"})  # out of the selector: never touched
    args = fleet.args(
        state="repaved",
        label_selector="fleet=f50",
        max_unavailable="10%",
        order=[{"label_selector": "role=standby"}],
    )
    lab.clear_audit()
    run = run_playbook(
        play(task("plan", check=True, **args), task("roll", **args)), env=lab.env(), timeout=300
    )
    assert run.ok, run.log
    plan = run["plan"]
    assert plan["max_unavailable"] == 5
    assert [len(b) for b in plan["batches"]] == [5] * 10
    assert set(plan["order"][: len(standbys)]) == standbys  # standbys first
    assert plan["starts_now"] == plan["batches"][0]

    rolled = run["roll"]
    assert rolled["changed"] is True and rolled["pending"] == []
    assert all(e["result"] == "repaved" for e in rolled["instances"])
    history = fleet.history()
    assert most_repaving_at_once(history) == 5  # the limit is used, and never exceeded
    assert fleet.operator.repaving_at_once(fleet.namespace) == 5
    # Standbys first, in the order the module wrote to them: triggers written together (a batch whose
    # slots freed at once) may be picked up by the operator in any order.
    written = list(dict.fromkeys(r["name"] for r in fleet.writes()))
    assert set(written[: len(standbys)]) == standbys, written
    assert all(fleet.repaves(n) == 1 for n in names)
    items = fleet.items()
    assert all(items[n]["status"]["appliedSpec"]["imageRevision"] == TIP for n in names)
    assert items["elsewhere"]["status"]["appliedSpec"]["imageRevision"] == OLD
    assert rolled["progress"][-1]["done"] == 50 and rolled["progress"][-1]["percent"] == 100


@pytest.mark.slow  # minutes of waiting by design: the slow tier
def test_a_roll_out_prints_the_fleet_line_every_round_while_it_runs(lab, fleet, monkeypatch):
    """A roll-out longer than a round returns every report_every seconds; the action plugin prints each
    round's fleet line as it comes, and the last round holds the whole result."""
    monkeypatch.setenv(STEP_ENV, "2")  # a repave takes eight seconds: rounds see it at its steps
    names = ["live-%d" % i for i in range(3)]
    for name in names:
        fleet.create(name, labels={"fleet": "live"})
    fleet.settle(names)
    lab.clear_audit()
    args = fleet.args(state="repaved", label_selector="fleet=live", max_unavailable=1, report_every=1)
    run = run_playbook(play(task("roll", **args)), env=lab.env(), timeout=300)
    assert run.ok, run.log
    rolled = run["roll"]
    assert rolled["rounds"] >= 3, rolled["lines"]
    assert len(rolled["lines"]) == rolled["rounds"]
    for line in rolled["lines"][:-1]:
        assert re.match(r"fleet: \d/3 repaved \(\d+%\), \d repaving.*; elapsed \d+s$", line), line
        assert line in run.log  # printed as it came, not only returned
    # Each round names what is repaving, with its phase (and step, once the operator reports one).
    busy = [line for line in rolled["lines"][:-1] if re.search(r"1 repaving \(live-\d: \w+", line)]
    assert busy == rolled["lines"][:-1], rolled["lines"]
    assert rolled["lines"][-1].startswith("fleet: 3/3 repaved (100%), 0 repaving, 0 failed, 0 not started")
    elapsed = [int(line.rsplit("elapsed ", 1)[1][:-1]) for line in rolled["lines"]]
    assert elapsed == sorted(elapsed) and elapsed[-1] > elapsed[0]
    # The whole result, as one call gave it: the first round's plan, every instance, each triggered once.
    assert rolled["done"] is True and "resume" not in rolled
    assert rolled["batches"] == [[n] for n in names] and rolled["resumes"] == []
    assert {e["name"]: e["result"] for e in rolled["instances"]} == {n: "repaved" for n in names}
    assert all(fleet.repaves(n) == 1 for n in names) and most_repaving_at_once(fleet.history()) <= 1
    assert sorted(w["name"] for w in fleet.writes()) == names
    assert rolled["progress"][-1]["done"] == 3 and rolled["progress"][-1]["percent"] == 100


def start_playbook(plays, env, workdir):
    """ansible-playbook started, not waited for."""
    workdir = pathlib.Path(workdir)
    command, run_env = playbook_command(write_playbook(plays, workdir), workdir, env)
    return subprocess.Popen(
        command, cwd=str(ROOT), env=run_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def process_tree(pid):
    """`pid` and every process below it, from /proc."""
    children = {}
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, []))
    return tree


def kill_tree(proc):
    """Kill ansible-playbook and everything it started, as an interrupted run would end.

    A process-group kill is not enough: Ansible's task workers call setsid(), so their modules would run
    on. Everything is stopped first so no process forks a new child between the listing and the kill.
    """
    stopped = set()
    while True:
        fresh = [p for p in process_tree(proc.pid) if p not in stopped]
        if not fresh:
            break
        for pid in fresh:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
            stopped.add(pid)
    for pid in stopped:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait()
    # Dead (or a zombie, whose sockets are closed too): nothing of the run sends another byte.
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in stopped):
        assert time.monotonic() < deadline, "killed processes still alive"
        time.sleep(0.02)


def _alive(pid):
    try:
        state = pathlib.Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_interrupted_rollout_resumes_without_repaving_twice(lab, fleet, monkeypatch):
    monkeypatch.setenv(STEP_ENV, "0.5")  # a repave takes two seconds: the kill lands mid-batch
    names = ["r-%d" % i for i in range(6)]
    for name in names:
        fleet.create(name, labels={"fleet": "resume"})
    fleet.settle(names)
    args = fleet.args(state="repaved", label_selector="fleet=resume", max_unavailable=2)
    lab.clear_audit()
    with tempfile.TemporaryDirectory() as workdir:
        proc = start_playbook(play(task("roll", **args)), lab.env(), workdir)
        try:
            deadline = time.monotonic() + 60
            while not fleet.history("RepaveStarted"):
                assert proc.poll() is None, "the run ended before any repave started"
                assert time.monotonic() < deadline, "no repave started"
                time.sleep(0.02)
        finally:
            kill_tree(proc)
    # What the killed run asked for is every write it got to the API server, its last one included.
    lab.wait_writes()
    triggered = {w["name"] for w in fleet.writes()}
    # Hold all of it where it is until the rerun has looked, so the rerun meets instances mid-repave (or
    # triggered and not yet started) however slow it is to start.
    keys = ["DBInstance/%s/%s" % (fleet.namespace, n) for n in triggered]
    lab.hold(keys)
    try:
        started = {h[2] for h in fleet.history("RepaveStarted")}
        assert started and started <= triggered, (started, triggered)
        items = fleet.items()
        frozen = {
            n
            for n in triggered
            if items[n]["status"]["phase"] == "Repaving"
            or (items[n]["metadata"].get("annotations") or {}).get(TRIGGER) == "now"
        }
        assert frozen, "the killed run's repaves all finished before they could be held"
        lab.clear_audit()
        outcome = {}
        rerun = threading.Thread(
            target=lambda: outcome.update(run=run_playbook(play(task("resume", **args)), env=lab.env()))
        )
        rerun.start()
        deadline = time.monotonic() + 120
        while not any(r["verb"] == "list" and r["resource"] == PLURAL for r in lab.audit()):
            assert rerun.is_alive() and time.monotonic() < deadline, "the rerun never listed the instances"
            time.sleep(0.05)
    finally:
        for key in keys:
            lab.faults.set_object(key, None)
    rerun.join(timeout=300)
    run = outcome["run"]
    assert run.ok, run.log
    resumed = run["resume"]
    assert set(resumed["resumes"]) == frozen  # waited on, not triggered again
    assert {e["result"] for e in resumed["instances"]} <= {"repaved", "current"}
    assert all(fleet.repaves(n) == 1 for n in names), {n: fleet.repaves(n) for n in names}
    assert all(fleet.revision(n) == TIP for n in names)
    assert most_repaving_at_once(fleet.history()) <= 2
    # The rerun triggered exactly the instances the killed run had not triggered, each once.
    assert sorted(w["name"] for w in fleet.writes()) == sorted(set(names) - triggered)


# ------------------------------------------------------------------------------- window and opt-in


def closed_window():
    """A two-hour window opening twelve hours from now (UTC): closed now."""
    start = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=12)
    end = start + datetime.timedelta(hours=2)
    return {"start": start.strftime("%H:%M"), "end": end.strftime("%H:%M"), "timezone": "UTC"}


def open_window(minutes):
    """A window that opened a minute ago and closes in ``minutes``."""
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=1), now + datetime.timedelta(minutes=minutes)
    return {"start": start.strftime("%H:%M"), "end": end.strftime("%H:%M"), "timezone": "UTC"}


def test_window_and_opt_in(lab, fleet):
    fleet.create("w1")
    fleet.create("w2")
    fleet.settle(["w1", "w2"])
    closed = fleet.args(state="repaved", window=closed_window())
    lab.clear_audit()
    run = run_playbook(
        play(
            task("outside", **closed),
            task(
                "too long",
                **fleet.args(
                    state="repaved",
                    window=open_window(30),
                    batch_estimate=3600,
                    maintenance_policy={"auto_apply_after_days": 0},
                ),
            ),
            task("opt in", diff=True, **dict(closed, opt_in="next-maintenance")),
            task("report", **fleet.args()),
            task("undo", **fleet.args(state="repaved", opt_in="undo-opt-in")),
            task("opt in again", **dict(closed, opt_in="next-maintenance")),
            task("immediate unnamed", ignore_errors=True, **dict(closed, opt_in="immediate")),
            task("immediate", **dict(closed, opt_in="immediate", names=["w1", "w2"])),
            task("after", **fleet.args()),
        ),
        env=lab.env(),
    )
    assert run.ok, run.log
    outside = run["outside"]
    assert outside["changed"] is False and sorted(outside["pending"]) == ["w1", "w2"]
    assert outside["window"]["open"] is False
    # No opt-in and no maintenance policy: never due, whatever the window does.
    assert outside["next_window"] is None and outside["intent"]["applied_by"] == {}
    assert {(e["result"], e["held"]) for e in outside["instances"]} == {("pending", "NotDue")}
    too_long = run["too long"]  # due (auto-apply date passed), the window open but too short
    assert too_long["changed"] is False and sorted(too_long["pending"]) == ["w1", "w2"]
    assert too_long["window"]["open"] is True
    assert {e["held"] for e in too_long["instances"]} == {"WindowClosed"}

    opted = run["opt in"]
    assert opted["changed"] is True and sorted(opted["pending"]) == ["w1", "w2"]
    assert opted["next_window"] == opted["window"]["next_open"]
    assert {d["after"].get(OPT_IN) for d in opted["diff"]} == {"next-maintenance"}
    assert {e["opt_in"] for e in run["report"]["instances"]} == {"next-maintenance"}
    undone = run["undo"]
    assert undone["changed"] is True
    assert {(e["result"], e["opt_in"]) for e in undone["instances"]} == {("opt-in", None)}

    unnamed = failed(run, "immediate unnamed")  # a window is only skipped for instances a run names
    assert (
        "opt_in immediate: " in unnamed["msg"]
        and "list the instances to repave now in names" in unnamed["msg"]
    )
    immediate = run["immediate"]  # ignores the closed window
    assert immediate["changed"] is True and immediate["pending"] == []
    assert {e["result"] for e in immediate["instances"]} == {"repaved"}
    assert immediate["intent"]["applied_by"] == {"w1": "immediate", "w2": "immediate"}
    after = by_name(run["after"])
    assert {e["verdict"] for e in after.values()} == {"Current"}
    assert {e["opt_in"] for e in after.values()} == {None}  # applied, so the opt-in is gone
    assert fleet.repaves("w1") == 1 and fleet.repaves("w2") == 1
    # Per instance: opt in, undo, opt in again, opt in immediate, the trigger, the applied opt-in removed.
    # Nothing was written by the runs outside the window or with a batch too long for it.
    patches = [w for w in fleet.writes() if w["name"] == "w1"]
    assert [w["verb"] for w in patches] == ["patch"] * 6, patches


# ---------------------------------------------------------------------------------------------- faults


def test_hanging_stop_times_out_and_operator_refusal_stops(lab, fleet):
    fleet.create("hangs")
    fleet.create("pg15", engine="15")
    fleet.settle(["hangs", "pg15"])
    key = "DBInstance/%s/hangs" % fleet.namespace
    lab.faults.set_object(key, "stop-hangs")
    lenient = dict(fleet.catalog, name="lenient")
    try:
        run = run_playbook(
            play(
                task(
                    "repave",
                    ignore_errors=True,
                    **fleet.args(state="repaved", names=["hangs"], wait_timeout=8),
                ),
                # Our catalog allows it, the operator's refuses: its reason ends the repave.
                task(
                    "refused",
                    ignore_errors=True,
                    **fleet.args(state="repaved", names=["pg15"], catalog=lenient),
                ),
            ),
            env=lab.env(),
        )
    finally:
        lab.faults.set_object(key, None)
    assert run.ok, run.log
    result = failed(run, "repave")
    msg = result["msg"]
    assert "timed out" in msg and "hangs" in msg
    assert "(stuck)" in msg and "stuck: no progress for " in msg and "at step StoppingVM" in msg, msg
    assert "still working" not in msg
    assert "phase Repaving" in msg and "StoppingVM" in msg and "waiting for the VM to stop" in msg
    assert "Ready=False" in msg
    assert by_name(result)["hangs"]["result"] == "timed-out"

    refused = failed(run, "refused")
    assert "the operator failed the repave: RepaveBlockedPGVersionEOL" in refused["msg"]
    assert by_name(refused)["pg15"]["result"] == "failed"
    status = fleet.get("pg15")["status"]
    assert status["phase"] == "Failed" and TRIGGER not in fleet.annotations("pg15")

    fleet.settle(["hangs"])  # the fault lifted, the operator finishes on its own
    assert fleet.revision("hangs") == TIP


# ---------------------------------------------------------------------------------------------- errors


def test_clear_errors(lab, kube_client, fleet):
    from kubernetes import client

    core = client.CoreV1Api(kube_client)
    core.create_namespaced_config_map(
        fleet.namespace, {"metadata": {"name": "broken"}, "data": {"catalog.yaml": "streams: [unclosed"}}
    )
    run = run_playbook(
        play(
            task("unknown kind", ignore_errors=True, **fleet.args(kind="DBInstanceX")),
            task("unknown version", ignore_errors=True, **fleet.args(api_version=fleet.group + "/v9")),
            task("no catalog", ignore_errors=True, **fleet.args(catalog={"namespace": "none", "name": "x"})),
            task(
                "broken catalog",
                ignore_errors=True,
                **fleet.args(catalog={"namespace": fleet.namespace, "name": "broken"}),
            ),
            task("operator absent", ignore_errors=True, **fleet.args(state="absent", names=["x"])),
        ),
        env=lab.env(),
    )
    assert run.ok, run.log
    assert "does not serve kind DBInstanceX in %s/" % fleet.group in failed(run, "unknown kind")["msg"]
    assert "%s/v9" % fleet.group in failed(run, "unknown version")["msg"]
    assert "catalog ConfigMap none/x has no OS streams" in failed(run, "no catalog")["msg"]
    broken = failed(run, "broken catalog")["msg"]
    assert broken.startswith("read catalog ConfigMap %s/broken: " % fleet.namespace) and "YAML" in broken
    absent = failed(run, "operator absent")["msg"]
    assert "delete the DBInstance and let the operator tear it down" in absent
    assert not fleet.writes()


# ------------------------------------------------------------------------------------------- playbook


def test_repave_playbook_reports_then_rolls_out_standbys_first(lab, fleet):
    names = ["db-%d" % i for i in range(6)]
    for i, name in enumerate(names):
        fleet.create(name, labels={"role": "standby" if i % 2 else "primary"})
    fleet.create("legacy", engine="15")  # the tip does not carry 15: a migration, never a repave
    # Asked for 15 on a new instance: the operator refuses to create it (nothing to migrate).
    fleet.create("never", engine="15", revision=None)
    fleet.settle(names + ["legacy"])
    fleet.settle(["never"], phase="Failed")
    assert fleet.get("never")["status"]["reason"] == "UnsupportedEngineVersion"
    extra = {
        "repave_namespace": fleet.namespace,
        "repave_catalog": fleet.catalog,
        "repave_max_unavailable": 2,
        "repave_batch_pause": 0,
        "repave_wait_timeout": 60,
        "repave_api_version": "%s/%s" % (fleet.group, fleet.version),
        "repave_maintenance_policy": {"auto_apply_after_days": 14, "forced_apply_after_days": 45},
    }
    playbook = ROOT / "playbooks" / "repave_dbinstances.yml"
    # Report only: the table and the plan, no write.
    lab.clear_audit()
    run = run_playbook(playbook, env=lab.env(), extra_vars=dict(extra, repave_report_only=True))
    assert run.ok, run.log
    assert fleet.writes() == []
    assert (
        "instance | revision | target | verdict | action | opt-in status | AutoAppliedAfterDate | "
        "ForcedApplyDate | CurrentApplyDate | description" in run.stdout
    )
    # The tip was built on 2026-08-15: auto-apply 14 days later, forced 45 days later.
    assert "db-0 | %s | %s | OSUpdateAvailable | os-repave | - | 2026-08-29 | 2026-09-29 | " % (OLD, TIP) in (
        run.stdout
    )
    # The tip dropped 15: deleted three months after 15's end of life (2027-11-11) whatever happens, never
    # counted from the tip's build date.
    assert (
        "legacy | %s | %s | PGVersionEOL | pg-major-migration | - | - | - | - | " % (OLD, TIP) in run.stdout
    )
    assert "legacy: " in run.stdout and "pg_dump" in run.stdout
    legacy = by_name(run["Report the drift (changes nothing)"])["legacy"]
    assert legacy["migration_deadline"] == "2028-02-11", legacy
    never = by_name(run["Report the drift (changes nothing)"])["never"]
    assert (never["verdict"], never["action"], never["migration_deadline"]) == (
        "UnsupportedEngineVersion",
        "recreate",
        None,
    )
    assert "never | - | %s | UnsupportedEngineVersion | recreate | " % TIP in run.stdout
    assert "there is no database to repave or pg_dump" in never["description"]
    plan = run["Repave the fleet"]["batches"]
    assert plan == [["db-1", "db-3"], ["db-5", "db-0"], ["db-2", "db-4"]]  # standbys first

    run = run_playbook(playbook, env=lab.env(), extra_vars=extra)
    assert run.ok, run.log
    assert {n: fleet.revision(n) for n in names} == {n: TIP for n in names}
    assert fleet.revision("legacy") == OLD and fleet.repaves("legacy") == 0
    assert fleet.repaves("never") == 0 and fleet.get("never")["status"]["phase"] == "Failed"
    started = [h[2] for h in fleet.history("RepaveStarted")]
    assert set(started[:3]) == {"db-1", "db-3", "db-5"}  # standbys first
    assert fleet.operator.repaving_at_once(fleet.namespace) <= 2


# ---------------------------------------------------------------------------------------------- inputs


@pytest.mark.suite("bad-input")
def test_bad_durations_an_empty_scope_and_a_malformed_engine_version(lab, fleet):
    fleet.create("target")
    fleet.create("odd", engine="16.x")  # set, but not a major
    fleet.settle(["target", "odd"])
    one = fleet.args(state="repaved", names=["target"])
    bad = [
        ("wait_timeout", -1),
        ("wait_timeout", 0),
        ("wait_sleep", 0),
        ("batch_estimate", -5),
        ("batch_pause", -1),
    ]
    lab.clear_audit()
    run = run_playbook(
        play(
            *[task("%s %s" % pair, ignore_errors=True, **dict(one, **{pair[0]: pair[1]})) for pair in bad],
            task("nothing in scope", **fleet.args(state="repaved", label_selector="fleet=none")),
            task("report", **fleet.args(names=["odd"])),
        ),
        env=lab.env(),
    )
    assert run.ok, run.log
    for option, value in bad:
        msg = failed(run, "%s %s" % (option, value))["msg"]
        if option == "batch_pause":
            assert "option batch_pause: -1.0 is not a pause: it must be zero (no pause)" in msg, msg
        else:
            assert msg.startswith("option %s: " % option) and "before anything is written" in msg, msg
    assert fleet.writes() == [] and TRIGGER not in fleet.annotations("target")
    empty = run["nothing in scope"]
    assert empty["changed"] is False and empty["instances"] == []
    assert (
        "no DBInstance in scope (namespace %s; label selector fleet=none)" % fleet.namespace in empty["msg"]
    )
    assert any("nothing to repave" in w for w in empty["warnings"])
    odd = by_name(run["report"])["odd"]
    assert odd["verdict"] == "PGVersionEOL"
    assert "engineVersion '16.x' is set but is not a major version" in odd["description"]
    assert "not set" not in odd["description"]


def test_wait_false_triggers_what_may_start_and_a_rerun_finishes(lab, fleet):
    fleet.create("n1")
    fleet.create("n2")
    fleet.settle(["n1", "n2"])
    args = fleet.args(state="repaved", max_unavailable=1)
    lab.clear_audit()
    run = run_playbook(play(task("start", **dict(args, wait=False))), env=lab.env())
    assert run.ok, run.log
    started = run["start"]
    assert started["changed"] is True and started["pending"] == ["n2"]
    assert {n: e["result"] for n, e in by_name(started).items()} == {"n1": "in-flight", "n2": "pending"}
    assert [(w["verb"], w["name"]) for w in fleet.writes()] == [("patch", "n1")]
    run = run_playbook(play(task("finish", **args)), env=lab.env())
    assert run.ok, run.log
    assert run["finish"]["resumes"] in (["n1"], [])  # still repaving, or already done
    assert fleet.revision("n1") == TIP and fleet.revision("n2") == TIP
    assert fleet.repaves("n1") == 1 and fleet.repaves("n2") == 1


def playbook_vars(fleet, **extra):
    found = {
        "repave_namespace": fleet.namespace,
        "repave_catalog": fleet.catalog,
        "repave_batch_pause": 0,
        "repave_wait_timeout": 60,
        "repave_api_version": "%s/%s" % (fleet.group, fleet.version),
    }
    found.update(extra)
    return found


def test_repave_playbook_defaults_start_nothing_outside_the_window(lab, fleet):
    names = ["p1", "p2", "p3"]
    for name in names:
        fleet.create(name)
    fleet.settle(names)
    # What a run killed between recording "immediate" and its first trigger leaves on two instances.
    for name in ("p1", "p2"):
        fleet.custom.patch_namespaced_custom_object(
            fleet.group,
            fleet.version,
            fleet.namespace,
            PLURAL,
            name,
            {"metadata": {"annotations": {OPT_IN: "immediate"}}},
        )
    playbook = ROOT / "playbooks" / "repave_dbinstances.yml"
    closed = playbook_vars(fleet, repave_window=closed_window())
    lab.clear_audit()
    run = run_playbook(playbook, env=lab.env(), extra_vars=closed)
    assert run.ok, run.log
    rollout = run["Repave the fleet"]
    assert sorted(rollout["pending"]) == names and rollout["window"]["open"] is False
    assert fleet.history("RepaveStarted") == []
    items = fleet.items()
    for name in names:
        notes = items[name]["metadata"].get("annotations") or {}
        assert TRIGGER not in notes, (name, notes)
        # The stale "immediate" is replaced by what this run intends: the next window.
        assert notes.get(OPT_IN) == "next-maintenance", (name, notes)
    # One write per instance, the opt-in record; no trigger.
    assert sorted(w["name"] for w in fleet.writes()) == names, fleet.writes()

    lab.clear_audit()
    again = run_playbook(playbook, env=lab.env(), extra_vars=closed)
    assert again.ok, again.log
    assert fleet.writes() == [] and fleet.history("RepaveStarted") == []

    # immediate repaves outside the window only what the run names; unnamed, it is refused up front.
    lab.clear_audit()
    unnamed = run_playbook(playbook, env=lab.env(), extra_vars=dict(closed, repave_opt_in="immediate"))
    assert not unnamed.ok and "list them in repave_names" in unnamed.stdout, unnamed.log
    assert lab.audit() == [] or fleet.writes() == []
    named = run_playbook(
        playbook, env=lab.env(), extra_vars=dict(closed, repave_opt_in="immediate", repave_names=["p1"])
    )
    assert named.ok, named.log
    assert [h[2] for h in fleet.history("RepaveStarted")] == ["p1"]
    assert fleet.revision("p1") == TIP and fleet.revision("p2") == OLD and fleet.revision("p3") == OLD
    assert OPT_IN not in fleet.annotations("p1")  # applied, so removed
    assert {fleet.annotations(n).get(OPT_IN) for n in ("p2", "p3")} == {"next-maintenance"}


def test_repave_playbook_without_a_window_repaves_nothing_and_an_instance_window_is_its_own(lab, fleet):
    """The missing line: no repave_window and no opt-in repaves nothing and says why; an instance whose
    own annotation opens a window now is repaved in it, and only it."""
    for name in ("n1", "n2"):
        fleet.create(name)
    fleet.settle(["n1", "n2"])
    playbook = ROOT / "playbooks" / "repave_dbinstances.yml"
    run = run_playbook(playbook, env=lab.env(), extra_vars=playbook_vars(fleet))
    assert run.ok, run.log
    rollout = run["Repave the fleet"]
    assert rollout["intent"]["applied_by"] == {} and rollout["intent"]["opt_in"] == "next-maintenance"
    assert rollout["msg"].startswith("nothing repaved: n1, n2: no maintenance window"), rollout["msg"]
    assert rollout["started"] == "started: nothing; still pending: n1, n2"
    assert "started: nothing" in run.entry("Show the roll-out")["result"]["msg"]
    assert fleet.repaves("n1") == 0 and fleet.repaves("n2") == 0
    # Only the choice is recorded (the opt-in annotation), never the trigger.
    assert all(TRIGGER not in fleet.annotations(n) for n in ("n1", "n2"))

    window = open_window(60)
    fleet.custom.patch_namespaced_custom_object(
        fleet.group,
        fleet.version,
        fleet.namespace,
        PLURAL,
        "n1",
        {
            "metadata": {
                "annotations": {"goldenimage.pipeline/maintenance-window": "%(start)s-%(end)s UTC" % window}
            }
        },
    )
    run = run_playbook(playbook, env=lab.env(), extra_vars=playbook_vars(fleet))
    assert run.ok, run.log
    rollout = run["Repave the fleet"]
    assert rollout["intent"]["applied_by"] == {"n1": "next-maintenance"}
    assert rollout["started"].startswith("started: n1 (next-maintenance)"), rollout["started"]
    assert by_name(rollout)["n2"]["held"] == "NoMaintenanceWindow"
    assert fleet.repaves("n1") == 1 and fleet.repaves("n2") == 0


# ------------------------------------------------------------------ the operator's disks and its env


def claims(kube_client, namespace):
    from kubernetes import client

    found = client.CoreV1Api(kube_client).list_namespaced_persistent_volume_claim(namespace).items
    return {c.metadata.name: c for c in found if not c.metadata.deletion_timestamp}


def steady_claim(kube_client, namespace, name, quiet=1.0, timeout=SETTLE_SECONDS):
    """``(uid, resourceVersion)`` of a claim once it has not changed for ``quiet`` seconds (bound)."""
    deadline, last, since = time.monotonic() + timeout, None, time.monotonic()
    while time.monotonic() < deadline:
        claim = claims(kube_client, namespace).get(name)
        seen = (claim.metadata.uid, claim.metadata.resource_version) if claim else None
        if seen != last:
            last, since = seen, time.monotonic()
        elif seen and time.monotonic() - since >= quiet:
            return seen
        time.sleep(0.1)
    raise AssertionError("claim %s/%s never settled: %s" % (namespace, name, last))


def test_operator_repave_swaps_the_os_disk_and_leaves_pgdata_untouched(lab, kube_client, fleet):
    """The operator path, as the direct path is tested: the instance's OS disk and pgdata are claims the
    operator made (no owner); a repave through the trigger makes the new revision's OS disk under a new
    name, deletes the old one, and pgdata keeps its uid and resourceVersion."""
    fleet.create("keep")
    fleet.settle(["keep"])
    data = steady_claim(kube_client, fleet.namespace, "keep-pgdata")
    assert "keep-os-%s" % OLD in claims(kube_client, fleet.namespace)
    run = run_playbook(play(task("repave", **fleet.args(state="repaved", names=["keep"]))), env=lab.env())
    assert run.ok, run.log
    assert fleet.revision("keep") == TIP and fleet.repaves("keep") == 1
    found = claims(kube_client, fleet.namespace)
    assert "keep-os-%s" % TIP in found and "keep-os-%s" % OLD not in found, sorted(found)
    assert not found["keep-pgdata"].metadata.owner_references  # ownerless, as Harvester makes it
    assert steady_claim(kube_client, fleet.namespace, "keep-pgdata") == data  # untouched
    # Teardown: no cascade from the VM, so the operator deletes every disk of the instance.
    fleet.custom.delete_namespaced_custom_object(fleet.group, fleet.version, fleet.namespace, PLURAL, "keep")
    deadline = time.monotonic() + SETTLE_SECONDS
    while [n for n in claims(kube_client, fleet.namespace) if n.startswith("keep-")]:
        assert time.monotonic() < deadline, sorted(claims(kube_client, fleet.namespace))
        time.sleep(0.1)


def test_targets_follow_the_operators_backing_image_os_version(lab, kube_client, fleet, monkeypatch):
    """One rule for the default stream: the operator provisions an instance that names no osVersion from
    its Deployment's BACKING_IMAGE_OS_VERSION, and dbinstance_repave given that Deployment aims there too;
    without it, the catalog's default stream is used and the operator is seen to disagree."""
    from kubernetes import client

    from tests.lab.controllers.dbinstance import OPERATOR_ENV

    doc = yaml.safe_load(catalog_text())
    doc["streams"]["24.04"]["validated"] = True
    core = client.CoreV1Api(kube_client)
    body = {"metadata": {"name": "two-streams"}, "data": {"catalog.yaml": yaml.safe_dump(doc)}}
    core.create_namespaced_config_map(fleet.namespace, body)
    labels = {"app": "dbinstance-operator"}
    container = {
        "name": "manager",
        "image": "registry.example/dbinstance-operator:1.0",
        "env": [
            {"name": "BACKING_IMAGE_OS_VERSION", "value": "24.04"},
            {"name": "BACKING_IMAGE_REPLICAS", "value": "3"},
        ],
    }
    deployment = {
        "metadata": {"name": "dbinstance-operator"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }
    client.AppsV1Api(kube_client).create_namespaced_deployment(fleet.namespace, deployment)
    monkeypatch.setenv(CATALOG_ENV, "%s/two-streams" % fleet.namespace)
    monkeypatch.setenv(OPERATOR_ENV, "%s/dbinstance-operator" % fleet.namespace)
    fleet.create("fresh", revision=None)  # provisioned by the operator: the env's stream
    fleet.create("jammy", revision=OLD)  # runs 22.04 and names no stream: to be moved to 24.04
    items = fleet.settle(["fresh", "jammy"])
    assert fleet.revision("fresh") == "v20261201-2404"
    assert items["fresh"]["status"]["backingImageReplicas"] == 3
    catalog = {"namespace": fleet.namespace, "name": "two-streams"}
    operator = {"namespace": fleet.namespace, "name": "dbinstance-operator"}
    run = run_playbook(
        play(
            task("catalog default", **fleet.args(catalog=catalog)),
            task("operator default", **fleet.args(catalog=catalog, operator=operator)),
            task(
                "repave", **fleet.args(state="repaved", names=["jammy"], catalog=catalog, operator=operator)
            ),
        ),
        env=lab.env(),
    )
    assert run.ok, run.log
    plain = by_name(run["catalog default"])
    assert plain["fresh"]["target"] == TIP and plain["fresh"]["disagreement"]
    assert run["catalog default"]["default_stream"]["stream"] == "22.04"
    aimed = by_name(run["operator default"])
    assert run["operator default"]["default_stream"] == {
        "stream": "24.04",
        "from": "Deployment %s/dbinstance-operator env BACKING_IMAGE_OS_VERSION" % fleet.namespace,
    }
    assert {n: (e["target"], e["verdict"]) for n, e in aimed.items()} == {
        "fresh": ("v20261201-2404", "Current"),
        "jammy": ("v20261201-2404", "OSUpdateAvailable"),
    }
    assert all(e["disagreement"] is None for e in aimed.values())
    assert by_name(run["repave"])["jammy"]["result"] == "repaved"
    assert fleet.revision("jammy") == "v20261201-2404" and fleet.repaves("jammy") == 1
