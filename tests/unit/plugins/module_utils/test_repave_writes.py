"""The repave drivers write through the adapter's ``patch``: a guarded write that meets an object that
moved on (409) means "look again"; any other failure names the step and the object."""

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeError
from ansible_collections.goldenimage.pipeline.plugins.module_utils.repave import (
    _repave_direct,
    _repave_operator,
)

from tests.unit.plugins.modules.fake_kube import FakeKube

API = "db.goldenimage.io/v1alpha1"


def dbinstance(name="a", version="7"):
    return {
        "apiVersion": API,
        "kind": "DBInstance",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": version, "annotations": {}},
        "spec": {"engineVersion": "16"},
        "status": {"phase": "Available"},
    }


class Refusing(FakeKube):
    """The adapter after its own retries: each queued error is what ``patch`` raises next."""

    def __init__(self, errors, **kwargs):
        super().__init__({}, **kwargs)
        self.errors = list(errors)
        self.sent = []

    def patch(self, api_version, kind, name, namespace, patch, before=None):
        self.sent.append((kind, name, patch, before))
        if self.errors:
            raise self.errors.pop(0)
        return super().patch(api_version, kind, name, namespace, patch, before=before)


def conflict():
    return KubeError("patch DBInstance ns/a: the object has been modified (Conflict, 409)", status=409)


def server_error():
    return KubeError("patch DBInstance ns/a: boom (InternalError, 500) after 6 attempts", status=500)


def operator(module):
    driver = _repave_operator.OperatorDriver(
        module, None, {"api_version": API, "kind": "DBInstance", "trigger_annotation": "repave-trigger"}
    )
    module.add(dbinstance())
    driver.list(None, None)
    return driver


def test_operator_guarded_write_on_a_moved_object_is_looked_at_again():
    module = Refusing([conflict()])
    driver = operator(module)
    inst = driver.view(dbinstance())
    guarded = {"metadata": {"resourceVersion": "7", "annotations": {"repave-trigger": "now"}}}
    assert driver._patch(inst, guarded, "set repave-trigger=now") is None
    # The observed object went to the adapter: it predicts (and skips a no-op) from what was seen.
    assert module.sent[0][3]["metadata"]["resourceVersion"] == "7"
    assert module.writes == []


def test_operator_other_failures_name_the_step_and_the_instance():
    driver = operator(Refusing([server_error()]))
    with pytest.raises(KubeError) as err:
        driver._patch(driver.view(dbinstance()), {"metadata": {"annotations": {"x": "y"}}}, "set x")
    assert err.value.msg.startswith("set x on DBInstance ns/a: ")
    assert err.value.fields["status"] == 500


def test_operator_opt_in_is_one_write_and_updates_the_instance():
    module = Refusing([])
    driver = operator(module)
    inst = driver.view(dbinstance())
    assert driver.set_opt_in(inst, "next-maintenance") is True
    assert inst["opt_in"] == "next-maintenance"
    assert module.writes == [("patch", "DBInstance", "ns", "a")]


def vm(name="vm", version="3"):
    return {
        "apiVersion": _repave_direct.VM_API,
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": version},
        "spec": {},
    }


def test_direct_guarded_write_on_a_moved_vm_raises_conflict():
    module = Refusing([conflict()])
    driver = _repave_direct.DirectDriver(module, None, {"namespace": "ns"})
    with pytest.raises(_repave_direct._Conflict, match="stop the VM: "):
        driver._patch(
            vm(), {"metadata": {"resourceVersion": "3"}, "spec": {"runStrategy": "Halted"}}, "stop the VM"
        )


def test_direct_other_failures_name_the_step_and_the_object():
    module = Refusing([server_error()])
    driver = _repave_direct.DirectDriver(module, None, {"namespace": "ns"})
    with pytest.raises(KubeError, match=r"^stop the VM on VirtualMachine ns/vm: "):
        driver._patch(vm(), {"spec": {"runStrategy": "Halted"}}, "stop the VM")


def test_direct_bare_names_are_read_by_the_adapter_first():
    module = Refusing([])
    module.add(vm())
    driver = _repave_direct.DirectDriver(module, None, {"namespace": "ns"})
    driver._patch(
        {"metadata": {"name": "vm", "namespace": "ns"}}, {"metadata": {"labels": {"a": "b"}}}, "label"
    )
    assert module.sent[0][3] is None  # no resourceVersion seen: the adapter reads before it predicts
    assert module.writes == [("patch", "VirtualMachine", "ns", "vm")]
