"""worker_image against the lab: the catalog, pool renders, every refusal, and the bytes a pool costs.

The Image Factory is a bucket on the lab's S3 endpoint holding the Factory's own paths
(`image/<schematicID>/<version>/openstack-amd64.raw.xz`, a real xz-compressed raw disk), which is also
what an air-gapped mirror bucket looks like. Goldens live in a namespace of their own per test module
(the `namespace` option), so nothing here touches `cozy-public` of a real cluster.

Mutations are counted from the lab's audit log. A SubjectAccessReview is recorded as a `create`, as a
real API server audits it, but it is a question and stores nothing: the counts leave it out.
"""

from __future__ import annotations

import functools
import hashlib
import json
import lzma
import os
import subprocess
import time
import uuid

import pytest

from tests.integration.support.runner import kube_play, module_task, run_playbook
from tests.lab.s3 import make_public, s3_client

pytestmark = pytest.mark.lab_only

MODULE = "goldenimage.pipeline.worker_image"
CDI, CDI_V = "cdi.kubevirt.io", "v1beta1"
PROVISIONER = "linstor.csi.linbit.com"
SCHEMATIC = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
OTHER = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515"

task = functools.partial(module_task, MODULE)


def writes(lab):
    """Mutating API requests since the last clear, access reviews left out (they store nothing)."""
    return [r for r in lab.mutating_requests() if "accessreviews" not in (r.get("path") or "")]


def cdi_controller(lab):
    from tests.lab.controllers.cdi import DataVolumeController

    return next(c for c in lab.controller_manager.controllers if isinstance(c, DataVolumeController))


class World:
    """A golden namespace, a replicated class that CSI-clones, RBAC, and a factory bucket."""

    def __init__(self, lab, api_client, tmp):
        from kubernetes import client

        self.lab = lab
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.storage = client.StorageV1Api(api_client)
        self.rbac = client.RbacAuthorizationV1Api(api_client)
        self.tag = uuid.uuid4().hex[:6]
        self.ns = "cozy-" + self.tag
        self.tenant = "tenant-" + self.tag
        self.other_tenant = "locked-" + self.tag
        self.cls = "replicated-" + self.tag
        self.copy_cls = "hostcopy-" + self.tag
        self.made = []
        for ns in (self.ns, self.tenant, self.other_tenant):
            self.core.create_namespace({"metadata": {"name": ns}})
        for name, strategy in ((self.cls, "csi-clone"), (self.copy_cls, "copy")):
            self.storage.create_storage_class(
                {"metadata": {"name": name}, "provisioner": PROVISIONER, "volumeBindingMode": "Immediate"}
            )
            self.custom.create_cluster_custom_object(
                CDI,
                CDI_V,
                "storageprofiles",
                {
                    "apiVersion": "%s/%s" % (CDI, CDI_V),
                    "kind": "StorageProfile",
                    "metadata": {"name": name},
                    "spec": {"cloneStrategy": strategy},
                },
            )
        self.rbac.create_cluster_role(
            {
                "metadata": {"name": "cdi-copy-dv-" + self.tag},
                "rules": [{"apiGroups": [CDI], "resources": ["datavolumes/source"], "verbs": ["create"]}],
            }
        )
        self.rbac.create_namespaced_role_binding(
            self.ns,
            {
                "metadata": {"name": "tenant-clones"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "cdi-copy-dv-" + self.tag,
                },
                "subjects": [
                    {
                        "kind": "Group",
                        "apiGroup": "rbac.authorization.k8s.io",
                        "name": "system:serviceaccounts:" + self.tenant,
                    }
                ],
            },
        )
        # The factory: a real raw disk with data, xz-compressed, served at the Image Factory's paths.
        raw = tmp / "disk.raw"
        subprocess.run(["qemu-img", "create", "-q", "-f", "raw", str(raw), "16M"], check=True)
        with open(raw, "r+b") as handle:
            handle.write(os.urandom(2 * 1024 * 1024))
        self.xz = lzma.compress(raw.read_bytes())
        self.sha256 = hashlib.sha256(self.xz).hexdigest()
        env = lab.env()
        self.s3 = s3_client(env)
        self.bucket = "factory-" + self.tag
        self.s3.create_bucket(Bucket=self.bucket)
        make_public(self.s3, self.bucket)  # the Image Factory serves anyone
        self.factory = "%s/%s/talos" % (env["AWS_ENDPOINT_URL"], self.bucket)

    def publish(self, schematic, version, body=None, recorded=None):
        """Put an image at the Factory's path; `recorded` is the sha256 metadata a mirror writes."""
        key = "talos/image/%s/%s/openstack-amd64.raw.xz" % (schematic, version)
        extra = {"Metadata": {"sha256": recorded}} if recorded else {}
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=body or self.xz, **extra)
        return "%s/image/%s/%s/openstack-amd64.raw.xz" % (self.factory, schematic, version)

    def entry(self, version, schematic=SCHEMATIC, **extra):
        entry = {
            "schematicID": schematic,
            "version": version,
            "imageFactoryURL": self.factory,
            "storage": "64Mi",
        }
        entry.setdefault("storageClass", self.cls)
        entry.update(extra)
        return entry

    def golden(self, name):
        from kubernetes.client.rest import ApiException

        try:
            return self.custom.get_namespaced_custom_object(CDI, CDI_V, self.ns, "datavolumes", name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def dv(self, namespace, name):
        return self.custom.get_namespaced_custom_object(CDI, CDI_V, namespace, "datavolumes", name)

    def create_dv(self, body):
        meta = body["metadata"]
        return self.custom.create_namespaced_custom_object(CDI, CDI_V, meta["namespace"], "datavolumes", body)

    def wait_phase(self, namespace, name, phase="Succeeded", timeout=180):
        deadline = time.monotonic() + timeout
        obj = {}
        while time.monotonic() < deadline:
            obj = self.dv(namespace, name)
            if (obj.get("status") or {}).get("phase") == phase:
                return obj
            time.sleep(0.2)
        raise AssertionError("%s/%s not %s: %s" % (namespace, name, phase, obj.get("status")))

    def make_default(self, name):
        """A StorageClass annotated default, newer than every other (several defaults: the newest wins)."""
        time.sleep(1.1)  # creationTimestamp has second resolution
        self.storage.create_storage_class(
            {
                "metadata": {
                    "name": name,
                    "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
                },
                "provisioner": PROVISIONER,
                "volumeBindingMode": "Immediate",
            }
        )
        self.made.append(name)

    def close(self):
        for name in self.made:
            self.storage.delete_storage_class(name, _preload_content=False)
        for name in (self.cls, self.copy_cls):
            self.custom.delete_cluster_custom_object(CDI, CDI_V, "storageprofiles", name)
            self.storage.delete_storage_class(name, _preload_content=False)
        self.rbac.delete_cluster_role("cdi-copy-dv-" + self.tag, _preload_content=False)
        for ns in (self.ns, self.tenant, self.other_tenant):
            self.core.delete_namespace(ns, _preload_content=False)


@pytest.fixture(scope="module")
def world(lab, kube_client, tmp_path_factory):
    instance = World(lab, kube_client, tmp_path_factory.mktemp("worker"))
    try:
        yield instance
    finally:
        instance.close()


def pool(world, version, **extra):
    body = {
        "name": "md0",
        "namespace": world.tenant,
        "osImage": {"builtin": {"schematicID": SCHEMATIC, "version": version}},
        "storageClass": world.cls,
        "diskSize": "1Gi",
    }
    body.update(extra)
    return body


@pytest.mark.suite("idempotence")
def test_catalog_check_mode_real_idempotent_and_diff(lab, world):
    version = "v1.13.0"
    world.publish(SCHEMATIC, version)
    images = [world.entry(version)]
    name = "talos-worker-%s-%s" % (SCHEMATIC, version)
    present = task("import the catalog", images=images, namespace=world.ns, wait_timeout=180)

    lab.clear_audit()
    run = run_playbook(kube_play(present), env=lab.env(), check=True, diff=True)
    assert run.ok, run.log
    assert run["import the catalog"]["changed"] is True
    assert writes(lab) == [] and world.golden(name) is None
    assert '"kind": "DataVolume"' in run.stdout or "kind: DataVolume" in run.stdout, run.stdout

    lab.clear_audit()
    run = run_playbook(kube_play(present), env=lab.env(), diff=True)
    assert run.ok, run.log
    result = run["import the catalog"]
    assert result["changed"] is True
    assert [r["verb"] for r in writes(lab)] == ["create"]
    golden = world.golden(name)
    assert golden["status"]["phase"] == "Succeeded"
    assert golden["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert golden["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "cozystack"}
    assert golden["spec"]["source"]["http"]["url"] == "%s/image/%s/%s/openstack-amd64.raw.xz" % (
        world.factory,
        SCHEMATIC,
        version,
    )
    assert golden["spec"]["storage"]["storageClassName"] == world.cls
    assert result["goldens"][0]["phase"] == "Succeeded" and result["goldens"][0]["storage_class"] == world.cls
    assert result["progress_log"] and result["progress_log"][-1].startswith(
        "%s/%s Succeeded" % (world.ns, name)
    )
    assert "kind: DataVolume" in run.stdout or '"kind": "DataVolume"' in run.stdout

    lab.clear_audit()
    run = run_playbook(kube_play(present), env=lab.env())
    assert run.ok, run.log
    assert run["import the catalog"]["changed"] is False
    assert writes(lab) == []

    # Removing the entry stops managing the golden; it is never deleted.
    lab.clear_audit()
    run = run_playbook(kube_play(task("an empty catalog", images=[], namespace=world.ns)), env=lab.env())
    assert run.ok, run.log
    assert run["an empty catalog"]["changed"] is False
    assert writes(lab) == [] and world.golden(name) is not None


@pytest.mark.suite("data-loss")
def test_absent_refuses_a_golden_a_claim_clones_through_data_source_ref(lab, world):
    """No worker disk clones the golden, but a claim does (dataSourceRef): the delete asks the collection's
    reference query, is refused naming the claim, and deletes nothing; once the claim is gone it goes."""
    version = "v1.13.9"
    world.publish(SCHEMATIC, version)
    name = "talos-worker-%s-%s" % (SCHEMATIC, version)
    run = run_playbook(
        kube_play(task("golden", images=[world.entry(version)], namespace=world.ns, wait_timeout=180)),
        env=lab.env(),
    )
    assert run.ok, run.log
    world.core.create_namespaced_persistent_volume_claim(
        world.ns,
        {
            "metadata": {"name": "copy-of-golden"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": world.cls,
                "resources": {"requests": {"storage": "64Mi"}},
                "dataSourceRef": {"kind": "PersistentVolumeClaim", "name": name},
            },
        },
    )
    absent = task("delete", ignore_errors=True, state="absent", name=name, namespace=world.ns)
    lab.clear_audit()
    for check in (True, False):
        run = run_playbook(kube_play(absent), env=lab.env(), check=check)
        out = run["delete"]
        assert out["refused"] is True, out
        assert out["msg"] == (
            "golden DataVolume %s/%s: refusing to delete it, 1 object(s) use it: PersistentVolumeClaim "
            "%s/copy-of-golden clones from PersistentVolumeClaim %s/%s; move those pools to another golden "
            "(or remove their osImage) and let their disks be replaced, then delete it"
            % (world.ns, name, world.ns, world.ns, name)
        )
        assert out["consumers"] == [
            {
                "kind": "PersistentVolumeClaim",
                "namespace": world.ns,
                "name": "copy-of-golden",
                "why": "clones from PersistentVolumeClaim %s/%s" % (world.ns, name),
            }
        ]
    assert [r for r in writes(lab) if r["verb"] in ("delete", "deletecollection")] == []
    assert world.golden(name) is not None

    world.core.delete_namespaced_persistent_volume_claim("copy-of-golden", world.ns)
    deadline = time.monotonic() + 60
    while any(
        p.metadata.name == "copy-of-golden"
        for p in world.core.list_namespaced_persistent_volume_claim(world.ns).items
    ):
        assert time.monotonic() < deadline, "copy-of-golden is not gone"
        time.sleep(0.2)
    run = run_playbook(kube_play(absent), env=lab.env())
    assert run["delete"]["changed"] is True and "refused" not in run["delete"], run["delete"]


def test_refusals_write_nothing_and_say_why(lab, world):
    version = "v1.13.1"
    world.publish(SCHEMATIC, version)
    name = "talos-worker-%s-%s" % (SCHEMATIC, version)
    ref = "%s/%s" % (world.ns, name)
    empty_class = "v1.13.2"
    world.publish(SCHEMATIC, empty_class)
    run = run_playbook(
        kube_play(
            task(
                "goldens to edit",
                images=[world.entry(version), world.entry(empty_class, storageClass="")],
                namespace=world.ns,
                wait_timeout=180,
            )
        ),
        env=lab.env(),
    )
    assert run.ok, run.log
    lab.faults.set_object("DataVolume/%s/talos-worker-%s-v1.12.0" % (world.ns, SCHEMATIC), "fail")
    world.publish(SCHEMATIC, "v1.12.0")
    run = run_playbook(
        kube_play(
            task("a golden that fails", images=[world.entry("v1.12.0")], namespace=world.ns, wait=False)
        ),
        env=lab.env(),
    )
    assert run.ok, run.log
    world.wait_phase(world.ns, "talos-worker-%s-v1.12.0" % SCHEMATIC, "Failed")

    world.create_dv(
        {
            "apiVersion": "%s/%s" % (CDI, CDI_V),
            "kind": "DataVolume",
            "metadata": {"name": "plain", "namespace": world.ns},
            "spec": {"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": "1Mi"}}}},
        }
    )
    bad = functools.partial(task, ignore_errors=True, namespace=world.ns)
    lab.clear_audit()
    run = run_playbook(
        kube_play(
            bad("bad schematic", images=[world.entry(version, schematic="NotHex")]),
            bad("bad version", images=[world.entry("1.13.1")]),
            bad("bad factory", images=[world.entry(version, imageFactoryURL="factory.talos.dev")]),
            bad("edited entry", images=[world.entry(version, storage="128Mi", storageClass=world.copy_cls)]),
            bad("edited empty class", images=[world.entry(empty_class, storageClass=world.cls)]),
            bad("no catalog entry", state="rendered", images=[], pool=pool(world, version)),
            bad("not found", state="rendered", pool=pool(world, "v9.9.9")),
            bad("failed golden", state="rendered", pool=pool(world, "v1.12.0")),
            bad("class mismatch", state="rendered", pool=pool(world, version, storageClass=world.copy_cls)),
            bad("disk too small", state="rendered", pool=pool(world, version, diskSize="63Mi")),
            bad("forbidden", state="rendered", pool=pool(world, version, namespace=world.other_tenant)),
            bad("bad pool version", state="rendered", pool=pool(world, "1.13")),
            bad(
                "bad pool schematic",
                state="rendered",
                pool=pool(world, version, osImage={"builtin": {"schematicID": "A_B", "version": version}}),
            ),
            bad("duplicate entries", images=[world.entry(version), world.entry(version, storage="128Mi")]),
            bad("name too long", images=[world.entry(version, schematic="a" * 240)]),
            bad("bad sha256", images=[world.entry(version, sha256="abc")]),
            bad("zero timeout", images=[world.entry(version)], wait_timeout=0),
            bad("no image", state="rendered", pool={"name": "md0", "namespace": world.tenant}),
            bad("not a golden", state="absent", name="plain"),
        ),
        env=lab.env(),
    )
    assert writes(lab) == [], writes(lab)
    url = "%s/image/%s/%s/openstack-amd64.raw.xz" % (world.factory, SCHEMATIC, version)
    p = "pool %s/md0" % world.tenant
    expected = {
        "bad schematic": "images[0] (schematicID 'NotHex', version 'v1.13.1'): schematicID 'NotHex' "
        "does not match "
        "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$; it becomes part of the DataVolume name "
        "talos-worker-<schematicID>-<version> and of the image URL, so it must be a plain lowercase "
        "alphanumeric "
        "identifier; give the schematic ID exactly as the Image Factory returned it (lowercase hex)",
        "bad version": "images[0] (schematicID '%s', version '1.13.1'): version '1.13.1' does not match "
        "^v[0-9]+\\.[0-9]+\\.[0-9]+(-[0-9a-z.]+)?$; it becomes part of the DataVolume name "
        "talos-worker-<schematicID>-<version> and of the image URL, so it must be a Talos release "
        "vMAJOR.MINOR.PATCH; "
        'give the release as a quoted string with its leading v, for example version: "v1.13.0"' % SCHEMATIC,
        "bad factory": "images[0] (schematicID '%s', version 'v1.13.1'): imageFactoryURL "
        "'factory.talos.dev' is not "
        "an http(s) URL of the form https://host[/path] without credentials, query or fragment; the "
        "image URL "
        "<factory>/image/<schematicID>/<version>/openstack-amd64.raw.xz is built from it; give the "
        "Image Factory's "
        "base URL (default https://factory.talos.dev), or the base URL of the mirror bucket" % SCHEMATIC,
        "edited entry": "images[0] (schematicID '%s', version 'v1.13.1'): the entry was edited after "
        "its golden "
        "DataVolume %s exists, or that DataVolume was made by someone else "
        "(storage 64Mi -> 128Mi, storageClass %s -> %s), and a DataVolume spec "
        "cannot be "
        "changed in place; add a new (schematicID, version) entry with the new values, move the "
        "pools to it, then "
        "remove the old entry (that stops managing the old golden; it is never deleted)"
        % (SCHEMATIC, ref, world.cls, world.copy_cls),
        "edited empty class": "images[0] (schematicID '%s', version 'v1.13.2'): the entry was edited "
        "after its "
        "golden DataVolume %s/talos-worker-%s-v1.13.2 exists, or that DataVolume was made by "
        "someone else (storageClass '' -> %s), and a "
        "DataVolume spec cannot "
        "be changed in place; add a new (schematicID, version) entry with the new values, move the "
        "pools to it, "
        "then remove the old entry (that stops managing the old golden; it is never deleted)"
        % (SCHEMATIC, world.ns, SCHEMATIC, world.cls),
        "no catalog entry": "%s: its osImage names the golden %s, which has no entry in the worker "
        "image catalog; "
        "add an images[] entry with this schematicID and version to the worker image catalog "
        "(state=present, which "
        "imports it into %s), or remove osImage from the pool so its disks import the factory image "
        "over HTTP as "
        "before" % (p, ref, world.ns),
        "not found": "%s: its osImage names the golden %s/talos-worker-%s-v9.9.9, which does not "
        "exist (is the "
        "worker image catalog enabled with this entry?); add an images[] entry with this schematicID "
        "and version to "
        "the worker image catalog (state=present, which imports it into %s), or remove osImage from "
        "the pool so its "
        "disks import the factory image over HTTP as before" % (p, world.ns, SCHEMATIC, world.ns),
        "failed golden": "%s: its golden %s/talos-worker-%s-v1.12.0 failed to import (Error: "
        "injected failure: the "
        "importer pod failed); check the importer (the DataVolume's events and the importer pod's "
        "log), fix the "
        "cause, then delete the DataVolume %s/talos-worker-%s-v1.12.0 so the catalog imports it again"
        % (p, world.ns, SCHEMATIC, world.ns, SCHEMATIC),
        "class mismatch": "%s: its StorageClass %s (the pool's storageClass) differs from the golden %s's "
        "StorageClass %s; CDI cannot CSI-clone across classes and would fall back to a host-assisted "
        "copy over the "
        "pod network; set the pool's storageClass to %s, or add a catalog entry (a new "
        "schematicID/version) whose "
        "storageClass is %s and point the pool at it, or remove osImage so the pool imports over HTTP"
        % (p, world.copy_cls, ref, world.cls, world.cls, world.copy_cls),
        "disk too small": "%s: diskSize 63Mi (66060288 bytes) is below the golden %s's storage 64Mi "
        "(67108864 "
        "bytes), and a clone target cannot be smaller than its source; set diskSize to at least 64Mi"
        % (p, ref),
        "forbidden": "pool %s/md0: service accounts of namespace %s may not create "
        "datavolumes/source in %s (no "
        "RBAC rule allows it), so CDI would refuse the clone when the worker disk is created; bind "
        "the ClusterRole "
        "cdi-copy-dv (create on datavolumes/source) to the group system:serviceaccounts:%s, or to "
        "system:serviceaccounts, in %s"
        % (world.other_tenant, world.other_tenant, world.ns, world.other_tenant, world.ns),
        "bad pool version": "%s osImage.builtin: version '1.13' does not match "
        "^v[0-9]+\\.[0-9]+\\.[0-9]+(-[0-9a-z.]+)?$; "
        "it becomes part of the DataVolume name talos-worker-<schematicID>-<version> and of the "
        "image URL, so it must "
        "be a Talos release vMAJOR.MINOR.PATCH; give the release as a quoted string with its leading "
        "v, for example "
        'version: "v1.13.0"' % p,
    }
    subject = "images[0] (schematicID '%s', version 'v1.13.1')" % SCHEMATIC
    long_name = "talos-worker-%s-v1.13.1" % ("a" * 240)
    expected.update(
        {
            "bad pool schematic": "%s osImage.builtin: schematicID 'A_B' does not match "
            "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$; it becomes part of the DataVolume name "
            "talos-worker-<schematicID>-<version> and of the image URL, so it must be a plain lowercase "
            "alphanumeric identifier; give the schematic ID exactly as the Image Factory returned it "
            "(lowercase hex)" % p,
            "duplicate entries": "images[1] (schematicID '%s', version 'v1.13.1'): it names the same "
            "golden %s "
            "as images[0]; keep one entry per (schematicID, version)" % (SCHEMATIC, name),
            "name too long": "images[0] (schematicID '%s', version 'v1.13.1'): the golden's name %s is %d "
            "characters, over the 253 a DataVolume name may have; use a shorter schematic ID or version"
            % ("a" * 240, long_name, len(long_name)),
            "bad sha256": "%s: sha256 'abc' is not 64 hexadecimal digits; give the digest os_mirror recorded "
            "for the mirrored raw.xz (sha256:<hex>)" % subject,
            "zero timeout": "option wait_timeout: 0 is not a duration: it must be greater than zero, checked "
            "before anything is written; give a positive number of seconds",
            "no image": "%s: it has no osImage, no imageURL and no Talos settings, so there is nothing for "
            "its disk to import; give osImage.builtin to clone a golden, or talos {schematicID, version} (or "
            "imageURL) for the HTTP import" % p,
            "not a golden": "DataVolume %s/plain: it is not a worker golden (it carries no "
            "kubernetes-worker-image.cozystack.io/schematic-id / "
            "kubernetes-worker-image.cozystack.io/talos-version "
            "annotations); name a golden talos-worker-<schematicID>-<version>; other DataVolumes are "
            "not this "
            "module's to delete" % world.ns,
        }
    )
    for title, msg in expected.items():
        result = run[title]
        assert run.entry(title)["status"] == "ignored", (title, result)
        assert result["msg"] == msg, (title, result["msg"])
        assert result.get("refused") is True, title
    assert url  # the edited golden kept its source
    assert world.golden(name)["spec"]["storage"]["storageClassName"] == world.cls


def test_copy_strategy_refused_unless_accepted(lab, world):
    version = "v1.14.0"
    world.publish(SCHEMATIC, version)
    run = run_playbook(
        kube_play(
            task(
                "golden on the host-copy class",
                images=[world.entry(version, storageClass=world.copy_cls)],
                namespace=world.ns,
                wait_timeout=180,
            ),
            task(
                "render on copy",
                ignore_errors=True,
                state="rendered",
                namespace=world.ns,
                pool=pool(world, version, storageClass=world.copy_cls),
            ),
            task(
                "render on copy, accepted",
                state="rendered",
                namespace=world.ns,
                allow_host_assisted=True,
                pool=pool(world, version, storageClass=world.copy_cls),
            ),
        ),
        env=lab.env(),
    )
    assert run["render on copy"]["msg"] == (
        "pool %s/md0: the clone strategy for StorageClass %s is copy (StorageProfile %s "
        "spec.cloneStrategy), a "
        "host-assisted copy of the whole golden over the pod network, the transfer cloning from a "
        "golden exists to "
        "remove; set CDI spec.cloneStrategyOverride (or the StorageProfile's cloneStrategy) to "
        "csi-clone, or pass "
        "allow_host_assisted=true to accept the copy" % (world.tenant, world.copy_cls, world.copy_cls)
    )
    accepted = run["render on copy, accepted"]
    assert accepted["clone_strategy"]["strategy"] == "copy", run.log


def test_cdi_override_wins_over_the_profile(lab, world):
    """CDI.spec.cloneStrategyOverride: copy makes even a csi-clone class host-assisted."""
    version = "v1.13.0"
    world.publish(SCHEMATIC, version)
    body = {"apiVersion": "%s/%s" % (CDI, CDI_V), "kind": "CDI", "metadata": {"name": "cdi-" + world.tag}}
    body["spec"] = {"cloneStrategyOverride": "copy"}
    world.custom.create_cluster_custom_object(CDI, CDI_V, "cdis", body)
    try:
        run = run_playbook(
            kube_play(
                task("golden", images=[world.entry(version)], namespace=world.ns, wait_timeout=180),
                task(
                    "render",
                    ignore_errors=True,
                    state="rendered",
                    namespace=world.ns,
                    pool=pool(world, version),
                ),
            ),
            env=lab.env(),
        )
        assert "is copy (CDI cdi-%s spec.cloneStrategyOverride)" % world.tag in run["render"]["msg"], run.log
    finally:
        world.custom.delete_cluster_custom_object(CDI, CDI_V, "cdis", "cdi-" + world.tag)


def test_twenty_workers_cost_one_import(lab, world):
    version = "v1.15.0"
    url = world.publish(SCHEMATIC, version)
    name = "talos-worker-%s-%s" % (SCHEMATIC, version)
    cdi = cdi_controller(lab)
    before = cdi.http_bytes(url)
    run = run_playbook(
        kube_play(
            task("golden", images=[world.entry(version)], namespace=world.ns, wait_timeout=180),
            task("render", state="rendered", namespace=world.ns, pool=pool(world, version)),
        ),
        env=lab.env(),
    )
    assert run.ok, run.log
    rendered = run["render"]
    assert rendered["clone_strategy"]["strategy"] == "csi-clone"
    disk = rendered["data_volume"]
    assert disk["spec"]["source"] == {"pvc": {"namespace": world.ns, "name": name}}
    assert disk["spec"]["storage"]["storageClassName"] == world.cls
    names = []
    for i in range(20):  # what CAPK does with the template: one disk per machine
        body = json.loads(json.dumps(disk))
        body["metadata"]["name"] = "md0-%02d-disk-system" % i
        world.create_dv(body)
        names.append(body["metadata"]["name"])
    types = set()
    for n in names:
        obj = world.wait_phase(world.tenant, n)
        types.add(obj["metadata"]["annotations"]["cdi.kubevirt.io/cloneType"])
    assert types == {"csi-clone"}
    fetched = cdi.http_bytes(url) - before
    golden_bytes = len(world.xz)
    print(
        "20 worker disks: %d bytes over HTTP for a %d-byte golden (%.2f x)"
        % (fetched, golden_bytes, fetched / golden_bytes)
    )
    assert fetched == golden_bytes

    # The same clone on another class is what the class guard refuses: CDI would copy it host-assisted.
    cross = json.loads(json.dumps(disk))
    cross["metadata"]["name"] = "md0-cross-disk-system"
    cross["metadata"]["annotations"]["kubernetes-worker-image.cozystack.io/pool"] = "cross"
    cross["spec"]["storage"]["storageClassName"] = "lab-fs"
    world.create_dv(cross)
    obj = world.wait_phase(world.tenant, "md0-cross-disk-system")
    assert obj["metadata"]["annotations"]["cdi.kubevirt.io/cloneType"] == "copy"
    assert cdi.http_bytes(url) - before == golden_bytes

    second = json.loads(json.dumps(cross))
    second["metadata"]["name"] = "md0-cross-2-disk-system"
    second["spec"]["storage"]["storageClassName"] = world.cls
    world.create_dv(second)
    world.wait_phase(world.tenant, "md0-cross-2-disk-system")
    run = run_playbook(
        kube_play(
            task(
                "pool on two classes",
                ignore_errors=True,
                state="rendered",
                namespace=world.ns,
                pool=pool(world, version, name="cross", storageClass=""),
            ),
            task("who clones", state="info", namespace=world.ns),
            task("delete in use", ignore_errors=True, state="absent", name=name, namespace=world.ns),
        ),
        env=lab.env(),
    )
    info = next(g for g in run["who clones"]["goldens"] if g["name"] == name)
    assert info["consumers"]["pools"] == ["%s/cross" % world.tenant, "%s/md0" % world.tenant]
    assert len(info["consumers"]["disks"]) == 22
    assert run["pool on two classes"]["msg"] == (
        "pool %s/cross: its bound disks are on several StorageClasses (lab-fs, %s) and the pool names none; "
        "set the pool's storageClass to the class its disks should be on" % (world.tenant, world.cls)
    )
    disks = sorted(
        "%s/%s" % (world.tenant, n) for n in names + ["md0-cross-disk-system", "md0-cross-2-disk-system"]
    )
    golden_claim = "PersistentVolumeClaim %s/%s" % (world.ns, name)
    assert run["delete in use"]["msg"] == (
        "golden DataVolume %s/%s: refusing to delete it, 22 object(s) use it: %s; move those pools to "
        "another golden (or remove their osImage) and let their disks be replaced, then delete it"
        % (world.ns, name, "; ".join("DataVolume %s clones from %s" % (d, golden_claim) for d in disks))
    )
    assert world.golden(name) is not None


def test_default_class_resolution(lab, world):
    """Empty classes resolve to the default on both sides; of several defaults the newest wins; a pool
    that has cloned keeps the class of its bound disks when the default moves."""
    version = "v1.16.0"
    world.publish(SCHEMATIC, version)
    name = "talos-worker-%s-%s" % (SCHEMATIC, version)
    empty = {"storageClass": ""}
    run = run_playbook(
        kube_play(
            task(
                "golden on the default",
                images=[world.entry(version, **empty)],
                namespace=world.ns,
                wait_timeout=180,
            ),
            task(
                "pool on the default",
                state="rendered",
                namespace=world.ns,
                pool=pool(world, version, name="md5", **empty),
            ),
            task(
                "pool named the default",
                state="rendered",
                namespace=world.ns,
                pool=pool(world, version, name="md5", storageClass="lab-fs"),
            ),
        ),
        env=lab.env(),
    )
    assert run.ok, run.log
    assert world.golden(name)["spec"]["storage"].get("storageClassName") is None
    disk = run["pool on the default"]["data_volume"]
    assert disk["spec"]["storage"]["storageClassName"] == "lab-fs"  # resolved, then written
    assert run["pool named the default"]["data_volume"] == disk

    body = json.loads(json.dumps(disk))
    body["metadata"]["name"] = "md5-a-disk-system"
    world.create_dv(body)
    world.wait_phase(world.tenant, "md5-a-disk-system")

    world.make_default("newdefault-" + world.tag)  # two defaults now: the newest wins
    fresh = pool(world, version, name="md6", storageClass="")
    run = run_playbook(
        kube_play(
            task(
                "cloned pool after the default moved",
                state="rendered",
                namespace=world.ns,
                pool=pool(world, version, name="md5", **empty),
            ),
            task(
                "new pool after the default moved",
                ignore_errors=True,
                state="rendered",
                namespace=world.ns,
                pool=fresh,
            ),
        ),
        env=lab.env(),
    )
    kept = run["cloned pool after the default moved"]
    assert kept["data_volume"]["spec"]["storage"]["storageClassName"] == "lab-fs", run.log
    assert run["new pool after the default moved"]["msg"] == (
        "pool %s/md6: its StorageClass newdefault-%s (the cluster default StorageClass) differs from "
        "the golden "
        "%s/%s's StorageClass lab-fs; CDI cannot CSI-clone across classes and would fall back to a "
        "host-assisted copy "
        "over the pod network; set the pool's storageClass to lab-fs, or add a catalog entry (a new "
        "schematicID/version) whose storageClass is newdefault-%s and point the pool at it, or "
        "remove osImage so the "
        "pool imports over HTTP" % (world.tenant, world.tag, world.ns, name, world.tag)
    )


def test_http_path_is_byte_identical(lab, world):
    """Without osImage the disk renders as before the feature, whatever the catalog and the cluster hold."""
    http_pool = {
        "name": "md9",
        "namespace": world.tenant,
        "imageURL": "https://factory.talos.dev/image/x/v1.9.0/nocloud-amd64.raw.xz",
    }
    expected = (
        '{"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume", "metadata": {"annotations": '
        '{"cdi.kubevirt.io/storage.usePopulator": "false"}, "name": "md9-disk-system", "namespace": "%s"}, '
        '"spec": {"source": {"http": {"url": '
        '"https://factory.talos.dev/image/x/v1.9.0/nocloud-amd64.raw.xz"}}, '
        '"storage": {"resources": {"requests": {"storage": "20Gi"}}}}}' % world.tenant
    )
    renders = []
    for _run in range(2):
        run = run_playbook(
            kube_play(task("render", state="rendered", namespace=world.ns, pool=http_pool)), env=lab.env()
        )
        assert run.ok, run.log
        renders.append(json.dumps(run["render"]["data_volume"], sort_keys=True))
        assert run["render"]["clone_strategy"] is None
        world.make_default("moved-" + uuid.uuid4().hex[:6])
    assert renders == [expected, expected]


def test_mirror_digest_pinning(lab, world):
    """A factory URL on the mirror bucket: the golden is pinned to the recorded sha256; an object whose
    sha256 differs from the pinned one is refused, and bytes that do not match fail the import."""
    pinned, wrong, tampered = "v1.17.0", "v1.17.1", "v1.17.2"
    world.publish(SCHEMATIC, pinned, recorded=world.sha256)
    world.publish(SCHEMATIC, wrong, recorded=world.sha256)
    world.publish(SCHEMATIC, tampered, body=world.xz[:-1] + b"\0", recorded=world.sha256)
    other = "f" * 64
    lab.clear_audit()
    run = run_playbook(
        kube_play(
            task("pinned by the mirror", images=[world.entry(pinned)], namespace=world.ns, wait_timeout=180),
            task(
                "entry pins another digest",
                ignore_errors=True,
                images=[world.entry(wrong, sha256="sha256:" + other)],
                namespace=world.ns,
            ),
            task(
                "tampered object",
                ignore_errors=True,
                images=[world.entry(tampered)],
                namespace=world.ns,
                wait_timeout=180,
            ),
        ),
        env=lab.env(),
    )
    golden = world.golden("talos-worker-%s-%s" % (SCHEMATIC, pinned))
    assert golden["spec"]["source"]["http"]["checksum"] == "sha256:" + world.sha256, run.log
    assert golden["status"]["phase"] == "Succeeded"
    url = "%s/image/%s/%s/openstack-amd64.raw.xz" % (world.factory, SCHEMATIC, wrong)
    assert run["entry pins another digest"]["msg"] == (
        "images[0] (schematicID '%s', version '%s'): the object at %s has sha256 %s, not the sha256 "
        "%s the entry "
        "pins; importing it would make a golden of other bytes than the ones mirrored; mirror the "
        "image again "
        "(os_mirror copies it by digest) and pin the digest it records, or point imageFactoryURL at "
        "the bucket that "
        "holds that digest" % (SCHEMATIC, wrong, url, world.sha256, other)
    )
    assert world.golden("talos-worker-%s-%s" % (SCHEMATIC, wrong)) is None
    failed = run["tampered object"]
    assert run.entry("tampered object")["status"] == "ignored"
    assert "failed to import" in failed["msg"] and "checksum mismatch" in failed["msg"], failed["msg"]
    gold = next(g for g in failed["goldens"] if g["version"] == tampered)
    assert gold["phase"] == "Failed" and "checksum mismatch" in gold["reason"]


def test_no_default_class_to_resolve_an_empty_one(lab, world):
    """An empty class with no cluster default cannot be resolved: refused, not guessed."""
    version = "v1.13.0"
    world.publish(SCHEMATIC, version)
    run = run_playbook(
        kube_play(task("golden", images=[world.entry(version)], namespace=world.ns, wait_timeout=180)),
        env=lab.env(),
    )
    assert run.ok, run.log
    mark = "storageclass.kubernetes.io/is-default-class"
    defaults = [
        sc.metadata.name
        for sc in world.storage.list_storage_class().items
        if (sc.metadata.annotations or {}).get(mark) == "true"
    ]
    for name in defaults:
        world.storage.patch_storage_class(name, {"metadata": {"annotations": {mark: "false"}}})
    try:
        run = run_playbook(
            kube_play(
                task(
                    "empty class, no default",
                    ignore_errors=True,
                    state="rendered",
                    namespace=world.ns,
                    pool=pool(world, version, name="md7", storageClass=""),
                )
            ),
            env=lab.env(),
        )
    finally:
        for name in defaults:
            world.storage.patch_storage_class(name, {"metadata": {"annotations": {mark: "true"}}})
    assert run["empty class, no default"]["msg"] == (
        "pool %s/md7: the pool has an empty StorageClass, which CDI resolves to the default virt "
        "StorageClass, else the cluster default, and the cluster has neither (no StorageClass is annotated "
        "storageclass.kubevirt.io/is-default-virt-class or storageclass.kubernetes.io/is-default-class); set "
        "storageClass explicitly on the pool and on the catalog entry" % world.tenant
    )


def render(world, title, body, **extra):
    """A state=rendered task of the pool ``body`` against the world's goldens."""
    return task(title, state="rendered", namespace=world.ns, pool=body, **extra)


def worker_rules():
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.workers import worker

    return worker


def storage_classes(world):
    return [
        world.storage.api_client.sanitize_for_serialization(sc)
        for sc in world.storage.list_storage_class().items
    ]


def claim_class(world, namespace, name, timeout=60):
    """The class of a claim once bound (CDI makes a DataVolume's claim a moment after the DataVolume)."""
    from kubernetes.client.rest import ApiException

    deadline = time.monotonic() + timeout
    while True:
        try:
            pvc = world.core.read_namespaced_persistent_volume_claim(name, namespace)
        except ApiException as exc:
            if exc.status != 404 or time.monotonic() > deadline:
                raise
            pvc = None
        if pvc is not None and (pvc.status.phase == "Bound" or time.monotonic() > deadline):
            return pvc.spec.storage_class_name
        time.sleep(0.2)


def annotated_claim(world, name, golden_name, pool_name, cls=None):
    """A worker disk that is only a claim: made outside the chart, or left when CDI collected its
    DataVolume."""
    notes = {
        "kubernetes-worker-image.cozystack.io/golden": golden_name,
        "kubernetes-worker-image.cozystack.io/pool": pool_name,
    }
    world.core.create_namespaced_persistent_volume_claim(
        world.tenant,
        {
            "metadata": {"name": name, "annotations": notes},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": cls or world.cls,
                "resources": {"requests": {"storage": "64Mi"}},
            },
        },
    )


def test_the_virt_default_class_is_the_one_cdi_and_the_collection_resolve(lab, world):
    """An empty class on a DataVolume's spec.storage: CDI (the lab's, as upstream) binds VM disk content on
    the class annotated is-default-virt-class, other content on the cluster default, and the collection
    resolves both the same way; a pool at an empty class clones onto the virt class, and a golden on the
    ordinary default is refused rather than written onto the disk."""
    rules = worker_rules()
    virt = "vmdisks-" + world.tag
    time.sleep(1.1)  # newer than every class made before
    world.storage.create_storage_class(
        {
            "metadata": {
                "name": virt,
                "annotations": {"storageclass.kubevirt.io/is-default-virt-class": "true"},
            },
            "provisioner": PROVISIONER,
            "volumeBindingMode": "Immediate",
        }
    )
    profile = {"apiVersion": "%s/%s" % (CDI, CDI_V), "kind": "StorageProfile", "metadata": {"name": virt}}
    profile["spec"] = {"cloneStrategy": "csi-clone"}
    world.custom.create_cluster_custom_object(CDI, CDI_V, "storageprofiles", profile)
    try:
        on_virt, on_plain = "v1.18.0", "v1.18.1"
        for version in (on_virt, on_plain):
            world.publish(SCHEMATIC, version)
        plain_default = rules.default_class(storage_classes(world), "archive")
        run = run_playbook(
            kube_play(
                task(
                    "goldens",
                    images=[
                        world.entry(on_virt, storageClass=""),
                        world.entry(on_plain, storageClass=plain_default),
                    ],
                    namespace=world.ns,
                    wait_timeout=180,
                ),
                render(
                    world,
                    "pool at an empty class",
                    pool(world, on_virt, name="md10", storageClass=""),
                ),
                render(
                    world,
                    "pool at an empty class, golden on the ordinary default",
                    pool(world, on_plain, name="md11", storageClass=""),
                    ignore_errors=True,
                ),
            ),
            env=lab.env(),
        )
        assert run["goldens"]["changed"] is True, run.log
        golden_name = "talos-worker-%s-%s" % (SCHEMATIC, on_virt)
        # The lab's CDI and the collection agree: kubevirt content on the virt class, archive on the default.
        assert (
            claim_class(world, world.ns, golden_name) == virt == rules.default_class(storage_classes(world))
        )
        world.create_dv(
            {
                "apiVersion": "%s/%s" % (CDI, CDI_V),
                "kind": "DataVolume",
                "metadata": {"name": "archive-" + world.tag, "namespace": world.tenant},
                "spec": {
                    "contentType": "archive",
                    "source": {"blank": {}},
                    "storage": {"resources": {"requests": {"storage": "1Mi"}}},
                },
            }
        )
        assert claim_class(world, world.tenant, "archive-" + world.tag) == plain_default != virt

        disk = run["pool at an empty class"]["data_volume"]
        assert disk["spec"]["storage"]["storageClassName"] == virt
        assert run["pool at an empty class"]["clone_strategy"]["strategy"] == "csi-clone"
        disk["metadata"]["name"] = "md10-a-disk-system"
        world.create_dv(disk)
        cloned = world.wait_phase(world.tenant, "md10-a-disk-system")
        assert cloned["metadata"]["annotations"]["cdi.kubevirt.io/cloneType"] == "csi-clone"

        plain_ref = "%s/talos-worker-%s-%s" % (world.ns, SCHEMATIC, on_plain)
        assert run["pool at an empty class, golden on the ordinary default"]["msg"] == (
            "pool %s/md11: its StorageClass %s (the default virt StorageClass) differs from the golden %s's "
            "StorageClass %s; CDI cannot CSI-clone across classes and would fall back to a host-assisted "
            "copy over the pod network; set the pool's storageClass to %s, or add a catalog entry (a new "
            "schematicID/version) whose storageClass is %s and point the pool at it, or remove osImage so "
            "the pool imports over HTTP" % (world.tenant, virt, plain_ref, plain_default, plain_default, virt)
        )
    finally:
        world.custom.delete_cluster_custom_object(CDI, CDI_V, "storageprofiles", virt)
        world.storage.delete_storage_class(virt, _preload_content=False)


def test_two_clusters_in_one_namespace_keep_their_pools_apart(lab, world):
    """Pools md8 of clusters k1 and k2 share the tenant namespace; k2's disks (named by the chart, without the
    cluster annotation) are on another class. Each pool reads only its own disks."""
    version = "v1.19.0"
    world.publish(SCHEMATIC, version)
    k1 = pool(world, version, name="md8", cluster="k1")
    run = run_playbook(
        kube_play(
            task("golden", images=[world.entry(version)], namespace=world.ns, wait_timeout=180),
            render(world, "render k1", k1),
        ),
        env=lab.env(),
    )
    assert run.ok, run.log
    disk = run["render k1"]["data_volume"]
    assert disk["metadata"]["name"] == "disk-system-k1-md8"
    assert disk["metadata"]["annotations"]["kubernetes-worker-image.cozystack.io/cluster"] == "k1"
    mine = json.loads(json.dumps(disk))
    mine["metadata"]["name"] = "disk-system-k1-md8-a"
    world.create_dv(mine)
    theirs = json.loads(json.dumps(disk))
    theirs["metadata"]["name"] = "disk-system-k2-md8-a"
    del theirs["metadata"]["annotations"]["kubernetes-worker-image.cozystack.io/cluster"]
    theirs["spec"]["storage"]["storageClassName"] = "lab-fs"
    world.create_dv(theirs)
    for name in ("disk-system-k1-md8-a", "disk-system-k2-md8-a"):
        world.wait_phase(world.tenant, name)

    empty = {"storageClass": ""}
    run = run_playbook(
        kube_play(
            render(world, "k1", dict(k1, **empty)),
            render(
                world,
                "k2",
                dict(k1, cluster="k2", **empty),
                ignore_errors=True,
            ),
            render(
                world,
                "no cluster",
                dict(k1, cluster=None, **empty),
                ignore_errors=True,
            ),
            task("who clones", state="info", namespace=world.ns),
        ),
        env=lab.env(),
    )
    assert run["k1"]["data_volume"]["spec"]["storage"]["storageClassName"] == world.cls, run.log
    assert run["k2"]["msg"].startswith(
        "pool %s/k2/md8: its StorageClass lab-fs (the pool's bound disks) differs from the golden"
        % world.tenant
    )
    assert run["no cluster"]["msg"] == (
        "pool %s/md8: the disks of pool md8 in namespace %s belong to the clusters k1, k2, and the pool "
        "names none; give pool.cluster, the tenant cluster the pool belongs to" % (world.tenant, world.tenant)
    )
    golden_name = "talos-worker-%s-%s" % (SCHEMATIC, version)
    info = next(g for g in run["who clones"]["goldens"] if g["name"] == golden_name)
    assert info["consumers"]["pools"] == ["%s/k1/md8" % world.tenant, "%s/k2/md8" % world.tenant]


def test_builtin_inherits_the_pools_talos_settings_and_http_imports_from_them(lab, world):
    """osImage {builtin: {}} clones the golden of the pool's Talos settings; a pool without osImage imports
    the factory image of its Talos settings over HTTP (imageURL overrides it), and CDI really imports it."""
    version = "v1.20.0"
    url = world.publish(SCHEMATIC, version)
    talos = {"schematicID": SCHEMATIC, "version": version, "imageFactoryURL": world.factory}
    explicit = pool(world, version, name="md12")
    inherited = dict(explicit, osImage={"builtin": {}}, talos=talos)
    http = {"name": "md13", "namespace": world.tenant, "talos": talos, "diskSize": "1Gi"}
    run = run_playbook(
        kube_play(
            task("golden", images=[world.entry(version)], namespace=world.ns, wait_timeout=180),
            render(world, "explicit", explicit),
            render(world, "inherited", inherited),
            render(world, "http from talos", http),
            render(
                world,
                "http overridden",
                dict(http, imageURL="https://example.com/own.raw.xz"),
            ),
        ),
        env=lab.env(),
    )
    assert run.ok, run.log
    assert run["inherited"]["data_volume"] == run["explicit"]["data_volume"]
    assert run["inherited"]["data_volume"]["spec"]["source"]["pvc"]["name"] == "talos-worker-%s-%s" % (
        SCHEMATIC,
        version,
    )
    assert run["http overridden"]["data_volume"]["spec"]["source"] == {
        "http": {"url": "https://example.com/own.raw.xz"}
    }
    disk = run["http from talos"]["data_volume"]
    assert (
        disk["spec"]["source"] == {"http": {"url": url}} and run["http from talos"]["clone_strategy"] is None
    )
    before = cdi_controller(lab).http_bytes(url)
    disk["metadata"]["name"] = "md13-a-disk-system"
    world.create_dv(disk)
    world.wait_phase(world.tenant, "md13-a-disk-system")
    assert cdi_controller(lab).http_bytes(url) - before == len(world.xz)


def test_check_mode_promises_no_golden_into_a_missing_namespace(lab, world):
    """The run could not create a golden in a namespace that does not exist; check mode says so too."""
    version = "v1.13.0"
    world.publish(SCHEMATIC, version)
    missing = "absent-" + world.tag
    present = task("golden", ignore_errors=True, images=[world.entry(version)], namespace=missing, wait=False)
    for check in (True, False):
        lab.clear_audit()
        run = run_playbook(kube_play(present), env=lab.env(), check=check)
        assert run["golden"]["msg"] == (
            "namespace %s: it does not exist, so the goldens talos-worker-%s-%s cannot be created in it; "
            "create the namespace first (Cozystack makes cozy-public with the platform), or give the "
            "namespace the goldens belong in" % (missing, SCHEMATIC, version)
        ), (check, run["golden"])
        assert run["golden"].get("changed") is not True and writes(lab) == []


@pytest.mark.suite("data-loss")
def test_claim_only_disks_keep_their_golden_and_orphans_stay_visible(lab, world):
    """A worker disk that is only a claim (its DataVolume collected, or made outside the chart) keeps its
    golden from state=absent and is counted by state=info; disks whose golden is gone are reported."""
    from kubernetes.client.rest import ApiException

    version, doomed = "v1.21.0", "v1.21.1"
    for v in (version, doomed):
        world.publish(SCHEMATIC, v)
    golden_name = "talos-worker-%s-%s" % (SCHEMATIC, version)
    doomed_name = "talos-worker-%s-%s" % (SCHEMATIC, doomed)
    run = run_playbook(
        kube_play(
            task(
                "goldens",
                images=[world.entry(version), world.entry(doomed)],
                namespace=world.ns,
                wait_timeout=180,
            ),
            render(world, "render", pool(world, doomed, name="md15")),
        ),
        env=lab.env(),
    )
    assert run.ok, run.log
    annotated_claim(world, "md14-hand-made", golden_name, "md14")
    annotated_claim(world, "md16-left-behind", "talos-worker-%s-v0.0.9" % SCHEMATIC, "md16")
    disk = run["render"]["data_volume"]
    disk["metadata"]["name"] = "md15-a-disk-system"
    world.create_dv(disk)
    world.wait_phase(world.tenant, "md15-a-disk-system")
    # The golden deleted behind the collection's back (kubectl delete): its disk still names it.
    world.custom.delete_namespaced_custom_object(CDI, CDI_V, world.ns, "datavolumes", doomed_name)
    try:
        world.core.delete_namespaced_persistent_volume_claim(doomed_name, world.ns)
    except ApiException as exc:  # the garbage collector may have taken it with its DataVolume first
        assert exc.status == 404, exc
    deadline = time.monotonic() + 60
    while world.golden(doomed_name) is not None or any(
        p.metadata.name == doomed_name
        for p in world.core.list_namespaced_persistent_volume_claim(world.ns).items
    ):
        assert time.monotonic() < deadline, "%s is not gone" % doomed_name
        time.sleep(0.2)

    absent = task("delete", ignore_errors=True, state="absent", name=golden_name, namespace=world.ns)
    lab.clear_audit()
    run = run_playbook(kube_play(absent, task("who clones", state="info", namespace=world.ns)), env=lab.env())
    assert run["delete"]["refused"] is True, run["delete"]
    assert run["delete"]["consumers"] == [
        {
            "kind": "PersistentVolumeClaim",
            "namespace": world.tenant,
            "name": "md14-hand-made",
            "why": "is a worker disk of pool md14 made from it (annotation "
            "kubernetes-worker-image.cozystack.io/golden; a claim whose DataVolume is gone)",
        }
    ]
    assert [r for r in writes(lab) if r["verb"] in ("delete", "deletecollection")] == []
    assert world.golden(golden_name) is not None
    info = next(g for g in run["who clones"]["goldens"] if g["name"] == golden_name)
    assert info["consumers"] == {
        "disks": ["%s/md14-hand-made" % world.tenant],
        "pools": ["%s/md14" % world.tenant],
    }
    assert run["who clones"]["orphans"] == [  # by golden, then disk
        {
            "kind": "PersistentVolumeClaim",
            "namespace": world.tenant,
            "name": "md16-left-behind",
            "golden": "talos-worker-%s-v0.0.9" % SCHEMATIC,
            "pool": "%s/md16" % world.tenant,
        },
        {
            "kind": "DataVolume",
            "namespace": world.tenant,
            "name": "md15-a-disk-system",
            "golden": doomed_name,
            "pool": "%s/md15" % world.tenant,
        },
    ]

    world.core.delete_namespaced_persistent_volume_claim("md14-hand-made", world.tenant)
    deadline = time.monotonic() + 60
    while any(
        p.metadata.name == "md14-hand-made"
        for p in world.core.list_namespaced_persistent_volume_claim(world.tenant).items
    ):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    run = run_playbook(kube_play(absent), env=lab.env())
    assert run["delete"]["changed"] is True and "refused" not in run["delete"], run["delete"]
