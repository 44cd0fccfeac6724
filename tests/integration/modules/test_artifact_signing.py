"""artifact_sign and artifact_verify run by ansible-playbook on real files and keys: check mode, write, again
unchanged with the files untouched; verify accepts what was signed, refuses one flipped byte, and the key
never appears in the output."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.integration.support.runner import module_task, play, run_playbook

SIGN = "goldenimage.pipeline.artifact_sign"
VERIFY = "goldenimage.pipeline.artifact_verify"


def files(folder):
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(folder.iterdir())}


@pytest.mark.suite("idempotence")
def test_sign_check_then_write_then_again_and_verify(tmp_path):
    key = ec.generate_private_key(ec.SECP256R1())
    key_text = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    image = artifacts / "img-v2.qcow2"
    image.write_bytes(b"QFI\xfb" + bytes(range(256)) * 64)
    args = {
        "path": str(image),
        "key": key_text,
        "inputs": [{"name": "upstream", "digest": "sha256:" + "a" * 64}],
        "builder": {"playbook": "publish.yml", "host": "build-1"},
    }
    first = run_playbook(
        play(module_task(SIGN, "predict", check=True, **args), module_task(SIGN, "sign", diff=True, **args))
    )
    assert first.ok, first.log
    assert first["predict"]["changed"] is True and first["predict"]["signature_changed"] is True
    assert first["sign"]["changed"] is True
    written = files(artifacts)
    assert set(written) == {"img-v2.qcow2", "img-v2.qcow2.sig", "img-v2.qcow2.intoto.jsonl"}
    policy = {"rules": [{"key": first["sign"]["key_id"], "name": "release", "families": ["ubuntu-2404"]}]}
    verify = {
        "path": str(image),
        "family": "ubuntu-2404",
        "public_keys": [first["sign"]["public_key"]],
        "trust_policy": policy,
    }
    again = run_playbook(play(module_task(SIGN, "again", **args), module_task(VERIFY, "verify", **verify)))
    assert again.ok, again.log
    assert again["again"]["changed"] is False and files(artifacts) == written
    assert again["verify"]["verdict"] == "verified" and again["verify"]["signer"] == "release"
    data = bytearray(image.read_bytes())
    data[100] ^= 1
    image.write_bytes(bytes(data))
    tampered = run_playbook(play(module_task(VERIFY, "tampered", ignore_errors=True, **verify)))
    assert tampered.entry("tampered")["status"] == "ignored", tampered.log
    assert tampered["tampered"]["verdict"] == "signature_mismatch"
    assert "artifact img-v2.qcow2 (sha256:" in tampered["tampered"]["msg"]
    for run in (first, again, tampered):
        assert "PRIVATE KEY" not in run.stdout + run.stderr
