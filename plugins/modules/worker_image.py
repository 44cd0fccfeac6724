#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: worker_image
short_description: Cozystack worker images, one golden DataVolume per Talos flavour, cloned by every pool
version_added: 0.1.0
description:
  - Keeps the Cozystack worker image catalog. Every O(images) entry becomes one golden C(DataVolume)
    C(talos-worker-<schematicID>-<version>) in O(namespace) that imports the Talos openstack raw image
    from the Image Factory once; every worker disk of every tenant pool then clones it on the storage
    layer instead of importing the same image over HTTP again.
  - O(state=present) validates the whole catalog first and writes nothing when any entry is refused. It
    creates the goldens that do not exist and refuses an entry edited after its golden exists (a
    DataVolume spec cannot be changed in place). Removing an entry stops managing its golden; this
    module never deletes a golden for that.
  - O(state=absent) deletes the golden O(name), refused while anything uses it, naming each consumer (a
    worker disk cloning it by C(source.pvc) or the golden annotation, a DataVolume or a claim whose
    DataVolume is gone, a claim cloning it by C(dataSource)
    or C(dataSourceRef), a VirtualMachine's C(dataVolumeTemplates), a VolumeSnapshot of it, a pod or a
    VirtualMachine mounting it, in any namespace) or a pool of O(pools) that names it, with the reference
    query every delete path of the collection asks.
  - O(state=info) answers, for every golden, its phase and progress and which pools and disks clone it,
    and lists the disks still annotated with a golden that no longer exists (RV(orphans)).
  - Every question about worker disks (who clones a golden, which disks a pool has, which are orphaned)
    reads DataVolumes and claims alike, so a disk whose DataVolume CDI garbage-collected (or that was made
    outside the chart) and that exists only as a claim carrying the golden annotation still counts.
  - O(state=rendered) returns the worker disk of O(pool). With C(osImage) it is a clone of the golden
    (C(source.pvc)) on the StorageClass the guards checked; without it, the HTTP import exactly as it
    rendered before this feature, so adopting it rolls no worker. It writes nothing, and refuses rather
    than degrading into a host-assisted copy.
  - A pool is identified by its tenant cluster and its name (O(pool.cluster), O(pool.name)), as the chart's
    disk names C(disk-system-<cluster>-<pool>-...) do, so two clusters of one namespace that both have a pool
    C(md0) never read each other's disks.
  - Before a clone is rendered it checks what makes a CSI clone real on this cluster, the clone strategy
    (C(CDI.spec.cloneStrategyOverride), else the StorageProfile's) and, with a C(SubjectAccessReview),
    that the pool's service accounts may create C(datavolumes/source) in O(namespace).
  - With O(trust_policy) and O(state=present), each image a golden would import is verified before anything
    is written, from the C(<url>.sig) (the detached signature C(cosign sign-blob --key) writes) and
    C(<url>.intoto.jsonl) (its signed provenance) served beside it, over the pinned sha256 (the digest CDI
    verifies while importing). Its family is C(talos-<schematicID>), its stream the version, and its
    provenance subject must be C(image/<schematicID>/<version>/openstack-amd64.raw.xz) (sign it with
    M(goldenimage.pipeline.artifact_sign) O(goldenimage.pipeline.artifact_sign#module:name) set to that path).
    Unsigned, signed by a key the policy does not trust for the family, signed for other bytes, a
    provenance with another digest, or another version's signature replayed is refused naming the entry,
    the key and the check; so is an entry with no sha256 pinned, unless the family is relaxed and nothing is
    signed. RV(signatures) reports each verdict. The verdict is recorded on the golden it lets import (the
    C(goldenimage.pipeline/provenance) annotation, as on Kube-DC goldens) with the verdict, the key, the
    artifact, the sha256 and the family, with the inputs, builder and time its provenance names, and its
    evidence (the C(.sig) and C(.intoto.jsonl) texts it was verified from).
  - A golden that already exists is judged again under today's O(trust_policy) by that record, not by
    fetching its image again; the evidence it carries is verified again (the signature over the golden's
    C(spec.source.http.checksum), which never changes, and the provenance naming its own image, by a key
    the policy trusts for its schematic and version). A golden with no verified verdict recorded (imported
    before the policy, or made by hand), a verified verdict with no evidence or evidence that does not
    verify, signed by a key the policy no longer trusts for its family, imported unsigned under a
    relaxation since taken back, or recording the verdict of another image or of other bytes than its
    pinned checksum is refused, naming the golden, the key and the check; nothing is written. Move its
    pools away, delete it and import it again under the policy.
author:
  - goldenimage.pipeline maintainers (@goldenimage)
options:
  state:
    description:
      - V(present) imports the catalog; V(absent) deletes one golden; V(info) reports; V(rendered)
        renders a pool's worker disk.
    type: str
    choices: [present, absent, info, rendered]
    default: present
  images:
    description:
      - The catalog, one entry per golden. Required with O(state=present). With O(state=rendered), when
        given, a pool whose golden has no entry is refused.
      - C(schematicID) must match C(^[a-z0-9]([-a-z0-9]*[a-z0-9])?$) and C(version)
        C(^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9a-z.]+)?$); both end up in a DataVolume name and an image URL.
    type: list
    elements: dict
    suboptions:
      schematicID:
        description: The Image Factory schematic ID (lowercase hex).
        type: str
        required: true
      version:
        description: The Talos release, for example V(v1.13.0). Quote it.
        type: str
        required: true
      imageFactoryURL:
        description:
          - Base URL of the Image Factory, or of a mirror bucket holding the same paths
            C(image/<schematicID>/<version>/openstack-amd64.raw.xz). A trailing C(/) is trimmed.
          - When the object there carries the mirror's C(sha256) metadata, the golden is pinned to it
            (C(source.http.checksum)).
        type: str
        default: https://factory.talos.dev
      storage:
        description:
          - Size of the golden. A Talos openstack raw image is about 4.15 GiB virtual; 4Gi fails.
        type: str
        default: 6Gi
      storageClass:
        description:
          - StorageClass of the golden; it must be the worker disks' class and able to CSI-clone. An empty
            string means the cluster default.
        type: str
        default: replicated
      certConfigMap:
        description: ConfigMap in O(namespace) with the CA of a factory behind an internal CA.
        type: str
      sha256:
        description:
          - The digest C(os_mirror) recorded for the mirrored raw.xz. The golden is pinned to it and an
            object whose recorded sha256 differs is refused before anything is written.
          - A pinned golden needs CDI v1.65.0 or later, the first release whose DataVolume keeps
            C(source.http.checksum). A server-side dry run shows whether the cluster's CDI keeps it; an
            older CDI prunes it, and the entry is refused before anything is written.
        type: str
  namespace:
    description: Namespace of the goldens.
    type: str
    default: cozy-public
  name:
    description: The golden to delete with O(state=absent).
    type: str
  pool:
    description:
      - The worker pool to render with O(state=rendered).
    type: dict
    suboptions:
      name:
        description: The pool's name (written on its disks as the pool annotation).
        type: str
        required: true
      namespace:
        description: The tenant namespace of the pool's disks.
        type: str
        required: true
      cluster:
        description:
          - The tenant Kubernetes cluster the pool belongs to. Its disks are those annotated with the pool
            and either annotated C(kubernetes-worker-image.cozystack.io/cluster) with it or named
            C(disk-system-<cluster>-<pool>-...) as the chart names them; the rendered disk is named
            C(disk-system-<cluster>-<pool>) and, when it clones, carries that annotation.
          - Without it, every disk of the namespace annotated with the pool is the pool's, and a pool whose
            disks belong to several clusters is refused.
        type: str
      osImage:
        description:
          - "C({builtin: {schematicID, version}}) to clone the golden of that entry; a field left out (or
            C(builtin: {})) is inherited from O(pool.talos). Absent for the HTTP import."
        type: dict
      talos:
        description:
          - The pool's Talos settings. C(osImage.builtin) inherits the fields it leaves out from them, and a
            pool without C(osImage) imports
            C(<imageFactoryURL>/image/<schematicID>/<version>/openstack-amd64.raw.xz) over HTTP, as the
            chart builds it.
        type: dict
        suboptions:
          schematicID:
            description: The Image Factory schematic ID.
            type: str
          version:
            description: The Talos release, for example V(v1.13.0).
            type: str
          imageFactoryURL:
            description: Base URL of the Image Factory (default V(https://factory.talos.dev)).
            type: str
      storageClass:
        description:
          - The pool's StorageClass; empty means the cluster default (or, for a pool that has cloned
            already, the class its bound disks are on).
        type: str
        default: ""
      diskSize:
        description: Size of each worker disk; at least the golden's storage.
        type: str
        default: 20Gi
      imageURL:
        description:
          - The image the pool's disks import over HTTP when O(pool.osImage) is absent, overriding the
            factory URL of O(pool.talos). Needed only for a pool without Talos settings.
        type: str
  pools:
    description:
      - The pools declared in the catalog, each in the shape O(pool) takes (checked the same way).
      - O(state=absent) refuses to delete a golden that any of them names in C(osImage), whatever its number
        of workers (a pool scaled to zero still clones it at its next scale-up).
    type: list
    elements: dict
    default: []
  allow_host_assisted:
    description:
      - Accept a clone strategy of V(copy) (a host-assisted copy over the pod network) instead of refusing it.
    type: bool
    default: false
  url_validate_certs:
    description: Verify TLS when reading the mirrored object's recorded digest (a HEAD of the image URL).
    type: bool
    default: true
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - goldenimage.pipeline.k8s_wait
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.actiongroup_k8s
  - goldenimage.pipeline.provenance.trust_policy
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: The golden DataVolumes created or deleted.
  idempotent:
    support: full
notes:
  - "Runs on the controller; use C(delegate_to: localhost) when the play targets other hosts."
  - A golden that is still importing is not an error anywhere; only phase C(Failed) is, reported with
    the importer's reason. With O(wait), O(state=present) waits for every golden to import; on timeout
    the result carries C(timed_out) and the goldens' progress, so a role can poll in short calls.
  - "The StorageClass comparison resolves an empty class as CDI does for a VM disk: the class annotated
    C(storageclass.kubevirt.io/is-default-virt-class), else the cluster default (annotated
    C(storageclass.kubernetes.io/is-default-class) or its beta form); of several, the newest, then the
    first by name. It reads the golden's class from its bound claim and a pool that has cloned from its own
    bound disks."
  - O(state=present) refuses, in check mode as in a run, goldens to create in a namespace that does not
    exist, since the run could not create them.
  - "Chart parity, where the chart and seed 002 differ (the seed is followed unless said otherwise):"
  - "A pool that has already cloned whose golden is missing or failed: the chart renders it; this module
    refuses, as the seed does. The pool's next scale-up would create a disk CDI cannot populate, so the
    refusal comes before the release rather than at the scale-up; O(state=info) reports the disks left
    behind (RV(orphans)) so the golden can be restored or the pool moved."
  - "A version C(vMAJOR.MINOR) without a patch: the chart accepts it; this module refuses it, as the seed
    does. The Image Factory publishes images per release C(vMAJOR.MINOR.PATCH), and the version is part of
    the golden's name, so an accepted C(v1.13) would name a golden no factory URL serves."
  - "An entry's empty storageClass: the chart turns it into the application's class; this module keeps it
    empty, which means the class CDI resolves (above), as the seed says. The module knows no application
    class, and writing one onto the golden would make an edit of the application's class an edit of every
    golden (which a DataVolume cannot take)."
  - "Class resolution follows CDI, not the chart: the virt default class is preferred over the cluster
    default, because that is the class CDI gives the disk."
  - A C(SubjectAccessReview) stores nothing; it is sent even in check mode.
seealso:
  - module: goldenimage.pipeline.os_mirror_object
"""

EXAMPLES = r"""
- name: Worker images with the cluster credentials set once
  module_defaults:
    group/goldenimage.pipeline.k8s:
      kubeconfig: "{{ kubeconfig_path }}"
  block:
    - name: Import one golden per Talos flavour
      goldenimage.pipeline.worker_image:
        images:
          - schematicID: 376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba
            version: v1.13.0
        wait_timeout: 900

    - name: Render a pool's worker disk as a clone of its golden
      goldenimage.pipeline.worker_image:
        state: rendered
        pool:
          name: md0
          namespace: tenant-acme
          osImage:
            builtin:
              schematicID: 376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba
              version: v1.13.0
          storageClass: replicated
          diskSize: 20Gi
      register: disk

    - name: Who clones what
      goldenimage.pipeline.worker_image:
        state: info
      register: catalog

    - name: Retire a golden nothing clones any more
      goldenimage.pipeline.worker_image:
        state: absent
        name: talos-worker-376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba-v1.12.4
"""

RETURN = r"""
signatures:
  description:
    - With O(trust_policy), per golden of the catalog, the verdict on the image it imports (created by
      this run) or the one recorded when it was imported (it exists), C(verdict) (V(verified), or
      V(unsigned_allowed) under a relaxation), C(key_id), C(signer), C(relaxed) (the reason), C(artifact)
      (the provenance subject), C(message) and C(recorded) (true when read from the golden).
  returned: with O(trust_policy) and O(state=present)
  type: dict
  sample:
    talos-worker-3765679...-v1.13.0:
      verdict: verified
      key_id: 3f1c0b9e5a7d2e84c6f1a9b0d3e5c7a9b1d3f5e7a9c1b3d5f7e9a1c3b5d7f9e1
      signer: release
      relaxed: null
      artifact: image/3765679.../v1.13.0/openstack-amd64.raw.xz
      message: "artifact image/3765679.../v1.13.0/openstack-amd64.raw.xz (sha256:...): signed by release
        (3f1c...), provenance subject matches"
      recorded: false
changed:
  description: Whether a golden was (or, in check mode, would be) created or deleted.
  returned: always
  type: bool
  sample: true
goldens:
  description: Every golden of O(namespace) (with O(state=present), the catalog's), with who clones it.
  returned: when state is present, absent or info
  type: list
  elements: dict
  contains:
    name:
      description: The golden's DataVolume name.
      type: str
      sample: talos-worker-376567988ad3-v1.13.0
    namespace:
      description: Its namespace.
      type: str
      sample: cozy-public
    phase:
      description: CDI's phase (only C(Failed) is terminal).
      type: str
      sample: ImportInProgress
    progress:
      description: CDI's progress, C("45.20%") or C(N/A).
      type: str
      sample: "45.20%"
    storage_class:
      description: The class of its bound claim, else the class its spec asks for (empty means the default).
      type: str
      sample: replicated
    checksum:
      description: The pinned C(sha256:<hex>), when the golden is pinned.
      type: str
    reason:
      description: The importer's reason when the import failed.
      type: str
    consumers:
      description:
        - C(disks) (namespace/name, DataVolumes and claims whose DataVolume is gone) and C(pools)
          (namespace/pool, or namespace/cluster/pool when the disk's cluster is known) that clone the golden.
      type: dict
      sample: {disks: [tenant-acme/md0-0-disk-system], pools: [tenant-acme/md0]}
orphans:
  description:
    - The worker disks (DataVolumes, or claims whose DataVolume is gone) annotated with a golden of
      O(namespace) that no longer exists, neither as DataVolume nor as claim.
  returned: when state is info
  type: list
  elements: dict
  sample:
    - {kind: DataVolume, namespace: tenant-acme, name: disk-system-k1-md0-a, golden: talos-worker-x-v1.12.4,
       pool: tenant-acme/k1/md0}
data_volume:
  description: The worker disk DataVolume of the pool.
  returned: when state is rendered
  type: dict
clone_strategy:
  description:
    - The clone strategy the worker disk will get (V(null) for the HTTP path), and where it came from.
  returned: when state is rendered
  type: dict
  sample: {strategy: csi-clone, source: CDI cdi spec.cloneStrategyOverride, storage_class: replicated}
progress_log:
  description: One line per change of a golden's phase or progress while waiting, with the elapsed time.
  returned: when state is present and wait is true
  type: list
  elements: str
duration:
  description: Seconds spent waiting.
  returned: when state is present and the module waited
  type: float
timed_out:
  description: True when the wait ended by its timeout (the module then fails).
  returned: on a wait timeout
  type: bool
"""

import time

from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket._object_digest import object_sha256
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common._wait import WaitError, WaitTimeout
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal, run_module
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.inputs import (
    positive_all,
    wait_arg_spec,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.redact import redact_url
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden._golden_observe import (
    observe_volume_users,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import kinds
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeModule, object_diff
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _fetch
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance
from ansible_collections.goldenimage.pipeline.plugins.module_utils.workers import worker

DV = ("cdi.kubevirt.io/v1beta1", "DataVolume")
PVC = ("v1", "PersistentVolumeClaim")
SC = ("storage.k8s.io/v1", "StorageClass")
CDI_CR = ("cdi.kubevirt.io/v1beta1", "CDI")
PROFILE = ("cdi.kubevirt.io/v1beta1", "StorageProfile")
REVIEW = ("authorization.k8s.io/v1", "SubjectAccessReview")
NS = ("v1", "Namespace")


def argument_spec():
    spec = dict(
        state=dict(type="str", default="present", choices=["present", "absent", "info", "rendered"]),
        images=dict(
            type="list",
            elements="dict",
            options=dict(
                schematicID=dict(type="str", required=True),
                version=dict(type="str", required=True),
                imageFactoryURL=dict(type="str", default=worker.FACTORY),
                storage=dict(type="str", default=worker.STORAGE),
                storageClass=dict(type="str", default=worker.STORAGE_CLASS),
                certConfigMap=dict(type="str"),
                sha256=dict(type="str"),
            ),
        ),
        namespace=dict(type="str", default=worker.NAMESPACE),
        name=dict(type="str"),
        pool=dict(
            type="dict",
            options=dict(
                name=dict(type="str", required=True),
                namespace=dict(type="str", required=True),
                cluster=dict(type="str"),
                osImage=dict(type="dict"),
                talos=dict(
                    type="dict",
                    options=dict(
                        schematicID=dict(type="str"),
                        version=dict(type="str"),
                        imageFactoryURL=dict(type="str"),
                    ),
                ),
                storageClass=dict(type="str", default=""),
                diskSize=dict(type="str", default=worker.DISK_SIZE),
                imageURL=dict(type="str"),
            ),
        ),
        pools=dict(type="list", elements="dict", default=[]),
        allow_host_assisted=dict(type="bool", default=False),
        url_validate_certs=dict(type="bool", default=True),
    )
    spec.update(provenance.trust_policy_spec())
    spec.update(wait_arg_spec())
    return spec


class Runner:
    """observe (the module's reads) -> decide (worker.py) -> apply (the module's writes)."""

    def __init__(self, module, digest_of=object_sha256, clock=time.monotonic, text_of=_fetch.url_text):
        self.module = module
        self.text_of = text_of
        self.p = module.params
        self.ns = self.p["namespace"]
        self.digest_of = digest_of
        self.clock = clock
        self.warnings = []

    def run(self):
        positive_all(self.p, ["wait_timeout", "wait_sleep"])
        return getattr(self, self.p["state"])()

    # --- reads
    def _all_datavolumes(self):
        return self.module.list(*DV)

    def _goldens(self, datavolumes):
        return [dv for dv in datavolumes if kinds.namespace(dv) == self.ns and worker.is_golden(dv)]

    def _summaries(self, goldens, datavolumes, pvcs=None):
        """Each golden as reported, with the worker disks (DataVolumes and claims) of every namespace."""
        pvcs = self.module.list(*PVC) if pvcs is None else pvcs
        own = {kinds.name(p): p for p in pvcs if kinds.namespace(p) == self.ns}
        disks = worker.worker_disks(datavolumes, pvcs)
        return [
            worker.golden_summary(dv, own.get(kinds.name(dv)), disks, self.ns)
            for dv in sorted(goldens, key=kinds.name)
        ]

    # --- state=present
    def present(self):
        entries = worker.present_catalog(self.p["images"])
        live = {e["name"]: self.module.get(*DV, name=e["name"], namespace=self.ns) for e in entries}
        pending = []  # (entry, body) of each golden to create
        verdicts = {}  # golden name -> the verdict on the image it imports (with trust_policy)
        for entry in entries:  # every refusal before the first write
            if live[entry["name"]] is not None:
                worker.refuse_edited(entry, live[entry["name"]], self.ns)
                self._recheck(entry, live[entry["name"]], verdicts)
                continue
            pinned = self._pin(entry)
            recorded = self._verify(entry, pinned, verdicts)
            pending.append((entry, worker.render_golden(entry, self.ns, pinned, recorded)))
        to_create = [body for _entry, body in pending]
        if to_create:
            worker.refuse_missing_namespace(self.ns, self.module.get(*NS, name=self.ns), to_create)
        for entry, body in pending:  # a dry run needs the namespace, so after its check
            worker.refuse_dropped_checksum(entry, body, self._dry_run_create(body), self.ns)
        created = [self.module.create(body) for body in to_create]
        result = {"changed": bool(created)}
        if self.p.get("trust_policy") is not None:
            result["signatures"] = verdicts
        if created:
            result["diff"] = {
                "before": {"goldens": []},
                "after": {"goldens": [object_diff(None, dv)["after"] for dv in created]},
            }
        if self.p["wait"] and not self.module.check_mode and entries:
            self._wait(entries, result)
        datavolumes = self._all_datavolumes()
        names = {e["name"] for e in entries}
        if self.module.check_mode:
            datavolumes = datavolumes + [
                dv for dv in created if kinds.name(dv) not in {kinds.name(d) for d in datavolumes}
            ]
        result["goldens"] = self._summaries(
            [dv for dv in self._goldens(datavolumes) if kinds.name(dv) in names], datavolumes
        )
        return self._done(result)

    def _pin(self, entry):
        """The sha256 the golden is pinned to: the entry's, checked against what the mirror recorded."""
        observed, error = self.digest_of(entry["url"], self.p["url_validate_certs"])
        if error and entry["sha256"]:
            self.warnings.append(
                "%s: could not read the recorded sha256 of %s (%s); the golden is pinned to the "
                "entry's sha256 "
                "and CDI verifies it while importing" % (entry["subject"], redact_url(entry["url"]), error)
            )
        worker.refuse_digest(entry, observed, redact_url(entry["url"]))
        return entry["sha256"] or observed

    def _recheck(self, entry, live, verdicts):
        """With trust_policy, a golden that exists is judged by the verdict recorded when it was imported."""
        if self.p.get("trust_policy") is None:
            return
        policy = provenance.normalize_policy(self.p["trust_policy"])
        record = worker.refuse_unproven_golden(entry, live, policy, self.prove, self.ns)
        verdicts[entry["name"]] = {
            "verdict": record["verdict"],
            "key_id": record.get("key"),
            "signer": record.get("signer"),
            "relaxed": record.get("relaxed"),
            "artifact": record.get("artifact"),
            "message": "recorded when the golden was imported; it holds under the trust policy",
            "recorded": True,
        }

    def prove(self, policy, record):
        """What the policy's keys and public_keys prove about the evidence a recorded verdict carries."""
        return signing.record_proof(policy, record, self.p["public_keys"])

    def _verify(self, entry, pinned, verdicts):
        """With trust_policy, the image the golden would import is verified (its .sig and .intoto.jsonl,
        served beside it, over the pinned digest) before anything is written; returns the annotation that
        records the verdict on the golden."""
        if self.p.get("trust_policy") is None:
            return None
        policy = provenance.normalize_policy(self.p["trust_policy"])
        ring = signing.keyring_of(self.p["public_keys"], extra=provenance.public_keys(policy))
        texts = []
        for url in provenance.companions(entry["url"]):
            text, error = self.text_of(url, self.p["url_validate_certs"])
            if error:
                raise Refusal(
                    entry["subject"],
                    "cannot read %s (%s), so the image cannot be verified" % (redact_url(url), error),
                    "serve the signature and provenance beside the image, or fix the access; "
                    "nothing was written",
                )
            texts.append(text)
        if pinned:
            signature, found = signing.evidence(ring, texts[0], texts[1], pinned)
        else:  # nothing to check a signature over: only whether one is there counts (refused either way)
            signature, found = [None if text is None else {"key": None} for text in texts]
        verdict = worker.import_verdict(entry, pinned, policy, signature, found)
        verdicts[entry["name"]] = {
            "verdict": verdict["verdict"],
            "key_id": verdict.get("key"),
            "signer": verdict.get("signer"),
            "relaxed": verdict.get("relaxed"),
            "artifact": worker.signed_name(entry),
            "message": verdict["message"],
            "recorded": False,
        }
        return worker.verdict_annotations(entry, pinned, verdict, found, texts)

    def _wait(self, entries, result):
        log = result.setdefault("progress_log", [])
        start = self.clock()
        last = {}

        def reporter(name):
            def progress(dv):
                state = worker.describe_import(dv) if dv is not None else "%s: no DataVolume yet" % name
                if last.get(name) != state:
                    last[name] = state
                    log.append("%s after %.1fs" % (state, self.clock() - start))

            return progress

        try:
            for entry in entries:
                remaining = max(0.0, self.p["wait_timeout"] - (self.clock() - start))
                self.module.wait(
                    DV[0],
                    DV[1],
                    entry["name"],
                    self.ns,
                    worker.import_state,
                    worker.describe_import,
                    "the golden %s/%s to import" % (self.ns, entry["name"]),
                    remaining,
                    self.p["wait_sleep"],
                    progress=reporter(entry["name"]),
                )
        except WaitError as exc:
            datavolumes = self._all_datavolumes()
            names = {e["name"] for e in entries}
            extra = dict(result)
            extra["goldens"] = self._summaries(
                [dv for dv in self._goldens(datavolumes) if kinds.name(dv) in names], datavolumes
            )
            if isinstance(exc, WaitTimeout):
                extra["timed_out"] = True
            if self.warnings:
                extra["warnings"] = list(self.warnings)
            exc.fields.update(extra)
            raise
        result["duration"] = round(self.clock() - start, 3)

    # --- state=absent
    def absent(self):
        if not self.p["name"]:
            raise Refusal("option name", "state=absent needs the golden's name", "give name")
        name = self.p["name"]
        dv = self.module.get(*DV, name=name, namespace=self.ns)
        if dv is None:
            return self._done({"changed": False, "goldens": []})
        worker.refuse_not_golden(self.ns, name, dv)
        observed = observe_volume_users(self.module, self.ns)
        worker.refuse_delete_in_use(dv, observed, self.p["pools"])
        summary = self._summaries([dv], observed["datavolumes"], observed["pvcs"])
        self.module.delete(*DV, name=name, namespace=self.ns, before=dv)
        return self._done({"changed": True, "goldens": summary, "diff": object_diff(dv, None)})

    # --- state=info
    def info(self):
        datavolumes, pvcs = self._all_datavolumes(), self.module.list(*PVC)
        existing = {kinds.name(o) for o in datavolumes + pvcs if kinds.namespace(o) == self.ns}
        return self._done(
            {
                "changed": False,
                "goldens": self._summaries(self._goldens(datavolumes), datavolumes, pvcs),
                "orphans": worker.orphans(self.ns, worker.worker_disks(datavolumes, pvcs), existing),
            }
        )

    # --- state=rendered
    def rendered(self):
        pool = worker.pool_request(self.p["pool"])
        if not pool["golden"]:
            return self._done(
                {"changed": False, "data_volume": worker.render_http_disk(pool), "clone_strategy": None}
            )
        entries = worker.catalog(self.p["images"]) if self.p["images"] is not None else None
        golden = self.module.get(*DV, name=pool["golden"], namespace=self.ns)
        worker.refuse_missing_golden(pool, golden, self.ns, entries)
        ref = "%s/%s" % (self.ns, pool["golden"])
        golden_pvc = self.module.get(*PVC, name=pool["golden"], namespace=self.ns)
        default, default_source = worker.resolve_default_class(self.module.list(*SC))
        gold_cls = worker.golden_class(golden, golden_pvc, default)
        disk_pvcs = worker.pool_claims(
            pool,
            self.module.list(*DV, namespace=pool["namespace"]),
            self.module.list(*PVC, namespace=pool["namespace"]),
        )
        pool_cls, pool_source = worker.pool_class(pool, disk_pvcs, default, default_source)
        worker.refuse_unresolved(pool, pool_cls, gold_cls, ref)
        worker.refuse_class_mismatch(pool, pool_cls, pool_source, gold_cls, ref)
        worker.refuse_disk_size(pool, pool["diskSize"], worker.golden_size(golden, golden_pvc), ref)
        cdis = self.module.list(*CDI_CR) if self.module.served(*CDI_CR) else []
        profile = self.module.get(*PROFILE, name=pool_cls) if self.module.served(*PROFILE) else None
        strategy, source = worker.clone_strategy(cdis, profile)
        worker.refuse_host_assisted(pool, strategy, source, pool_cls, self.p["allow_host_assisted"])
        review = self._review(worker.access_review(pool["namespace"], self.ns, pool["golden"]))
        worker.refuse_clone_forbidden(pool, review, self.ns)
        return self._done(
            {
                "changed": False,
                "data_volume": worker.render_clone_disk(pool, self.ns, pool_cls),
                "clone_strategy": {"strategy": strategy, "source": source, "storage_class": pool_cls},
            }
        )

    def _dry_run_create(self, body):
        """The object the server would store for ``body`` (a server-side dry run stores nothing, so
        check mode sends it too); only a pinned golden needs the answer."""
        if not worker.pinned_checksum(body):
            return body
        res = self.module.resource(*DV)
        try:
            answer = res.create(body=body, namespace=self.ns, dry_run="All")
        except Exception as exc:
            self.module.fail_from_exception("dry-run create the golden DataVolume %s" % kinds.name(body), exc)
        return answer.to_dict() if hasattr(answer, "to_dict") else answer

    def _review(self, body):
        """Send a SubjectAccessReview (a question: it stores nothing, so check mode sends it too)."""
        res = self.module.resource(*REVIEW)
        try:
            answer = res.create(body=body)
        except Exception as exc:
            self.module.fail_from_exception("create a SubjectAccessReview for %s" % body["spec"]["user"], exc)
        answer = answer.to_dict() if hasattr(answer, "to_dict") else answer
        return (answer or {}).get("status") or {}

    def _done(self, result):
        if self.warnings:
            result["warnings"] = list(self.warnings)
        return result


# Which options each state needs, checked by Ansible before the runner starts.
ARGUMENT_RULES = dict(
    required_if=[
        ("state", "present", ("images",)),
        ("state", "absent", ("name",)),
        ("state", "rendered", ("pool",)),
    ],
)


def main():
    module = KubeModule(argument_spec=argument_spec(), supports_check_mode=True, **ARGUMENT_RULES)
    run_module(module, lambda: Runner(module).run())


if __name__ == "__main__":
    main()
