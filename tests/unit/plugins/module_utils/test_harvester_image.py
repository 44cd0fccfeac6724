import json

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import catalog
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import harvester_image as hi
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import errors, redact

NS = "harvester-public"
NAME = "ubuntu-2204-postgres-v20260615"
REV = "v20260615"
SC = "lh-1234"
SIGNED = "https://s3.example/b/k.qcow2?X-Amz-Expires=60&X-Amz-Signature=feedface"


def image(url="https://mirror.example/b/k.qcow2", storage_class=SC):
    obj = hi.definition(NS, REV, "22.04", ["16", "17"], "a" * 128, url=url)
    obj["status"] = {"storageClassName": storage_class, "appliedUrl": url}
    return obj


def db(name, applied=None, target=None, phase="Available"):
    status = {"phase": phase}
    if applied:
        status["appliedSpec"] = {"imageRevision": applied}
    if target:
        status["repave"] = {"targetRevision": target}
    return {"kind": "DBInstance", "metadata": {"namespace": "orders", "name": name}, "status": status}


def claim(name, storage_class=None, image_id=None):
    meta = {"namespace": "orders", "name": name}
    if image_id:
        meta["annotations"] = {hi.IMAGE_ID_ANNOTATION: image_id}
    return {"metadata": meta, "spec": {"storageClassName": storage_class}}


def vm(name, annotation):
    return {"metadata": {"namespace": "orders", "name": name, "annotations": {hi.VCT_ANNOTATION: annotation}}}


def tip_catalog(tip=REV, image_ref=None, default=True):
    doc = catalog.empty()
    doc, _changed = catalog.register_image(
        doc, tip, "22.04", ["16"], "a" * 128, "upload", image=image_ref, imported=True
    )
    doc, _changed = catalog.set_stream(doc, "22.04", tip=tip, validated=True, default=default)
    return doc


# ----------------------------------------------------------------------------- consumers


def test_nothing_uses_an_image_nobody_names():
    others = [db("a", applied="v20260101"), claim("p", storage_class="lh-other")]
    assert hi.image_consumers(image(), REV, dbinstances=others[:1], claims=others[1:]) == []
    assert hi.refuse_delete(image(), REV, []) is None


def test_every_kind_of_consumer_is_named_with_why():
    ref = {"namespace": NS, "name": NAME}
    catalogs = [(("ConfigMap", "dbaas", "catalog"), tip_catalog(image_ref=ref))]
    found = hi.image_consumers(
        image(),
        REV,
        catalogs=catalogs,
        dbinstances=[db("pg-1", applied=REV), db("pg-2", applied="v20260101", target=REV)],
        claims=[claim("os-by-class", storage_class=SC), claim("os-by-id", image_id="%s/%s" % (NS, NAME))],
        vms=[
            vm(
                "vm-1",
                json.dumps(
                    [{"metadata": {"name": "d", "annotations": {hi.IMAGE_ID_ANNOTATION: NS + "/" + NAME}}}]
                ),
            ),
            vm("vm-2", "{not json"),
            vm("vm-3", json.dumps([{"metadata": {"name": "d"}, "spec": {"storageClassName": "lh-other"}}])),
        ],
    )
    names = [(c["kind"], c["namespace"], c["name"]) for c in found]
    assert names == [
        ("ConfigMap", "dbaas", "catalog"),
        ("DBInstance", "orders", "pg-1"),
        ("DBInstance", "orders", "pg-2"),
        ("PersistentVolumeClaim", "orders", "os-by-class"),
        ("PersistentVolumeClaim", "orders", "os-by-id"),
        ("VirtualMachine", "orders", "vm-1"),
        ("VirtualMachine", "orders", "vm-2"),
    ]
    assert all(set(c) == {"kind", "namespace", "name", "why"} for c in found)
    assert "default stream" in found[0]["why"] and "validated" in found[0]["why"]
    assert found[1]["why"] == "runs on it: its applied revision is v20260615 (phase Available)"
    assert found[2]["why"] == "is repaving onto it: its target revision is v20260615"
    assert found[3]["why"] == "uses it: it is on the image's StorageClass %s" % SC
    assert "does not parse" in found[6]["why"]


def test_a_catalog_tip_counts_unless_it_records_another_image():
    other = {"namespace": NS, "name": "somewhere-else"}
    assert (
        hi.image_consumers(image(), REV, catalogs=[(("ConfigMap", "a", "c"), tip_catalog(image_ref=other))])
        == []
    )
    # A tip that names no image at all cannot be told apart: it counts (fail closed).
    assert len(hi.image_consumers(image(), REV, catalogs=[(("ConfigMap", "a", "c"), tip_catalog())])) == 1
    # A registered revision that is not a tip is history, not a consumer.
    doc = tip_catalog(tip="v20260701")
    doc, _changed = catalog.register_image(doc, REV, "22.04", ["16"], "a" * 128, "upload", imported=True)
    assert hi.image_consumers(image(), REV, catalogs=[(("ConfigMap", "a", "c"), doc)]) == []


def test_refusal_names_each_consumer_and_the_supported_move():
    found = [
        hi.consumer(
            "DBInstance", "orders", "pg-1", "runs on it: its applied revision is v20260615 (phase Available)"
        )
    ]
    found.append(
        hi.consumer(
            "PersistentVolumeClaim", "orders", "pg-1-os", "uses it: it is on the image's StorageClass lh-1"
        )
    )
    refusal = hi.refuse_delete(image(), REV, found)
    assert isinstance(refusal, errors.Refusal)
    # The one message shape of every delete guard (consumers.refuse_delete).
    assert refusal.msg.startswith(
        "VirtualMachineImage %s/%s (revision %s): refusing to delete it, 2 object(s) use it: "
        % (NS, NAME, REV)
    )
    assert "DBInstance orders/pg-1 runs on it: its applied revision" in refusal.msg
    assert "baked_image_stream" in refusal.msg and "dbinstance_repave" in refusal.msg
    assert refusal.result["consumers"] == found and refusal.result["pvcs"] == ["orders/pg-1-os"]
    assert refusal.result["refused"] is True


# ----------------------------------------------------------------------------- sources and secrets


def test_a_password_in_the_url_is_refused_naming_the_alternatives():
    with pytest.raises(errors.Refusal) as exc:
        hi.check_url("http://user:hunter2@mirror.example/k.qcow2")
    assert "hunter2" not in exc.value.msg
    assert "presigned" in exc.value.msg and "src" in exc.value.msg and "bucket_object_url" in exc.value.msg
    assert hi.check_url(SIGNED) == SIGNED and hi.check_url(None) is None


def test_the_catalog_source_of_a_presigned_url_has_no_signature():
    assert hi.source_of(image(url=SIGNED)) == "https://s3.example/b/k.qcow2"
    assert hi.source_of(image(url=None)) == "upload"
    assert hi.stored_url("https://mirror.example/k.qcow2") == "https://mirror.example/k.qcow2"


def test_signing_the_same_object_again_is_the_same_source():
    resigned = SIGNED.replace("feedface", "cafebabe")
    assert hi.identity_changes(image(url=SIGNED), image(url=resigned)) == []
    changes = hi.identity_changes(
        image(url=SIGNED), image(url="https://s3.example/b/other.qcow2?Signature=x")
    )
    assert changes and changes[0][0] == "url" and "feedface" not in json.dumps(changes)
    with pytest.raises(errors.Refusal, match="build a new revision") as exc:
        hi.refuse_changed_source(image(url=SIGNED), image(url="https://s3.example/b/other.qcow2"), REV)
    assert "feedface" not in exc.value.msg and "feedface" not in json.dumps(exc.value.result)


def test_printable_images_carry_no_signature_and_leave_the_input_alone():
    obj = image(url=SIGNED)
    shown = hi.printable(obj)
    assert "feedface" not in json.dumps(shown) and obj["spec"]["url"] == SIGNED
    assert (
        "X-Amz-Signature" not in json.dumps(shown)
        and shown["spec"]["url"] == SIGNED.split("?", maxsplit=1)[0]
    )
    plain = image()
    assert hi.printable(plain) is plain and hi.printable(None) == {}


def test_controller_messages_are_scrubbed_of_the_signed_url():
    obj = image(url=SIGNED)
    obj["status"].update(
        failed=4,
        conditions=[
            {
                "type": "RetryLimitExceeded",
                "status": "True",
                "message": "failed to download %s: 403" % SIGNED,
            },
            {"type": "Imported", "status": "False", "message": "failed to download %s" % SIGNED},
        ],
    )
    assert "feedface" not in hi.failure(obj) and redact.MASK in hi.failure(obj)
    assert "feedface" not in hi.describe(obj)


# ----------------------------------------------------------------------------- request checks


@pytest.mark.parametrize(
    ("replicas", "retry", "text"),
    [(0, 3, "replicas is 0"), (-2, 3, "replicas is -2"), (None, 11, "retry is 11"), (3, -1, "retry is -1")],
)
def test_request_numbers_are_refused(replicas, retry, text):
    with pytest.raises(errors.Refusal, match=text):
        hi.check_request(REV, replicas, retry)


def test_request_numbers_in_range_pass():
    assert hi.check_request(REV, None, 0) is None and hi.check_request(REV, 4, 10) is None


@pytest.mark.parametrize(
    ("os_version", "pg_versions", "missing"),
    [("24.04", [], "pg_versions"), ("24.04", None, "pg_versions"), (None, ["17"], "os_version")],
)
def test_a_registration_names_its_stream_and_majors(os_version, pg_versions, missing):
    with pytest.raises(errors.Refusal) as caught:
        hi.check_versions("v20261201-2404", os_version, pg_versions)
    assert caught.value.msg.startswith(
        "revision v20261201-2404: %s is required with state=present; " % missing
    )
    assert hi.check_versions("v20261201-2404", "24.04", ["17"]) is None


def test_the_stream_of_a_revision_is_its_name_s_and_must_match_the_one_given():
    assert hi.revision_stream("v20261201-2404") == "24.04"
    assert hi.revision_stream("v20261201-2404", "24.04") == "24.04"
    assert hi.revision_stream("v20260615") == "22.04"
    for name, stream in (("nightly", None), ("v20260615", "24.04")):
        with pytest.raises(hi.ImageError) as caught:
            hi.revision_stream(name, stream)
        assert caught.value.result["refused"] is True and name in caught.value.msg


def test_an_uploaded_file_must_match_the_checksum_given():
    assert hi.check_src_checksum("/tmp/x", "a" * 128, None) == "a" * 128
    with pytest.raises(errors.Refusal, match="not the checksum given"):
        hi.check_src_checksum("/tmp/x", "a" * 128, "b" * 128)


def test_import_state_reads_through_the_shared_accessors():
    obj = image()
    assert not hi.imported(obj) and hi.storage_class_of(obj) == SC
    obj["status"]["conditions"] = [
        {"type": "Imported", "status": "True"},
        {"type": "Initialized", "status": "True"},
    ]
    assert hi.imported(obj) and hi.initialized(obj)
    assert not hi.imported(None) and hi.storage_class_of(None) is None


# ----------------------------------------------------------------------------- half-done work


def test_a_registered_but_unrecorded_image_is_said_with_the_grant_that_completes_it():
    obj = image()
    obj["status"]["conditions"] = [{"type": "Imported", "status": "True"}]
    grant = "get, create and update on configmaps in namespace dbaas"
    error = hi.not_recorded(
        obj, REV, "catalog ConfigMap dbaas/c", "write: forbidden (403)", grant, {"progress": 100}
    )
    assert error.msg == (
        "VirtualMachineImage %s/%s is registered (Imported=True, StorageClass %s) but revision %s is not "
        "recorded in catalog ConfigMap dbaas/c: write: forbidden (403). Nothing was rolled back; grant %s, "
        "then run the task again: it finds the image and only records it" % (NS, NAME, SC, REV, grant)
    )
    assert error.result["registered"] is True and error.result["catalog_written"] is False
    assert error.result["missing_permission"] == grant and error.result["progress"] == 100
    assert "grant" not in hi.not_recorded(obj, REV, "f", "conflict").msg


def test_a_gone_image_still_recorded_as_imported_is_said():
    ref = {"namespace": NS, "name": NAME}
    error = hi.still_imported(ref, True, REV, "catalog ConfigMap ops/c", "forbidden", "update on configmaps")
    assert error.msg.startswith(
        "VirtualMachineImage %s/%s is deleted by this run, but catalog ConfigMap ops/c" % (NS, NAME)
    )
    assert error.msg.endswith("grant update on configmaps, then run the task again")
    assert error.result["catalog_written"] is False
    assert "already gone" in hi.still_imported(ref, False, REV, "f", "x").msg


def test_a_failure_after_the_write_says_what_it_leaves():
    exc = errors.PipelineError("timed out waiting", stuck=True)
    told = hi.left_behind(exc, image(), True, "catalog file /c.yaml")
    assert told is exc and told.msg == (
        "timed out waiting [VirtualMachineImage %s/%s exists (created by this run); the revision is not "
        "recorded in catalog file /c.yaml]" % (NS, NAME)
    )
    assert told.result["stuck"] is True and told.result["registered"] is True
    assert hi.left_behind(errors.PipelineError("x"), {}, False).msg == (
        "x [the VirtualMachineImage exists (registered before this run)]"
    )


def test_replica_mismatch_says_what_became_of_the_image():
    image = {"metadata": {"namespace": "ns", "name": "ubuntu-2204-postgres-v20260706"}}
    gone = hi.replica_mismatch_cleanup(hi.ReplicaMismatch("replicas: asked for 4"), image, True)
    assert "was deleted before its import finished" in gone.msg
    assert gone.result["cleaned_up"] is True and gone.result["registered"] is False
    kept = hi.replica_mismatch_cleanup(hi.ReplicaMismatch("replicas: asked for 4"), image, False)
    assert "registered before this run" in kept.msg and kept.result["registered"] is True
    failed = hi.replica_mismatch_cleanup(hi.ReplicaMismatch("replicas"), image, False, "403 forbidden")
    assert "left behind: deleting it failed: 403 forbidden" in failed.msg and not failed.result["cleaned_up"]


def _with_conditions(obj, progress, **conditions):
    obj["status"]["progress"] = progress
    obj["status"]["conditions"] = [{"type": k, "status": v} for k, v in conditions.items()]
    return obj


def test_the_round_line_names_the_phase_the_percent_and_the_time_since_the_wait_began():
    importing = _with_conditions(image(), 45, Initialized="True", Imported="Unknown")
    assert hi.round_line(NS, NAME, importing, 61.24) == (
        "VirtualMachineImage %s/%s: phase importing, progress 45%% after 61.2s" % (NS, NAME)
    )
    assert hi.phase(None) == "absent"
    assert hi.phase(_with_conditions(image(storage_class=None), 0)) == "initializing"
    assert hi.phase(_with_conditions(image(), 100, Initialized="True", Imported="True")) == "imported"


def test_the_time_out_of_all_rounds_counts_from_the_start_and_says_whether_progress_moved():
    moved = hi.timeout_message("VirtualMachineImage a/b to be Imported=True", 1800.04, [0, 35, 60], True, "p")
    assert moved.startswith("timed out after 1800.0s waiting for VirtualMachineImage a/b to be Imported=True")
    assert "still working: progress went 0% -> 35% -> 60%" in moved and moved.endswith("last observed: p")
    stuck = hi.timeout_message("X to be Imported=True", 90.0, [0], True, "p")
    assert "stuck: the progress did not change in 90s" in stuck
