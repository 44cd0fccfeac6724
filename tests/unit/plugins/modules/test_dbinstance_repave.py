"""The dbinstance_repave runner with observed state of its own: parameters in, a result (or a
PipelineError carrying it) out, no SystemExit, and no write when the request is refused."""

import datetime
import json
import re
import time

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import catalog
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.repave import repave
from ansible_collections.goldenimage.pipeline.plugins.modules import dbinstance_repave

OLD, TIP = "v20260615", "v20260815"
# A roll-out starts only inside a window or by a recorded choice. These runs give a window that is open
# and a policy whose auto-apply date has passed, on a clock that reads 2026-12-01 12:00 UTC when the tests
# start and ticks like the wall clock.
NOON = datetime.datetime(2026, 12, 1, 12, tzinfo=datetime.UTC).timestamp()
STARTED = time.time()
OPEN = {"start": "06:00", "end": "18:00", "timezone": "UTC", "days": None}
DUE = {"auto_apply_after_days": 0, "forced_apply_after_days": None, "migration_deadline_months": 3}


def noon():
    return NOON + time.time() - STARTED


def defaults(**overrides):
    params = {name: spec.get("default") for name, spec in dbinstance_repave.argument_spec().items()}
    params.update(namespace="t", catalog={"path": "/unused"}, state="repaved", today="2026-12-01")
    params.update(window=OPEN, maintenance_policy=DUE)
    params.update(overrides)
    return params


class Module:
    def __init__(self, params, check_mode=False):
        self.params = params
        self.check_mode = check_mode
        self._diff = True
        self.warnings = []

    def warn(self, text):
        self.warnings.append(text)

    def debug(self, text):
        pass


class Driver:
    """Instances in memory; every write is recorded, a repave finishes on the second look."""

    def __init__(self, *instances, vetoes=None):
        self.instances = {i["name"]: i for i in instances}
        self.writes = []
        self.looks = {}
        self.vetoes = vetoes or {}
        if vetoes is not None:
            self.preflight = self._preflight

    def list(self, names, label_selector):
        return [dict(i) for n, i in sorted(self.instances.items()) if not names or n in names]

    def set_opt_in(self, inst, value):
        self.writes.append(("opt-in", inst["name"], value))
        return True

    def advance(self, inst, target):
        seen = self.looks[inst["name"]] = self.looks.get(inst["name"], 0) + 1
        if seen == 1:
            self.writes.append(("trigger", inst["name"], target["revision"]))
            return {
                "state": "working",
                "phase": "Available",
                "message": "triggered",
                "changed": True,
                "step": None,
            }
        self.instances[inst["name"]]["revision"] = target["revision"]
        return {"state": "done", "phase": "Available", "message": "running", "changed": False, "step": None}

    def _preflight(self, inst):
        if inst["name"] in self.vetoes:
            raise repave.RepaveRefused(repave.NOT_OS_DISK, inst["name"], self.vetoes[inst["name"]])


def doc():
    found = catalog.empty()
    for name in (OLD, TIP):
        found, _changed = catalog.register_image(
            found, name, "22.04", ["15", "16", "17"], "a" * 127 + name[-1], "s3://m/" + name, imported=True
        )
    found, _changed = catalog.set_stream(found, "22.04", tip=TIP, validated=True, default=True)
    return found


def db(name, revision=OLD, engine="16", phase="Available"):
    return {
        "name": name,
        "namespace": "t",
        "revision": revision,
        "engine_version": engine,
        "os_stream": None,
        "phase": phase,
        "available": phase == "Available",
        "operator": {},
        "annotations": {},
        "labels": {},
    }


def run(driver, check_mode=False, **params):
    module = Module(defaults(**params), check_mode)
    return dbinstance_repave.Repave(module, driver, doc(), clock=noon).run(), module


@pytest.mark.parametrize(
    "option, value",
    [
        ("wait_timeout", -1),
        ("wait_timeout", 0),
        ("wait_sleep", 0),
        ("wait_sleep", -0.5),
        ("batch_estimate", 0),
        ("batch_pause", -1),
    ],
)
def test_zero_or_negative_durations_are_refused_before_anything(option, value):
    driver = Driver(db("a"))
    with pytest.raises(Refusal) as refused:
        run(driver, **{option: value})
    assert "option %s" % option in refused.value.msg
    assert driver.writes == [] and driver.looks == {}


def test_a_repave_with_nothing_in_scope_says_so():
    result, module = run(Driver(), label_selector="tier=prod")
    assert result["changed"] is False and result["instances"] == []
    assert result["msg"] == (
        "no DBInstance in scope (namespace t; label selector tier=prod): nothing to repave; check namespace, "
        "names and label_selector"
    )
    assert module.warnings == [result["msg"]]


def test_repave_returns_its_result_and_the_rerun_writes_nothing():
    driver = Driver(db("a"), db("b", revision=TIP))
    result, _module = run(driver)
    assert result["changed"] is True
    assert {e["name"]: e["result"] for e in result["instances"]} == {"a": "repaved", "b": "current"}
    assert result["diff"] == [
        {
            "before_header": "DBInstance a",
            "after_header": "DBInstance a",
            "before": {},
            "after": {"repave-trigger": "now"},
        }
    ]
    assert driver.writes == [("trigger", "a", TIP)]
    again, _module = run(driver)
    assert again["changed"] is False and driver.writes == [("trigger", "a", TIP)]


def test_check_mode_plans_and_writes_nothing():
    driver = Driver(db("a"))
    result, _module = run(driver, check_mode=True)
    assert result["changed"] is True and result["starts_now"] == ["a"] and driver.writes == []


def test_wait_false_starts_and_returns():
    driver = Driver(db("a"), db("b"))
    result, _module = run(driver, wait=False, max_unavailable=1)
    results = {e["name"]: e["result"] for e in result["instances"]}
    assert results == {"a": "in-flight", "b": "pending"} and result["pending"] == ["b"]
    assert driver.writes == [("trigger", "a", TIP)]


def test_a_refused_instance_halts_with_the_result_and_nothing_written():
    driver = Driver(db("a"), db("pg14", engine="14"), db("odd", engine="16.x"))
    with pytest.raises(PipelineError) as halted:
        run(driver)
    result = halted.value.result
    assert "nothing written" in result["msg"] and driver.writes == []
    entries = {e["name"]: e for e in result["instances"]}
    assert entries["pg14"]["reason"] == "RepaveBlockedPGVersionEOL"
    assert "engineVersion '16.x' is set but is not a major version" in entries["odd"]["message"]
    assert "not set" not in entries["odd"]["message"]


def test_the_drivers_veto_refuses_before_any_write():
    driver = Driver(
        db("a"), db("b"), vetoes={"a": "t/a cannot be repaved (NotAnOSDisk): os_volume pgdata ..."}
    )
    with pytest.raises(PipelineError) as halted:
        run(driver)
    assert "NotAnOSDisk" in halted.value.result["msg"] and driver.writes == []
    result, module = run(driver, halt_on_failure=False)
    assert {e["name"]: e["result"] for e in result["instances"]} == {"a": "refused", "b": "repaved"}
    assert driver.writes == [("trigger", "b", TIP)] and module.warnings[0].startswith("skipped: ")


def test_missing_names_and_bad_combinations_are_refused():
    with pytest.raises(Refusal, match="DBInstance not found in namespace t: nope"):
        run(Driver(db("a")), names=["nope"])
    for params, text in (
        ({"opt_in": "immediate", "state": "report"}, "use it with state repaved"),
        ({"state": "absent", "names": ["a"]}, "delete the DBInstance and let the operator tear it down"),
        ({"state": "absent", "strategy": "direct"}, "list the instances to tear down"),
        ({"catalog": None}, "catalog is required"),
        ({"strategy": "direct", "namespace": None}, "give the VMs' namespace"),
        ({"max_unavailable": "0%"}, "between 1% and 100%"),
        ({"window": {"start": "25:00", "end": "01:00"}}, "window.start"),
    ):
        with pytest.raises(Refusal, match=text):
            repave.check_request(defaults(**params))


def test_a_request_failing_mid_run_fails_with_what_happened_until_then():
    class Failing(Driver):
        def advance(self, inst, target):
            if inst["name"] == "b":
                raise PipelineError("patch DBInstance t/b: Forbidden (403)")
            return super().advance(inst, target)

    driver = Failing(db("a"), db("b"))
    with pytest.raises(PipelineError) as failed:
        run(driver, max_unavailable=1)
    result = failed.value.result
    assert result["msg"] == "patch DBInstance t/b: Forbidden (403)" and result["changed"] is True
    assert {e["name"]: e.get("result") for e in result["instances"]}["a"] == "repaved"
    assert result["progress"][0]["name"] == "a"


class Hanging(Driver):
    """Triggered on the first look, then stopping for ever."""

    def advance(self, inst, target):
        if not self.looks.get(inst["name"]):
            self.writes.append(("trigger", inst["name"], target["revision"]))
        self.looks[inst["name"]] = self.looks.get(inst["name"], 0) + 1
        return {
            "state": "working",
            "phase": "Repaving",
            "message": "waiting for the VM to stop",
            "changed": False,
            "step": "StoppingVM",
        }


def test_a_repave_that_shows_no_progress_times_out_as_stuck_naming_its_step_and_what_did_not_start():
    driver = Hanging(db("a"), db("b"))
    with pytest.raises(PipelineError) as halted:
        run(driver, max_unavailable=1, wait_timeout=1, wait_sleep=0.1)
    msg = halted.value.result["msg"]
    assert msg.startswith(
        "timed out after 1s waiting for the repave of 1 instance(s) (stuck): a (target v20260815): "
    )
    assert re.search(
        r"a \(target v20260815\): phase Repaving, waiting for the VM to stop; "
        r"stuck: no progress for \d+s at step StoppingVM",
        msg,
    )
    assert msg.endswith("; not started: b") and "still working" not in msg
    entries = {e["name"]: e for e in halted.value.result["instances"]}
    assert entries["a"]["result"] == "timed-out" and entries["a"]["stuck"] is True
    assert entries["b"]["result"] == "pending"


def test_a_roll_out_reports_the_fleet_at_every_interval(monkeypatch):
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.repave import _repave_rollout

    monkeypatch.setattr(_repave_rollout, "FLEET_LINE_EVERY", 0.0)
    lines = []
    module = Module(defaults(max_unavailable=1, wait_sleep=0.05))
    module.debug = lines.append
    result = dbinstance_repave.Repave(module, Driver(db("a"), db("b")), doc(), clock=noon).run()
    fleet = [p for p in result["progress"] if p["state"] == "fleet"]
    assert fleet[0]["repaving"] == ["a: Available"] and fleet[0]["waiting"] == 1 and fleet[0]["done"] == 0
    assert fleet[-1]["done"] == 2 and fleet[-1]["percent"] == 100 and fleet[-1]["repaving"] == []
    text = [line for line in lines if line.startswith("fleet: ")]
    assert text[0].startswith(
        "fleet: 0/2 repaved (0%), 1 repaving (a: Available), 0 failed, 1 not started; elapsed "
    )
    assert len(text) == len(fleet)


def test_each_batch_opens_with_a_fleet_line():
    result, _module = run(Driver(db("a"), db("b")), max_unavailable=1, wait_sleep=0.05)
    assert [p["done"] for p in result["progress"] if p["state"] == "fleet"] == [0, 1]


# ------------------------------------------------------------------------------------ rounds


class Slow(Driver):
    """A repave takes ``looks`` looks after the trigger; a failed one clears without landing."""

    def __init__(self, *instances, looks=6, fails=()):
        super().__init__(*instances)
        self.needed = looks
        self.fails = set(fails)

    def advance(self, inst, target):
        name = inst["name"]
        seen = self.looks[name] = self.looks.get(name, 0) + 1
        if seen == 1:
            self.writes.append(("trigger", name, target["revision"]))
        if seen < self.needed:
            state = {
                "state": "working",
                "phase": "Repaving",
                "message": "look %d" % seen,
                "changed": seen == 1,
            }
            return dict(state, step="SwappingOSDisk")
        if name in self.fails:
            return {
                "state": "failed",
                "phase": "Available",
                "message": "refused",
                "changed": False,
                "step": None,
            }
        self.instances[name]["revision"] = target["revision"]
        return {"state": "done", "phase": "Available", "message": "running", "changed": False, "step": None}


def in_rounds(driver, between=None, **params):
    """Call the runner as the action plugin does: again with ``resume`` (through JSON) until done."""
    module = Module(defaults(**params))
    results = []
    while True:
        result = dbinstance_repave.Repave(module, driver, doc(), clock=noon).run()
        results.append(result)
        if result["done"]:
            return results
        module.params.update(json.loads(json.dumps(result["resume"])))
        if between is not None:
            between(len(results))


def test_a_roll_out_returns_in_rounds_and_the_last_round_holds_the_whole_result():
    driver = Slow(db("a"), db("b"), db("c", revision=TIP), looks=15)
    results = in_rounds(driver, max_unavailable=1, wait_sleep=0.1, report_every=1)
    assert len(results) >= 3, [r.get("line") for r in results]
    for result in results[:-1]:
        assert result["done"] is False and result["line"].startswith("fleet: "), result
        assert "instances" not in result and "diff" not in result
    assert re.match(
        r"fleet: 0/2 repaved \(0%\), 1 repaving \(a: Repaving \(SwappingOSDisk\)\), ", results[0]["line"]
    )
    assert re.search(r"; elapsed \d+s$", results[0]["line"])
    last = results[-1]
    entries = {e["name"]: e for e in last["instances"]}
    assert {n: e["result"] for n, e in entries.items()} == {"a": "repaved", "b": "repaved", "c": "current"}
    assert entries["a"]["verdict"] == "OSUpdateAvailable" and entries["a"]["batch"] == 0
    assert last["batches"] == [["a"], ["b"]] and last["order"] == ["a", "b"] and last["resumes"] == []
    assert last["progress"][-1]["done"] == 2 and last["progress"][-1]["percent"] == 100
    assert last["line"].startswith("fleet: 2/2 repaved (100%), 0 repaving, 0 failed, 0 not started")
    # Each instance triggered once, however many rounds looked at it.
    assert [w for w in driver.writes if w[0] == "trigger"] == [("trigger", "a", TIP), ("trigger", "b", TIP)]
    assert last["changed"] is True and [d["after"] for d in last["diff"]] == [
        {"repave-trigger": "now"},
        {"repave-trigger": "now"},
    ]


def test_a_repave_that_ends_between_rounds_is_reported_repaved_and_a_failed_one_is_not_retried():
    driver = Slow(db("a"), db("b"), looks=30, fails=["b"])

    def between(rounds_so_far):
        if rounds_so_far == 1:  # a lands while no round looks: the next round finds it on its target
            driver.instances["a"]["revision"] = TIP
            driver.needed = 2

    results = in_rounds(
        driver, between=between, max_unavailable=1, wait_sleep=0.1, report_every=1, halt_on_failure=False
    )
    entries = {e["name"]: e for e in results[-1]["instances"]}
    assert entries["a"]["result"] == "repaved" and entries["a"]["duration"] > 0
    assert entries["b"]["result"] == "failed"
    assert [w[1] for w in driver.writes if w[0] == "trigger"] == ["a", "b"]


def test_a_round_that_times_out_names_the_step_it_is_stuck_at():
    driver = Hanging(db("a"), db("b"))
    with pytest.raises(PipelineError) as halted:
        in_rounds(driver, max_unavailable=1, wait_timeout=3, wait_sleep=0.2, report_every=1)
    msg = halted.value.result["msg"]
    assert re.search(
        r"a \(target v20260815\): phase Repaving, waiting for the VM to stop; "
        r"stuck: no progress for [23]s at step StoppingVM",
        msg,
    ), msg
    assert msg.endswith("; not started: b")
    assert [w[1] for w in driver.writes if w[0] == "trigger"] == ["a"]


def test_a_fleet_report_above_the_limit_returns_what_needs_attention_and_counts_every_instance(monkeypatch):
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import details

    fleet = [db("a-current", revision=TIP), db("b-os-update"), db("c-eol", engine="15"), db("d-os-update")]
    doc_without_15 = doc()
    doc_without_15["images"][TIP]["pg_versions"] = ["16", "17"]
    full = dbinstance_repave.Repave(Module(defaults(state="report")), Driver(*fleet), doc_without_15).run()
    assert full["details"] == "full" and len(full["instances"]) == 4
    monkeypatch.setattr(details, "DETAIL_LIMIT", 2)
    auto = dbinstance_repave.Repave(Module(defaults(state="report")), Driver(*fleet), doc_without_15).run()
    assert auto["details"] == "summary" and auto["summary"] == full["summary"]
    # The end-of-life major needs more than a repave: it comes first, then the OS updates in fleet order.
    assert [e["name"] for e in auto["instances"]] == ["c-eol", "b-os-update"]
    assert auto["instances_omitted"] == 2
    asked = dbinstance_repave.Repave(
        Module(defaults(state="report", details="full")), Driver(*fleet), doc_without_15
    ).run()
    assert asked["details"] == "full" and len(asked["instances"]) == 4


# ------------------------------------------------------------------- disruption only by intent


class Tracking(Driver):
    """A repave takes the instance down for three looks; records who was down together."""

    def __init__(self, *instances):
        super().__init__(*instances)
        self.down_together = []

    def advance(self, inst, target):
        name = inst["name"]
        seen = self.looks[name] = self.looks.get(name, 0) + 1
        if seen == 1:
            self.writes.append(("trigger", name, target["revision"]))
            self.instances[name]["available"] = False
            self.instances[name]["phase"] = "Repaving"
        self.down_together.append(sorted(n for n, i in self.instances.items() if i["available"] is False))
        if seen < 3:
            return {
                "state": "working",
                "phase": "Repaving",
                "message": "x",
                "changed": seen == 1,
                "step": None,
            }
        self.instances[name].update(revision=target["revision"], available=True, phase="Available")
        return {"state": "done", "phase": "Available", "message": "running", "changed": False, "step": None}


def annotated(name, window=None, standby_of=None, **fields):
    inst = db(name, **fields)
    if window:
        inst["annotations"] = {"goldenimage.pipeline/maintenance-window": window}
    if standby_of:
        inst["labels"] = {"goldenimage.pipeline/standby-of": standby_of}
    return inst


def test_no_window_and_no_opt_in_repaves_nothing_and_says_why():
    driver = Driver(db("a"), db("b"))
    result, _module = run(driver, window=None, maintenance_policy=None)
    assert driver.writes == [] and driver.looks == {}
    assert result["changed"] is False
    assert {e["name"]: (e["result"], e["held"]) for e in result["instances"]} == {
        "a": ("pending", "NoMaintenanceWindow"),
        "b": ("pending", "NoMaintenanceWindow"),
    }
    assert result["msg"].startswith("nothing repaved: a, b: no maintenance window")
    assert result["intent"]["opt_in"] is None and result["intent"]["applied_by"] == {}
    # The same in check mode: nothing would start.
    checked, _module = run(Driver(db("a")), check_mode=True, window=None, maintenance_policy=None)
    assert checked["starts_now"] == [] and checked["changed"] is False


def test_the_choice_that_started_each_repave_is_recorded():
    driver = Driver(db("a"), db("b"))
    result, _module = run(driver, window=None, maintenance_policy=None, opt_in="immediate", names=["a", "b"])
    assert result["intent"]["applied_by"] == {"a": "immediate", "b": "immediate"}
    assert result["intent"]["opt_in"] == "immediate" and result["intent"]["now"].startswith("2026-12-01T12:")


def test_an_instance_window_is_used_before_the_run_s_and_without_one_nothing_starts():
    # a's own window is open at noon UTC, b's is closed, c has none and the run gives none.
    driver = Driver(annotated("a", "11:00-13:00"), annotated("b", "sat 01:00-02:00 Europe/Berlin"), db("c"))
    result, _module = run(driver, window=None, max_unavailable=3)
    entries = {e["name"]: e for e in result["instances"]}
    assert (entries["a"]["result"], entries["a"]["applied_by"]) == ("repaved", "auto-apply")
    assert (entries["b"]["result"], entries["b"]["held"]) == ("pending", "WindowClosed")
    assert (entries["c"]["result"], entries["c"]["held"]) == ("pending", "NoMaintenanceWindow")
    assert [w[1] for w in driver.writes if w[0] == "trigger"] == ["a"]
    # The run's open window does not override b's own closed one.
    driver = Driver(annotated("b", "sat 01:00-02:00 Europe/Berlin"))
    result, _module = run(driver)
    assert result["instances"][0]["held"] == "WindowClosed" and driver.writes == []


def test_auto_apply_waits_for_its_date_and_forced_apply_ignores_the_window():
    # TIP was built 2026-08-15; the clock reads 2026-12-01.
    not_yet = {"auto_apply_after_days": 200, "forced_apply_after_days": None, "migration_deadline_months": 3}
    driver = Driver(db("a"))
    result, _module = run(driver, maintenance_policy=not_yet)
    assert result["instances"][0]["held"] == "NotDue" and driver.writes == []
    forced = {"auto_apply_after_days": None, "forced_apply_after_days": 90, "migration_deadline_months": 3}
    driver = Driver(db("a"))
    result, _module = run(driver, window=None, maintenance_policy=forced)
    assert result["instances"][0]["applied_by"] == "forced-apply"
    assert [w[1] for w in driver.writes if w[0] == "trigger"] == ["a"]


def test_an_unreadable_instance_window_is_refused_not_replaced_by_the_run_s():
    driver = Driver(annotated("a", "every night"), db("b"))
    with pytest.raises(Refusal) as refused:
        run(driver)
    assert "InvalidMaintenanceWindow" in refused.value.msg and "goldenimage.pipeline/maintenance-window" in (
        refused.value.msg
    )
    assert driver.writes == []


def test_a_primary_and_its_standby_are_never_repaved_together_whatever_max_unavailable():
    driver = Tracking(
        annotated("p1"), annotated("s1", standby_of="p1"), annotated("s2", standby_of="p1"), annotated("p2")
    )
    result, _module = run(
        driver,
        max_unavailable=10,
        wait_sleep=0.05,
        order=[{"label_selector": "goldenimage.pipeline/standby-of"}],
    )
    assert {e["name"]: e["result"] for e in result["instances"]} == {
        n: "repaved" for n in ("p1", "p2", "s1", "s2")
    }
    group = {"p1", "s1", "s2"}
    assert all(len(group & set(down)) <= 1 for down in driver.down_together), driver.down_together
    assert any(len(down) > 1 for down in driver.down_together)  # p2 still went with the group
    assert result["batches"] == [["s1", "p2"], ["s2"], ["p1"]]


def test_a_standby_waits_while_its_primary_outside_the_selection_is_down():
    driver = Driver(annotated("shop", phase="Failed"), annotated("shop-standby", standby_of="shop"))
    with pytest.raises(PipelineError) as halted:
        run(driver, names=["shop-standby"], max_unavailable=5, wait_timeout=1, wait_sleep=0.05)
    assert "shop" in halted.value.msg and "down" in halted.value.msg, halted.value.msg
    assert [w for w in driver.writes if w[0] == "trigger"] == []


class Recovering(Driver):
    """``x`` (already on the tip) is down for the first ``lists`` reads of the fleet, then Available."""

    def __init__(self, *instances, lists=3):
        super().__init__(*instances)
        self.lists = lists

    def list(self, names, label_selector):
        self.lists -= 1
        if self.lists <= 0:
            self.instances["x"].update(phase="Available", available=True)
        return super().list(names, label_selector)


def test_a_batch_waits_for_room_and_starts_once_the_instance_that_was_down_is_back():
    driver = Recovering(db("a"), db("x", revision=TIP, phase="Upgrading"))
    result, _module = run(driver, max_unavailable=1, wait_timeout=30, wait_sleep=0.05)
    assert {e["name"]: e.get("result") for e in result["instances"]}["a"] == "repaved"
    assert [w for w in driver.writes if w[0] == "trigger"] == [("trigger", "a", TIP)]
