"""The lab's CRDs on the real kube-apiserver: its structural-schema checks, pruning, defaulting and CEL.

The API server refuses a CRD whose schema is not structural, so the lab starting at all proves that;
here real objects are admitted with every field they carry, broken ones are refused with the cause
upstream's schema gives, the snapshot kinds' CEL immutability rules hold on update, and each kind has a
status subresource exactly where its upstream CRD declares one.
"""

from __future__ import annotations

import copy

import pytest

from tests.lab import Lab
from tests.lab.apiserver import binaries
from tests.lab.objects import ApiError
from tests.lab.tests.unit.test_crds import _DELETE, BROKEN, BROKEN_BY_CEL, EXPECTED, GOOD, _set

NAMESPACES = ("golden-images", "default", "project-a", "kubevirt", "cozy-public", "databases")


@pytest.fixture(scope="module")
def real_lab(tmp_path_factory):
    binaries()
    # No controllers, the upstream ones included (the snapshot controller would write the snapshots the CEL
    # tests update): nothing but the API server acts on what the tests write.
    lab = Lab(
        tmp_path_factory.mktemp("crd-lab"), with_s3=False, controllers=[], kube_controllers=False
    ).start()
    namespaces = lab.store.resource("", "v1", "namespaces")
    for name in NAMESPACES:
        if not lab.store.exists(namespaces, None, name):
            lab.store.create(namespaces, {"metadata": {"name": name}})
    try:
        yield lab
    finally:
        lab.stop()


def _rt(lab, kind: str):
    group, version, plural, *_ = EXPECTED[kind]
    return lab.store.resource(group, version, plural)


def _contains(stored, sent, path="") -> list[str]:
    """Paths of `sent` that `stored` lost or changed (defaults the server added are fine)."""
    if isinstance(sent, dict):
        if not isinstance(stored, dict):
            return [path or "."]
        lost = []
        for key, value in sent.items():
            if key not in stored:
                lost.append(f"{path}.{key}")
            else:
                lost += _contains(stored[key], value, f"{path}.{key}")
        return lost
    return [] if stored == sent else [path]


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_real_objects_are_admitted_with_every_field(real_lab, kind):
    rt = _rt(real_lab, kind)
    obj = copy.deepcopy(GOOD[kind])
    obj["metadata"]["name"] = "admit-" + obj["metadata"]["name"]  # the lab's own lab-snap exists
    has_status = EXPECTED[kind][6]
    stored = real_lab.store.create(rt, obj, dry_run=True)
    assert _contains(stored["spec"] if "spec" in obj else stored, obj.get("spec", {})) == []
    for key in set(obj) - {"apiVersion", "kind", "metadata", "spec", "status"}:
        assert stored[key] == obj[key], key  # VolumeSnapshotClass: top-level fields
    if has_status:
        assert "status" not in stored, "a create through the main resource must drop status"
    elif "status" in obj:
        assert _contains(stored["status"], obj["status"]) == []


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_status_subresource_exactly_where_upstream_has_one(real_lab, kind):
    assert ("status" in _rt(real_lab, kind).subresources) is EXPECTED[kind][6]


@pytest.mark.parametrize(("kind", "path", "value", "reason", "field"), BROKEN + BROKEN_BY_CEL)
def test_broken_objects_are_refused_by_the_server(real_lab, kind, path, value, reason, field):
    rt = _rt(real_lab, kind)
    obj = _set(GOOD[kind], path, value)
    obj["metadata"]["name"] = "broken-" + obj["metadata"]["name"]
    if path.startswith("status.") and "status" in rt.subresources:
        # Status is written (and validated) through its subresource; a create drops it.
        good = dict(copy.deepcopy(GOOD[kind]), metadata=obj["metadata"])
        created = real_lab.store.create(rt, good)
        try:
            with pytest.raises(ApiError) as caught:
                real_lab.store.update(rt, dict(obj, metadata=created["metadata"]), subresource="status")
        finally:
            real_lab.store.delete(rt, created["metadata"].get("namespace"), created["metadata"]["name"])
    else:
        with pytest.raises(ApiError) as caught:
            real_lab.store.create(rt, obj, dry_run=True)
    assert caught.value.code == 422, caught.value.message
    causes = [(c.get("reason"), c.get("field")) for c in caught.value.details.get("causes") or ()]
    assert (reason, field) in causes, caught.value.message


def test_dbinstance_engine_version_is_optional(real_lab):
    obj = _set(GOOD["DBInstance"], "spec.engineVersion", _DELETE)
    stored = real_lab.store.create(_rt(real_lab, "DBInstance"), obj, dry_run=True)
    assert "engineVersion" not in stored["spec"]


def test_selection_mode_is_not_an_enum(real_lab):
    for mode in ("Block", "block", "FILESYSTEM"):
        obj = _set(GOOD["GoldenImageSelection"], "spec.mode", mode)
        real_lab.store.create(_rt(real_lab, "GoldenImageSelection"), obj, dry_run=True)


def test_unmodelled_vm_fields_are_preserved(real_lab):
    """KubeVirt's VM schema keeps what the lab does not model (upstream preserves unknown fields there)."""
    firmware = {"bootloader": {"efi": {"secureBoot": False}}}
    obj = _set(GOOD["VirtualMachine"], "spec.template.spec.domain.firmware", firmware)
    stored = real_lab.store.create(_rt(real_lab, "VirtualMachine"), obj, dry_run=True)
    assert stored["spec"]["template"]["spec"]["domain"]["firmware"] == firmware


def test_vmimage_unknown_spec_fields_are_pruned_and_defaults_applied(real_lab):
    obj = _set(GOOD["VirtualMachineImage"], "spec.unknownKnob", True)
    obj["spec"].pop("retry", None)
    stored = real_lab.store.create(_rt(real_lab, "VirtualMachineImage"), obj, dry_run=True)
    assert "unknownKnob" not in stored["spec"]
    assert (stored["spec"]["retry"], stored["spec"]["backend"]) == (3, "backingimage")


# kind, a field of GOOD[kind] set on create, the update, the message upstream's CEL rule gives.
CEL = [
    (
        "VolumeSnapshot",
        "spec.source.persistentVolumeClaimName",
        "other-claim",
        "persistentVolumeClaimName is immutable",
    ),
    (
        "VolumeSnapshot",
        "spec.source",
        {"volumeSnapshotContentName": "content-1"},
        "persistentVolumeClaimName is required once set",
    ),
    (
        "VolumeSnapshot",
        "spec.source",
        {"persistentVolumeClaimName": "golden-ubuntu", "volumeSnapshotContentName": "content-1"},
        "exactly one of volumeSnapshotContentName and persistentVolumeClaimName must be set",
    ),
    (
        "VolumeSnapshot",
        "spec.volumeSnapshotClassName",
        "",
        "volumeSnapshotClassName must not be the empty string when set",
    ),
    ("VolumeSnapshotContent", "spec.source.snapshotHandle", "snap-0002", "snapshotHandle is immutable"),
    (
        "VolumeSnapshotContent",
        "spec.source",
        {"volumeHandle": "vol-1"},
        "snapshotHandle is required once set",
    ),
    (
        "VolumeSnapshotContent",
        "spec.volumeSnapshotRef",
        {"name": "golden-ubuntu"},
        "both spec.volumeSnapshotRef.name and spec.volumeSnapshotRef.namespace must be set",
    ),
]


@pytest.mark.parametrize(("kind", "path", "value", "message"), CEL)
def test_snapshot_cel_rules_refuse_the_update(real_lab, kind, path, value, message):
    rt = _rt(real_lab, kind)
    obj = copy.deepcopy(GOOD[kind])
    obj.pop("status", None)
    obj["metadata"] = dict(obj["metadata"], name=f"cel-{abs(hash((path, str(value)))) % 10**8}")
    created = real_lab.store.create(rt, obj)
    try:
        with pytest.raises(ApiError) as caught:
            real_lab.store.update(rt, _set(created, path, value))
        assert caught.value.code == 422
        assert message in caught.value.message
        real_lab.store.update(rt, created)  # the unchanged object still goes through
    finally:
        real_lab.store.delete(rt, created["metadata"].get("namespace"), created["metadata"]["name"])


def test_snapshot_content_mode_is_immutable_once_set(real_lab):
    rt = _rt(real_lab, "VolumeSnapshotContent")
    obj = copy.deepcopy(GOOD["VolumeSnapshotContent"])
    obj.pop("status")
    obj["metadata"] = {"name": "cel-mode"}
    obj["spec"]["sourceVolumeMode"] = "Block"
    created = real_lab.store.create(rt, obj)
    try:
        for value, message in (
            ("Filesystem", "sourceVolumeMode is immutable"),
            (_DELETE, "sourceVolumeMode is required once set"),
        ):
            with pytest.raises(ApiError) as caught:
                real_lab.store.update(rt, _set(created, "spec.sourceVolumeMode", value))
            assert message in caught.value.message
    finally:
        real_lab.store.delete(rt, None, "cel-mode")
