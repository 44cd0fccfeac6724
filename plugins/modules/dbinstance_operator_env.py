#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: dbinstance_operator_env
short_description: Set the DBInstance operator's default OS stream and replica count, wait for the rollout
version_added: 0.1.0
description:
  - The DBInstance operator reads the default OS stream new databases get from its C(BACKING_IMAGE_OS_VERSION)
    environment variable and the backing image replica count from C(BACKING_IMAGE_REPLICAS). Both live in the
    env of the container of its Deployment; flipping one is an env change and a rolling restart.
  - O(os_version) sets C(BACKING_IMAGE_OS_VERSION). The stream must pass the catalog's gate for a default
    OS stream, the one M(goldenimage.pipeline.baked_image_stream) applies to the catalog's C(default_stream),
    in the catalog, with a registered tip, validated. Anything else is refused, naming the stream, before the
    Deployment is written.
  - O(replicas) sets C(BACKING_IMAGE_REPLICAS); O(replicas_from_nodes=true) sets it to the number of
    schedulable Nodes (not cordoned, C(Ready=True), no C(NoSchedule) or C(NoExecute) taint).
  - An env var read from C(valueFrom) is refused (the value written would not be the one the operator reads).
  - Every run reports C(drift) between the env and the records it should follow, whether or not anything is
    set, C(BACKING_IMAGE_OS_VERSION) against the catalog's default stream (with O(catalog)), and
    C(BACKING_IMAGE_REPLICAS) against the schedulable Node count (when Nodes can be listed).
  - With O(catalog), RV(provenance) says per revision who signed it, from what inputs, and whether the facts
    recorded at signing still match; a revision whose recorded signature no longer holds under the
    catalog's trust policy is a C(drift) entry.
  - With O(catalog), the drift also names each published revision (imported, its image recorded) whose
    backing image holds fewer copies than there are schedulable Nodes. What it holds is read from the
    image's Longhorn C(BackingImage), the disks whose copy is C(ready) in C(status.diskFileStatusMap), not
    from the StorageClass parameter alone (a node added after a revision was published gets no copy of it).
    Each such entry carries the remedies in order, first a Longhorn StorageClass used only for baked images
    (never a change to the cluster default class), then Longhorn's minimum copies on that BackingImage, or
    a new revision. RV(copies) lists what every published revision holds.
  - The env is written with a merge patch guarded by the Deployment's C(resourceVersion); the task then waits
    for the rollout (C(observedGeneration) caught up, every replica updated and available), printing a line
    at least every O(report_every) seconds. A rollout still under way from an earlier run is waited for too.
author:
  - goldenimage.pipeline maintainers (@goldenimage)
options:
  name:
    description: Name of the operator's Deployment.
    type: str
    required: true
  namespace:
    description: Namespace of the operator's Deployment.
    type: str
    required: true
  container:
    description: The operator's container in the Deployment. Needed only when the pod has more than one.
    type: str
  os_version:
    description:
      - The OS stream to set C(BACKING_IMAGE_OS_VERSION) to, for example C("24.04"). Requires O(catalog).
      - Give it as a quoted string; an unquoted YAML number (C(24.10) reads as C(24.1)) is refused.
    type: raw
  replicas:
    description: The backing image replica count to set C(BACKING_IMAGE_REPLICAS) to, at least 1.
    type: int
  replicas_from_nodes:
    description: Set C(BACKING_IMAGE_REPLICAS) to the number of schedulable Nodes. Exclusive with O(replicas).
    type: bool
    default: false
  drops_majors:
    description:
      - The PostgreSQL majors moving new instances to O(os_version) drops knowingly. A stream whose tip does
        not carry a major that databases following the default stream run, not yet past end of life, strands
        them (the operator marks them C(PGVersionEOL) and refuses every repave); such a change is refused,
        before the write, unless each such major is named here. Every DBInstance of the cluster is read, the
        rule is the one M(goldenimage.pipeline.baked_image_stream) applies to a catalog default flip.
      - The instances affected are returned in RV(stranded) and warned about either way.
    type: list
    elements: raw
    default: []
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - goldenimage.pipeline.catalog
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.actiongroup_k8s
  - goldenimage.pipeline.wait_rounds
attributes:
  check_mode:
    support: full
    details: Predicts the env change and the drift; writes nothing and waits for nothing.
  diff_mode:
    support: full
    details: The diff is the operator container's env before and after.
  idempotent:
    support: full
notes:
  - "Runs on the controller; use C(delegate_to: localhost) when the play targets other hosts."
  - Listing Nodes needs cluster-wide C(list nodes); without it O(replicas_from_nodes) is refused and the
    replica drift is not reported.
  - Reading the copies needs C(get) on the VirtualMachineImages, on StorageClasses and on
    C(backingimages.longhorn.io) in C(longhorn-system); a revision whose BackingImage cannot be read is
    compared by its class's count.
seealso:
  - module: goldenimage.pipeline.baked_image_stream
"""

EXAMPLES = r"""
- name: After 24.04 is validated and the catalog's default, point the operator at it and wait for the rollout
  goldenimage.pipeline.dbinstance_operator_env:
    namespace: dbaas-system
    name: dbinstance-operator
    os_version: "24.04"
    catalog: {namespace: dbaas-system, name: baked-image-catalog}

- name: One backing image copy per schedulable node
  goldenimage.pipeline.dbinstance_operator_env:
    namespace: dbaas-system
    name: dbinstance-operator
    replicas_from_nodes: true

- name: Only report drift (sets nothing, waits for a rollout only if one is under way)
  goldenimage.pipeline.dbinstance_operator_env:
    namespace: dbaas-system
    name: dbinstance-operator
    catalog: {namespace: dbaas-system, name: baked-image-catalog}
  register: operator_env

- name: Say what drifted
  ansible.builtin.debug:
    msg: "{{ operator_env.drift | map(attribute='message') | list }}"
"""

RETURN = r"""
stranded:
  description:
    - The databases this change leaves on a major the new stream's tip does not carry, each
      C({namespace, name, major, stream, tip, eol_date, migrate_by, deleted_after}); empty when none.
  returned: always
  type: list
  elements: dict
changed:
  description: Whether the env was (or, in check mode, would be) changed.
  returned: always
  type: bool
env:
  description: C(BACKING_IMAGE_OS_VERSION) and C(BACKING_IMAGE_REPLICAS) after the task (null when unset).
  returned: success
  type: dict
  sample: {BACKING_IMAGE_OS_VERSION: "24.04", BACKING_IMAGE_REPLICAS: "4"}
container:
  description: The operator's container.
  returned: success
  type: str
  sample: manager
catalog_default_stream:
  description: The catalog's default OS stream (with O(catalog)).
  returned: success
  type: str
  sample: "24.04"
schedulable_nodes:
  description: Names of the schedulable Nodes; null when Nodes cannot be listed.
  returned: success
  type: list
  elements: str
drift:
  description:
    - Each disagreement between the env and its record, with the supported C(move). Empty when none.
  returned: success
  type: list
  elements: dict
  sample:
    - what: BACKING_IMAGE_OS_VERSION
      operator: "22.04"
      expected: "24.04"
      message: BACKING_IMAGE_OS_VERSION is 22.04 but the catalog's default OS stream is 24.04
      move: set it with goldenimage.pipeline.dbinstance_operator_env os_version, ...
    - what: BackingImage copies
      revision: v20261201-2404
      operator: 3
      expected: 4
      message: revision v20261201-2404 holds 3 ready copies of BackingImage longhorn-system/... but 4 nodes
        are schedulable, so a VM on a node without a copy waits for one at first boot
      move: create a Longhorn StorageClass used only for baked images with numberOfReplicas "4" ...
      remedies:
        - create a Longhorn StorageClass used only for baked images ...
        - raise Longhorn's minimum copies of BackingImage ...
        - or publish a new revision ...
provenance:
  description:
    - Per revision registered in O(catalog), who signed it and from what, as
      M(goldenimage.pipeline.golden_info) reports a golden's (the same rule) - C(revision), C(os_version),
      C(verdict), C(key), C(signer) (the trust policy's name of the key), C(relaxed) (the reason, when it
      registered unsigned), C(artifact), C(inputs), C(builder) and C(time) (what its signed provenance
      names), C(facts_match) (whether the image facts the entry records are the ones the signed statement
      names, by the SHA-256 of their canonical JSON; null when either is missing).
    - C(holds) says whether the recorded verdict holds under the catalog's trust policy today and belongs to
      this revision's artifact and checksum, as M(goldenimage.pipeline.dbinstance_repave) checks before any
      step; C(problem) and C(move) say why not. Each revision that does not hold is also a C(drift) entry
      with C(what) V(signature).
    - null without O(catalog).
  returned: success
  type: list
  elements: dict
  sample:
    - revision: v20261201-2404
      os_version: "24.04"
      verdict: verified
      key: 3f1c0b9e5a7d2e84c6f1a9b0d3e5c7a9b1d3f5e7a9c1b3d5f7e9a1c3b5d7f9e1
      signer: release-2026
      relaxed: null
      artifact: ubuntu-2404-postgres-v20261201-2404.qcow2
      inputs: [{name: packer-template, digest: {sha256: 5e3b...}}]
      builder: {playbook: publish.yml, host: build-01, collection_version: 0.1.0}
      time: "2026-12-01T04:10:00Z"
      facts_match: null
      holds: true
      problem: null
      move: null
copies:
  description:
    - What each published revision of O(catalog) holds (see M(goldenimage.pipeline.baked_image) RV(copies));
      null without O(catalog) or when Nodes cannot be listed.
  returned: success
  type: list
  elements: dict
done:
  description: Whether the rollout is complete.
  returned: success
  type: bool
rollout:
  description: Generation, observed generation and replica counts of the Deployment after the task.
  returned: success
  type: dict
  sample: {generation: 3, observed: 3, wanted: 2, replicas: 2, updated: 2, ready: 2, available: 2}
line:
  description: The progress line of the last round (also printed by the action plugin).
  returned: always
  type: str
  sample: "Deployment dbaas/dbinstance-operator rollout: 1 of 2 replicas updated, 1 ready, 1 available (4s)"
lines:
  description: Every line printed while the task waited, one per round.
  returned: always
  type: list
  elements: str
resume:
  description: What the next round needs to continue the wait (used by the action plugin).
  returned: when the wait is not over
  type: dict
duration:
  description: Seconds waited so far.
  returned: always
  type: float
diff:
  description: The operator container's env before and after, with C(--diff).
  returned: when diff mode is on and the env changes
  type: dict
"""

import copy
import time

from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import (
    _backing_copies,
    backing_copies,
    catalog,
    operator_env,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked._catalog_store import (
    CatalogStore,
    catalog_options,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import inputs
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import rounds as rounds_
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common._wait import RoundRunner, Wait
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import (
    PipelineError,
    run_module,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeError, KubeModule
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
from ansible_collections.goldenimage.pipeline.plugins.module_utils.repave._dbinstances import all_dbinstances

API = "apps/v1"
KIND = "Deployment"
VARS = (operator_env.OS_ENV, operator_env.REPLICAS_ENV)


def argument_spec():
    return rounds_.object_arg_spec(
        container=dict(type="str"),
        os_version=dict(type="raw"),
        replicas=dict(type="int"),
        replicas_from_nodes=dict(type="bool", default=False),
        catalog=catalog_options(),
        drops_majors=dict(type="list", elements="raw", default=[]),
    )


class OperatorEnv(Wait):
    """One round: set the env (first round), report drift, wait for the rollout until the round is over."""

    def __init__(self, module, clock=time.time, sleeper=None):
        self.module = module
        self.p = module.params
        self.clock = clock
        self.sleeper = sleeper
        self.ref = operator_env.where(self.p["namespace"], self.p["name"])

    def checked(self):
        p = self.p
        rounds = rounds_.from_params(p, self.clock())
        stream = inputs.version_string(p["os_version"], "os_version") if p["os_version"] is not None else None
        operator_env.check_request(
            self.ref, stream, bool(p["catalog"]), p["replicas"], p["replicas_from_nodes"]
        )
        return rounds, stream

    def read(self):
        return self.module.get(API, KIND, self.p["name"], self.p["namespace"])

    def nodes(self):
        try:
            return operator_env.schedulable_nodes(self.module.list("v1", "Node"))
        except KubeError as exc:
            if self.p["replicas_from_nodes"]:
                raise
            self.module.warn("cannot list Nodes (%s): the replica drift is not reported" % exc.msg)
            return None

    def copies(self, doc, nodes):
        """What every published revision of the catalog holds, or None when that cannot be compared."""
        if doc is None or nodes is None:
            return None
        try:
            return _backing_copies.published(self.module, doc)
        except KubeError as exc:
            self.module.warn(
                "cannot read the published revisions' images (%s): their copies are not reported" % exc.msg
            )
            return None

    def run(self):
        p = self.p
        rounds, stream = self.checked()
        before = operator_env.require_deployment(self.ref, self.read())
        container = operator_env.pick_container(before, p["container"])
        doc = CatalogStore(self.module, p["catalog"]).read() if p["catalog"] else None
        nodes = self.nodes()
        changes = {}
        stranded = []
        if stream is not None:
            operator_env.check_settable(before, container, operator_env.OS_ENV)
            changes[operator_env.OS_ENV] = operator_env.stream_for_env(doc, before, container, stream)
            stranded = self.stranded(doc, before, container, changes[operator_env.OS_ENV])
        if p["replicas"] is not None or p["replicas_from_nodes"]:
            operator_env.check_settable(before, container, operator_env.REPLICAS_ENV)
            count = operator_env.replica_count(self.ref, p["replicas"], p["replicas_from_nodes"], nodes)
            changes[operator_env.REPLICAS_ENV] = str(count)
        patch = operator_env.env_patch(before, container, changes)
        after, changed = before, False
        if patch is not None:
            after, changed = self.module.patch(API, KIND, p["name"], p["namespace"], patch, before=before)
        env = {var: operator_env.env_value(after, container, var)[0] for var in VARS}
        held = self.copies(doc, nodes)
        signed = operator_env.revision_provenance(doc, signing.record_proof) if doc else None
        result = {
            "changed": changed,
            "container": container,
            "env": env,
            "catalog_default_stream": doc["default_stream"] if doc else None,
            "schedulable_nodes": nodes,
            "drift": operator_env.drift(
                env[operator_env.OS_ENV],
                doc["default_stream"] if doc else None,
                env[operator_env.REPLICAS_ENV],
                len(nodes) if nodes is not None else None,
            )
            + backing_copies.short_of(held or [], len(nodes or []))
            + operator_env.provenance_drift(signed or []),
            "copies": held,
            "provenance": signed,
            "stranded": stranded,
        }
        if self.module._diff and changed:
            result["diff"] = {
                "before": {var: operator_env.env_value(before, container, var)[0] for var in VARS},
                "after": copy.deepcopy(env),
            }
        if self.module.check_mode or not p["wait"]:
            return self.finish(result, after, rounds, operator_env.rollout_verdict(after)[0])
        return self.wait(result, after, rounds, changes)

    def stranded(self, doc, before, container, stream):
        """The databases moving new instances to ``stream`` strands (every DBInstance of the cluster that
        follows the default stream, on a supported major the new stream's tip does not carry); refused,
        before the write, unless drops_majors names each major. The same rule as a catalog default flip."""
        current = operator_env.env_value(before, container, operator_env.OS_ENV)[0] or doc["default_stream"]
        if not current or current == stream:
            return []
        databases = [d for d in map(catalog.database_of, all_dbinstances(self.module)) if d]
        found = catalog.stranded(
            dict(doc, default_stream=current), dict(doc, default_stream=stream), databases
        )
        catalog.require_named_drops(found, self.p["drops_majors"])
        for entry in found:
            self.module.warn(
                "DBInstance %s/%s runs PostgreSQL %s, which the tip of stream %s does not carry: it turns "
                "PGVersionEOL; its owner migrates it by %s"
                % (entry["namespace"], entry["name"], entry["major"], stream, entry["migrate_by"])
            )
        return found

    def wait(self, result, obj, rounds, changes):
        self.result, self.rounds, self.first = result, rounds, obj
        self.what = ", ".join("%s=%s" % kv for kv in sorted(changes.items())) or "its current template"
        # The state right after the write is not news: the round reports the rollout's first change.
        return RoundRunner(rounds, self.p["wait_sleep"], self.clock, self.sleeper, quiet_first=True).run(self)

    def observe(self):
        obj, self.first = self.first, None
        return self.read() if obj is None else obj

    def state(self, seen):
        return operator_env.rollout_state(seen)

    def verdict(self, seen, now):
        return operator_env.rollout_verdict(seen)

    def failed(self, seen, failure, now):
        return PipelineError(
            operator_env.rollout_failed_message(self.ref, self.what, failure, self.state(seen)),
            **self.fields(self.result, seen, self.rounds, now),
        )

    def timed_out(self, obj, now, stuck, words):
        return PipelineError(
            operator_env.rollout_timeout_message(
                self.ref, self.what, self.p["wait_timeout"], words, self.state(obj)
            ),
            stuck=stuck,
            **self.fields(self.result, obj, self.rounds, now),
        )

    def report(self, obj, now, done, going_on):
        return self.finish(self.result, obj, self.rounds, done)

    def fields(self, result, obj, rounds, now):
        out = dict(result)
        out.update(
            rollout=operator_env.rollout(obj) if obj else None,
            line="%s rollout: %s (%ds)"
            % (self.ref, operator_env.rollout_state(obj), int(rounds.elapsed(now))),
            duration=round(rounds.elapsed(now), 3),
        )
        return out

    def finish(self, result, obj, rounds, done):
        out = self.fields(result, obj, rounds, self.clock())
        out["done"] = done
        if not done and not self.module.check_mode and self.p["wait"]:
            out["resume"] = rounds.resume()
        return out


def main():
    module = KubeModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(module, lambda: OperatorEnv(module).run())


if __name__ == "__main__":
    main()
