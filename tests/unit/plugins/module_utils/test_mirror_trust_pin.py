"""The mirror's trust policy is pinned by its verifier, never taken on the word of the bucket it judges: the
policy given, or the catalog's once a pinned key proves the catalog's bytes. With the policy rules that keep a
verdict's words honest (one name per key, no name that reads as a key id, no glob taken literally) and the
messages of a half-signed artifact and of a cosign bundle given as a signature."""

import hashlib
import json

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args
from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket import mirror
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import errors
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import given, settings
from hypothesis import strategies as st

CATALOG = "catalog s3://mirror/catalog.json"
WHERE = "s3://mirror/debian-12/1/sha256-%s/d.qcow2" % ("a" * 64)


def _key():
    return ec.generate_private_key(ec.SECP256R1())


PINNED, STRANGER = _key(), _key()
RING = {signing.key_id(PINNED): PINNED.public_key()}


def _private_pem(key):
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def _policy(families=("debian-12",), relaxed=("lab-scratch",)):
    return {
        "rules": [{"name": "mirror", "public_key": signing.public_pem(PINNED), "families": list(families)}],
        "relaxed": [{"family": f, "reason": "throwaway"} for f in relaxed],
    }


def _body(trust):
    return mirror.render_catalog(mirror.build_catalog("mirror", [], mirror.trust_section(trust)))


def _proven(body, sig_text):
    """What the module passes on: the catalog's signature as the pinned ring proves it."""
    return signing.evidence(RING, sig_text, None, hashlib.sha256(body).hexdigest())[0]


def _sig(key, body):
    return signing.signature_text(signing.sign_digest(key, hashlib.sha256(body).hexdigest()))


# --- the pin -------------------------------------------------------------------------------------------


def test_without_a_pinned_policy_or_catalog_key_the_object_is_refused_naming_the_rule_and_the_move():
    for keys in (None, []):
        with pytest.raises(errors.Refusal) as err:
            mirror.pinned_policy(None, keys, CATALOG, WHERE)
        assert WHERE in err.value.msg and CATALOG in err.value.msg
        assert "taken from the bucket it judges" in err.value.msg
        assert "trust_policy" in err.value.msg and "catalog_public_keys" in err.value.msg


def test_a_given_policy_is_the_one_judged_by_and_a_malformed_one_is_refused_naming_the_option():
    assert mirror.pinned_policy(_policy(), None, CATALOG, WHERE)["relaxed"] == {"lab-scratch": "throwaway"}
    assert mirror.pinned_policy(None, ["pem"], CATALOG, WHERE) is None  # the signed catalog's, read next
    with pytest.raises(errors.Refusal, match="option trust_policy: trust policy relaxed entry 1"):
        mirror.pinned_policy({"relaxed": [{"family": "x"}]}, None, CATALOG, WHERE)


def test_the_catalogs_policy_is_read_only_when_a_pinned_key_signed_these_very_bytes():
    body = _body(_policy())
    policy = mirror.signed_catalog_policy(body, _proven(body, _sig(PINNED, body)), CATALOG, WHERE)
    assert [r["name"] for r in policy["rules"]] == ["mirror"]
    cases = {
        "unsigned": (body, None, "it is not signed (no s3://mirror/catalog.json.sig)"),
        "signed by a key not pinned": (body, _sig(STRANGER, body), "does not verify over its bytes"),
        # A key appended after the catalog was signed: the bytes the signature covers are not these.
        "changed after signing": (
            _body(_policy(relaxed=("lab-scratch", "debian-12"))),
            _sig(PINNED, body),
            "does not verify over its bytes",
        ),
        "not base64": (body, "{not a signature}", "does not verify over its bytes"),
    }
    for title, (held, sig, words) in cases.items():
        with pytest.raises(errors.Refusal) as err:
            mirror.signed_catalog_policy(held, _proven(held, sig), CATALOG, WHERE)
        assert err.value.msg.startswith(CATALOG) and words in err.value.msg, (title, err.value.msg)
    with pytest.raises(errors.Refusal, match="it does not exist"):
        mirror.signed_catalog_policy(None, None, CATALOG, WHERE)
    empty = mirror.render_catalog(mirror.build_catalog("mirror", []))
    with pytest.raises(errors.Refusal, match="it holds no trust policy"):
        mirror.signed_catalog_policy(empty, _proven(empty, _sig(PINNED, empty)), CATALOG, WHERE)


FAMILIES = st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True)


@settings(max_examples=30, deadline=None)
@given(
    rules=st.lists(FAMILIES, min_size=1, max_size=3),
    relaxed=st.lists(FAMILIES, max_size=3, unique=True),
    signer=st.sampled_from(["none", "stranger", "pinned-over-other-bytes", "garbage"]),
)
def test_no_verdict_is_ever_judged_under_a_catalog_policy_no_pinned_key_signed(rules, relaxed, signer):
    """Whatever the bucket's catalog says (keys, relaxations), unless a pinned key signed exactly its bytes
    the policy is refused before any verdict, so nothing is verified or let go unsigned under it."""
    body = _body(_policy(families=rules, relaxed=relaxed))
    sig = {
        "none": None,
        "stranger": _sig(STRANGER, body),
        "pinned-over-other-bytes": _sig(PINNED, body + b" "),
        "garbage": "AAAA",
    }[signer]
    with pytest.raises(errors.Refusal):
        mirror.signed_catalog_policy(body, _proven(body, sig), CATALOG, WHERE)
    with pytest.raises(errors.Refusal):
        mirror.pinned_policy(None, None, CATALOG, WHERE)


# --- the family judged ---------------------------------------------------------------------------------


def test_a_mirror_layout_key_is_judged_for_its_own_family_and_another_one_is_refused_naming_both():
    parsed = mirror.parse_key("debian-12/1/sha256-%s/d.qcow2" % ("a" * 64))
    assert mirror.judged_family(parsed, None, WHERE) == "debian-12"
    assert mirror.judged_family(parsed, "debian-12", WHERE) == "debian-12"
    with pytest.raises(errors.Refusal) as err:
        mirror.judged_family(parsed, "lab-scratch", WHERE)
    assert "family lab-scratch was given and the key names family debian-12" in err.value.msg
    assert mirror.judged_family(None, "windows", "s3://b/export.qcow2") == "windows"  # outside the layout


@settings(max_examples=50, deadline=None)
@given(own=FAMILIES, other=FAMILIES)
def test_no_family_but_the_keys_own_is_ever_judged_for_a_mirror_layout_key(own, other):
    parsed = mirror.parse_key("%s/1/sha256-%s/d.qcow2" % (own, "b" * 64))
    if other == own:
        assert mirror.judged_family(parsed, other, WHERE) == own
    else:
        with pytest.raises(errors.Refusal):
            mirror.judged_family(parsed, other, WHERE)


# --- the policy's names ---------------------------------------------------------------------------------

KEY_A, KEY_B = "a" * 64, "b" * 64


@pytest.mark.parametrize(
    "doc, words",
    [
        (
            {"rules": [{"key": KEY_A, "name": "release"}, {"key": KEY_B, "name": "release"}]},
            "keys %s and %s are both named release" % (KEY_A, KEY_B),
        ),
        ({"rules": [{"key": KEY_A, "name": KEY_B}]}, "named %s, which reads as a key id" % KEY_B),
        ({"rules": [{"key": KEY_A, "name": KEY_A.upper()}]}, "reads as a key id"),
        ({"rules": [{"key": KEY_A, "families": ["ubuntu-*"]}]}, "rule 1: families 'ubuntu-*' is a pattern"),
        ({"rules": [{"key": KEY_A, "streams": ["2?.04"]}]}, "rule 1: streams '2?.04' is a pattern"),
        ({"relaxed": [{"family": "*", "reason": "r"}]}, "relaxed entry 1: family '*' is a pattern"),
        ({"relaxed": [{"stream": "[ab]", "reason": "r"}]}, "relaxed entry 1: stream '[ab]' is a pattern"),
    ],
)
def test_names_a_verdict_would_misreport_and_globs_taken_literally_are_refused(doc, words):
    with pytest.raises(provenance.ProvenanceError) as err:
        provenance.normalize_policy(doc)
    assert words in err.value.msg, err.value.msg


def test_one_key_may_have_several_rules_of_one_name_and_star_alone_still_means_any():
    policy = provenance.normalize_policy(
        {
            "rules": [
                {"key": KEY_A, "name": "release", "families": ["debian-12"]},
                {"key": KEY_A, "name": "release", "families": ["*"], "streams": ["24.04"]},
            ]
        }
    )
    assert provenance.trusted_rule(policy, KEY_A, "anything", "24.04")["name"] == "release"


@settings(max_examples=50, deadline=None)
@given(
    name=st.text(alphabet="abc-*?[", min_size=1, max_size=8).filter(lambda n: any(c in n for c in "*?[")),
    field=st.sampled_from(["families", "streams", "relaxed family", "relaxed stream"]),
)
def test_no_glob_is_ever_taken_as_a_literal_name(name, field):
    """A policy matches names exactly; a pattern is refused (``*`` alone in families and streams: any)."""
    if field.startswith("relaxed"):
        doc = {"relaxed": [{field.split()[1]: name, "reason": "r"}]}
    else:
        doc = {"rules": [{"key": KEY_A, field: [name]}]}
    if name == "*" and not field.startswith("relaxed"):
        assert provenance.normalize_policy(doc)["rules"][0][field] == ["*"]
        return
    with pytest.raises(provenance.ProvenanceError, match="is a pattern"):
        provenance.normalize_policy(doc)


# --- the words of a refusal ------------------------------------------------------------------------------


def test_a_relaxed_familys_provenance_without_its_signature_is_named_so():
    policy = provenance.normalize_policy(_policy())
    artifact = {"name": "lab-scratch/1/sha256-%s/d" % ("c" * 64), "digest": {"sha256": "c" * 64}}
    found = {"key": signing.key_id(PINNED), "statement": {}, "named": [signing.key_id(PINNED)]}
    verdict = provenance.judge(artifact, "lab-scratch", "1", policy, None, found)
    assert (verdict["verdict"], verdict["check"], verdict["ok"]) == ("unsigned", "signature", False)
    assert "a provenance without its signature" in verdict["message"]
    assert "lets an unsigned artifact go, not a half-signed one" in verdict["message"]
    assert "remove the stray provenance" in verdict["message"]
    strict = provenance.judge(dict(artifact), "debian-12", "1", policy, None, found)
    assert "a provenance without its signature" in strict["message"] and "requires one" in strict["message"]


@pytest.mark.parametrize(
    "bundle, field",
    [
        ({"base64Signature": "MEUCIQ==", "cert": None, "rekorBundle": None}, ".base64Signature"),
        (
            {
                "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
                "messageSignature": {"signature": "MEUCIQ=="},
            },
            ".messageSignature.signature",
        ),
    ],
)
def test_a_cosign_bundle_given_as_the_signature_is_named_as_one_with_the_way_to_the_plain_signature(
    bundle, field
):
    digest = "d" * 64
    sig = signing.evidence(RING, json.dumps(bundle), None, digest)[0]
    policy = provenance.normalize_policy(_policy())
    artifact = {"name": "debian-12/1/sha256-%s/d" % digest, "digest": {"sha256": digest}}
    verdict = provenance.judge(artifact, "debian-12", "1", policy, sig, None)
    assert verdict["verdict"] == "signature_mismatch" and verdict["check"] == "signature"
    assert "it is a cosign bundle" in verdict["message"], verdict["message"]
    assert "cosign sign-blob --output-signature" in verdict["message"] and field in verdict["message"]
    assert "signed for other bytes" not in verdict["message"]
    assert provenance.bundle_problem("MEUCIQ==") is None and provenance.bundle_problem('{"a": 1}') is None


# --- a private key where a public key belongs ------------------------------------------------------------


def test_a_private_key_in_any_option_is_masked_in_what_the_module_returns(capsys):
    pem = _private_pem(STRANGER)
    lines = [line for line in pem.splitlines() if not line.startswith("-----")]
    args = {
        "trust_policy": {"rules": [{"public_key": pem}]},
        "public_keys": ["x\n" + pem],
        "_ansible_verbosity": 4,
    }
    spec = {"trust_policy": {"type": "dict"}, "public_keys": {"type": "list", "elements": "str"}}

    def runner():
        provenance.normalize_policy(args["trust_policy"])

    with patch_module_args(args), pytest.raises(SystemExit):
        module = AnsibleModule(argument_spec=spec)
        errors.run_module(module, lambda: (runner(), {})[1])
    out = capsys.readouterr().out
    result = json.loads(out)
    assert result["failed"] is True and "is not a PEM public key" in result["msg"]
    assert "invocation" in result
    assert not any(line in out for line in lines), out
    assert errors.private_key_texts({"a": [pem]}) >= {pem.strip()}
