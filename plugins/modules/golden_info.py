#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: golden_info
short_description: Report Kube-DC goldens, what each family serves, conflicts, projects and clones
version_added: 0.1.0
description:
  - Read-only. Lists the goldens of each family with their candidates (date, digest, size, mode, Ready,
    active label), and says which golden each (family, mode) serves and which path decided it, a
    C(GoldenImageSelection) or the C(kube-dc.com/golden-active) label.
  - Reports the conflicts the per-project seeder does not refuse, two goldens labelled active, two
    selections naming different snapshots (the family is held), a selection naming a snapshot that
    cannot serve (the family is skipped), zero goldens active among several (the seeder takes the
    first the API lists, which is arbitrary and silent), and selections that govern nothing.
  - For every project namespace (selected by O(project_selector)) reports which snapshot handle its
    seeded copy C(golden-<family>) or C(golden-<family>-block) resolved to, which golden owns that
    handle, and whether it is the one being served.
  - Lists the PersistentVolumeClaims and DataVolumes that still restore from each golden, directly or
    through a project's seeded copy, so "does anything still clone this?" is answered before a delete.
  - The cost does not grow with the number of projects. It sends a fixed set of LIST requests, the
    VolumeSnapshots of each golden namespace, the VolumeSnapshots carrying C(kube-dc.com/golden-os) in
    all namespaces (the projects' seeded copies), VolumeSnapshotContents, PersistentVolumeClaims,
    project Namespaces, GoldenImageSelections and, when CDI is installed, DataVolumes.
author:
  - goldenimage.pipeline maintainers (@goldenimage)
options:
  family:
    description:
      - Report only this family (the value of the C(kube-dc.com/golden-os) label).
    type: str
  mode:
    description:
      - Report only V(Filesystem) or V(Block) (any casing is accepted).
    type: str
  trust_policy:
    description:
      - Today's trust policy (V(rules), V(relaxed), as M(goldenimage.pipeline.os_mirror_verify) returns it);
        each candidate then says whether the verdict recorded on it still verifies. Its evidence (the
        signature and provenance recorded with it) is verified again with the keys the policy gives as
        V(public_key), for the golden's own family and release digest.
    type: dict
  project_selector:
    description:
      - Label selector of the Kube-DC project namespaces.
    type: str
    default: kube-dc.com/project
  details:
    description:
      - How much of the report is returned.
      - V(full) returns every project entry and every consumer of each golden.
      - V(summary) returns the families and conflicts whole, only the project entries that do not
        match the served golden (at most 1000, RV(projects_omitted) counts the rest) and each golden's
        clone count without the list of consumers (RV(consumers_omitted) counts them); RV(summary)
        still counts the whole report.
      - V(auto) is V(full) up to 1000 project entries and V(summary) above, so a fleet-sized report
        stays quick to return through Ansible.
    type: str
    choices: [auto, full, summary]
    default: auto
  namespaces:
    description:
      - The namespaces that hold goldens, when a cluster does not use the contract's defaults.
      - GoldenImageSelections are read from these namespaces too.
    type: dict
    suboptions:
      filesystem:
        description: Namespace of the Filesystem goldens.
        type: str
        default: golden-images
      block:
        description: Namespace of the Block goldens.
        type: str
        default: golden-images-block
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.actiongroup_k8s
  - goldenimage.pipeline.attributes.info_module
notes:
  - "Runs on the controller; use C(delegate_to: localhost) when the play targets other hosts."
  - A golden is a snapshot of a golden namespace carrying a family, as the label C(kube-dc.com/golden-os)
    or the annotation C(kube-dc.com/os-family-id); a project's seeded copy is found by the label.
  - A C(digest) is known when a C(GoldenImageSelection) names the golden (or recorded it as the previous
    one); otherwise only C(digest_prefix), read from the versioned name, is given.
seealso:
  - module: goldenimage.pipeline.golden_snapshot
  - module: goldenimage.pipeline.golden_selection
"""

EXAMPLES = r"""
- name: Look at goldens with the cluster credentials set once
  module_defaults:
    group/goldenimage.pipeline.k8s:
      kubeconfig: "{{ kubeconfig_path }}"
  block:
    - name: Report one family
      goldenimage.pipeline.golden_info:
        family: windows-11-golden
      register: info

    - name: Say what each mode serves and why
      ansible.builtin.debug:
        msg: "{{ item.key }}: {{ item.value.snapshot }} ({{ item.value.path }}: {{ item.value.reason }})"
      loop: "{{ info.families[0].serving | dict2items }}"

    - name: Fail when a project is not served the intended golden
      ansible.builtin.assert:
        that: info.projects | rejectattr('match') | list | length == 0
        fail_msg: "{{ info.projects | rejectattr('match') | map(attribute='namespace') | list }}"

    - name: Refuse to delete a golden that something still clones
      ansible.builtin.assert:
        that: (info.clones | selectattr('name', 'equalto', old_golden) | first).count == 0

    - name: Report every family of Block goldens kept in non-default namespaces
      goldenimage.pipeline.golden_info:
        mode: block
        namespaces:
          filesystem: os-goldens
          block: os-goldens-block
"""

RETURN = r"""
changed:
  description: Always false; the module changes nothing.
  returned: always
  type: bool
  sample: false
families:
  description: One entry per family, sorted by family.
  returned: always
  type: list
  elements: dict
  contains:
    family:
      description: The family id.
      type: str
      sample: windows-11-golden
    os_name:
      description: Display name of the first candidate that carries one.
      type: str
      sample: Windows 11 Enterprise Evaluation
    candidates:
      description:
        - Every golden of the family, in API list order, with V(name), V(namespace), V(mode), V(date)
          (C(YYYYMMDD), from the versioned name, else the creation day), V(created), V(digest) (the release
          digest recorded on the golden, else by a selection), V(own_digest) (the one recorded on the golden,
          None when only a selection names one; the digest a recorded verdict must be bound to, so a golden
          with none has no provenance that verifies), V(digest_prefix), V(size)
          (C(status.restoreSize)), V(ready), V(active), V(content), V(handle),
          V(selected) (a selection names it), V(serving), V(problems) (contract violations), V(clones)
          (how many PVCs and DataVolumes restore from it), V(image_facts) (the image-facts document
          recorded on the golden, see M(goldenimage.pipeline.golden_snapshot); None when none is) and
          V(provenance) (the signature verdict recorded where its source was imported, who signed it with
          which key, the artifact and digest verified, and the inputs and builder its provenance names;
          None when none is) and V(provenance_report) (the same read by the rule the drift report of
          M(goldenimage.pipeline.dbinstance_operator_env) reads, V(verdict), V(key), V(signer), V(relaxed),
          V(inputs), V(builder), V(time) and V(facts_match), whether the image facts recorded on the golden
          are the ones its signed statement names; None when no verdict is recorded).
        - With O(trust_policy), V(provenance_verifies) (whether that verdict still holds under the policy,
          its evidence verified again for the golden's own family, release digest and image facts, as
          M(goldenimage.pipeline.golden_snapshot) O(goldenimage.pipeline.golden_snapshot#module:trust_policy)
          does) and V(provenance_problem) (why not, naming the key and the check) as well. Without it,
          V(provenance) and V(provenance_report) show what the annotation claims, verified by nothing.
      type: list
      elements: dict
      sample:
        - name: golden-windows-11-golden-20260828-f0dea74da9c5
          namespace: golden-images
          mode: Filesystem
          date: "20260828"
          digest: "sha256:f0dea74da9c54ba4728b2f4841316490cadd66b7ab1ed10de46549d457eb5018"
          digest_prefix: f0dea74da9c5
          size: 75Gi
          ready: true
          active: false
          selected: true
          serving: true
          problems: []
          clones: 12
    serving:
      description:
        - What each mode of the family serves, keyed by V(Filesystem) and V(Block), with V(snapshot) (None
          when nothing is served), V(namespace), V(path) (V(selection), V(label) or V(none), what decided),
          V(selection), V(held) (the seeder skips the family and projects keep their copy), V(reason),
          V(handle), V(conflicts) (their types) and V(order) (the candidates in the seeder's order).
        - From the serving truth that deletes and promotions ask - V(staged) (the goldens newer than the
          served one or published after it, all of them while nothing is served), V(rollback_target) (the
          golden the promotion's record names), V(why) (why the family is held) and V(gate) (the gate pass
          clone_gate recorded on each golden for its release digest, by name).
      type: dict
      sample:
        Filesystem:
          snapshot: golden-windows-11-golden-20260828-f0dea74da9c5
          namespace: golden-images
          path: selection
          selection: windows-11-golden-filesystem
          held: false
          reason: >-
            GoldenImageSelection golden-images/windows-11-golden-filesystem selects
            golden-windows-11-golden-20260828-f0dea74da9c5
          handle: snapshot-3b0c
          conflicts: []
          staged: []
          rollback_target: golden-windows-11-golden-20260801-0123456789ab
          why: ""
          gate: {golden-windows-11-golden-20260828-f0dea74da9c5: {verdict: passed, proof: guest-agent}}
conflicts:
  description:
    - Every conflict found, with V(type) (V(two_active), V(zero_active), V(two_selections),
      V(broken_selection), V(governs_nothing) or V(served_unintended)), V(family), V(mode), V(names) (the
      goldens or selections involved) and V(message).
    - V(served_unintended) - a golden the seeder serves by list order (nothing promoted it, for example a
      holding selection deleted since, or a snapshot made by hand), or one served with neither a gate pass
      nor a recorded override.
  returned: always
  type: list
  elements: dict
  sample:
    - type: zero_active
      family: debian-12
      mode: Filesystem
      names: [golden-debian-12-20260101-0123456789ab, golden-debian-12-20260828-f0dea74da9c5]
      message: "none of the 2 goldens of debian-12/Filesystem carries kube-dc.com/golden-active=true: ..."
projects:
  description:
    - One entry per project namespace and (family, mode), sorted by namespace, with V(namespace),
      V(family), V(mode), V(snapshot) (the seeded copy, None when not seeded), V(content), V(handle)
      (the handle it resolved to), V(golden) (C(<namespace>/<name>) of the golden owning that handle,
      None when no listed golden does), V(seeded_from) (the seeder's annotation), V(serving), V(expected)
      (the serving golden's handle), V(match), V(held) and V(reason).
    - When RV(details) is V(summary), only the entries whose V(match) is false, at most 1000.
  returned: always
  type: list
  elements: dict
  sample:
    - namespace: shop-prod
      family: windows-11-golden
      mode: Filesystem
      snapshot: golden-windows-11-golden
      content: kdc-shop-prod-windows-11-golden-fs
      handle: snapshot-3b0c
      golden: golden-images/golden-windows-11-golden-20260828-f0dea74da9c5
      seeded_from: golden-images/golden-windows-11-golden-20260828-f0dea74da9c5
      serving: golden-images/golden-windows-11-golden-20260828-f0dea74da9c5
      expected: snapshot-3b0c
      match: true
      held: false
      reason: resolved to the intended handle
clones:
  description:
    - One entry per golden (V(count) 0 when nothing restores from it), plus one per snapshot handle that
      no listed golden owns any more but that something still restores from (V(golden) is then None).
    - V(pvcs), V(datavolumes), V(datasources) (CDI DataSources whose C(source.snapshot) names it) and V(vms)
      (VirtualMachines whose C(dataVolumeTemplates) restore from it) name each consumer and V(via),
      V(golden) for a direct restore or the project's seeded copy C(<namespace>/<name>) it went through.
    - When RV(details) is V(summary), those lists are empty and V(count) still counts them.
  returned: always
  type: list
  elements: dict
  sample:
    - golden: golden-images/golden-windows-11-golden-20260828-f0dea74da9c5
      namespace: golden-images
      name: golden-windows-11-golden-20260828-f0dea74da9c5
      family: windows-11-golden
      mode: Filesystem
      handle: null
      count: 1
      pvcs: [{namespace: shop-prod, name: vm-1-root, via: shop-prod/golden-windows-11-golden}]
      datavolumes: []
      datasources: []
      vms: []
details:
  description: How much of the report was returned, V(full) or V(summary) (see O(details)).
  returned: always
  type: str
  sample: full
projects_omitted:
  description: Project entries left out of RV(projects) by the summary, the matching ones included.
  returned: when RV(details) is V(summary)
  type: int
  sample: 49980
consumers_omitted:
  description: Consumers left out of the lists of RV(clones) by the summary.
  returned: when RV(details) is V(summary)
  type: int
  sample: 5000
summary:
  description: Counts over the whole report, whatever O(details) returned.
  returned: always
  type: dict
  sample: {families: 2, conflicts: 1, project_entries: 500, matching: 498, not_matching: 2, clones: 40}
"""

from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import details
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common._gc import paused_gc
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import run_module
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import (
    golden,
    golden_inventory,
    selection,
    serving,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden._golden_observe import observe
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeModule
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing


def argument_spec():
    return dict(
        family=dict(type="str"),
        mode=dict(type="str"),
        project_selector=dict(type="str", default=selection.PROJECT_SELECTOR),
        trust_policy=dict(type="dict"),
        details=dict(type="str", choices=list(details.DETAILS), default="auto"),
        namespaces=dict(
            type="dict",
            options=dict(
                filesystem=dict(type="str", default=golden.NAMESPACES[golden.FILESYSTEM]),
                block=dict(type="str", default=golden.NAMESPACES[golden.BLOCK]),
            ),
        ),
    )


def run(module):
    """The runner: reads once per kind, returns the report; never exits."""
    p = module.params
    mode = golden.normalize_mode(p["mode"]) if p["mode"] else None
    if p["family"]:
        golden.validate_family(p["family"])
    chosen = p["namespaces"] or {}
    namespaces = golden_inventory.golden_namespaces(chosen.get("filesystem"), chosen.get("block"))
    # A fleet's report is hundreds of thousands of small dicts without cycles: no collector passes.
    with paused_gc():
        observed = observe(module, namespaces, p["family"], p["project_selector"])
        result = golden_inventory.report(
            observed["snapshots"],
            observed["contents"],
            observed["pvcs"],
            observed["projects"],
            observed["selections"],
            observed["datavolumes"],
            namespaces=namespaces,
            family=p["family"],
            mode=mode,
            datasources=observed["datasources"],
            vms=observed["vms"],
        )
        # The serving truth's own answers, beside what the report resolved with the same rule.
        for fam in result["families"]:
            for pair_mode, entry in fam["serving"].items():
                state = serving.truth(observed, fam["family"], pair_mode, namespaces, users=False)
                entry.update(
                    staged=state["staged"],
                    rollback_target=state["rollback_target"],
                    why=state["why"],
                    gate={name: record for name, record in state["gate"].items() if record},
                )
                found = serving.unintended(state)
                if found:
                    result["conflicts"].append(found)
    if p["trust_policy"] is not None:
        golden_inventory.judge_provenance(result, p["trust_policy"], signing.record_proof)
    for conflict in result["conflicts"]:
        module.warn(conflict["message"])
    counts = golden_inventory.summary(result)
    level = details.detail_level(p.get("details") or "auto", len(result["projects"]))
    if level == "summary":
        result = golden_inventory.condense(result)
    return dict(result, changed=False, summary=counts, details=level)


def main():
    module = KubeModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(module, lambda: run(module))


if __name__ == "__main__":
    main()
