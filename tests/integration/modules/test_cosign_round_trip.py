"""cosign agrees with the collection both ways, by key and offline (no Rekor, no Fulcio): cosign verifies the
collection's blob signature and provenance envelope, and the collection verifies what cosign signed.

cosign comes from tools/build-cosign.sh (github.com/sigstore/cosign/v2 at the pin, cached with the lab's
binaries) or LAB_COSIGN_BIN; the test fails naming the binary when it is absent rather than skipping."""

from __future__ import annotations

import json

from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance
from ansible_collections.goldenimage.pipeline.plugins.modules import artifact_sign, artifact_verify
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.unit.plugins.modules import support


def test_cosign_verifies_the_collections_signatures_and_the_collection_verifies_cosigns(tmp_path, cosign):
    image = tmp_path / "img-v2.qcow2"
    image.write_bytes(b"QFI\xfb" + bytes(range(256)) * 256)
    key = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    (tmp_path / "pub.pem").write_text(signing.public_pem(key))
    signed = artifact_sign.run(
        support.validated(
            artifact_sign.argument_spec(),
            {
                "path": str(image),
                "key_path": str(tmp_path / "key.pem"),
                "builder": {"playbook": "publish.yml"},
            },
        )
    )
    assert signed["changed"] is True
    cosign(
        "verify-blob",
        "--key",
        "pub.pem",
        "--signature",
        "img-v2.qcow2.sig",
        "--insecure-ignore-tlog=true",
        "img-v2.qcow2",
    )
    cosign(
        "verify-blob-attestation",
        "--key",
        "pub.pem",
        "--signature",
        "img-v2.qcow2.intoto.jsonl",
        "--type",
        "slsaprovenance1",
        "--insecure-ignore-tlog=true",
        "img-v2.qcow2",
    )

    # cosign's own key pair (its encrypted format: the collection is given the public half only).
    cosign("generate-key-pair")
    other = tmp_path / "img-v3.qcow2"
    other.write_bytes(b"QFI\xfb" + bytes(range(255, -1, -1)) * 256)
    predicate = tmp_path / "predicate.json"
    doc = provenance.statement(
        {"name": other.name, "digest": signing.file_digests(str(other))}, [], {}, "2026-12-01T00:00:00Z"
    )
    predicate.write_text(json.dumps(doc["predicate"]))
    cosign(
        "sign-blob",
        "--key",
        "cosign.key",
        "--tlog-upload=false",
        "--output-signature",
        "img-v3.qcow2.sig",
        "img-v3.qcow2",
    )
    cosign(
        "attest-blob",
        "--key",
        "cosign.key",
        "--tlog-upload=false",
        "--predicate",
        "predicate.json",
        "--type",
        "slsaprovenance1",
        "--output-signature",
        "img-v3.qcow2.intoto.jsonl",
        "img-v3.qcow2",
    )
    envelope = json.loads((tmp_path / "img-v3.qcow2.intoto.jsonl").read_text())
    assert envelope["payloadType"] == provenance.PAYLOAD_TYPE
    cosign_key = signing.keyring([("cosign.pub", (tmp_path / "cosign.pub").read_bytes())])
    verified = artifact_verify.run(
        support.validated(
            artifact_verify.argument_spec(),
            {
                "path": str(other),
                "family": "ubuntu-2404",
                "public_keys": [str(tmp_path / "cosign.pub")],
                "trust_policy": {"rules": [{"key": next(iter(cosign_key)), "name": "cosign"}]},
            },
        )
    )
    assert verified["verdict"] == "verified" and verified["signer"] == "cosign"
