#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: golden_selection
short_description: Promote or roll back the golden a Kube-DC family serves, failing closed
version_added: 0.1.0
description:
  - Chooses which golden VolumeSnapshot the projects of a family are seeded from, for one mode
    (V(Filesystem) or V(Block)).
  - With O(method=selection) (the default) it writes one C(GoldenImageSelection) per family and mode
    (C(spec.family), C(spec.mode), C(spec.snapshotName), C(spec.releaseDigest)). Promotion and rollback
    are the same single write, with no intermediate state. A selection that already governs the family
    and mode is updated; otherwise one named C(<family>-<mode lowercased>) is created.
  - Before writing anything it proves the named snapshot exists, is Ready, carries the family and the
    mode and keeps the whole golden contract; otherwise it refuses and writes nothing. It never picks
    a sibling.
  - Two selections naming different snapshots for the family and mode hold the family; the module refuses
    to write until one is removed and names both. A selection whose family or mode matches no golden is
    reported as governing nothing.
  - The snapshot a promotion replaces is recorded on the selection (annotations
    C(goldenimage.pipeline/previous-snapshot) and C(goldenimage.pipeline/previous-release-digest)), so
    O(rollback=true) restores it.
  - Promotion and rollback, on both paths, serve only a golden on which M(goldenimage.pipeline.clone_gate)
    recorded a pass for its own release digest, name and storage snapshot handle (annotation
    C(goldenimage.pipeline/gate)). The record stops a promotion by mistake, not a forger - anyone who may
    patch VolumeSnapshots in the golden namespaces can write one, so grant that only to the pipeline's
    identity. Without one the run is refused naming the golden, writing nothing, unless
    O(allow_ungated=true) with O(ungated_reason) serves it on purpose; the override is recorded on the golden
    (annotation C(goldenimage.pipeline/ungated) with who, why and when).
  - The rollback target a promotion records is the golden the projects actually hold (their seeded copies'
    snapshot handle), not only what a selection named. Every selection governing the family and mode is
    moved in the one run; selections naming different snapshots are refused before any write.
  - With O(method=label) it uses the legacy C(kube-dc.com/golden-active) label instead, the least bad way;
    the label is removed from the incumbent and added to the candidate back to back, then exactly one active
    golden per family is verified and the length of the window between the two writes is reported. Neither
    intermediate state is safe, the result explains why, and the selection path is recommended.
  - With O(verify_projects=true) it then waits until every project namespace resolved to the snapshot
    handle of the selected golden (seeded VolumeSnapshot, its bound content, the content's handle, and the
    seeded snapshot C(readyToUse), as the snapshot controller binds a copy whether or not the CSI driver can
    serve its handle) and fails listing those that did not within O(wait_timeout).
  - That wait talks. One call of the module waits at most O(report_every) seconds (less when a project
    resolves or changes) and returns C(done), a C(line) with the counts, the projects still pending and the
    time since the wait began, and C(resume). The action plugin of the same name calls it again with
    C(resume), which only checks the projects (the write is not repeated), and prints each line, so a
    verification prints a line at least every O(report_every) seconds. Its time-out names every project
    still pending with its reason, and says whether the verification was C(stuck) or C(still working).
author:
  - goldenimage.pipeline maintainers (@goldenimage)
options:
  family:
    description:
      - The OS family id (the C(kube-dc.com/golden-os) label of its goldens).
    type: str
    required: true
  mode:
    description:
      - V(Filesystem) or V(Block). Other casings are accepted and written as V(Filesystem) or V(Block).
      - Goldens of the mode live in C(golden-images) or C(golden-images-block).
    type: str
    default: Filesystem
  snapshot:
    description:
      - Name of the golden to serve, in the namespace of O(mode).
      - Required unless O(rollback=true). With O(rollback=true) it names the rollback's target. The run is a
        no-op when that snapshot already serves, and is refused when it is not the recorded previous snapshot.
    type: str
  release_digest:
    description:
      - Digest of the released artifact behind O(snapshot), C(sha256:<64 hex>), written as
        C(spec.releaseDigest).
      - When the selected snapshot changes without a digest, the old digest is removed, since it
        describes another snapshot.
      - Ignored with O(method=label) and with O(rollback=true) (the recorded digest is restored).
    type: str
  method:
    description:
      - V(selection) writes a C(GoldenImageSelection) (one write, fails closed).
      - V(label) moves the legacy C(kube-dc.com/golden-active) label. It is refused while a selection governs
        the family and mode, because the label then has no effect.
    type: str
    choices: [selection, label]
    default: selection
  rollback:
    description:
      - Restore the snapshot recorded as previous by the last promotion, instead of O(snapshot).
      - Refused, writing nothing, when no previous snapshot is recorded.
      - A rollback records that it was one (annotation C(goldenimage.pipeline/rolled-back), removed by the
        next promotion). Run again without O(snapshot), it changes nothing instead of flipping back to what
        the first rollback removed. To roll back again on purpose, name the target in O(snapshot).
    type: bool
    default: false
  allow_ungated:
    description:
      - Serve (promote, or roll back to) a golden with no gate pass recorded for its release digest, on
        purpose. O(ungated_reason) is then required; both are recorded on the golden with user and time.
      - Without it such a run is refused naming the golden, writing nothing.
    type: bool
    default: false
  ungated_reason:
    description: Why the golden is served without a gate pass (recorded with O(allow_ungated=true)).
    type: str
  ungated_by:
    description: Who decided it (recorded with O(allow_ungated=true)); defaults to the user running the task.
    type: str
  verify_projects:
    description:
      - After the write, wait until every project namespace (see O(project_selector)) resolved to the snapshot
        handle of the selected golden, and fail listing the projects that did not.
      - Kube-DC re-seeds projects on its resync (every 15 minutes by default), so O(verify_timeout) must
        cover it.
      - O(wait_timeout) and O(wait_sleep) must be greater than zero; another value is refused before anything
        is written.
      - In check mode, or with O(wait=false), nothing is waited for; each project's current resolution is
        reported once.
    type: bool
    default: false
  wait_timeout:
    description:
      - Seconds to wait for every project to resolve to the selected handle (with O(verify_projects=true)),
        counted from O(started).
      - The old name C(verify_timeout) is kept as an alias.
    type: int
    default: 1200
    aliases: [verify_timeout]
  wait_sleep:
    description:
      - Longest pause, in seconds, between two checks of the projects.
      - The old name C(verify_interval) is kept as an alias.
    type: float
    default: 15
    aliases: [verify_interval]
  namespace:
    description:
      - Namespace a new C(GoldenImageSelection) is made in. Defaults to C(golden-images), for both modes (one
        selection per family and mode, Block included, as the operator guide lays them out). A selection that
        already governs the family and mode is written where it is; selections are read from both golden
        namespaces (and this one).
    type: str
  project_selector:
    description:
      - Label selector of the project namespaces to verify.
    type: str
    default: kube-dc.com/project
  verify_handle:
    description:
      - The snapshot handle the projects must resolve to (from C(resume)); set by the action plugin. With it
        the module only checks the projects and writes nothing.
    type: str
  verify_snapshot:
    description: Name of the golden behind O(verify_handle) (from C(resume)); set by the action plugin.
    type: str
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.actiongroup_k8s
  - goldenimage.pipeline.wait_rounds
attributes:
  check_mode:
    support: full
    details:
      - Sends no mutating request; reports the change it would make and, with O(verify_projects=true),
        what each project resolves to now.
  diff_mode:
    support: full
  idempotent:
    support: full
    details:
      - Selecting the snapshot already selected changes nothing. A rollback run twice changes nothing the
        second time, and a rollback naming its target in O(snapshot) changes nothing when the target serves.
notes:
  - "Runs on the controller; use C(delegate_to: localhost) when the play targets other hosts."
  - Refusals (missing, unready, wrong family or mode, conflicting selections, nothing to roll back, a golden
    with no gate pass recorded for its release digest) write nothing.
seealso:
  - module: goldenimage.pipeline.golden_snapshot
  - module: goldenimage.pipeline.golden_info
"""

EXAMPLES = r"""
- name: Promote a gated candidate and wait for every project to be served it
  goldenimage.pipeline.golden_selection:
    family: ubuntu-24-04
    mode: Block
    snapshot: golden-ubuntu-24-04-20260828-f0dea74da9c5
    release_digest: "sha256:f0dea74da9c54ba4728b2f4841316490cadd66b7ab1ed10de46549d457eb5018"
    verify_projects: true
    wait_timeout: 1200
  register: promoted

- name: Show what each project resolved to
  ansible.builtin.debug:
    msg: "{{ item.namespace }}: {{ item.handle }} (match: {{ item.match }})"
  loop: "{{ promoted.projects }}"

- name: Boot a tenant-style clone of the candidate first (it records its verdict on the golden)
  goldenimage.pipeline.clone_gate:
    snapshot: golden-ubuntu-24-04-20260828-f0dea74da9c5
    snapshot_namespace: golden-images-block
    project_namespace: acme

- name: Promote it; refused unless the gate's pass is recorded for its release digest
  goldenimage.pipeline.golden_selection:
    family: ubuntu-24-04
    mode: Block
    snapshot: golden-ubuntu-24-04-20260828-f0dea74da9c5

- name: Serve a golden without the gate, on purpose and on the record
  goldenimage.pipeline.golden_selection:
    family: ubuntu-24-04
    mode: Block
    snapshot: golden-ubuntu-24-04-20260828-f0dea74da9c5
    allow_ungated: true
    ungated_reason: "CVE-2026-1234 hotfix; gate cluster down, change CHG-4411"

- name: Roll back to the snapshot the last promotion replaced, named so a rerun is a no-op
  goldenimage.pipeline.golden_selection:
    family: ubuntu-24-04
    mode: Block
    rollback: true
    snapshot: golden-ubuntu-24-04-20260101-0123456789ab

- name: Promote on a cluster without the GoldenImageSelection CRD (legacy label, reported as unsafe)
  goldenimage.pipeline.golden_selection:
    family: windows-11-golden
    snapshot: golden-windows-11-golden-20260828-f0dea74da9c5
    method: label
    verify_projects: true
"""

RETURN = r"""
changed:
  description: Whether the selection or a label was (or, in check mode, would be) written.
  returned: always
  type: bool
  sample: true
method:
  description: The path used, V(selection) or V(label).
  returned: always
  type: str
  sample: selection
previous:
  description: What the family and mode served before the task, and which path decided it.
  returned: always
  type: dict
  contains:
    snapshot:
      description: Name of the golden served before, or null.
      type: str
      sample: golden-ubuntu-24-04-20260101-0123456789ab
    release_digest:
      description: C(spec.releaseDigest) of the selection before, when there was one.
      type: str
      sample: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    path:
      description: V(selection), V(label) or V(none).
      type: str
      sample: label
selected:
  description: The golden served after the task.
  returned: always
  type: dict
  contains:
    snapshot:
      description: Name of the golden.
      type: str
      sample: golden-ubuntu-24-04-20260828-f0dea74da9c5
    namespace:
      description: Its namespace.
      type: str
      sample: golden-images-block
    release_digest:
      description: The digest written with it (selection path).
      type: str
      sample: "sha256:f0dea74da9c54ba4728b2f4841316490cadd66b7ab1ed10de46549d457eb5018"
    selection:
      description: C(<namespace>/<name>) of the GoldenImageSelection written (selection path).
      type: str
      sample: golden-images/ubuntu-24-04-block
    handle:
      description: Snapshot handle of the golden's bound content, what every project should resolve to.
      type: str
      sample: lab-snap-3f1c
selection:
  description: The GoldenImageSelection after the task (in check mode, the predicted object).
  returned: with method selection
  type: dict
labels:
  description: The label writes, C(removed) (golden names, in order) then C(added).
  returned: with method label
  type: dict
  sample:
    removed: [golden-ubuntu-24-04-20260101-0123456789ab]
    added: golden-ubuntu-24-04-20260828-f0dea74da9c5
window_seconds:
  description:
    - Seconds between the first and the last label write, during which zero goldens of the family were active.
    - 0 when there was one write or none.
  returned: with method label
  type: float
  sample: 0.012
explanation:
  description: Why neither intermediate state of the label path is safe; recommends the selection path.
  returned: with method label
  type: str
conflicts:
  description:
    - Conflicts found before the write (C(two_selections), C(broken_selection), C(two_active),
      C(zero_active)), each with C(type), C(family), C(mode), C(names) and C(message).
  returned: always
  type: list
  elements: dict
governs_nothing:
  description: Selections of the family whose family or mode matches no golden, each with a C(message).
  returned: always
  type: list
  elements: dict
projects:
  description:
    - Per project namespace, sorted, what it resolved to; empty without O(verify_projects).
  returned: always
  type: list
  elements: dict
  contains:
    namespace:
      description: Project namespace.
      type: str
    snapshot:
      description: The seeded VolumeSnapshot (C(golden-<family>) or C(golden-<family>-block)), or null.
      type: str
    content:
      description: Its bound VolumeSnapshotContent.
      type: str
    handle:
      description:
        - The snapshot handle the project resolved to, through a content bound back to its snapshot
          (the content's C(spec.volumeSnapshotRef.uid) is the snapshot's); null otherwise.
      type: str
    expected:
      description: The handle of the selected golden.
      type: str
    match:
      description: Whether the two handles are equal and the project snapshot is C(readyToUse).
      type: bool
    seeded_from:
      description: The C(kube-dc.com/seeded-from) annotation of the project snapshot.
      type: str
    reason:
      description: One sentence on the outcome.
      type: str
gate_passed:
  description:
    - The gate pass clone_gate recorded on the served golden for its release digest (annotation
      C(goldenimage.pipeline/gate)); null when it records none (then C(ungated) says who served it and why).
  returned: always
  type: dict
  sample:
    verdict: passed
    release_digest: "sha256:f0dea74da9c54ba4728b2f4841316490cadd66b7ab1ed10de46549d457eb5018"
    candidate: golden-images-block/golden-ubuntu-24-04-20260828-f0dea74da9c5
    snapshot_handle: snapshot-3b0c
    run: 3fa1c2d4
    at: "2026-08-28T10:02:11Z"
    proof: guest-agent
    project: acme
ungated:
  description:
    - With O(allow_ungated=true) and no gate pass, the record written on the golden (C(by), C(why), C(at)).
  returned: when a golden was served without a gate pass
  type: dict
  sample: {by: ops, why: "hotfix, change CHG-4411", at: "2026-08-28T10:02:11Z"}
selections:
  description: Every selection this run moved (C(namespace/name)), when several govern the family and mode.
  returned: when several selections governed the family and mode
  type: list
  elements: str
  sample: [golden-images/ubuntu-24-04-block, golden-images-block/ubuntu-24-04-block]
rollback:
  description:
    - With O(rollback=true) when nothing was written, V(noop) true and V(reason), why the named state
      already holds.
  returned: when a rollback changed nothing
  type: dict
  sample: {noop: true, reason: "GoldenImageSelection golden-images/deb-filesystem was already rolled back"}
unresolved:
  description: Project namespaces that did not resolve to the selected handle.
  returned: always
  type: list
  elements: str
duration:
  description: Seconds spent verifying projects, counted from O(started).
  returned: always
  type: float
done:
  description: Whether every project resolved to the selected handle.
  returned: with O(verify_projects=true)
  type: bool
line:
  description: The progress line of the verification's last round (also printed by the action plugin).
  returned: with O(verify_projects=true)
  type: str
  sample: "Projects: 2 of 3 resolved to lab-snap-3f1c (snapshot golden-x); waiting for team-c after 31.0s"
lines:
  description: Every progress line printed while the projects were verified, one per round.
  returned: always
  type: list
  elements: str
diff:
  description: Before and after of the selection, or a list of them, one per golden relabelled.
  returned: when diff mode is on
  type: raw
"""

import getpass
import json
import time

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import inputs
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import rounds as rounds_
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common._wait import RoundRunner, Wait
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import (
    PipelineError,
    run_module,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import (
    golden,
    golden_inventory,
    serving,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import selection as rules
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden._golden_observe import observe
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import kinds
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import (
    FIRST_POLL,
    KubeModule,
    is_transient,
    object_diff,
)

API = golden.SNAPSHOT_API_VERSION
KIND = golden.SNAPSHOT_KIND


def argument_spec():
    return dict(
        family=dict(type="str", required=True),
        mode=dict(type="str", default=golden.FILESYSTEM),
        snapshot=dict(type="str"),
        release_digest=dict(type="str"),
        method=dict(type="str", choices=["selection", "label"], default="selection"),
        rollback=dict(type="bool", default=False),
        allow_ungated=dict(type="bool", default=False),
        ungated_reason=dict(type="str"),
        ungated_by=dict(type="str"),
        verify_projects=dict(type="bool", default=False),
        namespace=dict(type="str"),
        project_selector=dict(type="str", default=rules.PROJECT_SELECTOR),
        **rounds_.round_arg_spec(
            1200, 15, timeout_aliases=["verify_timeout"], sleep_aliases=["verify_interval"]
        ),
        verify_handle=dict(type="str"),
        verify_snapshot=dict(type="str"),
    )


_name = kinds.name
_ns = kinds.namespace


class Promotion:
    """The runner: ``run()`` returns the result or raises a PipelineError; it never exits."""

    def __init__(self, module, clock=time.time, sleeper=None):
        self.module = module
        self.clock = clock
        self.sleeper = sleeper
        self.params = module.params
        self.result = {
            "changed": False,
            "method": self.params["method"],
            "previous": {},
            "selected": {},
            "conflicts": [],
            "governs_nothing": [],
            "projects": [],
            "unresolved": [],
            "duration": 0.0,
            "gate_passed": None,
        }
        self.family = None
        self.mode = None
        self.golden_ns = None
        self.selection_ns = None

    def with_result(self, error):
        """``error`` (a PipelineError) with this run's result fields, ready to raise."""
        for key, value in self.result.items():
            error.fields.setdefault(key, value)
        return error

    def run(self):
        p = self.params
        try:
            inputs.positive_all(p, ("wait_timeout", "wait_sleep", "report_every"))
            self.prepare()
            if p["verify_handle"]:
                return self.verify_only()
            return self.by_label() if p["method"] == "label" else self.by_selection()
        except PipelineError as exc:
            raise self.with_result(exc) from None

    def prepare(self):
        p = self.params
        self.family = golden.validate_family(p["family"])
        self.mode = golden.normalize_mode(p["mode"])
        if p["release_digest"]:
            golden.normalize_digest(p["release_digest"])
        rules.refuse_promotion_inputs(p["snapshot"], p["rollback"])
        self.result["mode"] = self.mode
        self.result["family"] = self.family
        self.golden_ns = golden.namespace_for(self.mode)
        self.selection_ns = p["namespace"] or rules.SELECTION_NAMESPACE

    def read(self):
        goldens = self.module.list(API, KIND, self.golden_ns)
        selections = []
        served = self.module.served(rules.SELECTION_API_VERSION, rules.SELECTION_KIND)
        rules.refuse_without_selection_kind(self.params["method"], served)
        if served:
            # The consumer reads the selections of both golden namespaces: a conflict may sit in either.
            spaces = [golden.NAMESPACES[golden.FILESYSTEM], golden.NAMESPACES[golden.BLOCK]]
            if self.selection_ns not in spaces:
                spaces.append(self.selection_ns)
            for namespace in spaces:
                selections.extend(
                    self.module.list(rules.SELECTION_API_VERSION, rules.SELECTION_KIND, namespace)
                )
        return goldens, selections

    def report_state(self, goldens, selections):
        before = rules.resolve_serving(goldens, selections, self.family, self.mode)
        self.result["conflicts"] = before["conflicts"]
        own = [s for s in selections if kinds.spec(s).get("family") == self.family]
        self.result["governs_nothing"] = rules.idle_selections(own, goldens)
        for idle in self.result["governs_nothing"]:
            self.module.warn(idle["message"])
        return before

    def check_candidate(self, goldens, name):
        found = rules.find_golden(goldens, name, self.mode)
        rules.refuse_candidate(found, name, self.golden_ns, self.family, self.mode)
        return found

    def rollback(self, record, what, current, missing):
        plan = rules.rollback_plan(record, what, current, named=self.params["snapshot"], missing=missing)
        if plan["noop"]:
            self.result["rollback"] = {"noop": True, "reason": plan["reason"]}
        return plan

    def truth(self):
        """The serving truth of the pair, from the one observation every guard reads."""
        namespaces = golden_inventory.golden_namespaces()
        observed = observe(self.module, namespaces, self.family)
        return serving.truth(observed, self.family, self.mode, namespaces)

    def intent(self, goldens, target, what, noop, state):
        """The candidate, checked: the golden contract, then a gate pass recorded for its release digest or
        the override on the record (written on the golden before the selection or label moves)."""
        p = self.params
        candidate = self.check_candidate(goldens, target)
        handle = state["handles"].get(target)
        if noop or serving.serves_on_purpose(state, target):
            # Nothing new is served: the gate was asked when it was served (a verification, a rerun).
            self.result["gate_passed"] = serving.gate_pass(candidate, handle)
            return candidate
        if serving.refuse_ungated(
            candidate, target, what, self.mode, p["allow_ungated"], p["ungated_reason"], handle
        ):
            by = p["ungated_by"] or getpass.getuser()
            recorded = serving.ungated_recorded(candidate)
            if serving.ungated_changes(recorded, by, p["ungated_reason"]):
                now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock()))
                record = serving.ungated_record(by, p["ungated_reason"], now)
                patch = {"metadata": {"annotations": {serving.UNGATED: record}}}
                candidate, _changed = self.module.patch(
                    API, KIND, target, self.golden_ns, patch, before=candidate
                )
                self.result["changed"] = True
                recorded = json.loads(record)
            self.result["ungated"] = recorded
            self.module.warn(
                "serving %s without a gate pass, on purpose: %s (by %s)" % (target, p["ungated_reason"], by)
            )
        self.result["gate_passed"] = serving.gate_pass(candidate, handle)
        return candidate

    # method=selection ----------------------------------------------------------------------------

    def by_selection(self):
        p = self.params
        goldens, selections = self.read()
        before = self.report_state(goldens, selections)
        state = self.truth()
        existing = rules.governing_selection(selections, self.family, self.mode)
        wanted_name = rules.selection_name(self.family, self.mode)
        if existing is None:
            existing = next(
                (s for s in selections if _name(s) == wanted_name and _ns(s) == self.selection_ns), None
            )
        spec = kinds.spec(existing)
        self.result["previous"] = {
            "snapshot": before["snapshot"]
            if before["path"] != rules.PATH_SELECTION
            else spec.get("snapshotName") or None,
            "release_digest": spec.get("releaseDigest"),
            "path": before["path"],
        }
        noop = False
        what = (
            "GoldenImageSelection %s/%s" % (_ns(existing), _name(existing))
            if existing is not None
            else "GoldenImageSelection for %s/%s" % (self.family, self.mode)
        )
        if p["rollback"]:
            missing = "no GoldenImageSelection governs %s/%s in %s, so no previous snapshot is recorded" % (
                self.family,
                self.mode,
                self.selection_ns,
            )
            plan = self.rollback(existing, what, spec.get("snapshotName"), missing)
            target, digest, noop = plan["target"], plan["digest"], plan["noop"]
            if noop:
                digest = spec.get("releaseDigest")
        else:
            target, digest = p["snapshot"], p["release_digest"]
        candidate = self.intent(goldens, target, what, noop, state)
        digest = rules.served_digest(candidate, digest, target)
        previous = serving.rollback_previous(state)
        previous = previous if previous[0] and previous[0] != target else None

        if existing is None:
            after = self.module.create(
                rules.selection_definition(
                    wanted_name, self.selection_ns, self.family, self.mode, target, digest, previous
                )
            )
            changed, written = True, [(None, after)]
        else:
            # Every selection governing the pair moves in this run: none is left naming the old golden.
            written, changed = [], False
            for sel in rules.selections_for(selections, self.family, self.mode) or [existing]:
                patch = (
                    None
                    if noop
                    else rules.plan_selection(sel, self.family, self.mode, target, digest, previous)
                )
                patch = rules.mark_change(patch, sel, rollback=p["rollback"] and not noop)
                after = sel
                if patch:
                    after, one = self.module.patch(
                        rules.SELECTION_API_VERSION,
                        rules.SELECTION_KIND,
                        _name(sel),
                        _ns(sel),
                        patch,
                        before=sel,
                    )
                    changed = changed or one
                written.append((sel, after))
            after = written[0][1]
        self.result["changed"] = self.result["changed"] or changed
        self.result["selection"] = after
        if self.module._diff:
            diffs = [object_diff(old, new) for old, new in written]
            self.result["diff"] = diffs[0] if len(diffs) == 1 else diffs
        self.result["selected"] = {
            "snapshot": target,
            "namespace": self.golden_ns,
            "release_digest": kinds.spec(after).get("releaseDigest"),
            "selection": "%s/%s" % (_ns(after) or self.selection_ns, _name(after)),
        }
        if len(written) > 1:
            self.result["selections"] = ["%s/%s" % (_ns(new), _name(new)) for _old, new in written]
        return self.verify(candidate)

    # method=label --------------------------------------------------------------------------------

    def by_label(self):
        p = self.params
        goldens, selections = self.read()
        before = self.report_state(goldens, selections)
        rules.refuse_label_path(
            rules.selections_for(selections, self.family, self.mode), self.family, self.mode
        )
        self.result["explanation"] = rules.UNSAFE_LABEL_PATH
        incumbent = rules.active_golden(goldens, self.family, self.mode)
        self.result["previous"] = {
            "snapshot": before["snapshot"],
            "release_digest": None,
            "path": before["path"],
        }
        rolled_back = False
        if p["rollback"]:
            missing = "%s/%s has no single active golden to read the recorded previous snapshot from (%s)" % (
                self.family,
                self.mode,
                before["reason"],
            )
            what = (
                "%s %s/%s" % (KIND, self.golden_ns, _name(incumbent))
                if incumbent
                else "%s/%s"
                % (
                    self.family,
                    self.mode,
                )
            )
            plan = self.rollback(incumbent, what, _name(incumbent), missing)
            target, rolled_back = plan["target"], not plan["noop"]
        else:
            target = p["snapshot"]
            what = "%s on the label path" % golden.ACTIVE_LABEL
        noop = not rolled_back and p["rollback"]
        state = self.truth()
        candidate = self.intent(goldens, target, what, noop, state)
        previous = serving.rollback_previous(state)
        recorded = self.result["changed"]
        plan = rules.label_plan(goldens, self.family, self.mode, target)
        original = {_name(g): g for g in goldens}
        diffs, by_name = [], dict(original)
        removed, first_write, last_write = [], None, None
        for name in plan["remove"]:
            first_write = first_write or time.monotonic()
            after, _changed = self.module.patch(
                API,
                KIND,
                name,
                self.golden_ns,
                {"metadata": {"labels": {golden.ACTIVE_LABEL: None}}},
                by_name[name],
            )
            last_write = time.monotonic()
            by_name[name] = after
            removed.append(name)
            diffs.append(object_diff(original[name], after))
        if plan["add"]:
            meta = {"labels": {golden.ACTIVE_LABEL: "true"}}
            if previous[0] and previous[0] != target:
                meta["annotations"] = rules.previous_annotations(previous)
            first_write = first_write or time.monotonic()
            patch = rules.mark_change({"metadata": meta}, candidate, rollback=rolled_back)
            after, _changed = self.module.patch(API, KIND, target, self.golden_ns, patch, candidate)
            last_write = time.monotonic()
            diffs.append(object_diff(candidate, after))
            by_name[target] = after
            candidate = after
        self.result["changed"] = bool(recorded or removed or plan["add"])
        self.result["labels"] = {"removed": removed, "added": plan["add"]}
        self.result["window_seconds"] = round(last_write - first_write, 3) if removed and plan["add"] else 0.0
        if self.module._diff:
            self.result["diff"] = diffs
        if self.result["changed"]:
            self.module.warn(rules.UNSAFE_LABEL_PATH)
        # Re-read: another writer may have moved a label meanwhile; in check mode use the prediction.
        current = (
            list(by_name.values()) if self.module.check_mode else self.module.list(API, KIND, self.golden_ns)
        )
        problems = rules.active_problems(current, self.family, self.mode, target)
        self.result["selected"] = {"snapshot": target, "namespace": self.golden_ns}
        rules.active_after_move(problems)
        return self.verify(candidate)

    # Projects ------------------------------------------------------------------------------------

    def expected_handle(self, candidate):
        bound = kinds.status(candidate).get("boundVolumeSnapshotContentName")
        content = self.module.get(rules.CONTENT_API_VERSION, rules.CONTENT_KIND, bound) if bound else None
        return kinds.snapshot_handle(content)

    def resolutions(self, expected):
        p = self.params
        projects = [
            _name(ns) for ns in self.module.list("v1", "Namespace", label_selector=p["project_selector"])
        ]
        snapshots = self.module.list(API, KIND, label_selector="%s=%s" % (golden.FAMILY_LABEL, self.family))
        wanted = rules.project_snapshot_name(self.family, self.mode)
        names = {
            kinds.status(s).get("boundVolumeSnapshotContentName") for s in snapshots if _name(s) == wanted
        }
        # Few projects: read their contents one by one; many: one list is cheaper.
        if len(names) <= 20:
            contents = [
                c
                for c in (
                    self.module.get(rules.CONTENT_API_VERSION, rules.CONTENT_KIND, n) for n in names if n
                )
                if c
            ]
        else:
            contents = self.module.list(rules.CONTENT_API_VERSION, rules.CONTENT_KIND)
        return rules.project_resolutions(projects, snapshots, contents, self.family, self.mode, expected)

    def verify(self, candidate):
        p = self.params
        if not p["verify_projects"]:
            return self.result
        expected = self.expected_handle(candidate)
        self.result["selected"]["handle"] = expected
        rules.verifiable_handle(expected, self.golden_ns, _name(candidate))
        self.result.update(self.verify_round(expected, _name(candidate)))
        return self.result

    def verify_round(self, expected, snapshot):
        """One round of the wait for every project to resolve to ``expected``: it returns at the first
        change, after O(report_every) seconds, or when all resolved; it raises on the time-out."""
        p = self.params
        rounds = rounds_.from_params(p, self.clock())
        runner = RoundRunner(
            rounds,
            p["wait_sleep"],
            self.clock,
            self.sleeper,
            is_transient,
            # A quick seeder is seen at once, a slow one is not hammered.
            first_sleep=FIRST_POLL,
            quiet_first=True,
            stop=self.module.check_mode or not p["wait"],
        )
        return runner.run(Verification(self, rounds, expected, snapshot), [])

    def verified(self, found, rounds, now, expected, snapshot, done):
        elapsed = rounds.elapsed(now)
        fields = {
            "projects": found,
            "unresolved": rules.unresolved(found),
            "duration": round(elapsed, 3),
            "done": done,
            "line": rules.verification_line(found, expected, snapshot, elapsed),
        }
        if not done and not self.module.check_mode and self.params["wait"]:
            fields["resume"] = dict(rounds.resume(), verify_handle=expected, verify_snapshot=snapshot)
        return fields

    def verify_only(self):
        """A later round (from C(resume)): the write is done; only the projects are checked."""
        p = self.params
        self.result = {"changed": False}
        self.result.update(self.verify_round(p["verify_handle"], p["verify_snapshot"]))
        return self.result


class Verification(Wait):
    """The hooks of the wait for every project to resolve to the handle ``expected`` (of ``snapshot``)."""

    def __init__(self, promotion, rounds, expected, snapshot):
        self.promotion, self.rounds, self.expected, self.snapshot = promotion, rounds, expected, snapshot

    def observe(self):
        return self.promotion.resolutions(self.expected)

    def state(self, seen):
        return rules.verification_state(seen)

    def verdict(self, seen, now):
        return not rules.unresolved(seen), None

    def report(self, found, now, done, going_on):
        return self.promotion.verified(found, self.rounds, now, self.expected, self.snapshot, done)

    def timed_out(self, found, now, stuck, words):
        fields = self.report(found, now, False, False)
        fields.pop("resume", None)
        timeout = self.promotion.params["wait_timeout"]
        return PipelineError(
            rules.verification_timeout(found, self.expected, self.snapshot, timeout, words),
            stuck=stuck,
            **fields,
        )


def main():
    module = KubeModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(module, lambda: Promotion(module).run())


if __name__ == "__main__":
    main()
