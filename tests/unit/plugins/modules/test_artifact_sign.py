"""The artifact_sign and artifact_verify runners with real keys and files: they return the result or raise,
and never exit."""

import hashlib
import json

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance
from ansible_collections.goldenimage.pipeline.plugins.modules import artifact_sign, artifact_verify
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.unit.plugins.modules import support

KEY = ec.generate_private_key(ec.SECP256R1())
OTHER = ec.generate_private_key(ec.SECP256R1())


def pem(key):
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def now():
    return "2026-12-01T00:00:00Z"


@pytest.fixture
def made(tmp_path):
    (tmp_path / "img-v2.qcow2").write_bytes(b"QFI\xfb" + b"\x00" * 4096)
    (tmp_path / "img.pkr.hcl").write_text('source "qemu" "x" {}\n')
    (tmp_path / "key.pem").write_text(pem(KEY))
    return tmp_path


def sign_params(folder, **given):
    base = {
        "path": str(folder / "img-v2.qcow2"),
        "key_path": str(folder / "key.pem"),
        "inputs": [
            {"name": "upstream", "digest": "sha256:" + "a" * 64},
            {"name": "packer-template", "path": str(folder / "img.pkr.hcl")},
        ],
        "builder": {"playbook": "publish.yml", "host": "build-1"},
    }
    return support.validated(artifact_sign.argument_spec(), dict(base, **given))


def files(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_signs_and_a_second_run_keeps_both_files(made):
    first = artifact_sign.run(sign_params(made), now=now)
    assert first["changed"] is True and first["signature_changed"] and first["provenance_changed"]
    assert first["key_id"] == signing.key_id(KEY)
    data = (made / "img-v2.qcow2").read_bytes()
    assert first["digest"] == {
        "sha256": hashlib.sha256(data).hexdigest(),
        "sha512": hashlib.sha512(data).hexdigest(),
    }
    assert first["diff"]["before"] == {"signer": None, "provenance": None}
    written = files(made)
    envelope = json.loads(written["img-v2.qcow2.intoto.jsonl"])
    assert envelope["payloadType"] == provenance.PAYLOAD_TYPE
    assert [i["name"] for i in first["provenance"]["inputs"]] == ["packer-template", "upstream"]
    assert first["provenance"]["builder"]["collection_version"] == provenance.COLLECTION_VERSION
    again = artifact_sign.run(sign_params(made), now=lambda: "2027-01-01T00:00:00Z")
    assert again["changed"] is False and "diff" not in again
    assert files(made) == written
    assert again["provenance"]["time"] == "2026-12-01T00:00:00Z"


def test_check_mode_predicts_and_writes_nothing(made):
    before = files(made)
    result = artifact_sign.run(sign_params(made), check_mode=True, now=now)
    assert result["changed"] is True and files(made) == before
    artifact_sign.run(sign_params(made), now=now)
    assert artifact_sign.run(sign_params(made), check_mode=True, now=now)["changed"] is False


def test_changed_bytes_another_key_or_new_inputs_sign_again(made):
    artifact_sign.run(sign_params(made), now=now)
    (made / "img.pkr.hcl").write_text("changed\n")
    result = artifact_sign.run(sign_params(made), now=now)
    assert result["signature_changed"] is False and result["provenance_changed"] is True
    (made / "other.pem").write_text(pem(OTHER))
    result = artifact_sign.run(sign_params(made, key_path=None, key=pem(OTHER)), now=now)
    assert result["signature_changed"] and result["provenance_changed"]
    assert result["diff"]["before"]["signer"] is None and result["key_id"] == signing.key_id(OTHER)


def test_nothing_is_written_when_the_key_or_an_input_is_wrong(made):
    (made / "cosign.key").write_text("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nAA==\n")
    before = files(made)
    with pytest.raises(signing.SigningKeyError, match=r"key_path .*cosign\.key: it is in cosign's own"):
        artifact_sign.run(sign_params(made, key_path=str(made / "cosign.key")), now=now)
    with pytest.raises(PipelineError, match="input upstream: the sha256 digest must be 64 hex digits"):
        artifact_sign.run(sign_params(made, inputs=[{"name": "upstream", "digest": "sha256:abc"}]), now=now)
    with pytest.raises(Refusal, match=r"input t .*: it does not exist"):
        artifact_sign.run(sign_params(made, inputs=[{"name": "t", "path": str(made / "none")}]), now=now)
    with pytest.raises(Refusal, match=r"its directory .*/none does not exist; create it first"):
        artifact_sign.run(sign_params(made, signature_path=str(made / "none" / "x.sig")), now=now)
    assert files(made) == before
    (made / "isdir.jsonl").mkdir()
    before = sorted(p.name for p in made.iterdir())
    with pytest.raises(Refusal, match=r"isdir\.jsonl: it is a directory, not a file; name a file path"):
        artifact_sign.run(sign_params(made, provenance_path=str(made / "isdir.jsonl")), now=now)
    for bad in ("yesterday", "2026-13-45T99:00:00Z", "2026-12-01T00:00:00+05:00", "2026-12-01", ""):
        with pytest.raises(PipelineError, match="is not an RFC 3339 UTC time to the second"):
            artifact_sign.run(sign_params(made, time=bad or None), now=lambda: "")
    assert sorted(p.name for p in made.iterdir()) == before


def test_the_key_options_are_secret_and_one_of_them_is_required():
    spec = artifact_sign.argument_spec()
    assert spec["key"]["no_log"] is True and spec["key_password"]["no_log"] is True
    assert support.rejected(spec, artifact_sign.RULES, {"path": "/x"})
    assert support.rejected(spec, artifact_sign.RULES, {"path": "/x", "key": "k", "key_path": "/k"})


def verify_params(folder, **given):
    base = {
        "path": str(folder / "img-v2.qcow2"),
        "family": "ubuntu-2404",
        "public_keys": [signing.public_pem(KEY), signing.public_pem(OTHER)],
        "trust_policy": {
            "rules": [{"key": signing.key_id(KEY), "name": "release", "families": ["ubuntu-2404"]}],
        },
    }
    return support.validated(artifact_verify.argument_spec(), dict(base, **given))


def test_verify_returns_who_signed_and_from_what(made):
    (made / "facts.json").write_text('{"os_family": "linux"}')
    inputs = [{"name": "image-facts", "path": str(made / "facts.json")}]
    artifact_sign.run(sign_params(made, inputs=inputs), now=now)
    result = artifact_verify.run(verify_params(made, facts_path=str(made / "facts.json")))
    assert result["verdict"] == "verified" and result["signer"] == "release" and result["changed"] is False
    assert result["key_id"] == signing.key_id(KEY) and result["facts_match"] is True
    assert "key" not in result  # one name for the key id in every module's result
    assert result["provenance"]["inputs"][0]["name"] == "image-facts"
    (made / "facts.json").write_text('{"os_family": "windows"}')
    changed = artifact_verify.run(verify_params(made, facts_path=str(made / "facts.json")))
    assert changed["facts_match"] is False


def test_verify_refuses_with_the_verdict(made):
    with pytest.raises(Refusal) as refused:
        artifact_verify.run(verify_params(made))
    assert refused.value.fields["verdict"] == "unsigned" and refused.value.fields["refused"] is True
    artifact_sign.run(sign_params(made, key_path=None, key=pem(OTHER)), now=now)
    untrusted = "img-v2.qcow2 .*signature check failed: key %s signed it" % signing.key_id(OTHER)
    with pytest.raises(Refusal, match=untrusted):
        artifact_verify.run(verify_params(made))
    relaxed = {"rules": [], "relaxed": [{"family": "lab", "reason": "scratch"}]}
    (made / "img-v2.qcow2.sig").unlink()
    (made / "img-v2.qcow2.intoto.jsonl").unlink()
    result = artifact_verify.run(verify_params(made, family="lab", trust_policy=relaxed))
    assert result["verdict"] == "unsigned_allowed" and result["relaxed"] == "scratch"


def test_verify_takes_a_catalog_style_policy_and_refuses_none(made):
    artifact_sign.run(sign_params(made), now=now)
    # The key as PEM in the rule (as a catalog's trust section keeps it), no separate keyring.
    catalog_style = verify_params(
        made,
        public_keys=[],
        trust_policy={"rules": [{"public_key": signing.public_pem(KEY), "name": "release"}]},
    )
    assert artifact_verify.run(catalog_style)["signer"] == "release"
    with pytest.raises(Refusal, match=r"img-v2\.qcow2: no trust_policy: .*; give trust_policy"):
        artifact_verify.run(verify_params(made, trust_policy=None))


def test_an_image_facts_record_is_digested_as_the_document_reports_compare(made):
    """However the facts file is formatted, the statement records the digest golden_info and the drift report
    compute for the same facts, so ``facts_match`` reads true for the record that was signed."""
    facts = {"os": {"id": "ubuntu", "version_id": "24.04"}, "sealed": True}
    (made / "facts.json").write_text(json.dumps(facts, indent=2, sort_keys=True) + "\n")
    given = [{"name": provenance.FACTS, "path": str(made / "facts.json")}]
    result = artifact_sign.run(sign_params(made, inputs=given), now=now)
    (recorded,) = result["provenance"]["inputs"]
    assert recorded["digest"] == provenance.facts_digest(facts)
    record = {"verdict": "verified", "inputs": result["provenance"]["inputs"]}
    assert provenance.signed_report(record, facts)["facts_match"] is True


def test_an_image_facts_input_that_is_not_json_is_refused_before_anything_is_written(made):
    (made / "facts.json").write_text("sealed: yes\n")
    before = files(made)
    given = [{"name": provenance.FACTS, "path": str(made / "facts.json")}]
    with pytest.raises(Refusal, match="is not a JSON image-facts record"):
        artifact_sign.run(sign_params(made, inputs=given), now=now)
    assert files(made) == before
