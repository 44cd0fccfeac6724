"""Every object kind the collection writes, built with its own builders, survives the upstream schemas.

The lab's KubeVirt, CDI and snapshot CRDs are generated from the upstream API types (tools/build-crds.sh),
so they prune a field the upstream release does not know, as a real cluster does. Each object is created
for real (no controllers act on it) and read back: a field lost or changed on the way is a field the
collection writes that the platform would drop.
"""

from __future__ import annotations

import copy
import pathlib

import jinja2
import pytest
import yaml
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import harvester_image
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import gate
from ansible_collections.goldenimage.pipeline.plugins.module_utils.workers import worker

from tests.lab.tests.controllers.test_crds_apiserver import _contains, real_lab  # noqa: F401

ROOT = pathlib.Path(__file__).resolve().parents[4]
SCHEMATIC = "376567988ad3" + "0" * 52
BAKE_VARS = {
    "windows_bake_name": "win11-bake",
    "windows_bake_namespace": "default",
    "_windows_bake_labels": {"goldenimage.io/bake": "win11-bake"},
    "windows_bake_cpu_cores": "4",
    "windows_bake_memory": "8Gi",
    "_windows_bake_disk": "win11-bake-disk",
    "windows_bake_iso_pvc": "win11-iso",
    "windows_bake_tools_pvc": "win11-tools",
    "_windows_bake_secret": "win11-bake-sysprep",
}


def _bake_vm() -> dict:
    """The Windows bake's VirtualMachine from roles/windows_bake/tasks/build_vm.yml, its Jinja rendered."""
    tasks = yaml.safe_load((ROOT / "roles/windows_bake/tasks/build_vm.yml").read_text())
    (vm,) = [
        d
        for t in tasks
        for d in (t.get("goldenimage.pipeline.kube_object") or {}).get("definitions") or ()
        if d["kind"] == "VirtualMachine"
    ]
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)

    def render(node):
        if isinstance(node, dict):
            return {k: render(v) for k, v in node.items()}
        if isinstance(node, list):
            return [render(v) for v in node]
        if isinstance(node, str) and "{{" in node:
            inner = node.strip()[2:-2].strip()
            return env.compile_expression(inner)(**BAKE_VARS) if node.strip().startswith("{{") else node
        return node

    return render(vm)


def _written() -> dict[str, dict]:
    entry = worker.catalog([{"schematicID": SCHEMATIC, "version": "v1.13.0"}])[0]
    pool = worker.pool_request(
        {
            "name": "md0",
            "namespace": "project-a",
            "osImage": {"builtin": {"schematicID": SCHEMATIC, "version": "v1.13.0"}},
            "storageClass": "",
            "diskSize": "20Gi",
        }
    )
    http_pool = dict(pool, name="md1", imageURL="https://factory.example/image.raw.xz")
    return {
        "gate VirtualMachine": gate.vm_definition(
            "gate-vm",
            "golden-images",
            "gate-claim",
            "2Gi",
            "r1",
            annotations={"goldenimage.io/gate": "r1"},
            user_data="#cloud-config\n",
        ),
        "gate VolumeSnapshot": gate.snapshot_definition("gate-snap", "golden-images", "gate-content", "r1"),
        "gate VolumeSnapshotContent": gate.content_definition(
            "gate-content",
            "snap-0001",
            "lab.csi.goldenimage.io",
            "Filesystem",
            "gate-snap",
            "golden-images",
            "r1",
        ),
        "worker golden DataVolume": worker.render_golden(entry, "cozy-public", checksum="a" * 64),
        "worker clone disk DataVolume": worker.render_clone_disk(pool, "cozy-public", "lab-fs"),
        "worker HTTP disk DataVolume": worker.render_http_disk(http_pool),
        "Harvester VirtualMachineImage": harvester_image.definition(
            "golden-images",
            "v20260828-2404",
            "24.04",
            ["16"],
            "sha512:" + "f" * 128,
            url="https://images.example/pg.qcow2",
            replicas=2,
        ),
        "Windows bake VirtualMachine": _bake_vm(),
    }


WRITTEN = _written()


@pytest.mark.parametrize("what", sorted(WRITTEN))
def test_written_object_reads_back_unchanged(real_lab, what):  # noqa: F811
    obj = copy.deepcopy(WRITTEN[what])
    rt = real_lab.store.resource_for_kind(obj["apiVersion"], obj["kind"])
    created = real_lab.store.create(rt, obj)
    read = real_lab.store.get(rt, created["metadata"].get("namespace"), created["metadata"]["name"])
    sent = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata", "status")}
    assert _contains(read, sent) == [], "pruned or changed by the upstream schema"
    assert _contains(read["metadata"], obj["metadata"]) == []


def test_a_misspelt_field_is_pruned_as_on_a_cluster(real_lab):  # noqa: F811
    """The schemas prune: a disk's `bootorder` (for `bootOrder`) would be lost; the check above sees it."""
    vm = copy.deepcopy(WRITTEN["Windows bake VirtualMachine"])
    vm["metadata"]["name"] = "misspelt"
    disk = vm["spec"]["template"]["spec"]["domain"]["devices"]["disks"][0]
    disk["bootorder"] = disk.pop("bootOrder")
    rt = real_lab.store.resource_for_kind(vm["apiVersion"], vm["kind"])
    stored = real_lab.store.create(rt, vm, dry_run=True)
    sent = {"spec": vm["spec"]}
    assert _contains(stored, sent) == [".spec.template.spec.domain.devices.disks"]
    assert "bootorder" not in stored["spec"]["template"]["spec"]["domain"]["devices"]["disks"][0]
