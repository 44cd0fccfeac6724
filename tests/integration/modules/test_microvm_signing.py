"""microvm_image signs each image it pushes the way cosign does and verifies each image before it names it in
the MicroVMSpec and CAPMVM snippets; cosign v2.6.5 agrees both ways, against ``docker-registry`` on loopback,
by key and offline (no Rekor, no Fulcio). Tampered signatures, an untrusted key and a signature made for
another image's digest are refused, naming the image, the key and the check."""

from __future__ import annotations

import base64
import json
import pathlib

import pytest
import yaml
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.microvm import _oci, microvm
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance
from ansible_collections.goldenimage.pipeline.plugins.modules import microvm_image
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.integration.modules.test_microvm_image import EPOCH, V, files_as_found, made, registry
from tests.integration.support import microvm_parts as parts
from tests.integration.support.runner import run_playbook
from tests.unit.plugins.modules import support

__all__ = ["made", "registry"]

IMAGES = ("kernel", "modules", "rootfs")
OFFLINE = ("--insecure-ignore-tlog=true", "--allow-insecure-registry", "--allow-http-registry")


class Module:
    def __init__(self, params, check=False):
        self.params = support.validated(microvm_image.argument_spec(), params)
        self.check_mode = check
        self._diff = True

    def log(self, line):
        pass


def pinned(result, image):
    """The reference a snippet names ``image`` by: its repository and manifest digest."""
    return "%s@%s" % (result[image]["reference"].rsplit(":", 1)[0], result[image]["digest"])


def run(check=False, **params):
    return microvm_image.Runner(Module(params, check)).run()


def key_pair(folder, name):
    """A P-256 key as PKCS#8 PEM (``<name>.pem``) and its public half (``<name>.pub``): paths and key id."""
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    (folder / (name + ".pem")).write_bytes(pem)
    (folder / (name + ".pub")).write_text(signing.public_pem(key))
    return {"pem": str(folder / (name + ".pem")), "pub": str(folder / (name + ".pub"))}, signing.key_id(key)


def policy(keyid, name, families=None):
    rule = {"key": keyid, "name": name}
    if families:
        rule["families"] = families
    return {"rules": [rule]}


def base(made, registry, repository, **more):
    return dict(
        src=str(made["gpt"]),
        registry=registry.url,
        repository=repository,
        source_date_epoch=EPOCH,
        **more,
    )


def refused(params, check):
    with pytest.raises(Refusal) as caught:
        run(**params)
    failed = caught.value.result
    assert failed["check"] == check, failed["msg"]
    assert "spec" not in failed and "capmvm" not in failed
    return failed


def test_the_collection_signs_cosign_verifies_and_a_rerun_pushes_nothing(made, registry, tmp_path, cosign):
    paths, keyid = key_pair(tmp_path, "release")
    params = base(
        made,
        registry,
        "signed/ubuntu",
        signing_key_path=paths["pem"],
        trust_policy=policy(keyid, "release-2026", ["signed/ubuntu"]),
        builder={"playbook": "publish.yml", "host": "builder-1"},
    )
    predicted = run(check=True, **params)
    assert predicted["changed"] is True
    assert all(predicted["signatures"][n]["signature_pushed"] for n in IMAGES)
    # Check mode judged what the tags would hold: this key, these digests; nothing was pushed.
    assert {predicted["verified"][n]["verdict"] for n in IMAGES} == {"verified"}
    assert registry.manifest("signed/ubuntu/kernel", V) == 404

    first = run(**params)
    assert first["changed"] is True
    for name in IMAGES:
        assert (
            first["signatures"][name]["signature_pushed"] and first["signatures"][name]["attestation_pushed"]
        )
        verdict = first["verified"][name]
        assert (
            verdict["verdict"] == "verified"
            and verdict["key"] == keyid
            and verdict["signer"] == "release-2026"
        )
        assert first[name]["digest"] == predicted[name]["digest"]
    record = first["signatures"]["rootfs"]["provenance"]
    assert record["inputs"] == [{"name": "source-disk", "digest": signing.file_digests(str(made["gpt"]))}]
    assert record["parameters"] == {"kernel_version": V, "image": "rootfs"}
    assert record["builder"]["playbook"] == "publish.yml" and record["builder"]["host"] == "builder-1"
    # The snippets name each image by its digest (a tag moved later never changes what boots).
    assert first["spec"]["kernel"]["image"] == pinned(first, "kernel")

    # The same image and key again: everything kept, no request that writes, no file in the registry's store.
    stored = files_as_found(registry.workdir / "data")
    again = run(**params)
    assert again["changed"] is False
    assert not any(
        again["signatures"][n]["signature_pushed"] or again["signatures"][n]["attestation_pushed"]
        for n in IMAGES
    )
    assert files_as_found(registry.workdir / "data") == stored

    # cosign reads what the collection stored: the signature and the SLSA v1 provenance, by key, offline.
    for name in IMAGES:
        ref = "%s/signed/ubuntu/%s@%s" % (registry.host, name, first[name]["digest"])
        out = cosign("verify", "--key", paths["pub"], *OFFLINE, ref)
        claims = json.loads(out.stdout)
        assert claims[0]["critical"]["image"]["docker-manifest-digest"] == first[name]["digest"]
        out = cosign("verify-attestation", "--key", paths["pub"], "--type", "slsaprovenance1", *OFFLINE, ref)
        statement = json.loads(base64.b64decode(json.loads(out.stdout.splitlines()[0])["payload"]))
        assert statement["subject"][0]["digest"]["sha256"] == first[name]["digest"].split(":")[1]
        params_seen = statement["predicate"]["buildDefinition"]["externalParameters"]
        assert params_seen["kernel_version"] == V and params_seen["image"] == name


def cosign_signs(cosign, tmp_path, ref, statement_name, digest):
    """``cosign sign`` and ``cosign attest`` (SLSA v1) of ``ref`` with cosign.key, no transparency log."""
    predicate = tmp_path / "predicate.json"
    doc = provenance.statement({"name": statement_name, "digest": digest}, [], {}, "2026-12-01T00:00:00Z")
    predicate.write_text(json.dumps(doc["predicate"]))
    cosign("sign", "--key", "cosign.key", "--tlog-upload=false", *OFFLINE[1:], ref)
    cosign(
        "attest",
        "--key",
        "cosign.key",
        "--tlog-upload=false",
        "--type",
        "slsaprovenance1",
        "--predicate",
        str(predicate),
        *OFFLINE[1:],
        ref,
    )


class Tags:
    """The registry's signature tags, read and rewritten over the distribution API (as an attacker with push
    rights would)."""

    def __init__(self, registry):
        self.api = _oci.Registry("http", registry.host)

    def manifest(self, repo, digest, suffix="sig"):
        return self.api.manifest(repo, microvm.cosign_tag(digest, suffix), microvm.MEDIA_MANIFEST)

    def put(self, repo, digest, raw, suffix="sig"):
        self.api.push_manifest(repo, microvm.cosign_tag(digest, suffix), raw, microvm.MEDIA_MANIFEST)

    def copy_blobs(self, source, target, raw):
        doc = json.loads(raw)
        for desc in [doc["config"]] + doc["layers"]:
            data = self.api.blob(source, desc["digest"])
            self.api.push_blob(target, desc["digest"], len(data), data=data)


def test_cosign_signs_the_collection_verifies_and_tampering_is_refused(made, registry, tmp_path, cosign):
    repo = "cosigned/ubuntu"
    pushed = run(**base(made, registry, repo))
    cosign("generate-key-pair")
    cosign_id = next(iter(signing.keyring([("cosign.pub", (tmp_path / "cosign.pub").read_bytes())])))
    for name in IMAGES:
        image = "%s/%s/%s" % (registry.host, repo, name)
        cosign_signs(
            cosign, tmp_path, "%s@%s" % (image, pushed[name]["digest"]), image, pushed[name]["digest"]
        )

    # The policy as a catalog's trust section gives it: the key as PEM, no separate keyring.
    cosign_pem = (tmp_path / "cosign.pub").read_text()
    trusted = base(
        made,
        registry,
        repo,
        trust_policy={"rules": [{"public_key": cosign_pem, "name": "cosign-release"}]},
    )
    verified = run(**trusted)
    assert verified["changed"] is False
    assert {verified["verified"][n]["verdict"] for n in IMAGES} == {"verified"}
    assert verified["verified"]["modules"]["signer"] == "cosign-release"
    assert verified["capmvm"]["rootVolume"]["image"] == pinned(verified, "rootfs")

    tags = Tags(registry)
    kernel, modules = pushed["kernel"]["digest"], pushed["modules"]["digest"]
    original = tags.manifest(repo + "/kernel", kernel)

    # One byte of the kernel's signature flipped: it verifies with no key of the keyring.
    doc = json.loads(original)
    sig = bytearray(base64.b64decode(doc["layers"][0]["annotations"][microvm.SIGNATURE_ANNOTATION]))
    sig[-1] ^= 0x01
    doc["layers"][0]["annotations"][microvm.SIGNATURE_ANNOTATION] = base64.b64encode(bytes(sig)).decode()
    tags.put(repo + "/kernel", kernel, microvm.canonical(doc))
    failed = refused(trusted, "signature")
    assert failed["verdict"] == "signature_mismatch" and failed["image"] == "kernel"
    assert "%s/%s/kernel" % (registry.host, repo) in failed["msg"] and kernel in failed["reference"]
    tags.put(repo + "/kernel", kernel, original)
    assert run(**trusted)["verified"]["kernel"]["verdict"] == "verified"

    # The kernel's (valid) signature put under the modules image's tag: signed for another digest.
    modules_original = tags.manifest(repo + "/modules", modules)
    tags.copy_blobs(repo + "/kernel", repo + "/modules", original)
    tags.put(repo + "/modules", modules, original)
    failed = refused(trusted, "signature")
    assert failed["verdict"] == "signature_mismatch" and failed["image"] == "modules"
    assert failed["key"] == cosign_id and kernel in failed["msg"] and modules in failed["msg"]
    tags.put(repo + "/modules", modules, modules_original)

    # A valid signature by a key the keyring holds and the policy does not let sign this family.
    paths, other_id = key_pair(tmp_path, "intern")
    untrusted = {
        **trusted,
        "repository": "other/ubuntu",
        "signing_key_path": paths["pem"],
        "public_keys": [str(tmp_path / "cosign.pub")],
        "trust_policy": {
            "rules": [
                {"key": cosign_id, "name": "cosign-release"},
                {"key": other_id, "name": "intern", "families": ["lab-scratch"]},
            ]
        },
    }
    # Signing with it is refused before anything is pushed: the image would fail its own check.
    with pytest.raises(
        PipelineError, match=r"signing key %s: the trust policy does not let it sign family" % other_id
    ):
        run(**untrusted)
    assert registry.manifest("other/ubuntu/kernel", parts.VERSION) == 404
    # Its valid signature found in the registry (pushed under a policy that trusted it) is judged untrusted.
    run(**{**untrusted, "trust_policy": {"rules": [{"key": other_id, "name": "intern"}]}})
    verify_only = {
        **untrusted,
        "signing_key_path": None,
        "public_keys": [str(tmp_path / "cosign.pub"), paths["pub"]],
    }
    failed = refused(verify_only, "signature")
    assert failed["verdict"] == "untrusted_key" and failed["key"] == other_id
    assert failed["image"] == "kernel" and "family other/ubuntu" in failed["msg"]

    # Unsigned: refused unless the policy relaxes the family, with the reason recorded.
    unsigned = base(made, registry, "unsigned/ubuntu", trust_policy=policy(cosign_id, "cosign-release"))
    failed = refused(unsigned, "signature")
    assert failed["verdict"] == "unsigned" and failed["image"] == "kernel"
    relaxed = {
        **unsigned,
        "trust_policy": {
            "rules": [],
            "relaxed": [{"family": "unsigned/ubuntu", "reason": "lab scratch images"}],
        },
    }
    allowed = run(**relaxed)
    assert allowed["verified"]["rootfs"]["verdict"] == "unsigned_allowed"
    assert allowed["verified"]["rootfs"]["relaxed"] == "lab scratch images"
    nightly = {"rules": [], "relaxed": [{"stream": "nightly", "reason": "nightly builds, never served"}]}
    by_stream = {**unsigned, "stream": "nightly", "trust_policy": nightly}
    assert run(**by_stream)["verified"]["kernel"]["relaxed"] == "nightly builds, never served"


def test_signing_or_verifying_without_a_registry_is_refused_before_the_disk_is_read(made, tmp_path):
    paths, keyid = key_pair(tmp_path, "k")
    with pytest.raises(Refusal, match="signing_key: signatures and provenance are kept in the registry"):
        run(src=str(made["gpt"]), dest=str(tmp_path / "layout"), signing_key_path=paths["pem"])
    with pytest.raises(Refusal, match=r"trust_policy: .* no registry is given"):
        run(src=str(made["gpt"]), dest=str(tmp_path / "layout"), trust_policy=policy(keyid, "k"))
    assert not (tmp_path / "layout").exists()


def test_the_publish_playbook_signs_with_a_key_in_a_secret_and_verifies(
    made, registry, tmp_path, cosign, lab, kube_client, kube_namespace
):
    from kubernetes import client

    paths, keyid = key_pair(tmp_path, "release")
    text = pathlib.Path(paths["pem"]).read_bytes()
    client.CoreV1Api(kube_client).create_namespaced_secret(
        kube_namespace,
        {"metadata": {"name": "microvm-signing"}, "data": {"cosign.pem": base64.b64encode(text).decode()}},
    )
    playbook = pathlib.Path(__file__).resolve().parents[3] / "playbooks" / "publish_microvm_images.yml"
    extra = {
        "microvm_images_src": str(made["qcow2"]),
        "microvm_images_registry": registry.url,
        "microvm_images_repository": "publish/ubuntu",
        "microvm_images_compare_unslimmed": False,
        "microvm_images_signing_key_secret": {"namespace": kube_namespace, "name": "microvm-signing"},
        "microvm_images_trust_policy": policy(keyid, "release-2026", ["publish/ubuntu"]),
        "microvm_fragments_dir": str(tmp_path),
    }
    first = run_playbook(playbook, extra_vars=extra, env=lab.env())
    assert first.ok, first.log
    # The key's body never reaches the output.
    assert text.decode().splitlines()[1] not in first.stdout + first.stderr
    result = first["Build the kernel, modules and root filesystem images and publish them"]
    assert {result["verified"][n]["verdict"] for n in IMAGES} == {"verified"}
    assert (
        result["signatures"]["kernel"]["provenance"]["builder"]["playbook"]
        == "Publish flintlock micro-VM images"
    )
    spec = yaml.safe_load((tmp_path / "spec.yml").read_text())
    assert spec["kernel"]["image"] == pinned(result, "kernel")
    ref = "%s/publish/ubuntu/rootfs@%s" % (registry.host, result["rootfs"]["digest"])
    cosign("verify", "--key", paths["pub"], *OFFLINE, ref)

    again = run_playbook(playbook, extra_vars=extra, env=lab.env())
    assert again.ok, again.log
    assert again["Build the kernel, modules and root filesystem images and publish them"]["changed"] is False

    # A Secret without the key is refused naming it and the role variable, before anything is pushed.
    missing = dict(extra, microvm_images_signing_key_secret={"namespace": kube_namespace, "name": "absent"})
    refused_run = run_playbook(playbook, extra_vars=missing, env=lab.env())
    assert not refused_run.ok
    msg = refused_run["Refuse a signing key Secret that is missing or lacks the key"]["msg"]
    assert "microvm_images: Secret %s/absent (microvm_images_signing_key_secret)" % kube_namespace in msg, msg
