import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import catalog, operator_env
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal

OS, REP = operator_env.OS_ENV, operator_env.REPLICAS_ENV


def doc():
    d = catalog.empty()
    for name, stream in (("v20260615", "22.04"), ("v20261201-2404", "24.04")):
        d, _changed = catalog.register_image(
            d, name, stream, ["16", "17"], "a" * 128, "s3://m/" + name, imported=True
        )
    d, _changed = catalog.set_stream(d, "22.04", tip="v20260615", validated=True, default=True)
    d, _changed = catalog.set_stream(d, "24.04", tip="v20261201-2404")
    return d


def deployment(env=None, containers=None, generation=3, status=None, replicas=2):
    containers = containers or [{"name": "manager", "image": "op:1", "env": env or []}]
    return {
        "metadata": {"namespace": "dbaas", "name": "op", "generation": generation, "resourceVersion": "7"},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": containers}}},
        "status": status or {},
    }


def node(name, ready="True", unschedulable=False, taints=()):
    return {
        "metadata": {"name": name},
        "spec": {"unschedulable": unschedulable, "taints": list(taints)},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }


def test_the_env_points_only_at_a_stream_the_catalogs_default_gate_accepts():
    dep = deployment([{"name": OS, "value": "22.04"}])
    assert operator_env.stream_for_env(doc(), dep, "manager", "22.04") == "22.04"
    with pytest.raises(PipelineError) as err:
        operator_env.stream_for_env(doc(), dep, "manager", "24.04")
    msg = err.value.msg
    assert msg.startswith(
        "Deployment dbaas/op container manager env BACKING_IMAGE_OS_VERSION: refused to point"
    )
    # The same words baked_image_stream says for default: true on that stream: one rule.
    with pytest.raises(catalog.CatalogError) as same:
        catalog.set_stream(doc(), "24.04", default=True)
    assert same.value.msg in msg
    assert err.value.result["refused"] is True and err.value.result["stream"] == "24.04"
    with pytest.raises(PipelineError, match=r"stream 26\.04 has no tip in the catalog"):
        operator_env.stream_for_env(doc(), dep, "manager", "26.04")


def test_container_choice_and_value_from():
    two = deployment(containers=[{"name": "manager"}, {"name": "proxy"}])
    with pytest.raises(
        PipelineError, match=r"has 2 containers \(manager, proxy\).*give the operator's container"
    ):
        operator_env.pick_container(two)
    assert operator_env.pick_container(two, "proxy") == "proxy"
    with pytest.raises(PipelineError, match="it has no container x"):
        operator_env.pick_container(two, "x")
    ref = deployment([{"name": REP, "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}])
    assert operator_env.env_value(ref, "manager", REP) == (None, True)
    with pytest.raises(PipelineError, match="read from valueFrom"):
        operator_env.check_settable(ref, "manager", REP)
    operator_env.check_settable(ref, "manager", OS)


def test_env_patch_sends_every_container_guarded_and_nothing_when_in_place():
    dep = deployment(
        containers=[
            {"name": "manager", "env": [{"name": OS, "value": "22.04"}, {"name": "X", "value": "1"}]},
            {"name": "proxy", "env": [{"name": OS, "value": "keep"}]},
        ]
    )
    assert operator_env.env_patch(dep, "manager", {OS: "22.04"}) is None
    patch = operator_env.env_patch(dep, "manager", {OS: "24.04", REP: "4"})
    assert patch["metadata"] == {"resourceVersion": "7"}
    sent = patch["spec"]["template"]["spec"]["containers"]
    assert sent[0]["env"] == [
        {"name": OS, "value": "24.04"},
        {"name": "X", "value": "1"},
        {"name": REP, "value": "4"},
    ]
    assert sent[1] == {"name": "proxy", "env": [{"name": OS, "value": "keep"}]}
    assert dep["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] == "22.04"  # input untouched


def test_schedulable_nodes():
    nodes = [
        node("a"),
        node("b", taints=[{"key": "soft", "effect": "PreferNoSchedule"}]),
        node("c", unschedulable=True),
        node("d", taints=[{"key": "cp", "effect": "NoSchedule"}]),
        node("e", taints=[{"key": "x", "effect": "NoExecute"}]),
        node("f", ready="False"),
        {"metadata": {"name": "g"}},
    ]
    assert operator_env.schedulable_nodes(nodes) == ["a", "b"]


@pytest.mark.parametrize("value", [0, -1, "two", True, "3.5", None])
def test_replicas_refused(value):
    with pytest.raises(PipelineError, match="not a whole number of at least 1"):
        operator_env.replicas_wanted(value)


def test_drift():
    assert operator_env.drift("22.04", "22.04", "3", 3) == []
    assert operator_env.drift("22.04", None, "3", None) == []
    assert operator_env.drift("22.04", None, None, 0) == []  # no schedulable node: nothing to compare
    found = {d["what"]: d for d in operator_env.drift(None, "24.04", None, 4)}
    assert (
        found[OS]["message"]
        == "BACKING_IMAGE_OS_VERSION is unset but the catalog's default OS stream is 24.04"
    )
    assert "4 nodes are schedulable" in found[REP]["message"] and "first boot" in found[REP]["message"]
    fewer = operator_env.drift("22.04", "22.04", "5", 3)
    assert fewer[0]["message"] == "BACKING_IMAGE_REPLICAS is 5 but only 3 nodes are schedulable"


def test_rollout_verdict_as_kubectl_rollout_status():
    def dep(observed, updated, available, replicas=None):
        status = {"observedGeneration": observed, "updatedReplicas": updated, "availableReplicas": available}
        status["replicas"] = updated if replicas is None else replicas
        return deployment(status=status)

    assert operator_env.rollout_verdict(dep(2, 2, 2)) == (False, None)  # generation 3 not observed
    assert operator_env.rollout_state(dep(2, 2, 2)) == "generation 3 not observed yet (observed 2)"
    assert operator_env.rollout_verdict(dep(3, 1, 1)) == (False, None)
    assert operator_env.rollout_verdict(dep(3, 2, 2, replicas=3)) == (False, None)  # an old one still runs
    assert operator_env.rollout_verdict(dep(3, 2, 1)) == (False, None)
    assert operator_env.rollout_verdict(dep(3, 2, 2)) == (True, None)
    assert operator_env.rollout_state(dep(3, 1, 1)) == "1 of 2 replicas updated, 0 ready, 1 available"
    stuck = dep(3, 1, 1)
    stuck["status"]["conditions"] = [
        {"type": "Progressing", "reason": "ProgressDeadlineExceeded", "message": "m"}
    ]
    assert operator_env.rollout_verdict(stuck) == (False, "its progress deadline was exceeded: m")
    assert operator_env.rollout_verdict(None) == (False, "the Deployment is gone")


REF = "Deployment dbaas/dbinstance-operator"


def test_a_request_is_refused_before_anything_is_read():
    operator_env.check_request(REF, "24.04", True, None, False)
    operator_env.check_request(REF, None, False, 3, False)
    with pytest.raises(Refusal, match=r"os_version 24\.04 is given without a catalog; give catalog"):
        operator_env.check_request(REF, "24.04", False, None, False)
    with pytest.raises(Refusal, match="replicas and replicas_from_nodes are both given; give one of them"):
        operator_env.check_request(REF, None, False, 3, True)
    with pytest.raises(PipelineError, match="replicas: 0 is not a whole number"):
        operator_env.check_request(REF, None, False, 0, False)


def test_the_deployment_must_exist():
    found = {"metadata": {"name": "dbinstance-operator"}}
    assert operator_env.require_deployment(REF, found) is found
    with pytest.raises(Refusal) as caught:
        operator_env.require_deployment(REF, None)
    assert caught.value.msg == (
        "Deployment dbaas/dbinstance-operator: it does not exist; give the namespace and name of the "
        "operator's Deployment"
    )


def test_the_replica_count_from_nodes_is_never_zero():
    assert operator_env.replica_count(REF, 2, False, None) == 2
    assert operator_env.replica_count(REF, None, True, ["a", "b", "c"]) == 3
    for nodes in ([], None):
        with pytest.raises(Refusal, match="replicas_from_nodes found no schedulable Node"):
            operator_env.replica_count(REF, None, True, nodes)


def test_a_rollout_that_fails_or_runs_out_names_the_deployment_what_it_waited_for_and_the_last_state():
    failed = operator_env.rollout_failed_message(
        "Deployment ops/op", "PG_OS=24.04", "its deadline passed", "1 of 2"
    )
    assert (
        failed
        == "Deployment ops/op: the rollout of PG_OS=24.04 failed: its deadline passed; last observed: 1 of 2"
    )
    late = operator_env.rollout_timeout_message(
        "Deployment ops/op", "PG_OS=24.04", 600, "no change for 5m", "1 of 2"
    )
    assert late.startswith("Deployment ops/op: timed out after 600s waiting for the rollout of PG_OS=24.04")
    assert "still pending: every replica updated and available; last observed: 1 of 2" in late


def test_the_default_stream_is_the_operators_env_else_the_catalogs():
    """The one rule both the operator and dbinstance_repave apply to an instance that names no stream."""
    assert operator_env.default_stream("22.04", "24.04") == "24.04"
    assert operator_env.default_stream("22.04", " 24.04 ") == "24.04"
    assert operator_env.default_stream("22.04", None) == "22.04"
    assert operator_env.default_stream("22.04", "") == "22.04"
    assert operator_env.os_version_of(deployment([{"name": OS, "value": "24.04"}]), "manager") == "24.04"
    assert operator_env.os_version_of(deployment(), "manager") is None
    hidden = deployment([{"name": OS, "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}])
    with pytest.raises(Refusal, match=r"cannot be read here.*set it as a literal value"):
        operator_env.os_version_of(hidden, "manager")


def test_the_drift_report_says_per_revision_who_signed_it_and_which_records_no_longer_hold():
    """With a trust policy, each revision's row names the signer, the inputs and whether the facts still
    match; a revision whose record is another revision's (replayed) is drift, as a repave refuses it."""
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance
    from cryptography.hazmat.primitives.asymmetric import ec

    signer = ec.generate_private_key(ec.SECP256R1())
    pem, key = signing.public_pem(signer), signing.key_id(signer)
    facts = {"schema_version": 1, "os_family": "linux"}
    d = catalog.set_trust(
        doc(),
        {
            "keys": [{"name": "release", "public_key": pem}],
            "streams": {"24.04": {"require_signature": False, "reason": "lab"}},
        },
    )[0]
    entry = d["images"]["v20260615"]
    entry["facts"] = facts
    artifact = catalog.signed_subject("v20260615", "22.04")
    digest = {"sha256": "c" * 64, "sha512": "a" * 128}
    statement = provenance.statement(
        {"name": artifact, "digest": digest},
        [{"name": provenance.FACTS, "digest": provenance.facts_digest(facts)}],
        {"playbook": "publish.yml"},
        "2026-12-01T00:00:00Z",
    )
    texts = (
        signing.signature_text(signing.sign_digest(signer, digest["sha256"])),
        provenance.envelope_line(signing.sign_envelope(signer, provenance.serialize(statement))),
    )
    verdict = {"verdict": "verified", "key": key, "signer": "release"}
    entry["signature"] = catalog.signature_record(verdict, "v20260615", "22.04", digest, statement, texts)
    rows = {r["revision"]: r for r in operator_env.revision_provenance(d, signing.record_proof)}
    signed = rows["v20260615"]
    assert (signed["signer"], signed["key"], signed["facts_match"], signed["holds"]) == (
        "release",
        key,
        True,
        True,
    )
    assert signed["builder"]["playbook"] == "publish.yml" and signed["problem"] is None
    assert rows["v20261201-2404"]["holds"] is True and rows["v20261201-2404"]["verdict"] is None
    assert operator_env.provenance_drift(list(rows.values())) == []

    entry["signature"]["artifact"] = catalog.signed_subject("v20260501", "22.04")
    entry["facts"] = dict(facts, os_family="windows")
    (row,) = [
        r for r in operator_env.revision_provenance(d, signing.record_proof) if r["revision"] == "v20260615"
    ]
    assert row["holds"] is False and row["facts_match"] is False
    (found,) = operator_env.provenance_drift([row])
    assert found["what"] == "signature" and found["revision"] == "v20260615"
    assert "another revision's verdict replayed" in found["message"] and "baked_image" in found["move"]
