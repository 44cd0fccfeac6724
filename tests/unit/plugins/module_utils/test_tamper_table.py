"""The tamper table against every file consumer's verification, with real keys and files: one byte flipped,
another artifact's signature, a key the policy does not trust, a provenance whose subject digest differs and
an older revision's signature replayed under a newer name are each refused, naming the artifact, the key
and the check; the untampered artifact verifies. The consumers: artifact_verify (a file where it is used),
worker_image's import rule (a worker golden's image), baked_image's registration rule (a baked revision).
Zero writes on each refusal are asserted where each consumer writes, on the lab (test_worker_image_signing,
test_baked_image_signing, test_dbinstance_repave, test_mirror_provenance)."""

import shutil

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import catalog
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance
from ansible_collections.goldenimage.pipeline.plugins.module_utils.workers import worker
from ansible_collections.goldenimage.pipeline.plugins.modules import artifact_sign, artifact_verify
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.unit.plugins.modules import support

TRUSTED = ec.generate_private_key(ec.SECP256R1())
STRANGER = ec.generate_private_key(ec.SECP256R1())
# A revision's artifact, the next one's, and the worker entries naming the same two versions.
STREAM, NAME, NEWER = "22.04", "v20261101", "v20261201"
ENTRIES = {
    rev: {"subject": "images[0] (%s)" % rev, "schematicID": "ab", "version": version}
    for rev, version in ((NAME, "v1.13.0"), (NEWER, "v1.13.1"))
}

CASES = {
    # case: (verdict, the key the refusal names: None, "trusted" or "stranger")
    "untampered": ("verified", "trusted"),
    "byte flipped": ("signature_mismatch", None),
    "other artifact's signature": ("signature_mismatch", None),
    "untrusted key": ("untrusted_key", "stranger"),
    "subject digest differs": ("subject_digest_differs", "trusted"),
    "replayed older revision": ("replayed_revision", "trusted"),
}


class Consumer:
    """How one consumer names an artifact and judges it; ``judge`` returns the verdict or raises."""

    def __init__(self, name, subject, family, stream, judge):
        self.name, self.subject, self.family, self.stream, self.judge = name, subject, family, stream, judge


def _pem(key):
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def _sign(path, key, name):
    params = {
        "path": str(path),
        "key": _pem(key),
        "name": name,
        "builder": {"playbook": "t.yml"},
        "force": True,
    }
    artifact_sign.run(support.validated(artifact_sign.argument_spec(), params))


def _policy(consumer):
    return {
        "rules": [
            {"public_key": signing.public_pem(TRUSTED), "name": "release", "families": [consumer.family]}
        ]
    }


def _by_artifact_verify(consumer, path, revision):
    params = {
        "path": str(path),
        "name": consumer.subject(revision),
        "family": consumer.family,
        "stream": consumer.stream(revision),
        "public_keys": [signing.public_pem(STRANGER)],
        "trust_policy": _policy(consumer),
    }
    result = artifact_verify.run(support.validated(artifact_verify.argument_spec(), params))
    return dict(result, key=result["key_id"])


def _evidence(consumer, path):
    policy = provenance.normalize_policy(_policy(consumer))
    ring = signing.keyring(
        provenance.public_keys(policy) + [("stranger", signing.public_pem(STRANGER).encode())]
    )
    return policy, signing.file_evidence(ring, str(path))


def _by_worker_import(consumer, path, revision):
    policy, (digest, signature, found) = _evidence(consumer, path)
    return worker.import_verdict(ENTRIES[revision], digest["sha256"], policy, signature, found)


def _by_baked_registration(consumer, path, revision):
    policy, (digest, signature, found) = _evidence(consumer, path)
    verdict = provenance.judge(
        {"name": consumer.subject(revision), "digest": digest},
        consumer.family,
        STREAM,
        policy,
        signature,
        found,
    )
    if not verdict["ok"]:
        raise Refusal("revision %s" % revision, verdict["message"], **verdict)
    return verdict


CONSUMERS = [
    Consumer(
        "artifact_verify",
        lambda rev: "golden-%s.qcow2" % rev,
        "ubuntu-2404",
        lambda rev: None,
        _by_artifact_verify,
    ),
    Consumer(
        "worker_image",
        lambda rev: worker.signed_name(ENTRIES[rev]),
        "talos-ab",
        lambda rev: ENTRIES[rev]["version"],
        _by_worker_import,
    ),
    Consumer(
        "baked_image",
        lambda rev: catalog.signed_subject(rev, STREAM),
        catalog.family(STREAM),
        lambda rev: STREAM,
        _by_baked_registration,
    ),
]


def _served(tmp_path, consumer, case):
    """``(path, revision)``: the artifact as the case serves it, its .sig and .intoto.jsonl beside it."""
    folder = tmp_path / case.replace(" ", "-").replace("'", "")
    folder.mkdir()
    path, other = folder / "artifact", folder / "other"
    path.write_bytes(b"golden bytes " * 4096)
    other.write_bytes(b"other bytes " * 4096)
    revision = NAME
    if case == "untrusted key":
        _sign(path, STRANGER, consumer.subject(NAME))
    elif case == "other artifact's signature":
        _sign(other, TRUSTED, consumer.subject(NEWER))
        for suffix in (".sig", ".intoto.jsonl"):
            shutil.copyfile(str(other) + suffix, str(path) + suffix)
    elif case == "subject digest differs":
        _sign(path, TRUSTED, consumer.subject(NAME))
        _sign(other, TRUSTED, consumer.subject(NAME))
        shutil.copyfile(str(other) + ".intoto.jsonl", str(path) + ".intoto.jsonl")
    elif case == "replayed older revision":
        _sign(path, TRUSTED, consumer.subject(NAME))  # the older revision's, served as the newer one
        revision = NEWER
    else:
        _sign(path, TRUSTED, consumer.subject(NAME))
    if case == "byte flipped":
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 1
        path.write_bytes(bytes(data))
    return path, revision


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("consumer", CONSUMERS, ids=[c.name for c in CONSUMERS])
def test_every_consumer_refuses_every_tamper_case_naming_the_artifact_the_key_and_the_check(
    tmp_path, consumer, case
):
    path, revision = _served(tmp_path, consumer, case)
    verdict, named = CASES[case]
    key = {"trusted": signing.key_id(TRUSTED), "stranger": signing.key_id(STRANGER), None: None}[named]
    if verdict == "verified":
        found = consumer.judge(consumer, path, revision)
        assert found["verdict"] == "verified" and found["key"] == key, found
        return
    with pytest.raises(Refusal) as refused:
        consumer.judge(consumer, path, revision)
    fields, msg = refused.value.fields, refused.value.msg
    assert fields["verdict"] == verdict, (case, msg)
    assert consumer.subject(revision) in msg and "check failed" in msg, msg
    assert fields.get("key_id", fields.get("key")) == key, (case, fields)
    if key:
        assert key in msg, msg
