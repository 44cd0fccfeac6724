import datetime

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import golden as g

DIGEST = "sha256:f0dea74da9c54ba4728b2f4841316490cadd66b7ab1ed10de46549d457eb5018"


def snapshot(name="golden-ubuntu-24-04-20260828-f0dea74da9c5", namespace="golden-images", ready=True, **meta):
    labels = meta.pop("labels", {g.FAMILY_LABEL: "ubuntu-24-04", g.MODE_KEY: "Filesystem"})
    annotations = meta.pop(
        "annotations",
        {g.FAMILY_ANNOTATION: "ubuntu-24-04", g.OS_NAME_ANNOTATION: "Ubuntu 24.04", g.MODE_KEY: "Filesystem"},
    )
    return {
        "apiVersion": g.SNAPSHOT_API_VERSION,
        "kind": g.SNAPSHOT_KIND,
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
        "spec": {"source": {"persistentVolumeClaimName": "disk"}},
        "status": {"readyToUse": ready, "restoreSize": "10Gi"},
    }


def pvc(mode="Filesystem", phase="Bound"):
    return {"spec": {"volumeMode": mode}, "status": {"phase": phase}}


@pytest.mark.parametrize(
    "value,expected",
    [
        (None, "Filesystem"),
        ("", "Filesystem"),
        ("filesystem", "Filesystem"),
        ("BLOCK", "Block"),
        (" Block ", "Block"),
    ],
)
def test_normalize_mode(value, expected):
    assert g.normalize_mode(value) == expected


def test_unknown_mode_names_the_choices():
    with pytest.raises(g.GoldenError, match="Filesystem or Block"):
        g.normalize_mode("ext4")


def test_namespaces_follow_the_mode():
    assert g.namespace_for("block") == "golden-images-block"
    assert g.namespace_for(None) == "golden-images"
    assert g.mode_for_namespace("golden-images-block") == "Block"
    assert g.mode_for_namespace("default") is None


def test_placement_derives_either_side_and_refuses_a_mismatch():
    assert g.resolve_placement(None, None) == ("Filesystem", "golden-images")
    assert g.resolve_placement("block", None) == ("Block", "golden-images-block")
    assert g.resolve_placement(None, "golden-images-block") == ("Block", "golden-images-block")
    with pytest.raises(g.GoldenError, match="a Block golden lives in golden-images-block"):
        g.resolve_placement("Block", "golden-images")
    with pytest.raises(g.GoldenError, match="holds no goldens"):
        g.resolve_placement(None, "tenant-a")


def test_versioned_name():
    assert g.versioned_name("windows-11", "2026-08-28", DIGEST) == "golden-windows-11-20260828-f0dea74da9c5"
    assert (
        g.versioned_name("debian-12", datetime.date(2026, 1, 2), DIGEST[7:])
        == "golden-debian-12-20260102-f0dea74da9c5"
    )


def test_versioned_name_rejects_a_family_that_cannot_be_part_of_a_name():
    with pytest.raises(g.GoldenError, match="give the name explicitly"):
        g.versioned_name("Windows_11", "20260828", DIGEST)


@pytest.mark.parametrize("family", ["", "-ubuntu", "a" * 64, "ubuntu 24", "ubuntu/24"])
def test_family_must_be_a_label_value(family):
    with pytest.raises(g.GoldenError, match="not a valid label value"):
        g.validate_family(family)


@pytest.mark.parametrize("digest", ["sha256:abc", "md5:" + "0" * 64, "sha256:" + "g" * 64, None])
def test_bad_digests(digest):
    with pytest.raises(g.GoldenError, match="sha256"):
        g.normalize_digest(digest)


def test_digest_normalized():
    assert g.normalize_digest(DIGEST.upper().replace("SHA256", "sha256")) == DIGEST
    assert g.normalize_digest(DIGEST[7:]) == DIGEST


def test_dates():
    assert g.normalize_date("20260828") == "20260828"
    assert g.normalize_date("2026-08-28") == "20260828"
    assert g.normalize_date(None, today=datetime.date(2026, 8, 9)) == "20260809"
    assert len(g.normalize_date()) == 8
    with pytest.raises(g.GoldenError, match="YYYYMMDD"):
        g.normalize_date("28/08/2026")


@pytest.mark.parametrize("name", ["Golden", "golden_x", "-golden", "a" * 254, "golden..x"])
def test_object_names(name):
    with pytest.raises(g.GoldenError, match="DNS-1123"):
        g.validate_object_name(name)


def test_golden_name_needs_name_or_family_and_digest():
    assert g.golden_name("my-golden") == "my-golden"
    assert g.golden_name(None, "debian-12", "20260101", DIGEST) == "golden-debian-12-20260101-f0dea74da9c5"
    with pytest.raises(g.GoldenError, match="give name, or family and digest"):
        g.golden_name(None, "debian-12")


def test_contract_keys_and_nothing_else():
    labels = g.contract_labels("ubuntu-24-04", "block")
    annotations = g.contract_annotations("ubuntu-24-04", "Ubuntu", "block")
    assert labels == {g.FAMILY_LABEL: "ubuntu-24-04", g.MODE_KEY: "Block"}
    assert annotations == {
        g.FAMILY_ANNOTATION: "ubuntu-24-04",
        g.OS_NAME_ANNOTATION: "Ubuntu",
        g.MODE_KEY: "Block",
    }
    assert g.ACTIVE_LABEL not in labels
    with pytest.raises(g.GoldenError, match="os_name is required"):
        g.contract_annotations("ubuntu-24-04", " ", "Block")


def test_snapshot_definition_is_staged_not_active():
    definition = g.snapshot_definition("golden-x", "disk", "ubuntu", "Ubuntu", "block", "csi-snap")
    assert definition["metadata"]["namespace"] == "golden-images-block"
    assert g.ACTIVE_LABEL not in definition["metadata"]["labels"]
    assert definition["spec"] == {
        "source": {"persistentVolumeClaimName": "disk"},
        "volumeSnapshotClassName": "csi-snap",
    }
    assert "volumeSnapshotClassName" not in g.snapshot_definition("x", "disk", "u", "U", None)["spec"]


def test_valid_golden_has_no_problems():
    assert g.validate_golden(snapshot()) == []
    assert g.validate_golden(snapshot(), family="ubuntu-24-04", mode="filesystem") == []


def test_mode_may_be_absent_in_golden_images():
    obj = snapshot(
        labels={g.FAMILY_LABEL: "u"},
        annotations={g.FAMILY_ANNOTATION: "u", g.OS_NAME_ANNOTATION: "U"},
    )
    assert g.validate_golden(obj) == []
    obj["metadata"]["namespace"] = "golden-images-block"
    assert g.validate_golden(obj) == [
        "mode Filesystem (no kube-dc.com/golden-mode key, so Filesystem is assumed) does not match namespace "
        "golden-images-block, which serves Block goldens"
    ]


def test_every_missing_key_is_reported():
    problems = g.validate_golden(snapshot(labels={}, annotations={}, ready=False))
    assert problems == [
        "label kube-dc.com/golden-os (the family) is missing",
        "annotation kube-dc.com/os-family-id (the canonical family id) is missing",
        "annotation kube-dc.com/os-name (the display name) is missing",
        "not Ready: status.readyToUse is false",
    ]


def test_inconsistencies_are_reported():
    obj = snapshot(
        namespace="golden-images",
        labels={g.FAMILY_LABEL: "ubuntu", g.MODE_KEY: "Block"},
        annotations={g.FAMILY_ANNOTATION: "debian", g.OS_NAME_ANNOTATION: "U", g.MODE_KEY: "Block"},
    )
    obj["status"] = {"readyToUse": False, "error": {"message": "snapshot failed"}}
    assert g.validate_golden(obj) == [
        "label kube-dc.com/golden-os (ubuntu) and annotation kube-dc.com/os-family-id (debian) disagree",
        "mode Block does not match namespace golden-images, which serves Filesystem goldens",
        "not Ready: status.readyToUse is false",
        "status.error is set: snapshot failed",
    ]


@pytest.mark.parametrize("value", ["True", "yes", "1", "false", ""])
def test_golden_active_is_exactly_true_or_absent(value):
    obj = snapshot(labels={g.FAMILY_LABEL: "ubuntu-24-04", g.MODE_KEY: "Filesystem", g.ACTIVE_LABEL: value})
    assert g.validate_golden(obj) == [
        'label kube-dc.com/golden-active: %r is neither "true" nor absent (the seeder reads only "true")'
        % value
    ]
    assert g.is_active(obj) is False
    obj["metadata"]["labels"][g.ACTIVE_LABEL] = "true"
    assert g.validate_golden(obj) == [] and g.is_active(obj) is True
    del obj["metadata"]["labels"][g.ACTIVE_LABEL]
    assert g.validate_golden(obj) == [] and g.is_active(obj) is False


def test_mode_label_and_annotation_disagree_or_are_unreadable():
    obj = snapshot(
        labels={g.FAMILY_LABEL: "u", g.MODE_KEY: "Block"},
        annotations={g.FAMILY_ANNOTATION: "u", g.OS_NAME_ANNOTATION: "U", g.MODE_KEY: "Filesystem"},
    )
    assert g.validate_golden(obj) == [
        "label kube-dc.com/golden-mode (Block) and annotation kube-dc.com/golden-mode (Filesystem) disagree"
    ]
    obj["metadata"]["labels"][g.MODE_KEY] = "ext4"
    assert g.validate_golden(obj) == ["label kube-dc.com/golden-mode: 'ext4' is not Filesystem or Block"]


def test_lowercase_mode_is_accepted():
    obj = snapshot(
        namespace="golden-images-block",
        labels={g.FAMILY_LABEL: "u", g.MODE_KEY: "block"},
        annotations={g.FAMILY_ANNOTATION: "u", g.OS_NAME_ANNOTATION: "U"},
    )
    assert g.validate_golden(obj) == []


def test_outside_the_golden_namespaces():
    assert g.validate_golden(snapshot(namespace="tenant")) == [
        "namespace tenant: goldens live in golden-images (Filesystem) or golden-images-block (Block)"
    ]


def test_expectations():
    assert g.validate_golden(snapshot(), family="debian", mode="Block") == [
        "family is ubuntu-24-04, expected debian",
        "mode is Filesystem, expected Block",
    ]
    assert g.validate_golden(None) == ["snapshot not found"]


def test_unknown_keys_are_found_and_known_ones_are_not():
    obj = snapshot()
    obj["metadata"]["labels"][g.ACTIVE_LABEL] = "true"
    obj["metadata"]["annotations"][g.CLONE_MIN_SIZE_ANNOTATION] = "10Gi"
    obj["metadata"]["annotations"]["kube-dc.com/built-by"] = "packer"
    obj["metadata"]["labels"]["example.com/x"] = "y"
    assert g.unknown_keys(obj) == ["kube-dc.com/built-by"]


def test_stamp_patch_holds_only_the_difference():
    assert g.stamp_patch(snapshot(), "ubuntu-24-04", "Ubuntu 24.04", "Filesystem") is None
    obj = snapshot(labels={"app": "x"}, annotations={g.OS_NAME_ANNOTATION: "Old"})
    assert g.stamp_patch(obj, "ubuntu-24-04", "Ubuntu 24.04", "filesystem") == {
        "metadata": {
            "labels": {g.FAMILY_LABEL: "ubuntu-24-04", g.MODE_KEY: "Filesystem"},
            "annotations": {
                g.FAMILY_ANNOTATION: "ubuntu-24-04",
                g.OS_NAME_ANNOTATION: "Ubuntu 24.04",
                g.MODE_KEY: "Filesystem",
            },
        }
    }


def test_summary_and_progress():
    obj = snapshot()
    obj["metadata"]["labels"][g.ACTIVE_LABEL] = "true"
    obj["status"]["boundVolumeSnapshotContentName"] = "snapcontent-1"
    assert g.summary(obj) == {
        "name": "golden-ubuntu-24-04-20260828-f0dea74da9c5",
        "namespace": "golden-images",
        "family": "ubuntu-24-04",
        "os_name": "Ubuntu 24.04",
        "mode": "Filesystem",
        "source_pvc": "disk",
        "ready": True,
        "restore_size": "10Gi",
        "content_name": "snapcontent-1",
        "active": True,
        "image_facts": None,
    }
    assert g.phase(obj) == "Ready"
    assert g.phase({"status": {"boundVolumeSnapshotContentName": "c"}}) == "Bound"
    assert g.phase({"status": {"error": {"message": "x"}}}) == "Failed"
    assert g.phase({}) == "Pending"
    assert g.describe_progress({"status": {"readyToUse": False, "error": {"message": "boom"}}}) == (
        "readyToUse=false, creationTime=unset, restoreSize=unset, error=boom"
    )
    # The controller's binding is no progress of the driver's: a wait compares the same line before it.
    bound = {"status": {"readyToUse": False, "boundVolumeSnapshotContentName": "snapcontent-1"}}
    assert g.describe_progress(bound) == g.describe_progress({"metadata": {"name": "s"}})
    cut = {"status": {"readyToUse": False, "creationTime": "2026-12-07T08:00:00Z", "restoreSize": "1Gi"}}
    assert g.describe_progress(cut) == (
        "readyToUse=false, creationTime=2026-12-07T08:00:00Z, restoreSize=1Gi, error=unset"
    )
    assert g.describe_progress(None) == "not found"


def test_pvc_problems():
    assert g.pvc_problems(pvc("Block"), "disk", "golden-images-block", "Block") == []
    assert (
        g.pvc_problems({"spec": {}, "status": {"phase": "Bound"}}, "disk", "golden-images", "Filesystem")
        == []
    )
    assert g.pvc_problems(pvc("Filesystem", "Pending"), "disk", "golden-images-block", "Block") == [
        "PersistentVolumeClaim golden-images-block/disk has volumeMode Filesystem, "
        "but a Block golden is made from a Block PVC",
        "PersistentVolumeClaim golden-images-block/disk is not Bound (phase Pending)",
    ]
    assert "not found" in g.pvc_problems(None, "disk", "golden-images", "Filesystem")[0]


class TestPlan:
    args = dict(name="golden-x", family="ubuntu-24-04", os_name="Ubuntu 24.04", mode="Filesystem")

    def test_create(self):
        plan = g.plan_golden(None, pvc="disk", pvc_obj=pvc(), **self.args)
        assert plan["action"] == "create"
        assert plan["definition"]["metadata"]["name"] == "golden-x"

    def test_create_needs_a_pvc(self):
        with pytest.raises(g.GoldenError, match="give pvc to make it"):
            g.plan_golden(None, **self.args)

    def test_create_refuses_an_unfit_pvc(self):
        with pytest.raises(g.GoldenError, match="refusing to make VolumeSnapshot golden-images/golden-x"):
            g.plan_golden(None, pvc="disk", pvc_obj=pvc("Block"), **self.args)

    def test_rerun_changes_nothing(self):
        assert g.plan_golden(snapshot(), pvc="disk", **self.args) == {"action": "none"}

    def test_existing_from_another_source_is_refused(self):
        with pytest.raises(g.GoldenError, match="content never changes; make a new golden"):
            g.plan_golden(snapshot(), pvc="other", **self.args)

    def test_adoption_refuses_a_family_label_and_annotation_that_disagree(self):
        # The label says the requested family, the annotation another: stamping would overwrite one.
        torn = snapshot(
            labels={g.FAMILY_LABEL: "ubuntu-24-04"},
            annotations={g.FAMILY_ANNOTATION: "debian-12", g.OS_NAME_ANNOTATION: "Ubuntu 24.04"},
        )
        with pytest.raises(g.GoldenError) as caught:
            g.plan_golden(torn, adopt=True, **self.args)
        assert (
            "label kube-dc.com/golden-os=ubuntu-24-04 but annotation kube-dc.com/os-family-id=debian-12"
            in str(caught.value)
        )
        assert "fix or remove the wrong key by hand" in str(caught.value)

    def test_adoption_accepts_a_family_given_only_by_the_annotation(self):
        annotated = snapshot(labels={}, annotations={g.FAMILY_ANNOTATION: "ubuntu-24-04"})
        plan = g.plan_golden(annotated, adopt=True, **self.args)
        assert plan["action"] == "stamp"
        assert plan["patch"]["metadata"]["labels"][g.FAMILY_LABEL] == "ubuntu-24-04"
        other = snapshot(labels={}, annotations={g.FAMILY_ANNOTATION: "debian-12"})
        with pytest.raises(g.GoldenError, match="carries family debian-12, not ubuntu-24-04"):
            g.plan_golden(other, adopt=True, **self.args)

    def test_adoption_needs_consent(self):
        bare = snapshot(labels={}, annotations={})
        with pytest.raises(g.GoldenError, match="set adopt: true"):
            g.plan_golden(bare, **self.args)
        plan = g.plan_golden(bare, adopt=True, **self.args)
        assert plan["action"] == "stamp"
        assert set(plan["patch"]["metadata"]) == {"labels", "annotations"}

    def test_own_snapshot_is_stamped_without_adopt(self):
        bare = snapshot(labels={}, annotations={})
        assert g.plan_golden(bare, pvc="disk", **self.args)["action"] == "stamp"

    def test_family_never_changes(self):
        with pytest.raises(g.GoldenError, match="carries family ubuntu-24-04, not debian"):
            g.plan_golden(snapshot(), adopt=True, **{**self.args, "family": "debian"})

    def test_contradicting_mode_is_refused(self):
        obj = snapshot(labels={g.MODE_KEY: "Block"}, annotations={})
        with pytest.raises(g.GoldenError, match="carries mode Block but lives in golden-images"):
            g.plan_golden(obj, adopt=True, **self.args)

    def test_unreadable_mode_is_repaired_by_adoption(self):
        obj = snapshot(labels={g.MODE_KEY: "ext4"}, annotations={})
        plan = g.plan_golden(obj, adopt=True, **self.args)
        assert plan["patch"]["metadata"]["labels"][g.MODE_KEY] == "Filesystem"


def test_snapshot_failure_ignores_what_the_controller_retries():
    assert g.snapshot_failure({"status": {"readyToUse": False}}) is None
    assert g.snapshot_failure({"status": {"error": {"message": "cannot find default snapshot class"}}}) == (
        "cannot find default snapshot class"
    )
    conflict = "Operation cannot be fulfilled: the object has been modified; please apply your changes"
    assert g.snapshot_failure({"status": {"error": {"message": conflict}}}) is None


# ---------------------------------------------------------------- image facts recorded on the golden
FACTS = {
    "schema_version": 1,
    "os_family": "windows",
    "unreadable": [],
    "autologon": {"default_password": "set"},
}


def _with_facts(value):
    return {"metadata": {"name": "g", "annotations": {g.IMAGE_FACTS_ANNOTATION: value}}}


def test_facts_are_recorded_the_same_whatever_the_key_order():
    shuffled = dict(reversed(list(FACTS.items())))
    assert g.facts_annotation(FACTS, "g") == g.facts_annotation(shuffled, "g")
    assert g.recorded_facts(_with_facts(g.facts_annotation(FACTS, "g"))) == FACTS
    assert g.recorded_facts({"metadata": {}}) is None


@pytest.mark.parametrize("facts", [{}, {"os_family": "linux"}, ["schema_version"], "facts"])
def test_what_is_not_a_facts_document_is_refused(facts):
    with pytest.raises(g.GoldenError, match="not an image-facts document"):
        g.facts_annotation(facts, "VolumeSnapshot ns/g")


def test_facts_are_added_once_and_never_replaced():
    value = g.facts_annotation(FACTS, "g")
    assert g.facts_patch({"metadata": {}}, None, "g") is None
    assert g.facts_patch({"metadata": {}}, FACTS, "g") == {
        "metadata": {"annotations": {g.IMAGE_FACTS_ANNOTATION: value}}
    }
    assert g.facts_patch(_with_facts(value), FACTS, "g") is None
    with pytest.raises(g.GoldenError, match="records other image facts"):
        g.facts_patch(_with_facts(value), dict(FACTS, autologon={}), "g")


def test_a_record_that_is_not_json_is_unproven_not_clean():
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import image_facts

    reasons = image_facts.exposure_reasons(g.recorded_facts(_with_facts("{not json")))
    assert reasons and "unproven" in reasons[0]


def _snapshot_class(name, driver, default=False):
    annotations = {g.DEFAULT_SNAPSHOT_CLASS: "true"} if default else {}
    return {"metadata": {"name": name, "annotations": annotations}, "driver": driver}


def test_one_default_per_csi_driver_is_a_valid_cluster_as_the_snapshot_controller_has_it():
    classes = [
        _snapshot_class("lab-snap", "hostpath.csi", default=True),
        _snapshot_class("lab-snap-rbd", "rbd.csi", default=True),
        _snapshot_class("other", "rbd.csi"),
    ]
    chosen = g.snapshot_class(classes)
    assert chosen == {"name": "", "defaults": {"hostpath.csi": "lab-snap", "rbd.csi": "lab-snap-rbd"}}
    assert g.snapshot_class(classes[:1] + classes[2:]) == {
        "name": "lab-snap",
        "defaults": {"hostpath.csi": "lab-snap"},
    }
    assert g.snapshot_class(classes, "other") == {"name": "other", "defaults": {}}


@pytest.mark.parametrize(
    "classes, wanted, words",
    [
        ([_snapshot_class("a", "d1", True), _snapshot_class("b", "d1", True)], "", "a, b of driver d1"),
        ([_snapshot_class("a", "d1")], "", "No VolumeSnapshotClass is annotated"),
        (
            [_snapshot_class("a", "d1", True)],
            "missing",
            "'missing' (golden_namespaces_snapshot_class) does not",
        ),
        ([], "", "(none exists)"),
    ],
)
def test_a_snapshot_class_the_controller_could_not_pick_is_refused_naming_the_move(classes, wanted, words):
    with pytest.raises(g.GoldenError) as err:
        g.snapshot_class(classes, wanted)
    assert words in err.value.msg
