"""The Kube-DC seeder's resync: the platform's 15 minutes unless the lab is told otherwise."""

from __future__ import annotations

import pytest

from tests.lab import Lab
from tests.lab.controllers.kubedc import DEFAULT_RESYNC_SECONDS, RESYNC_ENV, resync_interval


def test_the_default_is_the_platforms_fifteen_minutes(monkeypatch):
    monkeypatch.delenv(RESYNC_ENV, raising=False)
    assert resync_interval() == DEFAULT_RESYNC_SECONDS == 900


def test_an_explicit_value_wins_over_the_environment(monkeypatch):
    monkeypatch.setenv(RESYNC_ENV, "30")
    assert resync_interval() == 30
    assert resync_interval(0.5) == 0.5


@pytest.mark.parametrize("value", ["0", "-1", "soon"])
def test_a_bad_value_is_refused_before_the_lab_starts(tmp_path, monkeypatch, value):
    monkeypatch.setenv(RESYNC_ENV, value)
    with pytest.raises(ValueError):
        Lab(tmp_path / "lab")
    assert not (tmp_path / "lab").exists()
