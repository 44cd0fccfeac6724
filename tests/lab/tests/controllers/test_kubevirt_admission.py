"""KubeVirt's own admission in the lab: virt-api's validating admitters (kubevirt.io/kubevirt v1.6.0, built by
tools/build-kubevirt-admission.sh) behind a ValidatingWebhookConfiguration for VMs and VMIs.

A VM KubeVirt refuses is refused by the API server with KubeVirt's words, and every VirtualMachine the
collection writes (built with its own builders, as test_written_kinds_apiserver.py builds them) is admitted.
"""

from __future__ import annotations

import copy
import re
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.lab import Lab
from tests.lab.objects import ApiError
from tests.lab.tests.controllers.test_written_kinds_apiserver import WRITTEN

KV = "kubevirt.io"
DENIED = 'admission webhook "virtualmachines.kubevirt-admission.lab.goldenimage.io" denied the request: '


@pytest.fixture(scope="module")
def kv_lab(tmp_path_factory):
    # No controllers: what the tests write meets the API server and its admission alone.
    lab = Lab(
        tmp_path_factory.mktemp("kv-admission"), with_s3=False, controllers=[], kubevirt_admission="upstream"
    ).start()
    try:
        yield lab
    finally:
        lab.stop()


def _vm(name: str, disks: list[dict], volumes: list[dict], **spec) -> dict:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "runStrategy": "Halted",
            "template": {
                "spec": {
                    "domain": {"devices": {"disks": disks}, "memory": {"guest": "1Gi"}},
                    "volumes": volumes,
                }
            },
            **spec,
        },
    }


def _claim(name: str) -> dict:
    return {"name": name, "persistentVolumeClaim": {"claimName": name + "-pvc"}}


def _create(lab, obj: dict, dry_run: bool = False) -> dict:
    rt = lab.store.resource_for_kind(obj["apiVersion"], obj["kind"])
    return lab.store.create(rt, copy.deepcopy(obj), dry_run=dry_run)


def _refusal(lab, obj: dict) -> str:
    with pytest.raises(ApiError) as caught:
        _create(lab, obj)
    rt = lab.store.resource_for_kind(obj["apiVersion"], obj["kind"])
    assert not lab.store.exists(rt, "default", obj["metadata"]["name"]), "a refused object was stored"
    return str(caught.value)


def test_the_webhook_is_registered_as_virt_api_registers_its_own(kv_lab):
    rt = kv_lab.store.resource("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations")
    config = kv_lab.store.get(rt, None, "kubevirt-admission")
    rules = {
        hook["rules"][0]["resources"][0]: (hook["failurePolicy"], sorted(hook["rules"][0]["operations"]))
        for hook in config["webhooks"]
    }
    assert rules == {
        "virtualmachines": ("Fail", ["CREATE", "UPDATE"]),
        "virtualmachineinstances": ("Fail", ["CREATE", "UPDATE"]),
    }


@pytest.mark.parametrize(
    "case, vm, message",
    [
        (
            "two disks with one name",
            _vm(
                "dup-disk",
                [{"name": "root", "disk": {"bus": "virtio"}}, {"name": "root", "disk": {"bus": "virtio"}}],
                [_claim("root")],
            ),
            "spec.template.spec.domain.devices.disks[1] and spec.template.spec.domain.devices.disks[0] "
            "must not have the same Name.",
        ),
        (
            "a disk with no volume",
            _vm(
                "no-volume",
                [{"name": "root", "disk": {"bus": "virtio"}}, {"name": "data", "disk": {"bus": "virtio"}}],
                [_claim("root")],
            ),
            "spec.template.spec.domain.devices.disks[1].Name 'data' not found.",
        ),
        (
            "a boot order given twice",
            _vm(
                "dup-boot",
                [
                    {"name": "root", "bootOrder": 1, "disk": {"bus": "virtio"}},
                    {"name": "iso", "bootOrder": 1, "cdrom": {"bus": "sata"}},
                ],
                [_claim("root"), _claim("iso")],
            ),
            "Boot order for spec.template.spec.domain.devices.disks[1].bootOrder already set for a different "
            "device.",
        ),
        (
            "running with a runStrategy",
            _vm("both-run", [{"name": "root", "disk": {"bus": "virtio"}}], [_claim("root")], running=True),
            "Running and RunStrategy are mutually exclusive.",
        ),
    ],
    ids=lambda value: value if isinstance(value, str) and " " in value else "",
)
def test_a_vm_kubevirt_refuses_is_refused_with_kubevirts_message(kv_lab, case, vm, message):
    text = _refusal(kv_lab, vm)
    assert DENIED in text, text
    assert message in text, text


def test_an_update_is_admitted_by_the_same_rules(kv_lab):
    name = "upd-" + uuid.uuid4().hex[:6]
    vm = _create(kv_lab, _vm(name, [{"name": "root", "disk": {"bus": "virtio"}}], [_claim("root")]))
    vm["spec"]["template"]["spec"]["domain"]["devices"]["disks"].append({"name": "gone", "disk": {}})
    rt = kv_lab.store.resource_for_kind("kubevirt.io/v1", "VirtualMachine")
    with pytest.raises(ApiError, match=re.escape("disks[1].Name 'gone' not found")):
        kv_lab.store.update(rt, vm)
    kept = kv_lab.store.get(rt, "default", name)
    assert [d["name"] for d in kept["spec"]["template"]["spec"]["domain"]["devices"]["disks"]] == ["root"]


def test_a_vmi_is_validated_by_the_vmi_admitter(kv_lab):
    disks = [{"name": "root", "disk": {"bus": "virtio"}}, {"name": "data", "disk": {"bus": "virtio"}}]
    vmi = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "lone-vmi", "namespace": "default"},
        "spec": {
            "domain": {"devices": {"disks": disks}, "memory": {"guest": "1Gi"}},
            "volumes": [_claim("root")],
        },
    }
    text = _refusal(kv_lab, vmi)
    assert "virtualmachineinstances.kubevirt-admission.lab.goldenimage.io" in text, text
    assert "spec.domain.devices.disks[1].Name 'data' not found." in text, text
    # virt-api's mutator gives a volume with no disk a disk of its own before validation, and sets the
    # architecture the per-architecture checks need: so does the lab's admission, on its own copy.
    vmi["spec"]["domain"]["devices"]["disks"].pop()
    vmi["spec"]["volumes"].append(_claim("spare"))
    created = _create(kv_lab, vmi, dry_run=True)
    assert "architecture" not in created["spec"]
    assert [d["name"] for d in created["spec"]["domain"]["devices"]["disks"]] == ["root"]


@pytest.mark.parametrize("what", sorted(w for w in WRITTEN if WRITTEN[w]["kind"] == "VirtualMachine"))
def test_every_vm_the_collection_writes_is_admitted(kv_lab, what):
    vm = copy.deepcopy(WRITTEN[what])
    vm["metadata"]["namespace"] = "default"
    assert _create(kv_lab, vm, dry_run=True)["spec"] == vm["spec"]


@given(
    disks=st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=4),
    volumes=st.sets(st.sampled_from(["a", "b", "c", "d"]), max_size=4),
)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_vm_is_admitted_exactly_when_its_disks_are_unique_and_backed(kv_lab, disks, volumes):
    """KubeVirt's rule, not the lab's: each disk has a name of its own and a volume of that name (a VM may
    hold volumes no disk uses). What is refused is not stored."""
    name = "prop-" + uuid.uuid4().hex[:8]
    vm = _vm(
        name, [{"name": d, "disk": {"bus": "virtio"}} for d in disks], [_claim(v) for v in sorted(volumes)]
    )
    valid = len(set(disks)) == len(disks) and set(disks) <= volumes
    if valid:
        _create(kv_lab, vm)
    else:
        assert DENIED in _refusal(kv_lab, vm)


def test_an_unknown_admission_choice_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(ValueError, match="kubevirt_admission 'virt-api': use one of upstream, off"):
        Lab(tmp_path, kubevirt_admission="virt-api")
    assert list(tmp_path.iterdir()) == []
