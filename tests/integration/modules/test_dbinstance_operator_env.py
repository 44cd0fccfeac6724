"""dbinstance_operator_env on the lab: the operator's Deployment, the lab's rollout controller, the
catalog in a ConfigMap and Nodes, some cordoned or tainted. Check mode, diff, the rollout wait with its
progress lines, a second run that writes nothing, the refusals and the drift report."""

from __future__ import annotations

import functools
import time

import pytest
import yaml

from tests.integration.modules.test_baked_image import refused
from tests.integration.modules.test_baked_image import task as baked_task
from tests.integration.support.runner import play as runner_play
from tests.integration.support.runner import run_playbook

MODULE = "goldenimage.pipeline.dbinstance_operator_env"
_AUTH = {"kubeconfig": "{{ lookup('env', 'KUBECONFIG') }}"}
play = functools.partial(runner_play, module_defaults={MODULE: _AUTH})
OS_ENV, REPLICAS_ENV = "BACKING_IMAGE_OS_VERSION", "BACKING_IMAGE_REPLICAS"
HOLD = "lab.goldenimage.io/rollout-hold"


def task(title, /, **params):
    return baked_task(title, module=MODULE, **params)


def imported_images(*revisions):
    """Catalog entries of ``(revision, stream)`` pairs, imported, with no image to observe, and the facts
    baked_image read from their bytes."""
    return {
        name: {
            "os_version": stream,
            "pg_versions": ["15", "16", "17"],
            "build_date": "%s-%s-%s" % (name[1:5], name[5:7], name[7:9]),
            "checksum": "a" * 128,
            "source": "s3://mirror/" + name,
            "imported": True,
            "facts": {
                "os_release": {"id": "ubuntu", "version_id": stream, "version_codename": None},
                "pg_majors": ["15", "16", "17"],
                "initialized_clusters": [],
                "private_keys": [],
                "machine_id": "empty",
            },
        }
        for name, stream in revisions
    }


def catalog_text():
    return yaml.safe_dump(
        {
            "version": 1,
            "default_stream": "22.04",
            "streams": {
                "22.04": {"tip": "v20260615", "validated": True},
                "24.04": {"tip": "v20261201-2404", "validated": False},
            },
            "images": imported_images(("v20260615", "22.04"), ("v20261201-2404", "24.04")),
        }
    )


def operator_deployment(name, env, replicas=2, extra_containers=()):
    labels = {"app": name}
    containers = [
        {"name": "manager", "image": "registry.example/dbinstance-operator:1.0", "env": env},
        *extra_containers,
    ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": containers}},
        },
    }


def make_nodes(kube_client, prefix):
    """Four nodes: three schedulable, one cordoned, one tainted NoSchedule, one not Ready (plus a
    PreferNoSchedule taint that does not keep Pods off)."""
    from kubernetes import client

    core = client.CoreV1Api(kube_client)
    made = []
    for suffix, spec, ready in (
        ("a", {}, "True"),
        ("b", {}, "True"),
        ("c", {"taints": [{"key": "soft", "effect": "PreferNoSchedule"}]}, "True"),
        ("cordoned", {"unschedulable": True}, "True"),
        (
            "tainted",
            {"taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]},
            "True",
        ),
        ("notready", {}, "False"),
    ):
        name = "%s-%s" % (prefix, suffix)
        core.create_node({"metadata": {"name": name}, "spec": spec})
        core.patch_node_status(name, {"status": {"conditions": [{"type": "Ready", "status": ready}]}})
        # A real API server taints a new Node not-ready (TaintNodesByCondition); the node lifecycle
        # controller, which the lab does not run, lifts it once the Node reports Ready.
        core.patch_node(name, {"spec": {"taints": list(spec.get("taints") or [])}})
        made.append(name)
    return made


@pytest.fixture
def nodes(kube_client, kube_namespace):
    from kubernetes import client

    core = client.CoreV1Api(kube_client)
    for node in core.list_node().items:  # nodes are cluster-wide: start from none but the lab's own
        if node.metadata.name != "lab-node":  # cordoned, the kubelet endpoint of the lab's pod logs
            core.delete_node(node.metadata.name)
    names = make_nodes(kube_client, kube_namespace)
    yield names
    for name in names:
        core.delete_node(name)


@pytest.mark.lab_only
@pytest.mark.suite("idempotence")
def test_flip_the_stream_and_replicas_wait_for_the_rollout_then_nothing(
    lab, kube_client, kube_namespace, nodes
):
    from kubernetes import client

    core, apps = client.CoreV1Api(kube_client), client.AppsV1Api(kube_client)
    core.create_namespaced_config_map(
        kube_namespace, {"metadata": {"name": "catalog"}, "data": {"catalog.yaml": catalog_text()}}
    )
    where = {"namespace": kube_namespace, "name": "catalog"}
    env = [{"name": OS_ENV, "value": "24.04"}, {"name": "LOG_LEVEL", "value": "info"}]
    apps.create_namespaced_deployment(kube_namespace, operator_deployment("dbinstance-operator", env))
    dep = dict(namespace=kube_namespace, name="dbinstance-operator", wait_sleep=1, wait_timeout=60)
    # The env points at 24.04, which is not validated: drift against the catalog's 22.04, and a refusal
    # to point it at 24.04 again; nothing written.
    lab.clear_audit()
    first = run_playbook(
        play(
            task("report", register="report", catalog=where, **dep),
            task("unvalidated", ignore_errors=True, os_version="24.04", catalog=where, **dep),
            task("unknown", ignore_errors=True, os_version="26.04", catalog=where, **dep),
            task("float", ignore_errors=True, os_version=22.04, catalog=where, **dep),
            task("no catalog", ignore_errors=True, os_version="22.04", **dep),
            task("both", ignore_errors=True, replicas=2, replicas_from_nodes=True, **dep),
        ),
        env=lab.env(),
    )
    assert first.ok, first.log
    assert lab.mutating_requests() == []
    report = first["report"]
    assert report["changed"] is False and report["done"] is True, report
    assert report["schedulable_nodes"] == sorted("%s-%s" % (kube_namespace, s) for s in "abc")
    drift = {d["what"]: d for d in report["drift"]}
    assert drift[OS_ENV]["operator"] == "24.04" and drift[OS_ENV]["expected"] == "22.04"
    assert "catalog's default OS stream is 22.04" in drift[OS_ENV]["message"]
    assert "BACKING_IMAGE_REPLICAS is unset but 3 nodes are schedulable" in drift[REPLICAS_ENV]["message"]
    msg = refused(first, "unvalidated")["msg"]
    assert "env BACKING_IMAGE_OS_VERSION: refused to point it at stream 24.04" in msg, msg
    assert "stream 24.04 (tip v20261201-2404) is not validated and cannot become the default OS stream" in msg
    assert "set validated: true first" in msg
    assert "stream 26.04 has no tip in the catalog" in refused(first, "unknown")["msg"]
    assert "quote it" in refused(first, "float")["msg"]
    assert "without a catalog" in refused(first, "no catalog")["msg"]
    assert "both given" in refused(first, "both")["msg"]

    flip = dict(os_version="22.04", replicas_from_nodes=True, catalog=where, **dep)
    lab.clear_audit()
    run = run_playbook(play(task("check", check=True, **flip)), env=lab.env(), diff=True)
    assert run.ok, run.log
    assert lab.mutating_requests() == [], "check mode wrote"
    assert run["check"]["changed"] is True
    assert run["check"]["diff"]["after"] == {OS_ENV: "22.04", REPLICAS_ENV: "3"}
    assert run["check"]["diff"]["before"] == {OS_ENV: "24.04", REPLICAS_ENV: None}
    run = run_playbook(play(task("real", report_every=1, **flip)), env=lab.env(), diff=True)
    assert run.ok, run.log
    real = run["real"]
    assert real["changed"] is True and real["done"] is True, real
    assert real["drift"] == [], real["drift"]
    assert real["rollout"]["updated"] == 2 and real["rollout"]["available"] == 2
    assert any("rollout: " in line and "replicas updated" in line for line in real["lines"]), real["lines"]
    obj = apps.read_namespaced_deployment("dbinstance-operator", kube_namespace)
    got = {e.name: e.value for e in obj.spec.template.spec.containers[0].env}
    assert got == {OS_ENV: "22.04", "LOG_LEVEL": "info", REPLICAS_ENV: "3"}
    assert obj.status.observed_generation == obj.metadata.generation

    lab.clear_audit()
    again = run_playbook(play(task("again", **flip)), env=lab.env(), diff=True)
    assert again.ok, again.log
    assert again["again"]["changed"] is False and again["again"]["done"] is True
    assert lab.mutating_requests() == []


@pytest.mark.lab_only
def test_a_rollout_that_never_completes_times_out_naming_it(lab, kube_client, kube_namespace, nodes):
    from kubernetes import client

    apps = client.AppsV1Api(kube_client)
    body = operator_deployment("held", [{"name": REPLICAS_ENV, "value": "2"}])
    body["metadata"]["annotations"] = {HOLD: "true"}
    apps.create_namespaced_deployment(kube_namespace, body)
    run = run_playbook(
        play(
            task(
                "set",
                ignore_errors=True,
                namespace=kube_namespace,
                name="held",
                replicas=3,
                wait_sleep=1,
                wait_timeout=4,
                report_every=2,
            ),
            task(
                "from",
                ignore_errors=True,
                namespace=kube_namespace,
                name="held",
                replicas_from_nodes=True,
                wait_sleep=1,
                wait_timeout=2,
            ),
        ),
        env=lab.env(),
    )
    msg = refused(run, "set")["msg"]
    assert (
        "Deployment %s/held: timed out after 4s waiting for the rollout of BACKING_IMAGE_REPLICAS=3"
        % kube_namespace
        in msg
    ), msg
    assert "still pending: every replica updated and available; last observed: " in msg, msg
    # The lab's controller records the new generation but never brings a replica up.
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        held = apps.read_namespaced_deployment("held", kube_namespace)
        if held.status.observed_generation == held.metadata.generation:
            break
        time.sleep(0.2)
    assert held.status.observed_generation == held.metadata.generation == 2, held.status
    assert not held.status.updated_replicas, held.status
    both = apps.read_namespaced_deployment("held", kube_namespace)
    env = {e.name: e.value for e in both.spec.template.spec.containers[0].env}
    assert env == {REPLICAS_ENV: "3"}
    # replicas_from_nodes asks for 3 (the schedulable ones), already set: no write, the wait still pends.
    assert "timed out" in refused(run, "from")["msg"]


@pytest.mark.lab_only
def test_value_from_and_two_containers_are_refused(lab, kube_client, kube_namespace, nodes):
    from kubernetes import client

    apps = client.AppsV1Api(kube_client)
    env = [{"name": REPLICAS_ENV, "valueFrom": {"configMapKeyRef": {"name": "operator", "key": "replicas"}}}]
    apps.create_namespaced_deployment(
        kube_namespace,
        operator_deployment(
            "two", env, extra_containers=[{"name": "proxy", "image": "registry.example/proxy:1"}]
        ),
    )
    lab.clear_audit()
    dep = dict(namespace=kube_namespace, name="two", replicas=3, wait_timeout=5, wait_sleep=1)
    run = run_playbook(
        play(
            task("ambiguous", ignore_errors=True, **dep),
            task("value from", ignore_errors=True, container="manager", **dep),
            task("absent", ignore_errors=True, **{**dep, "name": "nope"}),
        ),
        env=lab.env(),
    )
    assert "has 2 containers (manager, proxy)" in refused(run, "ambiguous")["msg"]
    msg = refused(run, "value from")["msg"]
    assert "container manager env BACKING_IMAGE_REPLICAS: it is read from valueFrom" in msg, msg
    assert "nope: it does not exist" in refused(run, "absent")["msg"]
    assert lab.mutating_requests() == []


@pytest.mark.lab_only
@pytest.mark.suite("bad-input")
def test_pointing_new_instances_at_a_stream_that_strands_a_running_major_is_refused(
    lab, kube_client, kube_namespace, nodes
):
    """The env flip is a default flip as the operator sees it: a PostgreSQL 15 database following the default
    stream, on a tip that carries 15, would turn PGVersionEOL on a 24.04 tip without it."""
    from kubernetes import client

    images = imported_images(("v20260615", "22.04"), ("v20261201-2404", "24.04"))
    images["v20261201-2404"]["pg_versions"] = ["16", "17"]
    images["v20261201-2404"]["facts"]["pg_majors"] = ["16", "17"]
    doc = {
        "version": 1,
        "default_stream": "24.04",
        "streams": {
            "22.04": {"tip": "v20260615", "validated": True},
            "24.04": {"tip": "v20261201-2404", "validated": True},
        },
        "images": images,
    }
    core, apps = client.CoreV1Api(kube_client), client.AppsV1Api(kube_client)
    core.create_namespaced_config_map(
        kube_namespace, {"metadata": {"name": "catalog"}, "data": {"catalog.yaml": yaml.safe_dump(doc)}}
    )
    env = [{"name": OS_ENV, "value": "22.04"}]
    apps.create_namespaced_deployment(kube_namespace, operator_deployment("dbinstance-operator", env))
    custom = client.CustomObjectsApi(kube_client)
    body = {
        "apiVersion": "db.goldenimage.io/v1alpha1",
        "kind": "DBInstance",
        "metadata": {"name": "legacy15"},
        "spec": {"engineVersion": "15"},
    }
    custom.create_namespaced_custom_object(
        "db.goldenimage.io", "v1alpha1", kube_namespace, "dbinstances", body
    )
    applied = {
        "status": {"phase": "Available", "appliedSpec": {"imageRevision": "v20260615", "engineVersion": "15"}}
    }
    custom.patch_namespaced_custom_object_status(
        "db.goldenimage.io", "v1alpha1", kube_namespace, "dbinstances", "legacy15", applied
    )
    where = {"namespace": kube_namespace, "name": "catalog"}
    dep = dict(namespace=kube_namespace, name="dbinstance-operator", wait=False, catalog=where)
    lab.clear_audit()
    run = run_playbook(
        play(
            task("check", check=True, ignore_errors=True, os_version="24.04", **dep),
            task("flip", ignore_errors=True, os_version="24.04", **dep),
        ),
        env=lab.env(),
    )
    for name in ("check", "flip"):
        msg = refused(run, name)["msg"]
        assert "drop PostgreSQL 15" in msg and "%s/legacy15" % kube_namespace in msg, msg
        assert "drops_majors" in msg
    assert [r for r in lab.mutating_requests() if r.get("resource") == "deployments"] == []
    named = run_playbook(play(task("named", os_version="24.04", drops_majors=[15], **dep)), env=lab.env())
    assert named.ok, named.log
    assert [(e["name"], e["major"]) for e in named["named"]["stranded"]] == [("legacy15", "15")]
