"""A golden's recorded verdict is a claim; its evidence is what golden_snapshot (publishing and the promotion
gate) and golden_info verify again, for the golden's own family, release digest and image facts.

Against the lab's real kube-apiserver, with real keys: hand-written verified verdicts, another family's
relaxation, records naming no artifact or digest, evidence for other bytes, facts other than the signed
ones, and a verdict annotated on a golden after the gate refused it are each refused with zero writes; the
verdict os_mirror_verify records, with its evidence, passes.
"""

from __future__ import annotations

import functools
import json

from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance
from cryptography.hazmat.primitives.asymmetric import ec

from tests.integration.modules.test_golden_snapshot import (  # noqa: F401  pylint: disable=unused-import
    DIGEST,
    FACTS,
    FS_NS,
    GROUP,
    MODULE,
    VERSION,
    cluster,
    make_args,
)
from tests.integration.support.runner import kube_play, module_task, run_playbook

task = functools.partial(module_task, MODULE)
HEX = DIGEST.partition(":")[2]
OTHER_HEX = "f" * 64
ANNOTATION = "goldenimage.pipeline/provenance"
LEAKY = dict(FACTS, private_keys=["/etc/ssh/ssh_host_ed25519_key"])


def _record(key, family, sha256=HEX, signed_sha256=None, facts=None):
    """The record os_mirror_verify makes of ``key``'s signature over ``signed_sha256`` (the recorded digest
    unless told), with the statement naming ``facts`` and the texts as its evidence."""
    signed_sha256 = signed_sha256 or sha256
    artifact = "%s/20260828/sha256-%s/disk.qcow2" % (family, signed_sha256)
    facts = FACTS if facts is None else facts
    inputs = [{"name": provenance.FACTS, "digest": provenance.facts_digest(facts)}]
    doc = provenance.statement(
        {"name": artifact, "digest": {"sha256": signed_sha256}}, inputs, {}, "2026-12-01T00:00:00Z"
    )
    texts = (
        signing.signature_text(signing.sign_digest(key, signed_sha256)),
        provenance.envelope_line(signing.sign_envelope(key, provenance.serialize(doc))),
    )
    verdict = {"verdict": "verified", "key": signing.key_id(key), "signer": "mirror-2026"}
    return provenance.verdict_record(verdict, artifact, sha256, family, doc, texts)


def golden_name(family, date):
    return "golden-%s-%s-%s" % (family, date.replace("-", ""), HEX[:12])


def test_only_evidence_a_trusted_key_made_for_the_goldens_own_digest_and_family_passes(
    lab,
    cluster,  # noqa: F811
):
    key, scratch = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    kid = signing.key_id(key)
    family = "%s-debian" % cluster.prefix
    policy = {
        "rules": [
            {"public_key": signing.public_pem(key), "name": "mirror-2026", "families": [family]},
            {"public_key": signing.public_pem(scratch), "name": "scratch", "families": ["lab-scratch"]},
        ],
        "relaxed": [{"family": "lab-scratch", "reason": "throwaway"}],
    }
    good = _record(key, family)
    forged = {"verdict": "verified", "key": kid, "signer": "mirror-2026", "artifact": "x", "sha256": HEX}
    cases = {  # title: (the recorded verdict, the image facts, what the refusal says)
        "G0 no verdict": (None, None, "has no verified signature recorded"),
        "G1 forged verified verdict": (forged, None, "with no evidence"),
        "G2 another family's relaxation": (
            {
                "verdict": "unsigned_allowed",
                "artifact": "lab-scratch/v1/x.qcow2",
                "sha256": HEX,
                "family": "lab-scratch",
                "relaxed": "throwaway",
            },
            None,
            "relaxation of family %s" % family,
        ),
        "G3 verdict and key only": ({"verdict": "verified", "key": kid}, None, "naming no artifact"),
        "G4 evidence for other bytes": (
            _record(key, family, signed_sha256=OTHER_HEX),
            None,
            "signature check failed",
        ),
        "another family's verified verdict": (
            _record(scratch, "lab-scratch"),
            None,
            "no longer lets sign family %s" % family,
        ),
        "facts other than the signed ones": (good, LEAKY, "facts check failed"),
    }
    dates = {}
    tasks = []
    for index, (title, (record, facts, _said)) in enumerate(sorted(cases.items())):
        dates[title] = "2026-08-%02d" % (index + 1)
        pvc = cluster.pvc(FS_NS, "%s-d%d" % (cluster.prefix, index))
        args = make_args(cluster, pvc, date=dates[title], trust_policy=policy)
        if record is not None:
            args["provenance"] = record
        if facts is not None:
            args["image_facts"] = facts
        tasks.append(task(title, ignore_errors=True, **args))
    lab.clear_audit()
    refused = run_playbook(kube_play(*tasks), env=lab.env())
    assert lab.mutating_requests() == [], lab.mutating_requests()
    for title, said in ((t, case[2]) for t, case in cases.items()):
        assert refused.entry(title)["status"] == "ignored", (title, refused.log)
        msg = refused[title]["msg"]
        assert said in msg and golden_name(family, dates[title]) in msg, (title, msg)
        signer = signing.key_id(scratch) if title == "another family's verified verdict" else kid
        assert signer in msg or title in ("G0 no verdict", "G2 another family's relaxation"), (title, msg)

    # The verdict os_mirror_verify records, its evidence with it, passes; a rerun writes nothing.
    pvc = cluster.pvc(FS_NS, "%s-good" % cluster.prefix)
    args = make_args(cluster, pvc, date="2026-09-01", trust_policy=policy, provenance=good, image_facts=FACTS)
    made = run_playbook(kube_play(task("make", **args), task("again", **args)), env=lab.env())
    assert made.ok, made.log
    assert made["make"]["changed"] is True and made["again"]["changed"] is False
    name = made["make"]["golden"]["name"]
    live = cluster.get_snapshot(FS_NS, name)
    assert json.loads(live["metadata"]["annotations"][ANNOTATION])["evidence"] == good["evidence"]

    # A golden made without a verdict (no policy given), refused by the gate, then annotated by hand: with
    # a hand-written verified verdict, or with the good golden's verdict and evidence (other bytes).
    pvc = cluster.pvc(FS_NS, "%s-bare" % cluster.prefix)
    bare_args = make_args(cluster, pvc, date="2026-09-02", digest="sha256:" + "e" * 64)
    bare = run_playbook(kube_play(task("bare", **bare_args)), env=lab.env())
    assert bare.ok, bare.log
    unsigned = bare["bare"]["golden"]["name"]

    def gate(title, snapshot):
        return task(
            title,
            ignore_errors=True,
            state="validated",
            name=snapshot,
            family=family,
            mode="filesystem",
            trust_policy=policy,
        )

    def info(title):
        return module_task("goldenimage.pipeline.golden_info", title, family=family, trust_policy=policy)

    def annotate(record):
        cluster.custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            FS_NS,
            "volumesnapshots",
            unsigned,
            {"metadata": {"annotations": {ANNOTATION: record}}},
        )

    lab.clear_audit()
    before = run_playbook(kube_play(gate("good", name), gate("before", unsigned)), env=lab.env())
    assert before.entry("good")["status"] == "ok" and before["good"]["problems"] == [], before.log
    assert "has no verified signature recorded" in before["before"]["msg"], before.log
    checked = {}
    for title, record in (
        ("hand-written", {"verdict": "verified", "key": kid}),
        ("copied", good),
        ("forged with evidence of other bytes", dict(good, sha256="e" * 64)),
    ):
        annotate(json.dumps(record))
        lab.clear_audit()
        checked[title] = run_playbook(kube_play(gate("gate", unsigned), info("info")), env=lab.env())
        assert lab.mutating_requests() == [], (title, lab.mutating_requests())
    for title, run in checked.items():
        assert run.entry("gate")["status"] == "ignored", (title, run.log)
        msg = run["gate"]["msg"]
        assert unsigned in msg and kid in msg, (title, msg)
        found = {c["name"]: c for fam in run["info"]["families"] for c in fam["candidates"]}
        assert found[name]["provenance_verifies"] is True, (title, found[name])
        assert found[unsigned]["provenance_verifies"] is False, (title, found[unsigned])
        assert unsigned in found[unsigned]["provenance_problem"], (title, found[unsigned])
    assert "naming no artifact" in checked["hand-written"]["gate"]["msg"]
    assert "other bytes" in checked["copied"]["gate"]["msg"]
    assert "signature check failed" in checked["forged with evidence of other bytes"]["gate"]["msg"]
