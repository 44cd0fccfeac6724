# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

"""Signing and verifying micro-VM images in a registry as cosign stores and reads them (an adapter: the
registry I/O; what is kept, trusted or refused is decided in ``provenance`` and ``microvm``).

A signature is the tag ``sha256-<hex>.sig`` holding simple-signing payloads with their signatures as
annotations; the provenance is the tag ``sha256-<hex>.att`` holding DSSE envelopes of in-toto statements.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import json
import time

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.microvm import microvm
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance


class ImageSigning:
    """The signatures and provenance of the images pushed to ``registry`` (``_oci.Registry``).

    ``signer`` is ``(private key, key id)`` or None, ``ring`` the keys verification trusts, ``source`` the
    disk the images are made from (its digest is the provenance's input), ``builder`` and ``stream`` as
    the module was given them; ``check``: check mode, where verification judges what the tags would hold.
    """

    def __init__(self, registry, adapters, log, signer, ring, source, builder, stream, check):
        self.registry = registry
        self.oci, self.signing = adapters["oci"], adapters["signing"]
        self.log = log
        self.signer, self.ring = signer, ring
        self.source, self.builder, self.stream = source, builder, stream
        self.check = check

    def sign_all(self, settings, repository, names, built, version, writes):
        """Each pushed image's signature and provenance, kept when this key already signed this digest (and
        this build), else pushed; ``(report per image, {name: layers the tags would hold})``."""
        key, keyid = self.signer
        mine = {keyid: key.public_key()}
        started = time.monotonic()
        source = self.signing.file_digests(self.source)
        self.log("source disk sha256:%s (%.1f s)" % (source["sha256"], time.monotonic() - started))
        builder = dict(self.builder or {})
        builder["collection_version"] = builder.get("collection_version") or provenance.COLLECTION_VERSION
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        report, planned = {}, {}
        for name in built:
            repo = "%s/%s" % (repository, names[name])
            image = "%s/%s" % (settings["host"], repo)
            digest = built[name]["digest"]
            wanted = provenance.statement(
                {"name": image, "digest": digest},
                [{"name": provenance.SOURCE_DISK, "digest": source}],
                builder,
                now,
                {"kernel_version": version, "image": name},
            )
            sig = self._sign_signature(repo, image, digest, key, mine, writes)
            att = self._sign_attestation(repo, digest, wanted, key, mine, writes)
            planned[name] = {"sig": sig.pop("planned"), "att": att.pop("planned")}
            report[name] = {
                "key_id": keyid,
                "signature_tag": microvm.cosign_tag(digest, microvm.SIGNATURE_SUFFIX),
                "attestation_tag": microvm.cosign_tag(digest, microvm.ATTESTATION_SUFFIX),
                "signature_pushed": sig["pushed"],
                "attestation_pushed": att["pushed"],
                "provenance": provenance.summary(att["statement"]),
                "before": {"signed_by_key": sig["kept"], "provenance_kept": att["kept"]},
                "after": {"signed_by_key": True, "provenance_kept": True},
            }
        self.log("signing took %.2f s (the source disk's digest included)" % (time.monotonic() - started))
        return report, planned

    def _read(self, repo, digest, suffix, media_type):
        """``(manifest or None, [(layer, blob bytes)])`` of an image's signature or attestation tag."""
        raw = self.registry.manifest(repo, microvm.cosign_tag(digest, suffix), microvm.MEDIA_MANIFEST)
        if raw is None:
            return None, []
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            return None, []
        return doc, [
            (layer, self.registry.blob(repo, layer["digest"]))
            for layer in microvm.cosign_layers(doc, media_type)
        ]

    def _push(self, repo, digest, suffix, old, layers, blobs):
        """Push ``blobs`` and the manifest of ``layers`` (the old manifest's other layers kept) to the tag."""
        kept = [layer for layer in (old or {}).get("layers") or [] if layer not in layers]
        layers = kept + [layer for layer in layers if layer not in kept]
        config = microvm.canonical(microvm.cosign_config(layers))
        oci = self.oci
        config_desc = microvm.descriptor(microvm.MEDIA_CONFIG, oci.digest_of(config), len(config))
        for data in blobs:
            self.registry.push_blob(repo, oci.digest_of(data), len(data), data=data)
        self.registry.push_blob(repo, config_desc["digest"], len(config), data=config)
        manifest = microvm.canonical(microvm.cosign_manifest(config_desc, layers))
        tag = microvm.cosign_tag(digest, suffix)
        self.registry.push_manifest(repo, tag, manifest, microvm.MEDIA_MANIFEST)
        self.log("%s/%s:%s pushed" % (self.registry.host, repo, tag))

    def _sign_signature(self, repo, image, digest, key, mine, writes):
        signing = self.signing
        old, found = self._read(repo, digest, microvm.SIGNATURE_SUFFIX, microvm.MEDIA_SIMPLE_SIGNING)
        evidence = [
            {
                "key": signing.payload_key(mine, microvm.layer_signature(layer), payload),
                "digest": provenance.signed_digest(payload),
            }
            for layer, payload in found
        ]
        kept = (provenance.image_signature(evidence, digest) or {}).get("key") is not None
        planned = [(microvm.layer_signature(layer), payload) for layer, payload in found]
        if not kept:
            payload = provenance.simple_signing(image, digest)
            sig = signing.sign_payload(key, payload)
            planned.append((sig, payload))
            if writes:
                layer = microvm.cosign_layer(
                    microvm.MEDIA_SIMPLE_SIGNING,
                    self.oci.digest_of(payload),
                    len(payload),
                    signature=sig,
                )
                self._push(repo, digest, microvm.SIGNATURE_SUFFIX, old, [layer], [payload])
        return {"pushed": not kept, "kept": kept, "planned": planned}

    def _sign_attestation(self, repo, digest, wanted, key, mine, writes):
        signing = self.signing
        old, found = self._read(repo, digest, microvm.ATTESTATION_SUFFIX, microvm.MEDIA_DSSE)
        envelopes = [
            signing.evidence(mine, None, blob.decode("utf-8", "replace"), None)[1] for _l, blob in found
        ]
        same = [
            e
            for e in envelopes
            if e.get("key") and e.get("statement") and provenance.same_build(e["statement"], wanted)
        ]
        planned = [blob for _layer, blob in found]
        if same:
            return {"pushed": False, "kept": True, "statement": same[0]["statement"], "planned": planned}
        body = microvm.canonical(signing.sign_envelope(key, provenance.serialize(wanted)))
        planned.append(body)
        if writes:
            # This key's older statements for the image are replaced (cosign attest --replace); others stay.
            stale = [found[i][0] for i, e in enumerate(envelopes) if e.get("key")]
            old = dict(
                old or {}, layers=[layer for layer in (old or {}).get("layers") or [] if layer not in stale]
            )
            layer = microvm.cosign_layer(
                microvm.MEDIA_DSSE,
                self.oci.digest_of(body),
                len(body),
                predicate_type=provenance.PREDICATE_TYPE,
            )
            self._push(repo, digest, microvm.ATTESTATION_SUFFIX, old, [layer], [body])
        return {"pushed": True, "kept": False, "statement": wanted, "planned": planned}

    def verify_all(self, settings, repository, names, built, planned):
        """Each image's signature and provenance read back from the registry (in check mode, what the tags
        would hold) and judged with the trust policy; the first that fails is refused, naming the image, the
        key and the check, before the snippets that name the images are returned."""
        signing = self.signing
        started = time.monotonic()
        report = {}
        for name in built:
            repo = "%s/%s" % (repository, names[name])
            image = "%s/%s" % (settings["host"], repo)
            digest = built[name]["digest"]
            if not self.check or name not in planned:
                sigs = [
                    (microvm.layer_signature(layer), payload)
                    for layer, payload in self._read(
                        repo, digest, microvm.SIGNATURE_SUFFIX, microvm.MEDIA_SIMPLE_SIGNING
                    )[1]
                ]
                envelopes = [
                    blob
                    for _layer, blob in self._read(
                        repo, digest, microvm.ATTESTATION_SUFFIX, microvm.MEDIA_DSSE
                    )[1]
                ]
            else:
                sigs, envelopes = planned[name]["sig"], planned[name]["att"]
            signatures = [
                {
                    "key": signing.payload_key(self.ring, sig, payload),
                    "digest": provenance.signed_digest(payload),
                }
                for sig, payload in sigs
            ]
            found = [
                signing.evidence(self.ring, None, blob.decode("utf-8", "replace"), None)[1]
                for blob in envelopes
            ]
            verdict = provenance.judge_image(
                image,
                digest,
                settings["family"],
                self.stream,
                settings["policy"],
                signatures,
                found,
            )
            if not verdict.pop("ok"):
                raise Refusal(
                    None,
                    verdict.pop("message"),
                    "no MicroVMSpec or CAPMVM snippet names it",
                    image=name,
                    reference="%s@%s" % (image, digest),
                    **verdict,
                )
            verdict["reference"] = "%s@%s" % (image, digest)
            report[name] = verdict
            self.log("%s: %s" % (name, verdict["message"]))
        self.log("verified %d images in %.2f s" % (len(report), time.monotonic() - started))
        return report
