"""The catalog's trust section: checked when the catalog is read or written, a malformed one refused naming
the field, and read as the trust policy a registration is judged by."""

import base64
import hashlib

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import catalog

DER = b"0Y0\x13\x06\x07*\x86H\xce=\x02\x01" + bytes(range(60))
PEM = "-----BEGIN PUBLIC KEY-----\n%s\n-----END PUBLIC KEY-----\n" % base64.b64encode(DER).decode()
KEY_ID = hashlib.sha256(DER).hexdigest()


def trust(**more):
    section = {
        "keys": [{"name": "release-2026", "public_key": PEM, "streams": ["22.04"]}],
        "streams": {"24.04": {"require_signature": False, "reason": "lab stream, never served to tenants"}},
    }
    section.update(more)
    return section


def test_the_trust_section_survives_a_write_and_a_read():
    doc, changed = catalog.set_trust(catalog.empty(), trust())
    assert changed is True
    text = catalog.dump(doc)
    assert "    public_key: |\n      -----BEGIN PUBLIC KEY-----\n" in text  # as a person writes it in Git
    again = catalog.load(text)
    assert again["trust"] == doc["trust"]
    assert catalog.set_trust(again, trust()) == (again, False)
    # Registering a revision keeps the policy.
    doc = catalog.register_image(again, "v20260615", "22.04", ["16"], "a" * 128, "upload")[0]
    assert catalog.load(catalog.dump(doc))["trust"] == again["trust"]


def test_the_policy_names_the_keys_by_id_and_relaxes_only_with_the_reason():
    doc = catalog.set_trust(catalog.empty(), trust())[0]
    policy = catalog.trust_policy(doc)
    assert [(r["key"], r["name"], r["streams"]) for r in policy["rules"]] == [
        (KEY_ID, "release-2026", ["22.04"])
    ]
    assert policy["relaxed_streams"] == {"24.04": "lab stream, never served to tenants"}
    assert catalog.trust_policy(catalog.empty()) is None
    assert catalog.family("22.04") == "ubuntu-2204-postgres"
    assert catalog.signed_subject("v20261201-2404", "24.04") == "ubuntu-2404-postgres-v20261201-2404.qcow2"


@pytest.mark.parametrize(
    "section, field, words",
    [
        ("keys", "", "must be a mapping"),
        (trust(rules=[]), "rules", "is not a field of the trust policy"),
        (trust(keys=[{"name": "x"}]), "keys[0].public_key", "is not a PEM public key"),
        (trust(keys=[{"public_key": "not a key"}]), "keys[0].public_key", "is not a PEM public key"),
        (trust(keys=[{"public_key": PEM, "key": "x"}]), "keys[0].key", "is not a field of a key"),
        (trust(keys=[{"public_key": PEM, "streams": ["24.1"]}]), "keys[0].streams", "OS stream '24.1'"),
        (trust(keys=[{"public_key": PEM, "streams": []}]), "keys[0].streams", "must be a non-empty list"),
        (
            trust(keys=[{"public_key": PEM, "name": "a"}, {"public_key": PEM, "name": "a"}]),
            "keys[1].name",
            "a names two keys",
        ),
        (trust(streams={"22.04": {"require_signature": False}}), "streams.22.04.reason", "relaxed only with"),
        (trust(streams={"22.04": {"require_signature": "no"}}), "streams.22.04.require_signature", "true or"),
        (trust(streams={"22.04": {"relax": True}}), "streams.22.04.relax", "is not a field of a stream"),
    ],
)
def test_a_malformed_policy_is_refused_naming_the_field_when_read_and_when_written(section, field, words):
    with pytest.raises(catalog.CatalogError) as read:
        catalog.normalize({"trust": section})
    assert read.value.msg.startswith("catalog trust%s" % ("." + field if field else "")), read.value.msg
    assert words in read.value.msg, read.value.msg
    with pytest.raises(catalog.CatalogError):
        catalog.set_trust(catalog.empty(), section)


def test_the_signature_record_keeps_the_verdict_and_never_the_key_material():
    verdict = {"verdict": "verified", "key": KEY_ID, "signer": "release-2026", "ok": True, "message": "m"}
    digest = {"sha256": "c" * 64, "sha512": "a" * 128}
    assert catalog.signature_record(verdict, "v20260615", "22.04", digest) == {
        "verdict": "verified",
        "key": KEY_ID,
        "signer": "release-2026",
        "artifact": ARTIFACT,
        "sha256": "c" * 64,
        "sha512": "a" * 128,
        "family": "ubuntu-2204-postgres",
    }
    relaxed = {"verdict": "unsigned_allowed", "key": None, "relaxed": "lab"}
    assert catalog.signature_record(relaxed, "v20260615", "22.04", digest)["relaxed"] == "lab"


def signed_catalog(record, section=None):
    doc = catalog.register_image(catalog.empty(), "v20260615", "22.04", ["16"], "a" * 128, "upload")[0]
    if record is not None:
        doc["images"]["v20260615"]["signature"] = record
    if section is not None:
        doc = catalog.set_trust(doc, section)[0]
    return doc


ARTIFACT = catalog.signed_subject("v20260615", "22.04")
VERIFIED = {
    "verdict": "verified",
    "key": KEY_ID,
    "signer": "release-2026",
    "artifact": ARTIFACT,
    "sha256": "c" * 64,
    "sha512": "a" * 128,
}


@pytest.mark.parametrize(
    "record, section, words",
    [
        (VERIFIED, trust(), None),
        (None, None, None),  # no trust policy: nothing to hold the revision to
        (
            None,
            trust(),
            "has no verified signature recorded, and the trust policy requires one for stream 22.04",
        ),
        (
            VERIFIED,
            trust(keys=[{"public_key": PEM, "streams": ["24.04"]}]),
            "no longer lets sign stream 22.04",
        ),
        (
            {"verdict": "unsigned_allowed", "key": None, "relaxed": "lab"},
            trust(),
            "registered unsigned under a relaxation of stream 22.04 that the trust policy no longer grants",
        ),
        (None, trust(streams={"22.04": {"require_signature": False, "reason": "lab"}}), None),
        # A verified record copied from another revision, or over other bytes, proves nothing about this one.
        (
            dict(VERIFIED, artifact="ubuntu-2204-postgres-v20260501.qcow2"),
            trust(),
            "records a signature verified for ubuntu-2204-postgres-v20260501.qcow2, not for its own artifact",
        ),
        (dict(VERIFIED, sha512="b" * 128), trust(), "the signature is of other bytes"),
        (
            {k: v for k, v in VERIFIED.items() if k != "artifact"},
            trust(),
            "verified for no named artifact",
        ),
        (
            {k: v for k, v in VERIFIED.items() if k != "sha512"},
            trust(),
            "records a signature verified over sha256:",
        ),
    ],
)
def test_a_revisions_recorded_signature_is_judged_by_todays_policy(record, section, words):
    problem = catalog.signature_problem(signed_catalog(record, section), "v20260615")
    if words is None:
        assert problem is None
    else:
        assert problem[0].startswith("revision v20260615 ") and words in problem[0], problem
