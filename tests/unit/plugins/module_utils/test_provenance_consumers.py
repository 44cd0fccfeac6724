"""Signing where made and verifying where used, pure: the keep-or-sign decision, the names beside an
artifact, the policy's stored form, the verdict a golden records and its judgement under today's policy, the
mirror catalog's signatures and trust section, and the golden's provenance annotation."""

import json

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket import mirror
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import golden, golden_inventory
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

A, B = "a" * 64, "b" * 64
KEY, OTHER = "1" * 64, "2" * 64
OBJECT = "debian-12/20260801/sha256-%s/debian.qcow2" % A


def _statement(builder=None, time="2026-12-01T00:00:00Z", uri="https://upstream.example/debian.qcow2"):
    return mirror.mirrored_statement(OBJECT, A, uri, builder or {"playbook": "mirror.yml"}, time)


def test_the_mirrored_statement_names_the_object_and_the_redacted_upstream():
    doc = _statement(uri="https://user:secret@upstream.example/debian.qcow2?X-Amz-Signature=abc")
    assert doc["subject"] == [{"name": OBJECT, "digest": {"sha256": A}}]
    (upstream,) = provenance.summary(doc)["inputs"]
    assert upstream["name"] == "upstream" and upstream["digest"] == {"sha256": A}
    assert "secret" not in upstream["uri"] and "abc" not in upstream["uri"]


def test_signing_keeps_what_the_same_key_made_for_the_same_build_and_redoes_the_rest():
    wanted = _statement()
    later = _statement(time="2026-12-02T00:00:00Z")
    kept = provenance.plan_signing(KEY, later, {"key": KEY}, {"key": KEY, "statement": wanted})
    assert kept == {"signature": False, "provenance": False, "statement": wanted}
    fresh = provenance.plan_signing(KEY, wanted, None, None)
    assert (fresh["signature"], fresh["provenance"]) == (True, True)
    other_key = provenance.plan_signing(KEY, wanted, {"key": OTHER}, {"key": OTHER, "statement": wanted})
    assert (other_key["signature"], other_key["provenance"]) == (True, True)
    other_build = provenance.plan_signing(
        KEY, _statement(builder={"playbook": "other.yml"}), {"key": KEY}, {"key": KEY, "statement": wanted}
    )
    assert (other_build["signature"], other_build["provenance"]) == (False, True)
    forced = provenance.plan_signing(KEY, wanted, {"key": KEY}, {"key": KEY, "statement": wanted}, force=True)
    assert (forced["signature"], forced["provenance"]) == (True, True)


def test_the_files_beside_an_artifact_and_back():
    assert provenance.companions(OBJECT) == (OBJECT + ".sig", OBJECT + ".intoto.jsonl")
    assert provenance.companion_of(OBJECT + ".sig") == OBJECT
    assert provenance.companion_of(OBJECT + ".intoto.jsonl") == OBJECT
    assert provenance.companion_of(OBJECT) is None and provenance.companion_of(".sig") is None


def test_the_catalog_lists_signatures_beside_their_image_and_not_as_images():
    meta = {
        "sha256": A,
        "source-url": "https://upstream.example/d.qcow2",
        "mirrored-at": "2026-08-01T00:00:00Z",
    }
    objects = [
        {"key": OBJECT, "size": 10, "metadata": meta},
        {"key": OBJECT + ".sig", "size": 96},
        {"key": OBJECT + ".intoto.jsonl", "size": 900},
        {"key": "stray.sig", "size": 1},
    ]
    document, ignored, problems = mirror.catalog_from_listing("b", objects)
    (entry,) = document["families"]["debian-12"]["versions"]
    assert (entry["signature"], entry["provenance"]) == (OBJECT + ".sig", OBJECT + ".intoto.jsonl")
    assert ignored == ["stray.sig"] and problems == []


PEM = (
    "-----BEGIN PUBLIC KEY-----\n"
    "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEBt1Yl0bZk0u2X9m9o9v4D0lZ0d6oX3sWb8O2ZxkQ4o6p8kCq6GzC4mYb8Y8g\n"
    "4d8J8XzGJ1xk2XH6j1vY0k8x1w==\n"
    "-----END PUBLIC KEY-----\n"
)


def test_the_trust_section_is_stored_in_a_form_read_back_to_the_same_policy():
    given = {
        "rules": [{"name": "mirror", "public_key": PEM, "families": ["debian-12"]}, {"key": KEY}],
        "relaxed": [{"family": "lab-scratch", "reason": "throwaway"}, {"stream": "rc", "reason": "previews"}],
    }
    stored = mirror.trust_section(given)
    assert provenance.normalize_policy(stored) == provenance.normalize_policy(given)
    assert mirror.trust_section(stored) == stored
    document = mirror.build_catalog("b", [], stored)
    assert mirror.catalog_trust(document) == provenance.normalize_policy(given)
    assert mirror.catalog_trust({"families": {}}) is None
    with pytest.raises(mirror.MirrorError, match="option trust: trust policy relaxed entry 1"):
        mirror.trust_section({"relaxed": [{"family": "x"}]})


def _policy(*rules, relaxed=()):
    return provenance.normalize_policy({"rules": list(rules), "relaxed": list(relaxed)})


def test_a_recorded_verdict_is_judged_again_by_todays_policy():
    verdict = {"verdict": "verified", "key": KEY, "signer": "mirror", "ok": True}
    record = provenance.verdict_record(verdict, OBJECT, A, "debian-12", _statement())
    assert (
        record["inputs"][0]["uri"] == "https://upstream.example/debian.qcow2" and record["signer"] == "mirror"
    )
    trusting = _policy({"key": KEY, "families": ["debian-12"]})
    assert provenance.record_problem(trusting, record, "golden g", "debian-12") is None
    problem, move = provenance.record_problem(_policy({"key": OTHER}), record, "golden g", "debian-12")
    assert (
        "golden g was signed by key %s" % KEY in problem and "no longer lets sign family debian-12" in problem
    )
    assert "trust the key again" in move
    relaxed = {"verdict": "unsigned_allowed", "key": None, "relaxed": "lab", "ok": True}
    unsigned = provenance.verdict_record(relaxed, OBJECT, A, "debian-12")
    lab = _policy(relaxed=[{"family": "debian-12", "reason": "lab"}])
    assert provenance.record_problem(lab, unsigned, "golden g", "debian-12") is None
    assert (
        "relaxation of family debian-12"
        in provenance.record_problem(trusting, unsigned, "golden g", "debian-12")[0]
    )
    assert (
        "no verified signature recorded"
        in provenance.record_problem(trusting, None, "golden g", "debian-12")[0]
    )


def test_bytes_other_than_the_signed_digest_are_refused_naming_both():
    found = provenance.bytes_differ({"name": OBJECT, "digest": {"sha256": A}}, {"sha256": B}, KEY)
    assert (found["verdict"], found["check"], found["ok"], found["key"]) == (
        "signature_mismatch",
        "digest",
        False,
        KEY,
    )
    assert "sha256:%s" % A in found["message"] and "sha256:%s" % B in found["message"]


def _golden(annotations):
    return {"metadata": {"name": "g", "namespace": "n", "annotations": annotations}}


def test_a_golden_records_the_verdict_on_its_own_digest_once():
    record = {"verdict": "verified", "key": KEY, "sha256": A, "family": "debian-12"}
    patch = golden.provenance_patch({}, record, "sha256:" + A, "golden g")
    value = patch["metadata"]["annotations"][golden.PROVENANCE_ANNOTATION]
    assert json.loads(value) == record
    assert golden.provenance_patch(_golden({golden.PROVENANCE_ANNOTATION: value}), record, None, "g") is None
    assert golden.provenance_patch({}, None, None, "g") is None
    with pytest.raises(golden.GoldenError, match="golden g: the provenance verdict given is for sha256:" + A):
        golden.provenance_patch(_golden({golden.RELEASE_DIGEST: "sha256:" + B}), record, None, "golden g")
    assert golden.recorded_provenance(_golden({golden.PROVENANCE_ANNOTATION: value})) == record
    assert golden.recorded_provenance(_golden({golden.PROVENANCE_ANNOTATION: "{"}))["verdict"] is None


# Real keys: what a record carries is verified again, so the tests sign what they record.
SIGNERS = [ec.generate_private_key(ec.SECP256R1()) for _i in range(3)]
IDS = [signing.key_id(k) for k in SIGNERS]


def _rule(index, *families):
    return {
        "public_key": signing.public_pem(SIGNERS[index]),
        "name": "k%d" % index,
        "families": list(families),
    }


def _signed(index, artifact=OBJECT, sha256=A, inputs=()):
    """The statement key ``index`` signs for ``artifact`` at ``sha256``, and the texts written beside it."""
    doc = provenance.statement(
        {"name": artifact, "digest": {"sha256": sha256}}, list(inputs), {}, "2026-12-01T00:00:00Z"
    )
    key = SIGNERS[index]
    texts = (
        signing.signature_text(signing.sign_digest(key, sha256)),
        provenance.envelope_line(signing.sign_envelope(key, provenance.serialize(doc))),
    )
    return doc, texts


def _record(index, family="debian-12", artifact=OBJECT, sha256=A, inputs=()):
    """The record os_mirror_verify makes of key ``index``'s signature: verdict, key, artifact, evidence."""
    doc, texts = _signed(index, artifact, sha256, inputs)
    verdict = {"verdict": provenance.VERIFIED, "key": IDS[index], "signer": "k%d" % index}
    return provenance.verdict_record(verdict, artifact, sha256, family, doc, texts)


def _problem(policy_doc, record, family="debian-12", digest=A, facts=None):
    policy = provenance.normalize_policy(policy_doc)
    proof = signing.record_proof(policy, record)
    found = provenance.recorded_verdict_problem(
        policy, record, proof, "golden g", family, digest={"sha256": digest} if digest else {}, facts=facts
    )
    return found and found[0]


def test_a_verified_record_holds_only_with_evidence_a_trusted_key_made_for_the_goldens_own_digest():
    policy = {"rules": [_rule(0, "debian-12")], "relaxed": [{"family": "lab-scratch", "reason": "lab"}]}
    record = _record(0)
    assert record["evidence"]["signature"] and record["evidence"]["provenance"]
    assert _problem(policy, record) is None
    # G1: a hand-written verified record naming the trusted key, with nothing that proves it.
    forged = {"verdict": "verified", "key": IDS[0], "signer": "k0", "artifact": OBJECT, "sha256": A}
    assert "with no evidence" in _problem(policy, forged) and IDS[0] in _problem(policy, forged)
    # G2: another family's relaxation is no relaxation of the golden's family.
    other = {
        "verdict": "unsigned_allowed",
        "artifact": "x",
        "sha256": A,
        "family": "lab-scratch",
        "relaxed": "lab",
    }
    assert "relaxation of family debian-12" in _problem(policy, other)
    # ... and a verdict verified for another family is judged for the golden's.
    assert "no longer lets sign family debian-12" in _problem(
        {"rules": [_rule(0, "lab-scratch")]}, _record(0, family="lab-scratch")
    )
    # G3: a verified record naming no artifact or no digest.
    for field in ("artifact", "sha256"):
        bare = dict(record)
        bare.pop(field)
        assert "naming no artifact or no sha256 digest" in _problem(policy, bare)
    # G4: a record for other bytes than the golden's release digest, and a golden with none.
    assert "the signature is of other bytes" in _problem(policy, record, digest=B)
    assert "no digest recorded" in _problem(policy, record, digest=None)
    # Evidence signed by another key, or for other bytes, while the record names the trusted key.
    stolen = dict(record, evidence=_record(1)["evidence"])
    found = _problem({"rules": [_rule(0, "debian-12"), _rule(1, "ubuntu")]}, stolen)
    assert "does not verify" in found and "signature check failed" in found and IDS[0] in found, found
    other_bytes = dict(_record(0, sha256=B), sha256=A)
    assert "signature check failed" in _problem(policy, other_bytes)
    # A key the policy names by id only cannot be checked: nothing verifies.
    assert "keys with a public key in it: none" in _problem({"rules": [{"key": IDS[0]}]}, record)
    # The record's own claims must be the signed statement's.
    assert "records inputs other than" in _problem(policy, dict(record, inputs=[{"name": "upstream"}]))


def test_image_facts_other_than_the_ones_the_statement_signed_are_refused():
    facts = {"schema_version": 1, "os_family": "linux", "private_keys": []}
    named = [{"name": provenance.FACTS, "digest": provenance.facts_digest(facts)}]
    policy = {"rules": [_rule(0, "debian-12")]}
    record = _record(0, inputs=named)
    assert _problem(policy, record, facts=facts) is None
    assert _problem(policy, record, facts=None) is None
    found = _problem(policy, record, facts=dict(facts, private_keys=["/etc/ssh/ssh_host_ed25519_key"]))
    assert "facts check failed" in found and facts_hex(facts) in found, found


def facts_hex(facts):
    return provenance.facts_digest(facts)["sha256"]


@settings(max_examples=150, deadline=None)
@given(
    family=st.sampled_from(["debian-12", "lab-scratch"]),
    signer=st.sampled_from([0, 1, 2]),
    signed_sha=st.sampled_from([A, B]),
    signed_name=st.sampled_from([OBJECT, "other.qcow2"]),
    verdict=st.sampled_from([provenance.VERIFIED, provenance.RELAXED, None]),
    claimed_key=st.sampled_from([0, 1, 2]),
    claimed_sha=st.sampled_from([A, B, None]),
    claimed_name=st.sampled_from([OBJECT, "other.qcow2", None]),
    claimed_family=st.sampled_from(["debian-12", "lab-scratch"]),
    evidence=st.booleans(),
    relax=st.booleans(),
)
def test_a_golden_passes_only_if_a_trusted_key_signed_its_own_digest_for_its_own_family(
    family,
    signer,
    signed_sha,
    signed_name,
    verdict,
    claimed_key,
    claimed_sha,
    claimed_name,
    claimed_family,
    evidence,
    relax,
):
    """Whatever the annotation says (verdict, key, artifact, digest, family), a golden of ``family`` whose
    release digest is A passes the gate only when the evidence it carries is a signature over A and a
    statement naming its artifact at A, both by a key trusted for ``family``; or, with no verified verdict,
    when ``family`` is relaxed today."""
    policy = {
        "rules": [_rule(0, "debian-12"), _rule(1, "lab-scratch")],
        "relaxed": [{"family": "lab-scratch", "reason": "lab"}] if relax else [],
    }
    doc, texts = _signed(signer, signed_name, signed_sha)
    claim = {"verdict": verdict, "key": IDS[claimed_key], "signer": "k%d" % claimed_key}
    record = provenance.verdict_record(
        claim, claimed_name, claimed_sha, claimed_family, doc, texts if evidence else None
    )
    trusted = {"debian-12": 0, "lab-scratch": 1}[family] == signer
    if verdict == provenance.VERIFIED:
        holds = (
            evidence
            and trusted
            and signed_sha == A
            and claimed_sha == A
            and claimed_name is not None
            and claimed_name == signed_name
            and claimed_key == signer
        )
    else:
        holds = family == "lab-scratch" and relax
    assert (_problem(policy, record, family=family) is None) == holds


def test_golden_info_says_whether_each_golden_still_verifies():
    record = _record(0)
    result = {
        "families": [
            {
                "family": "debian-12",
                "candidates": [
                    {"name": "g1", "namespace": "n", "provenance": record, "own_digest": "sha256:" + A},
                    {"name": "g2", "namespace": "n", "provenance": None, "own_digest": "sha256:" + A},
                    {"name": "g3", "namespace": "n", "provenance": record, "own_digest": "sha256:" + B},
                    # Only a selection names its digest: the recorded verdict is bound to nothing of its own.
                    {"name": "g4", "namespace": "n", "provenance": record, "digest": "sha256:" + A},
                ],
            }
        ]
    }
    golden_inventory.judge_provenance(result, {"rules": [_rule(0, "debian-12")]}, signing.record_proof)
    first, second, third, fourth = result["families"][0]["candidates"]
    assert first["provenance_verifies"] is True and first["provenance_problem"] is None
    assert (
        second["provenance_verifies"] is False
        and "golden n/g2 has no verified signature" in second["provenance_problem"]
    )
    assert third["provenance_verifies"] is False and "other bytes" in third["provenance_problem"]
    assert fourth["provenance_verifies"] is False and "no digest recorded" in fourth["provenance_problem"]
    with pytest.raises(golden.GoldenError, match="option trust_policy"):
        golden.provenance_problem(record, {"rules": [{"key": "nope"}]}, "debian-12", "g", None, None, None)


KEYS = ("1" * 64, "2" * 64, "3" * 64)
FAMILIES = ("debian-12", "ubuntu-24.04")


class TrustOverTime(RuleBasedStateMachine):
    """Keys are trusted and withdrawn, families relaxed and tightened, goldens imported under the policy of
    the day; at every step a golden serves exactly when today's policy accepts what was proven at import."""

    def __init__(self):
        super().__init__()
        self.trusted = {}  # key -> families
        self.relaxed = {}  # family -> reason
        self.goldens = []  # (family, record)

    def policy(self):
        rules = [{"key": k, "families": sorted(f)} for k, f in sorted(self.trusted.items()) if f]
        relaxed = [{"family": f, "reason": r} for f, r in sorted(self.relaxed.items())]
        return provenance.normalize_policy({"rules": rules, "relaxed": relaxed})

    @rule(key=st.sampled_from(KEYS), family=st.sampled_from(FAMILIES))
    def trust(self, key, family):
        self.trusted.setdefault(key, set()).add(family)

    @rule(key=st.sampled_from(KEYS))
    def withdraw(self, key):
        self.trusted.pop(key, None)

    @rule(family=st.sampled_from(FAMILIES))
    def relax(self, family):
        self.relaxed[family] = "lab images"

    @rule(family=st.sampled_from(FAMILIES))
    def tighten(self, family):
        self.relaxed.pop(family, None)

    @rule(key=st.sampled_from(KEYS + (None,)), family=st.sampled_from(FAMILIES))
    def import_golden(self, key, family):
        policy = self.policy()
        artifact = {"name": OBJECT, "digest": {"sha256": A}}
        if key is None:
            verdict = provenance.judge(artifact, family, None, policy, None, None)
        else:
            statement = provenance.statement(artifact, [], {}, "2026-12-01T00:00:00Z")
            verdict = provenance.judge(
                artifact,
                family,
                None,
                policy,
                {"key": key},
                {"key": key, "statement": statement, "named": [key]},
            )
        if verdict["ok"]:  # a refused import makes no golden
            self.goldens.append((family, provenance.verdict_record(verdict, OBJECT, A, family)))

    @invariant()
    def a_golden_serves_exactly_while_todays_policy_accepts_its_proof(self):
        policy = self.policy()
        for family, record in self.goldens:
            accepted = (
                record["verdict"] == "verified" and family in self.trusted.get(record["key"], set())
            ) or (record["verdict"] != "verified" and family in self.relaxed)
            assert (provenance.record_problem(policy, record, "golden", family) is None) == accepted


TestTrustOverTime = TrustOverTime.TestCase
TestTrustOverTime.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)


HEX = st.text(alphabet="0123456789abcdef", min_size=128, max_size=128)


@settings(max_examples=200, deadline=None)
@given(
    recorded_name=st.sampled_from(["rev-a.qcow2", "rev-b.qcow2", None]),
    recorded=HEX,
    served=HEX,
    same=st.booleans(),
)
def test_a_verified_record_binds_only_its_own_artifact_and_bytes(recorded_name, recorded, served, same):
    """Whatever a copied record says, it holds only for the artifact it names and the digest it was
    verified over; anything else is refused, naming the revision."""
    served = recorded if same else served
    record = {"verdict": provenance.VERIFIED, "key": KEY, "artifact": recorded_name, "sha512": recorded}
    found = provenance.record_binding(record, "rev-a.qcow2", {"sha512": served}, "revision a", "move")
    holds = recorded_name == "rev-a.qcow2" and recorded == served
    assert (found is None) == holds
    if found:
        assert found[0].startswith("revision a records a signature verified") and found[1] == "move"
    # A record that is no verified one is record_problem's to judge, never this rule's.
    assert provenance.record_binding(dict(record, verdict=provenance.RELAXED), "x", {}, "w", "m") is None


def test_the_report_of_a_record_says_who_signed_from_what_and_whether_the_facts_still_match():
    facts = {"schema_version": 1, "os_family": "linux", "os": {"id": "ubuntu"}}
    record = {
        "verdict": provenance.VERIFIED,
        "key": KEY,
        "signer": "release",
        "inputs": [{"name": provenance.FACTS, "digest": provenance.facts_digest(facts)}],
        "builder": {"playbook": "bake.yml"},
        "time": "2026-12-01T00:00:00Z",
    }
    report = provenance.signed_report(record, facts)
    assert (report["signer"], report["key"], report["facts_match"]) == ("release", KEY, True)
    assert report["builder"] == {"playbook": "bake.yml"} and report["inputs"] == record["inputs"]
    assert provenance.signed_report(record, dict(facts, os={"id": "debian"}))["facts_match"] is False
    assert provenance.signed_report(record, None)["facts_match"] is None
    assert provenance.signed_report(None, facts) == dict(provenance.signed_report({}), facts_match=None)


def test_golden_info_reports_a_goldens_signer_and_facts_by_the_rule_the_drift_report_reads():
    facts = {"schema_version": 1, "os_family": "linux"}
    record = {
        "verdict": "verified",
        "key": KEY,
        "signer": "mirror",
        "sha256": A,
        "inputs": [{"name": provenance.FACTS, "digest": provenance.facts_digest(facts)}],
    }
    annotations = {
        golden.PROVENANCE_ANNOTATION: json.dumps(record),
        golden.IMAGE_FACTS_ANNOTATION: golden.facts_annotation(facts, "golden g"),
    }
    obj = dict(_golden(annotations), spec={}, status={})
    found = golden_inventory.candidate(obj, golden.FILESYSTEM, None, {})
    assert found["provenance_report"] == provenance.signed_report(record, facts)
    assert (
        found["provenance_report"]["facts_match"] is True and found["provenance_report"]["signer"] == "mirror"
    )
    annotations[golden.IMAGE_FACTS_ANNOTATION] = golden.facts_annotation(
        dict(facts, os_family="windows"), "g"
    )
    assert (
        golden_inventory.candidate(obj, golden.FILESYSTEM, None, {})["provenance_report"]["facts_match"]
        is False
    )
    assert golden_inventory.candidate(_golden({}), golden.FILESYSTEM, None, {})["provenance_report"] is None
