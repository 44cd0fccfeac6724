import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.errors import PipelineError, Refusal
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
    failed, result = eol_guard.run(params(pg_versions=["13", "16"]))
    assert failed
    assert result["msg"] == (
        "EOL guard (build date 2026-11-29): PostgreSQL 13 reached end of life on 2025-11-13; "
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
    with pytest.raises(ValueError):
        eol_guard.run(params(**bad))


def test_the_runner_returns_or_raises_and_never_exits():
    result = eol_guard.check(params())
    assert result["violations"] == [] and "msg" not in result
    with pytest.raises(PipelineError) as exc:
        eol_guard.check(params(pg_versions=["13", "16"]))
    assert exc.value.msg.startswith("EOL guard (build date 2026-11-29): PostgreSQL 13")
    assert exc.value.result["violations"][0]["version"] == "13"
    with pytest.raises(PipelineError, match="eol_guard: pg_versions is empty"):
        eol_guard.check(params(pg_versions=[]))


@pytest.mark.parametrize(("option", "value"), [("os_version", 24.1), ("pg_versions", [16.0, 17])])
def test_a_yaml_float_version_is_refused_with_quote_it(option, value):
    with pytest.raises(Refusal, match="quote it") as exc:
        eol_guard.check(params(**{option: value}))
    assert "option %s" % option in exc.value.msg
