"""The signing adapter with real keys: cosign's blob signature and DSSE envelope, key loading, and the tamper
table judged end to end (the adapter's proof, then provenance.judge)."""

import base64
import hashlib
import json

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, utils
from hypothesis import given, settings
from hypothesis import strategies as st


def new_key(curve=None):
    return ec.generate_private_key(curve or ec.SECP256R1())


def pkcs8(key, password=None):
    crypt = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, crypt)


TRUSTED = new_key()
UNTRUSTED = new_key()
RING = signing.keyring(
    [(name, signing.public_pem(k).encode()) for name, k in (("t", TRUSTED), ("u", UNTRUSTED))]
)
POLICY = provenance.normalize_policy(
    {"rules": [{"key": signing.key_id(TRUSTED), "name": "release", "families": ["f"]}]}
)


def test_the_key_id_is_the_sha256_of_the_der_subject_public_key_info():
    der = TRUSTED.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert signing.key_id(TRUSTED) == hashlib.sha256(der).hexdigest() == signing.key_id(TRUSTED.public_key())
    assert set(RING) == {signing.key_id(TRUSTED), signing.key_id(UNTRUSTED)}


def test_a_blob_signature_is_what_cosign_sign_blob_writes_and_verifies_with_the_public_key():
    data = b"qcow2 bytes"
    digest = hashlib.sha256(data).hexdigest()
    text = signing.signature_text(signing.sign_digest(TRUSTED, digest))
    assert "\n" not in text
    der = base64.b64decode(text)
    # ECDSA over SHA-256 of the bytes, DER: the standard verification of the message itself accepts it.
    TRUSTED.public_key().verify(der, data, ec.ECDSA(hashes.SHA256()))
    utils.decode_dss_signature(der)
    assert signing.signing_key(RING, signing.parse_signature_text(text + "\n"), digest) == signing.key_id(
        TRUSTED
    )
    assert signing.signing_key(RING, der, hashlib.sha256(b"other").hexdigest()) is None


def test_a_signature_made_over_the_message_verifies_here_too():
    data = b"signed by another tool"
    der = TRUSTED.sign(data, ec.ECDSA(hashes.SHA256()))
    assert signing.verify_digest(TRUSTED.public_key(), der, hashlib.sha256(data).hexdigest())


def test_an_envelope_signs_the_pae_and_one_with_cosigns_empty_keyid_verifies():
    payload = b'{"_type":"x"}'
    env = signing.sign_envelope(TRUSTED, payload)
    assert env["signatures"][0]["keyid"] == signing.key_id(TRUSTED)
    sig = base64.b64decode(env["signatures"][0]["sig"])
    TRUSTED.public_key().verify(
        sig, provenance.pae(provenance.PAYLOAD_TYPE, payload), ec.ECDSA(hashes.SHA256())
    )
    assert signing.envelope_key(RING, *provenance.parse_envelope(json.dumps(env))) == signing.key_id(TRUSTED)
    env["signatures"][0]["keyid"] = ""
    assert signing.envelope_key(RING, *provenance.parse_envelope(json.dumps(env))) == signing.key_id(TRUSTED)
    # A keyid naming another key is not tried with this one; the bare payload signed is no DSSE signature.
    env["signatures"][0]["keyid"] = signing.key_id(UNTRUSTED)
    assert signing.envelope_key(RING, *provenance.parse_envelope(json.dumps(env))) is None
    bare = TRUSTED.sign(payload, ec.ECDSA(hashes.SHA256()))
    assert signing.envelope_key(RING, provenance.PAYLOAD_TYPE, payload, [("", bare)]) is None


def test_private_keys_load_from_pkcs8_encrypted_pkcs8_and_sec1():
    key = new_key()
    assert signing.key_id(signing.load_private_key(pkcs8(key))) == signing.key_id(key)
    assert signing.key_id(signing.load_private_key(pkcs8(key, b"pw"), "pw")) == signing.key_id(key)
    sec1 = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    assert b"EC PRIVATE KEY" in sec1
    assert signing.key_id(signing.load_private_key(sec1)) == signing.key_id(key)


COSIGN_KEY = (
    b"-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\neyJrZGYiOnt9fQ==\n"
    b"-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n"
)


@pytest.mark.parametrize(
    "pem, password, message",
    [
        (COSIGN_KEY, None, "cosign's own encrypted format .* give the key as PEM"),
        (b"just text", None, "it is not PEM"),
        (signing.public_pem(TRUSTED).encode(), None, "it is a public key; signing needs the private key"),
        (pkcs8(TRUSTED, b"pw"), None, "it is encrypted; give its password"),
        (pkcs8(TRUSTED, b"pw"), "wrong", "cannot be decrypted with the password given"),
        (pkcs8(TRUSTED), "pw", "it is not encrypted, give no password"),
        (pkcs8(new_key(ec.SECP384R1())), None, "EC key on secp384r1, not P-256"),
        (
            pkcs8(ed25519.Ed25519PrivateKey.generate()),
            None,
            "Ed25519PrivateKey, not an ECDSA key; .*ECDSA P-256",
        ),
        (
            b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
            None,
            "does not hold a private key",
        ),
    ],
)
def test_a_key_that_cannot_sign_is_refused_naming_its_source_and_the_move(pem, password, message):
    with pytest.raises(signing.SigningKeyError, match=r"key_path /k\.pem: .*" + message):
        signing.load_private_key(pem, password, "key_path /k.pem")


def test_key_sources_are_named_when_they_cannot_be_read(tmp_path):
    with pytest.raises(signing.SigningKeyError, match=r"key_path .*/none\.pem: cannot be read"):
        signing.read_key_text(str(tmp_path / "none.pem"), None, "key_path")
    with pytest.raises(signing.SigningKeyError, match=r"public_keys\[0\]: it is not a PEM public key"):
        signing.keyring([("public_keys[0]", pkcs8(TRUSTED))])


def sign_all(data, key=TRUSTED, env_key=None, name="img-v2.qcow2", digest=None):
    """The signature and envelope texts artifact_sign writes for ``data``."""
    sha = hashlib.sha256(data).hexdigest()
    doc = provenance.statement(
        {"name": name, "digest": {"sha256": digest or sha}}, [], {}, "2026-12-01T00:00:00Z"
    )
    return (
        signing.signature_text(signing.sign_digest(key, sha)),
        provenance.envelope_line(signing.sign_envelope(env_key or key, provenance.serialize(doc))),
    )


def verify(data, sig_text, env_text, name="img-v2.qcow2", family="f"):
    sha = hashlib.sha256(data).hexdigest()
    signature, found = signing.evidence(RING, sig_text, env_text, sha)
    return provenance.judge({"name": name, "digest": {"sha256": sha}}, family, None, POLICY, signature, found)


DATA = b"revision 2 bytes" * 64


def flipped(data, at=0):
    return data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :]


@pytest.mark.parametrize(
    "case, verdict",
    [
        ("one byte flipped in the artifact", provenance.OTHER_BYTES),
        ("a signature of another artifact", provenance.OTHER_BYTES),
        ("a valid signature by a key the policy does not trust", provenance.UNTRUSTED_KEY),
        ("a provenance statement whose subject digest differs", provenance.SUBJECT_DIGEST),
        ("a replayed older revision's signature", provenance.REPLAYED),
    ],
)
def test_the_tamper_table_is_refused_with_its_verdict(case, verdict):
    sig, env = sign_all(DATA)
    assert verify(DATA, sig, env)["verdict"] == provenance.VERIFIED
    if case.startswith("one byte"):
        result = verify(flipped(DATA, 100), sig, env)
    elif case.startswith("a signature of another"):
        other_sig = sign_all(b"another artifact")[0]
        result = verify(DATA, other_sig, env)
    elif case.startswith("a valid signature by"):
        result = verify(DATA, *sign_all(DATA, key=UNTRUSTED))
    elif case.startswith("a provenance statement"):
        result = verify(DATA, *sign_all(DATA, digest="0" * 64))
    else:
        old = b"revision 1 bytes"
        result = verify(old, *sign_all(old, name="img-v1.qcow2"), name="img-v2.qcow2")
    assert result["ok"] is False and result["verdict"] == verdict, result["message"]
    assert result["message"].startswith("artifact img-v2.qcow2 (sha256:")


def test_files_that_cannot_be_read_prove_nothing():
    signature, found = signing.evidence(RING, "%%%", "{", hashlib.sha256(DATA).hexdigest())
    assert signature["key"] is None and "not a base64 signature" in signature["error"]
    assert found["key"] is None and "not a DSSE envelope" in found["error"]
    assert signing.evidence(RING, None, None, "0" * 64) == (None, None)


@settings(max_examples=60, deadline=None)
@given(
    data=st.binary(min_size=1, max_size=64),
    flip=st.booleans(),
    sig_key=st.sampled_from(["trusted", "untrusted"]),
    env_key=st.sampled_from(["trusted", "untrusted"]),
    family=st.sampled_from(["f", "g"]),
    same_name=st.booleans(),
    same_digest=st.booleans(),
)
def test_verification_passes_iff_trusted_key_these_bytes_and_the_same_subject(
    data, flip, sig_key, env_key, family, same_name, same_digest
):
    keys = {"trusted": TRUSTED, "untrusted": UNTRUSTED}
    sha = hashlib.sha256(data).hexdigest()
    sig, env = sign_all(
        data,
        key=keys[sig_key],
        env_key=keys[env_key],
        name="img-v2.qcow2" if same_name else "img-v1.qcow2",
        digest=sha if same_digest else hashlib.sha256(data + b"x").hexdigest(),
    )
    served = flipped(data) if flip else data
    result = verify(served, sig, env, family=family)
    expected = sig_key == env_key == "trusted" and family == "f" and not flip and same_name and same_digest
    assert result["ok"] is expected, result["message"]
    assert (result["verdict"] == provenance.VERIFIED) is expected
