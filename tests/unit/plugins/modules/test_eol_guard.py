import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal
from ansible_collections.goldenimage.pipeline.plugins.modules import eol_guard


def params(**overrides):
    base = {
        "pg_versions": ["15", "16", "17"],
        "os_version": "22.04",
        "today": "2026-11-29",
        "eol_overrides": {},
    }
    base.update(overrides)
    return base


def test_supported_request_passes():
    failed, result = eol_guard.run(params())
    assert not failed
    assert result["changed"] is False
    assert result["pg_supported"] == ["15", "16", "17", "18"]
    assert result["violations"] == []


def test_past_eol_fails_with_message():
    failed, result = eol_guard.run(params(pg_versions=["13", "16"]), now="2026-11-29")
    assert failed
    assert result["msg"] == (
        "EOL guard (judged on 2026-11-29): PostgreSQL 13 reached end of life on 2025-11-13; "
        "supported: 15, 16, 17, 18"
    )


def test_os_stream_past_eol():
    failed, result = eol_guard.run(params(today="20270501"))
    assert failed
    assert "Ubuntu 22.04 reached end of life on 2027-04-30; supported: 24.04" in result["msg"]


def test_overrides_reach_the_table():
    overrides = {"postgresql": {"19": "2031-11-13"}}
    failed, _result = eol_guard.run(params(pg_versions=["19"], eol_overrides=overrides))
    assert not failed


@pytest.mark.parametrize("bad", [{"pg_versions": []}, {"pg_versions": ["16.4"]}, {"today": "soon"}])
def test_bad_input_raises(bad):
    with pytest.raises(PipelineError):
        eol_guard.run(params(**bad))


def test_the_runner_returns_or_raises_and_never_exits():
    result = eol_guard.check(params())
    assert result["violations"] == [] and "msg" not in result
    with pytest.raises(PipelineError) as exc:
        eol_guard.check(params(pg_versions=["13", "16"]), now="2026-11-29")
    assert exc.value.msg.startswith("EOL guard (judged on 2026-11-29): PostgreSQL 13")
    assert exc.value.result["violations"][0]["version"] == "13"
    with pytest.raises(PipelineError, match="eol_guard: pg_versions is empty"):
        eol_guard.check(params(pg_versions=[]))


def test_a_yaml_float_version_is_refused_with_quote_it():
    with pytest.raises(Refusal, match="quote it") as exc:
        eol_guard.check(params(os_version=24.1))
    assert "option os_version" in exc.value.msg


@pytest.mark.parametrize("value", [16.0, "16.0"])
def test_a_major_with_zeros_gets_one_answer_as_a_number_or_a_string(value):
    with pytest.raises(Refusal) as exc:
        eol_guard.check(params(pg_versions=[value, 17]))
    assert exc.value.msg.startswith("option pg_versions: PostgreSQL major ")
    assert "a major is a whole number, so write 16" in exc.value.msg


def test_a_build_date_in_the_past_does_not_let_an_eol_major_through():
    # PostgreSQL 13 reached its end on 2025-11-13: a build dated before it is still judged today.
    failed, result = eol_guard.run(params(pg_versions=["13", "16"], today="20250101"), now="2026-12-06")
    assert failed and result["today"] == "2026-12-06" and result["build_date"] == "2025-01-01"
    assert [v["version"] for v in result["violations"]] == ["13"]
    # and on the wall clock itself, which is past that end whenever this runs
    failed, result = eol_guard.run(params(pg_versions=["13"], today="20250101"))
    assert failed and result["today"] > "2025-11-13"


def test_a_build_date_in_the_future_is_judged_on_that_day():
    failed, result = eol_guard.run(params(today="20270501"), now="2026-12-06")
    assert failed and result["today"] == "2027-05-01"


def test_an_override_that_moves_an_end_later_is_reported():
    overrides = {"postgresql": {"15": "2028-05-11", "19": "2031-11-13", "16": "2028-01-01"}}
    failed, result = eol_guard.run(params(eol_overrides=overrides), now="2026-12-06")
    assert not failed
    assert result["extended"] == [
        {
            "kind": "postgresql",
            "version": "15",
            "default": "2027-11-11",
            "override": "2028-05-11",
            "message": "PostgreSQL 15: end of life moved from 2027-11-11 to 2028-05-11 by an override",
        }
    ]
