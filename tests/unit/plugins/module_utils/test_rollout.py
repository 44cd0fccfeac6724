import datetime
import zoneinfo

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.repave import rollout

UTC = datetime.UTC
BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")
NEW_YORK = zoneinfo.ZoneInfo("America/New_York")
HOUR = datetime.timedelta(hours=1)


def utc(*parts):
    return datetime.datetime(*parts, tzinfo=UTC)


def berlin(*parts):
    return datetime.datetime(*parts, tzinfo=BERLIN)


# ----------------------------------------------------------------------- max_unavailable


@pytest.mark.parametrize(
    "value, total, expected",
    [
        (3, 10, 3),
        ("2", 10, 2),
        (12, 10, 12),
        ("25%", 10, 2),  # 2.5 rounds down
        ("10%", 5, 1),  # 0.5 rounds down to 0, but at least 1
        ("50%", 0, 1),
        ("100%", 7, 7),
        ("33%", 100, 33),
        (" 20 % ", 50, 10),
    ],
)
def test_max_unavailable_counts_and_percentages(value, total, expected):
    assert rollout.parse_max_unavailable(value, total) == expected


@pytest.mark.parametrize(
    "value, message",
    [
        (0, "at least 1"),
        (-2, "at least 1"),
        ("0%", "between 1% and 100%"),
        ("101%", "between 1% and 100%"),
        ("-5%", "between 1% and 100%"),
        ("abc", "expected a count"),
        ("5%%", "expected a count"),
        ("", "expected a count"),
        (None, "expected a count"),
        (True, "expected a count"),
        (1.5, "expected a count"),
    ],
)
def test_max_unavailable_refusals(value, message):
    with pytest.raises(PipelineError, match=message):
        rollout.parse_max_unavailable(value, 10)


# ------------------------------------------------------------------------------ windows


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"start": "22:00", "end": "22:00"}, "both 22:00"),
        ({"start": "25:00", "end": "04:00"}, r"window.start '25:00'"),
        ({"start": "22:00", "end": "4"}, "window.end '4'"),
        ({"end": "04:00"}, "window.start None"),
        ({"days": ["mon", "funday"], "start": "22:00", "end": "04:00"}, "'funday' is not a day"),
        ({"days": [], "start": "22:00", "end": "04:00"}, "days is empty"),
        ({"start": "22:00", "end": "04:00", "timezone": "Mars/Olympus"}, "not an IANA time zone"),
        ({"start": "22:00", "end": "04:00", "tz": "UTC"}, "unknown key"),
        ("22:00-04:00", "expected a mapping"),
    ],
)
def test_window_refusals(spec, message):
    with pytest.raises(PipelineError, match=message):
        rollout.parse_window(spec)


def test_window_defaults_and_description():
    assert rollout.parse_window(None) is None
    every = rollout.parse_window({"start": "01:00", "end": "03:00"})
    assert every.describe() == "every day 01:00-03:00 UTC"
    assert every.to_dict() == {
        "days": list(rollout.DAYS),
        "start": "01:00",
        "end": "03:00",
        "timezone": "UTC",
    }
    night = rollout.parse_window(
        {"days": ["Friday", "mon"], "start": "22:00", "end": "4:00", "timezone": "Europe/Berlin"}
    )
    assert night.describe() == "mon,fri 22:00-04:00 Europe/Berlin (ends the next day)"
    with pytest.raises(PipelineError, match="aware datetime"):
        night.contains(datetime.datetime(2026, 6, 5, 23, 0))


def test_window_across_midnight_belongs_to_the_day_it_starts_on():
    window = rollout.parse_window(
        {"days": ["fri"], "start": "22:00", "end": "04:00", "timezone": "Europe/Berlin"}
    )
    assert berlin(2026, 6, 5).weekday() == 4  # a Friday
    assert window.contains(berlin(2026, 6, 5, 22, 0))
    assert window.contains(berlin(2026, 6, 5, 23, 30))
    assert window.contains(berlin(2026, 6, 6, 3, 59))  # Saturday morning: still Friday's window
    assert not window.contains(berlin(2026, 6, 6, 4, 0))  # the end is exclusive
    assert not window.contains(berlin(2026, 6, 5, 21, 59))
    assert not window.contains(berlin(2026, 6, 6, 23, 0))  # Saturday night: no window
    assert not window.contains(berlin(2026, 6, 5, 3, 0))  # Friday morning belongs to Thursday
    # the same instant given in UTC
    assert window.contains(utc(2026, 6, 6, 1, 0))
    assert window.closes_at(berlin(2026, 6, 5, 23, 0)) == utc(2026, 6, 6, 2, 0)
    assert window.closes_at(berlin(2026, 6, 6, 12, 0)) is None


def test_next_open_across_days():
    window = rollout.parse_window(
        {"days": ["fri"], "start": "22:00", "end": "04:00", "timezone": "Europe/Berlin"}
    )
    # open now: now
    assert window.next_open(berlin(2026, 6, 6, 1, 0)) == utc(2026, 6, 5, 23, 0)
    # Saturday after the close: next Friday evening
    assert window.next_open(berlin(2026, 6, 6, 4, 0)) == utc(2026, 6, 12, 20, 0)
    # Wednesday: this Friday
    assert window.next_open(berlin(2026, 6, 3, 9, 0)) == utc(2026, 6, 5, 20, 0)
    weekly = rollout.parse_window({"days": ["mon"], "start": "09:00", "end": "10:00"})
    assert weekly.next_open(utc(2026, 6, 8, 10, 0)) == utc(2026, 6, 15, 9, 0)
    assert weekly.next_open(utc(2026, 6, 8, 8, 59)) == utc(2026, 6, 8, 9, 0)


def test_fits_at_the_edge_and_next_fit():
    window = rollout.parse_window(
        {"days": ["fri"], "start": "22:00", "end": "04:00", "timezone": "Europe/Berlin"}
    )
    now = berlin(2026, 6, 6, 3, 0)
    assert window.fits(now, 3600)  # ends exactly at the close
    assert not window.fits(now, 3601)
    assert not window.fits(berlin(2026, 6, 6, 5, 0), 60)  # closed
    assert window.next_fit(now, 3600) == now.astimezone(UTC)
    assert window.next_fit(now, 3601) == utc(2026, 6, 12, 20, 0)
    assert window.next_fit(now, 7 * 3600) is None  # no window of the week is that long


@pytest.mark.parametrize(
    "zone, day, opens, hours",
    [
        (
            BERLIN,
            datetime.date(2026, 3, 29),
            utc(2026, 3, 29, 0, 0),
            1,
        ),  # spring forward: 02:00-03:00 missing
        (BERLIN, datetime.date(2026, 10, 25), utc(2026, 10, 24, 23, 0), 3),  # fall back: 02:00-03:00 twice
        (BERLIN, datetime.date(2026, 6, 14), utc(2026, 6, 13, 23, 0), 2),
        (NEW_YORK, datetime.date(2026, 3, 8), utc(2026, 3, 8, 6, 0), 1),
        (NEW_YORK, datetime.date(2026, 11, 1), utc(2026, 11, 1, 5, 0), 3),
        (NEW_YORK, datetime.date(2026, 7, 5), utc(2026, 7, 5, 5, 0), 2),
    ],
)
def test_window_length_follows_the_wall_clock_on_dst_days(zone, day, opens, hours):
    assert day.weekday() == 6  # every changeover here is on a Sunday
    window = rollout.parse_window({"days": ["sun"], "start": "01:00", "end": "03:00", "timezone": str(zone)})
    midnight = datetime.datetime.combine(day, datetime.time(0, 0), tzinfo=zone)
    assert window.next_open(midnight) == opens
    assert window.closes_at(opens) - opens == hours * HOUR
    assert window.fits(opens, hours * 3600) and not window.fits(opens, hours * 3600 + 1)
    assert not window.contains(opens + hours * HOUR)


def test_window_start_in_the_spring_forward_gap_opens_at_the_jump():
    window = rollout.parse_window({"start": "02:30", "end": "04:00", "timezone": "Europe/Berlin"})
    opens = window.next_open(berlin(2026, 3, 29, 0, 0))
    assert opens == utc(2026, 3, 29, 1, 0)  # 03:00 CEST, the first wall-clock minute after 02:30
    assert window.local(opens).strftime("%H:%M %Z") == "03:00 CEST"
    assert window.closes_at(opens) - opens == HOUR


def test_overnight_window_across_the_spring_forward_night_is_an_hour_shorter():
    window = rollout.parse_window(
        {"days": ["sat"], "start": "22:00", "end": "06:00", "timezone": "Europe/Berlin"}
    )
    opens = window.next_open(berlin(2026, 3, 28, 12, 0))
    assert opens == utc(2026, 3, 28, 21, 0)
    assert window.closes_at(opens) == utc(2026, 3, 29, 4, 0)  # 7 hours, not 8
    assert window.contains(berlin(2026, 3, 29, 5, 59))


# ------------------------------------------------------------------------- selectors, order


@pytest.mark.parametrize(
    "selector, expected",
    [
        ("", True),
        ("role=standby", True),
        ("role==standby", True),
        ("role=primary", False),
        ("role!=primary", True),
        ("zone!=a", True),  # absent key: != holds
        ("role", True),
        ("!role", False),
        ("!zone", True),
        ("tier in (gold, silver)", True),
        ("tier in (bronze)", False),
        ("zone in (a)", False),
        ("tier notin (bronze)", True),
        ("zone notin (a)", True),
        ("role=standby, tier in (gold,silver), !zone", True),
        ("role=standby,tier=bronze", False),
    ],
)
def test_match_selector(selector, expected):
    assert rollout.match_selector({"role": "standby", "tier": "gold"}, selector) is expected


@pytest.mark.parametrize("selector", ["role=(x)", "tier in gold", "=x", "a b"])
def test_match_selector_refuses_what_it_cannot_read(selector):
    with pytest.raises(PipelineError, match="cannot read"):
        rollout.match_selector({}, selector)


def inst(name, revision="v1", available=True, **labels):
    return {"name": name, "revision": revision, "available": available, "labels": labels}


def test_order_puts_groups_first_then_the_rest_by_name():
    fleet = [
        inst("d"),
        inst("c", role="primary"),
        inst("b", role="standby"),
        inst("a"),
        inst("e", role="standby"),
    ]
    groups = [{"label_selector": "role=standby"}, {"label_selector": "role=primary"}]
    ordered = rollout.order_instances(fleet, groups, rollout.match_selector)
    assert [i["name"] for i in ordered] == ["b", "e", "c", "a", "d"]
    assert [i["name"] for i in rollout.order_instances(fleet, None)] == ["a", "b", "c", "d", "e"]
    # any matcher can be passed
    ordered = rollout.order_instances(fleet, ["first"], lambda labels, sel: labels.get("role") == "primary")
    assert [i["name"] for i in ordered] == ["c", "a", "b", "d", "e"]
    with pytest.raises(PipelineError, match="each group is"):
        rollout.order_instances(fleet, [{"selector": "x"}])


# --------------------------------------------------------------------------------- plan


def targets_for(fleet, revision="v2"):
    return {i["name"]: {"revision": revision} for i in fleet}


def test_plan_batches_in_order_and_skips_current_ones():
    fleet = [inst("db-%02d" % n) for n in range(7)] + [
        inst("sb-1", role="standby"),
        inst("sb-2", role="standby"),
    ]
    fleet[3]["revision"] = "v2"  # already current
    targets = targets_for(fleet)
    del targets["db-05"]  # no target (refused stream): not planned
    batches = rollout.plan(fleet, targets, 3, [{"label_selector": "role=standby"}])
    assert batches == [["sb-1", "sb-2", "db-00"], ["db-01", "db-02", "db-04"], ["db-06"]]
    assert rollout.plan(fleet, targets, 100) == [
        ["db-00", "db-01", "db-02", "db-04", "db-06", "sb-1", "sb-2"]
    ]
    done = [inst("a", "v2"), inst("b", "v2")]
    assert rollout.plan(done, targets_for(done), 1) == []


def test_plan_counts_unavailable_instances_against_the_first_batch():
    fleet = [inst("a"), inst("b"), inst("c"), inst("d"), inst("e"), inst("x", "v2", available=False)]
    batches = rollout.plan(fleet, targets_for(fleet), 2)
    assert batches == [["a"], ["b", "c"], ["d", "e"]]
    # a pending instance already down (a repave in progress) leads the first batch
    fleet[3]["available"] = False
    assert rollout.plan(fleet, targets_for(fleet), 2) == [["d"], ["a", "b"], ["c", "e"]]
    # the budget is used up: nothing may start now
    fleet.append(inst("y", "v2", available=False))
    assert rollout.plan(fleet, targets_for(fleet), 2) == [[], ["d", "a"], ["b", "c"], ["e"]]


def test_plan_never_exceeds_max_unavailable():
    fleet = [inst("db-%02d" % n, available=n % 7 != 0) for n in range(50)]
    fleet += [inst("z-1", "v2", available=False), inst("z-2", "v2", available=False)]
    for budget in (1, 2, 3, 5, 10):
        batches = rollout.plan(fleet, targets_for(fleet), budget)
        assert all(len(b) <= budget for b in batches)
        # the two current instances that are down hold part of the first batch's budget
        assert len(batches[0]) == max(budget - 2, 0)
        assert sorted(n for b in batches for n in b) == ["db-%02d" % n for n in range(50)]
    with pytest.raises(PipelineError, match="expected a count >= 1"):
        rollout.plan(fleet, targets_for(fleet), 0)


def test_estimate_batch_seconds():
    assert rollout.estimate_batch_seconds([40, 95.5, None, 60], 300) == 95.5
    assert rollout.estimate_batch_seconds([], 300) == 300.0
    assert rollout.estimate_batch_seconds(None, 120) == 120.0
    with pytest.raises(PipelineError, match="seconds > 0"):
        rollout.estimate_batch_seconds([], 0)


def test_a_timed_out_repave_is_stuck_only_when_it_showed_no_progress():
    assert rollout.stall_verdict(2.9, 3, "StoppingVM") == "stuck: no progress for 3s at step StoppingVM"
    assert (
        rollout.stall_verdict(0.4, 3, "StoppingVM")
        == "still working at step StoppingVM: last progress 0s ago"
    )
    # half the timeout, or a minute for long timeouts
    assert rollout.stall_verdict(61, 1800).startswith("stuck: no progress for 61s")
    assert rollout.stall_verdict(59, 1800).startswith("still working: last progress 59s ago")


# ----------------------------------------------------------------------- rounds of a roll-out


def test_a_later_round_waits_on_what_it_started_and_never_plans_what_finished():
    found = {
        "candidates": ["cleared", "fresh", "failed"],
        "in_flight": ["repaving"],
        "entries": {"landed": {"result": "current"}, "old": {"result": "current"}},
        "targets": {},
    }
    started = ["cleared", "repaving", "landed", "failed"]
    resumed, landed = rollout.resume_plan(found, started, {"failed": "failed"})
    # Started and showing no repave any more: looked at (the operator ended it), never triggered again.
    assert resumed["in_flight"] == ["repaving", "cleared"]
    assert resumed["candidates"] == ["fresh"]
    # Started, on its target now, and no round saw it finish: it ended between two rounds.
    assert landed == ["landed"]
    assert found["candidates"] == ["cleared", "fresh", "failed"]  # the answer given is not changed


def test_the_first_round_plans_what_classify_says():
    found = {"candidates": ["a"], "in_flight": ["b"], "entries": {}}
    assert rollout.resume_plan(found, (), ()) == (dict(found), [])


def test_the_wait_for_a_batch_begins_when_its_first_repave_began():
    assert rollout.batch_started({"a": 100.0, "b": 130.0}, ["a", "b"]) == 100.0
    assert rollout.batch_started({}, ["a"]) is None


def test_the_fleet_line_names_counts_what_repaves_and_elapsed():
    line = rollout.fleet_line(3, 50, ["db-07: Repaving (StoppingVM)"], 1, 40, 95.4, "batch db-07")
    assert line == (
        "fleet: 3/50 repaved (6%), 1 repaving (db-07: Repaving (StoppingVM)), 1 failed, 40 not started; "
        "batch db-07; elapsed 95s"
    )
    assert (
        rollout.fleet_line(0, 0, [], 0, 0, 0)
        == "fleet: 0/0 repaved (100%), 0 repaving, 0 failed, 0 not started; elapsed 0s"
    )
