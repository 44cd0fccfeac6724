"""Unknown variables in a playbook's or a role's namespace are refused before anything runs: a misspelt
option never silently means its default. Runs ansible-playbook without a cluster: the refusal comes
before any read."""

from __future__ import annotations

import pytest

from tests.integration.support.runner import ROOT, run_playbook

pytestmark = pytest.mark.quick

REPAVE = ROOT / "playbooks" / "repave_dbinstances.yml"
CHECK = "Refuse unknown repave_* variables before reading anything"


def test_a_misspelt_repave_option_is_refused_before_anything_runs():
    run = run_playbook(
        REPAVE,
        extra_vars={
            "repave_namespace": "databases",
            "repave_catalog": {"path": "/nonexistent"},
            "repave_windw": {"start": "22:00", "end": "04:00"},
        },
    )
    assert not run.ok, run.log
    assert run.task_names() == [CHECK], run.task_names()
    msg = run[CHECK]["msg"]
    assert "repave_windw (did you mean repave_window?)" in msg and "playbook" in msg, msg
    assert run[CHECK]["unknown"] == ["repave_windw"]


def test_a_misspelt_role_option_is_refused_and_results_and_play_vars_are_not():
    plays = [
        {
            "name": "roles",
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {"golden_namespaces_molecule_dir": "/tmp/x"},  # the playbook's own declaration
            "tasks": [
                {
                    "name": "a result in the role's namespace",
                    "ansible.builtin.set_fact": {"golden_namespaces_seen": True},
                },
                {
                    "name": "the role",
                    "ansible.builtin.include_role": {"name": "goldenimage.pipeline.golden_namespaces"},
                },
            ],
        }
    ]
    run = run_playbook(plays, extra_vars={"golden_namespaces_pod_securty": "restricted"})
    assert not run.ok, run.log
    check = "Refuse unknown golden_namespaces_* variables before anything runs"
    assert run.task_names()[-1] == check, run.task_names()
    result = run[check]
    assert result["unknown"] == ["golden_namespaces_pod_securty"], result
    assert "did you mean golden_namespaces_pod_security?" in result["msg"] and "role" in result["msg"]


def test_the_awx_playbooks_refuse_a_misspelt_answer_and_know_what_the_workflow_hands_them():
    """The workflow hands every node the same answers: the undo step knows golden_promote's options (a
    gate answer included) and refuses only the misspelt one; the gate refuses its own misspelt option."""
    undo = ROOT / "awx" / "playbooks" / "undo_failed_promotion.yml"
    run = run_playbook(
        undo,
        extra_vars={
            "golden_promote_family": "ubuntu-24-04",
            "golden_promote_snapshot": "golden-x",
            "golden_promote_gate_project_namespace": "gate",  # the workflow's survey answer
            "golden_promote_verfy_timeout": 30,
        },
    )
    check = "Refuse unknown golden_promote_* variables before anything runs"
    assert not run.ok and run.task_names() == [check], run.log
    assert run[check]["unknown"] == ["golden_promote_verfy_timeout"], run[check]
    assert "did you mean golden_promote_verify_timeout?" in run[check]["msg"]

    gate = ROOT / "awx" / "playbooks" / "gate_golden.yml"
    run = run_playbook(gate, extra_vars={"golden_gate_snapshot": "golden-x", "golden_gate_wait_timout": 5})
    check = "Refuse unknown golden_gate_* variables before anything runs"
    assert not run.ok and run.task_names() == [check], run.log
    assert run[check]["unknown"] == ["golden_gate_wait_timout"], run[check]


def test_the_demo_refuses_a_misspelt_variable_before_any_act():
    run = run_playbook(ROOT / "playbooks" / "demo.yml", extra_vars={"demo_workdri": "/tmp/x"})
    check = "Refuse unknown demo_* variables before anything runs"
    assert not run.ok and run.task_names() == [check], run.log
    assert "demo_workdri (did you mean demo_workdir?)" in run[check]["msg"]


def test_a_role_included_from_another_entry_point_knows_that_entry_points_options():
    """include_role with tasks_from: distribute checks against the distribute entry point's spec (its
    linux_golden_artifacts is known), not main's."""
    plays = [
        {
            "name": "distribute",
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "the role",
                    "ansible.builtin.include_role": {
                        "name": "goldenimage.pipeline.linux_golden",
                        "tasks_from": "distribute",
                    },
                    "vars": {"linux_golden_artifacts": [], "linux_golden_import_timout": 5},
                }
            ],
        }
    ]
    run = run_playbook(plays)
    check = "Refuse unknown linux_golden_* variables before anything runs"
    assert not run.ok and run.task_names()[-1] == check, run.log
    assert run[check]["unknown"] == ["linux_golden_import_timout"], run[check]
