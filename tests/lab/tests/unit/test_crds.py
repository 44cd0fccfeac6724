"""The lab's CRDs: real names, one CRD per file, fragments; and the real and broken objects that
tests/lab/tests/controllers/test_crds_apiserver.py writes to the real API server."""

import copy
import functools
import itertools
import re

import pytest
import yaml

from tests.lab.crdload import CRD_DIR, crd_files, load_crds, read_documents

# kind -> (group, version, plural, singular, shortNames, scope, has status subresource)
EXPECTED = {
    "StorageProfile": (
        "cdi.kubevirt.io",
        "v1beta1",
        "storageprofiles",
        "storageprofile",
        [],
        "Cluster",
        True,  # since CDI v1.64.0
    ),
    "VirtualMachineImage": (
        "harvesterhci.io",
        "v1beta1",
        "virtualmachineimages",
        "virtualmachineimage",
        ["vmimage", "vmimages"],
        "Namespaced",
        False,
    ),
    "VirtualMachine": (
        "kubevirt.io",
        "v1",
        "virtualmachines",
        "virtualmachine",
        ["vm", "vms"],
        "Namespaced",
        True,
    ),
    "VirtualMachineInstance": (
        "kubevirt.io",
        "v1",
        "virtualmachineinstances",
        "virtualmachineinstance",
        ["vmi", "vmis"],
        "Namespaced",
        False,
    ),
    "KubeVirt": ("kubevirt.io", "v1", "kubevirts", "kubevirt", ["kv", "kvs"], "Namespaced", True),
    "DataVolume": (
        "cdi.kubevirt.io",
        "v1beta1",
        "datavolumes",
        "datavolume",
        ["dv", "dvs"],
        "Namespaced",
        True,
    ),
    "DataSource": ("cdi.kubevirt.io", "v1beta1", "datasources", "datasource", ["das"], "Namespaced", False),
    "DataImportCron": (
        "cdi.kubevirt.io",
        "v1beta1",
        "dataimportcrons",
        "dataimportcron",
        ["dic", "dics"],
        "Namespaced",
        False,
    ),
    "CDI": ("cdi.kubevirt.io", "v1beta1", "cdis", "cdi", ["cdi", "cdis"], "Cluster", False),
    "VolumeSnapshot": (
        "snapshot.storage.k8s.io",
        "v1",
        "volumesnapshots",
        "volumesnapshot",
        ["vs"],
        "Namespaced",
        True,
    ),
    "VolumeSnapshotContent": (
        "snapshot.storage.k8s.io",
        "v1",
        "volumesnapshotcontents",
        "volumesnapshotcontent",
        ["vsc", "vscs"],
        "Cluster",
        True,
    ),
    "VolumeSnapshotClass": (
        "snapshot.storage.k8s.io",
        "v1",
        "volumesnapshotclasses",
        "volumesnapshotclass",
        ["vsclass", "vsclasses"],
        "Cluster",
        False,
    ),
    "GoldenImageSelection": (
        "kube-dc.com",
        "v1",
        "goldenimageselections",
        "goldenimageselection",
        [],
        "Namespaced",
        True,
    ),
    "BackingImage": ("longhorn.io", "v1beta2", "backingimages", "backingimage", ["lhbi"], "Namespaced", True),
    "DBInstance": ("db.goldenimage.io", "v1alpha1", "dbinstances", "dbinstance", ["dbi"], "Namespaced", True),
}


@functools.cache
def _loaded() -> tuple[dict, ...]:
    return tuple(load_crds())


def _crds() -> dict[str, dict]:
    return {crd["spec"]["names"]["kind"]: copy.deepcopy(crd) for crd in _loaded()}


def test_every_file_is_one_crd_and_every_kind_is_there():
    files = crd_files()
    assert len(files) == len(EXPECTED)
    for path in files:
        docs = read_documents(path.read_text())
        assert len(docs) == 1, path
        assert docs[0]["apiVersion"] == "apiextensions.k8s.io/v1"
        assert docs[0]["kind"] == "CustomResourceDefinition"
    assert set(_crds()) == set(EXPECTED)


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_crd_names_are_the_real_ones(kind):
    group, version, plural, singular, short, scope, status = EXPECTED[kind]
    crd = _crds()[kind]
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "%s.%s" % (plural, group)
    assert spec["group"] == group
    assert spec["scope"] == scope
    names = spec["names"]
    assert (names["plural"], names["singular"], names.get("shortNames", [])) == (plural, singular, short)
    assert names["listKind"] == kind + "List"
    (stored,) = [v for v in spec["versions"] if v["storage"]]
    assert stored["name"] == version
    assert stored["served"] is True
    assert ("status" in (stored.get("subresources") or {})) is status
    schema = stored["schema"]["openAPIV3Schema"]
    assert schema["type"] == "object"
    assert {"apiVersion", "kind", "metadata"} <= set(schema["properties"])


def test_every_crd_written_from_upstream_names_the_release():
    """The first comment of a CRD written from upstream types names the file and a tagged release."""
    for path in sorted(CRD_DIR.glob("*.yaml")):
        header = "".join(itertools.takewhile(lambda line: line.startswith(("#", "---")), path.open()))
        if "written from" not in header and "types.go" not in header:
            continue  # DBInstance and GoldenImageSelection have no public upstream types
        assert re.search(r"\bv\d+\.\d+\.\d+\b", header), path.name
        assert "types.go" in header or "image.go" in header, path.name
        assert "main," not in header, path.name


def test_dbinstance_group_and_version_are_substituted():
    crds = {c["spec"]["names"]["kind"]: c for c in load_crds("postgres.example.org", "v2beta3")}
    dbi = crds["DBInstance"]
    assert dbi["metadata"]["name"] == "dbinstances.postgres.example.org"
    assert dbi["spec"]["group"] == "postgres.example.org"
    assert [v["name"] for v in dbi["spec"]["versions"]] == ["v2beta3"]
    assert "goldenimage.io" not in yaml.safe_dump(dbi)
    assert crds["VirtualMachineImage"]["spec"]["group"] == "harvesterhci.io"


def test_loaded_crds_do_not_share_nodes():
    first = load_crds()
    first[0]["spec"]["group"] = "changed"
    assert load_crds()[0]["spec"]["group"] != "changed"
    ds = _crds()["DataSource"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    assert ds["spec"]["properties"]["source"] is not ds["status"]["properties"]["source"]


def _meta(name, namespace="golden-images", **extra):
    meta = {"name": name, "namespace": namespace}
    meta.update(extra)
    return meta


VMIMAGE = {
    "apiVersion": "harvesterhci.io/v1beta1",
    "kind": "VirtualMachineImage",
    "metadata": _meta(
        "ubuntu-2404-r3", "default", annotations={"harvesterhci.io/storageClassName": "longhorn"}
    ),
    "spec": {
        "displayName": "ubuntu-24.04-r3",
        "sourceType": "download",
        "url": "http://127.0.0.1:9000/images/ubuntu-24.04.qcow2",
        "checksum": "f" * 128,
        "storageClassParameters": {
            "numberOfReplicas": "2",
            "staleReplicaTimeout": "30",
            "migratable": "true",
        },
    },
    "status": {
        "progress": 45,
        "size": 2361393152,
        "storageClassName": "lh-6c1a",
        "conditions": [{"type": "Imported", "status": "Unknown", "reason": "Importing"}],
    },
}

VM = {
    "apiVersion": "kubevirt.io/v1",
    "kind": "VirtualMachine",
    "metadata": _meta(
        "gate-ubuntu",
        "project-a",
        annotations={"harvesterhci.io/volumeClaimTemplates": '[{"metadata":{"name":"gate-ubuntu-disk-0"}}]'},
    ),
    "spec": {
        "runStrategy": "Halted",
        "dataVolumeTemplates": [
            {
                "metadata": {"name": "gate-ubuntu-root"},
                "spec": {
                    "source": {"snapshot": {"namespace": "golden-images", "name": "golden-ubuntu"}},
                    "storage": {"resources": {"requests": {"storage": "20Gi"}}},
                },
            }
        ],
        "template": {
            "metadata": {"labels": {"kubevirt.io/domain": "gate-ubuntu"}},
            "spec": {
                "domain": {
                    "cpu": {"cores": 2},
                    "resources": {"requests": {"memory": "2Gi"}},
                    "devices": {"disks": [{"name": "root", "bootOrder": 1, "disk": {"bus": "virtio"}}]},
                },
                "volumes": [{"name": "root", "dataVolume": {"name": "gate-ubuntu-root"}}],
            },
        },
    },
    "status": {"printableStatus": "Stopped", "conditions": [{"type": "Ready", "status": "False"}]},
}

VMI = {
    "apiVersion": "kubevirt.io/v1",
    "kind": "VirtualMachineInstance",
    "metadata": _meta("gate-ubuntu", "project-a"),
    "spec": {
        # virt-controller copies the VM's memory request; KubeVirt's admission refuses a VMI without one.
        "domain": {"devices": {"disks": [{"name": "root"}]}, "resources": {"requests": {"memory": "1Gi"}}},
        "volumes": [{"name": "root", "dataVolume": {"name": "gate-ubuntu-root"}}],
    },
    "status": {
        "phase": "Running",
        "conditions": [{"type": "AgentConnected", "status": "True"}],
        "guestOSInfo": {"id": "ubuntu", "version": "24.04"},
    },
}

KUBEVIRT = {
    "apiVersion": "kubevirt.io/v1",
    "kind": "KubeVirt",
    "metadata": _meta("kubevirt", "kubevirt"),
    "spec": {"configuration": {"developerConfiguration": {"featureGates": ["ExpandDisks", "Snapshot"]}}},
    "status": {"phase": "Deployed", "observedKubeVirtVersion": "v1.8.2"},
}

DATAVOLUME = {
    "apiVersion": "cdi.kubevirt.io/v1beta1",
    "kind": "DataVolume",
    "metadata": _meta(
        "talos-worker-376567988ad3-v1.10.6",
        "cozy-public",
        annotations={
            "helm.sh/resource-policy": "keep",
            "cdi.kubevirt.io/storage.bind.immediate.requested": "true",
            "kubernetes-worker-image.cozystack.io/schematic-id": "376567988ad3",
            "kubernetes-worker-image.cozystack.io/talos-version": "v1.10.6",
        },
    ),
    "spec": {
        "source": {
            "http": {
                "url": "https://factory.talos.dev/image/376567988ad3/v1.10.6/openstack-amd64.raw.xz",
                "checksum": "sha256:" + "0" * 64,
            }
        },
        "storage": {"storageClassName": "replicated", "resources": {"requests": {"storage": "6Gi"}}},
        "contentType": "kubevirt",
    },
    "status": {
        "phase": "ImportInProgress",
        "progress": "45.20%",
        "restartCount": 0,
        "claimName": "talos-worker-376567988ad3-v1.10.6",
        "conditions": [{"type": "Ready", "status": "False"}, {"type": "Bound", "status": "True"}],
    },
}

DATASOURCE = {
    "apiVersion": "cdi.kubevirt.io/v1beta1",
    "kind": "DataSource",
    "metadata": _meta("ubuntu", "golden-images"),
    "spec": {"source": {"snapshot": {"namespace": "golden-images", "name": "golden-ubuntu-20260828"}}},
    "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready"}]},
}

DATAIMPORTCRON = {
    "apiVersion": "cdi.kubevirt.io/v1beta1",
    "kind": "DataImportCron",
    "metadata": _meta("fedora-cron", "golden-images"),
    "spec": {
        "schedule": "30 1 * * 1",
        "managedDataSource": "fedora",
        "importsToKeep": 3,
        "garbageCollect": "Outdated",
        "template": {
            "spec": {
                "source": {
                    "registry": {"url": "docker://quay.io/containerdisks/fedora:latest", "pullMethod": "node"}
                },
                "storage": {"resources": {"requests": {"storage": "5Gi"}}},
            }
        },
    },
    "status": {
        "currentImports": [{"DataVolumeName": "fedora-0123456789ab", "Digest": "sha256:0123456789ab"}]
    },
}

CDI = {
    "apiVersion": "cdi.kubevirt.io/v1beta1",
    "kind": "CDI",
    "metadata": {"name": "cdi"},
    "spec": {"cloneStrategyOverride": "copy", "config": {"featureGates": ["HonorWaitForFirstConsumer"]}},
    "status": {"phase": "Deployed"},
}

SNAPSHOT = {
    "apiVersion": "snapshot.storage.k8s.io/v1",
    "kind": "VolumeSnapshot",
    "metadata": _meta(
        "golden-ubuntu-20260828",
        labels={"kube-dc.com/golden-os": "ubuntu-24.04", "kube-dc.com/golden-mode": "Filesystem"},
        annotations={"kube-dc.com/os-family-id": "ubuntu-24.04", "kube-dc.com/clone-min-size": "20Gi"},
    ),
    "spec": {"source": {"persistentVolumeClaimName": "golden-ubuntu"}, "volumeSnapshotClassName": "lab-snap"},
    "status": {
        "readyToUse": True,
        "restoreSize": "20Gi",
        "boundVolumeSnapshotContentName": "snapcontent-1",
        "creationTime": "2026-08-28T10:00:00Z",
    },
}

SNAPSHOT_CONTENT = {
    "apiVersion": "snapshot.storage.k8s.io/v1",
    "kind": "VolumeSnapshotContent",
    "metadata": {"name": "golden-ubuntu-project-a"},
    "spec": {
        "deletionPolicy": "Retain",
        "driver": "lab.csi.goldenimage.io",
        "source": {"snapshotHandle": "snap-0001"},
        "volumeSnapshotRef": {"name": "golden-ubuntu", "namespace": "project-a"},
    },
    "status": {"readyToUse": True, "restoreSize": 21474836480, "snapshotHandle": "snap-0001"},
}

SNAPSHOT_CLASS = {
    "apiVersion": "snapshot.storage.k8s.io/v1",
    "kind": "VolumeSnapshotClass",
    "metadata": {
        "name": "lab-snap",
        "annotations": {"snapshot.storage.kubernetes.io/is-default-class": "true"},
    },
    "driver": "lab.csi.goldenimage.io",
    "deletionPolicy": "Delete",
    "parameters": {"tier": "fast"},
}

SELECTION = {
    "apiVersion": "kube-dc.com/v1",
    "kind": "GoldenImageSelection",
    "metadata": _meta("windows-11-golden-filesystem"),
    "spec": {
        "family": "windows-11-golden",
        "mode": "Filesystem",
        "snapshotName": "golden-windows-11-20260828-f0dea74da9c5",
        "releaseDigest": "sha256:" + "f0dea74da9c5" * 5 + "abcd",
    },
    "status": {"ready": True},
}

DBINSTANCE = {
    "apiVersion": "db.goldenimage.io/v1alpha1",
    "kind": "DBInstance",
    "metadata": _meta("orders", "databases"),
    "spec": {
        "engineVersion": "16.4",
        "osVersion": "ubuntu-24.04",
        "replicas": 3,
        "storage": {"size": "50Gi"},
    },
    "status": {"phase": "Ready", "conditions": [{"type": "OSUpdateAvailable", "status": "True"}]},
}

STORAGE_PROFILE = {
    "apiVersion": "cdi.kubevirt.io/v1beta1",
    "kind": "StorageProfile",
    "metadata": {"name": "replicated"},
    "spec": {"cloneStrategy": "csi-clone"},
    "status": {
        "storageClass": "replicated",
        "provisioner": "linstor.csi.linbit.com",
        "cloneStrategy": "csi-clone",
        "claimPropertySets": [{"accessModes": ["ReadWriteMany"], "volumeMode": "Block"}],
    },
}

BACKING_IMAGE = {
    "apiVersion": "longhorn.io/v1beta2",
    "kind": "BackingImage",
    "metadata": _meta("vmi-0a1b2c3d", "default"),
    "spec": {
        "sourceType": "download",
        "sourceParameters": {"url": "http://127.0.0.1:9000/images/ubuntu-24.04.qcow2"},
        "checksum": "f" * 128,
        "minNumberOfCopies": 3,
        "diskFileSpecMap": {"disk-1": {"dataEngine": "v1"}},
        "dataEngine": "v1",
    },
    "status": {
        "uuid": "0a1b2c3d",
        "size": 2361393152,
        "diskFileStatusMap": {"disk-1": {"state": "ready", "progress": 100, "dataEngine": "v1"}},
    },
}

GOOD = {
    "BackingImage": BACKING_IMAGE,
    "StorageProfile": STORAGE_PROFILE,
    "VirtualMachineImage": VMIMAGE,
    "VirtualMachine": VM,
    "VirtualMachineInstance": VMI,
    "KubeVirt": KUBEVIRT,
    "DataVolume": DATAVOLUME,
    "DataSource": DATASOURCE,
    "DataImportCron": DATAIMPORTCRON,
    "CDI": CDI,
    "VolumeSnapshot": SNAPSHOT,
    "VolumeSnapshotContent": SNAPSHOT_CONTENT,
    "VolumeSnapshotClass": SNAPSHOT_CLASS,
    "GoldenImageSelection": SELECTION,
    "DBInstance": DBINSTANCE,
}


def _set(obj: dict, path: str, value) -> dict:
    obj = copy.deepcopy(obj)
    *parents, last = path.split(".")
    node = obj
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    if value is _DELETE:
        del node[last]
    else:
        node[last] = value
    return obj


_DELETE = object()

# Upstream's types carry no enum for VirtualMachine spec.runStrategy nor DataImportCron
# spec.garbageCollect (KubeVirt and CDI refuse bad values in admission webhooks), so neither is here.
BROKEN = [
    ("VirtualMachineImage", "spec.sourceType", "ftp", "FieldValueNotSupported", "spec.sourceType"),
    ("VirtualMachineImage", "spec.displayName", _DELETE, "FieldValueRequired", "spec.displayName"),
    ("VirtualMachineImage", "spec.retry", 11, "FieldValueInvalid", "spec.retry"),
    ("VirtualMachineImage", "spec.backend", "rbd", "FieldValueNotSupported", "spec.backend"),
    (
        "VirtualMachineImage",
        "spec.storageClassParameters",
        {"numberOfReplicas": 3},
        "FieldValueTypeInvalid",
        "spec.storageClassParameters.numberOfReplicas",
    ),
    ("VirtualMachine", "spec.template", _DELETE, "FieldValueRequired", "spec.template"),
    ("VirtualMachine", "spec.running", "yes", "FieldValueTypeInvalid", "spec.running"),
    ("VirtualMachineInstance", "spec.domain", _DELETE, "FieldValueRequired", "spec.domain"),
    (
        "KubeVirt",
        "spec.configuration.developerConfiguration.featureGates",
        "ExpandDisks",
        "FieldValueTypeInvalid",
        "spec.configuration.developerConfiguration.featureGates",
    ),
    ("DataVolume", "spec.source.http.url", _DELETE, "FieldValueRequired", "spec.source.http.url"),
    ("DataVolume", "spec.contentType", "iso", "FieldValueNotSupported", "spec.contentType"),
    ("DataVolume", "status.progress", 45.2, "FieldValueTypeInvalid", "status.progress"),
    ("DataSource", "spec.source.snapshot.name", _DELETE, "FieldValueRequired", "spec.source.snapshot.name"),
    ("DataSource", "spec.source", _DELETE, "FieldValueRequired", "spec.source"),
    ("DataImportCron", "spec.schedule", _DELETE, "FieldValueRequired", "spec.schedule"),
    ("CDI", "spec.cloneStrategyOverride", "rsync", "FieldValueNotSupported", "spec.cloneStrategyOverride"),
    ("VolumeSnapshot", "status.restoreSize", "20 gigs", "FieldValueInvalid", "status.restoreSize"),
    ("VolumeSnapshotContent", "spec.deletionPolicy", "Keep", "FieldValueNotSupported", "spec.deletionPolicy"),
    (
        "VolumeSnapshotContent",
        "spec.volumeSnapshotRef",
        _DELETE,
        "FieldValueRequired",
        "spec.volumeSnapshotRef",
    ),
    ("VolumeSnapshotContent", "status.restoreSize", -1, "FieldValueInvalid", "status.restoreSize"),
    ("VolumeSnapshotClass", "driver", _DELETE, "FieldValueRequired", "driver"),
    ("VolumeSnapshotClass", "deletionPolicy", "delete", "FieldValueNotSupported", "deletionPolicy"),
    ("GoldenImageSelection", "spec.snapshotName", _DELETE, "FieldValueRequired", "spec.snapshotName"),
    ("GoldenImageSelection", "status.ready", "yes", "FieldValueTypeInvalid", "status.ready"),
    ("DBInstance", "spec.engineVersion", 16, "FieldValueTypeInvalid", "spec.engineVersion"),
    (
        "VirtualMachine",
        "spec.template.spec.domain.cpu",
        {"cores": "2"},
        "FieldValueTypeInvalid",
        "spec.template.spec.domain.cpu.cores",
    ),
    (
        "VirtualMachine",
        "spec.template.spec.volumes",
        [{"name": "root", "persistentVolumeClaim": {"readOnly": True}}],
        "FieldValueRequired",
        "spec.template.spec.volumes[0].persistentVolumeClaim.claimName",
    ),
    (
        "DataVolume",
        "spec.storage.resources.requests",
        {"storage": "6 gigs"},
        "FieldValueInvalid",
        "spec.storage.resources.requests.storage",
    ),
]


# Refused by a CEL rule (x-kubernetes-validations), which only the real API server evaluates
# (tests/lab/tests/controllers/test_crds_apiserver.py).
BROKEN_BY_CEL = [
    ("VolumeSnapshot", "spec.source", {}, "FieldValueInvalid", "spec.source"),
    (
        "VolumeSnapshot",
        "spec.source",
        {"persistentVolumeClaimName": "a", "volumeSnapshotContentName": "b"},
        "FieldValueInvalid",
        "spec.source",
    ),
    ("VolumeSnapshotContent", "spec.source", {}, "FieldValueInvalid", "spec.source"),
    (
        "VolumeSnapshot",
        "spec.volumeSnapshotClassName",
        "",
        "FieldValueInvalid",
        "spec.volumeSnapshotClassName",
    ),
    (
        "VolumeSnapshotContent",
        "spec.volumeSnapshotRef",
        {"name": "golden-ubuntu"},
        "FieldValueInvalid",
        "spec.volumeSnapshotRef",
    ),
]
