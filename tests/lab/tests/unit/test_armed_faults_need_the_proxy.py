"""A test that arms a request fault knob while none of its requests went through the fault proxy fails:
its clients used kube-apiserver's own address, where no fault applies (fixtures.py). Object faults act on
the controllers, not on requests, and need no proxy."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.lab.faults import Faults
from tests.lab.tests.unit.cases import run_cases

CASES = """
import pytest

from tests.lab import RUNNING
from tests.lab.faults import Faults


class FakeLab:
    state_dir = "/tmp/fake-lab"
    front_url = "https://127.0.0.1:1"

    def __init__(self):
        self.faults = Faults()
        self.forwarded = 0

    def fault_use(self):
        return self.faults.armed, self.forwarded


LAB = FakeLab()
RUNNING.add(LAB)


def test_armed_but_bypassed():
    LAB.faults.update({"conflict_rate": 0.5})
    LAB.faults.reset()


def test_armed_and_through_the_proxy():
    LAB.faults.update({"error_rate": 1.0})
    LAB.forwarded += 1
    LAB.faults.reset()


def test_object_faults_need_no_proxy():
    LAB.faults.update({"objects": {"Job/ns/x": "stuck"}})
    LAB.faults.reset()


@pytest.mark.fault_knobs_only
def test_the_knobs_own_test():
    LAB.faults.update({"latency_ms": 5})
    LAB.faults.reset()
"""


def test_a_test_whose_clients_bypass_the_armed_faults_fails(tmp_path):
    code, out = run_cases(tmp_path, CASES)
    assert code == 1, out
    assert "4 passed, 1 error" in out, out  # the bypassing test errs at its teardown
    assert "ERROR at teardown of test_armed_but_bypassed" in out, out
    assert "no request went through the fault proxy (https://127.0.0.1:1)" in out, out
    assert "lab.fault_kubeconfig" in out, out


KNOBS = st.fixed_dictionaries(
    {},
    optional={
        "conflict_rate": st.floats(0, 1),
        "error_rate": st.floats(0, 1),
        "drop_rate": st.floats(0, 1),
        "commit_drop_rate": st.floats(0, 1),
        "latency_ms": st.integers(0, 500),
        "seed": st.integers(0, 9),
        "objects": st.just({"Job/ns/x": "stuck"}),
    },
)


@given(st.lists(KNOBS, max_size=6))
def test_armed_counts_exactly_the_updates_that_set_a_request_knob(updates):
    faults = Faults()
    for knobs in updates:
        before = faults.armed
        faults.update(knobs)
        request_knob = any(
            knobs.get(k) for k in ("conflict_rate", "error_rate", "drop_rate", "commit_drop_rate")
        )
        assert faults.armed == before + (1 if request_knob or knobs.get("latency_ms") else 0)
    faults.reset()
    assert faults.armed == sum(
        1
        for knobs in updates
        if any(
            knobs.get(k)
            for k in ("conflict_rate", "error_rate", "drop_rate", "commit_drop_rate", "latency_ms")
        )
    )
