"""The dbinstance_operator_env runner called with parameters and an observed Deployment and Nodes (the
in-memory adapter): it returns one round's result or raises a PipelineError, and never exits."""

import copy

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import operator_env
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal
from ansible_collections.goldenimage.pipeline.plugins.modules import dbinstance_operator_env as module_
from fake_kube import FakeKube

from tests.unit.plugins.modules import support
from tests.unit.plugins.modules.support import Clock

NS, NAME = "dbaas", "dbinstance-operator"


def deployment(replicas_env="1", updated=2, available=2, progressing=None):
    status = {
        "observedGeneration": 4,
        "replicas": 2,
        "updatedReplicas": updated,
        "readyReplicas": available,
        "availableReplicas": available,
    }
    if progressing:
        status["conditions"] = [dict(progressing, type="Progressing")]
    env = [{"name": operator_env.REPLICAS_ENV, "value": replicas_env}, {"name": "LOG_LEVEL", "value": "info"}]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": NS, "generation": 4},
        "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "manager", "env": env}]}}},
        "status": status,
    }


def node(name, ready=True, cordoned=False):
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "spec": {"unschedulable": cordoned},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


NODES = [node("n1"), node("n2"), node("n3"), node("n4", cordoned=True), node("n5", ready=False)]


def runner(objects, check_mode=False, clock=None, **given):
    params = support.validated(module_.argument_spec(), dict({"name": NAME, "namespace": NS}, **given))
    kube = FakeKube(params, objects, check_mode=check_mode)
    clock = clock or Clock(1000.0)
    return module_.OperatorEnv(kube, clock=clock, sleeper=clock.sleep), kube


def run(objects, check_mode=False, clock=None, **given):
    env, kube = runner(objects, check_mode, clock, **given)
    return env.run(), kube


def replicas_env(kube):
    found = kube.get("apps/v1", "Deployment", NAME, NS)
    return operator_env.env_value(found, "manager", operator_env.REPLICAS_ENV)[0]


def test_replicas_from_nodes_sets_the_schedulable_count_and_a_second_run_changes_nothing():
    result, kube = run([deployment()] + NODES, replicas_from_nodes=True)
    assert result["changed"] is True and result["done"] is True
    assert result["env"][operator_env.REPLICAS_ENV] == "3" and result["schedulable_nodes"] == [
        "n1",
        "n2",
        "n3",
    ]
    assert kube.writes == [("patch", "Deployment", NS, NAME)] and replicas_env(kube) == "3"
    assert "resume" not in result
    again, kube = run([kube.get("apps/v1", "Deployment", NAME, NS)] + NODES, replicas_from_nodes=True)
    assert again["changed"] is False and kube.writes == []


def test_check_mode_predicts_the_change_and_writes_nothing():
    result, kube = run([deployment()] + NODES, check_mode=True, replicas=2)
    assert result["changed"] is True and result["env"][operator_env.REPLICAS_ENV] == "2"
    assert kube.writes == [] and replicas_env(kube) == "1"


def test_a_rollout_still_going_ends_the_round_with_what_the_next_one_needs():
    clock = Clock(1000.0)
    going = deployment(updated=1, available=1)
    result, _kube = run([going] + NODES, clock=clock, replicas=2, report_every=10, wait_sleep=1)
    assert result["done"] is False and result["resume"]["started"] == 1000.0
    assert (
        result["line"]
        == "Deployment dbaas/dbinstance-operator rollout: 1 of 2 replicas updated, 1 ready, 1 available (10s)"
    )
    assert clock.now == 1010.0


def test_a_failed_rollout_fails_naming_the_change_and_the_last_state():
    stuck = deployment(
        updated=1, available=1, progressing={"reason": "ProgressDeadlineExceeded", "message": "slow"}
    )
    with pytest.raises(PipelineError) as caught:
        run([stuck] + NODES, replicas=2)
    assert caught.value.msg == (
        "Deployment dbaas/dbinstance-operator: the rollout of BACKING_IMAGE_REPLICAS=2 failed: its progress "
        "deadline was exceeded: slow; last observed: 1 of 2 replicas updated, 1 ready, 1 available"
    )


def test_refusals_come_before_any_write():
    cases = [
        ([], {"replicas": 2}, "it does not exist"),
        ([deployment()], {"replicas_from_nodes": True}, "replicas_from_nodes found no schedulable Node"),
        ([deployment()] + NODES, {"replicas": 2, "replicas_from_nodes": True}, "both given"),
        ([deployment()] + NODES, {"os_version": "24.04"}, "without a catalog"),
        ([deployment()] + NODES, {"replicas": 2, "wait_timeout": 0}, "option wait_timeout"),
    ]
    for objects, given, words in cases:
        env, kube = runner(copy.deepcopy(objects), **given)
        with pytest.raises(Refusal, match=words):
            env.run()
        assert kube.writes == []
