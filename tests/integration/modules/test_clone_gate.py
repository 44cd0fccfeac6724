"""clone_gate in the lab, on real disks: a sealed Windows disk passes (its SYSTEM hive enables Remote
Desktop, so the lab's guest answers 3389 at the catalog's 8Gi), a golden whose bake left RDP off is
port_unreachable, a closed port is not a boot failure, a disk of zeros does not boot, low memory is
inconclusive, a namespace that is not a project's is refused, and cleanup leaves nothing (or, kept,
everything)."""

from __future__ import annotations

import os
import re
import time
import uuid

import pytest

from tests.integration.support import disks
from tests.integration.support.runner import kube_play, run_playbook
from tests.lab.controllers.kubevirt import probe_template

pytestmark = pytest.mark.lab_only

MODULE = "goldenimage.pipeline.clone_gate"
GATE_LABEL = "goldenimage.pipeline/clone-gate"
SNAP = ("snapshot.storage.k8s.io", "v1")
KV = ("kubevirt.io", "v1")
AGENT_DELAY = "LAB_KUBEVIRT_AGENT_DELAY_SECONDS"
FAST = {"agent_timeout": 3, "disk_timeout": 3, "port_timeout": 2, "provision_timeout": 90, "poll_interval": 1}
# Where the lab forwards each guest's port, passed to the gate as an operator names a Service.
WINDOWS = {"port_probe": probe_template(3389)}
LINUX = {"os": "linux", "port_probe": probe_template(22)}


@pytest.fixture(scope="module")
def goldens(lab, kube_client, tmp_path_factory):
    """A golden namespace holding Ready snapshots of real disks: sealed Windows (also with WinRE after
    C:, so C: cannot grow), zeros, sealed Linux."""
    from kubernetes import client

    from tests.lab.controllers.volumes import disk_image_path

    folder = tmp_path_factory.mktemp("gate-disks")
    images = {
        "windows": disks.windows_disk(folder / "windows.raw", disks.sealed_windows_files())["path"],
        "windows-rdp-off": disks.windows_disk(
            folder / "windows-rdp-off.raw",
            disks.sealed_windows_files({"Windows/System32/config/SYSTEM": disks.system_hive(deny=1)}),
        )["path"],
        "windows-winre": disks.windows_disk(
            folder / "windows-winre.raw", disks.sealed_windows_files(), recovery_after=True
        )["path"],
        "linux": disks.qcow2(
            disks.linux_disk(folder / "linux.raw", disks.ext4_tree(folder / "tree"))["path"],
            folder / "linux.qcow2",
        ),
        "zeros": folder / "zeros.raw",
    }
    disks.run("truncate", "-s", "64M", images["zeros"])
    core = client.CoreV1Api(kube_client)
    custom = client.CustomObjectsApi(kube_client)
    namespace = "gold-" + uuid.uuid4().hex[:8]
    core.create_namespace({"metadata": {"name": namespace}})
    for name, image in images.items():
        claim = {
            "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        }
        core.create_namespaced_persistent_volume_claim(namespace, claim)
        pvc = bound(lab, namespace, name)
        disks.run("cp", "--sparse=always", image, disk_image_path(lab.controller_manager.lab, pvc))
        body = {
            "apiVersion": "snapshot.storage.k8s.io/v1",
            "kind": "VolumeSnapshot",
            "metadata": {"name": "golden-" + name},
            "spec": {"source": {"persistentVolumeClaimName": name}},
        }
        custom.create_namespaced_custom_object(*SNAP, namespace, "volumesnapshots", body)
    for name in images:
        wait_ready(custom, namespace, "golden-" + name)
    return namespace


PROJECTS: list[str] = []


@pytest.fixture(scope="module", autouse=True)
def _projects_deleted(kube_client):
    """The module's project namespaces go when it ends: the lab's seeder copies every selected golden
    into each project namespace, which later modules' goldens would otherwise find in use."""
    yield
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    core = client.CoreV1Api(kube_client)
    while PROJECTS:
        try:
            core.delete_namespace(PROJECTS.pop())
        except ApiException as exc:
            if exc.status != 404:
                raise


def project_namespace(core, name=None):
    """A project namespace as Kube-DC makes them: labelled kube-dc.com/project."""
    name = name or "p-" + uuid.uuid4().hex[:8]
    core.create_namespace({"metadata": {"name": name, "labels": {"kube-dc.com/project": name}}})
    PROJECTS.append(name)
    return name


def bound(lab, namespace, name):
    rt = lab.store.resource("", "v1", "persistentvolumeclaims")
    end = time.monotonic() + 20
    while time.monotonic() < end:
        pvc = lab.store.get(rt, namespace, name)
        if (pvc.get("status") or {}).get("phase") == "Bound":
            return pvc
        time.sleep(0.05)
    raise AssertionError("claim %s/%s never bound" % (namespace, name))


def wait_ready(custom, namespace, name):
    end = time.monotonic() + 20
    while time.monotonic() < end:
        vs = custom.get_namespaced_custom_object(*SNAP, namespace, "volumesnapshots", name)
        if (vs.get("status") or {}).get("readyToUse"):
            return
        time.sleep(0.1)
    raise AssertionError("snapshot %s/%s never became ready: %s" % (namespace, name, vs.get("status")))


def task(name, check=False, **args):
    entry = {"name": name, MODULE: args, "ignore_errors": True}
    if check:
        entry["check_mode"] = True
    return entry


def leftovers(lab, project):
    """Everything carrying the gate's label: in the project, and the cluster-scoped contents bound to a
    snapshot in it (another project's kept run is not this project's leftover)."""
    store = lab.store
    found = []
    for group, version, plural, namespace in (
        (*KV, "virtualmachines", project),
        (*KV, "virtualmachineinstances", project),
        ("", "v1", "persistentvolumeclaims", project),
        (*SNAP, "volumesnapshots", project),
        (*SNAP, "volumesnapshotcontents", None),
    ):
        items, _rv = store.list(store.resource(group, version, plural), namespace)
        for obj in items:
            labels = obj["metadata"].get("labels") or {}
            owned = (obj["metadata"].get("ownerReferences") or [{}])[0].get("kind") == "VirtualMachine"
            bound = (obj.get("spec") or {}).get("volumeSnapshotRef", {}).get("namespace", project)
            if bound != project:
                continue
            if GATE_LABEL in labels or (plural == "virtualmachineinstances" and owned):
                found.append("%s/%s" % (plural, obj["metadata"]["name"]))
    return sorted(found)


@pytest.fixture(scope="module")
def gated(lab, goldens, kube_client):
    """One playbook for every case (a playbook start costs seconds): two fresh project namespaces,
    `quiet` for what must send nothing, `project` for the runs."""
    from kubernetes import client

    core = client.CoreV1Api(kube_client)
    quiet, project, wedged = (project_namespace(core) for _i in range(3))
    unlabelled = "plain-" + uuid.uuid4().hex[:8]
    core.create_namespace({"metadata": {"name": unlabelled}})
    old = os.environ.get(AGENT_DELAY)
    os.environ[AGENT_DELAY] = "0.3"  # the lab's controllers run in this process
    lab.clear_audit()
    try:
        common = {"snapshot_namespace": goldens, "project_namespace": project, **FAST}
        silent = {"snapshot": "golden-windows", "snapshot_namespace": goldens, "project_namespace": quiet}
        run = run_playbook(
            kube_play(
                task("predict", check=True, **silent),
                task("too little memory", memory="2Gi", **silent),
                task("4Gi windows", memory="4Gi", **silent),
                task("not a project", **{**silent, "project_namespace": unlabelled}),
                task("sealed", snapshot="golden-windows", **WINDOWS, **common),
                task("rdp off", snapshot="golden-windows-rdp-off", **WINDOWS, **common),
                task(
                    "port closed",
                    snapshot="golden-windows",
                    vm_annotations={"lab.goldenimage.io/port-open": "false"},
                    **WINDOWS,
                    **common,
                ),
                task("zeros", snapshot="golden-zeros", **WINDOWS, **common),
                task("winre", snapshot="golden-windows-winre", **WINDOWS, **common),
                task("kept", snapshot="golden-linux", keep=True, **LINUX, **common),
                task(
                    "zeros kept",
                    snapshot="golden-zeros",
                    keep=True,
                    vm_annotations={"lab.goldenimage.io/console": "text"},
                    **WINDOWS,
                    **{**common, "project_namespace": wedged},
                ),
                task("again", snapshot="golden-linux", **LINUX, **common),
            ),
            env=lab.env(),
        )
    finally:
        if old is None:
            os.environ.pop(AGENT_DELAY, None)
        else:
            os.environ[AGENT_DELAY] = old
    return {
        "run": run,
        "quiet": quiet,
        "project": project,
        "wedged": wedged,
        "unlabelled": unlabelled,
        "audit": lab.audit(),
    }


def test_check_mode_and_low_memory_send_nothing(gated):
    run, quiet = gated["run"], gated["quiet"]
    assert run.entry("predict")["status"] == "skipped", run.log
    predicted = run["predict"]
    assert "check mode" in predicted["msg"]
    assert [o["kind"] for o in predicted["would_create"]] == [
        "VolumeSnapshotContent",
        "VolumeSnapshot",
        "PersistentVolumeClaim",
        "VirtualMachine",
    ]
    low = run["too little memory"]
    assert run.entry("too little memory")["status"] == "ignored" and low["verdict"] == "inconclusive", low
    assert "below the catalog minimum" in low["msg"] and "inconclusive" in low["msg"]
    assert low["created"] == [] and low["phases"] == []
    # The catalog's minMemory for Windows is 8Gi: 4Gi is inconclusive, never a boot verdict.
    four = run["4Gi windows"]
    assert four["verdict"] == "inconclusive" and four["min_memory"] == "8Gi", four
    assert "below the catalog minimum 8Gi" in four["msg"]
    plain = run["not a project"]
    assert plain["refused"] is True and plain["verdict"] == "inconclusive", plain
    assert "it is not a project namespace" in plain["msg"] and "kube-dc.com/project" in plain["msg"]
    touched = [
        r
        for r in gated["audit"]
        if r["verb"] not in ("get", "list", "watch")
        and (
            r["namespace"] in (quiet, gated["unlabelled"])
            or (r["name"] or "").startswith(("gate-%s-" % quiet, "gate-%s-" % gated["unlabelled"]))
        )
    ]
    assert touched == []


def test_verdicts(gated):
    run = gated["run"]
    sealed = run["sealed"]
    assert run.entry("sealed")["status"] == "ok", run.log
    assert sealed["verdict"] == "passed" and sealed["passed"] is True and sealed["changed"] is True
    assert [p["name"] for p in sealed["phases"]] == ["provision", "start", "agent", "disk", "port"]
    assert all(p["passed"] for p in sealed["phases"])
    assert sealed["source"]["published_by"] == "gate"
    assert sealed["probe"].startswith("127.0.0.1:")
    assert (sealed["memory"], sealed["min_memory"]) == ("8Gi", "8Gi")
    # The clone is 1Gi larger than the 1Gi golden; ExpandDisks (the lab's KubeVirt CR) grew the image and
    # the guest extended C: past the whole golden.
    assert sealed["expand_disks"] == "KubeVirt kubevirt/kubevirt lists the ExpandDisks feature gate"
    assert sealed["os_volume"]["mountPoint"] == "C:\\" and sealed["os_volume"]["totalBytes"] > 2**30, sealed
    disk = next(p for p in sealed["phases"] if p["name"] == "disk")
    assert re.match(r"C:\\ is 1\.\d GiB on a 2\.0 GiB clone of a 1\.0 GiB golden$", disk["detail"]), disk

    # WinRE right after C: (a bake that did not remove it): the disk grew, C: could not.
    winre = run["winre"]
    assert run.entry("winre")["status"] == "ignored" and winre["verdict"] == "disk_not_grown", winre
    assert [(p["name"], p["passed"]) for p in winre["phases"]][-2:] == [("agent", True), ("disk", False)]
    assert "booted" in winre["msg"] and "its disk did not grow" in winre["msg"], winre["msg"]
    assert "the guest's C:\\ is 64.0 MiB on a 2.0 GiB clone of a 1.0 GiB golden" in winre["msg"], winre["msg"]
    assert "nothing after C:\\ on the disk" in winre["msg"]

    # The bake's contract broken (fDenyTSConnections=1 in the sealed hive): the guest boots, RDP is silent.
    off = run["rdp off"]
    assert run.entry("rdp off")["status"] == "ignored" and off["verdict"] == "port_unreachable", off
    assert [(p["name"], p["passed"]) for p in off["phases"]][-3:] == [
        ("agent", True),
        ("disk", True),
        ("port", False),
    ]
    assert [o["kind"] for o in sealed["created"]] == [
        "VolumeSnapshotContent",
        "VolumeSnapshot",
        "PersistentVolumeClaim",
        "VirtualMachine",
    ]

    closed = run["port closed"]
    assert run.entry("port closed")["status"] == "ignored" and closed["verdict"] == "port_unreachable", closed
    assert "booted" in closed["msg"] and "did not answer" in closed["msg"]
    assert "boot failure" not in closed["msg"]
    assert [(p["name"], p["passed"]) for p in closed["phases"]][-3:] == [
        ("agent", True),
        ("disk", True),
        ("port", False),
    ]

    zeros = run["zeros"]
    assert run.entry("zeros")["status"] == "ignored" and zeros["verdict"] == "no_boot", zeros
    assert [(p["name"], p["passed"]) for p in zeros["phases"]][-1] == ("agent", False)
    assert "port" not in [p["name"] for p in zeros["phases"]]
    # The lab's default screen is Windows Setup: the verdict says what the console last showed.
    assert zeros["console_class"] == "setup" and zeros["console"]["base_class"] == "setup", zeros
    assert "its console last showed setup (" in zeros["msg"], zeros["msg"]


def test_a_kept_no_boot_names_the_console_class_the_kept_vm_and_pvc_and_the_command(lab, gated):
    run, wedged = gated["run"], gated["wedged"]
    result = run["zeros kept"]
    assert run.entry("zeros kept")["status"] == "ignored" and result["verdict"] == "no_boot", result["msg"]
    assert result["console_class"] == "bootprompt", result
    assert "its console last showed bootprompt (firmware boot lines or a boot prompt" in result["msg"]
    vm = next(o for o in result["created"] if o["kind"] == "VirtualMachine")
    pvc = next(o for o in result["created"] if o["kind"] == "PersistentVolumeClaim")
    assert result["kept"] is True
    assert result["kept_vm"] == "%s/%s" % (wedged, vm["name"])
    assert result["kept_pvc"] == "%s/%s" % (wedged, pvc["name"])
    assert "VirtualMachine %s/%s" % (wedged, vm["name"]) in result["msg"]
    assert "PersistentVolumeClaim %s/%s" % (wedged, pvc["name"]) in result["msg"]
    assert result["cleanup_command"].startswith("kubectl delete -n %s " % wedged)
    assert result["msg"].endswith(result["cleanup_command"])
    left = leftovers(lab, wedged)
    assert "virtualmachines/%s" % vm["name"] in left and "persistentvolumeclaims/%s" % pvc["name"] in left


def test_keep_false_deletes_what_it_created_and_nothing_else(lab, goldens, gated):
    run = gated["run"]
    deleted = [
        (r["resource"], r["name"]) for r in gated["audit"] if r["verb"] == "delete" and r["code"] < 300
    ]
    mine = set()
    for name in ("sealed", "rdp off", "port closed", "zeros", "winre", "again"):
        assert run[name]["kept"] is False
        for obj in run[name]["created"]:
            mine.add((obj["kind"].lower() + "s", obj["name"]))
            assert (obj["kind"].lower() + "s", obj["name"]) in deleted, (name, obj)
    assert set(deleted) <= mine  # nothing it did not create, the kept run's objects included
    custom = client_for(lab)
    golden = custom.get_namespaced_custom_object(*SNAP, goldens, "volumesnapshots", "golden-windows")
    assert golden["status"]["readyToUse"] is True
    content = golden["status"]["boundVolumeSnapshotContentName"]
    assert custom.get_cluster_custom_object(*SNAP, "volumesnapshotcontents", content)


def test_keep_true_leaves_everything_and_the_copy_is_reused(lab, gated):
    run, project = gated["run"], gated["project"]
    kept = run["kept"]
    assert run.entry("kept")["status"] == "ok", run.log
    assert kept["verdict"] == "passed" and kept["kept"] is True
    # What was kept is named, with the command that deletes it.
    assert "kept VirtualMachine %s/%s" % (project, kept["created"][-1]["name"]) in kept["msg"], kept["msg"]
    assert "PersistentVolumeClaim %s/%s" % (project, kept["created"][-2]["name"]) in kept["msg"]
    assert kept["cleanup_command"] in kept["msg"] and kept["cleanup_command"].startswith("kubectl delete")
    again = run["again"]
    assert again["verdict"] == "passed", again
    # The kept run's published snapshot is a ready copy on the same handle: the next run clones it.
    assert again["source"]["published_by"] == "project"
    assert again["source"]["name"] == kept["source"]["name"]
    assert [o["kind"] for o in again["created"]] == ["PersistentVolumeClaim", "VirtualMachine"]
    expected = ["%s/%s" % (o["kind"].lower() + "s", o["name"]) for o in kept["created"]]
    expected.append("virtualmachineinstances/%s" % kept["created"][-1]["name"])
    assert leftovers(lab, project) == sorted(expected)
    # Tidy up by hand, as a user would after diagnosis.
    for obj in reversed(kept["created"]):
        group, version = obj["apiVersion"].split("/") if "/" in obj["apiVersion"] else ("", obj["apiVersion"])
        rt = lab.store.resource(group, version, obj["kind"].lower() + "s")
        lab.store.delete(rt, obj["namespace"] if rt.namespaced else None, obj["name"])
    # The claim stays Terminating (pvc-protection) until the VM's virt-launcher pod is gone, as on a cluster.
    deadline = time.monotonic() + 30
    while leftovers(lab, project) not in ([], [expected[-1]]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert leftovers(lab, project) == [] or leftovers(lab, project) == [expected[-1]]


def client_for(lab):
    from kubernetes import client, config

    return client.CustomObjectsApi(config.new_client_from_config(str(lab.kubeconfig)))


def mutating(audit):
    return [r for r in audit if r["verb"] not in ("get", "list", "watch")]


@pytest.fixture(scope="module")
def swept(lab, goldens, kube_client, tmp_path_factory):
    """A token that may create but not delete leaves a whole gate run behind; the next run of the same
    candidate (with a token that may delete) sweeps it before it starts; a run under injected 409s, 5xx
    and dropped connections still passes and leaves nothing; golden namespaces are refused."""
    from kubernetes import client

    core = client.CoreV1Api(kube_client)
    project = project_namespace(core)
    user = "gate-no-delete-" + uuid.uuid4().hex[:6]
    token = lab.add_token(user, [{"verbs": ["get", "list", "watch", "create", "update", "patch"]}])
    limited = str(lab.write_kubeconfig(tmp_path_factory.mktemp("rbac") / "kubeconfig", token, user))
    common = {"snapshot": "golden-linux", "snapshot_namespace": goldens, "project_namespace": project}
    common.update(FAST, **LINUX)
    old = os.environ.get(AGENT_DELAY)
    os.environ[AGENT_DELAY] = "0.3"
    story = {"project": project}
    try:
        lab.clear_audit()
        story["first"] = run_playbook(
            kube_play(task("may not delete", kubeconfig=limited, **common)), env=lab.env()
        )
        story["left"] = leftovers(lab, project)
        lab.clear_audit()
        story["second"] = run_playbook(
            kube_play(
                task("predicted", check=True, **common),
                task("sweeps first", **common),
                task("golden-images", **{**common, "project_namespace": "golden-images"}),
                task("golden-images-block", **{**common, "project_namespace": "golden-images-block"}),
                task("own namespace", **{**common, "project_namespace": goldens}),
                task("zero timeout", **dict(common, agent_timeout=0)),
            ),
            env=lab.env(),
        )
        story["second audit"] = lab.audit()
        story["after second"] = leftovers(lab, project)
        lab.faults.update(
            {"conflict_rate": 0.2, "error_rate": 0.1, "drop_rate": 0.05, "commit_drop_rate": 0.05, "seed": 11}
        )
        try:
            story["faults"] = run_playbook(
                kube_play(task("under faults", **common)), env=lab.env(faults=True)
            )
        finally:
            lab.faults.reset()
        story["after faults"] = leftovers(lab, project)
    finally:
        if old is None:
            os.environ.pop(AGENT_DELAY, None)
        else:
            os.environ[AGENT_DELAY] = old
    return story


@pytest.mark.suite("faults")
def test_a_failed_cleanup_is_reported_with_the_names_and_the_command(swept):
    run, project = swept["first"], swept["project"]
    result = run["may not delete"]
    assert result["verdict"] == "passed", result
    assert result["kept"] is True  # not kept on purpose, but still there: said so
    left = result["left_behind"]
    assert [o["kind"] for o in left] == [
        "VirtualMachine",
        "PersistentVolumeClaim",
        "VolumeSnapshot",
        "VolumeSnapshotContent",
    ]
    run_id = left[0]["run"]
    assert all(o["run"] == run_id for o in left)
    assert result["cleanup_command"] == (
        "kubectl delete -n %s virtualmachines.kubevirt.io,persistentvolumeclaims,"
        "volumesnapshots.snapshot.storage.k8s.io -l goldenimage.pipeline/clone-gate=%s && kubectl delete "
        "volumesnapshotcontents.snapshot.storage.k8s.io -l goldenimage.pipeline/clone-gate=%s"
        % (project, run_id, run_id)
    )
    assert "cleanup left VirtualMachine %s/%s" % (project, left[0]["name"]) in result["msg"]
    assert "forbidden" in " ".join(result["cleanup_errors"]).lower()
    assert len(swept["left"]) == 5  # the four objects and the VM's instance, really there


@pytest.mark.suite("faults")
def test_the_next_run_of_the_candidate_sweeps_what_an_earlier_run_left(swept):
    run = swept["second"]
    earlier = swept["first"]["may not delete"]["left_behind"]
    predicted = run["predicted"]
    assert [(o["kind"], o["name"]) for o in predicted["would_sweep"]] == [
        (o["kind"], o["name"]) for o in earlier
    ]
    result = run["sweeps first"]
    assert run.entry("sweeps first")["status"] == "ok", run.log
    assert result["verdict"] == "passed" and result["kept"] is False
    assert [(o["kind"], o["name"]) for o in result["swept"]] == [(o["kind"], o["name"]) for o in earlier]
    deletes = [
        (r["resource"], r["name"]) for r in swept["second audit"] if r["verb"] == "delete" and r["code"] < 300
    ]
    for obj in earlier:
        assert (obj["kind"].lower() + "s", obj["name"]) in deletes
    # The sweep ran before the new run created anything.
    first_create = next(i for i, r in enumerate(swept["second audit"]) if r["verb"] == "create")
    last_sweep = max(
        i
        for i, r in enumerate(swept["second audit"])
        if r["verb"] == "delete" and r["name"] == earlier[-1]["name"]
    )
    assert last_sweep < first_create
    assert swept["after second"] == []


@pytest.mark.suite("bad-input")
def test_golden_namespaces_and_zero_timeouts_are_refused_before_any_write(swept, goldens):
    run = swept["second"]
    for name, namespace in (
        ("golden-images", "golden-images"),
        ("golden-images-block", "golden-images-block"),
        ("own namespace", goldens),
    ):
        result = run[name]
        assert run.entry(name)["status"] == "ignored", (name, result)
        assert result["refused"] is True
        assert result["msg"].startswith(
            "option project_namespace (%s): a clone gate runs in a tenant's project namespace" % namespace
        )
    zero = run["zero timeout"]
    assert zero["refused"] is True and zero["msg"].startswith("option agent_timeout: 0 is not a duration")
    touched = [
        r
        for r in mutating(swept["second audit"])
        if r["namespace"] in ("golden-images", "golden-images-block", goldens)
    ]
    # The only write there may be the verdict of the run that did reach one ("sweeps first"), recorded on
    # its golden unless an earlier run recorded the same verdict already; the refused runs wrote nothing.
    assert [(r["verb"], r["resource"]) for r in touched] in ([], [("patch", "volumesnapshots")]), touched


@pytest.mark.suite("faults")
def test_under_conflicts_5xx_and_dropped_connections_it_passes_and_leaves_nothing(swept):
    run = swept["faults"]
    result = run["under faults"]
    assert result["verdict"] == "passed", result
    assert result["kept"] is False and "left_behind" not in result, result
    assert swept["after faults"] == [], result


@pytest.mark.slow  # minutes of waiting by design: the slow tier
def test_long_waits_print_progress_and_a_timeout_names_what_was_pending(
    lab, goldens, kube_client, monkeypatch
):
    """Rounds of at most report_every seconds: each prints the phase, what it waits for, the elapsed time;
    an agent that never connects ends naming what was still pending."""
    from kubernetes import client

    project = project_namespace(client.CoreV1Api(kube_client))
    slow = {"report_every": 1, "agent_timeout": 60, "port_timeout": 5, "provision_timeout": 30}
    common = {"snapshot_namespace": goldens, "project_namespace": project, "poll_interval": 1}
    monkeypatch.setenv(AGENT_DELAY, "10")  # the lab's controllers run in this process
    run = run_playbook(
        kube_play(
            task("slow agent", snapshot="golden-linux", **slow, **LINUX, **common),
            task(
                "never connects", snapshot="golden-zeros", **{**slow, "agent_timeout": 3}, **WINDOWS, **common
            ),
        ),
        env=lab.env(),
    )
    passed = run["slow agent"]
    assert passed["verdict"] == "passed", passed
    assert passed["rounds"] >= 3, passed["lines"]
    waiting = [line for line in passed["lines"] if "phase agent" in line]
    assert len(waiting) >= 2, passed["lines"]
    assert all("waiting for the guest agent to connect (AgentConnected)" in line for line in waiting)
    assert all(("in %s:" % project) in line and "s elapsed" in line for line in waiting)
    assert waiting[0] in run.log  # printed as it came, not only returned
    seconds = [int(line.rsplit("; ", 1)[1].split("s elapsed")[0]) for line in waiting]
    assert seconds == sorted(seconds) and seconds[-1] > seconds[0]
    assert "resume" not in passed and passed["done"] is True

    silent = run["never connects"]
    assert silent["verdict"] == "no_boot", silent
    assert "still pending: the guest agent to connect (AgentConnected)" in silent["msg"]
    assert re.search(r"timed out after \d+s, still pending", silent["msg"]), silent["msg"]
    assert silent["kept"] is False and leftovers(lab, project) == []


def test_without_expand_disks_the_gate_refuses_before_writing_and_a_clone_cannot_pass(
    lab, goldens, kube_client
):
    """Link 1 off (the KubeVirt CR without ExpandDisks, before v1.9.0): refused before anything is
    written; with the check waived, the guest still sees the golden's disk and the verdict says so."""
    from kubernetes import client

    project = project_namespace(client.CoreV1Api(kube_client))
    kv_rt = lab.store.resource("kubevirt.io", "v1", "kubevirts")
    kubevirt = lab.store.get(kv_rt, "kubevirt", "kubevirt")
    features = kubevirt["spec"]["configuration"]["developerConfiguration"]
    original = list(features["featureGates"])
    features["featureGates"] = [g for g in original if g != "ExpandDisks"]
    lab.store.update(kv_rt, kubevirt)
    common = {"snapshot": "golden-windows", "snapshot_namespace": goldens, "project_namespace": project}
    try:
        lab.clear_audit()
        refused = run_playbook(
            kube_play(
                task("predict", check=True, **WINDOWS, **FAST, **common),
                task("off", **WINDOWS, **FAST, **common),
                task("bad grow_by", grow_by="-1Gi", require_expand_disks=False, **WINDOWS, **FAST, **common),
            ),
            env=lab.env(),
        )
        writes = [r for r in lab.mutating_requests() if project in (r.get("namespace"), r.get("name") or "")]
        waived = run_playbook(
            kube_play(task("waived", require_expand_disks=False, **WINDOWS, **FAST, **common)), env=lab.env()
        )
    finally:
        kubevirt = lab.store.get(kv_rt, "kubevirt", "kubevirt")
        kubevirt["spec"]["configuration"]["developerConfiguration"]["featureGates"] = original
        lab.store.update(kv_rt, kubevirt)
    for name in ("predict", "off"):
        result = refused[name]
        assert refused.entry(name)["status"] == "ignored" and result["verdict"] == "inconclusive", result
        assert (
            "KubeVirt kubevirt/kubevirt (v1.8.2) does not have the ExpandDisks feature gate" in result["msg"]
        )
        assert "spec.configuration.developerConfiguration.featureGates" in result["msg"]
        assert result["created"] == [] and result["phases"] == []
    assert "'-1Gi' is not a Kubernetes quantity" in refused["bad grow_by"]["msg"], refused["bad grow_by"]
    assert writes == []
    result = waived["waived"]
    assert waived.entry("waived")["status"] == "ignored" and result["verdict"] == "disk_not_grown", result
    assert "expand_disks" not in result
    assert "on a 2.0 GiB clone of a 1.0 GiB golden" in result["msg"] and "ExpandDisks" in result["msg"]
    assert leftovers(lab, project) == []
