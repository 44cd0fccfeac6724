"""The mirror's rules: key layout, immutability refusals, the skip decision, part sizes, the catalog."""

import base64
import hashlib
import json
import random

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket import mirror
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal

HEX_A = "a" * 64
HEX_B = "b" * 64
MIB = 1024 * 1024


def existing(digest, filename="disk.qcow2", metadata=None, family="debian-12", version="20260801"):
    return {
        "key": mirror.object_key(family, version, digest, filename),
        "sha256": digest,
        "filename": filename,
        "metadata_sha256": digest if metadata is None else metadata,
    }


# keys ----------------------------------------------------------------------------------------------


def test_object_key_layout():
    key = mirror.object_key("debian-12", "20260801", "sha256:" + HEX_A.upper(), "disk.qcow2")
    assert key == "debian-12/20260801/sha256-%s/disk.qcow2" % HEX_A


@pytest.mark.parametrize("value", ["sha256:" + HEX_A, "sha256-" + HEX_A, HEX_A.upper(), " %s " % HEX_A])
def test_normalize_sha256_accepts_the_usual_spellings(value):
    assert mirror.normalize_sha256(value) == HEX_A


@pytest.mark.parametrize("value", [None, "", "md5:" + HEX_A, HEX_A[:-1], "g" * 64, "sha512:" + HEX_A])
def test_normalize_sha256_refuses_anything_else(value):
    with pytest.raises(mirror.MirrorError, match="not a sha256 digest"):
        mirror.normalize_sha256(value)


@pytest.mark.parametrize(
    "family, version, filename, word",
    [
        ("Debian", "1", "a.img", "family"),
        ("debian/12", "1", "a.img", "family"),
        ("debian", "../1", "a.img", "version"),
        ("debian", "1", "dir/a.img", "filename"),
        ("debian", "1", ".hidden", "filename"),
        ("debian", "", "a.img", "version"),
    ],
)
def test_segments_that_would_break_the_layout_are_refused(family, version, filename, word):
    with pytest.raises(mirror.MirrorError, match="^%s " % word):
        mirror.object_key(family, version, HEX_A, filename)


def test_parse_key_round_trips_and_rejects_other_keys():
    key = mirror.object_key("ubuntu-24.04", "20260715", HEX_A, "noble.img")
    assert mirror.parse_key(key) == {
        "family": "ubuntu-24.04",
        "version": "20260715",
        "sha256": HEX_A,
        "filename": "noble.img",
    }
    for other in (
        "catalog.json",
        "ubuntu/1/noble.img",
        "ubuntu/1/sha256-xyz/noble.img",
        ".incoming/abc/noble.img",
        "ubuntu/1/sha256-%s/sub/noble.img" % HEX_A,
    ):
        assert mirror.parse_key(other) is None


@pytest.mark.parametrize(
    "path, url, name",
    [
        ("/srv/images/disk.qcow2", None, "disk.qcow2"),
        (None, "https://cloud.example/noble/current/noble-server.img?sig=1", "noble-server.img"),
        (None, "http://host/a%2Bb/debian%2B12.qcow2", "debian+12.qcow2"),
    ],
)
def test_filename_from_source(path, url, name):
    assert mirror.filename_from_source(path, url) == name


def test_filename_from_a_url_without_a_file_is_refused():
    with pytest.raises(mirror.MirrorError, match="set filename"):
        mirror.filename_from_source(url="https://cloud.example/")


# the skip decision and immutability ----------------------------------------------------------------


def test_nothing_mirrored_means_upload():
    plan = mirror.plan_object("debian-12", "20260801", "disk.qcow2", HEX_A, [])
    assert plan == {"action": "upload", "key": existing(HEX_A)["key"]}


def test_same_digest_with_matching_metadata_is_skipped():
    plan = mirror.plan_object("debian-12", "20260801", "disk.qcow2", HEX_A, [existing(HEX_A)])
    assert plan == {"action": "skip", "key": existing(HEX_A)["key"]}


def test_a_changed_file_under_the_same_version_is_refused_naming_key_digests_and_move():
    held = existing(HEX_A)
    with pytest.raises(mirror.MirrorError) as caught:
        mirror.plan_object("debian-12", "20260801", "disk.qcow2", HEX_B, [held])
    message = str(caught.value)
    assert held["key"] in message
    assert HEX_A in message and HEX_B in message
    assert "immutable" in message and "new version" in message


def test_an_object_whose_metadata_does_not_prove_its_digest_is_not_trusted():
    for metadata in ("", HEX_B):
        with pytest.raises(mirror.MirrorError, match="refusing to trust"):
            mirror.plan_object(
                "debian-12", "20260801", "disk.qcow2", HEX_A, [existing(HEX_A, metadata=metadata)]
            )


def test_check_digest():
    mirror.check_digest("src", None, HEX_A)
    mirror.check_digest("src", "sha256:" + HEX_A, HEX_A)
    with pytest.raises(mirror.MirrorError, match="nothing was written under a final key"):
        mirror.check_digest("src", HEX_B, HEX_A)


# multipart -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "size, requested, expected",
    [
        (40 * MIB, 16 * MIB, 16 * MIB),
        (40 * MIB, 1 * MIB, 8 * MIB),  # never under 8 MiB
        (None, 4 * MIB, 8 * MIB),  # size unknown (a URL without Content-Length)
        (0, 16 * MIB, 16 * MIB),
        (200 * 1024 * MIB, 8 * MIB, 21 * MIB),  # 200 GiB needs 20.48 MiB parts to fit 10,000
    ],
)
def test_plan_part_size(size, requested, expected):
    assert mirror.plan_part_size(size, requested) == expected


def test_part_plan_always_fits_ten_thousand_parts_of_whole_mib():
    for seed in range(200):
        rng = random.Random(seed)
        size = rng.randrange(0, mirror.MAX_OBJECT_SIZE)
        part = mirror.plan_part_size(size, rng.choice([MIB, 8 * MIB, 16 * MIB, 100 * MIB]))
        assert mirror.MIN_PART_SIZE <= part <= mirror.MAX_PART_SIZE
        assert part % MIB == 0
        assert mirror.part_count(size, part) <= mirror.MAX_PARTS


def test_objects_over_five_tib_are_refused():
    with pytest.raises(mirror.MirrorError, match="5 TiB"):
        mirror.plan_part_size(mirror.MAX_OBJECT_SIZE + 1)


def test_part_count():
    assert mirror.part_count(0, 8 * MIB) == 1
    assert mirror.part_count(8 * MIB, 8 * MIB) == 1
    assert mirror.part_count(8 * MIB + 1, 8 * MIB) == 2


def test_multipart_etag_and_composite_checksum():
    parts = [b"x" * 10, b"y" * 3]
    md5s = [hashlib.md5(p).digest() for p in parts]
    shas = [hashlib.sha256(p).digest() for p in parts]
    assert mirror.multipart_etag(md5s) == hashlib.md5(b"".join(md5s)).hexdigest() + "-2"
    expected = base64.b64encode(hashlib.sha256(b"".join(shas)).digest()).decode()
    assert mirror.composite_sha256(shas) == expected
    assert mirror.checksum_value(expected + "-2") == expected


def test_etag_helpers():
    assert mirror.etag_value('"ABC"') == "abc"
    assert mirror.is_md5_etag('"%s"' % ("0" * 32))
    assert mirror.is_md5_etag("%s-12" % ("f" * 32))
    assert not mirror.is_md5_etag("not-an-md5")


def test_throughput():
    assert mirror.throughput_mib_s(100 * MIB, 2.0) == 50.0
    assert mirror.throughput_mib_s(0, 2.0) == 0.0
    assert mirror.throughput_mib_s(MIB, 0) == 0.0


# catalog -------------------------------------------------------------------------------------------


def listed(
    family, version, digest, filename, size=10, source="https://up/x", mirrored_at="2026-08-01T00:00:00Z"
):
    return {
        "key": mirror.object_key(family, version, digest, filename),
        "size": size,
        "metadata": mirror.final_metadata(digest, source, mirrored_at),
    }


def test_version_order_is_natural():
    versions = ["10", "9", "24.10", "24.04", "2026-08-09", "2026-08-10", "1a", "1"]
    assert sorted(versions, key=mirror.version_order) == [
        "1",
        "1a",
        "9",
        "10",
        "24.04",
        "24.10",
        "2026-08-09",
        "2026-08-10",
    ]


def test_catalog_document():
    objects = [
        listed("ubuntu-24.04", "20260715", HEX_A, "noble.img", size=5),
        listed("debian-12", "10", HEX_B, "disk.qcow2"),
        listed("debian-12", "9", HEX_A, "disk.qcow2", source=""),
        {"key": "catalog.json", "size": 3},
        {"key": ".incoming/t/disk.qcow2", "size": 1},
        {"key": "README.txt", "size": 3},
        {"key": mirror.object_key("debian-12", "11", HEX_A, "disk.qcow2"), "size": 1, "metadata": {}},
    ]
    document, ignored, problems = mirror.catalog_from_listing("cdi-os-images", objects)
    assert list(document["families"]) == ["debian-12", "ubuntu-24.04"]
    debian = document["families"]["debian-12"]
    assert debian["latest"] == "10"
    assert [v["version"] for v in debian["versions"]] == ["9", "10"]
    assert debian["versions"][0] == {
        "version": "9",
        "filename": "disk.qcow2",
        "key": mirror.object_key("debian-12", "9", HEX_A, "disk.qcow2"),
        "sha256": HEX_A,
        "size": 10,
        "source_url": None,
        "mirrored_at": "2026-08-01T00:00:00Z",
    }
    assert document["schema"] == mirror.CATALOG_SCHEMA and document["bucket"] == "cdi-os-images"
    assert ignored == [".incoming/t/disk.qcow2", "README.txt"]  # outside the layout: listed, not catalogued
    assert len(problems) == 1 and "debian-12/11/" in problems[0] and "left out" in problems[0]


def test_catalog_bytes_do_not_depend_on_listing_order():
    objects = [
        listed("f%d" % (i % 3), str(i), hashlib.sha256(b"%d" % i).hexdigest(), "img-%d.qcow2" % (i % 2))
        for i in range(12)
    ]
    first = mirror.render_catalog(mirror.catalog_from_listing("b", objects)[0])
    for seed in range(5):
        shuffled = list(objects)
        random.Random(seed).shuffle(shuffled)
        assert mirror.render_catalog(mirror.catalog_from_listing("b", shuffled)[0]) == first
    assert first.endswith(b"\n")
    assert json.loads(first)["families"]["f0"]["latest"] == "9"


def test_empty_catalog():
    document, ignored, problems = mirror.catalog_from_listing("b", [])
    assert document == {"schema": mirror.CATALOG_SCHEMA, "bucket": "b", "families": {}}
    assert ignored == [] and problems == []


# input rules and redaction ------------------------------------------------------------------------


def test_a_source_url_with_credentials_is_refused_naming_the_moves():
    with pytest.raises(Refusal) as caught:
        mirror.check_source_url("https://mirror:hunter2@up.example/d.qcow2")
    assert "hunter2" not in caught.value.msg and "presigned URL" in caught.value.msg
    assert mirror.check_source_url("https://up.example/d.qcow2?X-Amz-Signature=abc")
    with pytest.raises(Refusal, match="not an http"):
        mirror.check_source_url("file:///etc/passwd")


def test_export_source_with_credentials_is_refused():
    with pytest.raises(Refusal, match="carries credentials"):
        mirror.check_export_source("https://u:p@build.example/win11")
    assert mirror.check_export_source("pvc://golden-images-build/win11-sealed")


def test_stored_forms_of_a_url_are_redacted():
    metadata = mirror.final_metadata(HEX_A, "https://u:pw@up.example/d?token=t0k", "2026-08-01T00:00:00Z")
    assert metadata["source-url"] == "https://REDACTED@up.example/d?token=REDACTED"
    summary = mirror.object_summary("k", 1, HEX_A, "https://up.example/d?X-Amz-Signature=s1g")
    assert "s1g" not in summary["source_url"]
    key = mirror.object_key("debian-12", "1", HEX_A, "d.qcow2")
    entry, problem = mirror.catalog_entry(key, 1, {"sha256": HEX_A, "source-url": "http://a:b@h/x"})
    assert problem is None and entry["source_url"] == "http://REDACTED@h/x"


def test_a_yaml_float_version_is_refused_quote_it():
    with pytest.raises(Refusal, match="quote it"):
        mirror.object_key("debian-12", 1.1, HEX_A, "d.qcow2")
    assert mirror.version_prefix("debian-12", 20260801) == "debian-12/20260801/"


@pytest.mark.parametrize("value", [0, "0", "-1M", "lots", None])
def test_part_size_must_be_positive(value):
    with pytest.raises(Refusal, match="positive number of bytes"):
        mirror.part_size_bytes(value)


def test_part_size_units():
    assert mirror.part_size_bytes("16M") == 16 * MIB and mirror.part_size_bytes(8388608) == 8 * MIB


@pytest.mark.parametrize("value", [0, -2, True, "4"])
def test_concurrency_must_be_one_or_more(value):
    with pytest.raises(Refusal):
        mirror.check_concurrency(value)


def test_export_plan_skips_the_same_bytes_and_refuses_others():
    assert mirror.plan_export("b", "w/k.qcow2", HEX_A, HEX_A) == "skip"
    with pytest.raises(Refusal) as caught:
        mirror.plan_export("b", "w/k.qcow2", HEX_B, HEX_A)
    assert caught.value.msg.startswith("s3://b/w/k.qcow2: refusing to overwrite it")
    assert caught.value.msg.endswith("export the changed image under a new key (a new date)")
    assert caught.value.result["sha256"] == HEX_A
    with pytest.raises(Refusal, match=r"holds sha256 \(none\)"):
        mirror.plan_export("b", "w/k.qcow2", None, HEX_A)


def test_a_claim_export_is_recognised_by_the_claims_uid_not_its_name():
    assert mirror.plan_claim_export("b", "w/k.qcow2", None, "pvc://ns/sealed", "uid-1") == "upload"
    held = {"sha256": HEX_A, "source-url": "pvc://ns/sealed", "source-uid": "uid-1"}
    assert mirror.plan_claim_export("b", "w/k.qcow2", held, "pvc://ns/sealed", "uid-1") == "skip"
    # The same name, rebuilt: another uid, so another disk.
    with pytest.raises(Refusal) as caught:
        mirror.plan_claim_export("b", "w/k.qcow2", held, "pvc://ns/sealed", "uid-2")
    assert caught.value.msg.startswith("s3://b/w/k.qcow2: refusing to overwrite it")
    assert "exported from pvc://ns/sealed (uid uid-1)" in caught.value.msg
    assert caught.value.msg.endswith("nothing was converted or uploaded")
    # An object with no source-uid (uploaded by hand, or by another tool) is not this claim's.
    with pytest.raises(Refusal, match=r"uid \(none\)"):
        mirror.plan_claim_export("b", "w/k.qcow2", {"sha256": HEX_A}, "pvc://ns/sealed", "uid-1")
    # No sha256 recorded: not a finished export.
    with pytest.raises(Refusal):
        mirror.plan_claim_export("b", "w/k.qcow2", {"source-uid": "uid-1"}, "pvc://ns/sealed", "uid-1")


def test_mirror_errors_are_pipeline_errors():
    assert issubclass(mirror.MirrorError, PipelineError)
