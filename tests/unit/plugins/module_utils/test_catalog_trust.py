"""The catalog's trust section: checked when the catalog is read or written, a malformed one refused naming
the field, and read as the trust policy a registration is judged by."""

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import catalog
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

# Real keys: a recorded verdict is verified again from the evidence it carries, so the tests sign it.
KEY, OTHER_KEY = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
PEM, OTHER_PEM = signing.public_pem(KEY), signing.public_pem(OTHER_KEY)
KEY_ID, OTHER_ID = signing.key_id(KEY), signing.key_id(OTHER_KEY)


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
    doc = catalog.register_image(catalog.empty(), "v20260615", "22.04", ["16"], SHA512, "upload")[0]
    if record is not None:
        doc["images"]["v20260615"]["signature"] = record
    if section is not None:
        doc = catalog.set_trust(doc, section)[0]
    return doc


ARTIFACT = catalog.signed_subject("v20260615", "22.04")
SHA256, SHA512 = "c" * 64, "a" * 128


def verified(key=KEY, subject=None, artifact=ARTIFACT, sha256=SHA256, sha512=SHA512):
    """The record baked_image makes of ``key``'s signature over the artifact, with its evidence; the statement
    names ``subject`` (default: both digests of the artifact)."""
    subject = subject or {"name": artifact, "digest": {"sha256": sha256, "sha512": sha512}}
    doc = provenance.statement(subject, [], {}, "2026-12-01T00:00:00Z")
    texts = (
        signing.signature_text(signing.sign_digest(key, sha256)),
        provenance.envelope_line(signing.sign_envelope(key, provenance.serialize(doc))),
    )
    verdict = {"verdict": "verified", "key": signing.key_id(key), "signer": "release-2026"}
    return catalog.signature_record(
        verdict, "v20260615", "22.04", {"sha256": sha256, "sha512": sha512}, doc, texts
    )


VERIFIED = verified()


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
            "naming no artifact or no sha256 digest",
        ),
        (
            {k: v for k, v in VERIFIED.items() if k != "sha512"},
            trust(),
            "records a signature verified over sha256:",
        ),
        # A verdict written by hand (or kept from before evidence was recorded): a claim, nothing proves it.
        (
            {k: v for k, v in VERIFIED.items() if k != "evidence"},
            trust(),
            "with no evidence",
        ),
        # The record names the trusted key; the evidence was made by a key the policy does not hold.
        (
            dict(VERIFIED, evidence=verified(OTHER_KEY)["evidence"]),
            trust(),
            "signature check failed",
        ),
        # A statement that names only the SHA-256: the checksum Harvester downloads against is bound to
        # nothing signed, so entry, record and checksum could all be moved to other bytes together.
        (
            verified(subject={"name": ARTIFACT, "digest": {"sha256": SHA256}}),
            trust(),
            "subject check failed",
        ),
        # The statement names another SHA-512 than the one the entry serves by.
        (
            verified(subject={"name": ARTIFACT, "digest": {"sha256": SHA256, "sha512": "b" * 128}}),
            trust(),
            "does not verify",
        ),
    ],
)
def test_a_revisions_recorded_signature_is_judged_by_todays_policy(record, section, words):
    problem = catalog.signature_problem(signed_catalog(record, section), "v20260615", signing.record_proof)
    if words is None:
        assert problem is None
    else:
        assert problem[0].startswith("revision v20260615 ") and words in problem[0], problem


def test_a_pinned_trust_policy_refuses_a_catalog_that_says_otherwise():
    doc = catalog.set_trust(catalog.empty(), trust())[0]
    catalog.check_trust_pin(doc, None, "catalog c")  # nothing pinned, nothing to check
    catalog.check_trust_pin(doc, trust(), "catalog c")  # the same policy, however it is written
    for held, pinned, words in [
        (catalog.empty(), trust(), "the catalog has no trust section, so it would check no signature"),
        (
            catalog.set_trust(
                catalog.empty(), trust(keys=trust()["keys"] + [{"name": "x", "public_key": OTHER_PEM}])
            )[0],
            trust(),
            "it trusts key x (%s), which the pin does not" % OTHER_ID[:12],
        ),
        (doc, trust(keys=[]), "it trusts key release-2026"),
        (
            catalog.set_trust(catalog.empty(), trust(keys=[{"name": "release-2026", "public_key": PEM}]))[0],
            trust(),
            "key %s may sign other streams" % KEY_ID[:12],
        ),
        (
            catalog.set_trust(
                catalog.empty(), trust(streams={"22.04": {"require_signature": False, "reason": "x"}})
            )[0],
            trust(),
            "stream 22.04: unsigned allowed (x) in the catalog, no entry (signature required) in the pin",
        ),
    ]:
        with pytest.raises(catalog.CatalogError) as refused:
            catalog.check_trust_pin(held, pinned, "catalog c")
        assert refused.value.msg.startswith(
            "catalog c: its trust section is not the trust policy this run pins"
        )
        assert words in refused.value.msg and "Nothing was read" in refused.value.msg, refused.value.msg
    with pytest.raises(
        catalog.CatalogError, match=r"catalog.trust \(the pinned trust policy\): catalog trust.keys"
    ):
        catalog.check_trust_pin(doc, {"keys": "x"}, "catalog c")


class CatalogWriter(RuleBasedStateMachine):
    """Whoever may write the catalog (not the signing key) edits a signed revision's entry at will: its
    checksum, its record's fields, the evidence (kept, dropped, another revision's, a stranger's). The
    invariant: the revision holds only while the checksum Harvester downloads against is the SHA-512 the
    trusted key signed for this revision's artifact."""

    OTHER = catalog.signed_subject("v20260501", "22.04")
    SIGNED = {  # (artifact, sha256, sha512) -> the record the trusted key's evidence makes
        (ARTIFACT, SHA256, SHA512): VERIFIED,
        (OTHER, "e" * 64, "f" * 128): verified(artifact=OTHER, sha256="e" * 64, sha512="f" * 128),
    }
    STRANGER = verified(OTHER_KEY)
    # Signed by the trusted key for these bytes, by a signer that named only their SHA-256.
    SHA256_ONLY = verified(subject={"name": ARTIFACT, "digest": {"sha256": SHA256}})

    def __init__(self):
        super().__init__()
        self.doc = signed_catalog(dict(VERIFIED), trust())

    def entry(self):
        return self.doc["images"]["v20260615"]

    @rule(checksum=st.sampled_from([SHA512, "f" * 128, "b" * 128]))
    def set_checksum(self, checksum):
        self.entry()["checksum"] = checksum

    @rule(checksum=st.sampled_from([SHA512, "f" * 128, "b" * 128]))
    def rebind(self, checksum):
        """Point the entry at other bytes, the record following, as one edit of the ConfigMap would."""
        self.entry()["checksum"] = self.entry()["signature"]["sha512"] = checksum

    @rule(
        field_value=st.sampled_from(
            [("sha256", v) for v in (SHA256, "e" * 64)]
            + [("sha512", v) for v in (SHA512, "f" * 128, "b" * 128)]
            + [("artifact", v) for v in (ARTIFACT, OTHER)]
            + [("key", v) for v in (KEY_ID, OTHER_ID)]
        )
    )
    def set_record_field(self, field_value):
        self.entry()["signature"][field_value[0]] = field_value[1]

    @rule(source=st.sampled_from(["ours", "other revision", "stranger", "sha256 only", "none"]))
    def set_evidence(self, source):
        record = self.entry()["signature"]
        found = {
            "ours": VERIFIED,
            "other revision": self.SIGNED[(self.OTHER, "e" * 64, "f" * 128)],
            "stranger": self.STRANGER,
            "sha256 only": self.SHA256_ONLY,
        }.get(source)
        if found is None:
            record.pop("evidence", None)
        else:
            record["evidence"] = found["evidence"]

    @rule(source=st.sampled_from(["ours", "other revision"]))
    def copy_record(self, source):
        key = (ARTIFACT, SHA256, SHA512) if source == "ours" else (self.OTHER, "e" * 64, "f" * 128)
        self.entry()["signature"] = dict(self.SIGNED[key])

    @invariant()
    def holds_only_for_the_signed_bytes(self):
        problem = catalog.signature_problem(self.doc, "v20260615", signing.record_proof)
        if problem is None:
            assert self.entry()["checksum"] == SHA512, self.entry()


TestCatalogWriter = CatalogWriter.TestCase
TestCatalogWriter.settings = settings(max_examples=150, stateful_step_count=10, deadline=None)
