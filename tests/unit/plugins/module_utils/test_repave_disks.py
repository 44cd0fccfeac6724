"""Which claims of a Harvester VM are OS disks and which are data, decided from the claims themselves."""

import json
import re

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.repave import repave

IMAGE = "images/ubuntu-2204-postgres-v20260615"
IMAGES = {IMAGE: {"status": {"storageClassName": "lh-v20260615"}}}


def os_template(name="db-os-v20260615", image=IMAGE, storage_class="lh-v20260615", **meta):
    annotations = {repave.IMAGE_ID: image} if image else {}
    annotations.update(meta.pop("annotations", {}))
    return {
        "metadata": dict({"name": name, "annotations": annotations}, **meta),
        "spec": {"volumeMode": "Block", "storageClassName": storage_class},
    }


def data_template(name="db-pgdata", **meta):
    return {"metadata": dict({"name": name}, **meta), "spec": {"storageClassName": "lab-fs"}}


def claim(template):
    """The claim Harvester creates from a template: its labels, annotations and spec."""
    return {"metadata": dict(template["metadata"], namespace="t"), "spec": dict(template["spec"])}


def vm(templates=None, volumes=None, previous=None, disks=None):
    templates = templates if templates is not None else [os_template(), data_template()]
    volumes = volumes or {"rootdisk": "db-os-v20260615", "pgdata": "db-pgdata"}
    notes = {repave.TEMPLATES: json.dumps(templates)}
    if previous:
        notes[repave.PREVIOUS] = previous
    disks = disks or [{"name": "rootdisk", "bootOrder": 1, "disk": {}}, {"name": "pgdata", "disk": {}}]
    return {
        "metadata": {"name": "db", "namespace": "t", "annotations": notes},
        "spec": {
            "template": {
                "spec": {
                    "domain": {"devices": {"disks": disks}},
                    "volumes": [
                        {"name": v, "persistentVolumeClaim": {"claimName": c}} for v, c in volumes.items()
                    ],
                }
            }
        },
    }


def claims_of(*templates):
    return {t["metadata"]["name"]: claim(t) for t in templates}


def roles(machine, claims=None, images=None, **kw):
    found = repave.classify_claims(
        machine,
        claims if claims is not None else claims_of(os_template(), data_template()),
        IMAGES if images is None else images,
        **kw,
    )
    return {n: r["role"] for n, r in found.items()}


# ----------------------------------------------------------------------------- classification


def test_the_image_disk_on_its_class_at_the_boot_slot_is_os_everything_else_data():
    assert roles(vm()) == {"db-os-v20260615": "os", "db-pgdata": "data"}
    why = repave.classify_claims(vm(), claims_of(os_template(), data_template()), IMAGES)
    assert "carries no harvesterhci.io/imageId" in why["db-pgdata"]["why"]
    assert "made from image %s" % IMAGE in why["db-os-v20260615"]["why"]


def test_volume_names_play_no_part():
    # The same disks with the volume names swapped: still decided by what the claims are.
    swapped = vm(
        volumes={"pgdata": "db-os-v20260615", "rootdisk": "db-pgdata"},
        disks=[{"name": "pgdata", "bootOrder": 1, "disk": {}}, {"name": "rootdisk", "disk": {}}],
    )
    assert roles(swapped) == {"db-os-v20260615": "os", "db-pgdata": "data"}


@pytest.mark.parametrize(
    "template, images, why",
    [
        (os_template(image=None), IMAGES, "carries no harvesterhci.io/imageId"),
        (os_template(storage_class="lab-fs"), IMAGES, "is not the class of image"),
        (os_template(image="images/gone"), IMAGES, "was not found"),
        (os_template(), {IMAGE: {"status": {}}}, "has no StorageClass yet"),
        (os_template(image="not-a-ref"), IMAGES, "was not found"),
        (os_template(labels={repave.DISK_ROLE: "data"}), IMAGES, "label goldenimage.pipeline/disk-role"),
        (os_template(annotations={repave.TEARDOWN_ROLE: "data"}), IMAGES, "teardown-role says data"),
    ],
)
def test_what_cannot_be_proven_an_os_disk_is_data(template, images, why):
    machine = vm(templates=[template, data_template()])
    found = repave.classify_claims(machine, claims_of(template, data_template()), images)
    assert found["db-os-v20260615"]["role"] == "data"
    assert why in found["db-os-v20260615"]["why"]


def test_an_image_disk_attached_as_a_second_disk_is_data():
    second = os_template(name="db-extra")
    machine = vm(
        templates=[os_template(), second, data_template()],
        volumes={"rootdisk": "db-os-v20260615", "extra": "db-extra", "pgdata": "db-pgdata"},
    )
    found = repave.classify_claims(machine, claims_of(os_template(), second, data_template()), IMAGES)
    assert found["db-extra"]["role"] == "data" and "not its boot disk (rootdisk)" in found["db-extra"]["why"]


def test_a_claim_and_its_template_naming_different_images_is_data():
    template = os_template()
    real = claim(template)
    real["metadata"]["annotations"] = {repave.IMAGE_ID: "images/other"}
    found = repave.classify_claims(vm(), {"db-os-v20260615": real}, dict(IMAGES, **{"images/other": {}}))
    assert (
        found["db-os-v20260615"]["role"] == "data" and "different images" in found["db-os-v20260615"]["why"]
    )


def test_a_claim_known_by_name_only_is_data_and_a_trusted_os_role_marker_is_not_proof():
    marked = data_template(annotations={repave.TEARDOWN_ROLE: "os"})
    found = repave.classify_claims(None, claims_of(marked), IMAGES)
    assert found["db-pgdata"]["role"] == "data"
    assert repave.classify_claims(None, {}, IMAGES, names={"x"})["x"]["role"] == "data"


def test_without_the_vm_the_claims_own_annotations_decide():
    found = roles(None, claims_of(os_template(), data_template()))
    assert found == {"db-os-v20260615": "os", "db-pgdata": "data"}


def test_boot_volume_without_boot_order_is_the_first_disk():
    machine = vm(disks=[{"name": "rootdisk", "disk": {}}, {"name": "pgdata", "disk": {}}])
    assert repave.boot_volume(machine) == "rootdisk"
    machine = vm(disks=[{"name": "pgdata", "bootOrder": 2}, {"name": "rootdisk", "bootOrder": 1}])
    assert repave.boot_volume(machine) == "rootdisk"
    assert repave.boot_volume({}) is None


def test_instance_claims_and_image_ids():
    pattern = re.compile(r"^db-(?:os-v\d{8}|pgdata)$")
    claims = claims_of(os_template(), data_template(), data_template(name="other-pgdata"))
    assert repave.instance_claims("db", vm(), claims) == {"db-os-v20260615", "db-pgdata"}
    assert repave.instance_claims("db", None, claims, pattern) == {"db-os-v20260615", "db-pgdata"}
    marked = data_template(name="odd", labels={repave.TEARDOWN: "db"})
    assert "odd" in repave.instance_claims("db", None, claims_of(marked), pattern)
    assert repave.image_ids(vm(), {}) == [IMAGE]


# --------------------------------------------------------------------------------- os_volume


def test_os_volume_naming_the_data_claim_is_refused_naming_claim_why_and_move():
    machine = vm()
    found = repave.classify_claims(machine, claims_of(os_template(), data_template()), IMAGES)
    inst = {"name": "db", "namespace": "t"}
    assert repave.check_os_volume(inst, machine, found, "rootdisk") == "db-os-v20260615"
    with pytest.raises(repave.RepaveRefused) as refused:
        repave.check_os_volume(inst, machine, found, "pgdata")
    msg = str(refused.value)
    assert refused.value.reason == "NotAnOSDisk" and isinstance(refused.value, PipelineError)
    assert "t/db cannot be repaved (NotAnOSDisk)" in msg
    assert "os_volume pgdata is backed by claim db-pgdata, which is data: it carries no" in msg
    assert "nothing was written" in msg
    assert "set os_volume to the VM's OS volume: rootdisk (claim db-os-v20260615)" in msg
    with pytest.raises(repave.RepaveRefused, match="has no volume rootdsk backed by a claim"):
        repave.check_os_volume(inst, machine, found, "rootdsk")


def test_no_proven_os_disk_says_so():
    machine = vm(templates=[os_template(image=None), data_template()])
    found = repave.classify_claims(machine, claims_of(os_template(image=None), data_template()), IMAGES)
    with pytest.raises(repave.RepaveRefused, match="no volume of this VM is proven to be an OS disk"):
        repave.check_os_volume({"name": "db"}, machine, found, "rootdisk")


def test_swapped_out_data_is_found_and_an_unproven_old_os_disk_is_not():
    new = os_template(name="db-os-v20260815", image="images/new", storage_class="lh-new")
    images = dict(IMAGES, **{"images/new": {"status": {"storageClassName": "lh-new"}}})
    broken = vm(
        templates=[os_template(), data_template(), new],
        volumes={"rootdisk": "db-os-v20260615", "pgdata": "db-os-v20260815"},
        previous="db-pgdata",
    )
    claims = claims_of(os_template(), data_template(), new)
    found = repave.classify_claims(broken, claims, images)
    assert repave.swapped_out_data(broken, found, claims) == ["db-pgdata"]
    # A previous OS disk whose image is gone is unproven (kept), but it is not data out of its slot.
    done = vm(
        templates=[new, data_template()], volumes={"rootdisk": "db-os-v20260815", "pgdata": "db-pgdata"}
    )
    done["metadata"]["annotations"][repave.PREVIOUS] = "db-os-v20260615"
    claims = claims_of(os_template(), data_template(), new)
    found = repave.classify_claims(done, claims, {"images/new": images["images/new"]})
    assert found["db-os-v20260615"]["role"] == "data"
    assert repave.swapped_out_data(done, found, claims) == []


def test_teardown_refusal_lists_each_data_claim_with_why():
    found = repave.classify_claims(vm(), claims_of(os_template(), data_template()), IMAGES)
    refusal = repave.teardown_refusal("VirtualMachine t/db", found, False)
    assert isinstance(refusal, Refusal)
    assert "db-pgdata (data: it carries no" in refusal.msg and "nothing was deleted" in refusal.msg
    assert "purge_data: true" in refusal.msg and refusal.result["data_pvcs"] == ["db-pgdata"]
    assert repave.teardown_refusal("VirtualMachine t/db", found, True) is None
    only_os = {"db-os-v20260615": found["db-os-v20260615"]}
    assert repave.teardown_refusal("VirtualMachine t/db", only_os, False) is None
