"""The provenance rules: the statement, DSSE's PAE and envelope, the trust policy and the verdicts, pure."""

import base64
import json
import pathlib

import pytest
import yaml
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance.provenance import (
    ProvenanceError,
)

ROOT = pathlib.Path(__file__).resolve().parents[4]
A = "a" * 64
B = "b" * 64
KEY = "1" * 64
OTHER_KEY = "2" * 64


def test_pae_is_the_dsse_v1_encoding_with_byte_lengths():
    assert (
        provenance.pae("http://example.com/HelloWorld", b"hello world")
        == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )
    assert provenance.pae("", b"") == b"DSSEv1 0  0 "
    assert provenance.pae(provenance.PAYLOAD_TYPE, b"{}") == b"DSSEv1 28 application/vnd.in-toto+json 2 {}"
    # Lengths count bytes, not characters.
    assert provenance.pae("t\u00e9", "\u00e9".encode("utf-8")) == b"DSSEv1 3 t\xc3\xa9 2 \xc3\xa9"


def statement(name="ubuntu-2404-v2.qcow2", digest=A, inputs=None):
    given = inputs if inputs is not None else [{"name": "upstream", "digest": "sha256:" + B}]
    builder = {"collection_version": "0.1.0", "playbook": "publish.yml", "host": "build-1"}
    return provenance.statement(
        {"name": name, "digest": {"sha256": digest}}, given, builder, "2026-12-01T00:00:00Z"
    )


def test_the_statement_is_in_toto_v1_with_a_slsa_v1_predicate():
    doc = statement(
        inputs=[
            {"name": "packer-template", "digest": "SHA256:" + B.upper()},
            {"name": "upstream", "digest": {"sha512": "c" * 128}},
        ]
    )
    assert doc["_type"] == "https://in-toto.io/Statement/v1"
    assert doc["predicateType"] == "https://slsa.dev/provenance/v1"
    assert doc["subject"] == [{"name": "ubuntu-2404-v2.qcow2", "digest": {"sha256": A}}]
    build = doc["predicate"]["buildDefinition"]
    assert build["resolvedDependencies"] == [
        {"name": "packer-template", "digest": {"sha256": B}},
        {"name": "upstream", "digest": {"sha512": "c" * 128}},
    ]
    view = provenance.summary(doc)
    assert view["builder"] == {
        "id": provenance.BUILDER_ID,
        "collection_version": "0.1.0",
        "playbook": "publish.yml",
        "host": "build-1",
    }
    assert view["time"] == "2026-12-01T00:00:00Z"
    assert provenance.parse_statement(provenance.serialize(doc)) == doc
    # cosign attest-blob writes the v0.1 header over the same fields.
    older = dict(doc, _type="https://in-toto.io/Statement/v0.1")
    assert provenance.parse_statement(provenance.serialize(older)) == older


@pytest.mark.parametrize(
    "digest, message",
    [
        ("abc", "is not <algorithm>:<hex>"),
        ("md5:" + A[:32], "digest algorithm md5 is not sha256 or sha512"),
        ("sha256:" + A[:10], "the sha256 digest must be 64 hex digits"),
        ({}, "the digest must be sha256:<hex>"),
    ],
)
def test_an_input_digest_that_cannot_be_read_is_refused_naming_the_input(digest, message):
    with pytest.raises(ProvenanceError, match="input upstream: .*" + message.replace("(", r"\(")):
        statement(inputs=[{"name": "upstream", "digest": digest}])


def test_an_input_named_twice_is_refused():
    twice = [{"name": "upstream", "digest": "sha256:" + A}, {"name": "upstream", "digest": "sha256:" + B}]
    with pytest.raises(ProvenanceError, match="upstream named more than once"):
        statement(inputs=twice)


def test_same_build_ignores_the_time_only():
    first = statement()
    later = dict(first, predicate=json.loads(json.dumps(first["predicate"])))
    later["predicate"]["runDetails"]["metadata"]["finishedOn"] = "2027-01-01T00:00:00Z"
    assert provenance.same_build(first, later)
    assert not provenance.same_build(first, statement(inputs=[]))


def test_the_envelope_has_cosigns_shape_and_parses_back():
    env = provenance.envelope(provenance.PAYLOAD_TYPE, b'{"x":1}', [("", b"\x01\x02"), (KEY, b"\x03")])
    assert env == {
        "payloadType": "application/vnd.in-toto+json",
        "payload": base64.b64encode(b'{"x":1}').decode(),
        "signatures": [{"keyid": "", "sig": "AQI="}, {"keyid": KEY, "sig": "Aw=="}],
    }
    line = provenance.envelope_line(env)
    assert line.endswith("\n") and line.count("\n") == 1
    assert provenance.parse_envelope(line) == (
        provenance.PAYLOAD_TYPE,
        b'{"x":1}',
        [("", b"\x01\x02"), (KEY, b"\x03")],
    )


@pytest.mark.parametrize(
    "text, message",
    [
        ("not json", "the JSON does not parse"),
        ('{"payload": ""}', "payloadType, payload and signatures expected"),
        ('{"payloadType": "text/plain", "payload": "", "signatures": []}', "payloadType is 'text/plain'"),
        ('{"payloadType": "application/vnd.in-toto+json", "payload": "%%", "signatures": []}', "not base64"),
    ],
)
def test_an_envelope_that_cannot_be_read_is_named(text, message):
    with pytest.raises(ProvenanceError, match=message):
        provenance.parse_envelope(text)


def test_a_payload_that_is_not_slsa_provenance_is_refused():
    with pytest.raises(ProvenanceError, match="not an in-toto statement"):
        provenance.parse_statement(b'{"_type": "x"}')
    doc = dict(statement(), predicateType="https://example.com/other")
    with pytest.raises(ProvenanceError, match=r"predicateType is 'https://example\.com/other'"):
        provenance.parse_statement(provenance.serialize(doc))


def policy():
    return provenance.normalize_policy(
        {
            "rules": [{"key": KEY, "name": "release", "families": ["ubuntu-2404"], "streams": ["stable"]}],
            "relaxed": [{"family": "lab", "reason": "lab scratch images, never served"}],
        }
    )


def test_a_signer_the_policy_would_refuse_is_refused_before_signing():
    pol = policy()
    provenance.check_signer(KEY, "ubuntu-2404", "stable", pol)
    provenance.check_signer("2" * 64, "lab", None, pol)  # relaxed: unsigned would pass, so may any signer
    provenance.check_signer("2" * 64, "ubuntu-2404", "stable", None)  # no policy, nothing to check
    with pytest.raises(
        provenance.ProvenanceError,
        match=r"signing key 2{64}: the trust policy does not let it sign family ubuntu-2404 stream stable "
        r"\(the keys trusted for it: release \(1{64}\)\); nothing was pushed",
    ):
        provenance.check_signer("2" * 64, "ubuntu-2404", "stable", pol)


def test_the_policy_lets_a_key_sign_the_families_and_streams_it_lists():
    pol = policy()
    assert provenance.trusted_rule(pol, KEY, "ubuntu-2404", "stable")["name"] == "release"
    assert provenance.trusted_rule(pol, KEY, "ubuntu-2404", "edge") is None
    assert provenance.trusted_rule(pol, KEY, "debian-12", "stable") is None
    assert provenance.trusted_rule(pol, OTHER_KEY, "ubuntu-2404", "stable") is None
    anywhere = provenance.normalize_policy({"rules": [{"key": KEY.upper()}]})
    assert provenance.trusted_rule(anywhere, KEY, "debian-12", None)["families"] == ["*"]
    assert provenance.relaxed_reason(pol, "lab") == "lab scratch images, never served"
    assert provenance.relaxed_reason(pol, "ubuntu-2404") is None


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"rules": [{"key": "release"}]}, "rule 1: key 'release' is not a key id"),
        ({"rules": [{"key": KEY, "families": []}]}, "rule 1: families must be a non-empty list"),
        ({"relaxed": [{"family": "lab"}]}, r"relaxed entry 1 \(lab\): .*give reason"),
        ({"keys": []}, ": unknown fields keys"),
    ],
)
def test_a_policy_that_cannot_be_read_is_refused_naming_the_entry(doc, message):
    with pytest.raises(
        ProvenanceError, match="trust policy" + ("" if message.startswith(":") else " ") + message
    ):
        provenance.normalize_policy(doc)


ARTIFACT = {"name": "ubuntu-2404-v2.qcow2", "digest": {"sha256": A}}


def judge(signature, found, family="ubuntu-2404", stream="stable", artifact=None):
    return provenance.judge(artifact or ARTIFACT, family, stream, policy(), signature, found)


def signed(name="ubuntu-2404-v2.qcow2", digest=A, key=KEY):
    return {"key": key, "statement": statement(name=name, digest=digest)}


def test_a_trusted_signature_and_a_matching_subject_verify():
    verdict = judge({"key": KEY}, signed())
    assert (
        verdict["ok"] is True and verdict["verdict"] == provenance.VERIFIED and verdict["signer"] == "release"
    )


@pytest.mark.parametrize(
    "signature, found, verdict, check, words",
    [
        (None, None, provenance.UNSIGNED, "signature", "no detached signature found"),
        ({"key": KEY}, None, provenance.UNSIGNED, "provenance", "no signed provenance statement found"),
        ({"key": None}, signed(), provenance.OTHER_BYTES, "signature", "does not verify over these bytes"),
        (
            {"key": KEY},
            {"key": None, "statement": None},
            provenance.OTHER_BYTES,
            "provenance",
            "envelope signature",
        ),
        ({"key": OTHER_KEY}, signed(), provenance.UNTRUSTED_KEY, "signature", "key %s signed it" % OTHER_KEY),
        (
            {"key": KEY},
            signed(key=OTHER_KEY),
            provenance.UNTRUSTED_KEY,
            "provenance",
            "does not let that key",
        ),
        ({"key": KEY}, signed(digest=B), provenance.SUBJECT_DIGEST, "provenance subject", "sha256:%s" % B),
        (
            {"key": KEY},
            signed(name="ubuntu-2404-v1.qcow2"),
            provenance.REPLAYED,
            "provenance subject",
            "replayed",
        ),
    ],
)
def test_each_failed_check_is_refused_naming_the_artifact_the_key_and_the_check(
    signature, found, verdict, check, words
):
    result = judge(signature, found)
    assert result["ok"] is False and result["verdict"] == verdict and result["check"] == check
    assert result["message"].startswith(
        "artifact ubuntu-2404-v2.qcow2 (sha256:%s): %s check failed: " % (A, check)
    )
    assert words in result["message"]


def test_a_key_trusted_for_another_stream_is_untrusted_here():
    assert judge({"key": KEY}, signed(), stream="edge")["verdict"] == provenance.UNTRUSTED_KEY


def test_a_relaxed_family_goes_unsigned_with_the_reason_but_is_verified_when_signed():
    artifact = dict(ARTIFACT, name="lab.qcow2")
    verdict = judge(None, None, family="lab", artifact=artifact)
    assert verdict["ok"] is True and verdict["verdict"] == provenance.RELAXED
    assert verdict["relaxed"] == "lab scratch images, never served"
    assert judge({"key": None}, None, family="lab", artifact=artifact)["verdict"] == provenance.OTHER_BYTES


def test_the_recorded_version_is_the_collections():
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    assert galaxy["version"] == provenance.COLLECTION_VERSION


DER = b"0Y0\x13\x06\x07*\x86H\xce=\x02\x01" + bytes(range(60))
PEM = "-----BEGIN PUBLIC KEY-----\n%s\n-----END PUBLIC KEY-----\n" % base64.b64encode(DER).decode()


def test_a_rule_may_give_its_key_as_pem_and_the_id_is_the_sha256_of_its_der():
    import hashlib

    keyid = hashlib.sha256(DER).hexdigest()
    assert provenance.pem_key_id(PEM) == keyid
    pol = provenance.normalize_policy({"rules": [{"public_key": PEM, "name": "release"}]})
    assert pol["rules"][0]["key"] == keyid
    assert provenance.public_keys(pol) == [("trust policy key release (%s)" % keyid, PEM.encode())]
    with pytest.raises(ProvenanceError, match=r"rule 1: key 1{64} is not the id of its public_key"):
        provenance.normalize_policy({"rules": [{"public_key": PEM, "key": KEY}]})
    with pytest.raises(ProvenanceError, match=r"rule 1: public_key is not a PEM public key"):
        provenance.normalize_policy({"rules": [{"public_key": "-----BEGIN PRIVATE KEY-----\nAA==\n"}]})


def test_a_relaxed_stream_goes_unsigned_with_its_reason_and_other_streams_still_require_one():
    pol = provenance.normalize_policy(
        {"rules": [{"key": KEY, "name": "release"}], "relaxed": [{"stream": "24.04", "reason": "lab only"}]}
    )
    assert provenance.relaxed_reason(pol, "ubuntu-2404-postgres", "24.04") == "lab only"
    verdict = provenance.judge(ARTIFACT, "ubuntu-2404-postgres", "24.04", pol, None, None)
    assert (
        verdict["verdict"] == provenance.RELAXED
        and "allowed for stream 24.04: lab only" in verdict["message"]
    )
    refused = provenance.judge(ARTIFACT, "ubuntu-2204-postgres", "22.04", pol, None, None)
    assert refused["verdict"] == provenance.UNSIGNED
    # A refusal without a signer names the keys that could have signed.
    assert (
        "the keys trusted for family ubuntu-2204-postgres stream 22.04: release (%s)" % KEY
        in (refused["message"])
    )
    with pytest.raises(ProvenanceError, match=r"relaxed entry 1: needs a family or a stream \(one of them\)"):
        provenance.normalize_policy({"relaxed": [{"family": "a", "stream": "b", "reason": "c"}]})


def test_a_key_the_policy_does_not_hold_is_named_as_the_untrusted_signer():
    found = {"key": None, "statement": None, "named": [OTHER_KEY]}
    verdict = judge({"key": None}, found)
    assert verdict["verdict"] == provenance.UNTRUSTED_KEY and verdict["key"] == OTHER_KEY
    assert "key %s signed it (its provenance envelope names the key)" % OTHER_KEY in verdict["message"]
    # A key the policy holds that verifies nothing is other bytes, not a stranger.
    assert judge({"key": None}, dict(found, named=[KEY]))["verdict"] == provenance.OTHER_BYTES


# --- OCI images, as cosign signs them ---------------------------------------------------------------

IMAGE = "registry.example.com/flintlock/ubuntu/kernel"


def test_the_simple_signing_payload_is_cosigns_and_names_the_digest():
    payload = provenance.simple_signing(IMAGE, "sha256:" + A)
    assert json.loads(payload) == {
        "critical": {
            "identity": {"docker-reference": IMAGE},
            "image": {"docker-manifest-digest": "sha256:" + A},
            "type": "cosign container image signature",
        },
        "optional": None,
    }
    assert provenance.signed_digest(payload) == "sha256:" + A
    for other in (b"not json", b"[]", b'{"critical": {"type": "something else"}}', b"\xff"):
        assert provenance.signed_digest(other) is None


def test_an_image_signature_counts_only_a_verified_layer_for_this_digest():
    digest = "sha256:" + A
    assert provenance.image_signature([], digest) is None
    mine = {"key": KEY, "digest": digest}
    assert provenance.image_signature([{"key": None, "digest": digest}, mine], digest) == {"key": KEY}
    # Verified, but made for another image's digest: named as such.
    assert provenance.image_signature([{"key": KEY, "digest": "sha256:" + B}], digest) == {
        "key": None,
        "other": (KEY, "sha256:" + B),
    }
    # Nothing verifies: no key, nothing to name.
    assert provenance.image_signature([{"key": None, "digest": digest}], digest) == {
        "key": None,
        "other": None,
    }


def image_statement(name=IMAGE, digest=A):
    return provenance.statement({"name": name, "digest": {"sha256": digest}}, [], {}, "2026-12-01T00:00:00Z")


def test_the_image_provenance_prefers_a_verified_statement_of_this_image():
    theirs = {"key": OTHER_KEY, "statement": image_statement(digest=B), "named": []}
    mine = {"key": KEY, "statement": image_statement(), "named": []}
    unverified = {"key": None, "statement": None, "named": []}
    assert provenance.image_provenance([], IMAGE, "sha256:" + A) is None
    assert provenance.image_provenance([unverified, theirs, mine], IMAGE, "sha256:" + A) is mine
    assert provenance.image_provenance([unverified, theirs], IMAGE, "sha256:" + A) is theirs
    assert provenance.image_provenance([unverified], IMAGE, "sha256:" + A) is unverified


def image_policy():
    return provenance.normalize_policy(
        {"rules": [{"key": KEY, "name": "release", "families": ["flintlock"]}]}
    )


def judge_image(signatures, envelopes, family="flintlock", digest="sha256:" + A):
    return provenance.judge_image(IMAGE, digest, family, None, image_policy(), signatures, envelopes)


def test_an_image_is_judged_by_its_signature_its_statement_and_the_policy():
    mine = {"key": KEY, "digest": "sha256:" + A}
    found = [{"key": KEY, "statement": image_statement(), "named": []}]
    verdict = judge_image([mine], found)
    assert verdict["verdict"] == provenance.VERIFIED and verdict["signer"] == "release"
    assert verdict["message"].startswith("image %s (sha256:%s): signed by release" % (IMAGE, A))

    other = judge_image([{"key": KEY, "digest": "sha256:" + B}], found)
    assert (
        other["verdict"] == provenance.OTHER_BYTES and other["key"] == KEY and other["check"] == "signature"
    )
    assert "signed docker-manifest-digest sha256:%s, not this image's sha256:%s" % (B, A) in other["message"]

    unsigned = judge_image([], [])
    assert unsigned["verdict"] == provenance.UNSIGNED
    assert "no cosign signature (sha256-<hex>.sig) found" in unsigned["message"]
    assert "microvm_image with signing_key" in unsigned["message"]

    differs = judge_image([mine], [{"key": KEY, "statement": image_statement(digest=B), "named": []}])
    assert differs["verdict"] == provenance.SUBJECT_DIGEST

    elsewhere = judge_image([mine], found, family="debian")
    assert elsewhere["verdict"] == provenance.UNTRUSTED_KEY and elsewhere["key"] == KEY


def test_a_trusted_signature_counts_whatever_other_signers_appended_before_it():
    # cosign appends every signer's layer to the tag: a known but untrusted key's, first, does not hide the
    # trusted one's, and the same for the attestations.
    theirs = {"key": OTHER_KEY, "digest": "sha256:" + A}
    mine = {"key": KEY, "digest": "sha256:" + A}
    envelopes = [
        {"key": OTHER_KEY, "statement": image_statement(), "named": []},
        {"key": KEY, "statement": image_statement(), "named": []},
    ]
    assert judge_image([theirs, mine], envelopes)["verdict"] == provenance.VERIFIED
    assert judge_image([theirs], envelopes[:1])["verdict"] == provenance.UNTRUSTED_KEY


def kernel_statement(time, version):
    return provenance.statement(
        {"name": IMAGE, "digest": {"sha256": A}},
        [{"name": provenance.SOURCE_DISK, "digest": "sha256:" + B}],
        {"playbook": "microvm.yml"},
        time,
        {"kernel_version": version, "image": "kernel"},
    )


def test_a_statement_records_the_build_parameters_beside_the_playbook():
    doc = kernel_statement("2026-12-01T00:00:00Z", "6.1.0")
    external = doc["predicate"]["buildDefinition"]["externalParameters"]
    assert external == {"playbook": "microvm.yml", "kernel_version": "6.1.0", "image": "kernel"}
    assert provenance.summary(doc)["parameters"] == {"kernel_version": "6.1.0", "image": "kernel"}
    assert provenance.same_build(doc, kernel_statement("2026-12-02T00:00:00Z", "6.1.0"))
    assert not provenance.same_build(doc, kernel_statement("2026-12-01T00:00:00Z", "6.1.1"))


def test_an_artifact_counts_as_signed_only_with_both_files_by_the_key_for_its_name_and_digest():
    doc = provenance.statement(
        {"name": "a.qcow2", "digest": {"sha256": "a" * 64}}, [], {}, "2026-12-01T00:00:00Z"
    )
    mine, other = "1" * 64, "2" * 64
    both = ({"key": mine}, {"key": mine, "statement": doc})
    assert provenance.already_signed(mine, "a.qcow2", "a" * 64, *both)
    assert not provenance.already_signed(mine, "b.qcow2", "a" * 64, *both)  # another artifact's provenance
    assert not provenance.already_signed(mine, "a.qcow2", "b" * 64, *both)  # other bytes
    assert not provenance.already_signed(other, "a.qcow2", "a" * 64, *both)  # another key
    assert not provenance.already_signed(mine, "a.qcow2", "a" * 64, None, both[1])  # no signature
    assert not provenance.already_signed(mine, "a.qcow2", "a" * 64, both[0], None)  # no provenance
    assert not provenance.already_signed(mine, "a.qcow2", "a" * 64, {"key": None}, both[1])  # unverified
