"""A stateful property test over micro-VM images' cosign signature and attestation tags, through the rules
that judge them.

Sign and attest images with a trusted key, a key the keyring holds but the policy trusts for another family
only, and a key nobody holds; copy one image's signatures under another's tag; flip a byte of a signature;
rebuild an image (a new digest, the old signatures left in place). After every step: an image is verified
exactly when an intact signature and an intact statement by the trusted key name its current digest, and a
refusal names the check that failed. Real ECDSA P-256 in-process, no registry: fast, in the unit tier.
"""

from __future__ import annotations

import base64
import hashlib

from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

HOST = "registry.example.com/flintlock/ubuntu/"
IMAGES = ("kernel", "rootfs")
KEYS = {label: ec.generate_private_key(ec.SECP256R1()) for label in ("trusted", "known", "stranger")}
IDS = {label: signing.key_id(key) for label, key in KEYS.items()}
RING = {IDS[label]: KEYS[label].public_key() for label in ("trusted", "known")}
POLICY = provenance.normalize_policy(
    {
        "rules": [
            {"key": IDS["trusted"], "name": "release", "families": ["flintlock"]},
            {"key": IDS["known"], "name": "intern", "families": ["scratch"]},
        ]
    }
)
LABELS = st.sampled_from(sorted(KEYS))
NAMES = st.sampled_from(IMAGES)


def flip(sig_b64):
    raw = bytearray(base64.b64decode(sig_b64))
    raw[len(raw) // 2] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


class ImageSignatures(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.builds = 0
        self.digest = {name: self._digest(name) for name in IMAGES}
        # Per image: its .sig tag's layers ({sig, payload, key, digest, intact}), its .att envelopes.
        self.sigs = {name: [] for name in IMAGES}
        self.atts = {name: [] for name in IMAGES}

    def _digest(self, name):
        self.builds += 1
        return "sha256:" + hashlib.sha256(("%s-%d" % (name, self.builds)).encode()).hexdigest()

    @rule(name=NAMES, label=LABELS)
    def sign(self, name, label):
        payload = provenance.simple_signing(HOST + name, self.digest[name])
        sig = signing.sign_payload(KEYS[label], payload)
        self.sigs[name].append(
            {"sig": sig, "payload": payload, "key": label, "digest": self.digest[name], "intact": True}
        )

    @rule(name=NAMES, label=LABELS)
    def attest(self, name, label):
        doc = provenance.statement(
            {"name": HOST + name, "digest": self.digest[name]}, [], {}, "2026-12-01T00:00:00Z"
        )
        envelope = signing.sign_envelope(KEYS[label], provenance.serialize(doc))
        self.atts[name].append(
            {"text": provenance.envelope_line(envelope), "key": label, "digest": self.digest[name]}
        )

    @rule(source=NAMES, into=NAMES)
    def copy_signatures(self, source, into):
        held = set(layer["sig"] for layer in self.sigs[into])
        self.sigs[into].extend(dict(layer) for layer in self.sigs[source] if layer["sig"] not in held)

    @rule(name=NAMES)
    def tamper(self, name):
        if self.sigs[name]:
            layer = self.sigs[name][-1]
            # The same byte flipped twice is the signature again.
            layer["sig"], layer["intact"] = flip(layer["sig"]), not layer["intact"]

    @rule(name=NAMES)
    def rebuild(self, name):
        self.digest[name] = self._digest(name)

    def _verdict(self, name):
        signatures = [
            {
                "key": signing.payload_key(RING, layer["sig"], layer["payload"]),
                "digest": provenance.signed_digest(layer["payload"]),
            }
            for layer in self.sigs[name]
        ]
        envelopes = [signing.evidence(RING, None, entry["text"], None)[1] for entry in self.atts[name]]
        return provenance.judge_image(
            HOST + name, self.digest[name], "flintlock", None, POLICY, signatures, envelopes
        )

    @invariant()
    def verified_exactly_when_the_trusted_key_signed_this_digest_intact(self):
        for name in IMAGES:
            digest = self.digest[name]
            signed = any(
                layer["intact"] and layer["key"] == "trusted" and layer["digest"] == digest
                for layer in self.sigs[name]
            )
            attested = any(e["key"] == "trusted" and e["digest"] == digest for e in self.atts[name])
            verdict = self._verdict(name)
            assert verdict["ok"] == (signed and attested), (name, verdict["message"])
            assert verdict["verdict"] in (
                provenance.VERIFIED,
                provenance.UNSIGNED,
                provenance.UNTRUSTED_KEY,
                provenance.OTHER_BYTES,
                provenance.SUBJECT_DIGEST,
                provenance.REPLAYED,
            )
            if not verdict["ok"]:
                assert verdict["check"] in ("signature", "provenance", "provenance subject")
                assert HOST + name in verdict["message"] and digest in verdict["message"]
                if verdict["verdict"] == provenance.UNTRUSTED_KEY:
                    # A key the keyring holds, or one an envelope names that nobody holds.
                    assert verdict["key"] in (IDS["known"], IDS["stranger"])
            if not self.sigs[name] and not self.atts[name]:
                assert verdict["verdict"] == provenance.UNSIGNED


ImageSignatures.TestCase.settings = settings(max_examples=60, stateful_step_count=20, deadline=None)
test_image_signatures = ImageSignatures.TestCase
