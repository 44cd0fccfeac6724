"""The golden_namespaces role against the lab: the first run creates both namespaces with their labels, a
rerun sends no mutating request at all (so it needs no patch permission), and a namespace that lost its
mode label is repaired by one write."""

from __future__ import annotations

import uuid

import pytest

from tests.integration.support.runner import play as runner_play
from tests.integration.support.runner import run_playbook

pytestmark = pytest.mark.lab_only


def play(fs, block):
    role_vars = {"golden_namespaces_filesystem_namespace": fs, "golden_namespaces_block_namespace": block}
    return runner_play(roles=[{"role": "goldenimage.pipeline.golden_namespaces", "vars": role_vars}])


def mutating(audit, committed_only=False):
    return [
        (r["verb"], r["resource"], r["name"])
        for r in audit
        if r["verb"] not in ("get", "list", "watch") and (not committed_only or 200 <= r["code"] < 300)
    ]


@pytest.mark.suite("idempotence")
def test_a_rerun_sends_zero_mutating_requests_and_needs_no_patch_permission(lab, kube_client, tmp_path):
    from kubernetes import client

    core = client.CoreV1Api(kube_client)
    suffix = uuid.uuid4().hex[:6]
    fs, block = "gi-%s" % suffix, "gi-%s-block" % suffix
    try:
        lab.clear_audit()
        first = run_playbook(play(fs, block), env=lab.env())
        assert first.ok, first.log
        assert sorted(w[0] for w in mutating(lab.audit())) == ["create", "create"]
        for name, mode in ((fs, "Filesystem"), (block, "Block")):
            labels = core.read_namespace(name).metadata.labels
            assert labels["kube-dc.com/golden-mode"] == mode
            assert labels["app.kubernetes.io/managed-by"] == "goldenimage.pipeline"
            assert labels["pod-security.kubernetes.io/enforce"] == "baseline"

        # A reader that may not patch namespaces: the rerun has nothing to write.
        user = "ns-reader-" + suffix
        token = lab.add_token(user, [{"verbs": ["get", "list", "watch"]}])
        reader = str(lab.write_kubeconfig(tmp_path / "reader.kubeconfig", token, user))
        lab.clear_audit()
        again = run_playbook(play(fs, block), env=dict(lab.env(), K8S_AUTH_KUBECONFIG=reader))
        assert again.ok, again.log
        assert mutating(lab.audit()) == []
        assert [t["task"] for t in again.tasks if t["changed"]] == []

        # A namespace that lost its mode label is written once, the other is left alone.
        core.patch_namespace(block, {"metadata": {"labels": {"kube-dc.com/golden-mode": None}}})
        lab.clear_audit()
        repaired = run_playbook(play(fs, block), env=lab.env())
        assert repaired.ok, repaired.log
        assert mutating(lab.audit()) == [("patch", "namespaces", block)]
        assert core.read_namespace(block).metadata.labels["kube-dc.com/golden-mode"] == "Block"
    finally:
        for name in (fs, block):
            try:
                core.delete_namespace(name)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise


FAULTS = {"conflict_rate": 0.2, "error_rate": 0.1, "drop_rate": 0.05, "commit_drop_rate": 0.05}


@pytest.mark.suite("faults")
@pytest.mark.suite("idempotence")
def test_one_run_converges_under_faults_and_lost_replies(lab, kube_client):
    """Conflicts, 5xx answers, dropped connections and replies lost after the commit: one run makes both
    namespaces, each created once (counted from the audit log), and a rerun writes nothing."""
    from kubernetes import client

    core = client.CoreV1Api(kube_client)
    suffix = uuid.uuid4().hex[:6]
    fs, block = "gf-%s" % suffix, "gf-%s-block" % suffix
    try:
        lab.clear_audit()
        lab.faults.update(dict(FAULTS, seed=9))
        try:
            first = run_playbook(play(fs, block), env=lab.env(faults=True))
            injected = lab.faults.to_dict()["injected"]
        finally:
            lab.faults.reset()
        assert first.ok, first.log
        # seed 9: the first create meets a 409, its retry is committed and the reply lost
        assert injected["conflict"] and injected["commit_drop"], injected
        # What the server committed: each namespace created once, and nothing else. The create whose reply
        # was lost is recognised as ours on its retry (a 409 read back), not written again with a patch.
        committed = [(v, res) for v, res, _n in mutating(lab.audit(), committed_only=True)]
        assert committed == [("create", "namespaces")] * 2, committed
        for name, mode in ((fs, "Filesystem"), (block, "Block")):
            assert core.read_namespace(name).metadata.labels["kube-dc.com/golden-mode"] == mode

        lab.clear_audit()
        again = run_playbook(play(fs, block), env=lab.env())
        assert again.ok, again.log
        assert [t["task"] for t in again.tasks if t["changed"]] == []
        assert mutating(lab.audit()) == []
    finally:
        for name in (fs, block):
            try:
                core.delete_namespace(name)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
