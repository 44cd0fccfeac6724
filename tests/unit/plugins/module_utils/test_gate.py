import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils import gate, kinds
from ansible_collections.goldenimage.pipeline.plugins.module_utils.errors import Refusal


@pytest.mark.parametrize(
    "agent,port,expected",
    [
        (True, True, "passed"),
        (True, False, "port_unreachable"),
        (False, False, "no_boot"),
        (False, True, "no_boot"),
    ],
)
def test_verdict(agent, port, expected):
    assert gate.verdict(agent, port) == expected


def test_port_unreachable_is_not_called_a_boot_failure():
    text = gate.explain(gate.PORT_UNREACHABLE, "windows", 3389, "10.0.0.7:3389")
    assert "booted" in text and "RDP" in text and "boot failure" not in text
    assert "did not boot" in gate.explain(gate.NO_BOOT, "linux", 22, "-")


@pytest.mark.parametrize(
    "value,size",
    [("8Gi", 8 * 2**30), ("512Mi", 512 * 2**20), ("4G", 4 * 10**9), ("1.5Gi", 3 * 2**29), ("1024", 1024)],
)
def test_parse_quantity(value, size):
    assert gate.parse_quantity(value) == size


def test_parse_quantity_rejects_junk():
    with pytest.raises(gate.GateError, match="not a Kubernetes quantity"):
        gate.parse_quantity("eight gigs")


def test_memory_below_the_catalog_minimum_is_inconclusive():
    assert gate.memory_problem("8Gi", "8Gi") is None
    assert gate.memory_problem("9000Mi", "8Gi") is None
    problem = gate.memory_problem("4Gi", "8Gi")
    assert "below the catalog minimum 8Gi" in problem and "inconclusive" in problem


def test_os_ports_and_minimums():
    assert (gate.port_for("windows"), gate.port_for("linux")) == (3389, 22)
    assert gate.MIN_MEMORY == {"windows": "8Gi", "linux": "1Gi"}
    assert gate.gate_memory("windows") == ("8Gi", "8Gi")
    assert gate.gate_memory("windows", memory="16Gi") == ("16Gi", "8Gi")
    assert gate.gate_memory("linux") == ("1Gi", "1Gi")
    assert gate.port_for("windows", 3390) == 3390
    # One contract: the port the gate probes is the one the seal check asserts in the sealed registry.
    from ansible_collections.goldenimage.pipeline.plugins.module_utils import seal

    assert gate.port_for("windows") == seal.REMOTE_DESKTOP_PORT
    with pytest.raises(gate.GateError):
        gate.port_for("plan9")


def test_clone_size_takes_the_larger_floor():
    assert gate.clone_size("10Gi", "64Gi") == "64Gi"
    assert gate.clone_size("10Gi", None) == "10Gi"
    assert gate.clone_size("70G", "64Gi") == "70G"
    with pytest.raises(gate.GateError):
        gate.clone_size(None, None)


def vmi(ip="10.0.3.7", notes=None):
    return {
        "metadata": {"name": "gate-1", "namespace": "acme", "annotations": notes or {}},
        "status": {"interfaces": [{"ipAddress": ip}] if ip else []},
    }


def test_probe_address():
    assert gate.probe_address("auto", vmi(), 3389) == ("10.0.3.7", 3389)
    forwarded = vmi("127.0.0.1", {"lab.goldenimage.io/forwarded-3389": "40123"})
    # No annotation steers "auto": a production probe goes where a cluster routes the guest port.
    assert gate.probe_address("auto", forwarded, 3389) == ("127.0.0.1", 3389)
    template = "{ip}:{annotations[lab.goldenimage.io/forwarded-3389]}"
    assert gate.probe_address(template, forwarded, 3389) == ("127.0.0.1", 40123)
    assert gate.probe_address(template, vmi("127.0.0.1"), 3389) is None  # not recorded yet: wait
    assert gate.probe_address("auto", vmi(ip=None), 22) is None
    assert gate.probe_address("rdp-{name}.{namespace}.example.net:{port}", vmi(), 3389) == (
        "rdp-gate-1.acme.example.net",
        3389,
    )
    assert gate.probe_address("{ip}:2222", vmi(ip=None), 22) is None
    with pytest.raises(gate.GateError, match="host:port"):
        gate.probe_address("just-a-host", vmi(), 22)


def test_definitions():
    content = gate.content_definition("gate-acme-1", "snap-h", "drv", "Block", "gate-1", "acme", "1")
    assert content["spec"]["deletionPolicy"] == "Retain"
    assert content["spec"]["source"] == {"snapshotHandle": "snap-h"}
    assert content["spec"]["volumeSnapshotRef"]["namespace"] == "acme"
    snap = gate.snapshot_definition("gate-1", "acme", "gate-acme-1", "1")
    assert snap["spec"] == {"source": {"volumeSnapshotContentName": "gate-acme-1"}}
    pvc = gate.pvc_definition("gate-1", "acme", "gate-1", "64Gi", "Block", None, "1")
    assert pvc["spec"]["dataSource"]["kind"] == "VolumeSnapshot" and "storageClassName" not in pvc["spec"]
    vm = gate.vm_definition("gate-1", "acme", "gate-1", "8Gi", "1", {"a": "b"})
    spec = vm["spec"]["template"]["spec"]
    assert vm["spec"]["runStrategy"] == "Always"
    assert spec["domain"]["memory"]["guest"] == "8Gi"
    assert spec["volumes"] == [{"name": "boot", "persistentVolumeClaim": {"claimName": "gate-1"}}]
    assert vm["metadata"]["labels"][gate.GATE_LABEL] == "1"


def test_the_gate_reads_vmis_with_the_shared_accessors():
    # gate.py keeps no copy of condition/agent_connected/describe_vmi: kinds.py decides them once.
    assert not hasattr(gate, "agent_connected") and not hasattr(gate, "describe_vmi")
    running = {"status": {"phase": "Running", "conditions": [{"type": "AgentConnected", "status": "True"}]}}
    assert kinds.agent_connected(running)
    assert not kinds.agent_connected({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    assert not kinds.agent_connected(None)
    assert kinds.describe_vmi(None) == "no VirtualMachineInstance yet"


@pytest.mark.parametrize("project", ["golden-images", "golden-images-block", "my-goldens"])
def test_a_gate_never_runs_in_a_golden_namespace(project):
    with pytest.raises(Refusal) as refused:
        gate.refuse_project_namespace(project, "my-goldens")
    assert refused.value.msg.startswith(
        "option project_namespace (%s): a clone gate runs in a tenant's" % project
    )
    assert "give a project namespace" in refused.value.msg
    assert gate.refuse_project_namespace("acme", "my-goldens") is None


def test_gate_objects_carry_run_and_candidate_and_the_sweep_finds_them_by_label():
    cid = gate.candidate_id("golden-images", "golden-windows-11-golden-20260828-f0dea74da9c5")
    assert len(cid) <= 63 and cid.startswith("golden-windows-11-golden-20260828-f0dea74da9c5"[:50])
    assert cid != gate.candidate_id("golden-images-block", "golden-windows-11-golden-20260828-f0dea74da9c5")
    assert len(gate.candidate_id("golden-images", "x" * 253)) <= 63
    pvc = gate.pvc_definition(
        "gate-1", "acme", "gate-1", "1Gi", "Block", None, "run1", candidate=cid, kept=True
    )
    assert pvc["metadata"]["labels"] == {
        gate.MANAGED_BY: gate.MANAGER,
        gate.GATE_LABEL: "run1",
        gate.CANDIDATE_LABEL: cid,
        gate.KEPT_LABEL: "true",
    }
    assert gate.sweep_selector(cid) == (
        "app.kubernetes.io/managed-by=goldenimage.pipeline.clone_gate,"
        "goldenimage.pipeline/clone-gate-candidate=%s,!goldenimage.pipeline/clone-gate-kept" % cid
    )
    mine = {
        "kind": "VolumeSnapshotContent",
        "metadata": {"name": "c1"},
        "spec": {"volumeSnapshotRef": {"namespace": "acme"}},
    }
    other = {
        "kind": "VolumeSnapshotContent",
        "metadata": {"name": "c2"},
        "spec": {"volumeSnapshotRef": {"namespace": "b"}},
    }
    vm = {"kind": "VirtualMachine", "metadata": {"name": "v", "namespace": "acme"}}
    assert gate.removal_order(gate.swept([mine, other, vm], "acme")) == [vm, mine]


def test_the_cleanup_command_removes_a_run_by_label():
    assert gate.cleanup_command("5f3a", "acme") == (
        "kubectl delete -n acme virtualmachines.kubevirt.io,persistentvolumeclaims,"
        "volumesnapshots.snapshot.storage.k8s.io -l goldenimage.pipeline/clone-gate=5f3a && kubectl delete "
        "volumesnapshotcontents.snapshot.storage.k8s.io -l goldenimage.pipeline/clone-gate=5f3a"
    )
