"""baked_image verifies the artifact against the catalog's trust policy before anything is written, on the lab
with real files and keys: a signed revision registers and its entry records who signed it; the tamper table
(one byte flipped, another artifact's signature, an untrusted key, a provenance whose subject digest differs,
an older revision's signed bytes replayed under a newer name, no signature at all) is refused naming the
artifact, the key and the check, with zero writes; a stream that relaxes require_signature registers an
unsigned artifact with the reason recorded."""

from __future__ import annotations

import pathlib
import shutil

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import catalog
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
from ansible_collections.goldenimage.pipeline.plugins.modules import artifact_sign
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.integration.modules.test_baked_image import catalog_of, play, refused, task
from tests.integration.modules.test_baked_image_guards import registration, writes
from tests.integration.support.runner import run_playbook
from tests.unit.plugins.modules import support

RELAXED = "lab stream: its images never reach tenants"


def pem(key):
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def sign(path, key, name=None):
    """Sign ``path`` as packer_build does (its .sig and .intoto.jsonl beside it), under ``name``."""
    params = {"path": str(path), "key": pem(key), "builder": {"playbook": "publish.yml"}, "force": True}
    if name:
        params["name"] = name
    return artifact_sign.run(support.validated(artifact_sign.argument_spec(), params))


def artifact_of(folder, source, revision):
    """A copy of ``source`` named as ``revision``'s artifact, in a folder of its own."""
    folder.mkdir()
    path = folder / catalog.signed_subject(revision, "22.04")
    shutil.copyfile(source, path)
    return path


def with_files_of(path, other):
    """``other``'s .sig and .intoto.jsonl put beside ``path``."""
    for suffix in (".sig", ".intoto.jsonl"):
        shutil.copyfile(str(other) + suffix, str(path) + suffix)


def store_catalog(kube_client, namespace, name, trust):
    from kubernetes import client

    doc, _changed = catalog.set_trust(catalog.empty(), trust)
    body = {"metadata": {"name": name}, "data": {catalog.DATA_KEY: catalog.dump(doc)}}
    client.CoreV1Api(kube_client).create_namespaced_config_map(namespace, body)


@pytest.mark.lab_only
@pytest.mark.suite("bad-input")
def test_a_signed_revision_registers_and_the_tamper_table_is_refused_with_zero_writes(
    lab, kube_client, kube_namespace, baked_mirror, tmp_path
):
    trusted, untrusted = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    trusted_id, untrusted_id = signing.key_id(trusted), signing.key_id(untrusted)
    store_catalog(
        kube_client,
        kube_namespace,
        "catalog",
        {"keys": [{"name": "release", "public_key": signing.public_pem(trusted), "streams": ["22.04"]}]},
    )
    source = baked_mirror["path"]

    good = artifact_of(tmp_path / "good", source, "v20261101")
    sign(good, trusted)
    body = registration(kube_namespace, baked_mirror, "v20261101", artifact=str(good))
    run = run_playbook(play(task("signed", **body), task("again", **body)), env=lab.env())
    assert run.ok, run.log
    signed = run["signed"]["signature"]
    assert signed["verdict"] == "verified" and signed["key"] == trusted_id and signed["signer"] == "release"
    assert run["again"]["changed"] is False
    entry = catalog_of(kube_client, kube_namespace)["images"]["v20261101"]
    recorded = entry["signature"]
    assert {k: recorded[k] for k in ("verdict", "key", "signer", "artifact", "sha256", "sha512")} == {
        "verdict": "verified",
        "key": trusted_id,
        "signer": "release",
        "artifact": catalog.signed_subject("v20261101", "22.04"),
        "sha256": signing.file_digests(str(good))["sha256"],
        "sha512": entry["checksum"],  # bound to the bytes Harvester downloads, as a repave checks
    }
    assert recorded["builder"]["playbook"] == "publish.yml" and recorded["family"] == catalog.family("22.04")
    # The record carries what it was verified from, so where the revision is used (a repave, the drift
    # report) the verdict is proved again rather than taken on its word: it holds as recorded.
    assert recorded["evidence"] == {
        "signature": pathlib.Path(str(good) + ".sig").read_text(),
        "provenance": pathlib.Path(str(good) + ".intoto.jsonl").read_text(),
    }
    held = catalog_of(kube_client, kube_namespace)
    assert catalog.signature_problem(held, "v20261101", signing.record_proof) is None

    # The tamper table, one revision each.
    flipped = artifact_of(tmp_path / "flipped", source, "v20261102")
    sign(flipped, trusted)
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 1
    flipped.write_bytes(bytes(data))

    other_bytes = artifact_of(tmp_path / "other-bytes", source, "v20261103")
    another = tmp_path / "another.qcow2"
    another.write_bytes(pathlib.Path(source).read_bytes() + b"\0" * 512)
    sign(another, trusted)
    with_files_of(other_bytes, another)

    by_untrusted = artifact_of(tmp_path / "untrusted", source, "v20261104")
    sign(by_untrusted, untrusted)

    subject = artifact_of(tmp_path / "subject", source, "v20261105")
    sign(subject, trusted)  # a good signature of these bytes...
    sign(another, trusted, name=subject.name)  # ...and a statement for this name over other bytes
    shutil.copyfile(str(another) + ".intoto.jsonl", str(subject) + ".intoto.jsonl")

    # The revision registered above, its bytes and files served again under a newer revision's name.
    replayed = artifact_of(tmp_path / "replayed", good, "v20261106")
    with_files_of(replayed, good)

    unsigned = artifact_of(tmp_path / "unsigned", source, "v20261107")

    table = [
        ("flipped", "v20261102", flipped, "signature", "signature_mismatch", None),
        ("other bytes", "v20261103", other_bytes, "signature", "signature_mismatch", None),
        ("untrusted", "v20261104", by_untrusted, "signature", "untrusted_key", untrusted_id),
        ("subject", "v20261105", subject, "provenance subject", "subject_digest_differs", trusted_id),
        ("replayed", "v20261106", replayed, "provenance subject", "replayed_revision", trusted_id),
        ("unsigned", "v20261107", unsigned, "signature", "unsigned", None),
    ]
    lab.clear_audit()
    run = run_playbook(
        play(
            *[
                task(
                    title,
                    ignore_errors=True,
                    **registration(kube_namespace, baked_mirror, rev, artifact=str(p)),
                )
                for title, rev, p, _check, _verdict, _key in table
            ]
        ),
        env=lab.env(),
    )
    assert writes(lab, kube_namespace) == [], writes(lab, kube_namespace)
    for title, rev, path, check, verdict, key in table:
        result = refused(run, title)
        msg = result["msg"]
        assert result["refused"] is True and result["signature"]["verdict"] == verdict, (title, msg)
        assert result["signature"]["check"] == check and result["signature"]["key"] == key, (title, result)
        assert msg.startswith("revision %s (artifact file %s): refusing to register it: " % (rev, path)), msg
        assert "artifact %s (sha256:" % path.name in msg and "%s check failed" % check in msg, msg
        assert (key or trusted_id) in msg, (title, msg)  # the key that signed, else the one that may
        assert msg.endswith("; nothing was written"), msg
    assert "another revision's bytes and signatures replayed" in refused(run, "replayed")["msg"]
    assert "signed is for ubuntu-2204-postgres-v20261101.qcow2" in refused(run, "replayed")["msg"]
    images = catalog_of(kube_client, kube_namespace)["images"]
    assert sorted(images) == ["v20261101"]


@pytest.mark.lab_only
def test_a_stream_that_relaxes_require_signature_registers_unsigned_with_the_reason(
    lab, kube_client, kube_namespace, baked_mirror, tmp_path
):
    key = ec.generate_private_key(ec.SECP256R1())
    store_catalog(
        kube_client,
        kube_namespace,
        "catalog",
        {
            "keys": [{"name": "release", "public_key": signing.public_pem(key)}],
            "streams": {"22.04": {"require_signature": False, "reason": RELAXED}},
        },
    )
    unsigned = artifact_of(tmp_path / "unsigned", baked_mirror["path"], "v20261110")
    body = registration(kube_namespace, baked_mirror, "v20261110", artifact=str(unsigned))
    run = run_playbook(play(task("unsigned", **body), task("again", **body)), env=lab.env())
    assert run.ok, run.log
    result = run["unsigned"]["signature"]
    assert result["verdict"] == "unsigned_allowed" and result["relaxed"] == RELAXED and result["key"] is None
    assert "allowed for stream 22.04: " + RELAXED in result["message"]
    assert run["again"]["changed"] is False
    entry = catalog_of(kube_client, kube_namespace)["images"]["v20261110"]
    assert entry["signature"]["verdict"] == "unsigned_allowed" and entry["signature"]["relaxed"] == RELAXED
