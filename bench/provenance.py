#!/usr/bin/env python3
"""The cost of signing and verifying an artifact, as a ratio to moving the same bytes.

For each size, a file of random (incompressible) bytes in .cache/bench/, then, repeated, medians printed:
- transfer: what any move of the artifact costs, a copy of the file computing its SHA-256 on the way
  (os_mirror_object and golden_export_object hash what they upload, in the same pass);
- sign: the collection's signing of that artifact once its digest is known, as the producers sign (the
  detached ECDSA P-256 signature over the digest, and the DSSE envelope of its SLSA statement);
- verify: a consumer's check once the digest is known (the signature over the digest, the envelope, the
  statement read back and judged against a trust policy), what a consumer does where the bytes' digest is
  already proven (os_mirror_verify from the object's verified metadata);
- verify+read: the same with the file read again for its SHA-256 (artifact_verify, baked_image on a file).

The goal: signing and verifying (given the digest) are a rounding error next to the transfer, under 1 % of
it at every size; verify+read is printed for reference (it is one read of the bytes, like the transfer's).

    .venv/bin/python bench/provenance.py [--sizes-mib 64,256,1024] [--repeat 5] [--smoke]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pathlib
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / ".collections"))

from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import (  # noqa: E402
    _signing as signing,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402

MIB = 1024**2
CHUNK = 8 * MIB
CACHE = ROOT / ".cache" / "bench"
GOAL = 0.01


def artifact(size_mib: int) -> pathlib.Path:
    """A cached file of ``size_mib`` MiB of random bytes."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / ("provenance-%d.bin" % size_mib)
    if not path.exists() or path.stat().st_size != size_mib * MIB:
        with open(str(path) + ".part", "wb") as out:
            for _index in range(size_mib // 8 or 1):
                out.write(os.urandom(min(CHUNK, size_mib * MIB)))
        os.replace(str(path) + ".part", path)
    return path


def transfer(path: pathlib.Path, target: pathlib.Path) -> str:
    """Copy ``path`` to ``target`` hashing it on the way; the SHA-256 (hex)."""
    digest = hashlib.sha256()
    with open(path, "rb") as src, open(target, "wb") as dst:
        while True:
            block = src.read(CHUNK)
            if not block:
                break
            digest.update(block)
            dst.write(block)
    return digest.hexdigest()


def sign(key, name: str, sha256: str) -> tuple[str, str]:
    """The ``.sig`` text and ``.intoto.jsonl`` line a producer writes for the artifact."""
    doc = provenance.statement(
        {"name": name, "digest": {"sha256": sha256}},
        [{"name": provenance.UPSTREAM, "digest": {"sha256": sha256}}],
        {"playbook": "bench.yml", "host": "bench", "collection_version": provenance.COLLECTION_VERSION},
        "2026-12-01T00:00:00Z",
    )
    sig = signing.signature_text(signing.sign_digest(key, sha256))
    return sig, provenance.envelope_line(signing.sign_envelope(key, provenance.serialize(doc)))


def verify(ring, policy, name: str, sha256: str, sig: str, envelope: str) -> dict:
    """A consumer's verdict on the artifact, the digest given."""
    signature, found = signing.evidence(ring, sig, envelope, sha256)
    verdict = provenance.judge(
        {"name": name, "digest": {"sha256": sha256}}, "bench", None, policy, signature, found
    )
    assert verdict["verdict"] == provenance.VERIFIED, verdict
    return verdict


def timed(call, repeat: int) -> float:
    """The median wall time of ``call()`` over ``repeat`` runs."""
    found = []
    for _index in range(repeat):
        started = time.perf_counter()
        call()
        found.append(time.perf_counter() - started)
    return statistics.median(found)


def measure(path: pathlib.Path, key, ring, policy, tmp: pathlib.Path, repeat: int) -> tuple:
    """``(transfer, sign, verify, verify+read)`` median seconds for the file ``path``."""
    name = path.name
    sha256 = transfer(path, tmp / "warm")  # the page cache warm for both sides
    sig, envelope = sign(key, name, sha256)
    moved = timed(lambda: transfer(path, tmp / "copy"), repeat)
    signed = timed(lambda: sign(key, name, sha256), max(repeat, 20))
    checked = timed(lambda: verify(ring, policy, name, sha256, sig, envelope), max(repeat, 20))
    read = timed(
        lambda: verify(ring, policy, name, signing.file_digests(str(path))["sha256"], sig, envelope), repeat
    )
    return moved, signed, checked, read


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mib", default="64,256,1024")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="one small size, once")
    args = parser.parse_args()
    sizes = [16] if args.smoke else [int(s) for s in args.sizes_mib.split(",")]
    repeat = 1 if args.smoke else args.repeat
    key = ec.generate_private_key(ec.SECP256R1())
    policy = provenance.normalize_policy(
        {"rules": [{"public_key": signing.public_pem(key), "name": "bench"}]}
    )
    ring = signing.keyring(provenance.public_keys(policy))
    failed = False
    print(
        "size MiB | transfer s | sign s (ratio) | verify s (ratio) | verify+read s (ratio)  [medians of %d]"
        % repeat
    )
    with tempfile.TemporaryDirectory(dir=str(CACHE.parent if CACHE.parent.exists() else None)) as tmp:
        for size in sizes:
            moved, signed, checked, read = measure(
                artifact(size), key, ring, policy, pathlib.Path(tmp), repeat
            )
            print(
                "%8d | %10.3f | %.5f (%.4f%%) | %.5f (%.4f%%) | %.3f (%.1f%%)"
                % (
                    size,
                    moved,
                    signed,
                    100 * signed / moved,
                    checked,
                    100 * checked / moved,
                    read,
                    100 * read / moved,
                )
            )
            failed = failed or signed / moved >= GOAL or checked / moved >= GOAL
    print(
        "%s: signing and verifying (digest known) under %.0f%% of the transfer at every size"
        % ("FAIL" if failed else "PASS", 100 * GOAL)
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
