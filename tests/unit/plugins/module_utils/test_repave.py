import datetime
import itertools

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import catalog
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
from ansible_collections.goldenimage.pipeline.plugins.module_utils.repave import repave, rollout

TODAY = "2026-12-20"
VERDICTS = {
    "Current": None,
    "OSUpdateAvailable": "os-repave",
    "PGVersionEOL": "pg-major-migration",
    "InvalidOSStream": None,
}


def fleet_catalog(tip_2204="v20261215"):
    """22.04 (validated, default) with an old revision carrying 15-17 and a newer one dropping 15;
    24.04 registered but still in testing."""
    doc = catalog.empty()
    for name, stream, majors in (
        ("v20260615", "22.04", ["15", "16", "17"]),
        ("v20261215", "22.04", ["16", "17"]),
        ("v20261201-2404", "24.04", ["15", "16", "17"]),
    ):
        doc, _changed = catalog.register_image(
            doc,
            name,
            stream,
            majors,
            "a" * 127 + name[-1],
            "s3://mirror/" + name,
            image={"namespace": "harvester-public", "name": "ubuntu-postgres-" + name},
            storage_class="lh-" + name,
            imported=True,
        )
    doc, _changed = catalog.set_stream(doc, "22.04", tip=tip_2204, validated=True, default=True)
    doc, _changed = catalog.set_stream(doc, "24.04", tip="v20261201-2404")
    return doc


def db(name="db-1", revision="v20260615", engine="16", stream=None, phase="Available", **extra):
    inst = {
        "name": name,
        "namespace": "tenant-a",
        "revision": revision,
        "engine_version": engine,
        "os_stream": stream,
        "phase": phase,
        "available": phase == "Available",
        "operator": {},
    }
    inst.update(extra)
    return inst


# ------------------------------------------------------------------------------ target


def test_target_is_the_tip_of_the_instance_stream_or_the_default_stream():
    doc = fleet_catalog()
    assert repave.target_stream(db(), doc) == "22.04"
    assert repave.target_stream(db(stream="24.04"), doc) == "24.04"
    target = repave.target_of(db(), doc)
    assert target == {
        "revision": "v20261215",
        "os_stream": "22.04",
        "image": {"namespace": "harvester-public", "name": "ubuntu-postgres-v20261215"},
        "storage_class": "lh-v20261215",
        "pg_versions": ["16", "17"],
        "build_date": "2026-12-15",
        "available_since": "2026-12-15",
    }
    # an explicit older revision (a rollback) is allowed: it is in the catalog and its stream validated
    assert repave.target_of(db(revision="v20261215"), doc, "v20260615")["revision"] == "v20260615"


@pytest.mark.parametrize(
    "instance, revision, problem",
    [
        (db(stream="20.04"), None, "OS stream 20.04 is not in the catalog"),
        (db(stream="24.04"), None, "OS stream 24.04 is not validated"),
        (db(), "v20250101", "revision v20250101 is not in the catalog"),
        (db(), "v20261201-2404", "OS stream 24.04 is not validated"),
    ],
)
def test_target_refuses_unknown_or_unvalidated_streams(instance, revision, problem):
    with pytest.raises(repave.RepaveRefused) as refused:
        repave.target_of(instance, fleet_catalog(), revision)
    assert refused.value.reason == "InvalidOSStream"
    assert refused.value.name == "db-1"
    message = str(refused.value)
    assert message.startswith("tenant-a/db-1 cannot be repaved (InvalidOSStream): ")
    assert problem in message
    # the supported move: a validated stream, or a registered revision
    assert "22.04" in message or "v20261215" in message


def test_target_refuses_a_stream_without_tip_and_a_catalog_without_default():
    doc = fleet_catalog()
    doc["streams"]["26.04"] = {"tip": None, "validated": False}
    with pytest.raises(
        repave.RepaveRefused, match=r"OS stream 26.04 has no tip revision.*validated stream \(22.04"
    ):
        repave.target_of(db(stream="26.04"), doc)
    with pytest.raises(repave.RepaveRefused, match="names no OS stream and the catalog has no default"):
        repave.target_of(db(), catalog.empty())


# ------------------------------------------------------------------------------- drift


def test_current_when_on_the_tip_with_a_supported_major():
    verdict = repave.drift(
        db(revision="v20261215"), fleet_catalog(), TODAY, policy={"auto_apply_after_days": 7}
    )
    assert verdict["verdict"] == "Current"
    assert verdict["action"] is None
    assert verdict["target"] == "v20261215"
    assert verdict["auto_apply_after"] is None and verdict["forced_apply"] is None
    assert verdict["eol_date"] == "2028-11-09"
    assert "v20261215" in verdict["description"] and "2028-11-09" in verdict["description"]


def test_os_update_when_the_tip_carries_the_major_with_policy_dates_from_the_build_date():
    policy = {"auto_apply_after_days": 7, "forced_apply_after_days": 30}
    verdict = repave.drift(db(), fleet_catalog(), TODAY, policy=policy)
    assert verdict["verdict"] == "OSUpdateAvailable"
    assert verdict["action"] == "os-repave"
    assert verdict["target"] == "v20261215"
    assert verdict["auto_apply_after"] == "2026-12-22"
    assert verdict["forced_apply"] == "2027-01-14"
    assert "from v20260615 to v20261215" in verdict["description"]
    # without a policy there are no dates
    plain = repave.drift(db(), fleet_catalog(), TODAY)
    assert plain["auto_apply_after"] is None and plain["forced_apply"] is None


def test_pg_eol_when_the_tip_does_not_carry_the_major():
    verdict = repave.drift(db(engine="15"), fleet_catalog(), TODAY, policy={"auto_apply_after_days": 7})
    assert verdict["verdict"] == "PGVersionEOL"
    assert verdict["action"] == "pg-major-migration"
    assert verdict["auto_apply_after"] is None
    assert verdict["eol_date"] == "2027-11-11"
    assert verdict["description"] == (
        "revision v20261215 does not carry PostgreSQL 15: a repave cannot change the major; pg_dump and "
        "restore into a DBInstance with engineVersion 16 or 17; migrate before 2028-02-11, when it is "
        "deleted (migration deadline)"
    )
    # three months after the major's end of life (or as the policy says), never from the tip's build date
    assert verdict["migration_deadline"] == "2028-02-11"
    later = repave.drift(db(engine="15"), fleet_catalog(), TODAY, policy={"migration_deadline_months": 6})
    assert later["migration_deadline"] == "2028-05-11"


def test_pg_eol_by_date_even_when_the_tip_carries_the_major_and_the_instance_is_on_it():
    doc = fleet_catalog(tip_2204="v20260615")
    on_tip = db(engine="15", revision="v20260615")
    # supported on its EOL date, refused the day after
    assert repave.drift(on_tip, doc, "2027-11-11")["verdict"] == "Current"
    verdict = repave.drift(on_tip, doc, "2027-11-12")
    assert verdict["verdict"] == "PGVersionEOL"
    assert verdict["description"].startswith("PostgreSQL 15 is past end of life on 2027-11-11")
    assert "engineVersion 16 or 17; migrate before 2028-02-11" in verdict["description"]
    assert verdict["migration_deadline"] == "2028-02-11"  # end of life + 3 months
    # an EOL override moves the date
    moved = repave.drift(
        db(revision="v20261215"), fleet_catalog(), TODAY, {"postgresql": {"16": "2026-12-01"}}
    )
    assert moved["verdict"] == "PGVersionEOL"
    assert moved["eol_date"] == "2026-12-01"
    assert moved["description"].endswith(
        "engineVersion 17; migrate before 2027-03-01, when it is deleted (migration deadline)"
    )


def test_unknown_engine_version_is_never_offered_a_repave_nor_called_end_of_life():
    verdict = repave.drift(db(engine=None), fleet_catalog(), TODAY)
    assert (verdict["verdict"], verdict["action"]) == ("EngineVersionUnknown", None)
    assert "major is unknown (spec.engineVersion is not set)" in verdict["description"]
    # A Harvester VM repaved directly keeps its major in an annotation: the words name it.
    direct = db(engine=None, engine_field="annotation goldenimage.pipeline/engine-version")
    verdict = repave.drift(direct, fleet_catalog(), TODAY)
    assert verdict["description"].endswith(
        "set annotation goldenimage.pipeline/engine-version to the major it runs (such as 16); it is judged "
        "and repaved once it is known"
    )
    refused = refusal(direct)
    assert refused.reason == "EngineVersionUnknown" and "pg_dump" not in str(refused)
    assert repave.operator_disagreement("EngineVersionUnknown", {"PGVersionEOL": {"status": "True"}}) is None


@pytest.mark.parametrize("stream", ["20.04", "24.04"])
def test_invalid_stream_has_no_target_and_no_action(stream):
    verdict = repave.drift(db(stream=stream), fleet_catalog(), TODAY)
    assert verdict["verdict"] == "InvalidOSStream"
    assert verdict["target"] is None and verdict["action"] is None
    assert stream in verdict["description"] and "validated stream (22.04)" in verdict["description"]
    fix = "validate 24.04" if stream == "24.04" else "register and validate a 20.04 image"
    assert fix in verdict["description"]


def test_verdicts_are_mutually_exclusive_and_match_their_action():
    docs = [fleet_catalog(), fleet_catalog(tip_2204="v20260615")]
    grid = itertools.product(
        docs,
        ["v20260615", "v20261215", None],
        ["15", "16", "17", "18"],
        ["2026-12-20", "2027-12-01"],
        [None, "24.04"],
    )
    seen = set()
    for doc, rev, engine, today, stream in grid:
        verdict = repave.drift(db(revision=rev, engine=engine, stream=stream), doc, today)
        seen.add(verdict["verdict"])
        assert VERDICTS[verdict["verdict"]] == verdict["action"]
        if verdict["verdict"] == "OSUpdateAvailable":
            tip = doc["images"][verdict["target"]]
            assert engine in tip["pg_versions"] and verdict["target"] != rev
            assert not (engine == "15" and today == "2027-12-01")
    assert seen == set(VERDICTS)


def test_policy_is_checked():
    with pytest.raises(PipelineError, match="unknown key"):
        repave.drift(db(), fleet_catalog(), TODAY, policy={"auto_apply_days": 3})
    with pytest.raises(PipelineError, match="forced_apply_after_days -1"):
        repave.drift(db(), fleet_catalog(), TODAY, policy={"forced_apply_after_days": -1})
    with pytest.raises(
        PipelineError, match=r"forced_apply_after_days 0 forces every repave .* at least 1 day"
    ):
        repave.drift(db(), fleet_catalog(), TODAY, policy={"forced_apply_after_days": 0})
    with pytest.raises(
        PipelineError, match="forced_apply_after_days 7 comes before auto_apply_after_days 14"
    ):
        repave.check_policy({"auto_apply_after_days": 14, "forced_apply_after_days": 7})
    assert repave.check_policy({"auto_apply_after_days": 0, "forced_apply_after_days": 1})


# -------------------------------------------------------------------- operator's view


def conditions(os_update=None, pg_eol=None):
    found = {}
    if os_update is not None:
        found["OSUpdateAvailable"] = {"status": os_update, "reason": "x", "message": ""}
    if pg_eol is not None:
        found["PGVersionEOL"] = {"status": pg_eol, "reason": "y", "message": ""}
    return found


def test_operator_agreement():
    assert repave.operator_disagreement("OSUpdateAvailable", conditions("True", "False")) is None
    assert repave.operator_disagreement("PGVersionEOL", conditions("False", "True")) is None
    assert repave.operator_disagreement("Current", conditions("False", "False")) is None
    # an operator that set only one condition leaves the other False
    assert repave.operator_disagreement("PGVersionEOL", conditions(pg_eol="True")) is None
    # nothing said (direct mode, or not reconciled yet)
    assert repave.operator_disagreement("OSUpdateAvailable", {}) is None
    assert repave.operator_disagreement("OSUpdateAvailable", conditions("Unknown")) is None


def test_operator_disagreement_says_both_sides():
    message = repave.operator_disagreement("PGVersionEOL", conditions("True", "False"))
    assert message.startswith("the operator says OSUpdateAvailable=True, PGVersionEOL=False")
    assert "this catalog says PGVersionEOL" in message
    assert repave.operator_disagreement("Current", conditions(os_update="True"))
    assert repave.operator_disagreement("InvalidOSStream", conditions("True", "False"))
    assert repave.operator_disagreement("OSUpdateAvailable", conditions("False", "False"))


# --------------------------------------------------------------------------- preflight


def refusal(instance, target=None, doc=None, today=TODAY, table=None):
    doc = doc or fleet_catalog()
    with pytest.raises(repave.RepaveRefused) as refused:
        repave.preflight(instance, doc, target, signing.record_proof, today, table)
    return refused.value


def test_preflight_passes_a_safe_repave_and_a_rollback():
    doc = fleet_catalog()
    assert repave.preflight(db(), doc, repave.target_of(db(), doc), signing.record_proof, TODAY) is None
    assert repave.preflight(db(), doc, None, signing.record_proof, TODAY) is None
    rollback = repave.target_of(db(revision="v20261215"), doc, "v20260615")
    assert (
        repave.preflight(db(revision="v20261215", engine="15"), doc, rollback, signing.record_proof, TODAY)
        is None
    )


def test_preflight_refuses_an_invalid_stream_first():
    refused = refusal(db(stream="24.04", engine="15", phase="Failed"))
    assert refused.reason == "InvalidOSStream"
    assert str(refused).startswith("tenant-a/db-1 cannot be repaved (InvalidOSStream): OS stream 24.04")
    assert "validated stream (22.04)" in str(refused)
    # an explicit target whose stream is no longer validated is refused too
    doc = fleet_catalog()
    target = {"revision": "v20261201-2404"}
    assert refusal(db(), target, doc).reason == "InvalidOSStream"


def test_preflight_refuses_a_target_without_the_major_then_an_eol_major():
    refused = refusal(db(engine="15", phase="Repaving"))
    assert refused.reason == "RepaveBlockedPGVersionEOL"
    assert refused.name == "db-1"
    assert str(refused) == (
        "tenant-a/db-1 cannot be repaved (RepaveBlockedPGVersionEOL): revision v20261215 does not carry "
        "PostgreSQL 15 and a repave cannot change the major; pg_dump and restore into a DBInstance with "
        "engineVersion 16 or 17"
    )
    doc = fleet_catalog(tip_2204="v20260615")
    past = refusal(db(engine="15", revision="v20250101"), doc=doc, today="2027-11-12")
    assert past.reason == "RepaveBlockedPGVersionEOL"
    assert "PostgreSQL 15 is past end of life on 2027-11-11" in str(past)
    newest = refusal(db(engine="17"), doc=doc, today="2029-12-01")
    assert "carries no newer supported major: register a newer image first" in str(newest)


@pytest.mark.parametrize("phase", ["Repaving", "Failed", "Provisioning", None])
def test_preflight_refuses_an_instance_that_is_not_available(phase):
    refused = refusal(db(phase=phase))
    assert refused.reason == "NotAvailable"
    assert "its phase is %s, not Available" % (phase or "unknown") in str(refused)
    assert "wait until it is Available again" in str(refused)


def test_is_current():
    target = {"revision": "v20261215"}
    assert repave.is_current(db(revision="v20261215"), target)
    assert not repave.is_current(db(), target)
    assert not repave.is_current(db(revision=None), target)
    assert not repave.is_current(db(), None)


def _opt_in_case():
    instances = [
        {"name": "new", "opt_in": None},
        {"name": "stale", "opt_in": "immediate"},
        {"name": "waiting", "opt_in": "next-maintenance"},
        {"name": "done", "opt_in": "immediate"},
        {"name": "busy", "opt_in": "immediate"},
        {"name": "refused", "opt_in": "immediate"},
    ]
    found = {
        "candidates": ["new", "stale", "waiting"],
        "in_flight": ["busy"],
        "entries": {"done": {"result": "current"}, "refused": {"result": "refused"}},
    }
    return instances, found


@pytest.mark.parametrize(
    "opt_in, expected",
    [
        # No opt-in asked: a recorded immediate belonged to an earlier run and goes; next-maintenance stays.
        (None, {"stale": None, "done": None, "refused": None}),
        (
            "next-maintenance",
            {"new": "next-maintenance", "stale": "next-maintenance", "done": None, "refused": None},
        ),
        ("immediate", {"new": "immediate", "waiting": "immediate", "done": None, "refused": None}),
        (
            "undo-opt-in",
            {"stale": None, "waiting": None, "done": None, "busy": None, "refused": None},
        ),
    ],
)
def test_a_run_rewrites_the_recorded_opt_ins_to_what_it_intends(opt_in, expected):
    instances, found = _opt_in_case()
    assert repave.opt_in_changes(instances, lambda i: i["name"], found, opt_in) == expected


def test_immediate_needs_the_instances_named():
    base = {"state": "repaved", "catalog": {"path": "c"}, "window": {"start": "01:00", "end": "02:00"}}
    with pytest.raises(Refusal, match="list the instances to repave now in names"):
        repave.check_request(dict(base, opt_in="immediate"))
    with pytest.raises(Refusal, match="list the instances to repave now in names"):
        repave.check_request(dict(base, opt_in="immediate", names=[]))
    assert repave.check_request(dict(base, opt_in="immediate", names=["a"])) is not None


def test_add_months_clamps_to_the_end_of_a_shorter_month():
    day = datetime.date
    assert repave.add_months(day(2027, 11, 30), 3) == day(2028, 2, 29)
    assert repave.add_months(day(2027, 1, 31), 1) == day(2027, 2, 28)
    assert repave.add_months(day(2027, 10, 15), 3) == day(2028, 1, 15)
    assert repave.add_months(day(2027, 12, 31), 0) == day(2027, 12, 31)


def test_a_bad_migration_deadline_is_refused():
    with pytest.raises(PipelineError, match="migration_deadline_months -1: expected a number of months"):
        repave.drift(db(), fleet_catalog(), TODAY, policy={"migration_deadline_months": -1})


def test_an_instance_never_created_is_reported_as_such_not_as_a_migration():
    never = dict(
        db(engine="15", revision=None),
        phase="Failed",
        available=False,
        reason="UnsupportedEngineVersion",
        message="engineVersion 15 is not in revision v20261215 (stream 22.04); supported: 16, 17",
    )
    verdict = repave.drift(never, fleet_catalog(), TODAY)
    assert verdict["verdict"] == "UnsupportedEngineVersion" and verdict["action"] == "recreate"
    assert verdict["migration_deadline"] is None
    assert "pg_dump" not in verdict["description"].split(";")[-1]
    assert verdict["description"] == (
        "never created (UnsupportedEngineVersion: engineVersion 15 is not in revision v20261215 (stream "
        "22.04); supported: 16, 17): there is no database to repave or pg_dump; delete it and create it "
        "again with engineVersion 16 or 17"
    )
    # A roll-out skips it without refusing the others.
    found = repave.classify(
        [never, db()], fleet_catalog(), lambda i: i["name"] + str(i["revision"]), signing.record_proof
    )
    assert [str(e) for e in found["refused"]] == [] and len(found["candidates"]) == 1
    assert found["entries"]["db-1None"]["result"] == "skipped"
    # Once it ran a revision, a failure is not a creation failure.
    ran = dict(never, revision="v20260615")
    assert repave.drift(ran, fleet_catalog(), TODAY)["verdict"] == "PGVersionEOL"


def test_current_apply_follows_the_opt_in_the_window_and_the_policy():
    window = rollout.parse_window({"days": ["sun"], "start": "01:00", "end": "05:00", "timezone": "UTC"})
    now = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)  # a Tuesday
    pending = {"action": "os-repave", "auto_apply_after": "2026-12-10", "forced_apply": "2026-12-31"}
    assert repave.current_apply(pending, "immediate", window, now) == "2026-12-01T12:00:00Z"
    assert repave.current_apply(pending, "next-maintenance", window, now) == "2026-12-06T01:00:00Z"
    # no opt-in: the first window from the auto-apply date on (Sunday 13th), before the forced date
    assert repave.current_apply(pending, None, window, now) == "2026-12-13T01:00:00Z"
    # no window: never by the auto-apply date, only at the forced-apply date
    assert repave.current_apply(pending, None, None, now) == "2026-12-31T00:00:00Z"
    forced_first = dict(pending, auto_apply_after=None, forced_apply="2026-12-02")
    assert repave.current_apply(forced_first, None, window, now) == "2026-12-02T00:00:00Z"
    assert repave.current_apply({"action": "os-repave"}, None, window, now) is None
    assert repave.current_apply(dict(pending, action="pg-major-migration"), "immediate", window, now) is None


def test_a_condensed_report_leaves_out_current_instances_and_puts_more_than_a_repave_first():
    entries = [
        {"name": "a", "verdict": repave.CURRENT},
        {"name": "b", "verdict": repave.OS_UPDATE},
        {"name": "c", "verdict": repave.PG_EOL},
        {"name": "d", "verdict": repave.OS_UPDATE},
        {"name": "e", "verdict": repave.INVALID_STREAM},
    ]
    kept, omitted = repave.condense_report(entries, limit=10)
    assert [e["name"] for e in kept] == ["c", "e", "b", "d"] and omitted == 1
    kept, omitted = repave.condense_report(entries, limit=1)
    assert [e["name"] for e in kept] == ["c"] and omitted == 4
    assert repave.condense_report(entries, limit=-3) == ([], 5)


# ---------------------------------------------------------------- the one engineVersion rule


def one_rule_catalog():
    """The default stream's tip carries 15 to 17 and 19, a major the EOL table does not know."""
    doc = catalog.empty()
    for name, majors in (("v20260615", ["14", "15", "16", "17"]), ("v20261215", ["15", "16", "17", "19"])):
        doc, _changed = catalog.register_image(
            doc, name, "22.04", majors, "c" * 128, "s3://mirror/" + name, imported=True
        )
    doc, _changed = catalog.set_stream(doc, "22.04", tip="v20261215", validated=True, default=True)
    return doc


@pytest.mark.parametrize("today", ["2026-12-20", "2027-11-12", "2028-11-10"])
@pytest.mark.parametrize("engine", ["14", "15", "16", "17", "18", "19", "16.x"])
def test_preflight_refuses_exactly_what_a_new_database_is_refused(engine, today):
    """A repave onto the default stream's tip keeps the major; the pre-flight and the drift report
    allow it exactly when a new database may ask for that major there (catalog.resolve_engine_version)."""
    doc = one_rule_catalog()
    try:
        catalog.resolve_engine_version(doc, engine, today=today)
        allowed = True
    except catalog.CatalogError:
        allowed = False
    instance = db(engine=engine)
    try:
        repave.preflight(instance, doc, None, signing.record_proof, today)
        repaved = True
    except repave.RepaveRefused as exc:
        assert exc.reason == "RepaveBlockedPGVersionEOL"
        repaved = False
    assert repaved == allowed, (engine, today)
    verdict = repave.drift(instance, doc, today)["verdict"]
    assert verdict == ("OSUpdateAvailable" if allowed else "PGVersionEOL")


def test_a_major_the_eol_table_does_not_know_is_never_repaved():
    refused = refusal(db(engine="19"), doc=one_rule_catalog())
    assert str(refused) == (
        "tenant-a/db-1 cannot be repaved (RepaveBlockedPGVersionEOL): PostgreSQL 19 has no end-of-life "
        "date, so it is not a supported major and a repave cannot change the major; revision v20261215 "
        "carries no newer supported major: register a newer image first"
    )


def test_a_running_database_without_engine_version_is_not_given_the_default_major():
    """A new database without engineVersion gets the newest major of the default tip; a running one
    without it runs an unknown major, which a repave must not guess."""
    doc = one_rule_catalog()
    assert catalog.check_engine_version(doc, None, "2026-12-20")["major"] == "17"
    verdict = catalog.check_engine_version(doc, None, "2026-12-20", target="v20261215")
    assert (verdict["problem"], verdict["major"]) == ("unset", None)
    assert "spec.engineVersion is not set" in str(refusal(db(engine=None), doc=doc))
    with pytest.raises(catalog.CatalogError, match="revision v20990101 is not in the catalog"):
        catalog.check_engine_version(doc, "16", "2026-12-20", target="v20990101")


def test_maintenance_dates_count_from_the_day_a_revision_was_validated_never_from_an_old_name():
    """A revision named after 2025-06-01 but smoke-tested (validated) on 2026-12-04 is offered from
    2026-12-04: a forced-apply date counted from its name would already have passed for every database."""
    doc = fleet_catalog()
    image = doc["images"]["v20261215"]
    image["build_date"] = "2025-06-01"
    image["smoke_tests"] = [
        {"result": "failed", "at": "2026-12-20T09:00:00Z"},
        {"result": "passed", "at": "2026-12-04T10:00:00Z"},
    ]
    target = repave.target_of(db(), doc)
    assert target["available_since"] == "2026-12-04"
    policy = {"auto_apply_after_days": 14, "forced_apply_after_days": 45}
    verdict = repave.drift(db(), doc, today="2026-12-05", policy=policy)
    assert (verdict["auto_apply_after"], verdict["forced_apply"]) == ("2026-12-18", "2027-01-18")


def test_the_rollout_line_names_what_started_each_repave_and_what_waits():
    assert repave.rollout_line({}, [], None, True) == "would start: nothing"
    line = repave.rollout_line(
        {"b-db": "next-maintenance", "a-db": "forced-apply"}, ["c-db"], "2026-08-30T23:00:00Z", False
    )
    assert line == (
        "started: a-db (forced-apply), b-db (next-maintenance); still pending: c-db "
        "(next window 2026-08-30T23:00:00Z)"
    )
