import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import (
    backing_copies,
    catalog,
    harvester_image,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError

SUM_A = "a" * 128
SUM_B = "b" * 128
TODAY = "2026-12-01"


def registered(*entries):
    """A catalog holding (name, os, pg majors, imported) entries."""
    doc = catalog.empty()
    for name, os_version, majors, imported in entries:
        doc, _changed = catalog.register_image(
            doc, name, os_version, majors, SUM_A + name[-1], "s3://mirror/" + name, imported=imported
        )
    return doc


def seeded():
    """The seed's example: 22.04 validated and default, 24.04 in testing."""
    doc = registered(
        ("v20260615", "22.04", ["15", "16", "17"], True),
        ("v20261201-2404", "24.04", ["15", "16", "17"], True),
        ("v20270301-2404", "24.04", ["15", "16", "17", "18"], False),
    )
    doc, _changed = catalog.set_stream(doc, "22.04", tip="v20260615", validated=True, default=True)
    doc, _changed = catalog.set_stream(doc, "24.04", tip="v20261201-2404")
    return doc


# ----------------------------------------------------------------------------- text


def test_dump_is_deterministic_and_round_trips():
    doc = seeded()
    text = catalog.dump(doc)
    assert catalog.dump(catalog.load(text)) == text
    assert text.splitlines()[0] == "version: 1"
    # revisions sorted by date, whatever the insertion order
    assert text.index("v20260615:") < text.index("v20261201-2404:") < text.index("v20270301-2404:")
    assert catalog.load(text) == catalog.normalize(doc)


def test_load_empty_and_refuses_other_versions():
    assert catalog.load("") == catalog.empty()
    with pytest.raises(catalog.CatalogError, match="version 2 is not understood"):
        catalog.load("version: 2\nimages: {}\n")
    with pytest.raises(catalog.CatalogError, match="mapping"):
        catalog.load("- a list\n")


# ---------------------------------------------------------------------------- images


def test_register_is_idempotent_and_never_changes_content():
    doc = registered(("v20260615", "22.04", [17, "15", "16"], False))
    entry = doc["images"]["v20260615"]
    assert entry["pg_versions"] == ["15", "16", "17"]
    assert entry["build_date"] == "2026-06-15"
    same, changed = catalog.register_image(
        doc, "v20260615", "22.04", ["15", "16", "17"], SUM_A + "5", entry["source"]
    )
    assert not changed and same == doc
    with pytest.raises(catalog.CatalogError, match="build a new revision"):
        catalog.register_image(doc, "v20260615", "22.04", ["15", "16", "17"], SUM_B, entry["source"])
    with pytest.raises(catalog.CatalogError, match="build a new revision"):
        catalog.register_image(doc, "v20260615", "22.04", ["15", "16", "17"], SUM_A + "5", "s3://elsewhere")


def test_register_updates_mutable_fields_and_refuses_bad_names():
    doc = registered(("v20260615", "22.04", ["16"], False))
    doc, changed = catalog.register_image(
        doc, "v20260615", "22.04", ["16"], None, None, storage_class="lh-1", imported=True
    )
    assert changed and doc["images"]["v20260615"]["imported"] is True
    with pytest.raises(catalog.CatalogError, match=r"belongs to OS stream 22\.04"):
        catalog.register_image(doc, "v20260615", "24.04", ["16"], SUM_A, "x")
    with pytest.raises(catalog.CatalogError, match="pg_versions is empty"):
        catalog.register_image(doc, "v20260616", "22.04", [], SUM_A, "x")


# --------------------------------------------------------------------------- streams


def test_tip_must_be_registered():
    with pytest.raises(catalog.CatalogError, match="not in the catalog; register it"):
        catalog.set_stream(seeded(), "22.04", tip="v20990101")


def test_tip_must_be_imported_unless_the_cluster_says_so():
    doc = seeded()
    with pytest.raises(catalog.CatalogError, match="not imported yet"):
        catalog.set_stream(doc, "24.04", tip="v20270301-2404")
    moved, changed = catalog.set_stream(doc, "24.04", tip="v20270301-2404", imported=True)
    assert changed and moved["streams"]["24.04"] == {"tip": "v20270301-2404", "validated": False}


def test_tip_must_match_the_stream_os():
    with pytest.raises(
        catalog.CatalogError, match=r"Ubuntu 24\.04 image and cannot be the tip of stream 22\.04"
    ):
        catalog.set_stream(seeded(), "22.04", tip="v20261201-2404")


def test_unvalidated_stream_cannot_become_default():
    with pytest.raises(catalog.CatalogError, match="not validated and cannot become the default"):
        catalog.set_stream(seeded(), "24.04", default=True)
    doc, changed = catalog.set_stream(seeded(), "24.04", validated=True, default=True)
    assert changed and doc["default_stream"] == "24.04"


def test_default_stream_stays_validated():
    doc = registered(("v20260615", "22.04", ["16"], True), ("v20260701", "22.04", ["16", "17"], True))
    doc, _changed = catalog.set_stream(doc, "22.04", tip="v20260615", validated=True, default=True)
    with pytest.raises(catalog.CatalogError, match="must stay validated"):
        catalog.set_stream(doc, "22.04", tip="v20260701")
    with pytest.raises(catalog.CatalogError, match="must stay validated"):
        catalog.set_stream(doc, "22.04", validated=False)
    with pytest.raises(catalog.CatalogError, match="make another validated stream the default"):
        catalog.set_stream(doc, "22.04", default=False)
    moved, changed = catalog.set_stream(doc, "22.04", tip="v20260701", validated=True)
    assert changed and moved["streams"]["22.04"]["tip"] == "v20260701"


def test_moving_the_tip_resets_validated_and_reruns_are_unchanged():
    doc, _changed = catalog.set_stream(seeded(), "24.04", validated=True)
    again, changed = catalog.set_stream(doc, "24.04", tip="v20261201-2404", validated=True)
    assert not changed and again == doc
    doc, _changed = catalog.register_image(
        doc, "v20270301-2404", "24.04", ["15", "16", "17", "18"], None, None, imported=True
    )
    moved, changed = catalog.set_stream(doc, "24.04", tip="v20270301-2404")
    assert changed and moved["streams"]["24.04"]["validated"] is False


def test_new_stream_needs_a_tip():
    with pytest.raises(catalog.CatalogError, match="has no tip yet"):
        catalog.set_stream(catalog.empty(), "24.04", validated=True)


def test_mark_imported():
    doc, changed = catalog.mark_imported(seeded(), "v20270301-2404")
    assert changed and doc["images"]["v20270301-2404"]["imported"] is True
    assert catalog.mark_imported(doc, "v20270301-2404")[1] is False


# -------------------------------------------------------------------- engine versions


def test_empty_engine_version_is_the_newest_major_of_the_default_tip():
    assert catalog.resolve_engine_version(seeded(), "", today=TODAY) == "17"
    assert catalog.resolve_engine_version(seeded(), None, today=TODAY) == "17"
    assert catalog.resolve_engine_version(seeded(), 16, today=TODAY) == "16"


def test_engine_version_not_in_the_tip_is_refused_with_the_supported_list():
    with pytest.raises(catalog.CatalogError, match=r"18 is not in revision v20260615.*supported: 15, 16, 17"):
        catalog.resolve_engine_version(seeded(), "18", today=TODAY)
    with pytest.raises(catalog.CatalogError, match="not a major version"):
        catalog.resolve_engine_version(seeded(), "16.4", today=TODAY)


def test_engine_version_past_eol_is_refused():
    with pytest.raises(
        catalog.CatalogError, match=r"15 reached end of life on 2027-11-11; supported: 16, 17"
    ):
        catalog.resolve_engine_version(seeded(), "15", today="2027-11-12")
    assert catalog.supported_engine_versions(seeded(), today="2027-11-12") == ["16", "17"]
    # the day of EOL is still supported
    assert catalog.resolve_engine_version(seeded(), "15", today="2027-11-11") == "15"


def test_engine_version_the_eol_table_does_not_know_is_refused_as_such():
    doc = registered(("v20260615", "22.04", ["16", "17", "19"], True))
    doc, _changed = catalog.set_stream(doc, "22.04", tip="v20260615", validated=True, default=True)
    with pytest.raises(catalog.CatalogError) as exc:
        catalog.resolve_engine_version(doc, "19", today=TODAY)
    assert exc.value.msg == (
        "engineVersion 19 has no end-of-life date in the EOL table, so it is not supported; supported: 16, 17"
    )
    assert catalog.resolve_engine_version(doc, None, today=TODAY) == "17"
    verdict = catalog.check_engine_version(doc, "19", TODAY, target="v20260615")
    assert (verdict["problem"], verdict["eol_date"], verdict["supported"]) == (
        "no-eol-date",
        None,
        ["16", "17"],
    )


def test_one_engine_version_verdict_for_new_and_running_databases():
    doc = seeded()
    new = catalog.check_engine_version(doc, "", TODAY)
    assert (new["major"], new["defaulted"], new["problem"], new["revision"]) == (
        "17",
        True,
        None,
        "v20260615",
    )
    running = catalog.check_engine_version(doc, "", TODAY, target="v20270301-2404")
    assert (running["major"], running["problem"], running["stream"]) == (None, "unset", "24.04")
    assert running["supported"] == ["15", "16", "17", "18"]
    late = catalog.check_engine_version(doc, "15", "2027-11-12", target="v20270301-2404")
    assert (late["problem"], late["past_eol"], late["eol_date"].isoformat()) == (
        "past-eol",
        True,
        "2027-11-11",
    )
    gone = catalog.check_engine_version(doc, "18", TODAY)
    assert (gone["problem"], gone["past_eol"]) == ("not-carried", False)
    odd = catalog.check_engine_version(doc, "16.x", TODAY, target="v20260615")
    assert (odd["problem"], odd["major"], odd["detail"]) == ("malformed", None, None)


def test_engine_version_needs_a_validated_default_stream():
    doc = registered(("v20260615", "22.04", ["16"], True))
    with pytest.raises(catalog.CatalogError, match="no default OS stream"):
        catalog.resolve_engine_version(doc, "", today=TODAY)


# ---------------------------------------------------------------- Harvester image rules


def test_checksum_must_be_sha512():
    assert harvester_image.normalize_checksum("SHA512:" + "A" * 128) == "a" * 128
    with pytest.raises(harvester_image.ImageError, match="SHA-512"):
        harvester_image.normalize_checksum("sha256:" + "a" * 64)


def test_image_definition_names_and_labels():
    obj = harvester_image.definition(
        "hp", "v20261201-2404", "24.04", ["17", "15", "16"], SUM_A, url="http://x", replicas=4
    )
    assert obj["metadata"]["name"] == obj["spec"]["displayName"] == "ubuntu-2404-postgres-v20261201-2404"
    labels = obj["metadata"]["labels"]
    assert labels["goldenimage.io/pg-majors"] == "15-16-17" and labels["pg.goldenimage.io/17"] == "true"
    assert obj["spec"]["storageClassParameters"] == {"numberOfReplicas": "4"}
    assert obj["spec"]["sourceType"] == "download"


def test_replica_trap_names_the_winning_class():
    longhorn = {"metadata": {"name": "harvester-longhorn"}, "provisioner": "driver.longhorn.io"}
    default = dict(
        longhorn,
        metadata={
            "name": "harvester-longhorn",
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
    )
    image = {"metadata": {"annotations": {}}}
    assert harvester_image.winning_template(image, [default]) == (
        "harvester-longhorn",
        "the cluster default StorageClass",
    )
    named = {"metadata": {"annotations": {harvester_image.SC_ANNOTATION: "harvester-longhorn"}}}
    template, why = harvester_image.winning_template(named, [longhorn])
    message = backing_copies.replica_trap(4, "2", "lh-1", template, why)
    assert "harvester-longhorn" in message and "annotation" in message and "asked for 4" in message
    assert backing_copies.replica_trap(4, "4", "lh-1", None, None) is None


# ----------------------------------------------------------------- guards of issue-level rules


def test_a_presigned_source_is_stored_without_its_signature_and_old_entries_heal():
    signed = "https://s3.example/b/k.qcow2?X-Amz-Signature=feedface&X-Amz-Expires=60"
    doc, changed = catalog.register_image(catalog.empty(), "v20260615", "22.04", ["16"], SUM_A, signed)
    assert changed and doc["images"]["v20260615"]["source"] == "https://s3.example/b/k.qcow2"
    resigned = signed.replace("feedface", "cafebabe")
    assert catalog.register_image(doc, "v20260615", "22.04", ["16"], SUM_A, resigned)[1] is False
    # An entry written before keeps its content, and no longer its signature, once read.
    old = catalog.normalize(doc)
    old["images"]["v20260615"]["source"] = signed
    healed, changed = catalog.register_image(old, "v20260615", "22.04", ["16"], SUM_A, resigned)
    assert changed is False and "feedface" not in catalog.dump(healed)
    assert catalog.storable_source("http://u:p@h/x") == "http://REDACTED@h/x"
    assert catalog.storable_source("upload") == "upload"


SIGNED = (
    "https://s3.example/mirror/baked/v20260301.qcow2?X-Amz-Algorithm=AWS4-HMAC-SHA256"
    "&X-Amz-Credential=AKIDEXAMPLE%2F20260301%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20260301T000000Z"
    "&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Signature=" + "d" * 64
)


def test_no_entry_keeps_a_signature_whoever_wrote_it():
    """Every entry, not only the one being registered, is stored without a signed query or user-info."""
    raw = catalog.dump(seeded()).replace("source: s3://mirror/v20260615", "source: '%s'" % SIGNED)
    raw = raw.replace(
        "source: s3://mirror/v20261201-2404",
        "source: s3://mirror/v20261201-2404\n    notes: {mirror: 'https://bob:hunter2@mirror.example/x'}",
    )
    assert "X-Amz-Signature" in raw and "hunter2" in raw
    assert catalog.unstorable(raw) == ["v20260615", "v20261201-2404"]
    doc = catalog.load(raw)
    text = catalog.dump(doc)
    for secret in ("X-Amz-Signature", "X-Amz-Credential", "AKIDEXAMPLE", "d" * 64, "hunter2", "bob"):
        assert secret not in text and secret not in repr(doc)
    assert doc["images"]["v20260615"]["source"] == "https://s3.example/mirror/baked/v20260301.qcow2"
    assert doc["images"]["v20261201-2404"]["notes"] == {"mirror": "https://REDACTED@mirror.example/x"}
    assert doc["images"]["v20260615"]["checksum"] == SUM_A + "5"  # the digest stays
    assert catalog.unstorable(text) == [] and catalog.load(text) == doc
    # Registering another revision writes the signed entry back without its signature too.
    after, changed = catalog.register_image(doc, "v20270401-2404", "24.04", ["17"], SUM_B, SIGNED)
    assert changed and "X-Amz" not in catalog.dump(after) and "X-Amz" not in repr(after)
    assert catalog.unstorable("") == [] and catalog.unstorable("images: [") == []


def test_imported_follows_the_cluster_both_ways():
    doc = registered(("v20260615", "22.04", ["16"], True))
    doc, changed = catalog.mark_imported(doc, "v20260615", False)
    assert changed and doc["images"]["v20260615"]["imported"] is False
    assert catalog.mark_imported(doc, "v20260615", False)[1] is False
    assert catalog.mark_imported(doc, "v20260615")[0]["images"]["v20260615"]["imported"] is True
    assert catalog.mark_imported(doc, "v20990101", False)[1] is False


def test_tips_using_names_each_stream_whose_tip_is_the_image():
    doc = seeded()
    ref = {"namespace": "hp", "name": "ubuntu-2204-postgres-v20260615"}
    assert catalog.tips_using(doc, "v20260615", ref) == [
        ("22.04", "its tip is v20260615 (validated, the default stream, which new databases get)")
    ]
    assert catalog.tips_using(doc, "v20270301-2404", ref) == []
    doc["images"]["v20260615"]["image"] = {"namespace": "hp", "name": "elsewhere"}
    assert catalog.tips_using(doc, "v20260615", ref) == []
    assert catalog.records_image({}, "v20260615", ref) is True


@pytest.mark.parametrize(
    ("requested", "text"),
    [
        (16.0, 'a major is a whole number, so write engineVersion: "16"'),
        ("16.0", 'a major is a whole number, so write engineVersion: "16"'),
        ("  ", "option engineVersion: '  ' is not a version string"),
        ("sixteen", "is set but is not a major version number"),
    ],
)
def test_a_set_but_malformed_engine_version_is_never_reported_as_not_set(requested, text):
    with pytest.raises(catalog.CatalogError) as exc:
        catalog.resolve_engine_version(seeded(), requested, today=TODAY)
    assert text in exc.value.msg and "not set" not in exc.value.msg
    assert "supported: 15, 16, 17" in exc.value.msg
    assert catalog.resolve_engine_version(seeded(), 16, today=TODAY) == "16"


def test_catalog_refusals_are_pipeline_errors():
    with pytest.raises(catalog.CatalogError) as exc:
        catalog.set_stream(catalog.empty(), "22.04")
    assert isinstance(exc.value, PipelineError) and exc.value.result["refused"] is True


def test_dbinstance_spec_defaults_and_validates_with_the_one_engine_version_rule():
    spec = {"storage": "20Gi"}
    resolved, major, defaulted, stream = catalog.dbinstance_spec(seeded(), spec, today=TODAY)
    assert (resolved, major, defaulted) == ({"storage": "20Gi", "engineVersion": "17"}, "17", True)
    assert stream == "22.04"
    assert spec == {"storage": "20Gi"}  # the caller's spec is not changed
    assert catalog.dbinstance_spec(seeded(), {"engineVersion": ""}, today=TODAY)[1:3] == ("17", True)
    assert catalog.dbinstance_spec(seeded(), {"engineVersion": "16"}, today=TODAY)[1:3] == ("16", False)
    with pytest.raises(catalog.CatalogError, match="18 is not in revision"):
        catalog.dbinstance_spec(seeded(), {"engineVersion": "18"}, today=TODAY)
    with pytest.raises(catalog.CatalogError, match="reached end of life"):
        catalog.dbinstance_spec(seeded(), {"engineVersion": "15"}, today="2027-11-12")
    for value in (16.0, "16.0"):
        with pytest.raises(catalog.CatalogError, match='write engineVersion: "16"'):
            catalog.dbinstance_spec(seeded(), {"engineVersion": value}, today=TODAY)
    with pytest.raises(catalog.CatalogError, match="expected a mapping"):
        catalog.dbinstance_spec(seeded(), ["engineVersion"], today=TODAY)


def test_a_dbinstance_manifest_is_named_and_needs_a_spec_mapping():
    named = {"metadata": {"name": "orders", "namespace": "shop"}, "spec": {"storage": "1Gi"}}
    assert catalog.dbinstance_subject(named) == "DBInstance shop/orders"
    assert catalog.dbinstance_subject({"metadata": {"name": "orders"}}) == "DBInstance default/orders"
    assert catalog.dbinstance_subject(None) == "DBInstance spec"
    assert catalog.manifest_spec(named) == {"storage": "1Gi"}
    for bad in ({"kind": "DBInstance"}, dict(named, spec="engineVersion: 16"), dict(named, spec=None)):
        with pytest.raises(
            catalog.CatalogError, match="no spec mapping; give the DBInstance manifest"
        ) as exc:
            catalog.manifest_spec(bad)
        assert exc.value.result["refused"] is True


def test_a_tip_whose_image_is_gone_is_refused_naming_the_revision_whatever_the_catalog_says():
    doc = registered(("v20260615", "22.04", ["16"], True), ("v20260701", "22.04", ["16"], True))
    doc, _changed = catalog.register_image(
        doc, "v20260701", "22.04", ["16"], None, None, image={"namespace": "ns", "name": "img-0701"}
    )
    with pytest.raises(
        catalog.CatalogError, match=r"revision v20260701: its VirtualMachineImage ns/img-0701 does not exist"
    ):
        catalog.set_stream(doc, "22.04", tip="v20260701", missing=True)
    with pytest.raises(catalog.CatalogError, match="revision v20260701 is not imported yet"):
        catalog.set_stream(doc, "22.04", tip="v20260701", imported=False)
    doc, _changed = catalog.set_stream(doc, "22.04", tip="v20260701", imported=True)
    # Later the tip's image goes away: no sign-off and no default lands on it.
    for change in (dict(validated=True), dict(default=True)):
        with pytest.raises(catalog.CatalogError, match="revision v20260701: its VirtualMachineImage"):
            catalog.set_stream(doc, "22.04", missing=True, imported=False, **change)
    undone, changed = catalog.set_stream(doc, "22.04", validated=False, missing=True, imported=False)
    assert changed is False and undone["streams"]["22.04"]["validated"] is False


# ------------------------------------------------------------------------- stranding

TODAY_STRANDING = "2026-12-06"


def two_tips():
    """22.04 (the default) at a revision with 15, 16, 17; a later one that drops 15; one that drops 14 too."""
    doc = registered(
        ("v20261101", "22.04", ["14", "15", "16", "17"], True),
        ("v20261201", "22.04", ["16", "17"], True),
    )
    doc, _changed = catalog.set_stream(doc, "22.04", tip="v20261101", validated=True, default=True)
    return doc


def db(name, major, namespace="orders", stream=None):
    return {"namespace": namespace, "name": name, "stream": stream, "major": major}


def test_a_tip_that_drops_a_supported_major_strands_its_databases_with_dates_from_its_eol():
    before = two_tips()
    after, _changes = catalog.set_stream(before, "22.04", tip="v20261201", validated=True)
    fleet = [db("pg15", "15"), db("pg15b", "15", namespace="billing", stream="22.04"), db("pg14", "14")]
    fleet.append(db("pg16", "16"))
    found = catalog.stranded(before, after, fleet, today=TODAY_STRANDING)
    # 14 is past its end of life (2026-11-12): no publish strands it; 16 is still carried.
    assert [(e["namespace"], e["name"]) for e in found] == [("billing", "pg15b"), ("orders", "pg15")]
    assert found[0] == {
        "namespace": "billing",
        "name": "pg15b",
        "major": "15",
        "stream": "22.04",
        "tip": "v20261201",
        "eol_date": "2027-11-11",
        "migrate_by": "2027-11-11",
        "deleted_after": "2028-02-11",
    }
    with pytest.raises(catalog.CatalogError) as exc:
        catalog.require_named_drops(found, [])
    msg = exc.value.msg
    assert (
        "the tip would drop PostgreSQL 15, which is not past end of life, while 2 database(s) run it" in msg
    )
    assert "orders/pg15 (PostgreSQL 15 on stream 22.04, supported until 2027-11-11" in msg
    assert "deleted after 2028-02-11" in msg and "drops_majors" in msg
    assert exc.value.fields["stranded"] == found
    catalog.require_named_drops(found, ["15"])  # named: it goes ahead


def test_the_grace_the_catalog_holds_sets_the_delete_date_never_a_build_date():
    doc, changed = catalog.set_grace(two_tips(), 6)
    assert changed and catalog.grace_months(doc) == 6
    assert catalog.load(catalog.dump(doc))["migration_grace_months"] == 6
    assert catalog.migration_dates(doc, "15") == {
        "eol_date": "2027-11-11",
        "migrate_by": "2027-11-11",
        "deleted_after": "2028-05-11",
    }
    assert catalog.set_grace(doc, 6) == (doc, False)
    with pytest.raises(catalog.CatalogError):
        catalog.set_grace(doc, -1)


def test_a_default_flip_strands_the_databases_that_follow_the_default_stream():
    doc = registered(
        ("v20261101", "22.04", ["15", "16", "17"], True),
        ("v20261201-2404", "24.04", ["16", "17"], True),
    )
    doc, _changes = catalog.set_stream(doc, "22.04", tip="v20261101", validated=True, default=True)
    doc, _changes = catalog.set_stream(doc, "24.04", tip="v20261201-2404", validated=True)
    after, _changes = catalog.set_stream(doc, "24.04", default=True)
    fleet = [db("follows", "15"), db("pinned", "15", stream="22.04")]
    found = catalog.stranded(doc, after, fleet, today=TODAY_STRANDING)
    assert [(e["name"], e["stream"], e["tip"]) for e in found] == [("follows", "24.04", "v20261201-2404")]


def test_only_databases_that_run_are_read_from_dbinstances():
    running = {
        "metadata": {"namespace": "orders", "name": "pg"},
        "spec": {"engineVersion": "16"},
        "status": {"appliedSpec": {"imageRevision": "v20261101", "engineVersion": "15"}},
    }
    assert catalog.database_of(running) == db("pg", "15")
    assert catalog.database_of({"metadata": {"name": "new"}, "spec": {"engineVersion": "15"}}) is None


def test_stream_tips_lists_every_stream_with_a_tip_the_default_first():
    doc = catalog.empty()
    for name, stream in (("v20261129", "22.04"), ("v20261201-2404", "24.04")):
        doc, _changed = catalog.register_image(doc, name, stream, ["17"], "a" * 128, "upload", imported=True)
    doc["streams"] = {
        "22.04": {"tip": "v20261129", "validated": False},
        "24.04": {"tip": "v20261201-2404", "validated": True},
        "26.04": {"tip": None, "validated": False},
    }
    doc["default_stream"] = "24.04"
    tips = catalog.stream_tips(doc)
    assert [(t[0], t[1], t[3], t[4]) for t in tips] == [
        ("24.04", "v20261201-2404", True, True),
        ("22.04", "v20261129", False, False),
    ]


def test_a_revision_keeps_the_package_manifest_it_was_published_with():
    record = {"sha256": "a" * 64, "package_count": 1}
    doc, changed = catalog.register_image(
        catalog.empty(), "v20261129", "22.04", ["17"], "a" * 128, "upload", manifest=record
    )
    assert changed and doc["images"]["v20261129"]["manifest"] == record
    # The same manifest again changes nothing; a registration without one keeps it.
    assert (
        catalog.register_image(doc, "v20261129", "22.04", ["17"], "a" * 128, "upload", manifest=record)[1]
        is False
    )
    assert catalog.register_image(doc, "v20261129", "22.04", ["17"], "a" * 128, "upload")[0] == doc
    with pytest.raises(catalog.CatalogError) as caught:
        catalog.register_image(
            doc, "v20261129", "22.04", ["17"], "a" * 128, "upload", manifest=dict(record, sha256="b" * 64)
        )
    assert caught.value.msg == (
        "revision v20261129 is already in the catalog with another package manifest (sha256 %s, now %s); "
        "published images are immutable: build a new revision" % ("a" * 64, "b" * 64)
    )


def test_a_smoke_test_is_one_observation_of_one_object_at_one_resource_version():
    doc = seeded()

    def observed(version, phase="Available"):
        instance = {
            "metadata": {"uid": "u-1", "resourceVersion": version},
            "status": {"phase": phase, "appliedSpec": {"imageRevision": "v20260615", "engineVersion": "17"}},
        }
        return catalog.smoke_test(doc, "v20260615", "smoke/pg", instance, "t-" + version, "ops")

    doc, changed = catalog.record_smoke_test(doc, observed("7"))
    assert changed is True
    # Looked at again later, unchanged: not another test.
    doc, changed = catalog.record_smoke_test(doc, observed("7"))
    assert changed is False and len(doc["images"]["v20260615"]["smoke_tests"]) == 1
    # The object changed since: a new observation.
    doc, changed = catalog.record_smoke_test(doc, observed("8", phase="Failed"))
    assert changed is True
    assert [t["result"] for t in doc["images"]["v20260615"]["smoke_tests"]] == ["passed", "failed"]
    # A test of an object that does not exist has nothing to identify it by: each is recorded.
    missing = catalog.smoke_test(doc, "v20260615", "smoke/pg", None, "t", "ops")
    doc, _changed = catalog.record_smoke_test(doc, missing)
    doc, changed = catalog.record_smoke_test(doc, missing)
    assert changed is True


def test_dbinstance_spec_reads_the_instance_s_own_stream_and_refuses_misspelt_fields():
    doc = seeded()
    doc, _changed = catalog.register_image(
        doc, "v20270401-2404", "24.04", ["16", "17", "18"], SUM_B, "s3://mirror/v20270401-2404", imported=True
    )
    doc, _changed = catalog.set_stream(doc, "24.04", tip="v20270401-2404", validated=True)
    # 24.04's tip carries 18, the default stream's does not: the instance's own stream decides.
    assert catalog.dbinstance_spec(doc, {"osVersion": "24.04"}, today=TODAY)[1:] == ("18", True, "24.04")
    assert catalog.dbinstance_spec(doc, {"osVersion": "24.04", "engineVersion": "18"}, today=TODAY)[1] == "18"
    with pytest.raises(catalog.CatalogError, match="18 is not in revision v20260615"):
        catalog.dbinstance_spec(doc, {"engineVersion": "18"}, today=TODAY)
    with pytest.raises(catalog.CatalogError, match=r"OS stream 20.04 \(spec.osVersion\) is not a stream"):
        catalog.dbinstance_spec(doc, {"osVersion": "20.04"}, today=TODAY)
    unvalidated = catalog.set_stream(doc, "24.04", tip="v20261201-2404", rollback=True)[0]
    with pytest.raises(catalog.CatalogError, match=r"OS stream 24.04 .* is not validated"):
        catalog.dbinstance_spec(unvalidated, {"osVersion": "24.04"}, today=TODAY)
    with pytest.raises(PipelineError, match="quote it"):
        catalog.dbinstance_spec(doc, {"osVersion": 24.04}, today=TODAY)
    for key, field in (
        ("engineVerison", "engineVersion"),
        ("enginversion", "engineVersion"),
        ("osVerison", "osVersion"),
    ):
        with pytest.raises(catalog.CatalogError, match="spec.%s .* rename it to %s" % (key, field)):
            catalog.dbinstance_spec(doc, {key: "16"}, today=TODAY)
    # Set, the field wins; unrelated fields pass.
    assert (
        catalog.misspelt_spec_fields({"engineVersion": "16", "engineVersions": "x", "storage": "1Gi"}) == []
    )


def test_a_tip_moves_back_only_on_purpose():
    doc = seeded()
    doc, _changed = catalog.register_image(
        doc, "v20270401-2404", "24.04", ["16", "17", "18"], SUM_B, "s3://mirror/v20270401-2404", imported=True
    )
    doc, _changed = catalog.set_stream(doc, "24.04", tip="v20270401-2404")
    with pytest.raises(
        catalog.CatalogError, match=r"v20261201-2404 is older than v20270401-2404.*rollback: true"
    ):
        catalog.set_stream(doc, "24.04", tip="v20261201-2404")
    back, changed = catalog.set_stream(doc, "24.04", tip="v20261201-2404", rollback=True)
    assert changed and back["streams"]["24.04"] == {"tip": "v20261201-2404", "validated": False}
    # Forward needs no word.
    assert catalog.set_stream(back, "24.04", tip="v20270401-2404")[1] is True


def test_a_catalog_too_large_for_a_configmap_is_refused_naming_the_largest_revisions():
    import base64
    import os

    doc = seeded()
    catalog.check_configmap_size(catalog.dump(doc), "catalog ConfigMap ops/catalog")
    # Package lists that do not compress, as large as a year of weekly builds' would be.
    listing = base64.b64encode(os.urandom(45 * 1024)).decode()
    record = {"sha256": "0" * 64, "package_count": 700, "encoding": "zlib+base64", "package_list": listing}
    doc, _changed = catalog.register_image(
        doc, "v20270101", "22.04", ["16", "17"], SUM_A, "upload", imported=True, manifest=record
    )
    for day in range(2, 25):
        doc["images"]["v202701%02d" % day] = dict(doc["images"]["v20270101"])
    with pytest.raises(catalog.CatalogError) as refused:
        catalog.check_configmap_size(catalog.dump(doc), "catalog ConfigMap ops/catalog")
    assert refused.value.msg.startswith("catalog ConfigMap ops/catalog would hold ")
    assert "more than a ConfigMap's 1000 KiB allow" in refused.value.msg
    assert "largest revisions: v202701" in refused.value.msg and "catalog.path" in refused.value.msg
