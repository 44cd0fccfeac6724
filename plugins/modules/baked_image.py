#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: goldenimage.pipeline contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: baked_image
short_description: Register a baked PostgreSQL image revision as a Harvester VirtualMachineImage
version_added: 0.1.0
description:
  - Creates the Harvester C(VirtualMachineImage) of a baked image revision, from a download URL (the mirror
    bucket) or by uploading a local file, waits until Harvester has imported it, checks the replica count
    actually in force, and records the revision in the catalog.
  - The image is named after the artifact, C(ubuntu-<stream without dot>-postgres-<revision>), which is also
    its C(displayName). Labels C(goldenimage.io/revision), C(goldenimage.io/os-version),
    C(goldenimage.io/pg-majors) and one C(pg.goldenimage.io/<major>=true) per major describe it.
  - Images are immutable. A revision that exists with another source or checksum (in the cluster or in the
    catalog) is refused with "build a new revision"; the same input again reports C(changed=false).
  - The StorageClass is read from C(status.storageClassName), never computed. Harvester ignores
    C(storageClassParameters.numberOfReplicas) when a Longhorn template class applies (the class named by the
    annotation C(harvesterhci.io/storageClassName), or the cluster default). When the replica count in force
    differs from O(replicas) the module fails, naming the class that won and how to fix it, first with a
    Longhorn StorageClass used only for baked images, named in O(storage_class); never a change to the
    cluster default class, which every other volume follows.
  - Before a new image is created (and in check mode, with reads only) the count it would get is predicted
    from the StorageClasses. A count the class that would win cannot hold, or more copies than there are
    schedulable Nodes, is refused before anything is written (RV(prediction)).
  - Once the image is imported, its Longhorn C(BackingImage) (named by the image StorageClass's
    C(backingImage) parameter, in C(longhorn-system)) is read. The copies it holds ready, one per disk in
    C(status.diskFileStatusMap), and the minimum Longhorn keeps (C(spec.minNumberOfCopies)) are returned in
    RV(copies).
  - The replica count is verified as soon as Harvester has created the image's StorageClass
    (C(Initialized=True)), before the download or upload, not after the import. On a wrong count an image
    this run created is deleted at once (nothing can use an image that is not imported) and RV(cleaned_up)
    says so; an image registered before the run is left in place and not recorded.
  - With O(state=absent) the module first asks who uses the image, and refuses naming each. Users are a
    catalog (O(catalog) and every ConfigMap in the cluster holding a C(catalog.yaml)) whose stream tip is
    the revision, a DBInstance (any API group serving the kind) whose C(status.appliedSpec.imageRevision)
    is the revision or that is repaving onto it, a PersistentVolumeClaim on the image's StorageClass or
    carrying its C(harvesterhci.io/imageId), and a VirtualMachine whose
    C(harvesterhci.io/volumeClaimTemplates) declare such a disk. There is no C(force); move the tip,
    repave, and delete the disks first.
  - After the image is deleted, or found missing, every catalog that records this image says
    C(imported=false) (the revision itself stays, as the catalog keeps every revision ever registered).
  - A URL with credentials in it (C(https://user:password@host/...)) is refused before anything is written; a
    presigned URL is passed to Harvester but stored in the catalog, returned and printed without its query,
    and every other URL the module prints is redacted. No entry of the catalog keeps a signed URL; one written
    by an older release or by hand is written back without it by the next registration, with a warning
    naming the revisions.
  - "The wait for the import talks. One call of the module waits at most O(report_every) seconds and returns
    C(done), a C(line) such as C(VirtualMachineImage ns/x: phase importing, progress 45% after 61.2s) and
    C(resume)."
  - The action plugin of the same name calls it again with C(resume) and prints each line, so an
    import prints a line at least every O(report_every) seconds until it is imported, has failed, or
    O(wait_timeout) (counted from O(started)) has passed. A later call finds the image it registered, writes
    nothing and continues the wait; the catalog is written by the call that sees the image imported.
  - "When O(catalog) holds a trust policy (its C(trust) section: which public keys may sign which streams and
    families, and the streams whose C(require_signature) is relaxed with a reason), the artifact (O(artifact),
    else O(src)) is verified against it before anything is written: its detached signature over these bytes
    by a key the policy trusts for the stream and the family C(ubuntu-<stream without dot>-postgres), and its
    signed provenance, whose subject must be this revision's artifact name
    (C(ubuntu-<stream without dot>-postgres-<revision>.qcow2)) with the same SHA-256."
  - An unsigned artifact, a signature by a key the policy does not trust for the stream, a signature or
    provenance of other bytes, a provenance whose subject digest differs and another revision's signed
    artifact under this revision's name are each refused, naming the artifact, the key and the check that
    failed; nothing is written. On a stream whose C(require_signature) is false an unsigned artifact
    registers and RV(signature) records the reason. A catalog without a trust policy checks no signature;
    O(catalog.trust) pins the policy, so a catalog whose writers removed or widened it is refused.
  - The catalog entry records the verdict (C(signature), with the key id, the signer's name and the
    artifact's SHA-256 and SHA-512; never key material) and its evidence (the C(.sig) and C(.intoto.jsonl)
    texts), which is verified again wherever the revision is used; the signed provenance must name the
    SHA-512 as well (M(goldenimage.pipeline.artifact_sign) records both).
  - When a write is refused half way (for example a token that may create images but not update the catalog
    ConfigMap), the failure says what exists (the image, whether the catalog was written) and which permission
    is missing; running the task again with the permission completes it.
author:
  - goldenimage.pipeline maintainers (@goldenimage)
options:
  name:
    description:
      - The revision, C(v<YYYYMMDD>) for the default naming stream 22.04 or
        C(v<YYYYMMDD>-<stream without dot>) for others, for example C(v20261201-2404).
    type: str
    required: true
  namespace:
    description: Namespace of the VirtualMachineImage.
    type: str
    default: default
  url:
    description:
      - Where Harvester downloads the qcow2 from (C(sourceType=download)), for example the mirror
        bucket's URL.
      - Mutually exclusive with O(src).
      - Must not carry credentials (C(user:password@)); use a presigned URL (the C(harvester_upload) role's
        C(harvester_upload_url_mode=presigned), or M(goldenimage.pipeline.bucket_object_url)) or O(src).
        The URL is C(no_log), since a presigned URL is a credential until it expires.
    type: str
  src:
    description:
      - A local qcow2 to upload (C(sourceType=upload)) through Harvester's upload endpoint.
      - The file is streamed from disk in 1 MiB chunks (a multipart field C(chunk) with its length computed
        up front), never held in memory, so a multi-GB image uploads with a small, constant footprint.
        Progress (percent, bytes, elapsed) goes to the module log every 10% and at least every 30 seconds,
        and to RV(upload).
    type: path
  artifact:
    description:
      - The local qcow2 (or raw) file whose bytes are registered (the file O(url) serves, or O(src)), read
        offline before anything is written. Its SHA-512 must be the checksum registered
        (O(src)'s or O(checksum)), so the facts describe the very bytes tenants boot; with O(url) and no
        O(checksum), the artifact's SHA-512 becomes the checksum Harvester verifies the download against.
        Its C(os-release), the PostgreSQL servers installed
        (C(/usr/lib/postgresql/<N>/bin/postgres)), the clusters initialized in it (a data directory with a
        C(PG_VERSION)) and the private keys left in it (the C(ssl-cert) snakeoil key PostgreSQL serves TLS
        with, SSH host keys) are compared with O(os_version) and O(pg_versions). A stream that
        C(VERSION_ID) contradicts, a different set of majors, an initialized cluster or a private key every
        VM would share is refused, each fact read beside the declaration (RV(problems)).
      - The facts read are recorded in the catalog entry (C(facts)).
      - Without it nothing reads the bytes; the module warns, and the catalog entry holds no C(facts). The
        C(harvester_upload) role and the C(publish_baked_image) playbook always give it.
    type: path
  signature_path:
    description:
      - The detached signature of the artifact (the C(.sig) M(goldenimage.pipeline.artifact_sign) and
        C(cosign sign-blob --key) write). Defaults to C(<artifact>.sig), C(<artifact>) being O(artifact), else
        O(src).
      - Read only when O(catalog) holds a trust policy (its C(trust) section); see RV(signature).
    type: path
  provenance_path:
    description:
      - The artifact's signed provenance (a DSSE envelope holding an in-toto statement). Defaults to
        C(<artifact>.intoto.jsonl).
    type: path
  manifest:
    description:
      - The build manifest of the revision (the C(.manifest.json) C(packer_build) writes beside the artifact),
        read before anything is written. Its C(revision) must be O(name).
      - The catalog entry records it (C(manifest)) with the digest of the file, the kernel, the PostgreSQL
        minors and the installed packages (C(package_list), compressed, as the catalog keeps every revision
        in one ConfigMap), so M(goldenimage.pipeline.baked_image_rebuild_due) runs from the catalog alone.
      - A revision recorded with another manifest (another digest) is refused, as its content is fixed once
        published.
    type: path
  manifest_object:
    description:
      - Where the copy of O(manifest) is kept beside the artifact (C(s3://<bucket>/<key>)), recorded with it.
    type: str
  eol_overrides:
    description:
      - The EOL overrides the build was checked with (as for M(goldenimage.pipeline.eol_guard)). Each one
        that moves a date the built-in table knows later is recorded in the catalog entry
        (C(eol_extensions)) and warned about, so the catalog says which support is claimed past its end.
    type: dict
  harvester_url:
    description:
      - Base URL of the Harvester API that serves the upload action, when it is not the Kubernetes API server
        of the kubeconfig (for example C(https://harvester.example.com)). Used only with O(src).
      - The upload authenticates with the kubeconfig's credentials; a URL with credentials in it is refused.
    type: str
  os_version:
    description:
      - The Ubuntu LTS stream of the image, C(22.04) or C(24.04). Must agree with the revision name.
      - Required with O(state=present); with O(state=absent) it is taken from the revision name.
      - Give it as a quoted string; an unquoted YAML number (C(24.10) reads as C(24.1)) is refused.
    type: raw
  pg_versions:
    description:
      - The PostgreSQL majors baked into the image. Required with O(state=present).
      - Whole numbers (C(16)) or strings of them; C(16.0), as a number or a string, is refused with the one
        answer that a major is a whole number.
    type: list
    elements: raw
  replicas:
    description:
      - How many nodes must hold a copy of the backing image (C(storageClassParameters.numberOfReplicas)).
      - The count in force on the resulting StorageClass is verified.
    type: int
  storage_class:
    description:
      - A Longhorn StorageClass whose parameters the image's StorageClass is made from (annotation
        C(harvesterhci.io/storageClassName)). Harvester then takes C(numberOfReplicas) from it, not from
        O(replicas); the module verifies which count won. Without it, Harvester uses the cluster default
        class the same way when that is a Longhorn class.
    type: str
  checksum:
    description:
      - SHA-512 of the qcow2 (128 hex digits, C(sha512:) prefix accepted); Harvester's Longhorn backend
        verifies it. Computed from O(src) when omitted; must match it when given.
    type: str
  retry:
    description: How many failed import attempts Harvester retries (C(spec.retry), 0 to 10).
    type: int
    default: 3
  report_every:
    description:
      - Longest time, in seconds, one call of the module waits for the image before it returns a progress
        C(line). The action plugin calls it again with C(resume) and prints each line, so a wait prints a
        line at least this often. Zero or negative is refused before anything is written.
    type: int
    default: 20
  started:
    description:
      - When the wait began, in seconds since the epoch; O(wait_timeout) counts from it. Set by the action
        plugin (to when the task started, then from C(resume)); leave it out to start now.
    type: float
  created:
    description:
      - Whether an earlier call of the same task created the image (from C(resume)); set by the action
        plugin, so a replica count found wrong later still deletes the image the task made.
    type: bool
  uploaded:
    description:
      - Whether an earlier call of the same task has uploaded O(src) (from C(resume)); set by the action
        plugin, so the file is sent once.
    type: bool
  progress_file:
    description:
      - A file the upload of O(src) appends its progress lines to while it runs; set by the action plugin,
        which runs the uploading call as an async job and prints the lines as they come.
    type: path
  progress_seen:
    description:
      - The progress values earlier calls of the same task saw (from C(resume)); set by the action plugin.
        With it the call is a later round, which writes nothing but the catalog once the image is imported.
    type: list
    elements: int
  state:
    description:
      - V(present) registers the revision and records it in O(catalog) when given.
      - V(absent) deletes its VirtualMachineImage when nothing uses it, then records C(imported=false).
    type: str
    choices: [present, absent]
    default: present
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - goldenimage.pipeline.catalog
  - goldenimage.pipeline.k8s_wait
  - goldenimage.pipeline.attributes
  - goldenimage.pipeline.attributes.actiongroup_k8s
  - goldenimage.pipeline.attributes.rounds
attributes:
  check_mode:
    support: full
    details: Reads only, in one call; nothing is created, uploaded, waited for or written to the catalog.
  diff_mode:
    support: full
  idempotent:
    support: full
notes:
  - "Runs on the controller; use C(delegate_to: localhost) when the play targets other hosts."
  - The wait is for C(Imported=True). It fails at once on C(RetryLimitExceeded) or a failed upload, with
    Harvester's message, and on timeout reports the last progress and every condition.
seealso:
  - module: goldenimage.pipeline.baked_image_stream
"""

EXAMPLES = r"""
- name: Register a revision from the mirror bucket, 4 copies, and record it in the catalog
  goldenimage.pipeline.baked_image:
    name: v20261201-2404
    namespace: harvester-public
    url: https://mirror.example.com/baked/ubuntu-2404-postgres-v20261201-2404.qcow2
    checksum: "{{ lookup('file', 'ubuntu-2404-postgres-v20261201-2404.qcow2.sha512') }}"
    os_version: "24.04"
    pg_versions: ["15", "16", "17"]
    replicas: 4
    catalog:
      namespace: dbaas-system
      name: baked-image-catalog
    wait_timeout: 1800
  register: baked

- name: Upload a local build directly (no bucket)
  goldenimage.pipeline.baked_image:
    name: v20260615
    src: output/ubuntu-2204-postgres-v20260615.qcow2
    os_version: "22.04"
    pg_versions: ["15", "16", "17"]
    replicas: 3
    catalog:
      path: catalog/baked-images.yaml

- name: Remove an image no disk uses any more
  goldenimage.pipeline.baked_image:
    name: v20260101
    namespace: harvester-public
    state: absent
"""

RETURN = r"""
changed:
  description: Whether the image or the catalog was (or, in check mode, would be) changed.
  returned: always
  type: bool
image:
  description: The VirtualMachineImage after the task (in check mode, the prediction); empty when absent.
  returned: always
  type: dict
storage_class:
  description: C(status.storageClassName), the StorageClass of the image (C(lh-<uid>) on current Harvester).
  returned: when known
  type: str
  sample: lh-6c1f0bde-3bd1-4b8e-9a51-2f4a7c0e9d11
progress:
  description: The last C(status.progress) seen (0 to 100).
  returned: when state is present
  type: int
  sample: 100
progress_seen:
  description: Every distinct progress value observed while waiting, in order.
  returned: when state is present
  type: list
  elements: int
  sample: [0, 35, 99, 100]
upload:
  description:
    - How the upload of O(src) went, C(bytes_sent) of C(size), C(percent), C(seconds), and C(reported),
      the C([percent, seconds]) of each progress line logged.
  returned: when O(src) was uploaded (also on a failed upload)
  type: dict
  sample: {src: output/ubuntu-2204-postgres-v20260615.qcow2, bytes_sent: 5368709120, size: 5368709120,
           percent: 100, seconds: 61.2, reported: [[0, 0.0], [10, 6.1], [100, 61.2]]}
replicas_in_force:
  description: C(numberOfReplicas) on the image's StorageClass, what Longhorn actually keeps.
  returned: when the StorageClass exists
  type: int
  sample: 4
prediction:
  description:
    - The replica count a new image would get, predicted before it is created, with C(requested),
      C(in_force), C(template) (the Longhorn class Harvester would take its parameters from, or null),
      C(why) and C(nodes) (the schedulable Nodes, null when not known).
  returned: when O(replicas) is given and the image did not exist
  type: dict
  sample: {requested: 4, in_force: 4, template: null, why: null, nodes: 4}
copies:
  description:
    - What the imported image's Longhorn BackingImage holds, C(ready_copies) (the disks whose copy is
      C(ready)), C(min_copies) (C(spec.minNumberOfCopies)), C(backing_image), C(storage_class) and
      C(class_replicas); C(readable) is false (and the counts null) when the cluster serves no BackingImage
      or it may not be read.
  returned: when the image is imported
  type: dict
  sample: {revision: v20261201-2404, image: harvester-public/ubuntu-2404-postgres-v20261201-2404,
           storage_class: lh-6c1f0bde, class_replicas: 4,
           backing_image: harvester-public-ubuntu-2404-postgres-v20261201-2404,
           min_copies: 4, ready_copies: 4, ready_disks: [], readable: true}
revision:
  description: The catalog entry of the revision.
  returned: when O(catalog) is given and state is present
  type: dict
  sample:
    os_version: "24.04"
    pg_versions: ["15", "16", "17"]
    imported: true
    manifest:
      sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
      object: s3://baked/ubuntu-24.04-postgres/v20261201-2404/sha256-<hex>/<artifact stem>.manifest.json
      package_count: 712
      encoding: zlib+base64
      package_list: eNo92kvKZMcRgNG59qKm4l...
signature:
  description:
    - The verification of the artifact against the catalog's trust policy, as the catalog entry records it,
      C(verdict) (V(verified), or V(unsigned_allowed) on a stream that relaxes C(require_signature)),
      C(key) (the key id, null when unsigned), C(signer) (the policy's name of the key), C(relaxed) (the
      reason recorded), C(artifact) (the signed subject, the artifact's file name), C(sha256) and C(sha512)
      (the bytes verified; the SHA-512 is the checksum the revision registers), C(family), and for a
      verified artifact the C(inputs), C(builder) and C(time) its provenance names, C(evidence) (the
      signature and provenance texts verified), and C(message).
    - A repave (M(goldenimage.pipeline.dbinstance_repave)) judges this record again before any step, and its
      evidence must verify again under today's policy, for its own artifact and the checksum of its catalog
      entry.
    - On a refusal, C(verdict) is V(unsigned), V(untrusted_key), V(signature_mismatch),
      V(subject_digest_differs) or V(replayed_revision), with C(check) naming the check that failed.
  returned: when O(catalog) holds a trust policy and state is present
  type: dict
  sample: {verdict: verified, key: 3f1c0b9e5a7d2e84c6f1a9b0d3e5c7a9b1d3f5e7a9c1b3d5f7e9a1c3b5d7f9e1,
           signer: release-2026, sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08,
           message: "artifact ubuntu-2404-postgres-v20261201-2404.qcow2 (sha256:9f86...): signed by ..."}
catalog_changed:
  description: Whether a catalog (with O(state=absent), any catalog recording the image) was changed.
  returned: when O(catalog) is given, or a catalog was updated
  type: bool
pvcs:
  description: PersistentVolumeClaims (C(namespace/name)) that use the image's StorageClass.
  returned: when state is absent and the deletion is refused
  type: list
  elements: str
consumers:
  description: Everything that uses the image, each with C(kind), C(namespace), C(name) and C(why).
  returned: when state is absent and the deletion is refused
  type: list
  elements: dict
  sample:
    - kind: DBInstance
      namespace: orders
      name: pg-1
      why: "runs on it: its applied revision is v20260615 (phase Available)"
facts:
  description:
    - What the bytes of O(artifact) say, as the catalog entry records them.
  returned: when state is present and O(artifact) was read
  type: dict
  sample: {os_release: {id: ubuntu, version_id: "22.04", version_codename: jammy},
           pg_majors: ["15", "16", "17"], initialized_clusters: [], private_keys: [], machine_id: empty}
problems:
  description:
    - On a refusal, each contradiction between the bytes and the declaration, with C(fact), C(read),
      C(declared) and C(message).
  returned: when the artifact contradicts the declaration
  type: list
  elements: dict
  sample:
    - fact: os_release
      read: "22.04"
      declared: "24.04"
      message: "/etc/os-release says VERSION_ID=22.04 (Ubuntu 22.04.5 LTS), the declaration says 24.04"
cleaned_up:
  description:
    - On a replica count mismatch found at C(Initialized), whether the image this run created was deleted
      (false when it existed before the run, or when deleting it failed; the message says which).
  returned: on a replica count mismatch found before the import
  type: bool
registered:
  description: Whether the VirtualMachineImage exists when the task failed after writing it.
  returned: on a failure after the image was written
  type: bool
catalog_written:
  description: Whether the catalog holds the result of this task, on a failure after the image was written.
  returned: on a failure after the image was written
  type: bool
missing_permission:
  description: The RBAC grant whose absence stopped the task half way.
  returned: when a write was forbidden after the image was written
  type: str
  sample: get, create and update on configmaps in namespace dbaas-system
catalogs_updated:
  description: Catalogs (their description) whose entry now says C(imported=false).
  returned: when state is absent
  type: list
  elements: str
duration:
  description: Seconds spent waiting.
  returned: always
  type: float
done:
  description: Whether nothing is left to wait for (the image imported, deleted, or not waited for).
  returned: always
  type: bool
  sample: true
line:
  description: The progress line of the last call (also printed by the action plugin).
  returned: always
  type: str
  sample: "VirtualMachineImage harvester-public/ubuntu-2404-postgres-v20261201-2404: phase imported, progress
    100% after 212.4s"
lines:
  description: Every line printed while the task ran, one per call.
  returned: always
  type: list
  elements: str
rounds:
  description: How many calls of the module the task took.
  returned: always
  type: int
elapsed:
  description: Seconds since the task began.
  returned: always
  type: float
  sample: 212.4
resume:
  description: The options that continue this wait in another call (C(started), C(created), C(uploaded),
    C(progress_seen)).
  returned: when the wait is not over
  type: dict
diff:
  description:
    - Before and after of the image (server fields removed, the URL redacted) and of each catalog YAML that
      changed, with C(--diff).
  returned: when diff mode is on
  type: list
  elements: dict
"""

import hashlib
import json
import os
import time

from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import (
    _backing_copies,
    apt_release,
    backing_copies,
    catalog,
    eol,
    harvester_image,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked._catalog_store import (
    CatalogStore,
    catalog_options,
    describe,
    find_catalogs,
    locate,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import inputs, redact
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import rounds as rounds_
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common._progress_file import append_line
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common._wait import WaitTimeout
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import (
    PipelineError,
    Refusal,
    run_module,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import _disk, image_facts
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import kinds
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeModule, object_diff
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance
from ansible_collections.goldenimage.pipeline.plugins.module_utils.repave._dbinstances import all_dbinstances

hi = harvester_image
API = hi.API_VERSION
KIND = hi.KIND
FORBIDDEN = 403


def argument_spec():
    spec = dict(
        name=dict(type="str", required=True),
        namespace=dict(type="str", default="default"),
        url=dict(type="str", no_log=True),
        src=dict(type="path"),
        artifact=dict(type="path"),
        signature_path=dict(type="path"),
        provenance_path=dict(type="path"),
        manifest=dict(type="path"),
        manifest_object=dict(type="str"),
        eol_overrides=dict(type="dict"),
        harvester_url=dict(type="str"),
        os_version=dict(type="raw"),
        pg_versions=dict(type="list", elements="raw"),
        replicas=dict(type="int"),
        storage_class=dict(type="str"),
        checksum=dict(type="str", no_log=False),
        retry=dict(type="int", default=3),
        catalog=catalog_options(),
        state=dict(type="str", choices=["present", "absent"], default="present"),
    )
    spec.update(inputs.wait_arg_spec())
    spec.update(
        report_every=dict(rounds_.RESUME_ARG_SPEC["report_every"]),
        started=dict(rounds_.RESUME_ARG_SPEC["started"]),
        created=dict(type="bool"),
        uploaded=dict(type="bool"),
        progress_seen=dict(type="list", elements="int"),
        progress_file=dict(type="path"),
    )
    return spec


def _sha512(path):
    digest = hashlib.sha512()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1024 * 1024), b""):
            digest.update(block)
    return digest.hexdigest()


def checked_inputs(p):
    """The options as the rules read them, every input refusal raised before anything is read or written."""
    inputs.positive_all(p, ("wait_timeout", "wait_sleep", "report_every"))
    stream = inputs.version_string(p["os_version"], "os_version")
    majors = eol.requested_majors(p["pg_versions"])
    hi.check_url(p["url"])
    if p["harvester_url"]:
        redact.refuse_credentials(
            p["harvester_url"],
            "harvester_url",
            "give the URL alone: the upload authenticates with the kubeconfig's credentials (its token or "
            "client certificate)",
        )
    if p["state"] == "present":
        hi.check_versions(p["name"], stream, majors)
        hi.check_request(p["name"], p["replicas"], p["retry"])
    return hi.revision_stream(p["name"], stream), majors


class BakedImage:
    """Register (or delete) one revision's VirtualMachineImage; ``run()`` returns the result."""

    def __init__(self, module):
        self.module = module
        self.p = module.params
        self.result = {"changed": False, "duration": 0.0, "image": {}}
        self.store = CatalogStore(module, self.p["catalog"]) if self.p["catalog"] else None
        self.os_version, self.pg_versions = None, None
        self.facts = None
        self.manifest = None
        self.signature = None
        self.extended = []
        self.round_started = time.time()
        self.started = self.p["started"] if self.p["started"] is not None else self.round_started
        # A later round of the same task: the registration is done, only its wait goes on.
        self.resumed = self.p["progress_seen"] is not None
        self.digests = {}

    def run(self):
        self.os_version, self.pg_versions = checked_inputs(self.p)
        try:
            extended = eol.extensions(self.p["eol_overrides"])
        except PipelineError as exc:
            raise PipelineError("eol_overrides: %s" % exc.msg, refused=True) from None
        self.extended = [{k: e[k] for k in ("kind", "version", "default", "override")} for e in extended]
        for item in extended if not self.resumed else ():
            self.module.warn("revision %s: %s, recorded in the catalog" % (self.p["name"], item["message"]))
        return self.present() if self.p["state"] == "present" else self.absent()

    def _ref(self, name, namespace):
        return "%s %s/%s" % (KIND, namespace, name)

    # state=present -----------------------------------------------------------------------------

    def digest(self, path):
        """The SHA-512 of ``path``, read once however many checks ask for it (a multi-GB file)."""
        if path not in self.digests:
            self.digests[path] = _sha512(path)
        return self.digests[path]

    def registered_checksum(self):
        """The checksum of the bytes registered: src's (equal to checksum when given), else checksum, else
        the artifact's, so Harvester checks the download against the very bytes the facts were read from."""
        p = self.p
        checksum = hi.normalize_checksum(p["checksum"])
        if p["src"]:
            inputs.require_file(
                p["src"], os.path.isfile(p["src"]), "src %s" % p["src"], "give the image file"
            )
            return hi.check_src_checksum(p["src"], self.digest(p["src"]), checksum)
        if not checksum and p["artifact"] and os.path.isfile(p["artifact"]):
            return self.digest(p["artifact"])
        return checksum

    def desired(self):
        p = self.p
        checksum = self.registered_checksum()
        if not checksum:
            self.module.warn("no checksum given: Harvester cannot verify the download")
        return hi.definition(
            p["namespace"],
            p["name"],
            self.os_version,
            self.pg_versions,
            checksum,
            url=p["url"],
            replicas=p["replicas"],
            retry=p["retry"],
            storage_class=p["storage_class"],
        )

    def read_facts(self):
        """The artifact's facts, read offline before anything is written; a contradiction is refused."""
        artifact = self.p["artifact"]
        if not artifact:
            if self.resumed:
                return None
            self.module.warn(
                "revision %s: no artifact given, so its OS and PostgreSQL majors are declared, not read from "
                "its bytes; give artifact (the local file) to have them checked" % self.p["name"]
            )
            return None
        inputs.require_file(
            artifact, os.path.isfile(artifact), "artifact %s" % artifact, "give the image file registered"
        )
        registered = self.registered_checksum()
        hi.check_artifact_checksum(self.p["name"], artifact, self.digest(artifact), registered)
        facts = _disk.read_image_facts(artifact, "linux")
        image_facts.refuse_contradicted(
            "revision %s (artifact %s)" % (self.p["name"], artifact),
            image_facts.declaration_problems(facts, self.os_version, self.pg_versions),
            image_facts.catalog_facts(facts),
        )
        self.result["facts"] = image_facts.catalog_facts(facts)
        return self.result["facts"]

    def read_catalog(self):
        """The catalog given (None without one); one that cannot be read is refused naming it."""
        if self.store is None:
            return None
        try:
            return self.store.read()
        except catalog.CatalogError as exc:
            raise PipelineError("%s: %s" % (self.store.where, exc.msg), refused=True) from None

    def verify(self, policy):
        """The artifact's signature and provenance judged by the catalog's trust policy (None without one);
        a failed check is refused before anything is written."""
        if policy is None:
            return None
        p = self.p
        path = p["artifact"] or p["src"]
        stream, family = self.os_version, catalog.family(self.os_version)
        name = catalog.signed_subject(p["name"], stream)
        digest, signature, found, texts = {}, None, None, None
        if path:
            ring = signing.keyring(provenance.public_keys(policy))
            digest, signature, found = signing.file_evidence(
                ring, path, p["signature_path"], p["provenance_path"], ("sha256", "sha512")
            )
            self.digests.setdefault(path, digest["sha512"])  # the checksum, from the same read
            texts = signing.sidecar_texts(path, p["signature_path"], p["provenance_path"])
        # Both digests: the statement's subject binds the SHA-512 Harvester downloads against as well.
        artifact = {"name": name, "digest": {a: digest[a] for a in ("sha256", "sha512") if a in digest}}
        verdict = provenance.judge(artifact, family, stream, policy, signature, found)
        record = catalog.signature_record(
            verdict, p["name"], stream, digest, (found or {}).get("statement"), texts
        )
        self.result["signature"] = dict(record, message=verdict["message"], check=verdict["check"])
        if not verdict["ok"]:
            raise Refusal(
                "revision %s (artifact file %s)" % (p["name"], path or "not given"),
                "refusing to register it: %s" % verdict["message"],
                "nothing was written" + ("" if path else "; give artifact, the file the url serves"),
                **self.result,
            )
        return record

    def read_manifest(self):
        """The catalog's record of the build manifest, read before anything is written."""
        path = self.p["manifest"]
        if not path:
            return None
        try:
            with open(path, "rb") as handle:
                raw = handle.read()
            data = json.loads(raw.decode("utf-8"))
        except (OSError, ValueError) as exc:
            raise PipelineError(
                "revision %s: manifest %s cannot be read (%s); give the .manifest.json packer_build wrote"
                % (self.p["name"], path, exc),
                refused=True,
            ) from None
        apt_release.check_manifest_revision(path, data, self.p["name"])
        return apt_release.manifest_record(data, hashlib.sha256(raw).hexdigest(), self.p["manifest_object"])

    def register(self, doc, desired, obj=None, storage_class=None):
        meta = desired["metadata"]
        extra = {
            "facts": self.facts,
            "eol_extensions": self.extended or None,
            "manifest": self.manifest,
            catalog.SIGNATURE: self.signature,
        }
        if obj is not None:
            extra.update(
                image={"namespace": meta["namespace"], "name": meta["name"]},
                storage_class=storage_class,
                imported=hi.imported(obj),
            )
        return catalog.register_image(
            doc,
            self.p["name"],
            self.os_version,
            self.pg_versions,
            desired["spec"].get("checksum"),
            hi.source_of(desired),
            **extra,
        )

    def present(self):
        doc = self.read_catalog()
        if doc is not None:  # bytes no trusted key signed are read no further
            self.signature = self.verify(catalog.trust_policy(doc))
        self.manifest = self.read_manifest()
        self.facts = self.read_facts()
        desired = self.desired()
        name, namespace = kinds.name(desired), kinds.namespace(desired)
        if doc is not None:  # refuse a changed source before touching the cluster
            try:
                self.register(doc, desired)
            except catalog.CatalogError as exc:
                raise PipelineError("%s: %s" % (self.store.where, exc.msg), refused=True) from None
        existing = self.module.get(API, KIND, name, namespace)
        if existing is None and not self.resumed:  # the count a new image gets, refused before it is made
            self.predict(desired)
        after = existing
        created = existing is None or bool(self.p["created"])
        if existing is not None:
            hi.refuse_changed_source(existing, desired, self.p["name"])
            wanted = kinds.labels(desired)
            if any(kinds.labels(existing).get(k) != v for k, v in wanted.items()):
                after, changed = self.module.patch(
                    API, KIND, name, namespace, {"metadata": {"labels": wanted}}, before=existing
                )
                self.result["changed"] = changed
        else:
            after = self.module.create(desired)
            self.result["changed"] = True
        if self.module._diff and not self.resumed:  # a later round changes nothing the first did not
            before, now = hi.printable(existing), hi.printable(after)
            self.result["diff"] = [dict(object_diff(before, now), before_header=self._ref(name, namespace))]
        seen = list(self.p["progress_seen"] or [hi.progress(after)])
        if seen[-1] != hi.progress(after):
            seen.append(hi.progress(after))
        checked = False
        uploaded = bool(self.p["uploaded"])
        try:
            if not self.module.check_mode:
                if (self.p["src"] or self.p["wait"]) and not hi.storage_class_of(after):
                    after = self.wait_initialized(name, namespace, after)
                if hi.storage_class_of(after):  # verified before the import, not after it
                    after = self.check_replicas_early(after, created)
                    checked = True
                if self.p["src"] and not uploaded and not hi.imported(after) and not hi.failure(after):
                    after = self.upload(name, namespace, after)
                    uploaded = True
                if self.p["wait"] and not hi.imported(after):
                    after = self.wait_imported(name, namespace, after, seen)
            self.result.update(image=hi.printable(after), progress=hi.progress(after), progress_seen=seen)
            storage_class = hi.storage_class_of(after)
            if storage_class and not checked:
                self.check_replicas(after, storage_class)
        except rounds_.RoundOver as over:
            return self.round_over(name, namespace, over.last or after, seen, created, uploaded)
        except hi.ReplicaMismatch as exc:
            if "cleaned_up" in exc.fields:  # found at Initialized: already says what became of the image
                raise
            raise self.left_behind(exc, created) from None
        except PipelineError as exc:
            raise self.left_behind(exc, created) from None
        if hi.imported(after):
            self.result["copies"] = _backing_copies.held_by_image(self.module, self.p["name"], after)
        if self.store is not None:
            self.record(desired, after, storage_class)
        return self.finish(name, namespace, after, True)

    def finish(self, name, namespace, obj, done, resume=None):
        """Close a round: ``done``, its ``line`` and, when the wait goes on, ``resume``."""
        elapsed = round(max(0.0, time.time() - self.started), 1)
        line = hi.round_line(namespace, name, obj, elapsed)
        self.result.update(done=done, line=line, elapsed=elapsed)
        if resume is not None:
            self.result["resume"] = resume
        return self.result

    def round_over(self, name, namespace, obj, seen, created, uploaded):
        """The image is registered and still importing: report it, and continue in the next round. The
        catalog is written only by the round that sees the import finished."""
        self.result.update(image=hi.printable(obj), progress=hi.progress(obj), progress_seen=seen)
        if hi.storage_class_of(obj):
            self.result["storage_class"] = hi.storage_class_of(obj)
        resume = dict(started=self.started, created=created, uploaded=uploaded, progress_seen=seen)
        return self.finish(name, namespace, obj, False, resume)

    def left_behind(self, exc, created):
        fields = dict(self.result)
        fields.update(exc.fields)
        if exc.fields.get("status") == FORBIDDEN:
            fields.setdefault("missing_permission", forbidden_detail(exc))
        exc.fields = fields
        where = self.store.where if self.store is not None else None
        return hi.left_behind(exc, self.result.get("image"), created, where, self.module.check_mode)

    def record(self, desired, obj, storage_class):
        """Record the revision in the catalog: the last write, so a failure leaves only the image."""
        try:
            before, after, changed = self.store.update(
                lambda doc: self.register(doc, desired, obj, storage_class)
            )
        except PipelineError as exc:
            fields = dict(self.result, **exc.fields)
            missing = self.store.missing_permission() if exc.fields.get("status") == FORBIDDEN else None
            fields.pop("missing_permission", None)
            raise hi.not_recorded(obj, self.p["name"], self.store.where, exc.msg, missing, fields) from None
        self.result["catalog_changed"] = changed
        self.result["changed"] = self.result["changed"] or changed
        self.result["revision"] = after["images"].get(self.p["name"], {})
        if self.module._diff:
            self.result.setdefault("diff", []).append(
                {
                    "before_header": self.store.where,
                    "before": catalog.dump(before),
                    "after": catalog.dump(after),
                }
            )

    def predict(self, desired):
        """What the image would get: the class Harvester would take its parameters from, against O(replicas)
        and the schedulable nodes; a count that class cannot hold is refused before anything is written."""
        if self.p["replicas"] is None:
            return
        nodes = _backing_copies.schedulable_nodes(
            self.module, "the replica count is not compared with the node count"
        )
        self.result["prediction"] = backing_copies.predict(
            "revision %s" % self.p["name"],
            self.p["replicas"],
            desired,
            _backing_copies.storage_classes(self.module),
            len(nodes) if nodes is not None else None,
        )

    def check_replicas(self, image, storage_class):
        self.result["storage_class"] = storage_class
        found = self.module.get(kinds.STORAGE, "StorageClass", storage_class)
        if found is None:
            raise PipelineError(
                "StorageClass %s named by the image's status.storageClassName does not exist" % storage_class
            )
        in_force = (found.get("parameters") or {}).get("numberOfReplicas")
        self.result["replicas_in_force"] = int(in_force) if str(in_force or "").isdigit() else in_force
        if self.p["replicas"] is None or str(in_force) == str(self.p["replicas"]):
            return
        template, why = hi.winning_template(image, _backing_copies.storage_classes(self.module))
        raise hi.ReplicaMismatch(
            backing_copies.replica_trap(self.p["replicas"], in_force, storage_class, template, why)
        )

    def check_replicas_early(self, image, created):
        """Check the count once the StorageClass exists; a wrong count deletes an image this run made."""
        try:
            self.check_replicas(image, hi.storage_class_of(image))
        except hi.ReplicaMismatch as exc:
            exc.fields = dict(self.result, image=hi.printable(image), **exc.fields)
            deleted, error = False, None
            if created:
                try:
                    deleted = self.module.delete_and_wait(
                        API,
                        KIND,
                        kinds.name(image),
                        kinds.namespace(image),
                        self.p["wait_timeout"],
                        self.p["wait_sleep"],
                    )
                except PipelineError as cleanup:
                    error = cleanup.msg
            if deleted:
                exc.fields["image"] = {}
            raise hi.replica_mismatch_cleanup(exc, image, deleted, error) from None
        return image

    def wait_initialized(self, name, namespace, current):
        """Wait for Harvester to create the image's StorageClass (Initialized=True)."""
        try:
            return self._wait(
                name,
                namespace,
                lambda obj: (hi.initialized(obj) and bool(hi.storage_class_of(obj)), hi.failure(obj)),
                "Initialized=True (its StorageClass created)",
            )
        except PipelineError as exc:
            self.result.update(image=hi.printable(getattr(exc, "last", None) or current))
            raise

    def _wait(self, name, namespace, predicate, what, progress=None, seen=None, whole=False):
        """Wait this round's share (O(report_every) from the round's start) of the whole wait (O(wait_timeout)
        from its start, across rounds); ``RoundOver`` when the round ends first, the time-out of the whole
        wait naming what was pending and the progress seen otherwise. ``whole`` waits for the rest of the
        wait in one go."""
        pending = "%s to be %s" % (self._ref(name, namespace), what)
        round_end = None if whole else self.round_started + self.p["report_every"]
        rounds = rounds_.Rounds.span(self.started, self.p["wait_timeout"], round_end)
        began = time.time()
        try:
            obj, done = self.module.wait_round(
                rounds,
                API,
                KIND,
                name,
                namespace,
                predicate,
                hi.describe,
                pending,
                self.p["wait_sleep"],
                progress,
            )
        except WaitTimeout as exc:
            message = hi.timeout_message(
                pending, exc.elapsed, seen or [hi.progress(exc.last)], exc.stuck, exc.state
            )
            raise exc.reworded(message) from None
        finally:
            self.result["duration"] = round(self.result["duration"] + time.time() - began, 3)
        if not done:
            raise rounds_.RoundOver(obj)
        return obj

    def wait_imported(self, name, namespace, current, seen):
        def progress(obj):
            value = hi.progress(obj)
            if obj is not None and value != seen[-1]:
                seen.append(value)

        try:
            return self._wait(
                name,
                namespace,
                lambda obj: (hi.imported(obj), hi.failure(obj)),
                "Imported=True",
                progress,
                seen,
            )
        except PipelineError as exc:
            last = getattr(exc, "last", None) or current
            self.result.update(image=hi.printable(last), progress=hi.progress(last), progress_seen=seen)
            if hi.storage_class_of(last):
                self.result["storage_class"] = hi.storage_class_of(last)
            raise

    def upload(self, name, namespace, current):
        """POST the file to Harvester's upload action (the image is initialized)."""
        size = os.path.getsize(self.p["src"])
        report = rounds_.TransferProgress(self.p["src"], size)
        started = time.monotonic()

        def progress(sent, total):
            line = report.seen(sent, total, time.monotonic() - started)
            if line:
                self.module.log(line)
                if self.p["progress_file"]:
                    append_line(self.p["progress_file"], line)

        self.result["upload"] = report.record()
        try:
            self.module.upload(
                "POST",
                hi.UPLOAD_PATH % (namespace, name),
                self.p["src"],
                field="chunk",
                query=[("action", "upload"), ("size", str(size))],
                headers={"Accept": "application/json"},
                base_url=self.p["harvester_url"],
                timeout=max(60, self.p["wait_timeout"]),
                action="upload %s to %s" % (self.p["src"], self._ref(name, namespace)),
                progress=progress,
            )
        finally:
            self.result["upload"] = report.record()
        return self.module.get(API, KIND, name, namespace) or current

    # state=absent ------------------------------------------------------------------------------

    def catalogs(self):
        """``[(locator, spec, doc)]``: the catalog given and every catalog ConfigMap in the cluster."""
        found = []
        if self.store is not None:
            found.append((self.store.locator, self.p["catalog"], self.store.read()))
        others, unreadable = find_catalogs(self.module)
        for spec, doc in others:
            where = locate(spec)
            if not found or where != found[0][0]:
                found.append((where, spec, doc))
        for text in unreadable:
            self.module.warn("not a readable baked image catalog, so not asked who uses the image: %s" % text)
        return found

    def dbinstances(self):
        """Every DBInstance of every API group that serves the kind (found by discovery, not by name)."""
        return all_dbinstances(self.module)

    def consumers(self, image, catalogs):
        vms = []
        if self.module.served(kinds.KUBEVIRT, "VirtualMachine"):
            vms = self.module.list(kinds.KUBEVIRT, "VirtualMachine")
        return hi.image_consumers(
            image,
            self.revision_of(image),
            catalogs=[(where, doc) for where, _spec, doc in catalogs],
            dbinstances=self.dbinstances(),
            claims=self.module.list(kinds.CORE, "PersistentVolumeClaim"),
            vms=vms,
        )

    def revision_of(self, image):
        return kinds.labels(image).get(hi.REVISION_LABEL) or self.p["name"]

    def absent(self):
        name, namespace = hi.image_name(self.p["name"], self.os_version), self.p["namespace"]
        ref = {"namespace": namespace, "name": name}
        existing = self.module.get(API, KIND, name, namespace)
        catalogs = self.catalogs()
        if existing is not None:
            self.result["image"] = hi.printable(existing)
            if hi.storage_class_of(existing):
                self.result["storage_class"] = hi.storage_class_of(existing)
            refusal = hi.refuse_delete(
                existing, self.revision_of(existing), self.consumers(existing, catalogs)
            )
            if refusal is not None:
                refusal.fields = dict(self.result, **refusal.fields)
                raise refusal
            self.result["changed"] = self.module.delete(API, KIND, name, namespace, before=existing)
            if self.module._diff:
                self.result["diff"] = [
                    dict(object_diff(hi.printable(existing), None), before_header=self._ref(name, namespace))
                ]
            if self.result["changed"] and self.p["wait"] and not self.module.check_mode:
                self._wait(name, namespace, lambda obj: (obj is None, None), "deleted", whole=True)
            self.result["image"] = {}
        self.forget(catalogs, ref, existing is not None)
        return self.finish(name, namespace, None, True)

    def forget(self, catalogs, ref, deleted):
        """Every catalog recording this image says ``imported: false`` now that it is gone."""
        updated = []
        for where, spec, doc in catalogs:
            entry = doc["images"].get(self.p["name"])
            given = self.store is not None and where == self.store.locator
            if not entry or not entry.get("imported"):
                continue
            if not (
                entry.get("image") == ref or (given and catalog.records_image(entry, self.p["name"], ref))
            ):
                continue
            store = self.store if given else CatalogStore(self.module, spec)
            try:
                before, after, changed = store.update(
                    lambda d: catalog.mark_imported(d, self.p["name"], False)
                )
            except PipelineError as exc:
                missing = store.missing_permission() if exc.fields.get("status") == FORBIDDEN else None
                fields = dict(self.result, catalogs_updated=updated)
                rev = self.p["name"]
                raise hi.still_imported(
                    ref, deleted, rev, describe(spec), exc.msg, missing, **fields
                ) from None
            if changed:
                updated.append(describe(spec))
                if self.module._diff:
                    self.result.setdefault("diff", []).append(
                        dict(
                            before_header=describe(spec),
                            before=catalog.dump(before),
                            after=catalog.dump(after),
                        )
                    )
        self.result["catalogs_updated"] = updated
        if updated:
            self.result["changed"] = True
            self.result["catalog_changed"] = True


def forbidden_detail(exc):
    """What a 403 says was refused (the Status message names the verb, the resource and the namespace)."""
    body = exc.fields.get("body")
    return (body.get("message") if isinstance(body, dict) else None) or exc.msg


# Which options go together, checked by Ansible before the runner starts.
ARGUMENT_RULES = dict(
    mutually_exclusive=[("url", "src")],
    required_if=[
        ("state", "present", ("url", "src"), True),
        ("state", "present", ("pg_versions", "os_version")),
    ],
)


def main():
    module = KubeModule(argument_spec=argument_spec(), supports_check_mode=True, **ARGUMENT_RULES)
    run_module(module, lambda: BakedImage(module).run())


if __name__ == "__main__":
    main()
