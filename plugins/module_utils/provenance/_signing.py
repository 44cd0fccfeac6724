# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Signing and verifying in-process with ``cryptography``, in the formats cosign reads and writes.

* A detached signature is what ``cosign sign-blob --key`` writes: ECDSA P-256 over the SHA-256 of the
  bytes, the ASN.1 DER signature, base64 (no newline) as the ``.sig`` file's content. The file is hashed in
  chunks and the digest signed prehashed, so a disk image is read once and never held in memory.
* An envelope is what ``cosign attest-blob`` writes (DSSE, the signature over ``provenance.pae``).
  cosign itself writes an empty ``keyid`` and, verifying by key, does not compare it; here the keyid is the
  SHA-256 of the public key's DER SubjectPublicKeyInfo (hex), the id the trust policy names.
* Keys are PEM: PKCS#8 (plain or encrypted with ``password``) or SEC1 ``EC PRIVATE KEY``. cosign's own
  ``ENCRYPTED SIGSTORE PRIVATE KEY`` (scrypt, then NaCl secretbox, XSalsa20-Poly1305) cannot be opened:
  ``cryptography`` has no XSalsa20. Give the PEM the key pair was made from (``openssl ecparam -genkey -name
  prime256v1 | openssl pkcs8 -topk8 -nocrypt``), and ``cosign import-key-pair --key`` hands cosign the same
  key.

I/O and cryptography only; what a result means is decided in ``provenance``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import binascii
import hashlib
import json

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk._qemu_img import (  # noqa: F401 (re-exported)  pylint: disable=unused-import
    digests,
    read_text,
    write_text,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance

COSIGN_KEY_LABELS = ("ENCRYPTED SIGSTORE PRIVATE KEY", "ENCRYPTED COSIGN PRIVATE KEY", "SIGSTORE PRIVATE KEY")


class SigningKeyError(PipelineError):
    """A key that cannot be used: the message names its source, what is wrong and what to give instead."""


def _crypto():
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec, utils
    except ImportError:
        raise PipelineError(
            "signing requires the Python library cryptography on the controller (pip install cryptography); "
            "run the task with delegate_to: localhost"
        ) from None
    return InvalidSignature, hashes, serialization, ec, utils


def read_key_text(path=None, text=None, what="key"):
    """The PEM bytes of a key given by ``path`` or as ``text``."""
    if text:
        return text.encode("utf-8") if isinstance(text, str) else text
    if not path:
        raise SigningKeyError("%s: give a path or the PEM text" % what)
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (IOError, OSError) as exc:
        raise SigningKeyError("%s %s: cannot be read (%s)" % (what, path, exc.strerror or exc)) from None


def _check_p256(key, source, ec):
    if not isinstance(key, (ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey)):
        raise SigningKeyError(
            "%s: it is a %s, not an ECDSA key; cosign's sign-blob --key signs with ECDSA P-256, give a P-256 "
            "(prime256v1) key" % (source, type(key).__name__)
        )
    if key.curve.name != "secp256r1":
        raise SigningKeyError(
            "%s: it is an EC key on %s, not P-256; give a P-256 (prime256v1) key" % (source, key.curve.name)
        )
    return key


def load_private_key(pem, password=None, source="private key"):
    """An ECDSA P-256 private key from PEM bytes (PKCS#8, encrypted PKCS#8 with ``password``, or SEC1)."""
    serialization, ec = _crypto()[2:4]
    for label in COSIGN_KEY_LABELS:
        if b"-----BEGIN %s-----" % label.encode("ascii") in pem:
            raise SigningKeyError(
                "%s: it is in cosign's own encrypted format (%s), which needs NaCl secretbox (XSalsa20) that "
                "the cryptography library does not offer; give the key as PEM (PKCS#8 or EC PRIVATE KEY), "
                "the one cosign import-key-pair was given" % (source, label)
            )
    if b"-----BEGIN" not in pem:
        raise SigningKeyError("%s: it is not PEM (no -----BEGIN line); give a PEM private key" % source)
    if b"PUBLIC KEY-----" in pem and b"PRIVATE KEY-----" not in pem:
        raise SigningKeyError("%s: it is a public key; signing needs the private key" % source)
    secret = password.encode("utf-8") if isinstance(password, str) and password else None
    try:
        key = serialization.load_pem_private_key(pem, password=secret)
    except TypeError as exc:
        if secret is None:
            raise SigningKeyError("%s: it is encrypted; give its password" % source) from None
        raise SigningKeyError("%s: it is not encrypted, give no password (%s)" % (source, exc)) from None
    except ValueError as exc:
        if secret is not None and b"ENCRYPTED" in pem:
            raise SigningKeyError(
                "%s: it cannot be decrypted with the password given (%s)" % (source, exc)
            ) from None
        raise SigningKeyError(
            "%s: the PEM does not hold a private key that can be read (%s)" % (source, exc)
        ) from None
    return _check_p256(key, source, ec)


def load_public_key(pem, source="public key"):
    """An ECDSA P-256 public key from PEM bytes (``PUBLIC KEY``, as ``cosign generate-key-pair`` writes)."""
    serialization, ec = _crypto()[2:4]
    if b"-----BEGIN PUBLIC KEY-----" not in pem:
        raise SigningKeyError(
            "%s: it is not a PEM public key (-----BEGIN PUBLIC KEY-----); give cosign.pub" % source
        )
    try:
        key = serialization.load_pem_public_key(pem)
    except ValueError as exc:
        raise SigningKeyError(
            "%s: the PEM does not hold a public key that can be read (%s)" % (source, exc)
        ) from None
    return _check_p256(key, source, ec)


def public_pem(key):
    """The PEM SubjectPublicKeyInfo of a key (private or public), as cosign.pub holds it."""
    serialization = _crypto()[2]
    public = key.public_key() if hasattr(key, "public_key") else key
    return public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode("ascii")


def key_id(key):
    """SHA-256 (hex) of the DER SubjectPublicKeyInfo of a key (private or public)."""
    serialization = _crypto()[2]
    public = key.public_key() if hasattr(key, "public_key") else key
    der = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


def keyring(pems):
    """``{key id: public key}`` from ``[(source, pem bytes)]``."""
    return {key_id(k): k for k in (load_public_key(pem, source) for source, pem in pems)}


def keyring_of(entries, option="public_keys", extra=()):
    """``{key id: public key}`` of ``entries`` (each a PEM public key or the path of a file holding one),
    and of ``extra`` (``[(source, pem bytes)]``, the trust policy's own keys)."""
    pems = list(extra)
    for index, entry in enumerate(entries or []):
        if "-----BEGIN" in entry:
            pems.append(("%s[%d]" % (option, index), entry.encode("utf-8")))
        else:
            pems.append(("%s[%d] %s" % (option, index, entry), read_key_text(entry, None, "public key")))
    return keyring(pems)


def read_facts(path):
    """The image-facts record in the JSON file ``path``; a file that is not one is refused."""
    with open(path, "rb") as handle:
        try:
            return json.loads(handle.read().decode("utf-8"))
        except ValueError as exc:
            raise Refusal(
                "input %s (%s)" % (provenance.FACTS, path),
                "is not a JSON image-facts record (%s)" % exc,
                "give the record seal_verify wrote, or its digest",
            ) from None


def file_digests(path, algorithms=("sha256",)):
    """``{algorithm: hex}`` of a file (SHA-256 unless told), read once in chunks."""
    return digests(path, algorithms)


def sign_digest(private_key, sha256_hex):
    """The DER ECDSA signature over a SHA-256 digest (hex), as cosign sign-blob signs the blob's bytes."""
    crypto = _crypto()
    hashes, ec, utils = crypto[1], crypto[3], crypto[4]
    return private_key.sign(bytes.fromhex(sha256_hex), ec.ECDSA(utils.Prehashed(hashes.SHA256())))


def verify_digest(public_key, signature, sha256_hex):
    """True when ``signature`` (DER bytes) is ``public_key``'s over the SHA-256 digest (hex)."""
    crypto = _crypto()
    invalid, hashes, ec, utils = crypto[0], crypto[1], crypto[3], crypto[4]
    try:
        public_key.verify(signature, bytes.fromhex(sha256_hex), ec.ECDSA(utils.Prehashed(hashes.SHA256())))
    except invalid:
        return False
    return True


def signature_text(signature):
    """The ``.sig`` file content: base64 of the DER signature, no newline (cosign's own)."""
    return base64.b64encode(signature).decode("ascii")


def parse_signature_text(text, source="signature"):
    """The DER bytes of a ``.sig`` file's content."""
    try:
        return base64.b64decode((text or "").strip(), validate=True)
    except (binascii.Error, ValueError):
        raise provenance.ProvenanceError(
            "%s: not a base64 signature as cosign sign-blob writes" % source
        ) from None


def signing_key(ring, signature, sha256_hex):
    """The key id of the keyring key that verifies ``signature`` over the digest, or None."""
    for keyid in sorted(ring):
        if verify_digest(ring[keyid], signature, sha256_hex):
            return keyid
    return None


def sign_payload(key, payload):
    """The base64 signature cosign puts in a signature layer's annotation (ECDSA, the payload's SHA-256)."""
    return signature_text(sign_digest(key, hashlib.sha256(payload).hexdigest()))


def payload_key(ring, signature_b64, payload):
    """The key id of the keyring key whose signature (base64) this is over ``payload``; None when none
    verifies or the annotation is not base64."""
    try:
        sig = parse_signature_text(signature_b64)
    except provenance.ProvenanceError:
        return None
    return signing_key(ring, sig, hashlib.sha256(payload).hexdigest()) if sig else None


def sign_envelope(private_key, payload, payload_type=provenance.PAYLOAD_TYPE):
    """The DSSE envelope of ``payload`` bytes signed by ``private_key`` (over the PAE)."""
    crypto = _crypto()
    hashes, ec = crypto[1], crypto[3]
    sig = private_key.sign(provenance.pae(payload_type, payload), ec.ECDSA(hashes.SHA256()))
    return provenance.envelope(payload_type, payload, [(key_id(private_key), sig)])


def envelope_key(ring, payload_type, payload, signatures):
    """The key id of the keyring key that verifies one of the envelope's signatures over the PAE, or None.

    A signature whose keyid names another key is not tried with this one; an empty keyid (cosign's) is
    tried with every key.
    """
    crypto = _crypto()
    invalid, hashes, ec = crypto[0], crypto[1], crypto[3]
    message = provenance.pae(payload_type, payload)
    for keyid in sorted(ring):
        for named, sig in signatures:
            if named and named != keyid:
                continue
            try:
                ring[keyid].verify(sig, message, ec.ECDSA(hashes.SHA256()))
            except invalid:
                continue
            return keyid
    return None


def evidence(ring, signature_text_found, envelope_text, sha256_hex):
    """What the keyring proves about an artifact's files, as ``provenance.judge`` takes it.

    ``(signature, provenance)``: None for a file that is absent, else ``{"key": keyid or None}`` (and the
    statement, for the envelope, once a key verifies it). Unreadable files prove nothing: key None.
    """
    signature = None
    if signature_text_found is not None:
        try:
            sig = parse_signature_text(signature_text_found)
        except provenance.ProvenanceError as exc:
            signature = {"key": None, "error": exc.msg}
            bundle = provenance.bundle_problem(signature_text_found)
            if bundle:
                signature.update(error="the detached signature: %s" % bundle[0], unreadable=bundle[1])
        else:
            signature = {"key": signing_key(ring, sig, sha256_hex)}
    found = None
    if envelope_text is not None:
        try:
            payload_type, payload, sigs = provenance.parse_envelope(envelope_text)
        except provenance.ProvenanceError as exc:
            found = {"key": None, "statement": None, "error": exc.msg}
        else:
            keyid = envelope_key(ring, payload_type, payload, sigs)
            found = {
                "key": keyid,
                "statement": provenance.parse_statement(payload) if keyid else None,
                "named": sorted(set(named for named, _sig in sigs if named)),
            }
    return signature, found


def record_proof(policy, record, public_keys=()):
    """What the keys of ``policy`` (and ``public_keys``, PEM texts or paths) prove about the evidence a
    recorded verdict carries (``provenance.recorded_evidence``), as ``provenance.recorded_verdict_problem``
    takes it: ``{"signature", "provenance", "keys"}`` (the pair ``evidence`` gives, over the digest the
    record names, and the key ids tried); None when the record carries no evidence or names no digest."""
    texts, sha256_hex = provenance.recorded_evidence(record), provenance.recorded_sha256(record)
    if texts is None or sha256_hex is None:
        return None
    ring = keyring_of(public_keys, extra=provenance.public_keys(policy))
    try:
        signature, found = evidence(ring, texts[0], texts[1], sha256_hex)
    except provenance.ProvenanceError as exc:  # a key signed a payload that is no statement
        signature, found = evidence(ring, texts[0], None, sha256_hex)[0], {"key": None, "error": exc.msg}
    return {"signature": signature, "provenance": found, "keys": sorted(ring)}


def file_evidence(ring, path, signature_path=None, provenance_path=None, algorithms=("sha256",)):
    """``(digest, signature, provenance)`` of the file ``path`` and its ``.sig`` and ``.intoto.jsonl`` (or the
    paths given), as ``provenance.judge`` takes them; the file is read once, for SHA-256 and any other
    ``algorithms`` the caller needs as well."""
    digest = file_digests(path, tuple(sorted(set(algorithms) | {"sha256"})))
    texts = sidecar_texts(path, signature_path, provenance_path)
    signature, found = evidence(ring, texts[0], texts[1], digest["sha256"])
    return digest, signature, found


def sidecar_texts(path, signature_path=None, provenance_path=None):
    """``(signature text, envelope text)`` of the file ``path``: its ``.sig`` and ``.intoto.jsonl`` (or the
    paths given), None for one that is missing; what a verdict record keeps as its evidence."""
    return read_text(signature_path or path + ".sig"), read_text(provenance_path or path + ".intoto.jsonl")


def on_disk(ring, signature_text_found, envelope_text, sha256_hex):
    """The signer and provenance summary the existing files prove with ``ring`` (None where none)."""
    signature, found = evidence(ring, signature_text_found, envelope_text, sha256_hex)
    doc = (found or {}).get("statement")
    return {"signer": (signature or {}).get("key"), "provenance": provenance.summary(doc) if doc else None}


def builder(given):
    """The builder a statement records: the option's values, the running collection's version by default."""
    found = dict(given or {})
    found["collection_version"] = found.get("collection_version") or provenance.COLLECTION_VERSION
    return found


def private_key_from(params, prefix=""):
    """The private key ``key_path`` or ``key`` (with ``key_password``; each after ``prefix``) gives, or None
    when neither does."""
    path, text = params.get(prefix + "key_path"), params.get(prefix + "key")
    if not path and not text:
        return None
    source = "%skey_path %s" % (prefix, path) if path else prefix + "key"
    pem = read_key_text(path, text, prefix + "key_path")
    return load_private_key(pem, params.get(prefix + "key_password"), source)


def signing_plan(key, sha256_hex, wanted, before_signature, before_envelope, force=False):
    """``provenance.plan_signing`` over the existing signature and envelope texts (None: absent), with the
    texts to write: ``signature_text`` and ``envelope_text`` are None where the existing one is kept."""
    keyid = key_id(key)
    ring = {keyid: key.public_key()}
    signature, found = evidence(ring, before_signature, before_envelope, sha256_hex)
    plan = provenance.plan_signing(keyid, wanted, signature, found, force)
    plan.update(
        key_id=keyid,
        before=on_disk(ring, before_signature, before_envelope, sha256_hex),
        signature_text=signature_text(sign_digest(key, sha256_hex)) if plan["signature"] else None,
        envelope_text=(
            provenance.envelope_line(sign_envelope(key, provenance.serialize(wanted)))
            if plan["provenance"]
            else None
        ),
    )
    return plan
