from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import consumers

FS = "golden-images"
FAMILY = "debian-12"


def snap(name, namespace=FS, content=None, active=False, annotations=None):
    labels = {"kube-dc.com/golden-os": FAMILY, "kube-dc.com/golden-mode": "Filesystem"}
    if active:
        labels["kube-dc.com/golden-active"] = "true"
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations or {},
        },
        "status": {"readyToUse": True, "boundVolumeSnapshotContentName": content or "c-" + name},
    }


def content(name, handle):
    return {"metadata": {"name": name}, "spec": {"source": {"snapshotHandle": handle}}}


def pvc(namespace, name, source):
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "dataSource": {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": source}
        },
    }


def selection(name, snapshot, previous=None):
    notes = {"goldenimage.pipeline/previous-snapshot": previous} if previous else {}
    return {
        "metadata": {"name": name, "namespace": FS, "annotations": notes},
        "spec": {"family": FAMILY, "mode": "filesystem", "snapshotName": snapshot},
    }


def observed(**kinds):
    base = {"snapshots": [], "contents": [], "pvcs": [], "projects": [], "selections": [], "datavolumes": []}
    base.update(kinds)
    return base


def test_an_unused_golden_has_no_consumer_and_is_not_refused():
    gold = snap("g1")
    found = consumers.golden_consumers(gold, observed(snapshots=[gold], contents=[content("c-g1", "h1")]))
    assert found == []
    assert consumers.golden_delete_refusal("VolumeSnapshot golden-images/g1", found) is None


def test_every_kind_of_consumer_is_named():
    gold = snap("g1", active=True)
    other = snap("g0", annotations={"goldenimage.pipeline/previous-snapshot": "g1"})
    copy = snap("golden-debian-12", namespace="shop", content="kdc-shop")
    seen = observed(
        snapshots=[gold, other, copy],
        contents=[content("c-g1", "h1"), content("c-g0", "h0"), content("kdc-shop", "h1")],
        pvcs=[pvc(FS, "direct", "g1"), pvc("shop", "vm-root", "golden-debian-12")],
        selections=[selection("sel", "g1"), selection("old", "g9", previous="g1")],
    )
    found = consumers.golden_consumers(gold, seen)
    described = [consumers.describe(c) for c in found]
    assert described == [
        "VolumeSnapshot golden-images/g1 carries kube-dc.com/golden-active=true, so projects of family "
        "debian-12 are seeded from it (label path)",
        "PersistentVolumeClaim golden-images/direct restores from it directly",
        "PersistentVolumeClaim shop/vm-root restores from it through the project copy shop/golden-debian-12",
        "VolumeSnapshot shop/golden-debian-12 is a project's seeded copy on its snapshot handle h1, whose "
        "storage snapshot the golden's delete frees",
        "GoldenImageSelection golden-images/sel names it in spec.snapshotName",
        "GoldenImageSelection golden-images/old records it as the rollback target (annotation "
        "goldenimage.pipeline/previous-snapshot)",
        "VolumeSnapshot golden-images/g0 records it as the rollback target (annotation "
        "goldenimage.pipeline/previous-snapshot, label path)",
    ]
    assert set(found[0]) == {"kind", "namespace", "name", "why", "loses"}
    # force passes what says what it loses, never a clone or a copy on the same storage snapshot
    assert [c["name"] for c in consumers.blocking(found, force=True)] == [
        "direct",
        "vm-root",
        "golden-debian-12",
    ]
    refusal = consumers.golden_delete_refusal("VolumeSnapshot golden-images/g1", found, force=True)
    assert isinstance(refusal, Refusal)
    assert "force cannot override" in refusal.msg and refusal.result["refused"] is True
    assert len(refusal.result["consumers"]) == 3


def test_force_passes_a_selection_and_says_what_it_costs():
    gold = snap("g1")
    seen = observed(snapshots=[gold], contents=[content("c-g1", "h1")], selections=[selection("sel", "g1")])
    found = consumers.golden_consumers(gold, seen)
    refusal = consumers.golden_delete_refusal("VolumeSnapshot golden-images/g1", found)
    assert refusal.msg.endswith(
        "set force: true, which costs: the selection fails closed: debian-12/Filesystem is skipped and no "
        "new project is seeded"
    )
    assert consumers.golden_delete_refusal("VolumeSnapshot golden-images/g1", found, force=True) is None


def test_a_selection_of_another_mode_or_namespace_is_not_a_consumer():
    gold = snap("g1")
    block = dict(selection("sel", "g1"), spec={"family": FAMILY, "mode": "Block", "snapshotName": "g1"})
    elsewhere = selection("sel", "g1")
    elsewhere["metadata"] = dict(elsewhere["metadata"], namespace="somewhere")
    seen = observed(snapshots=[gold], selections=[block, elsewhere])
    assert consumers.golden_consumers(gold, seen) == []


def test_refuse_delete_builds_one_refusal_for_any_subject():
    record = consumers.consumer("DBInstance", "db", "pg-1", "runs on it (status.appliedSpec)")
    refusal = consumers.refuse_delete("image x", [record], "move it first")
    assert (
        refusal.msg == "image x: refusing to delete it, 1 object(s) use it: DBInstance db/pg-1 runs on it "
        "(status.appliedSpec); move it first"
    )
    assert consumers.refuse_delete("image x", [], "move") is None


# volume_consumers: the export's scratch claim and ConfigMap ---------------------------------------


def pod(name, volumes, terminating=False):
    meta = {"name": name, "namespace": "build"}
    if terminating:
        meta["deletionTimestamp"] = "2026-12-02T10:00:00Z"
    return {"metadata": meta, "spec": {"volumes": volumes}}


def test_the_jobs_own_pods_do_not_count_and_every_other_mount_or_clone_does():
    claim = [{"name": "s", "persistentVolumeClaim": {"claimName": "exp-scratch"}}]
    observed = {
        "pods": [
            pod("exp-abc", claim + [{"name": "p", "configMap": {"name": "exp"}}]),
            pod("debug", claim),
            pod("gone", claim, terminating=True),
            pod("projected", [{"name": "x", "projected": {"sources": [{"configMap": {"name": "exp"}}]}}]),
        ],
        "vms": [
            {
                "metadata": {"name": "vm"},
                "spec": {
                    "template": {"spec": {"volumes": [{"name": "d", "dataVolume": {"name": "exp-scratch"}}]}}
                },
            }
        ],
        "pvcs": [
            {
                "metadata": {"name": "copy"},
                "spec": {"dataSource": {"kind": "PersistentVolumeClaim", "name": "exp-scratch"}},
            },
            {"metadata": {"name": "exp-scratch"}, "spec": {}},
        ],
        "datavolumes": [
            {
                "metadata": {"name": "dv"},
                "spec": {"source": {"pvc": {"name": "exp-scratch", "namespace": "build"}}},
            }
        ],
    }

    def own(p):
        return p["metadata"]["name"] == "exp-abc"

    found = consumers.volume_consumers("PersistentVolumeClaim", "build", "exp-scratch", observed, own)
    assert [(c["kind"], c["name"]) for c in found] == [
        ("Pod", "debug"),
        ("VirtualMachine", "vm"),
        ("PersistentVolumeClaim", "copy"),
        ("DataVolume", "dv"),
    ]
    # One record shape, and no force passes them: a volume's consumer says nothing it could lose.
    assert all(set(c) == {"kind", "namespace", "name", "why"} for c in found)
    assert consumers.blocking(found, force=True) == found
    maps = consumers.volume_consumers("ConfigMap", "build", "exp", observed, own)
    assert [(c["kind"], c["name"], c["why"]) for c in maps] == [
        ("Pod", "projected", "mounts ConfigMap build/exp")
    ]
    assert consumers.volume_consumers("ConfigMap", "build", "exp", {}) == []


# delete_consumers: kube_object's delete of a claim, a DataVolume or a VirtualMachine -------------


def meta(name, namespace="db", **extra):
    return dict({"name": name, "namespace": namespace}, **extra)


def claim_ref(name, namespace=None):
    ref = {"kind": "PersistentVolumeClaim", "name": name}
    if namespace:
        ref["namespace"] = namespace
    return ref


def mounting(name, claim, namespace="db", phase="Running", owners=None):
    extra = {"ownerReferences": owners} if owners else {}
    return {
        "metadata": meta(name, namespace, **extra),
        "spec": {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": claim}}]},
        "status": {"phase": phase},
    }


CLAIM = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta("data")}


def test_a_claim_is_used_by_mounts_clones_and_snapshots_in_any_namespace():
    observed = {
        "pods": [
            mounting("app", "data"),
            mounting("done", "data", phase="Succeeded"),  # an ended pod mounts nothing
            mounting("importer", "data", owners=[{"kind": "PersistentVolumeClaim", "name": "data"}]),
            mounting("same-name-elsewhere", "data", namespace="other"),
        ],
        "pvcs": [
            {"metadata": meta("data"), "spec": {}},
            {"metadata": meta("near"), "spec": {"dataSource": claim_ref("data")}},
            {"metadata": meta("far", "other"), "spec": {"dataSourceRef": claim_ref("data", "db")}},
            {"metadata": meta("own-ns", "other"), "spec": {"dataSourceRef": claim_ref("data")}},
            {
                "metadata": meta("gone", deletionTimestamp="2026-01-01T00:00:00Z"),
                "spec": {"dataSource": claim_ref("data")},
            },
        ],
        "datavolumes": [
            {"metadata": meta("dv", "other"), "spec": {"source": {"pvc": claim_ref("data", "db")}}}
        ],
        "vms": [
            {
                "metadata": meta("vm", "other"),
                "spec": {
                    "dataVolumeTemplates": [
                        {"metadata": {"name": "r"}, "spec": {"source": {"pvc": claim_ref("data", "db")}}}
                    ]
                },
            }
        ],
        "snapshots": [
            {
                "metadata": meta("snap"),
                "spec": {"source": {"persistentVolumeClaimName": "data"}},
                "status": {"readyToUse": True},
            }
        ],
    }
    found, taken = consumers.delete_consumers(CLAIM, observed)
    assert taken == []
    assert [consumers.describe(c) for c in found] == [
        "Pod db/app mounts PersistentVolumeClaim db/data",
        "VirtualMachine other/vm clones PersistentVolumeClaim db/data in its dataVolumeTemplates",
        "PersistentVolumeClaim db/near clones from PersistentVolumeClaim db/data",
        "PersistentVolumeClaim other/far clones from PersistentVolumeClaim db/data",
        "DataVolume other/dv clones from PersistentVolumeClaim db/data",
        "VolumeSnapshot db/snap is a snapshot of PersistentVolumeClaim db/data (ready)",
    ]
    refusal = consumers.delete_refusal(CLAIM, observed)
    assert refusal.msg.startswith(
        "PersistentVolumeClaim db/data: refusing to delete it, 6 object(s) use it: "
    )
    assert refusal.msg.endswith("then run again; nothing was deleted")
    assert consumers.delete_refusal(CLAIM, {"pvcs": [{"metadata": meta("data"), "spec": {}}]}) is None


def test_a_datavolume_is_asked_about_through_its_claim_its_own_pods_left_out():
    dv = {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume", "metadata": meta("data")}
    observed = {
        "pods": [
            mounting("importer", "data", owners=[{"kind": "DataVolume", "name": "data"}]),
            {"metadata": meta("virt"), "spec": {"volumes": [{"name": "d", "dataVolume": {"name": "data"}}]}},
        ],
        "datavolumes": [{"metadata": meta("data"), "spec": {"source": {"http": {"url": "x"}}}}],
    }
    assert [c["name"] for c in consumers.delete_consumers(dv, observed)[0]] == ["virt"]
    assert consumers.asks(dv) and consumers.asks(CLAIM)
    assert not consumers.asks({"apiVersion": "batch/v1", "kind": "Job"})
    assert not consumers.asks({"apiVersion": "v1", "kind": "ConfigMap"})


def test_a_vm_is_asked_about_what_its_delete_takes_with_it():
    vm = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": meta("vm", uid="u-vm"),
        "spec": {
            "dataVolumeTemplates": [{"metadata": {"name": "vm-root"}}],
            "template": {"spec": {"volumes": [{"name": "r", "dataVolume": {"name": "vm-root"}}]}},
        },
    }
    owned = {"kind": "VirtualMachine", "name": "vm", "uid": "u-vm"}
    observed = {
        "vms": [vm],
        "pods": [
            mounting("virt-launcher-vm", "vm-root", owners=[{"kind": "VirtualMachineInstance", "name": "vm"}])
        ],
        "datavolumes": [
            {"metadata": meta("vm-root", ownerReferences=[owned]), "spec": {}},
            {"metadata": meta("vm-extra", ownerReferences=[owned]), "spec": {}},
        ],
        "pvcs": [{"metadata": meta("copy"), "spec": {"dataSource": claim_ref("vm-extra")}}],
    }
    found, taken = consumers.delete_consumers(vm, observed)
    assert taken == ["vm-extra", "vm-root"]
    assert [(c["kind"], c["name"]) for c in found] == [("PersistentVolumeClaim", "copy")]
    refusal = consumers.delete_refusal(vm, observed, "Foreground")
    assert refusal.msg.startswith(
        "VirtualMachine db/vm (with its DataVolumes vm-extra, vm-root): refusing to delete it, 1 object(s) "
        "use it: PersistentVolumeClaim db/copy clones from PersistentVolumeClaim db/vm-extra"
    )
    # Orphan leaves the DataVolumes: the VM's delete takes nothing with it.
    assert consumers.delete_consumers(vm, observed, "Orphan") == ([], [])
    assert consumers.delete_refusal(vm, {"vms": [vm]}) is None


def test_the_volume_plan_lists_pods_and_snapshots_locally_and_clones_everywhere():
    plan = {q["key"]: (q["namespace"], q["optional"]) for q in consumers.volume_plan("db")}
    assert plan == {
        "pods": ("db", False),
        "pvcs": (None, False),
        "datavolumes": (None, True),
        "datasources": (None, True),
        "vms": (None, True),
        "snapshots": ("db", True),
    }


def test_a_failed_reference_query_refuses_the_delete_and_keeps_what_the_query_said():
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError

    failed = PipelineError("list pods in ns: 403 Forbidden", status=403)
    refusal = consumers.users_unknown("ConfigMap ns/a", failed)
    assert isinstance(refusal, Refusal) and refusal.result["refused"] is True
    assert (
        refusal.msg
        == "ConfigMap ns/a: cannot tell who uses it, nothing was deleted: list pods in ns: 403 Forbidden"
    )
    assert refusal.result["status"] == 403


def test_a_datasource_naming_a_claim_uses_it():
    """A CDI DataSource's source.pvc is read by every clone of the DataSource (a worker golden's case)."""
    observed = {
        "datasources": [
            {
                "metadata": {"namespace": "tenant-x", "name": "talos"},
                "spec": {"source": {"pvc": {"namespace": "cozy-public", "name": "talos-v1"}}},
            },
            {
                "metadata": {"namespace": "tenant-x", "name": "other"},
                "spec": {"source": {"pvc": {"namespace": "cozy-public", "name": "talos-v2"}}},
            },
        ]
    }
    found = consumers.volume_consumers("PersistentVolumeClaim", "cozy-public", "talos-v1", observed)
    assert [(c["kind"], c["namespace"], c["name"]) for c in found] == [("DataSource", "tenant-x", "talos")]


def test_a_vm_declaring_a_claim_in_its_volume_claim_templates_uses_it():
    import json

    declaring = {
        "kind": "VirtualMachine",
        "metadata": {
            "name": "scratch",
            "namespace": "db",
            "annotations": {
                "harvesterhci.io/volumeClaimTemplates": json.dumps([{"metadata": {"name": "d"}}])
            },
        },
        "spec": {"template": {"spec": {"volumes": []}}},
    }
    found = consumers.volume_consumers("PersistentVolumeClaim", "db", "d", {"vms": [declaring]})
    assert [(c["kind"], c["name"]) for c in found] == [("VirtualMachine", "scratch")]
    assert "declares" in found[0]["why"]
    unreadable = json.loads(json.dumps(declaring))
    unreadable["metadata"]["annotations"]["harvesterhci.io/volumeClaimTemplates"] = "{not json"
    found = consumers.volume_consumers("PersistentVolumeClaim", "db", "d", {"vms": [unreadable]})
    assert "cannot be read" in found[0]["why"]
    assert consumers.volume_consumers("PersistentVolumeClaim", "db", "other", {"vms": [declaring]}) == []
