import datetime

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import eol
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError


def test_default_table_dates():
    table = eol.eol_table()
    assert table[eol.PG]["13"] == datetime.date(2025, 11, 13)
    assert table[eol.PG]["18"] == datetime.date(2030, 11, 14)
    # A month means its last day.
    assert table[eol.OS]["22.04"] == datetime.date(2027, 4, 30)
    assert table[eol.OS]["24.04"] == datetime.date(2029, 4, 30)


@pytest.mark.parametrize(
    "value,expected",
    [
        ("2027-04", datetime.date(2027, 4, 30)),
        ("2028-02", datetime.date(2028, 2, 29)),
        ("2025-11-13", datetime.date(2025, 11, 13)),
        (datetime.date(2030, 1, 1), datetime.date(2030, 1, 1)),
    ],
)
def test_parse_eol_date(value, expected):
    assert eol.parse_eol_date(value) == expected


@pytest.mark.parametrize("value", ["2027-13", "2027-02-30", "April 2027", ""])
def test_parse_eol_date_refuses(value):
    with pytest.raises(PipelineError, match="EOL"):
        eol.parse_eol_date(value)


def test_parse_today_forms():
    assert eol.parse_today("20261129") == datetime.date(2026, 11, 29)
    assert eol.parse_today("2026-11-29") == datetime.date(2026, 11, 29)
    assert eol.parse_today(None) == datetime.datetime.now(datetime.UTC).date()
    with pytest.raises(PipelineError, match="today"):
        eol.parse_today("29/11/2026")


def test_supported_on_build_date():
    assert eol.supported_pg_majors("2026-11-29") == ["15", "16", "17", "18"]
    # Supported on the EOL day itself, refused the day after.
    assert "14" in eol.supported_pg_majors("2026-11-12")
    assert "14" not in eol.supported_pg_majors("2026-11-13")
    assert eol.supported_os_streams("2027-04-30") == ["22.04", "24.04"]
    assert eol.supported_os_streams("2027-05-01") == ["24.04"]


def test_check_eol_clean():
    assert eol.check_eol([15, "16", 17], "22.04", "2026-11-29") == []


@pytest.mark.parametrize("value", [16.0, "16.0", " 16.00 "])
def test_a_major_with_a_fraction_of_zeros_gets_one_answer_as_a_number_or_a_string(value):
    with pytest.raises(eol.InvalidValue, match=r"a major is a whole number, so write 16$"):
        eol.normalize_pg_major(value)


def test_check_eol_past_pg_majors():
    violations = eol.check_eol([13, 14, 15], "24.04", "2026-11-29")
    assert [(v["version"], v["eol"], v["reason"]) for v in violations] == [
        ("13", "2025-11-13", "past_eol"),
        ("14", "2026-11-12", "past_eol"),
    ]
    assert violations[0]["supported"] == ["15", "16", "17", "18"]


def test_check_eol_os_stream_past_and_unknown():
    violations = eol.check_eol([16], "22.04", "2027-05-01")
    assert violations[0]["kind"] == eol.OS
    assert violations[0]["message"] == "Ubuntu 22.04 reached end of life on 2027-04-30; supported: 24.04"
    ended = eol.check_eol([16], "20.04", "2026-01-01")
    assert (ended[0]["reason"], ended[0]["eol"]) == ("past_eol", "2025-05-31")
    assert ended[0]["message"] == "Ubuntu 20.04 reached end of life on 2025-05-31; supported: 22.04, 24.04"
    assert eol.check_eol([12], None, "2026-01-01")[0]["reason"] == "past_eol"
    unknown = eol.check_eol([16], "21.04", "2026-01-01")
    assert unknown[0]["reason"] == "unknown"
    assert "no EOL date" in unknown[0]["message"]


def test_unknown_pg_major_refused():
    violations = eol.check_eol([19], None, "2026-11-29")
    assert violations[0]["reason"] == "unknown"
    assert "PostgreSQL 19" in violations[0]["message"]


def test_overrides_add_and_move_dates():
    table = {"postgresql": {"19": "2031-11-13", 15: "2026-01-01"}, "ubuntu": {"26.04": "2031-04"}}
    assert eol.supported_pg_majors("2026-11-29", table) == ["16", "17", "18", "19"]
    assert eol.check_eol([19], "26.04", "2026-11-29", table) == []


def test_overrides_refuse_unknown_key():
    with pytest.raises(PipelineError, match="unknown key"):
        eol.eol_table({"postgres": {"19": "2031-11-13"}})


@pytest.mark.parametrize("value", ["15.4", "abc", True, 0])
def test_normalize_pg_major_refuses(value):
    with pytest.raises(PipelineError, match="major version"):
        eol.normalize_pg_major(value)


def test_guard_message_names_version_date_and_supported_set():
    with pytest.raises(eol.EOLViolation) as info:
        eol.eol_guard([13, 15, 16, 17], "22.04", "2026-11-29")
    message = str(info.value)
    assert "judged on 2026-11-29" in message
    assert "PostgreSQL 13 reached end of life on 2025-11-13" in message
    assert "supported: 15, 16, 17, 18" in message
    assert isinstance(info.value, PipelineError)
    assert [v["version"] for v in info.value.violations] == ["13"]


def test_guard_passes_with_supported_sets():
    result = eol.eol_guard(["15", "16", "17"], "24.04", datetime.date(2026, 11, 29))
    assert result == {
        "today": "2026-11-29",
        "pg_supported": ["15", "16", "17", "18"],
        "os_supported": ["22.04", "24.04"],
    }


def test_the_default_table_is_parsed_once_and_each_caller_gets_its_own_copy():
    first = eol.eol_table()
    first[eol.PG]["16"] = None
    second = eol.eol_table()
    assert second[eol.PG]["16"] is not None and second == eol.eol_table({})
    assert second[eol.PG] is not eol.eol_table()[eol.PG]


def test_the_judging_day_is_the_later_of_the_clock_and_the_build_date():
    assert eol.judging_day("20250101", now="2026-12-06").isoformat() == "2026-12-06"
    assert eol.judging_day("20270101", now="2026-12-06").isoformat() == "2027-01-01"
    assert eol.judging_day(None, now="2026-12-06").isoformat() == "2026-12-06"


def test_extensions_are_overrides_moving_a_known_end_later():
    assert eol.extensions(None) == []
    found = eol.extensions(
        {"ubuntu": {"22.04": "2032-04"}, "postgresql": {"13": "2025-01-01", "20": "2032-11-11"}}
    )
    assert [(e["kind"], e["version"], e["default"], e["override"]) for e in found] == [
        ("ubuntu", "22.04", "2027-04-30", "2032-04-30")
    ]
