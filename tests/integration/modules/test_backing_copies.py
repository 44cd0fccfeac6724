"""Copies actually held, on the lab: the lab's Longhorn puts a revision's backing image on as many
schedulable nodes' disks as its minimum, and none on a node added later. The drift report of the
operator's environment and baked_image_copies then name the revision short of copies, with Longhorn's
minimum copies raised as the first remedy (it mends the image in use), which clears it. Check mode
predicts the replica trap with reads only."""

from __future__ import annotations

import functools
import time

import pytest

from tests.integration.modules.test_baked_image import refused, two_copies_class
from tests.integration.modules.test_baked_image import task as baked_task
from tests.integration.modules.test_dbinstance_operator_env import (  # noqa: F401  pylint: disable=unused-import
    nodes,
    operator_deployment,
)
from tests.integration.support.runner import play as runner_play
from tests.integration.support.runner import run_playbook

BAKED, COPIES, ENV = (
    "goldenimage.pipeline.baked_image",
    "goldenimage.pipeline.baked_image_copies",
    "goldenimage.pipeline.dbinstance_operator_env",
)
_AUTH = {"kubeconfig": "{{ lookup('env', 'KUBECONFIG') }}"}
play = functools.partial(runner_play, module_defaults={m: _AUTH for m in (BAKED, COPIES, ENV)})
LH = ("longhorn.io", "v1beta2", "longhorn-system", "backingimages")


def task(title, module, /, **params):
    return baked_task(title, module=module, **params)


def ready_copies(kube_client, name):
    from kubernetes import client

    obj = client.CustomObjectsApi(kube_client).get_namespaced_custom_object(*LH[:3], LH[3], name)
    files = (obj.get("status") or {}).get("diskFileStatusMap") or {}
    return sum(1 for f in files.values() if f.get("state") == "ready"), obj


def wait_copies(kube_client, name, wanted, timeout=30):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if ready_copies(kube_client, name)[0] == wanted:
            return
        time.sleep(0.3)
    raise AssertionError("BackingImage %s: %s" % (name, ready_copies(kube_client, name)[1].get("status")))


def add_node(kube_client, name):
    from kubernetes import client

    core = client.CoreV1Api(kube_client)
    core.create_node({"metadata": {"name": name}})
    core.patch_node_status(name, {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    core.patch_node(name, {"spec": {"taints": []}})


@pytest.mark.lab_only
def test_a_node_added_is_drift_with_the_revision_short_of_copies_and_the_dedicated_class_first(
    lab,
    kube_client,
    kube_namespace,
    mirror,
    nodes,  # noqa: F811
):
    from kubernetes import client

    where = {"namespace": kube_namespace, "name": "catalog"}
    run = run_playbook(
        play(
            task(
                "register",
                BAKED,
                name="v20261129",
                namespace=kube_namespace,
                url=mirror["url"],
                checksum=mirror["sha512"],
                os_version="22.04",
                pg_versions=["16", "17"],
                replicas=3,
                catalog=where,
                wait_sleep=1,
                wait_timeout=120,
            )
        ),
        env=lab.env(),
    )
    assert run.ok, run.log
    reg = run["register"]
    assert reg["prediction"] == {"requested": 3, "in_force": 3, "template": None, "why": None, "nodes": 3}
    backing_image = reg["copies"]["backing_image"]
    assert reg["copies"]["min_copies"] == 3 and reg["copies"]["class_replicas"] == 3
    wait_copies(kube_client, backing_image, 3)

    apps = client.AppsV1Api(kube_client)
    apps.create_namespaced_deployment(kube_namespace, operator_deployment("dbinstance-operator", []))
    env = dict(
        namespace=kube_namespace,
        name="dbinstance-operator",
        replicas_from_nodes=True,
        catalog=where,
        wait_sleep=1,
        wait_timeout=60,
    )
    before = run_playbook(play(task("env", ENV, **env)), env=lab.env())
    assert before.ok, before.log
    assert before["env"]["drift"] == [], before["env"]["drift"]  # three nodes, three copies: no drift

    add_node(kube_client, kube_namespace + "-added")
    lab.clear_audit()
    after = run_playbook(play(task("env", ENV, **env), task("copies", COPIES, catalog=where)), env=lab.env())
    assert after.ok, after.log
    assert [r for r in lab.mutating_requests() if r["resource"] != "deployments"] == []
    result = after["env"]
    assert result["env"]["BACKING_IMAGE_REPLICAS"] == "4"  # the env follows the nodes...
    short = [d for d in result["drift"] if d["what"] == "BackingImage copies"]
    assert len(short) == 1, result["drift"]  # ...but the published revision does not
    (entry,) = short
    assert entry["revision"] == "v20261129" and entry["operator"] == 3 and entry["expected"] == 4
    assert "holds 3 ready copies of BackingImage longhorn-system/%s" % backing_image in entry["message"]
    assert entry["move"] == entry["remedies"][0]
    assert "minNumberOfCopies" in entry["move"]
    assert entry["remedies"][1].startswith("create a Longhorn StorageClass used only for baked images")
    assert "leave the cluster default StorageClass as it is" in entry["remedies"][1]
    assert "new revision" in entry["remedies"][2]
    copies = after["copies"]
    assert copies["changed"] is False and [s["revision"] for s in copies["short"]] == ["v20261129"]
    assert copies["line"].startswith(
        "4 nodes; v20261129 holds 3 of 4; short: v20261129; first remedy: raise Longhorn's"
    )

    # The second remedy, as Longhorn offers it: the minimum copies raised, the new node gets its copy.
    client.CustomObjectsApi(kube_client).patch_namespaced_custom_object(
        *LH[:3], LH[3], backing_image, {"spec": {"minNumberOfCopies": 4}}
    )
    wait_copies(kube_client, backing_image, 4)
    cleared = run_playbook(
        play(task("env", ENV, **env), task("copies", COPIES, catalog=where)), env=lab.env()
    )
    assert cleared.ok, cleared.log
    assert cleared["env"]["drift"] == [], cleared["env"]["drift"]
    assert cleared["copies"]["short"] == [] and cleared["copies"]["line"] == "4 nodes; v20261129 holds 4 of 4"


@pytest.mark.lab_only
def test_check_mode_predicts_the_replica_trap_with_reads_only(
    lab,
    kube_client,
    kube_namespace,
    mirror,
    nodes,  # noqa: F811
):
    from kubernetes import client

    storage = client.StorageV1Api(kube_client)
    template = "tmpl-copies-" + kube_namespace
    two_copies_class(storage, template)
    common = dict(
        namespace=kube_namespace,
        url=mirror["url"],
        checksum=mirror["sha512"],
        os_version="22.04",
        pg_versions=["16"],
        wait_sleep=1,
    )
    lab.clear_audit()
    try:
        run = run_playbook(
            play(
                task(
                    "trap",
                    BAKED,
                    check=True,
                    ignore_errors=True,
                    name="v20261130",
                    replicas=3,
                    storage_class=template,
                    **common,
                ),
                task(
                    "more than nodes",
                    BAKED,
                    check=True,
                    ignore_errors=True,
                    name="v20261201",
                    replicas=4,
                    **common,
                ),
                task("predicted", COPIES, check=True, ignore_errors=True, replicas=3, storage_class=template),
                task(
                    "trap for real",
                    BAKED,
                    ignore_errors=True,
                    name="v20261130",
                    replicas=3,
                    storage_class=template,
                    **common,
                ),
            ),
            env=lab.env(),
        )
        writes = lab.mutating_requests()
    finally:
        storage.delete_storage_class(template, _preload_content=False)
    assert writes == [], "a prediction wrote: %s" % writes
    trap = refused(run, "trap")
    assert "asked for 3 copies but Harvester would use numberOfReplicas=2" in trap["msg"], trap["msg"]
    assert "To fix it: create a Longhorn StorageClass used only for baked images" in trap["msg"]
    assert trap["prediction"]["template"] == template
    more = refused(run, "more than nodes")
    assert "replicas is 4 but 3 nodes are schedulable" in more["msg"], more["msg"]
    assert refused(run, "predicted")["msg"] == trap["msg"].replace("revision v20261130", "the new revision")
    # Out of check mode the same refusal comes before the image is created.
    assert refused(run, "trap for real")["msg"] == trap["msg"]
    images = client.CustomObjectsApi(kube_client).list_namespaced_custom_object(
        "harvesterhci.io", "v1beta1", kube_namespace, "virtualmachineimages"
    )
    assert images["items"] == []
