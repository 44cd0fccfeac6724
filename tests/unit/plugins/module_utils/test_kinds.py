from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import kinds


def _vmi(phase="Running", agent="True", deleting=False):
    meta = {"name": "vm", "namespace": "p"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    return {
        "metadata": meta,
        "status": {
            "phase": phase,
            "conditions": [{"type": "AgentConnected", "status": agent, "reason": "x"}],
        },
    }


def test_agent_connected_needs_a_running_vmi_that_is_not_terminating():
    assert kinds.agent_connected(_vmi())
    assert not kinds.agent_connected(_vmi(agent="False"))
    assert not kinds.agent_connected(_vmi(phase="Scheduled"))
    assert not kinds.agent_connected(_vmi(deleting=True))
    assert not kinds.agent_connected(None)


def test_describe_vmi_names_phase_termination_and_conditions():
    assert kinds.describe_vmi(None) == "no VirtualMachineInstance yet"
    assert kinds.describe_vmi(_vmi(deleting=True)) == "VMI Running (terminating); AgentConnected=True (x)"


def test_snapshot_handle_prefers_the_declared_handle():
    pre = {"spec": {"source": {"snapshotHandle": "snap-a"}}, "status": {"snapshotHandle": "snap-a"}}
    assert kinds.snapshot_handle(pre) == "snap-a"
    dynamic = {"spec": {"source": {"volumeHandle": "vol-1"}}, "status": {"snapshotHandle": "snap-b"}}
    assert kinds.snapshot_handle(dynamic) == "snap-b"
    assert kinds.snapshot_handle({"spec": {"source": {"snapshotHandle": "snap-c"}}}) == "snap-c"
    assert kinds.snapshot_handle({}) is None
    assert kinds.snapshot_handle(None) is None


def test_accessors_tolerate_missing_parts():
    obj = {"metadata": {"name": "n"}}
    assert kinds.ref(obj) == "n"
    assert kinds.ref({"metadata": {"name": "n", "namespace": "ns"}}) == "ns/n"
    assert kinds.labels(obj) == {} and kinds.annotations(None) == {} and kinds.spec(obj) == {}
    assert kinds.condition(obj, "Ready") is None and not kinds.condition_true(obj, "Ready")
