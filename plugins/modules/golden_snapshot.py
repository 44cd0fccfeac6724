#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: golden_snapshot
short_description: Make, adopt, validate or delete a Kube-DC golden VolumeSnapshot
version_added: 0.1.0
description:
  - A golden is a Ready C(VolumeSnapshot) in C(golden-images) (Filesystem) or C(golden-images-block)
    (Block) that carries the golden contract, which is label C(kube-dc.com/golden-os) (the family),
    annotations C(kube-dc.com/os-family-id) and C(kube-dc.com/os-name), and label and annotation
    C(kube-dc.com/golden-mode). Tenants' VMs are clones of it.
  - With O(state=present) the module snapshots a PersistentVolumeClaim O(pvc) into the mode's namespace,
    stamps the contract and waits for C(readyToUse); or, with O(adopt=true), stamps an existing snapshot,
    changing only its labels and annotations.
  - Goldens are named by version, C(golden-<family>-<YYYYMMDD>-<first 12 hex of the digest>), so a
    candidate sits beside the incumbent. A new golden is never active; promotion is a separate step
    (M(goldenimage.pipeline.golden_selection)). With O(digest) the full digest is written on the golden
    (annotation C(goldenimage.pipeline/release-digest)); the clone gate records its verdict for it.
  - Publishing never makes a golden served. The first golden of a family and mode is published behind a
    holding C(GoldenImageSelection) that names no snapshot (annotation C(goldenimage.pipeline/hold)), so
    the family stays held until the first promotion. Where the seeder would serve a new golden by list
    order (the label path with no golden labelled active, or two; a first golden on a cluster without
    the selection kind), publishing is refused before anything is written. A rerun for an existing golden
    asks the same, so a holding selection deleted since makes it fail (the family is served by list order)
    rather than report success.
  - With O(state=validated) it reports every contract key that is missing or inconsistent and changes nothing.
  - With O(state=absent) it first asks the serving truth of the golden's family and mode (the one
    M(goldenimage.pipeline.golden_info) and M(goldenimage.pipeline.golden_retention) ask) and refuses, naming
    each reason, while the golden is served, staged (newer than what is served, or published after it), the
    recorded rollback target, in a held family, or used - PersistentVolumeClaims and DataVolumes still
    restoring from it directly or through a project's seeded copy (gate and export volumes included), project
    copies on its snapshot handle, C(GoldenImageSelection)s that select it or record it as their rollback
    target, goldens recording it as theirs, and its own active label. A refused run deletes nothing.
  - Nothing producer-specific is written, only the contract keys above. The active label
    (C(kube-dc.com/golden-active)) and C(kube-dc.com/clone-min-size) are never written by this module.
author:
  - goldenimage.pipeline maintainers (@goldenimage)
options:
  state:
    description:
      - V(present) makes the golden or stamps the existing one; V(validated) only reports problems;
        V(absent) deletes it.
    type: str
    choices: [present, validated, absent]
    default: present
  name:
    description:
      - Name of the VolumeSnapshot.
      - When omitted it is computed from O(family), O(date) and O(digest).
      - With O(state=validated), omitting it and O(digest) validates every snapshot of O(family) (or every
        snapshot, without O(family)) in the golden namespaces.
    type: str
  family:
    description:
      - The OS family id, for example C(ubuntu-24.04) or C(windows-11-golden). It becomes the
        C(kube-dc.com/golden-os) label and the C(kube-dc.com/os-family-id) annotation, so it must be a
        valid label value (and lowercase letters, digits and C(-) when it is part of a computed name).
      - Required with O(state=present).
    type: str
  os_name:
    description:
      - Display name shown on the Admin OS Images page (annotation C(kube-dc.com/os-name)).
      - Required with O(state=present).
    type: str
  mode:
    description:
      - V(Filesystem) or V(Block) (any casing is accepted and normalized).
      - Selects the namespace, C(golden-images) or C(golden-images-block).
      - Defaults to the mode of O(namespace) when that is given, else V(Filesystem). With
        O(state=validated) and neither option, both namespaces are searched.
    type: str
  namespace:
    description:
      - Namespace of the snapshot. Must be the namespace of the mode; it is derived from O(mode) when omitted.
    type: str
  pvc:
    description:
      - Source PersistentVolumeClaim, in the snapshot's namespace. Its C(volumeMode) must match O(mode)
        and it must be C(Bound).
      - Required to make a new golden. An existing golden made from another PVC is refused, since a golden's
        content never changes, make a new one under a new name.
    type: str
    aliases: [source_pvc]
  snapshot_class:
    description:
      - C(VolumeSnapshotClass) for a new snapshot; the cluster default when omitted.
    type: str
    aliases: [volume_snapshot_class]
  adopt:
    description:
      - Stamp the contract onto an existing snapshot that was not made by this module (no O(pvc)).
        Only labels and annotations change.
      - A snapshot that carries another family or mode is refused either way.
    type: bool
    default: false
  date:
    description:
      - Date part of a computed name, C(YYYYMMDD) or C(YYYY-MM-DD). Defaults to today (UTC); pin it
        (for example to the artifact's build date) so a re-run on another day finds the same golden.
    type: str
  digest:
    description:
      - Digest of the released artifact, C(sha256:<64 hex>). Its first 12 hex digits end a computed name;
        the whole digest is recorded on a new golden (annotation C(goldenimage.pipeline/release-digest)).
    type: str
  image_facts:
    description:
      - The image-facts document read from the golden's bytes
        (RV(goldenimage.pipeline.seal_verify#module:facts) of its source, or
        RV(goldenimage.pipeline.golden_export_job#module:image_facts) of its export), recorded on the golden
        as the annotation C(goldenimage.pipeline/image-facts) (compact JSON) and shown by
        M(goldenimage.pipeline.golden_info).
      - A golden without the annotation gets it (only the annotation changes). A golden that records other
        facts is refused, since its bytes never change, so neither do their facts.
    type: dict
  provenance:
    description:
      - The verdict of the signature check made where the golden's source was imported
        (RV(goldenimage.pipeline.os_mirror_verify#module:record)), recorded on the golden as the annotation
        C(goldenimage.pipeline/provenance) (compact JSON) and shown by M(goldenimage.pipeline.golden_info).
      - A verdict on other bytes than O(digest) (or the golden's recorded release digest) is refused.
      - A V(verified) verdict carries its evidence (V(evidence), the C(.sig) and C(.intoto.jsonl) texts read
        where the source was verified), which O(trust_policy) verifies again wherever the golden is used.
    type: dict
  trust_policy:
    description:
      - Today's trust policy (V(rules), V(relaxed); the stored form
        RV(goldenimage.pipeline.os_mirror_verify#module:trust_policy) returns). When given, a golden whose
        recorded verdict (O(provenance), else its annotation) the policy does not accept is refused before
        anything is written (O(state=present)) or reported as breaking the contract (O(state=validated)),
        naming the golden, the key and the check; a key withdrawn from the policy, or a relaxation taken
        back, stops a golden from being snapshotted or promoted.
      - A recorded verdict is a claim anyone who can write the annotation can make, so its evidence is
        verified again, for the golden's own family (never the family the verdict names) and release
        digest. A V(verified) verdict holds only when it names its artifact and the golden's release digest,
        and its signature over that digest and its provenance (whose subject is that artifact with that
        digest) verify with a key the policy trusts for the golden's family, given with its V(public_key);
        a verdict with no evidence, or whose evidence does not verify, is refused. The inputs, builder and
        time it records must be its signed statement's, and the golden's image facts (O(image_facts), else
        its annotation) the ones that statement names when it names them. Any other verdict holds only
        while the policy relaxes the golden's family.
    type: dict
  fail_on_invalid:
    description:
      - With O(state=validated), fail when a golden breaks the contract. Set V(false) to only report.
    type: bool
    default: true
  force:
    description:
      - With O(state=absent), delete a golden that is only staged (withdrawing a candidate on purpose) or
        that belongs to a held family.
      - It never overrides what is served, selected or labelled active, the recorded rollback target, a clone
        still restoring from the golden or a project copy on its snapshot handle; those always refuse.
    type: bool
    default: false
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - goldenimage.pipeline.k8s_wait
  - goldenimage.pipeline.wait_rounds.resume
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.actiongroup_k8s
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  idempotent:
    support: full
    details:
      - With a computed name, only while O(date) stays the same; pin it.
notes:
  - "Runs on the controller; use C(delegate_to: localhost) when the play targets other hosts."
  - In check mode nothing is sent but reads, and nothing is waited for.
  - The wait for C(readyToUse) runs in rounds of O(report_every) seconds; the action plugin prints each
    round's C(line) (the snapshot's state and the time waited), so a slow snapshot class is not silent.
  - O(wait_timeout) and O(wait_sleep) must be greater than zero; another value is refused before anything
    is written.
seealso:
  - module: kubernetes.core.k8s_info
"""

EXAMPLES = r"""
- name: Make goldens with the cluster credentials set once
  module_defaults:
    group/goldenimage.pipeline.k8s:
      kubeconfig: "{{ kubeconfig_path }}"
  block:
    - name: Snapshot the converted disk as a staged (not active) golden
      goldenimage.pipeline.golden_snapshot:
        family: ubuntu-24-04
        os_name: Ubuntu 24.04 LTS
        mode: Block
        pvc: ubuntu-24-04-convert
        date: "20260828"
        digest: "sha256:f0dea74da9c54ba4728b2f4841316490cadd66b7ab1ed10de46549d457eb5018"
        wait_timeout: 900
      register: golden

    - name: Show where it landed
      ansible.builtin.debug:
        msg: "{{ golden.golden.namespace }}/{{ golden.golden.name }} ({{ golden.golden.restore_size }})"

    - name: Adopt a snapshot made by hand, stamping only the contract
      goldenimage.pipeline.golden_snapshot:
        name: golden-windows-11-golden-2026-08-09
        family: windows-11-golden
        os_name: Windows 11 Enterprise Evaluation
        adopt: true

    - name: Check every Windows 11 golden against the contract, without failing
      goldenimage.pipeline.golden_snapshot:
        state: validated
        family: windows-11-golden
        fail_on_invalid: false
      register: check

    - name: Remove an old, unselected golden
      goldenimage.pipeline.golden_snapshot:
        state: absent
        name: golden-ubuntu-24-04-20260101-0123456789ab
        mode: Block
"""

RETURN = r"""
provenance:
  description:
    - The signature verdict judged against O(trust_policy) (V(verdict), V(key), V(signer), V(artifact),
      V(sha256), V(family), and for a verified one V(inputs), V(builder), V(time) and V(evidence)); None
      when the golden records none.
  returned: when O(trust_policy) is given
  type: dict
changed:
  description: Whether the golden was (or, in check mode, would be) created, stamped or deleted.
  returned: always
  type: bool
  sample: true
snapshot:
  description:
    - The VolumeSnapshot after the task (in check mode, the predicted object); empty when absent.
  returned: when state is present or absent, or validated with a single name
  type: dict
  sample:
    apiVersion: snapshot.storage.k8s.io/v1
    kind: VolumeSnapshot
    metadata:
      name: golden-ubuntu-24-04-20260828-f0dea74da9c5
      namespace: golden-images-block
      labels: {kube-dc.com/golden-os: ubuntu-24-04, kube-dc.com/golden-mode: Block}
    spec: {source: {persistentVolumeClaimName: ubuntu-24-04-convert}}
    status: {readyToUse: true, restoreSize: 10Gi}
line:
  description: The snapshot's state and the seconds waited, printed by the action plugin after each round.
  returned: when the module waited for C(readyToUse)
  type: str
  sample: >-
    VolumeSnapshot golden-images/golden-ubuntu-24-04-20260828-f0dea74da9c5: readyToUse=false,
    creationTime=unset, restoreSize=unset, error=unset (21s)
lines:
  description: Every line printed while the task ran, one per round of the wait.
  returned: always
  type: list
  elements: str
rounds:
  description: How many calls of the module the wait took (set by the action plugin).
  returned: always
  type: int
  sample: 2
golden:
  description: The golden as a consumer sees it.
  returned: when state is present or absent, or validated with a single name
  type: dict
  contains:
    name:
      description: Snapshot name.
      type: str
      sample: golden-ubuntu-24-04-20260828-f0dea74da9c5
    namespace:
      description: Snapshot namespace.
      type: str
      sample: golden-images-block
    family:
      description: Family id (label, else the os-family-id annotation).
      type: str
      sample: ubuntu-24-04
    os_name:
      description: Display name.
      type: str
      sample: Ubuntu 24.04 LTS
    mode:
      description: V(Filesystem) or V(Block).
      type: str
      sample: Block
    ready:
      description: Whether C(status.readyToUse) is true.
      type: bool
      sample: true
    restore_size:
      description: C(status.restoreSize), the floor for a clone's size.
      type: str
      sample: 10Gi
    active:
      description: Whether it carries C(kube-dc.com/golden-active=true).
      type: bool
      sample: false
    source_pvc:
      description: Source PersistentVolumeClaim, if the snapshot was made from one.
      type: str
      sample: ubuntu-24-04-convert
    content_name:
      description: Bound C(VolumeSnapshotContent).
      type: str
      sample: snapcontent-5f3a
    digest:
      description: The O(digest) given, normalized.
      type: str
      returned: when O(digest) is given
      sample: "sha256:f0dea74da9c54ba4728b2f4841316490cadd66b7ab1ed10de46549d457eb5018"
    image_facts:
      description: The image-facts document recorded on the golden (see O(image_facts)); null when none is.
      type: dict
      sample: {schema_version: 1, os_family: linux, unreadable: [], private_keys: []}
problems:
  description:
    - Contract violations, one sentence each naming the key and the rule; empty when the golden is valid.
    - When several goldens are validated each sentence starts with C(<namespace>/<name>:).
  returned: when state is validated
  type: list
  elements: str
  sample: ["label kube-dc.com/golden-os (the family) is missing", "not Ready: status.readyToUse is false"]
goldens:
  description: Every golden validated, with its own problems.
  returned: when state is validated without a single name
  type: list
  elements: dict
  sample: [{name: golden-ubuntu-24-04-20260828-f0dea74da9c5, namespace: golden-images-block, problems: []}]
action:
  description: What was (or would be) done, V(create), V(stamp), V(delete) or V(none).
  returned: when state is present or absent
  type: str
  sample: create
predicted:
  description:
    - In check mode, the objects the golden needs that do not exist yet and that an earlier task of the same
      run would have made (its PersistentVolumeClaim), assumed as the golden requires them.
  returned: in check mode, when the source PVC does not exist yet
  type: list
  elements: str
  sample: [PersistentVolumeClaim golden-images-block/golden-debian-12-20260828-f0dea74da9c5-disk]
progress:
  description: Snapshot phases observed while waiting, in order (V(Pending), V(Bound), V(Ready)).
  returned: when state is present
  type: list
  elements: str
  sample: [Pending, Bound, Ready]
duration:
  description: Seconds spent waiting.
  returned: always
  type: float
  sample: 3.2
held:
  description:
    - Set when publishing wrote the holding C(GoldenImageSelection) of a family with nothing served
      (C(namespace/name) and why).
  returned: when state is present and the family was held by this run
  type: str
  sample: >-
    golden-images/ubuntu-24-04-filesystem: published, not promoted: nothing of this family is served
    until the first promotion
serving:
  description:
    - The serving truth of the family and mode when a golden is created or stamped, before the write
      (C(served), C(path), C(held), C(why), C(staged)).
  returned: when state is present and the golden was created or stamped
  type: dict
  sample: {served: null, path: none, held: false, why: "", staged: []}
keep:
  description: With O(state=absent), each reason the golden is kept, as C({reason, why}).
  returned: when state is absent and the delete is refused
  type: list
  elements: dict
  sample: [{reason: served, why: "it is served for ubuntu-24-04/Filesystem (...)"}]
consumers:
  description:
    - With O(state=absent), who uses the golden, as C({kind, namespace, name, why, loses}); V(loses) says
      what O(force) costs that consumer and is null when O(force) cannot override it.
  returned: when state is absent and the golden exists
  type: list
  elements: dict
  sample:
    - kind: PersistentVolumeClaim
      namespace: shop-prod
      name: vm-1-root
      why: it restores from the golden through the project copy shop-prod/golden-ubuntu-24-04-block
      loses: null
unknown_keys:
  description: C(kube-dc.com/) labels or annotations on the golden that the contract does not define.
  returned: when any are found
  type: list
  elements: str
  sample: [kube-dc.com/built-by]
diff:
  description: Before and after of the snapshot without server-managed fields and status, with C(--diff).
  returned: when diff mode is on and state is present or absent
  type: dict
  sample:
    before: {metadata: {name: golden-ubuntu-24-04-20260828-f0dea74da9c5, labels: {}}}
    after:
      metadata:
        name: golden-ubuntu-24-04-20260828-f0dea74da9c5
        labels: {kube-dc.com/golden-os: ubuntu-24-04}
"""

import time

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import inputs
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import rounds as rounds_
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common._wait import WaitError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import (
    PipelineError,
    Refusal,
    run_module,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import (
    golden,
    golden_inventory,
    selection,
    serving,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden._golden_observe import observe
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import kinds
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeModule, object_diff
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing

API = golden.SNAPSHOT_API_VERSION
KIND = golden.SNAPSHOT_KIND


def argument_spec():
    spec = dict(
        state=dict(type="str", choices=["present", "validated", "absent"], default="present"),
        name=dict(type="str"),
        family=dict(type="str"),
        os_name=dict(type="str"),
        mode=dict(type="str"),
        namespace=dict(type="str"),
        pvc=dict(type="str", aliases=["source_pvc"]),
        snapshot_class=dict(type="str", aliases=["volume_snapshot_class"]),
        adopt=dict(type="bool", default=False),
        date=dict(type="str"),
        digest=dict(type="str"),
        image_facts=dict(type="dict"),
        provenance=dict(type="dict"),
        trust_policy=dict(type="dict"),
        fail_on_invalid=dict(type="bool", default=True),
        force=dict(type="bool", default=False),
    )
    spec.update(inputs.wait_arg_spec())
    spec.update(rounds_.RESUME_ARG_SPEC)
    return spec


def _merged(first, second):
    """Two annotation merge patches as one (either may be None)."""
    annotations = dict(((first or {}).get("metadata") or {}).get("annotations") or {})
    annotations.update(((second or {}).get("metadata") or {}).get("annotations") or {})
    return {"metadata": {"annotations": annotations}} if annotations else None


def _ready(obj):
    if golden.is_ready(obj):
        return True, None
    failure = golden.snapshot_failure(obj)
    return False, ("status.error: %s" % failure) if failure else None


def _gone(obj):
    return obj is None, None


class Golden:
    """The runner: ``run()`` returns the result and raises a PipelineError to fail; it never exits."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.result = {"changed": False, "duration": 0.0}
        self.digest = None

    def run(self):
        inputs.positive_all(self.params, ("wait_timeout", "wait_sleep", "report_every"))
        return getattr(self, self.params["state"])()

    def placement(self):
        return golden.resolve_placement(self.params["mode"], self.params["namespace"])

    def name(self):
        p = self.params
        if p["digest"]:
            self.digest = golden.normalize_digest(p["digest"])
        return golden.golden_name(p["name"], p["family"], p["date"], p["digest"])

    def summary(self, obj):
        info = golden.summary(obj)
        if self.digest:
            info["digest"] = self.digest
        return info

    def warn_unknown(self, obj):
        keys = golden.unknown_keys(obj)
        if keys:
            self.result["unknown_keys"] = keys
            self.module.warn(
                "%s carries kube-dc.com/ keys the golden contract does not define: %s"
                % ((obj.get("metadata") or {}).get("name"), ", ".join(keys))
            )

    def set_diff(self, before, after):
        if self.module._diff:
            self.result["diff"] = object_diff(before, after)

    def wait(self, name, namespace, predicate, pending, **kwargs):
        try:
            return self.module.wait(
                API,
                KIND,
                name,
                namespace,
                predicate,
                golden.describe_progress,
                pending,
                self.params["wait_timeout"],
                self.params["wait_sleep"],
                **kwargs,
            )
        except WaitError as exc:
            exc.fields.update(self.result)
            raise

    # state=present -----------------------------------------------------------------------------

    def present(self):
        p = self.params
        mode, namespace = self.placement()
        name = self.name()
        existing = self.module.get(API, KIND, name, namespace)
        pvc_obj = None
        if existing is None and p["pvc"]:
            pvc_obj = self.module.get("v1", "PersistentVolumeClaim", p["pvc"], namespace)
            if pvc_obj is None and self.module.check_mode:
                # Check mode: an earlier task of the same run would have made it, Bound, in the golden's mode.
                pvc_obj = golden.predicted_pvc(p["pvc"], namespace, mode)
                self.result["predicted"] = ["PersistentVolumeClaim %s/%s" % (namespace, p["pvc"])]
        try:
            plan = golden.plan_golden(
                existing,
                name,
                p["family"],
                p["os_name"],
                mode,
                pvc=p["pvc"],
                pvc_obj=pvc_obj,
                adopt=p["adopt"],
                snapshot_class=p["snapshot_class"],
            )
            where = "%s %s/%s" % (KIND, namespace, name)
            facts = golden.facts_patch(existing or {}, p["image_facts"], where)
            signed = golden.provenance_patch(existing or {}, p["provenance"], self.digest, where)
            self.judge_provenance(
                p["provenance"] or golden.recorded_provenance(existing or {}),
                where,
                self.digest or golden.release_digest(existing or {}),
                p["image_facts"] if p["image_facts"] is not None else golden.recorded_facts(existing or {}),
            )
        except golden.GoldenError as exc:
            raise PipelineError(str(exc), snapshot=existing or {}, **self.result) from None
        if signed:
            facts = _merged(facts, signed)
        after = existing
        # Every run, a rerun too: a holding selection deleted since (a GitOps prune) is noticed.
        self.hold_until_promoted(p["family"], mode)
        if plan["action"] == "create":
            annotations = plan["definition"]["metadata"]["annotations"]
            if self.digest:
                annotations[serving.RELEASE_DIGEST] = self.digest
            if facts:
                annotations.update(facts["metadata"]["annotations"])
            after = self.module.create(plan["definition"])
            self.result["changed"] = True
        elif plan["action"] == "stamp":
            after, changed = self.module.patch(API, KIND, name, namespace, plan["patch"], before=existing)
            self.result["changed"] = changed
        if facts and plan["action"] != "create":
            after, changed = self.module.patch(API, KIND, name, namespace, facts, before=after)
            self.result["changed"] = self.result["changed"] or changed
        self.result["action"] = plan["action"]
        self.set_diff(existing, after)
        self.result["progress"] = [golden.phase(after)]
        if p["wait"] and not self.module.check_mode and not golden.is_ready(after):
            after = self.wait_ready(name, namespace, after)
        self.result.update(snapshot=after, golden=self.summary(after))
        self.warn_unknown(after)
        return self.result

    def judge_provenance(self, record, where, digest, facts):
        """Refuse, before any write, a golden whose recorded verdict today's trust policy does not accept:
        its evidence is verified again, for the golden's family, digest and facts."""
        if self.params["trust_policy"] is None:
            return
        self.result["provenance"] = record
        problem = golden.provenance_problem(
            record,
            self.params["trust_policy"],
            self.params["family"],
            where,
            digest,
            facts,
            signing.record_proof,
        )
        if problem:
            raise golden.GoldenError(problem)

    def hold_until_promoted(self, family, mode):
        """Publishing never serves: a family with nothing served gets a holding selection before its first
        golden, and a family the seeder would serve by list order is refused (serving.publish_plan)."""
        namespaces = golden_inventory.golden_namespaces()
        state = serving.truth(observe(self.module, namespaces, family), family, mode, namespaces)
        kind_served = self.module.served(selection.SELECTION_API_VERSION, selection.SELECTION_KIND)
        try:
            action = serving.publish_plan(state, kind_served)
        except Refusal as exc:
            exc.fields.update(self.result)
            raise
        if action == "hold":
            held = self.module.create(serving.holding_selection(family, mode))
            self.result["changed"] = True
            self.result["held"] = "%s/%s: %s" % (kinds.namespace(held), kinds.name(held), serving.HOLD_REASON)
        self.result["serving"] = {k: state[k] for k in ("served", "path", "held", "why", "staged")}

    def wait_ready(self, name, namespace, current):
        phases = self.result["progress"]

        def progress(obj):
            now = golden.phase(obj)
            if now != phases[-1]:
                phases.append(now)

        pending = "%s %s/%s to be readyToUse" % (KIND, namespace, name)
        rounds = rounds_.from_params(self.params, time.time())
        try:
            obj, done = self.module.wait_round(
                rounds,
                API,
                KIND,
                name,
                namespace,
                _ready,
                golden.describe_progress,
                pending,
                self.params["wait_sleep"],
                progress=progress,
            )
        except WaitError as exc:
            last = exc.last if exc.last is not None else current
            exc.fields.update(self.result)
            exc.fields.update(snapshot=last, golden=self.summary(last))
            raise
        obj = current if obj is None else obj
        elapsed = rounds.elapsed(time.time())
        self.result.update(
            done=done,
            duration=round(elapsed, 3),
            line="%s %s/%s: %s (%ds)" % (KIND, namespace, name, golden.describe_progress(obj), elapsed),
        )
        if not done:
            self.result["resume"] = rounds.resume()
        return obj

    # state=validated ---------------------------------------------------------------------------

    def validated(self):
        p = self.params
        if p["name"] or p["digest"]:
            return self.validate_one()
        if p["mode"] is None and p["namespace"] is None:
            namespaces = [golden.NAMESPACES[golden.FILESYSTEM], golden.NAMESPACES[golden.BLOCK]]
        else:
            namespaces = [self.placement()[1]]
        goldens, problems = [], []
        for namespace in namespaces:
            for obj in self.module.list(API, KIND, namespace):
                if p["family"] and golden.observed_family(obj) != p["family"]:
                    continue
                found = golden.validate_golden(obj, family=p["family"], mode=p["mode"])
                info = self.summary(obj)
                info["problems"] = found
                goldens.append(info)
                problems.extend("%s/%s: %s" % (info["namespace"], info["name"], text) for text in found)
                self.warn_unknown(obj)
        if p["family"] and not goldens:
            problems.append("no snapshot of family %s in %s" % (p["family"], ", ".join(namespaces)))
        self.result.update(goldens=goldens, problems=problems)
        return self.finish_validation(problems, "goldens in %s break" % ", ".join(namespaces))

    def validate_one(self):
        p = self.params
        name = self.name()
        if p["mode"] is None and p["namespace"] is None:
            candidates = [golden.NAMESPACES[golden.FILESYSTEM], golden.NAMESPACES[golden.BLOCK]]
        else:
            candidates = [self.placement()[1]]
        obj, namespace = None, candidates[0]
        for namespace in candidates:
            obj = self.module.get(API, KIND, name, namespace)
            if obj is not None:
                break
        if obj is None:
            problems = ["%s %s not found in %s" % (KIND, name, " or ".join(candidates))]
            self.result.update(snapshot={}, golden={}, problems=problems)
        else:
            problems = golden.validate_golden(obj, family=p["family"], mode=p["mode"])
            if p["trust_policy"] is not None:
                record = golden.recorded_provenance(obj)
                self.result["provenance"] = record
                where = "%s %s/%s" % (KIND, namespace, name)
                problem = golden.provenance_problem(
                    record,
                    p["trust_policy"],
                    golden.observed_family(obj),
                    where,
                    golden.release_digest(obj),
                    golden.recorded_facts(obj),
                    signing.record_proof,
                )
                problems = problems + ([problem] if problem else [])
            self.result.update(snapshot=obj, golden=self.summary(obj), problems=problems)
            self.warn_unknown(obj)
        return self.finish_validation(problems, "%s %s/%s breaks" % (KIND, namespace, name))

    def finish_validation(self, problems, what):
        if problems and self.params["fail_on_invalid"]:
            raise PipelineError("%s the golden contract: %s" % (what, "; ".join(problems)), **self.result)
        return self.result

    # state=absent ------------------------------------------------------------------------------

    def absent(self):
        p = self.params
        mode, namespace = self.placement()
        name = self.name()
        existing = self.module.get(API, KIND, name, namespace)
        self.result.update(action="none", snapshot={}, golden={})
        if existing is None:
            return self.result
        self.result["golden"] = self.summary(existing)
        where = "%s %s/%s" % (KIND, namespace, name)
        # The serving truth of the golden's own family and mode, asked right before the delete.
        family = golden.observed_family(existing)
        namespaces = golden_inventory.golden_namespaces()
        state = serving.truth(observe(self.module, namespaces, family), family, mode, namespaces)
        found = state["users"].get(name, [])
        self.result["consumers"] = found
        refusal = serving.delete_refusal(state, name, where, p["force"])
        if refusal is not None:
            refusal.fields.update(self.result)
            raise refusal
        reasons = serving.keep_reasons(state, name)
        if reasons:
            self.module.warn(
                "force: deleting %s although %s" % (where, "; ".join(why for _r, why in reasons))
            )
        changed = self.module.delete(API, KIND, name, namespace, before=existing)
        self.result.update(changed=changed, action="delete" if changed else "none")
        self.set_diff(existing, None)
        if changed and p["wait"] and not self.module.check_mode:
            duration = self.wait(name, namespace, _gone, "%s to be deleted" % where)[1]
            self.result["duration"] = round(duration, 3)
        return self.result


def main():
    module = KubeModule(
        argument_spec=argument_spec(),
        supports_check_mode=True,
        required_if=[("state", "present", ("family", "os_name"))],
    )
    run_module(module, lambda: Golden(module).run())


if __name__ == "__main__":
    main()
