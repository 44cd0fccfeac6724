"""Mirrored images signed where they are made and verified where they are used, against the lab's loopback
S3 (tests/lab/s3.py) and the real cosign (tools/build-cosign.sh).

os_mirror_object signs each object it mirrors (``<key>.sig``, ``<key>.intoto.jsonl``) once; cosign verifies
what it wrote; os_mirror_verify judges an object against the trust policy its caller pins (given, or the
catalog's once a pinned key proves the catalog) and refuses the tamper table before anything is imported,
naming the object, the key and the check; what cosign signed is accepted. The S3 request log proves that
reruns, verifications and refusals write nothing.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.integration.modules import test_os_mirror as mirror_lab
from tests.integration.support.runner import play, run_playbook

# The loopback S3, its request log and the images of the mirror's own tests.
s3, bucket, images = mirror_lab.s3, mirror_lab.bucket, mirror_lab.images
_env, _sha256, mirror_task, catalog_task = (
    mirror_lab._env,
    mirror_lab._sha256,
    mirror_lab.mirror_task,
    mirror_lab.catalog_task,
)
VERIFY = "goldenimage.pipeline.os_mirror_verify"
FAMILY = "debian-12"


def _key(path):
    key = ec.generate_private_key(ec.SECP256R1())
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return key


def _object_key(version, digest, name):
    return "%s/%s/sha256-%s/%s" % (FAMILY, version, digest, name)


def _get(client, name, key):
    return client.get_object(Bucket=name, Key=key)["Body"].read()


def _put(client, name, key, body, **extra):
    client.put_object(Bucket=name, Key=key, Body=body, **extra)


def test_each_mirrored_object_is_signed_once_and_cosign_verifies_it(s3, bucket, images, tmp_path, cosign):
    endpoint, client, log = s3
    small = images["small"]
    digest = _sha256(small)
    key = _key(tmp_path / "mirror.pem")
    (tmp_path / "mirror.pub").write_text(signing.public_pem(key))
    builder = {"playbook": "mirror.yml", "host": "builder-1"}

    def mirrored(title, **extra):
        return dict(
            mirror_task(
                title, bucket, path=str(small), key_path=str(tmp_path / "mirror.pem"), builder=builder
            ),
            **extra,
        )

    first = run_playbook(
        play(mirrored("check", check_mode=True), mirrored("sign"), catalog_task("catalog", bucket)),
        env=_env(endpoint),
    )
    assert first.ok, first.log
    object_key = _object_key("20260801", digest, small.name)
    assert first["check"]["changed"] is True and "signed" not in first["check"]  # digest not read yet
    signed = first["sign"]["signed"]
    assert (signed["signature_key"], signed["provenance_key"]) == (
        object_key + ".sig",
        object_key + ".intoto.jsonl",
    )
    assert (
        signed["key_id"] == signing.key_id(key)
        and signed["signature_changed"]
        and signed["provenance_changed"]
    )
    recorded = signed["provenance"]
    assert recorded["subject"] == [{"name": object_key, "digest": {"sha256": digest}}]
    assert recorded["inputs"] == [{"name": "upstream", "uri": str(small), "digest": {"sha256": digest}}]
    assert (recorded["builder"]["playbook"], recorded["builder"]["host"]) == ("mirror.yml", "builder-1")
    assert recorded["builder"]["collection_version"] == provenance.COLLECTION_VERSION and recorded["time"]
    # The catalog lists the image with its signature and provenance, and not those objects themselves.
    catalog = first["catalog"]["catalog"]
    (entry,) = catalog["families"][FAMILY]["versions"]
    assert (entry["signature"], entry["provenance"]) == (object_key + ".sig", object_key + ".intoto.jsonl")
    assert first["catalog"]["problems"] == [] and first["catalog"]["ignored"] == []

    # Again: the signature and the provenance verify, nothing is written.
    mark = log.mark()
    again = run_playbook(play(mirrored("again"), catalog_task("catalog", bucket)), env=_env(endpoint))
    assert again.ok, again.log
    assert again["again"]["changed"] is False and again["catalog"]["changed"] is False
    assert again["again"]["signed"]["signature_changed"] is False
    assert log.since(mark) == []

    # cosign verifies both, by key and offline.
    for name in (small.name, small.name + ".sig", small.name + ".intoto.jsonl"):
        (tmp_path / ("bucket-" + name)).write_bytes(
            _get(client, bucket, object_key[: -len(small.name)] + name)
        )
    blob = "bucket-" + small.name
    cosign(
        "verify-blob",
        "--key",
        "mirror.pub",
        "--signature",
        blob + ".sig",
        "--insecure-ignore-tlog=true",
        blob,
    )
    cosign(
        "verify-blob-attestation",
        "--key",
        "mirror.pub",
        "--signature",
        blob + ".intoto.jsonl",
        "--type",
        "slsaprovenance1",
        "--insecure-ignore-tlog=true",
        blob,
    )


def _stmt_envelope(key, name, digest):
    doc = provenance.statement({"name": name, "digest": {"sha256": digest}}, [], {}, "2026-12-01T00:00:00Z")
    return provenance.envelope_line(signing.sign_envelope(key, provenance.serialize(doc)))


@pytest.mark.suite("bad-input")
def test_the_tamper_table_is_refused_before_any_write_and_cosigns_signature_is_accepted(
    s3, bucket, images, tmp_path, cosign
):
    endpoint, client, log = s3
    small, changed = images["small"], images["changed"]
    small_sha, changed_sha = _sha256(small), _sha256(changed)
    trusted = _key(tmp_path / "trusted.pem")
    _key(tmp_path / "stranger.pem")
    cosign("generate-key-pair")
    policy = {
        "rules": [
            {"name": "mirror-2026", "public_key": signing.public_pem(trusted), "families": [FAMILY]},
            {"name": "cosign-made", "public_key": (tmp_path / "cosign.pub").read_text()},
        ],
        "relaxed": [{"family": "lab-scratch", "reason": "throwaway images of the lab"}],
    }
    keyed = {"key_path": str(tmp_path / "trusted.pem")}
    tasks = [
        mirror_task("v1", bucket, path=str(small), version="v1", **keyed),
        mirror_task("v2 unsigned", bucket, path=str(changed), version="v2"),
        mirror_task("v3", bucket, path=str(changed), version="v3", **keyed),
        mirror_task(
            "v4 stranger", bucket, path=str(changed), version="v4", key_path=str(tmp_path / "stranger.pem")
        ),
        mirror_task("v5", bucket, path=str(changed), version="v5", **keyed),
        mirror_task("v6 same bytes as v1", bucket, path=str(small), version="v6"),
        mirror_task("v7", bucket, path=str(small), version="v7", **keyed),
        mirror_task("scratch", bucket, path=str(small), version="v1", family="lab-scratch"),
        mirror_task("v8 cosign", bucket, path=str(changed), version="v8"),
        {"name": "catalog", "goldenimage.pipeline.os_mirror_catalog": {"bucket": bucket, "trust": policy}},
    ]
    made = run_playbook(play(*tasks), env=_env(endpoint))
    assert made.ok, made.log
    v = {n: _object_key(n, changed_sha, changed.name) for n in ("v2", "v3", "v4", "v5", "v8")}
    v.update({n: _object_key(n, small_sha, small.name) for n in ("v1", "v6", "v7")})
    # Signed for other bytes: v1's signature stored as v3's.
    _put(client, bucket, v["v3"] + ".sig", _get(client, bucket, v["v1"] + ".sig"))
    # A statement the trusted key signed naming v5 with another digest.
    _put(client, bucket, v["v5"] + ".intoto.jsonl", _stmt_envelope(trusted, v["v5"], small_sha).encode())
    # An older revision's signature replayed: v6 holds v1's bytes; v1's signature and provenance beside it.
    for suffix in (".sig", ".intoto.jsonl"):
        _put(client, bucket, v["v6"] + suffix, _get(client, bucket, v["v1"] + suffix))
    # One byte flipped in the stored bytes of v7, its metadata left as the mirror wrote it.
    body = bytearray(_get(client, bucket, v["v7"]))
    body[len(body) // 2] ^= 0x01
    held = client.head_object(Bucket=bucket, Key=v["v7"])
    _put(client, bucket, v["v7"], bytes(body), Metadata=held["Metadata"])
    # cosign signs v8's bytes and attests the statement naming it, by key, with no transparency log.
    (tmp_path / "v8.qcow2").write_bytes(_get(client, bucket, v["v8"]))
    doc = provenance.statement(
        {"name": v["v8"], "digest": {"sha256": changed_sha}},
        [{"name": "upstream", "digest": {"sha256": changed_sha}, "uri": "https://upstream.example/v8.qcow2"}],
        {"playbook": "cosign"},
        "2026-12-01T00:00:00Z",
    )
    (tmp_path / "statement.json").write_text(json.dumps(doc))
    cosign(
        "sign-blob", "--key", "cosign.key", "--tlog-upload=false", "--output-signature", "v8.sig", "v8.qcow2"
    )
    cosign(
        "attest-blob",
        "--key",
        "cosign.key",
        "--tlog-upload=false",
        "--statement",
        "statement.json",
        "--output-signature",
        "v8.intoto.jsonl",
        "v8.qcow2",
    )
    for suffix in (".sig", ".intoto.jsonl"):
        _put(client, bucket, v["v8"] + suffix, (tmp_path / ("v8" + suffix)).read_bytes())

    def verify(title, key, **extra):
        params = dict({"bucket": bucket, "key": key, "trust_policy": policy}, **extra)
        return {"name": title, VERIFY: params, "ignore_errors": True}

    stranger_id = signing.key_id(
        signing.load_private_key((tmp_path / "stranger.pem").read_bytes(), None, "stranger")
    )
    table = {
        "signed": (v["v1"], {}, "verified", None, signing.key_id(trusted)),
        "unsigned": (v["v2"], {}, "unsigned", "signature", None),
        "signature of another artifact": (v["v3"], {}, "signature_mismatch", "signature", None),
        "untrusted key": (v["v4"], {}, "untrusted_key", "signature", stranger_id),
        "subject digest differs": (v["v5"], {}, "subject_digest_differs", "provenance subject", None),
        "replayed older revision": (v["v6"], {}, "replayed_revision", "provenance subject", None),
        "one byte flipped": (v["v7"], {"read_object": True}, "signature_mismatch", "digest", None),
        "relaxed family": (
            "lab-scratch/v1/sha256-%s/%s" % (small_sha, small.name),
            {},
            "unsigned_allowed",
            "signature",
            None,
        ),
        "cosign signed": (v["v8"], {}, "verified", None, None),
    }
    mark = log.mark()
    run = run_playbook(
        play(*(verify(title, key, **extra) for title, (key, extra, *_rest) in table.items())),
        env=_env(endpoint),
    )
    assert log.since(mark) == []  # verification reads, never writes
    for title, (key, _extra, verdict, check, key_id) in table.items():
        result = run[title]
        assert result["verdict"] == verdict, (title, result)
        if verdict in ("verified", "unsigned_allowed"):
            assert run.entry(title)["status"] == "ok", (title, result)
            continue
        assert run.entry(title)["status"] == "ignored" and result["refused"] is True, (title, result)
        assert result["check"] == check, (title, result)
        assert key in result["msg"] and ("%s check failed" % check) in result["msg"], (title, result["msg"])
        if key_id:
            assert result["key_id"] == key_id and key_id in result["msg"], (title, result)
    good = run["signed"]
    assert good["signer"] == "mirror-2026" and good["record"]["verdict"] == "verified"
    assert good["provenance"]["inputs"][0]["uri"] == str(small)
    assert run["relaxed family"]["relaxed"] == "throwaway images of the lab"
    assert run["cosign signed"]["signer"] == "cosign-made"
    assert run["cosign signed"]["provenance"]["inputs"][0]["uri"] == "https://upstream.example/v8.qcow2"
    # The signature cosign wrote is the base64 DER one the collection writes (one format both ways).
    assert base64.b64decode((tmp_path / "v8.sig").read_text(), validate=True)[0] == 0x30
    assert hashlib.sha256((tmp_path / "v8.qcow2").read_bytes()).hexdigest() == changed_sha


@pytest.mark.suite("idempotence")
def test_the_role_signs_what_it_mirrors_and_keeps_the_trust_policy_in_the_catalog(s3, images, tmp_path):
    endpoint, client, log = s3
    small = images["small"]
    key = _key(tmp_path / "mirror.pem")
    name = "role-signed-" + uuid.uuid4().hex[:8]
    policy = {"rules": [{"name": "mirror-2026", "public_key": signing.public_pem(key), "families": [FAMILY]}]}
    role = {
        "name": "os_mirror role",
        "ansible.builtin.include_role": {"name": "goldenimage.pipeline.os_mirror"},
        "vars": {
            "os_mirror_bucket": name,
            "os_mirror_images": [{"family": FAMILY, "version": "20260801", "path": str(small)}],
            "os_mirror_signing_key_path": str(tmp_path / "mirror.pem"),
            "os_mirror_trust": policy,
        },
    }
    first = run_playbook(play(role, name="mirror"), env=_env(endpoint))
    assert first.ok, first.log
    object_key = _object_key("20260801", _sha256(small), small.name)
    (result,) = first["Mirror each image by digest"]["results"]
    assert result["signed"]["key_id"] == signing.key_id(key)
    assert result["signed"]["provenance"]["builder"]["playbook"] == "mirror"
    document = json.loads(_get(client, name, "catalog.json"))
    assert document["trust"] == provenance.policy_document(provenance.normalize_policy(policy))
    assert document["families"][FAMILY]["versions"][0]["signature"] == object_key + ".sig"
    mark = log.mark()
    again = run_playbook(play(role, name="mirror"), env=_env(endpoint))
    assert again.ok, again.log
    assert log.since(mark) == []
    # The catalog is signed with the mirror's key; the verifier pins that key.
    assert base64.b64decode(_get(client, name, "catalog.json.sig"), validate=True)[0] == 0x30
    pinned = {"bucket": name, "key": object_key, "catalog_public_keys": [signing.public_pem(key)]}
    verified = run_playbook(play({"name": "verify", VERIFY: pinned}), env=_env(endpoint))
    assert verified.ok, verified.log
    assert verified["verify"]["signer"] == "mirror-2026"


@pytest.mark.suite("idempotence")
def test_an_exported_golden_is_signed_where_it_is_made_and_cosign_verifies_it(s3, tmp_path, cosign):
    endpoint, client, log = s3
    name = "export-signed-" + uuid.uuid4().hex[:8]
    client.create_bucket(Bucket=name)
    image = tmp_path / "windows11-x64-golden.qcow2"
    image.write_bytes(b"QFI\xfb" + bytes(range(256)) * 8192)
    key = _key(tmp_path / "export.pem")
    (tmp_path / "export.pub").write_text(signing.public_pem(key))
    object_key = "windows/11/2026-08-09/windows11-x64-golden.qcow2"
    task = {
        "name": "export",
        "goldenimage.pipeline.golden_export_object": {
            "bucket": name,
            "key": object_key,
            "path": str(image),
            "source": "pvc://golden-images-build/win11-sealed",
            "signing_key_path": str(tmp_path / "export.pem"),
            "builder": {"playbook": "export.yml", "host": "builder-1"},
        },
    }
    first = run_playbook(play(task), env=_env(endpoint))
    assert first.ok, first.log
    signed = first["export"]["signed"]
    digest = hashlib.sha256(image.read_bytes()).hexdigest()
    assert signed["key_id"] == signing.key_id(key) and signed["signature_changed"] is True
    assert signed["provenance"]["subject"] == [{"name": object_key, "digest": {"sha256": digest}}]
    inputs = {entry["name"]: entry for entry in signed["provenance"]["inputs"]}
    assert inputs["exported-volume"]["uri"] == "pvc://golden-images-build/win11-sealed"
    assert inputs["exported-volume"]["digest"] == {"sha256": digest}
    assert "image-facts" in inputs
    mark = log.mark()
    again = run_playbook(play(task), env=_env(endpoint))
    assert again.ok, again.log
    assert again["export"]["changed"] is False and log.since(mark) == []
    for suffix in ("", ".sig", ".intoto.jsonl"):
        (tmp_path / ("export.qcow2" + suffix)).write_bytes(_get(client, name, object_key + suffix))
    cosign(
        "verify-blob",
        "--key",
        "export.pub",
        "--signature",
        "export.qcow2.sig",
        "--insecure-ignore-tlog=true",
        "export.qcow2",
    )
    cosign(
        "verify-blob-attestation",
        "--key",
        "export.pub",
        "--signature",
        "export.qcow2.intoto.jsonl",
        "--type",
        "slsaprovenance1",
        "--insecure-ignore-tlog=true",
        "export.qcow2",
    )


@pytest.mark.suite("bad-input")
def test_the_catalogs_policy_counts_only_when_a_pinned_key_signed_it_and_refusals_write_nothing(
    s3, images, tmp_path, cosign
):
    """The policy never comes from the bucket on the bucket's word: with no pin the object is refused; the
    catalog os_mirror_catalog signed is read once the pinned key verifies it; a catalog rewritten to relax the
    family, one signed by another key and an unsigned one are refused before any verdict; a family other than
    the key's is refused; a private key pasted as a public key is refused and shown nowhere, -vvv included."""
    endpoint, client, log = s3
    small, changed = images["small"], images["changed"]
    name = "pinned-" + uuid.uuid4().hex[:8]
    client.create_bucket(Bucket=name)
    trusted = _key(tmp_path / "trusted.pem")
    catalog_key = _key(tmp_path / "catalog.pem")
    stranger = _key(tmp_path / "stranger.pem")
    policy = {
        "rules": [{"name": "mirror-2026", "public_key": signing.public_pem(trusted), "families": [FAMILY]}],
        "relaxed": [{"family": "lab-scratch", "reason": "throwaway images of the lab"}],
    }
    signed_catalog = {"bucket": name, "trust": policy, "key_path": str(tmp_path / "catalog.pem")}
    made = run_playbook(
        play(
            mirror_task("v1", name, path=str(small), version="v1", key_path=str(tmp_path / "trusted.pem")),
            mirror_task("v2 unsigned", name, path=str(changed), version="v2"),
            {
                "name": "catalog check",
                "goldenimage.pipeline.os_mirror_catalog": signed_catalog,
                "check_mode": True,
            },
            {"name": "catalog", "goldenimage.pipeline.os_mirror_catalog": signed_catalog},
            {"name": "catalog again", "goldenimage.pipeline.os_mirror_catalog": signed_catalog},
        ),
        env=_env(endpoint),
    )
    assert made.ok, made.log
    assert made["catalog check"]["changed"] is True and made["catalog check"]["signature"]["changed"] is True
    assert made["catalog"]["signature"] == {
        "key": "catalog.json.sig",
        "key_id": signing.key_id(catalog_key),
        "changed": True,
    }
    assert (
        made["catalog again"]["changed"] is False and made["catalog again"]["signature"]["changed"] is False
    )
    body, sig = _get(client, name, "catalog.json"), _get(client, name, "catalog.json.sig")
    # cosign verifies the catalog's signature: the format every other artifact has.
    (tmp_path / "catalog.json").write_bytes(body)
    (tmp_path / "catalog.json.sig").write_bytes(sig)
    (tmp_path / "catalog.pub").write_text(signing.public_pem(catalog_key))
    cosign(
        "verify-blob",
        "--key",
        "catalog.pub",
        "--signature",
        "catalog.json.sig",
        "--insecure-ignore-tlog=true",
        "catalog.json",
    )
    v1 = _object_key("v1", _sha256(small), small.name)
    v2 = _object_key("v2", _sha256(changed), changed.name)
    pin = {"catalog_public_keys": [signing.public_pem(catalog_key)]}

    def verify(title, key, **extra):
        return {"name": title, VERIFY: dict({"bucket": name, "key": key}, **extra), "ignore_errors": True}

    mark = log.mark()
    first = run_playbook(
        play(
            verify("pinned catalog", v1, **pin),
            verify("pinned policy", v1, trust_policy=policy),
            verify("no pin", v1),
            verify("relaxed family named by the caller", v2, family="lab-scratch", **pin),
            verify("catalog pinned to another key", v1, catalog_public_keys=[signing.public_pem(stranger)]),
        ),
        env=_env(endpoint),
    )
    assert log.since(mark) == []
    assert first["pinned catalog"]["verdict"] == "verified", first.log
    assert first["pinned catalog"]["signer"] == "mirror-2026"
    assert first["pinned policy"]["verdict"] == "verified", first.log
    refusals = {
        "no pin": "no trust policy is pinned",
        "relaxed family named by the caller": "family lab-scratch was given and the key names family %s"
        % FAMILY,
        "catalog pinned to another key": "does not verify over its bytes with any of catalog_public_keys",
    }
    for title, words in refusals.items():
        result = first[title]
        assert first.entry(title)["status"] == "ignored" and result["refused"] is True, (title, result)
        assert "verdict" not in result and words in result["msg"], (title, result["msg"])

    # Whoever can write the bucket relaxes the family in the catalog, keeping the old signature; then takes
    # the signature away.
    document = json.loads(body)
    document["trust"]["relaxed"].append({"family": FAMILY, "reason": "the bucket says so"})
    _put(client, name, "catalog.json", json.dumps(document).encode())
    mark = log.mark()
    tampered = run_playbook(play(verify("rewritten catalog", v2, **pin)), env=_env(endpoint))
    assert log.since(mark) == []
    client.delete_object(Bucket=name, Key="catalog.json.sig")
    mark = log.mark()
    unsigned = run_playbook(play(verify("unsigned catalog", v2, **pin)), env=_env(endpoint))
    assert log.since(mark) == []
    result = tampered["rewritten catalog"]
    assert "verdict" not in result and "does not verify over its bytes" in result["msg"], result
    result = unsigned["unsigned catalog"]
    assert (
        "verdict" not in result and "it is not signed (no s3://%s/catalog.json.sig)" % name in result["msg"]
    )

    # A private key where a public key belongs: refused, at -vvv too, and shown nowhere.
    secret = (tmp_path / "stranger.pem").read_text()
    lines = [line for line in secret.splitlines() if not line.startswith("-----")]
    mark = log.mark()
    leaked = run_playbook(
        play(
            verify("private key as public", v1, catalog_public_keys=[secret]),
            verify("private key in the policy", v1, trust_policy={"rules": [{"public_key": secret}]}),
        ),
        env=_env(endpoint),
        args=["-vvv"],
    )
    assert log.since(mark) == []
    for title in ("private key as public", "private key in the policy"):
        assert leaked.entry(title)["status"] == "ignored", leaked.log
        shown = json.dumps(leaked[title])
        assert "invocation" in leaked[title] and "not a PEM public key" in leaked[title]["msg"], shown
        assert not any(line in shown for line in lines), shown
    assert not any(line in leaked.log for line in lines)
