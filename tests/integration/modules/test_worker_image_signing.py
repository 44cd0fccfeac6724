"""worker_image with a trust policy verifies the image a worker golden would import before creating its
DataVolume, on the lab with a real S3 bucket serving the image, its .sig and its .intoto.jsonl: a signed image
imports and its verdict is returned; the tamper table (one byte flipped, another image's signature, an
untrusted key, a provenance whose subject digest differs, another version's signature replayed, nothing
signed, nothing pinned) is refused naming the entry, the key and the check, with zero writes."""

from __future__ import annotations

import json
import pathlib

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
from ansible_collections.goldenimage.pipeline.plugins.modules import artifact_sign
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.integration.modules.test_worker_image import SCHEMATIC, World, task, writes
from tests.integration.support.runner import kube_play, run_playbook
from tests.unit.plugins.modules import support

KEY = "talos/image/%s/%s/openstack-amd64.raw.xz"


@pytest.fixture(scope="module")
def factory(lab, kube_client, tmp_path_factory):
    """worker_image's world of its own: a golden namespace, classes, RBAC and a factory bucket."""
    instance = World(lab, kube_client, tmp_path_factory.mktemp("signed-worker"))
    try:
        yield instance
    finally:
        instance.close()


def signed_name(version):
    return "image/%s/%s/openstack-amd64.raw.xz" % (SCHEMATIC, version)


def sign(folder: pathlib.Path, data: bytes, key, name: str) -> dict:
    """``{".sig": text, ".intoto.jsonl": text}`` of ``data`` signed by ``key`` under ``name``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "image.raw.xz"
    path.write_bytes(data)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    params = {
        "path": str(path),
        "key": pem,
        "name": name,
        "builder": {"playbook": "mirror.yml"},
        "force": True,
    }
    artifact_sign.run(support.validated(artifact_sign.argument_spec(), params))
    return {suffix: (folder / ("image.raw.xz" + suffix)).read_text() for suffix in (".sig", ".intoto.jsonl")}


def serve(factory, version, data, files, recorded=True):
    """The image at the Factory's path (the mirror's sha256 metadata when ``recorded``), its files beside."""
    import hashlib

    factory.publish(
        SCHEMATIC, version, body=data, recorded=hashlib.sha256(data).hexdigest() if recorded else None
    )
    for suffix, text in files.items():
        factory.s3.put_object(
            Bucket=factory.bucket,
            Key=KEY % (SCHEMATIC, version) + suffix,
            Body=text.encode(),
        )


@pytest.mark.suite("bad-input")
def test_a_signed_worker_image_imports_and_the_tamper_table_is_refused_with_zero_writes(
    lab, factory, tmp_path
):
    trusted, untrusted = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    trusted_id, untrusted_id = signing.key_id(trusted), signing.key_id(untrusted)
    policy = {
        "rules": [
            {"name": "release", "public_key": signing.public_pem(trusted), "families": ["talos-" + SCHEMATIC]}
        ]
    }
    good, other = factory.xz, factory.xz + b"\0" * 512  # another image: other bytes, same format
    flipped = bytearray(good)
    flipped[len(flipped) // 2] ^= 1
    table = {  # version -> (bytes served, files served, pinned by the mirror, verdict, key named)
        "v1.20.0": (
            good,
            sign(tmp_path / "a", good, trusted, signed_name("v1.20.0")),
            True,
            "verified",
            None,
        ),
        "v1.20.1": (
            bytes(flipped),
            sign(tmp_path / "b", good, trusted, signed_name("v1.20.1")),
            True,
            "signature_mismatch",
            None,
        ),
        "v1.20.2": (
            good,
            sign(tmp_path / "c", other, trusted, signed_name("v1.20.2")),
            True,
            "signature_mismatch",
            None,
        ),
        "v1.20.3": (
            good,
            sign(tmp_path / "d", good, untrusted, signed_name("v1.20.3")),
            True,
            "untrusted_key",
            untrusted_id,
        ),
        "v1.20.4": (
            good,
            dict(
                sign(tmp_path / "e", other, trusted, signed_name("v1.20.4")),
                **{".sig": sign(tmp_path / "e2", good, trusted, signed_name("v1.20.4"))[".sig"]},
            ),
            True,
            "subject_digest_differs",
            trusted_id,
        ),
        "v1.20.5": (
            good,
            sign(tmp_path / "f", good, trusted, signed_name("v1.20.0")),
            True,
            "replayed_revision",
            trusted_id,
        ),
        "v1.20.6": (good, {}, True, "unsigned", None),
        "v1.20.7": (good, sign(tmp_path / "g", good, trusted, signed_name("v1.20.7")), False, None, None),
    }
    for version, (data, files, recorded, _verdict, _key) in table.items():
        serve(factory, version, data, files, recorded)
    args = {"namespace": factory.ns, "trust_policy": policy, "wait": False}
    refusals = [v for v, row in table.items() if row[3] != "verified"]
    lab.clear_audit()
    run = run_playbook(
        kube_play(*[task(v, ignore_errors=True, images=[factory.entry(v)], **args) for v in refusals]),
        env=lab.env(),
    )
    assert writes(lab) == [], writes(lab)
    for version in refusals:
        result, (_data, _files, _recorded, verdict, key) = run[version], table[version]
        msg = result["msg"]
        assert result["refused"] is True, (version, result)
        assert msg.startswith("images[0] (schematicID '%s', version '%s')" % (SCHEMATIC, version)), msg
        assert msg.endswith("nothing was written"), msg
        assert factory.golden("talos-worker-%s-%s" % (SCHEMATIC, version)) is None
        if verdict is None:
            assert "no sha256 is pinned" in msg, msg
            continue
        assert result.get("verdict") == verdict, (version, result)
        assert signed_name(version) in msg, msg
        if key:
            assert result["key_id"] == key and key in msg, (version, result)
    assert "check failed" in run["v1.20.1"]["msg"]

    good_run = run_playbook(
        kube_play(
            task("signed", images=[factory.entry("v1.20.0")], **args),
            task("again", images=[factory.entry("v1.20.0")], **args),
        ),
        env=lab.env(),
    )
    assert good_run.ok, good_run.log
    name = "talos-worker-%s-v1.20.0" % SCHEMATIC
    found = good_run["signed"]["signatures"][name]
    assert (found["verdict"], found["key_id"], found["signer"]) == ("verified", trusted_id, "release")
    assert found["artifact"] == signed_name("v1.20.0")
    assert good_run["signed"]["changed"] is True and good_run["again"]["changed"] is False
    assert factory.golden(name)["spec"]["source"]["http"]["checksum"] == "sha256:" + factory.sha256

    # The verdict is recorded on the golden it let import, and read again where the golden exists.
    record = json.loads(factory.golden(name)["metadata"]["annotations"]["goldenimage.pipeline/provenance"])
    assert (record["verdict"], record["key"], record["sha256"]) == ("verified", trusted_id, factory.sha256)
    assert record["artifact"] == signed_name("v1.20.0") and record["family"] == "talos-" + SCHEMATIC
    assert good_run["again"]["signatures"][name]["recorded"] is True


def test_an_existing_golden_is_judged_by_its_recorded_verdict_under_todays_policy(lab, factory, tmp_path):
    """Withdrawing the key, a golden made before the policy, and a verdict copied from another golden are
    each refused naming the golden and the key, with zero writes; nothing is fetched again."""
    key = ec.generate_private_key(ec.SECP256R1())
    rule = {"name": "release", "public_key": signing.public_pem(key), "families": ["talos-" + SCHEMATIC]}
    other = ec.generate_private_key(ec.SECP256R1())
    withdrawn = {"rules": [dict(rule, public_key=signing.public_pem(other))]}
    for version in ("v1.21.0", "v1.21.1"):
        serve(factory, version, factory.xz, sign(tmp_path / version, factory.xz, key, signed_name(version)))
    signed_args = {"namespace": factory.ns, "trust_policy": {"rules": [rule]}, "wait": False}
    made = run_playbook(
        kube_play(
            task("signed", images=[factory.entry("v1.21.0")], **signed_args),
            task("unpolicied", images=[factory.entry("v1.21.1")], namespace=factory.ns, wait=False),
        ),
        env=lab.env(),
    )
    assert made.ok, made.log
    first, second = ("talos-worker-%s-%s" % (SCHEMATIC, v) for v in ("v1.21.0", "v1.21.1"))
    copied = factory.golden(first)["metadata"]["annotations"]["goldenimage.pipeline/provenance"]
    lab.clear_audit()
    run = run_playbook(
        kube_play(
            task(
                "withdrawn",
                images=[factory.entry("v1.21.0")],
                ignore_errors=True,
                namespace=factory.ns,
                trust_policy=withdrawn,
                wait=False,
            ),
            task("before the policy", images=[factory.entry("v1.21.1")], ignore_errors=True, **signed_args),
        ),
        env=lab.env(),
    )
    assert writes(lab) == [], writes(lab)
    msg = run["withdrawn"]["msg"]
    assert run["withdrawn"]["refused"] is True and run["withdrawn"]["key_id"] == signing.key_id(key), msg
    assert first in msg and "no longer lets sign family talos-%s" % SCHEMATIC in msg, msg
    msg = run["before the policy"]["msg"]
    assert second in msg and "has no verified signature recorded" in msg, msg

    # A verdict copied from another golden names that golden's artifact, not this one's.
    factory.custom.patch_namespaced_custom_object(
        "cdi.kubevirt.io",
        "v1beta1",
        factory.ns,
        "datavolumes",
        second,
        {"metadata": {"annotations": {"goldenimage.pipeline/provenance": copied}}},
    )
    lab.clear_audit()
    replayed = run_playbook(
        kube_play(task("replayed", images=[factory.entry("v1.21.1")], ignore_errors=True, **signed_args)),
        env=lab.env(),
    )
    assert writes(lab) == [], writes(lab)
    msg = replayed["replayed"]["msg"]
    assert "another revision's verdict replayed" in msg and signed_name("v1.21.0") in msg, msg
