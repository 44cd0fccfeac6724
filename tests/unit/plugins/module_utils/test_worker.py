import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import _signing as signing
from ansible_collections.goldenimage.pipeline.plugins.module_utils.provenance import provenance
from ansible_collections.goldenimage.pipeline.plugins.module_utils.workers import worker as w
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import given, settings
from hypothesis import strategies as st

SCHEMATIC = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
NAME = "talos-worker-%s-v1.13.0" % SCHEMATIC


def entry(**overrides):
    raw = {"schematicID": SCHEMATIC, "version": "v1.13.0"}
    raw.update(overrides)
    return w.catalog([raw])[0]


def sc(name, default=False, beta=False, created="2026-01-01T00:00:00Z"):
    notes = {}
    if default:
        notes[w.DEFAULT_CLASS] = "true"
    if beta:
        notes[w.BETA_DEFAULT_CLASS] = "true"
    return {"metadata": {"name": name, "annotations": notes, "creationTimestamp": created}}


def pvc(name, cls, phase="Bound", capacity=None):
    obj = {"metadata": {"name": name}, "spec": {"storageClassName": cls}, "status": {"phase": phase}}
    if capacity:
        obj["status"]["capacity"] = {"storage": capacity}
    return obj


def pool(**overrides):
    raw = {
        "name": "md0",
        "namespace": "tenant-a",
        "osImage": {"builtin": {"schematicID": SCHEMATIC, "version": "v1.13.0"}},
        "storageClass": "",
        "diskSize": "20Gi",
    }
    raw.update(overrides)
    return w.pool_request(raw)


# --- names and patterns


def test_catalog_defaults_and_name():
    e = entry()
    assert e["name"] == NAME
    assert e["imageFactoryURL"] == "https://factory.talos.dev"
    assert e["storage"] == "6Gi" and e["storageClass"] == "replicated"
    assert e["url"] == "https://factory.talos.dev/image/%s/v1.13.0/openstack-amd64.raw.xz" % SCHEMATIC


def test_factory_trailing_slash_trimmed():
    assert entry(imageFactoryURL="https://f.example/talos/")["url"].startswith(
        "https://f.example/talos/image/"
    )


@pytest.mark.parametrize("bad", ["ABC", "-abc", "abc-", "a_b", "a.b", "", None])
def test_schematic_pattern_refused_with_why(bad):
    with pytest.raises(Refusal) as exc:
        entry(schematicID=bad)
    assert exc.value.msg == (
        "images[0] (schematicID %r, version 'v1.13.0'): schematicID %r does not match "
        "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$; it becomes part of the DataVolume name "
        "talos-worker-<schematicID>-<version> and of the image URL, so it must be a plain lowercase "
        "alphanumeric identifier; give the schematic ID exactly as the Image Factory returned it "
        "(lowercase hex)" % (bad, bad)
    )


@pytest.mark.parametrize("bad", ["1.13.0", "v1.13", "v1.13.0_rc", "V1.13.0", "v1.13.0-RC1", 1.13])
def test_version_pattern_refused(bad):
    with pytest.raises(Refusal) as exc:
        entry(version=bad)
    assert "version %r does not match ^v[0-9]+\\.[0-9]+\\.[0-9]+(-[0-9a-z.]+)?$" % (bad,) in exc.value.msg
    assert exc.value.msg.startswith("images[0] (schematicID")


def test_prerelease_version_accepted():
    assert entry(version="v1.14.0-alpha.1")["name"].endswith("-v1.14.0-alpha.1")


@pytest.mark.parametrize("bad", ["ftp://f", "factory.talos.dev", "https://f/x?y=1"])
def test_factory_refused(bad):
    with pytest.raises(Refusal) as exc:
        entry(imageFactoryURL=bad)
    assert "is not an http(s) URL of the form https://host[/path]" in exc.value.msg


def test_urls_with_credentials_are_refused_by_the_one_rule_without_echoing_them():
    with pytest.raises(Refusal) as exc:
        entry(imageFactoryURL="https://u:hunter2@f.example")
    assert "imageFactoryURL (https://REDACTED@f.example): the URL carries credentials" in exc.value.msg
    assert "hunter2" not in exc.value.msg and "without credentials" in exc.value.msg
    with pytest.raises(Refusal) as exc:
        pool(osImage=None, imageURL="https://u:hunter2@f.example/talos.raw.xz")
    assert "imageURL (https://REDACTED@f.example/talos.raw.xz): the URL carries credentials" in exc.value.msg
    assert "hunter2" not in exc.value.msg and "osImage.builtin" in exc.value.msg


def test_pool_side_uses_the_same_patterns():
    with pytest.raises(Refusal) as exc:
        pool(osImage={"builtin": {"schematicID": "Bad", "version": "v1.13.0"}})
    assert exc.value.msg.startswith("pool tenant-a/md0 osImage.builtin: schematicID 'Bad' does not match")
    with pytest.raises(Refusal) as exc:
        pool(osImage={"builtin": {"schematicID": SCHEMATIC, "version": "1.13.0"}})
    assert exc.value.msg.startswith("pool tenant-a/md0 osImage.builtin: version '1.13.0' does not match")


def test_duplicate_entries_refused():
    raw = {"schematicID": SCHEMATIC, "version": "v1.13.0"}
    with pytest.raises(Refusal) as exc:
        w.catalog([raw, dict(raw, storage="8Gi")])
    assert "it names the same golden %s as images[0]" % NAME in exc.value.msg


@pytest.mark.parametrize(
    "text,expected",
    [
        ("6Gi", 6 * 2**30),
        ("6144Mi", 6 * 2**30),
        ("6442450944", 6 * 2**30),
        ("6G", 6 * 10**9),
        ("1e3", 1000),
        ("1.5Ki", 1536),
    ],
)
def test_quantity_bytes(text, expected):
    assert w.quantity_bytes(text) == expected


def test_quantity_refused():
    with pytest.raises(Refusal):
        w.quantity_bytes("six gigs", "diskSize")


# --- the golden


def test_a_dropped_checksum_is_refused():
    pinned = w.render_golden(entry(), checksum="ab" * 32)
    pruned = w.render_golden(entry())
    w.refuse_dropped_checksum(entry(), pinned, pinned)
    w.refuse_dropped_checksum(entry(), pruned, pruned)  # nothing pinned, nothing to lose
    with pytest.raises(Refusal) as exc:
        w.refuse_dropped_checksum(entry(), pinned, pruned)
    assert exc.value.msg == (
        "images[0] (schematicID '%s', version 'v1.13.0'): the cluster's CDI drops "
        "spec.source.http.checksum from the golden "
        "DataVolume cozy-public/%s (the field came in CDI v1.65.0), so the import of the pinned sha256 would "
        "not be verified; upgrade CDI to v1.65.0 or later; a golden cannot be pinned to a digest on an older "
        "CDI" % (SCHEMATIC, NAME)
    )


def test_render_golden():
    dv = w.render_golden(entry(certConfigMap="factory-ca"), checksum="ab" * 32)
    meta = dv["metadata"]
    assert meta["name"] == NAME and meta["namespace"] == "cozy-public"
    assert meta["labels"] == {"app.kubernetes.io/managed-by": "cozystack"}
    assert meta["annotations"] == {
        "helm.sh/resource-policy": "keep",
        "cdi.kubevirt.io/storage.bind.immediate.requested": "true",
        "cdi.kubevirt.io/storage.usePopulator": "true",
        "kubernetes-worker-image.cozystack.io/schematic-id": SCHEMATIC,
        "kubernetes-worker-image.cozystack.io/talos-version": "v1.13.0",
    }
    assert dv["spec"] == {
        "contentType": "kubevirt",
        "source": {
            "http": {
                "url": "https://factory.talos.dev/image/%s/v1.13.0/openstack-amd64.raw.xz" % SCHEMATIC,
                "certConfigMap": "factory-ca",
                "checksum": "sha256:" + "ab" * 32,
            }
        },
        "storage": {"resources": {"requests": {"storage": "6Gi"}}, "storageClassName": "replicated"},
    }


def test_empty_class_is_left_to_the_cluster():
    assert "storageClassName" not in w.render_golden(entry(storageClass=""))["spec"]["storage"]


def test_unchanged_entry_is_not_an_edit_and_sizes_compare_as_bytes():
    live = w.render_golden(entry(storage="6144Mi"))
    w.refuse_edited(entry(), live)  # 6Gi == 6144Mi


def test_edited_entry_refused_with_each_field():
    live = w.render_golden(entry())
    with pytest.raises(Refusal) as exc:
        w.refuse_edited(entry(storage="8Gi", storageClass="fast", imageFactoryURL="https://m.example"), live)
    assert exc.value.msg == (
        "images[0] (schematicID %r, version 'v1.13.0'): the entry was edited after its golden DataVolume "
        "cozy-public/%s exists, or that DataVolume was made by someone else "
        "(source URL https://factory.talos.dev/image/%s/v1.13.0/openstack-amd64.raw.xz "
        "-> https://m.example/image/%s/v1.13.0/openstack-amd64.raw.xz, storage 6Gi -> 8Gi, storageClass "
        "replicated -> fast), and a DataVolume spec cannot be changed in place; add a new "
        "(schematicID, version) "
        "entry with the new values, move the pools to it, then remove the old entry (that stops managing the "
        "old golden; it is never deleted)" % (SCHEMATIC, NAME, SCHEMATIC, SCHEMATIC)
    )


def test_an_empty_live_class_is_a_value():
    live = w.render_golden(entry(storageClass=""))
    with pytest.raises(Refusal) as exc:
        w.refuse_edited(entry(), live)
    assert "storageClass '' -> replicated" in exc.value.msg


def test_digest_refused_when_the_object_differs():
    e = entry(sha256="sha256:" + "a" * 64)
    w.refuse_digest(e, "a" * 64, "u")
    w.refuse_digest(e, None, "u")
    with pytest.raises(Refusal) as exc:
        w.refuse_digest(e, "b" * 64, "https://mirror/x")
    assert "the object at https://mirror/x has sha256 %s, not the sha256 %s the entry pins" % (
        "b" * 64,
        "a" * 64,
    ) in (exc.value.msg)


def test_bad_digest_refused():
    with pytest.raises(Refusal):
        entry(sha256="abc")


# --- consumers and deletes


def disk(name, ns="tenant-a", golden=NAME, pool_name="md0", annotate=True):
    notes = {w.GOLDEN_ANNOTATION: golden, w.POOL_ANNOTATION: pool_name} if annotate else {}
    return {
        "metadata": {"name": name, "namespace": ns, "annotations": notes},
        "spec": {"source": {"pvc": {"namespace": "cozy-public", "name": golden}}},
    }


def test_consumers_by_annotation_and_source():
    dvs = [disk("a"), disk("b", annotate=False), disk("c", golden="other"), w.render_golden(entry())]
    assert w.consumers("cozy-public", NAME, dvs) == {
        "disks": ["tenant-a/a", "tenant-a/b"],
        "pools": ["tenant-a/md0"],
    }


def test_delete_refused_while_cloned():
    golden = w.render_golden(entry())
    with pytest.raises(Refusal) as exc:
        w.refuse_delete_in_use(golden, {"datavolumes": [disk("a")]})
    assert exc.value.msg == (
        "golden DataVolume cozy-public/%s: refusing to delete it, 1 object(s) use it: DataVolume tenant-a/a "
        "clones from PersistentVolumeClaim cozy-public/%s; move those pools to another golden (or remove "
        "their osImage) and let their disks be replaced, then delete it" % (NAME, NAME)
    )
    assert exc.value.result["pools"] == ["tenant-a/md0"]
    w.refuse_delete_in_use(golden, {"datavolumes": [disk("a", golden="other")]})


def test_delete_asks_the_reference_query_not_only_the_worker_disks():
    """Claims cloning the golden (dataSourceRef, dataSource), VMs cloning it in their dataVolumeTemplates,
    snapshots of it, pods and VMs mounting it and annotated disks all count; its importer does not."""
    golden = w.render_golden(entry())
    golden["metadata"]["uid"] = "u-golden"
    ref = {"kind": "PersistentVolumeClaim", "name": NAME, "namespace": "cozy-public"}
    observed = {
        "pvcs": [
            {"metadata": {"name": "by-ref", "namespace": "tenant-b"}, "spec": {"dataSourceRef": ref}},
            {
                "metadata": {"name": "by-source", "namespace": "cozy-public"},
                "spec": {"dataSource": {"kind": "PersistentVolumeClaim", "name": NAME}},
            },
            # A dataSource never reaches another namespace: this one names a claim of its own.
            {
                "metadata": {"name": "elsewhere", "namespace": "tenant-b"},
                "spec": {"dataSource": {"kind": "PersistentVolumeClaim", "name": NAME}},
            },
        ],
        "vms": [
            {
                "metadata": {"name": "vm", "namespace": "tenant-c"},
                "spec": {
                    "dataVolumeTemplates": [
                        {"metadata": {"name": "root"}, "spec": {"source": {"pvc": ref}}},
                    ]
                },
            }
        ],
        "snapshots": [
            {
                "metadata": {"name": "snap", "namespace": "cozy-public"},
                "spec": {"source": {"persistentVolumeClaimName": NAME}},
            }
        ],
        "pods": [
            {
                "metadata": {
                    "name": "importer",
                    "namespace": "cozy-public",
                    "ownerReferences": [{"kind": "PersistentVolumeClaim", "name": NAME}],
                },
                "spec": {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": NAME}}]},
            }
        ],
        "datavolumes": [golden, disk("annotated-only", annotate=True)],
    }
    observed["datavolumes"][1]["spec"]["source"]["pvc"]["name"] = "somewhere-else"
    found = w.delete_consumers(golden, observed)
    assert [(c["kind"], c["namespace"], c["name"]) for c in found] == [
        ("VirtualMachine", "tenant-c", "vm"),
        ("PersistentVolumeClaim", "tenant-b", "by-ref"),
        ("PersistentVolumeClaim", "cozy-public", "by-source"),
        ("VolumeSnapshot", "cozy-public", "snap"),
        ("DataVolume", "tenant-a", "annotated-only"),
    ]
    assert found[0]["why"] == "clones PersistentVolumeClaim cozy-public/%s in its dataVolumeTemplates" % NAME
    assert found[-1]["why"] == (
        "is a worker disk of pool md0 made from it (annotation kubernetes-worker-image.cozystack.io/golden)"
    )
    with pytest.raises(Refusal) as exc:
        w.refuse_delete_in_use(golden, observed)
    assert "5 object(s) use it" in exc.value.msg and exc.value.result["consumers"] == found


def test_delete_of_a_non_golden_refused():
    with pytest.raises(Refusal) as exc:
        w.refuse_not_golden("cozy-public", "x", {"metadata": {"name": "x"}})
    assert "it is not a worker golden" in exc.value.msg


# --- default classes


def test_default_class_newest_of_several_and_beta():
    classes = [
        sc("old", default=True, created="2026-01-01T00:00:00Z"),
        sc("new", beta=True, created="2026-02-01T00:00:00Z"),
        sc("plain", created="2026-03-01T00:00:00Z"),
    ]
    assert w.default_class(classes) == "new"
    assert w.default_class([sc("plain")]) is None


def test_golden_class_from_its_bound_claim_first():
    golden = w.render_golden(entry(storageClass=""))
    assert w.golden_class(golden, pvc(NAME, "was-default"), "now-default") == "was-default"
    assert w.golden_class(golden, pvc(NAME, "x", phase="Pending"), "now-default") == "now-default"
    assert w.golden_class(w.render_golden(entry()), None, "now-default") == "replicated"


def test_pool_class_empty_means_default_unless_it_has_cloned():
    assert w.pool_class(pool(), [], "lab-fs") == ("lab-fs", "the cluster default StorageClass")
    assert w.pool_class(pool(), [pvc("d", "old-default")], "new-default") == (
        "old-default",
        "the pool's bound disks",
    )
    assert w.pool_class(pool(storageClass="fast"), [pvc("d", "old")], "new") == (
        "fast",
        "the pool's storageClass",
    )


def test_default_moved_after_a_pool_cloned_does_not_fail_it():
    golden = w.render_golden(entry(storageClass=""))
    gold = w.golden_class(golden, pvc(NAME, "a"), "b")
    mine, source = w.pool_class(pool(), [pvc("d0", "a")], "b")
    w.refuse_class_mismatch(pool(), mine, source, gold, "cozy-public/" + NAME)


def test_class_mismatch_names_both_and_three_ways_out():
    with pytest.raises(Refusal) as exc:
        w.refuse_class_mismatch(
            pool(), "lab-fs", "the cluster default StorageClass", "replicated", "cozy-public/g"
        )
    assert exc.value.msg == (
        "pool tenant-a/md0: its StorageClass lab-fs (the cluster default StorageClass) differs from "
        "the golden "
        "cozy-public/g's StorageClass replicated; CDI cannot CSI-clone across classes and would fall "
        "back to a "
        "host-assisted copy over the pod network; set the pool's storageClass to replicated, or add "
        "a catalog "
        "entry (a new schematicID/version) whose storageClass is lab-fs and point the pool at it, or remove "
        "osImage so the pool imports over HTTP"
    )


def test_no_default_to_resolve_an_empty_class():
    with pytest.raises(Refusal) as exc:
        w.refuse_unresolved(pool(), None, "replicated", "cozy-public/g")
    assert (
        "the pool has an empty StorageClass, which CDI resolves to the default virt StorageClass, else the "
        "cluster default, and the cluster has neither" in (exc.value.msg)
    )


# --- sizes


def test_disk_size_compared_as_bytes():
    w.refuse_disk_size(pool(diskSize="6144Mi"), "6144Mi", "6Gi", "cozy-public/g")
    with pytest.raises(Refusal) as exc:
        w.refuse_disk_size(pool(diskSize="6000Mi"), "6000Mi", "6Gi", "cozy-public/g")
    assert exc.value.msg == (
        "pool tenant-a/md0: diskSize 6000Mi (6291456000 bytes) is below the golden cozy-public/g's "
        "storage 6Gi "
        "(6442450944 bytes), and a clone target cannot be smaller than its source; set diskSize to "
        "at least 6Gi"
    )


def test_golden_size_prefers_the_bound_capacity():
    golden = w.render_golden(entry())
    assert w.golden_size(golden, pvc(NAME, "r", capacity="7Gi")) == "7Gi"
    assert w.golden_size(golden, None) == "6Gi"


# --- clone strategy and permission


def test_clone_strategy_override_then_profile_then_default():
    cdi = {"metadata": {"name": "cdi"}, "spec": {"cloneStrategyOverride": "csi-clone"}}
    profile = {"metadata": {"name": "replicated"}, "status": {"cloneStrategy": "copy"}}
    assert w.clone_strategy([cdi], profile)[0] == "csi-clone"
    assert w.clone_strategy([{"metadata": {"name": "cdi"}, "spec": {}}], profile) == (
        "copy",
        "StorageProfile replicated status.cloneStrategy",
    )
    assert w.clone_strategy([], None)[0] == "snapshot"


def test_host_assisted_refused_unless_allowed():
    with pytest.raises(Refusal) as exc:
        w.refuse_host_assisted(pool(), "copy", "CDI cdi spec.cloneStrategyOverride", "replicated", False)
    assert exc.value.msg == (
        "pool tenant-a/md0: the clone strategy for StorageClass replicated is copy (CDI cdi "
        "spec.cloneStrategyOverride), a host-assisted copy of the whole golden over the pod network, the "
        "transfer cloning from a golden exists to remove; set CDI spec.cloneStrategyOverride (or the "
        "StorageProfile's cloneStrategy) to csi-clone, or pass allow_host_assisted=true to accept the copy"
    )
    w.refuse_host_assisted(pool(), "copy", "x", "replicated", True)
    w.refuse_host_assisted(pool(), "csi-clone", "x", "replicated", False)


def test_access_review_asks_for_the_pool_service_account():
    review = w.access_review("tenant-a", "cozy-public", NAME)
    assert review["spec"]["user"] == "system:serviceaccount:tenant-a:default"
    assert "system:serviceaccounts" in review["spec"]["groups"]
    assert review["spec"]["resourceAttributes"] == {
        "namespace": "cozy-public",
        "verb": "create",
        "group": "cdi.kubevirt.io",
        "resource": "datavolumes",
        "subresource": "source",
        "name": NAME,
    }


def test_clone_forbidden_refused():
    w.refuse_clone_forbidden(pool(), {"allowed": True}, "cozy-public")
    with pytest.raises(Refusal) as exc:
        w.refuse_clone_forbidden(pool(), {"allowed": False}, "cozy-public")
    assert exc.value.msg == (
        "pool tenant-a/md0: service accounts of namespace tenant-a may not create datavolumes/source in "
        "cozy-public (no RBAC rule allows it), so CDI would refuse the clone when the worker disk is "
        "created; "
        "bind the ClusterRole cdi-copy-dv (create on datavolumes/source) to the group "
        "system:serviceaccounts:tenant-a, or to system:serviceaccounts, in cozy-public"
    )


# --- the pool's disk


def test_missing_golden_refusals():
    with pytest.raises(Refusal) as exc:
        w.refuse_missing_golden(pool(), None, "cozy-public", entries=[])
    assert exc.value.msg.startswith(
        "pool tenant-a/md0: its osImage names the golden cozy-public/%s, which has no entry in the "
        "worker image "
        "catalog; add an images[] entry with this schematicID and version" % NAME
    )
    assert (
        "or remove osImage from the pool so its disks import the factory image over HTTP as before"
        in exc.value.msg
    )
    with pytest.raises(Refusal) as exc:
        w.refuse_missing_golden(pool(), None, "cozy-public")
    assert "which does not exist (is the worker image catalog enabled with this entry?)" in exc.value.msg
    failed = w.render_golden(entry())
    failed["status"] = {
        "phase": "Failed",
        "conditions": [
            {"type": "Running", "status": "False", "reason": "Error", "message": "x509: unknown authority"}
        ],
    }
    with pytest.raises(Refusal) as exc:
        w.refuse_missing_golden(pool(), failed, "cozy-public")
    assert exc.value.msg == (
        "pool tenant-a/md0: its golden cozy-public/%s failed to import (Error: x509: unknown "
        "authority); check "
        "the importer (the DataVolume's events and the importer pod's log), fix the cause, then delete the "
        "DataVolume cozy-public/%s so the catalog imports it again" % (NAME, NAME)
    )
    mid = w.render_golden(entry())
    mid["status"] = {"phase": "ImportInProgress", "progress": "12.00%"}
    w.refuse_missing_golden(pool(), mid, "cozy-public")


def test_clone_disk_writes_the_resolved_class():
    dv = w.render_clone_disk(pool(), "cozy-public", "replicated")
    assert dv["metadata"]["annotations"] == {w.GOLDEN_ANNOTATION: NAME, w.POOL_ANNOTATION: "md0"}
    assert dv["spec"] == {
        "source": {"pvc": {"namespace": "cozy-public", "name": NAME}},
        "storage": {"resources": {"requests": {"storage": "20Gi"}}, "storageClassName": "replicated"},
    }


def test_http_disk_is_the_pre_feature_render():
    p = w.pool_request(
        {"name": "md0", "namespace": "tenant-a", "imageURL": "https://f/i.raw.xz", "diskSize": "20Gi"}
    )
    assert w.render_http_disk(p) == {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {
            "name": "md0-disk-system",
            "namespace": "tenant-a",
            "annotations": {"cdi.kubevirt.io/storage.usePopulator": "false"},
        },
        "spec": {
            "source": {"http": {"url": "https://f/i.raw.xz"}},
            "storage": {"resources": {"requests": {"storage": "20Gi"}}},
        },
    }


def test_pool_without_any_image_refused():
    with pytest.raises(Refusal) as exc:
        w.pool_request({"name": "md0", "namespace": "tenant-a"})
    assert "it has no osImage, no imageURL and no Talos settings" in exc.value.msg


def test_import_state_only_failed_is_terminal():
    assert w.import_state(None) == (False, None)
    assert w.import_state({"status": {"phase": "ImportInProgress"}}) == (False, None)
    assert w.import_state({"status": {"phase": "Succeeded"}}) == (True, None)
    done, failed = w.import_state(
        {"metadata": {"name": "g", "namespace": "cozy-public"}, "status": {"phase": "Failed"}}
    )
    assert not done and "failed to import" in failed


def test_state_present_needs_the_catalog_even_an_empty_one():
    assert w.present_catalog([]) == []
    with pytest.raises(Refusal) as caught:
        w.present_catalog(None)
    assert caught.value.msg == "option images: state=present needs the catalog; give images (it may be empty)"


def test_a_pool_left_out_is_refused_naming_what_it_needs():
    with pytest.raises(Refusal, match=r"pool None/None: pool\.name is required; give the pool's name"):
        w.pool_request(None)


# --- CDI's class resolution


def virt(name, created="2026-01-01T00:00:00Z"):
    obj = sc(name, created=created)
    obj["metadata"]["annotations"][w.VIRT_DEFAULT_CLASS] = "true"
    return obj


def test_virt_default_class_preferred_for_vm_disks():
    classes = [sc("plain-default", default=True, created="2026-05-01T00:00:00Z"), virt("vm-disks")]
    assert w.resolve_default_class(classes) == ("vm-disks", "the default virt StorageClass")
    assert w.default_class(classes) == "vm-disks"
    # Other content (archive) gets the ordinary default, as CDI gives it.
    assert w.resolve_default_class(classes, "archive") == (
        "plain-default",
        "the cluster default StorageClass",
    )
    assert w.resolve_default_class([sc("x")]) == (None, None)


def test_of_several_defaults_the_newest_then_the_first_by_name():
    same = "2026-03-01T00:00:00Z"
    assert w.default_class([virt("b", same), virt("a", same), virt("c", "2026-01-01T00:00:00Z")]) == "a"
    assert w.default_class([sc("z", default=True, created=same), sc("y", beta=True, created=same)]) == "y"


def test_an_empty_pool_class_resolves_to_the_virt_default_and_says_so():
    default, source = w.resolve_default_class([sc("lab-fs", default=True), virt("vm-disks")])
    assert w.pool_class(pool(), [], default, source) == ("vm-disks", "the default virt StorageClass")
    golden = w.render_golden(entry(storageClass=""))
    assert w.golden_class(golden, None, default) == "vm-disks"


# --- pool identity: cluster and pool


def chart_disk(name, cls="replicated", ns="tenant-a", pool_name="md0", cluster=None, kind="DataVolume"):
    notes = {w.GOLDEN_ANNOTATION: NAME, w.POOL_ANNOTATION: pool_name}
    if cluster:
        notes[w.CLUSTER_ANNOTATION] = cluster
    obj = {"kind": kind, "metadata": {"name": name, "namespace": ns, "annotations": notes}, "spec": {}}
    if kind == "DataVolume":
        obj["spec"]["source"] = {"pvc": {"namespace": "cozy-public", "name": NAME}}
    return obj


def claim(name, cls, ns="tenant-a", notes=None):
    obj = pvc(name, cls)
    obj["kind"] = "PersistentVolumeClaim"
    obj["metadata"].update(namespace=ns, annotations=dict(notes or {}))
    return obj


def test_a_pool_is_its_cluster_and_name():
    dvs = [
        chart_disk("disk-system-k1-md0-a"),
        chart_disk("disk-system-k2-md0-a"),
        chart_disk("md0-disk-system-x", cluster="k1"),
    ]
    pvcs = [claim("disk-system-k1-md0-a", "replicated"), claim("disk-system-k2-md0-a", "lab-fs")]
    pvcs.append(claim("md0-disk-system-x", "replicated"))
    k1 = pool(cluster="k1")
    assert sorted(w.kinds.name(p) for p in w.pool_claims(k1, dvs, pvcs)) == [
        "disk-system-k1-md0-a",
        "md0-disk-system-x",
    ]
    assert w.pool_class(k1, w.pool_claims(k1, dvs, pvcs), "lab-fs") == (
        "replicated",
        "the pool's bound disks",
    )
    assert [w.kinds.name(p) for p in w.pool_claims(pool(cluster="k2"), dvs, pvcs)] == ["disk-system-k2-md0-a"]
    with pytest.raises(Refusal) as exc:
        w.pool_claims(pool(), dvs, pvcs)
    assert exc.value.msg == (
        "pool tenant-a/md0: the disks of pool md0 in namespace tenant-a belong to the clusters k1, k2, and "
        "the pool names none; give pool.cluster, the tenant cluster the pool belongs to"
    )
    # A hyphen in the cluster or the pool does not confuse the name: the pool is known.
    assert w.disk_cluster(chart_disk("disk-system-a-b-md-0-x", pool_name="md-0"), "md-0") == "a-b"
    assert w.consumers("cozy-public", NAME, dvs)["pools"] == ["tenant-a/k1/md0", "tenant-a/k2/md0"]


def test_the_clone_disk_carries_its_cluster():
    dv = w.render_clone_disk(pool(cluster="k1"), "cozy-public", "replicated")
    assert dv["metadata"]["name"] == "disk-system-k1-md0"
    assert dv["metadata"]["annotations"][w.CLUSTER_ANNOTATION] == "k1"
    assert w.pool_subject(pool(cluster="k1")) == "pool tenant-a/k1/md0"


# --- osImage.builtin inherits from the pool's Talos settings; HTTP from them


def test_builtin_inherits_from_talos():
    talos = {"schematicID": SCHEMATIC, "version": "v1.13.0"}
    assert pool(osImage={"builtin": {}}, talos=talos)["golden"] == NAME
    assert (
        pool(osImage={"builtin": {"version": "v1.13.0"}}, talos={"schematicID": SCHEMATIC})["golden"] == NAME
    )
    assert pool(osImage={"builtin": {"version": "v1.14.0"}}, talos=talos)["golden"].endswith("-v1.14.0")
    with pytest.raises(Refusal) as exc:
        pool(osImage={"builtin": {}}, talos={"schematicID": SCHEMATIC})
    assert exc.value.msg == (
        "pool tenant-a/md0: osImage.builtin gives no version and the pool's Talos settings (talos.version) "
        "give none to inherit; give talos.version (the pool's Talos settings, which osImage.builtin "
        "inherits) or osImage.builtin.version"
    )
    with pytest.raises(Refusal) as exc:
        pool(osImage={"builtin": {}}, talos={"schematicID": SCHEMATIC, "version": "v1.13"})
    assert "version 'v1.13' does not match" in exc.value.msg


def test_http_import_from_talos_with_image_url_as_override():
    talos = {"schematicID": SCHEMATIC, "version": "v1.13.0"}
    p = pool(osImage=None, talos=talos)
    url = "https://factory.talos.dev/image/%s/v1.13.0/openstack-amd64.raw.xz" % SCHEMATIC
    assert w.render_http_disk(p)["spec"]["source"] == {"http": {"url": url}}
    mirror = dict(talos, imageFactoryURL="https://mirror.example/talos/")
    assert w.render_http_disk(pool(osImage=None, talos=mirror))["spec"]["source"]["http"]["url"] == (
        "https://mirror.example/talos/image/%s/v1.13.0/openstack-amd64.raw.xz" % SCHEMATIC
    )
    given = pool(osImage=None, talos=talos, imageURL="https://example.com/own.raw.xz")
    assert w.render_http_disk(given)["spec"]["source"]["http"]["url"] == "https://example.com/own.raw.xz"
    with pytest.raises(Refusal):
        pool(osImage=None, talos={"schematicID": SCHEMATIC, "version": "1.13.0"})


# --- claim-only disks and orphans


def test_claim_only_disks_are_read_by_every_query():
    notes = {w.GOLDEN_ANNOTATION: NAME, w.POOL_ANNOTATION: "md0"}
    dv_claim = claim("with-dv", "replicated", notes=notes)  # CDI copied its DataVolume's annotations
    only = claim("only-claim", "replicated", notes=notes)
    dvs = [chart_disk("with-dv")]
    disks = w.worker_disks(dvs, [dv_claim, only])
    assert [w.kinds.name(d) for d in disks] == ["with-dv", "only-claim"]
    assert w.consumers("cozy-public", NAME, disks)["disks"] == ["tenant-a/only-claim", "tenant-a/with-dv"]
    golden = w.render_golden(entry())
    with pytest.raises(Refusal) as exc:
        w.refuse_delete_in_use(golden, {"datavolumes": [], "pvcs": [only]})
    assert exc.value.result["consumers"] == [
        {
            "kind": "PersistentVolumeClaim",
            "namespace": "tenant-a",
            "name": "only-claim",
            "why": "is a worker disk of pool md0 made from it (annotation %s; a claim whose DataVolume is "
            "gone)" % w.GOLDEN_ANNOTATION,
        }
    ]
    assert [w.kinds.name(p) for p in w.pool_claims(pool(), [], [only])] == ["only-claim"]


def test_orphans_are_disks_whose_golden_is_gone():
    notes = {w.GOLDEN_ANNOTATION: NAME, w.POOL_ANNOTATION: "md0"}
    disks = w.worker_disks([chart_disk("disk-system-k1-md0-a")], [claim("only", "replicated", notes=notes)])
    assert w.orphans("cozy-public", disks, {NAME}) == []
    assert w.orphans("cozy-public", disks, set()) == [
        {
            "kind": "DataVolume",
            "namespace": "tenant-a",
            "name": "disk-system-k1-md0-a",
            "golden": NAME,
            "pool": "tenant-a/k1/md0",
        },
        {
            "kind": "PersistentVolumeClaim",
            "namespace": "tenant-a",
            "name": "only",
            "golden": NAME,
            "pool": "tenant-a/md0",
        },
    ]
    assert w.orphans("other-ns", disks[:1], set()) == []


def test_no_golden_is_promised_into_a_missing_namespace():
    golden = w.render_golden(entry())
    w.refuse_missing_namespace("cozy-public", None, [])
    w.refuse_missing_namespace("cozy-public", {"metadata": {"name": "cozy-public"}}, [golden])
    with pytest.raises(Refusal) as exc:
        w.refuse_missing_namespace("cozy-public", None, [golden])
    assert exc.value.msg == (
        "namespace cozy-public: it does not exist, so the goldens %s cannot be created in it; create the "
        "namespace first (Cozystack makes cozy-public with the platform), or give the namespace the goldens "
        "belong in" % NAME
    )
    gone = {"metadata": {"name": "cozy-public", "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    with pytest.raises(Refusal, match="is being deleted"):
        w.refuse_missing_namespace("cozy-public", gone, [golden])


# --- a signed worker image ---------------------------------------------------------------------------


_SIGNED_KEY = "1" * 64
_ENTRY = {
    "subject": "images[0] (schematicID 'ab', version 'v1.13.0')",
    "schematicID": "ab",
    "version": "v1.13.0",
}
_POLICY = provenance.normalize_policy(
    {"rules": [{"key": _SIGNED_KEY, "name": "release", "families": ["talos-ab"]}]}
)


def _statement(name, sha256):
    return provenance.statement({"name": name, "digest": {"sha256": sha256}}, [], {}, "2026-12-01T00:00:00Z")


def test_a_worker_image_is_signed_under_its_factory_path_and_family():
    assert w.signed_name(_ENTRY) == "image/ab/v1.13.0/openstack-amd64.raw.xz"
    assert w.signed_family(_ENTRY) == "talos-ab"
    found = {"key": _SIGNED_KEY, "statement": _statement(w.signed_name(_ENTRY), "a" * 64)}
    verdict = w.import_verdict(_ENTRY, "a" * 64, _POLICY, {"key": _SIGNED_KEY}, found)
    assert verdict["verdict"] == "verified" and verdict["signer"] == "release"


@settings(max_examples=100, deadline=None)
@given(
    pinned=st.sampled_from([None, "a" * 64]),
    signed=st.booleans(),
    relaxed=st.booleans(),
    subject=st.sampled_from(
        ["image/ab/v1.13.0/openstack-amd64.raw.xz", "image/ab/v1.12.0/openstack-amd64.raw.xz"]
    ),
    digest=st.sampled_from(["a" * 64, "b" * 64]),
)
def test_nothing_is_imported_unless_a_trusted_signature_binds_the_pinned_bytes_or_the_family_is_relaxed(
    pinned, signed, relaxed, subject, digest
):
    doc = {"rules": [{"key": _SIGNED_KEY, "families": ["talos-ab"]}]}
    if relaxed:
        doc["relaxed"] = [{"family": "talos-ab", "reason": "lab"}]
    policy = provenance.normalize_policy(doc)
    signature = {"key": _SIGNED_KEY} if signed else None
    found = {"key": _SIGNED_KEY, "statement": _statement(subject, digest)} if signed else None
    bound = signed and pinned and subject == w.signed_name(_ENTRY) and digest == pinned
    allowed = bound or (relaxed and not signed)
    try:
        verdict = w.import_verdict(_ENTRY, pinned, policy, signature, found)
    except Refusal as exc:
        assert not allowed, exc.msg
        assert exc.msg.startswith(_ENTRY["subject"]) and exc.msg.endswith("nothing was written"), exc.msg
    else:
        assert allowed and verdict["ok"], verdict


_REAL = [ec.generate_private_key(ec.SECP256R1()) for _i in range(2)]
_REAL_POLICY = provenance.normalize_policy(
    {"rules": [{"public_key": signing.public_pem(_REAL[0]), "name": "release", "families": ["talos-ab"]}]}
)


def _prove(policy, record):
    return signing.record_proof(policy, record)


@settings(max_examples=100, deadline=None)
@given(
    signer=st.sampled_from([0, 1]),
    recorded=st.sampled_from(["v1.13.0", "v1.12.0", None]),
    checksum=st.sampled_from(["a" * 64, "b" * 64]),
    forged=st.booleans(),
)
def test_an_existing_golden_serves_only_under_the_verdict_recorded_for_its_own_image(
    signer, recorded, checksum, forged
):
    """Import, then judge the golden again: it holds only while the evidence recorded with its verdict is a
    signature by a key the policy trusts over the checksum it was pinned to, for its own artifact; the
    verdict of another version, or one naming the trusted key with no evidence, is refused."""
    entry = dict(
        _ENTRY, name="talos-worker-ab-v1.13.0", url="https://f/image", storage="1Gi", storageClass=None
    )
    annotations = {}
    if recorded:
        other = dict(_ENTRY, version=recorded)
        key = _REAL[signer]
        doc = _statement(w.signed_name(other), "a" * 64)
        texts = (
            signing.signature_text(signing.sign_digest(key, "a" * 64)),
            provenance.envelope_line(signing.sign_envelope(key, provenance.serialize(doc))),
        )
        verdict = {
            "verdict": "verified",
            "key": signing.key_id(_REAL[0] if forged else key),
            "signer": "release",
        }
        found = {"key": verdict["key"], "statement": doc}
        annotations = w.verdict_annotations(other, "a" * 64, verdict, found, None if forged else texts)
    live = w.render_golden(entry, checksum=checksum, annotations=annotations)
    holds = signer == 0 and recorded == "v1.13.0" and checksum == "a" * 64 and not forged
    try:
        record = w.refuse_unproven_golden(entry, live, _REAL_POLICY, _prove)
    except Refusal as exc:
        assert not holds, exc.msg
        assert "talos-worker-ab-v1.13.0" in exc.msg and exc.msg.endswith("nothing was written"), exc.msg
    else:
        assert holds and record["key"] == signing.key_id(_REAL[0]) and record["inputs"] == []
