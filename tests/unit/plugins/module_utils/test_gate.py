import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import gate
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import kinds
from ansible_collections.goldenimage.pipeline.plugins.module_utils.windows import console


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
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.disk import seal

    assert gate.port_for("windows") == seal.REMOTE_DESKTOP_PORT
    with pytest.raises(gate.GateError):
        gate.port_for("plan9")


def test_clone_size_takes_the_larger_floor():
    assert gate.clone_size("10Gi", "64Gi") == "64Gi"
    assert gate.clone_size("10Gi", None) == "10Gi"
    assert gate.clone_size("70G", "64Gi") == "70G"
    with pytest.raises(gate.GateError):
        gate.clone_size(None, None)


def test_the_clone_grows_by_what_is_asked_on_top_of_the_floor():
    assert gate.clone_size("10Gi", "64Gi", "1Gi") == str(65 * 2**30)
    assert gate.clone_size("10Gi", None, "0") == "10Gi"
    with pytest.raises(gate.GateError):
        gate.clone_size("10Gi", None, "-1Gi")


def kubevirt(gates=None, version="v1.8.2", name="kubevirt"):
    spec = {"configuration": {"developerConfiguration": {"featureGates": gates}}} if gates is not None else {}
    return {
        "metadata": {"name": name, "namespace": "kubevirt"},
        "spec": spec,
        "status": {"observedKubeVirtVersion": version} if version else {},
    }


@pytest.mark.parametrize(
    "kubevirts, detail",
    [
        (
            [kubevirt(["ExpandDisks", "Snapshot"])],
            "KubeVirt kubevirt/kubevirt lists the ExpandDisks feature gate",
        ),
        ([kubevirt([], "v1.9.0")], "KubeVirt kubevirt/kubevirt runs v1.9.0, where ExpandDisks is GA"),
        ([kubevirt(None, "v1.10.1")], "runs v1.10.1, where ExpandDisks is GA"),
    ],
)
def test_expand_disks_is_on_by_its_feature_gate_or_from_the_ga_release(kubevirts, detail):
    problem, said = gate.expand_disks(kubevirts)
    assert problem is None and detail in said


@pytest.mark.parametrize(
    "kubevirts, words",
    [
        ([], "no KubeVirt CR (kubevirt.io/v1 KubeVirt) was found"),
        (
            [kubevirt(["Snapshot"])],
            "KubeVirt kubevirt/kubevirt (v1.8.2) does not have the ExpandDisks feature gate",
        ),
        ([kubevirt(None, None)], "(version not reported) does not have the ExpandDisks"),
        ([kubevirt(["ExpandDisks"]), kubevirt([], "v1.7.0", "second")], "KubeVirt kubevirt/second (v1.7.0)"),
        ([kubevirt(["expanddisks"], "1.8")], "does not have the ExpandDisks feature gate"),
    ],
)
def test_expand_disks_off_or_unknown_is_a_problem_that_names_the_fix(kubevirts, words):
    problem, detail = gate.expand_disks(kubevirts)
    assert words in problem and detail is None
    assert "require_expand_disks: false" in problem


def test_the_os_volume_is_found_by_its_mount_point():
    items = [{"mountPoint": "D:\\", "totalBytes": 9}, {"mountPoint": "c:\\", "totalBytes": 5}]
    assert gate.os_volume(items, "windows")["totalBytes"] == 5
    assert (
        gate.os_volume([{"mountPoint": "/boot"}, {"mountPoint": "/", "totalBytes": 3}], "linux")["totalBytes"]
        == 3
    )
    assert gate.os_volume([{"mountPoint": "/boot"}], "linux") is None
    assert gate.os_volume(None, "windows") is None


def test_a_volume_grew_only_when_it_is_larger_than_the_whole_golden():
    golden, clone = "64Gi", str(65 * 2**30)
    grown = {"mountPoint": "C:\\", "totalBytes": 64 * 2**30 + 900 * 2**20}
    assert gate.growth_problem(grown, "windows", golden, clone) is None
    kept = {"mountPoint": "C:\\", "totalBytes": 63 * 2**30}
    problem = gate.growth_problem(kept, "windows", golden, clone)
    assert "the guest's C:\\ is 63.0 GiB on a 65.0 GiB clone of a 64.0 GiB golden" in problem
    assert "ExpandDisks" in problem and "nothing after C:\\" in problem and "extending its volume" in problem
    assert "reports no / volume" in gate.growth_problem(None, "linux", golden, clone)


def test_disk_not_grown_is_its_own_verdict_after_a_boot():
    assert gate.verdict(True, True, disk_grown=False) == gate.DISK_NOT_GROWN
    assert gate.verdict(False, True, disk_grown=False) == gate.NO_BOOT
    assert "booted" in gate.explain(gate.DISK_NOT_GROWN, "windows", 3389, "-")


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


# --- the rounds' decisions -----------------------------------------------------------------------


def snapshot(name, ready=True, bound="c-1", deleting=False, **labels):
    meta = {"name": name, "namespace": "acme", "labels": labels}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    return {"metadata": meta, "status": {"readyToUse": ready, "boundVolumeSnapshotContentName": bound}}


def content(handle, driver="rbd.csi.ceph.com", mode=None):
    spec = {"driver": driver, "source": {"snapshotHandle": handle}}
    if mode:
        spec["sourceVolumeMode"] = mode
    return {"spec": spec}


def test_the_stages_run_in_order_and_end_done():
    stage, seen = "sweep", ["sweep"]
    while stage != "done":
        stage = gate.next_stage(stage)
        seen.append(stage)
    assert tuple(seen) == gate.STAGES


@pytest.mark.parametrize(
    "vs, words",
    [
        (None, "VolumeSnapshot g/c not found"),
        (snapshot("c", ready=False), "is not ready to use"),
        (snapshot("c", bound=None), "is not ready to use"),
    ],
)
def test_a_candidate_that_is_missing_or_not_ready_is_refused(vs, words):
    with pytest.raises(PipelineError, match=words):
        gate.candidate_content(vs, "VolumeSnapshot g/c")


def test_a_candidate_is_cloned_from_its_contents_handle_in_its_mode():
    vs = snapshot("c", **{"kube-dc.com/golden-mode": "Block"})
    assert gate.candidate_content(vs, "w") == "c-1"
    assert gate.candidate_source(vs, content("h1"), "w") == ("h1", "Block", "rbd.csi.ceph.com")
    assert gate.candidate_source(vs, content("h1", mode="Filesystem"), "w")[1] == "Filesystem"
    assert gate.candidate_source(snapshot("c"), content("h1", driver=None), "w") == ("h1", "Filesystem", "")
    with pytest.raises(PipelineError, match="has no snapshot handle"):
        gate.candidate_source(vs, {"spec": {}}, "VolumeSnapshot g/c")


def test_the_seeders_copy_is_a_ready_snapshot_on_the_candidates_handle():
    snapshots = [
        snapshot("b-other", bound="c-other"),
        snapshot("a-deleting", bound="c-same", deleting=True),
        snapshot("c-unready", ready=False, bound="c-same"),
        snapshot("d-copy", bound="c-same"),
    ]
    candidates = gate.copy_candidates(snapshots)
    assert [kinds.name(vs) for vs, _name in candidates] == ["b-other", "d-copy"]
    contents = {"c-other": content("h-other"), "c-same": content("h1")}
    assert kinds.name(gate.seeded_copy(candidates, contents, "h1")) == "d-copy"
    assert gate.seeded_copy(candidates, contents, "h2") is None


def test_the_plan_publishes_only_without_a_seeded_copy():
    names = gate.run_names("5f3a9c21", "acme")
    assert names["content"] != names["vs"] and "acme" in names["content"]
    kinds_planned = [o["kind"] for o in gate.plan(names, None, "acme")]
    assert kinds_planned == [
        "VolumeSnapshotContent",
        "VolumeSnapshot",
        "PersistentVolumeClaim",
        "VirtualMachine",
    ]
    assert [o["kind"] for o in gate.plan(names, snapshot("seed"), "acme")] == [
        "PersistentVolumeClaim",
        "VirtualMachine",
    ]
    assert gate.source(snapshot("seed"), names, "h1", "acme")["published_by"] == "project"
    assert gate.source(None, names, "h1", "acme") == {
        "name": names["vs"],
        "namespace": "acme",
        "handle": "h1",
        "published_by": "gate",
    }


def instance(phase, agent=False, deleting=False):
    meta = {"name": "v"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    conditions = [{"type": "AgentConnected", "status": "True" if agent else "False"}]
    return {"metadata": meta, "status": {"phase": phase, "conditions": conditions}}


def test_the_wait_predicates_read_what_the_cluster_shows():
    assert gate.snapshot_ready(snapshot("s")) == (True, None)
    assert gate.snapshot_ready(snapshot("s", ready=False)) == (False, None)
    failed = {"status": {"readyToUse": False, "error": {"message": "no such handle"}}}
    assert gate.describe_snapshot(failed) == "readyToUse=False error: no such handle"
    assert gate.vmi_running(instance("Running")) == (True, None)
    assert gate.vmi_running(instance("Scheduling")) == (False, None)
    assert gate.vmi_running(instance("Failed"))[1] == "the instance failed before the guest ran"
    assert gate.agent_ready(instance("Running", agent=True)) == (True, None)
    assert gate.agent_ready(instance("Running")) == (False, None)
    # A terminating instance's agent does not count (kinds.agent_connected's meaning).
    assert gate.agent_ready(instance("Running", agent=True, deleting=True)) == (False, None)
    assert "ended (Failed)" in gate.agent_ready(instance("Failed"))[1]
    assert "ended (deleted)" in gate.agent_ready(None)[1]
    assert gate.gone(None) == (True, None) and gate.gone({}) == (False, None)


def test_a_sweep_that_cannot_remove_an_earlier_run_refuses_naming_it_and_the_command():
    left = [{"kind": "VirtualMachine", "name": "gate-old", "namespace": "acme", "run": "old"}]
    text = gate.sweep_refusal("gold/g1", left, "acme", ["VirtualMachine gate-old: forbidden"])
    assert text.startswith("earlier clone gate runs of gold/g1 left VirtualMachine acme/gate-old in acme")
    assert "(VirtualMachine gate-old: forbidden)" in text
    assert text.endswith(gate.cleanup_command("old", "acme"))


def test_cleanup_reports_what_was_kept_or_left_and_how_to_remove_it():
    created = [{"kind": "VirtualMachine", "name": "gate-r", "namespace": "acme", "run": "r"}]
    assert gate.kept_report([], "r", "acme") == {"kept": False}
    kept = gate.kept_report(created, "r", "acme")
    assert kept["kept"] is True and kept["cleanup_command"] == gate.cleanup_command("r", "acme")
    assert kept["cleanup_message"].startswith("kept VirtualMachine acme/gate-r for diagnosis (keep: true)")
    assert gate.left_report([], [], "r", "acme") is None
    left = gate.left_report(created, ["VirtualMachine gate-r: forbidden"], "r", "acme")
    assert left["left_behind"] == created and left["cleanup_errors"] == ["VirtualMachine gate-r: forbidden"]
    assert left["cleanup_message"].startswith("cleanup left VirtualMachine acme/gate-r behind (")


def test_a_kept_run_names_its_vm_and_claim():
    created = [
        {"kind": "VolumeSnapshot", "name": "gate-r-vs", "namespace": "acme"},
        {"kind": "PersistentVolumeClaim", "name": "gate-r", "namespace": "acme"},
        {"kind": "VirtualMachine", "name": "gate-r", "namespace": "acme"},
    ]
    kept = gate.kept_report(created, "r", "acme")
    assert (kept["kept_vm"], kept["kept_pvc"]) == ("acme/gate-r", "acme/gate-r")
    assert "VirtualMachine acme/gate-r, PersistentVolumeClaim acme/gate-r" in kept["cleanup_message"]
    assert kept["cleanup_message"].endswith(gate.cleanup_command("r", "acme"))


@pytest.mark.parametrize(
    "screen, words",
    [
        ({"base_class": "firmware"}, "firmware (wedged in the firmware's boot manager"),
        ({"base_class": "bootprompt"}, "bootprompt (firmware boot lines or a boot prompt"),
        ({"base_class": "setup"}, "setup (Windows' own screens: it was still installing"),
        ({"base_class": "stop-error"}, "stop-error (a Windows stop error"),
        ({"base_class": "blank"}, "blank (a blank screen"),
        ({"error": "VMI is not running"}, "unreadable (VMI is not running)"),
        (None, "not read"),
    ],
)
def test_a_no_boot_verdict_says_what_the_console_last_showed(screen, words):
    text = gate.explain(gate.NO_BOOT, "windows", 3389, "-", screen)
    opening = "the clone did not boot: the guest agent never connected; its console last showed "
    assert text.startswith(opening)
    assert words in text


def test_every_console_class_has_a_meaning():
    assert set(gate.CONSOLE_MEANING) == set(console.CLASSES) == set(gate.LINUX_CONSOLE_MEANING)


def test_a_linux_no_boot_verdict_does_not_speak_of_windows():
    text = gate.explain(gate.NO_BOOT, "linux", 22, "-", {"base_class": "setup"})
    assert "no SSH banner answered" in text and "a login prompt" in text and "Windows" not in text


def test_a_reference_names_the_object_and_its_run():
    obj = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "gate-r", "namespace": "acme", "labels": gate.gate_labels("r")},
    }
    assert gate.ref(obj) == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "name": "gate-r",
        "namespace": "acme",
        "run": "r",
    }


@pytest.mark.parametrize(
    "os_name, family, chosen, expected",
    [
        ("Windows 11", "w11", "", "windows"),
        ("", "windows-server-2025", "", "windows"),
        ("Ubuntu 24.04", "ubuntu-24-04", "", "linux"),
        ("", "", "", "linux"),
        ("Windows 11", "windows-11", "linux", "linux"),
    ],
)
def test_the_golden_says_which_os_the_gate_boots(os_name, family, chosen, expected):
    assert gate.golden_os(os_name, family, chosen) == expected
    with pytest.raises(gate.GateError, match="os must be one of linux, windows, not 'bsd'"):
        gate.golden_os(os_name, family, "bsd")


def test_the_promote_path_gates_a_windows_golden_at_the_catalog_minimum():
    """golden_promote passes the OS from gate_os and no memory of its own: a Windows golden gets 8Gi."""
    import pathlib

    import yaml

    role = pathlib.Path(__file__).resolve().parents[4] / "roles" / "golden_promote"
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text())
    tasks = yaml.safe_load((role / "tasks" / "main.yml").read_text())
    call = next(t for t in tasks if "goldenimage.pipeline.clone_gate" in t)["goldenimage.pipeline.clone_gate"]
    assert "goldenimage.pipeline.gate_os(" in call["os"]
    assert defaults["golden_promote_gate_memory"] == defaults["golden_promote_gate_min_memory"] == ""
    os_name = gate.golden_os("Windows 11", "windows-11", defaults["golden_promote_gate_os"])
    assert gate.gate_memory(os_name, defaults["golden_promote_gate_memory"] or None) == ("8Gi", "8Gi")


# The Linux boot proof, the NoCloud seed, the SSH disk check and the gate record --------------------


def test_a_booted_guest_whose_disk_nothing_could_read_is_unproven_not_passed():
    assert gate.verdict(True, True, None) == gate.DISK_UNPROVEN
    assert gate.verdict(False, True, None) == gate.NO_BOOT
    text = gate.explain(gate.DISK_UNPROVEN, "linux", 22, "10.0.0.7:22", proof=gate.PROOF_SSH)
    assert "booted (SSH banner answered, no guest agent)" in text and "guest_credentials" in text


def test_the_verdict_names_its_proof():
    assert "(guest agent connected)" in gate.explain(gate.PASSED, "windows", 3389, "a:3389")
    assert "(SSH banner answered, no guest agent)" in gate.explain(
        gate.PASSED, "linux", 22, "a:22", proof=gate.PROOF_SSH
    )
    assert "no SSH banner answered" in gate.explain(gate.NO_BOOT, "linux", 22, "-", proof=gate.PROOF_NONE)


@pytest.mark.parametrize(
    "data,ok",
    [
        (b"SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13\r\n", True),
        (b"SSH-2.0-dropbear\n", True),
        (b"SSH-1.5-old\r\n", False),
        (b"HTTP/1.1 400 Bad Request\r\n", False),
        (b"", False),
    ],
)
def test_only_an_ssh2_banner_proves_a_boot(data, ok):
    assert (gate.banner_problem(data) is None) is ok


def test_the_seed_turns_password_login_off_and_authorises_one_key():
    data = gate.seed_user_data("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA clone-gate")
    assert data.startswith("#cloud-config\n") and "ssh_pwauth: false" in data
    assert "  - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA clone-gate\n" in data
    assert "ssh_pwauth: true" in gate.seed_user_data("ssh-ed25519 AAAA k", password_login=True)
    for bad in ("", "not a key", "ssh-ed25519 AAAA\nruncmd: [reboot]"):
        with pytest.raises(gate.GateError, match="one OpenSSH public key line"):
            gate.seed_user_data(bad)


def test_a_linux_vm_gets_the_nocloud_seed_and_a_windows_vm_none():
    linux = gate.vm_definition("g", "p", "c", "1Gi", "r", user_data="#cloud-config\n")
    spec = linux["spec"]["template"]["spec"]
    assert spec["volumes"][1] == {
        "name": gate.SEED_VOLUME,
        "cloudInitNoCloud": {"userData": "#cloud-config\n"},
    }
    assert [d["name"] for d in spec["domain"]["devices"]["disks"]] == ["boot", gate.SEED_VOLUME]
    windows = gate.vm_definition("g", "p", "c", "8Gi", "r")["spec"]["template"]["spec"]
    assert [v["name"] for v in windows["volumes"]] == ["boot"]


@pytest.mark.parametrize(
    "output,size",
    [("2040109465\n", 2040109465), ("   SIZE\n 2040109465 \n", 2040109465), ("", None), ("findmnt: x", None)],
)
def test_root_size_reads_the_commands_figure(output, size):
    assert gate.root_size(output) == size


def test_credentials_need_a_user_and_a_secret():
    assert gate.credentials_problem(None) is None
    assert gate.credentials_problem({"username": "ubuntu", "private_key": "k"}) is None
    assert "username" in gate.credentials_problem({"username": "", "password": "x"})
    assert "password or a private_key" in gate.credentials_problem({"username": "ubuntu"})


def test_the_gate_record_keeps_verdict_proof_check_run_and_time_together():
    result = {
        "verdict": "passed",
        "proof": gate.PROOF_SSH,
        "memory": "1Gi",
        "disk_check": {"name": gate.CHECK_SSH, "detail": "/ is 1.9 GiB"},
    }
    record = gate.gate_record(
        result, "gi/g1", "sha256:" + "a" * 64, "h1", "run1", "2026-01-01T00:00:00Z", "acme"
    )
    assert record == {
        "verdict": "passed",
        "passed": True,
        "proof": "ssh-banner",
        "disk_check": "ssh-root-filesystem",
        "disk_detail": "/ is 1.9 GiB",
        "candidate": "gi/g1",
        "release_digest": "sha256:" + "a" * 64,
        "snapshot_handle": "h1",
        "project": "acme",
        "run": "run1",
        "at": "2026-01-01T00:00:00Z",
        "memory": "1Gi",
    }
    assert gate.gate_record({"verdict": "no_boot"}, "gi/g1", None, None, "r", "t", "p")["proof"] == "none"


GIB = 2**30


@pytest.mark.parametrize(
    "sizes,link",
    [
        ((GIB, GIB, GIB), "(link 1)"),  # the disk kept the golden's size: ExpandDisks
        ((GIB, GIB, 2 * GIB), "(link 2)"),  # C: cannot grow on a grown disk: a partition after it
        ((GIB, 2 * GIB - 2**20, 2 * GIB), "(link 3)"),  # C: may grow but nothing extended it
        ((2 * GIB - 2**20, 2 * GIB - 2**20, 2 * GIB), None),  # grown to the end of its disk
        ((2 * GIB - 8 * 2**20, 2 * GIB - 2**20, 2 * GIB), None),  # alignment slack is not a broken link
    ],
)
def test_the_partition_figures_name_the_link_that_broke(sizes, link):
    problem = gate.partition_problem(sizes, "1Gi", "2Gi")
    if link is None:
        assert problem is None
    else:
        assert link in problem and problem.startswith("C: is ")


def test_the_partition_script_reads_the_seeds_check_and_its_output_is_three_numbers():
    assert "Get-PartitionSupportedSize -DriveLetter C" in gate.PARTITION_SCRIPT
    assert gate.partition_sizes("1 2 3\r\n") == (1, 2, 3)
    assert gate.partition_sizes("WARNING: x\r\n10 20 30") == (10, 20, 30)
    for bad in ("", "1 2", "a b c", "1 2 3 4"):
        assert gate.partition_sizes(bad) is None
    volume, problem, words = gate.guest_reading("windows", 1, "", "Access is denied", "1Gi", "2Gi")
    assert volume is None and words is None and problem == "exited 1: Access is denied"
    volume, problem, words = gate.guest_reading(
        "windows", 0, "%d %d %d" % (2 * GIB, 2 * GIB, 2 * GIB), "", "1Gi", "2Gi"
    )
    assert volume == {"mountPoint": "C:\\", "totalBytes": 2 * GIB} and problem is None
    assert words.startswith("C: is 2.0 GiB (SizeMax 2.0 GiB)")


def test_windows_credentials_log_in_with_a_password_never_readable_on_the_wire():
    windows = {"username": "gate", "password": "p"}
    assert gate.credentials_problem(windows, "windows") is None
    assert "private_key" in gate.credentials_problem({"username": "gate", "private_key": "k"}, "windows")
    assert "readable" in gate.credentials_problem(dict(windows, transport="basic", scheme="http"), "windows")
    assert gate.credentials_problem(dict(windows, transport="basic"), "windows") is None
    assert "not one of" in gate.credentials_problem(dict(windows, transport="digest"), "windows")
    assert gate.login_port("windows", windows) == 5986
    assert gate.login_port("windows", dict(windows, scheme="http")) == 5985
    assert gate.login_port("windows", dict(windows, port=15986)) == 15986
    assert gate.login_port("linux", {"username": "u"}, 2222) == 2222
