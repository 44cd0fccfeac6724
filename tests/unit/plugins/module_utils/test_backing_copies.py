"""Copies of a revision's backing image against the nodes: what is held, who is short, the remedies in
their order (a class used only for baked images first, never the default class), and the prediction that
refuses a count the target class cannot hold before anything is written."""

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import (
    backing_copies,
    harvester_image,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal

DEFAULT = "storageclass.kubernetes.io/is-default-class"


def klass(name, replicas, default=False, backing_image=None):
    params = {"numberOfReplicas": replicas} if replicas is not None else {}
    if backing_image:
        params["backingImage"] = backing_image
    notes = {DEFAULT: "true"} if default else {}
    return {
        "metadata": {"name": name, "annotations": notes},
        "provisioner": "driver.longhorn.io",
        "parameters": params,
    }


def backing_image(name, minimum, states):
    files = {"disk-%d" % i: {"state": s, "progress": 100} for i, s in enumerate(states)}
    return {
        "metadata": {"name": name, "namespace": "longhorn-system"},
        "spec": {"minNumberOfCopies": minimum},
        "status": {"diskFileStatusMap": files},
    }


IMAGE = {"metadata": {"namespace": "harvester-public", "name": "ubuntu-2204-postgres-v20261129"}}


def held(minimum=3, states=("ready",) * 3, readable=True):
    bi = (
        backing_image("harvester-public-ubuntu-2204-postgres-v20261129", minimum, states)
        if readable
        else None
    )
    sc = klass("lh-1", "3", backing_image="harvester-public-ubuntu-2204-postgres-v20261129")
    return backing_copies.holding("v20261129", IMAGE, sc, bi, readable)


def test_in_force_is_the_ready_copies_not_the_class_parameter():
    h = held(states=("ready", "ready", "in-progress", "failed"))
    assert h["ready_copies"] == 2 and h["class_replicas"] == 3 and h["min_copies"] == 3
    assert backing_copies.copies(h) == 2
    assert h["backing_image"] == "harvester-public-ubuntu-2204-postgres-v20261129"
    assert h["image"] == "harvester-public/ubuntu-2204-postgres-v20261129"
    # Without a readable backing image the class's count is all there is.
    assert backing_copies.copies(held(readable=False)) == 3


def test_a_node_added_leaves_the_revision_short_with_more_copies_of_the_image_in_use_first():
    (short,) = backing_copies.short_of([held()], 4)
    assert short["revision"] == "v20261129" and short["operator"] == 3 and short["expected"] == 4
    assert "holds 3 ready copies of BackingImage longhorn-system/" in short["message"]
    assert "4 nodes are schedulable" in short["message"]
    first, second, third = short["remedies"]
    assert short["move"] == first
    # The image in use is mended in place; a class only helps the revisions still to come.
    assert "minNumberOfCopies" in first and " to 4 " in first
    assert second.startswith("create a Longhorn StorageClass used only for baked images")
    assert 'numberOfReplicas: "4"' in second and "leave the cluster default StorageClass as it is" in second
    assert "new revision with replicas 4" in third
    assert not any("set numberOfReplicas" in r for r in short["remedies"])
    # Enough copies, or no node known: nothing to say.
    assert backing_copies.short_of([held()], 3) == []
    assert backing_copies.short_of([held()], 0) == [] and backing_copies.short_of([held()], None) == []


def test_a_raised_minimum_still_copying_says_wait_not_the_trap():
    (short,) = backing_copies.short_of([held(minimum=4)], 4)
    assert short["remedies"] == [short["move"]] and "still making them" in short["move"]


def test_the_line_names_every_revision_and_the_unknown():
    gone = backing_copies.holding("v20260101", None)
    text = backing_copies.line([held(), gone], 4)
    assert text.startswith(
        "4 nodes; v20261129 holds 3 of 4; short: v20261129; first remedy: raise Longhorn's"
    )
    assert text.endswith("not known: v20260101")
    assert "are not compared" in backing_copies.line([held()], None)


def test_predict_refuses_the_default_class_winning_and_offers_a_dedicated_class():
    classes = [klass("harvester-longhorn", "2", default=True), klass("baked-4", "4")]
    with pytest.raises(Refusal) as err:
        backing_copies.predict("revision v1", 4, backing_copies.request(), classes, 4)
    msg = err.value.msg
    assert "asked for 4 copies but Harvester would use numberOfReplicas=2" in msg
    assert "harvester-longhorn (the cluster default StorageClass)" in msg
    assert "create a Longhorn StorageClass used only for baked images" in msg
    assert "leave the cluster default StorageClass as it is" in msg
    assert err.value.fields["prediction"]["in_force"] == 2
    named = backing_copies.predict("revision v1", 4, backing_copies.request("baked-4"), classes, 4)
    assert named == {
        "requested": 4,
        "in_force": 4,
        "template": "baked-4",
        "why": "named by the annotation %s on the image" % harvester_image.SC_ANNOTATION,
        "nodes": 4,
    }


def test_predict_refuses_more_copies_than_nodes_and_takes_the_request_without_a_template():
    with pytest.raises(Refusal) as err:
        backing_copies.predict("revision v1", 5, backing_copies.request(), [], 4)
    assert "replicas is 5 but 4 nodes are schedulable" in err.value.msg and "give replicas 4" in err.value.msg
    assert backing_copies.predict("revision v1", 4, backing_copies.request(), [], None)["in_force"] == 4
    # A template without a count: Harvester's default, 3.
    with pytest.raises(Refusal):
        backing_copies.predict("revision v1", 4, backing_copies.request("t"), [klass("t", None)], None)


def test_replica_trap_on_the_class_found():
    message = backing_copies.replica_trap(
        4, "2", "lh-1", "harvester-longhorn", "the cluster default StorageClass"
    )
    assert message.startswith("replicas: asked for 4 copies but StorageClass lh-1 has numberOfReplicas=2")
    assert "To fix it: create a Longhorn StorageClass used only for baked images" in message
    assert backing_copies.replica_trap(4, "4", "lh-1", None, None) is None
