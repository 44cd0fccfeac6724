"""dbinstance_repave with strategy direct in the lab: Harvester VMs whose OS disk the module swaps itself.

Real disks all the way: the images are uploaded to the lab's Harvester, their `lh-...` classes provision
the OS disks from the image files, and the lab's KubeVirt boots them (or not) from their bytes. Covered:
the swap (check mode, real, idempotent), a run killed after each step and resumed, a new disk that does
not boot (stopped on it, old disk kept, rollback advice followed), teardown with and without purge_data
(and "someone else's old data back" not happening), a stop that hangs and a swap that conflicts.
"""

from __future__ import annotations

import contextlib
import functools
import json
import pathlib
import time
import uuid

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args

from tests.integration.support import SETTLE_SECONDS, disks
from tests.integration.support.runner import play as runner_play
from tests.integration.support.runner import run_playbook

pytestmark = pytest.mark.lab_only

MODULE = "goldenimage.pipeline.dbinstance_repave"
KV = ("kubevirt.io", "v1")
H = ("harvesterhci.io", "v1beta1")
TEMPLATES = "harvesterhci.io/volumeClaimTemplates"
IMAGE_ID = "harvesterhci.io/imageId"
REVISION = "goldenimage.pipeline/image-revision"
TARGET = "goldenimage.pipeline/repave-target"
PREVIOUS = "goldenimage.pipeline/previous-os-disks"
AGENT_DELAY = "LAB_KUBEVIRT_AGENT_DELAY_SECONDS"
OLD, NEW, BROKEN = "v20260615", "v20260815", "v20260901"
FAST = {"wait_timeout": 60, "wait_sleep": 0.3}


@pytest.fixture(autouse=True)
def quick_agent(monkeypatch):
    monkeypatch.setenv(AGENT_DELAY, "0.2")  # the lab's controllers run in this process


@pytest.fixture(scope="module")
def catalog(lab, kube_client, tmp_path_factory):
    """Three imported images (two bootable Linux builds, one disk of zeros) and a catalog file naming them."""
    from kubernetes import client

    folder = tmp_path_factory.mktemp("direct-disks")
    linux = disks.qcow2(
        disks.linux_disk(folder / "linux.raw", disks.ext4_tree(folder / "tree"))["path"], folder / "l.qcow2"
    )
    zeros = folder / "zeros.qcow2"
    disks.run("qemu-img", "create", "-q", "-f", "qcow2", zeros, "64M")
    namespace = "images-" + uuid.uuid4().hex[:8]
    client.CoreV1Api(kube_client).create_namespace({"metadata": {"name": namespace}})
    doc = {"version": 1, "default_stream": "22.04", "streams": {"22.04": {"tip": NEW, "validated": True}}}
    doc["images"] = {}
    for revision, data in ((OLD, linux), (NEW, linux), (BROKEN, zeros)):
        name = "ubuntu-2204-postgres-" + revision
        storage_class = upload(lab, kube_client, namespace, name, data)
        doc["images"][revision] = {
            "os_version": "22.04",
            "pg_versions": ["15", "16", "17"],
            "build_date": "%s-%s-%s" % (revision[1:5], revision[5:7], revision[7:9]),
            "source": "upload:%s.qcow2" % name,
            "image": {"namespace": namespace, "name": name},
            "storage_class": storage_class,
            "imported": True,
        }
    path = folder / "catalog.yaml"
    path.write_text(yaml.safe_dump(doc))
    return {"path": str(path), "doc": doc}


def upload(lab, kube_client, namespace, name, data: pathlib.Path) -> str:
    import urllib3
    from kubernetes import client

    custom = client.CustomObjectsApi(kube_client)
    body = {
        "apiVersion": "harvesterhci.io/v1beta1",
        "kind": "VirtualMachineImage",
        "metadata": {"name": name},
        "spec": {"displayName": name, "sourceType": "upload"},
    }
    custom.create_namespaced_custom_object(*H, namespace, "virtualmachineimages", body)
    path = f"/v1/harvester/harvesterhci.io.virtualmachineimages/{namespace}/{name}?action=upload"
    headers = {"Authorization": f"Bearer {lab.admin_token}"}
    end = time.monotonic() + 20
    while True:
        # The lab's serving certificate is self-signed: trust the CA its kubeconfig carries.
        http = urllib3.PoolManager(ca_certs=kube_client.configuration.ssl_ca_cert)
        answer = http.request("POST", lab.harvester_url + path, body=data.read_bytes(), headers=headers)
        if answer.status == 200 or time.monotonic() > end:
            break
        time.sleep(0.2)  # the controller initializes the image first
    assert answer.status == 200, answer.data
    image = custom.get_namespaced_custom_object(*H, namespace, "virtualmachineimages", name)
    return image["status"]["storageClassName"]


# ------------------------------------------------------------------------------ instances


def vm_body(name: str, catalog: dict, revision: str = OLD) -> dict:
    entry = catalog["doc"]["images"][revision]
    image = entry["image"]
    templates = [
        {
            "metadata": {
                "name": f"{name}-os-{revision}",
                "annotations": {IMAGE_ID: f"{image['namespace']}/{image['name']}"},
            },
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "resources": {"requests": {"storage": "64Mi"}},
                "volumeMode": "Block",
                "storageClassName": entry["storage_class"],
            },
        },
        {
            "metadata": {"name": f"{name}-pgdata"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "16Mi"}},
                "volumeMode": "Filesystem",
                "storageClassName": "lab-fs",
            },
        },
    ]
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {
            "name": name,
            "labels": {"app": "pg"},
            "annotations": {
                TEMPLATES: json.dumps(templates),
                REVISION: revision,
                "goldenimage.pipeline/engine-version": "16",
                "goldenimage.pipeline/os-version": "22.04",
            },
        },
        "spec": {
            "runStrategy": "Always",
            "template": {
                "metadata": {"labels": {"app": "pg"}},
                "spec": {
                    "domain": {
                        "devices": {
                            "disks": [
                                {"name": "rootdisk", "bootOrder": 1, "disk": {"bus": "virtio"}},
                                {"name": "pgdata", "disk": {"bus": "virtio"}},
                            ]
                        },
                        "memory": {"guest": "1Gi"},
                    },
                    "volumes": [
                        {"name": "rootdisk", "persistentVolumeClaim": {"claimName": f"{name}-os-{revision}"}},
                        {"name": "pgdata", "persistentVolumeClaim": {"claimName": f"{name}-pgdata"}},
                    ],
                },
            },
        },
    }


def custom_api(kube_client):
    from kubernetes import client

    return client.CustomObjectsApi(kube_client)


def get(lab, plural, namespace, name, group=KV):
    from tests.lab.objects import ApiError

    rt = lab.store.resource(group[0], group[1], plural)
    try:  # one read: an object can go between an exists() and a get()
        return lab.store.get(rt, namespace, name)
    except ApiError as exc:
        if exc.code != 404:
            raise
        return None


def pvc(lab, namespace, name):
    return get(lab, "persistentvolumeclaims", namespace, name, ("", "v1"))


def wait(what, check, timeout=SETTLE_SECONDS, detail=None):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}" + (f": {detail()}" if detail else ""))


def agent_up(vmi) -> bool:
    conds = {c["type"]: c["status"] for c in ((vmi or {}).get("status") or {}).get("conditions") or []}
    return conds.get("AgentConnected") == "True"


def create_instance(lab, kube_client, namespace, name, catalog, revision=OLD) -> dict:
    """A running VM on `revision` with a marker file in its pgdata; returns the pgdata claim."""
    from tests.lab.controllers.volumes import volume_path

    custom_api(kube_client).create_namespaced_custom_object(
        *KV, namespace, "virtualmachines", vm_body(name, catalog, revision)
    )
    vmi = functools.partial(get, lab, "virtualmachineinstances", namespace, name)
    # The lab's boot verdict is in the VMI's annotations: a failure says why the guest did not boot.
    wait(
        f"{name} to boot",
        lambda: agent_up(vmi()),
        detail=lambda: {k: (vmi() or {}).get(k) for k in ("status", "metadata")},
    )
    data = wait(f"{name}-pgdata bound", lambda: bound(pvc(lab, namespace, f"{name}-pgdata")))
    (volume_path(lab.controller_manager.lab, data) / "PG_VERSION").write_text(f"16 {name}\n")
    return data


def bound(claim):
    return claim if claim and (claim.get("status") or {}).get("phase") == "Bound" else None


def marker(lab, claim) -> str | None:
    from tests.lab.controllers.volumes import volume_path

    found = volume_path(lab.controller_manager.lab, claim) / "PG_VERSION"
    return found.read_text() if found.exists() else None


def assert_repaved(lab, namespace, name, data, revision=NEW, old=OLD):
    vm = get(lab, "virtualmachines", namespace, name)
    notes = vm["metadata"]["annotations"]
    volumes = {
        v["name"]: v["persistentVolumeClaim"]["claimName"] for v in vm["spec"]["template"]["spec"]["volumes"]
    }
    assert volumes == {"rootdisk": f"{name}-os-{revision}", "pgdata": f"{name}-pgdata"}
    assert notes[REVISION] == revision and TARGET not in notes and PREVIOUS not in notes
    declared = [t["metadata"]["name"] for t in json.loads(notes[TEMPLATES])]
    assert sorted(declared) == sorted([f"{name}-os-{revision}", f"{name}-pgdata"])
    assert pvc(lab, namespace, f"{name}-os-{old}") is None
    assert agent_up(get(lab, "virtualmachineinstances", namespace, name))
    kept = pvc(lab, namespace, f"{name}-pgdata")
    assert kept["metadata"]["uid"] == data["metadata"]["uid"] and marker(lab, kept) == f"16 {name}\n"


def task(name, check=False, ignore_errors=False, **args):
    entry = {"name": name, MODULE: args}
    if check:
        entry["check_mode"] = True
    if ignore_errors:
        entry["ignore_errors"] = True
    return entry


play = functools.partial(runner_play, module_defaults={MODULE: {"strategy": "direct"}})


def failed(run, name):
    """The result of a task that failed (ignored or not), or an assertion showing the run."""
    entry = run.entry(name)
    assert entry["status"] in ("failed", "ignored"), run.log
    return entry["result"]


# -------------------------------------------------------------------- driver in-process


@contextlib.contextmanager
def driver(lab, namespace, **params):
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeModule
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.repave._repave_direct import (
        DirectDriver,
    )

    spec = {
        "namespace": {"type": "str"},
        "os_volume": {"type": "str", "default": "rootdisk"},
        "data_volume": {"type": "str", "default": "pgdata"},
        "wait_timeout": {"type": "int", "default": 30},
        "wait_sleep": {"type": "float", "default": 0.2},
    }
    with patch_module_args({"kubeconfig": str(lab.kubeconfig), "namespace": namespace, **params}):
        module = KubeModule(argument_spec=spec, supports_check_mode=True)
        yield DirectDriver(module, module.client, module.params)


def target_of(catalog, revision):
    entry = catalog["doc"]["images"][revision]
    return {
        "revision": revision,
        "os_stream": "22.04",
        "image": entry["image"],
        "storage_class": entry["storage_class"],
    }


def steps_by_hand(lab, namespace, name, catalog, writes) -> list[dict]:
    """Advance until `writes` steps changed something, as a run killed right after them would leave it."""
    done = []
    with driver(lab, namespace) as direct:
        inst = direct.list([name], None)[0]
        end = time.monotonic() + 30
        while len([s for s in done if s["changed"]]) < writes:
            assert time.monotonic() < end, done
            state = direct.advance(inst, target_of(catalog, NEW))
            assert state["state"] == "working", state
            done.append(state)
            if not state["changed"]:
                time.sleep(0.1)
    return done


# ------------------------------------------------------------------------------------ tests


@pytest.mark.suite("idempotence")
def test_swap_check_mode_real_and_idempotent(lab, kube_client, kube_namespace, catalog):
    data = create_instance(lab, kube_client, kube_namespace, "db", catalog)
    common = {"namespace": kube_namespace, "names": ["db"], "catalog": {"path": catalog["path"]}, **FAST}
    lab.clear_audit()
    check = run_playbook(
        play(
            task("report", **common), task("plan", check=True, state="repaved", opt_in="immediate", **common)
        ),
        env=lab.env(),
        diff=True,
    )
    assert check.ok, check.log
    assert [r for r in lab.mutating_requests() if r["namespace"] == kube_namespace] == []
    entry = check["report"]["instances"][0]
    assert (entry["revision"], entry["target"], entry["verdict"], entry["action"]) == (
        OLD,
        NEW,
        "OSUpdateAvailable",
        "os-repave",
    )
    assert (entry["engine_version"], entry["os_stream"], entry["phase"]) == ("16", "22.04", "Available")
    assert check["plan"]["changed"] is True and check["plan"]["batches"] == [["db"]]
    assert check["plan"]["diff"][0]["after"][REVISION] == NEW

    run = run_playbook(
        play(task("swap", state="repaved", opt_in="immediate", **common)), env=lab.env(), diff=True
    )
    assert run.ok, run.log
    # --diff shows the OS disk's claim swapped and the old claim deleted, not only the annotation.
    diff = run["swap"]["diff"][0]
    swapped = [k for k in diff["after"] if k.startswith("volume ") and diff["before"][k] != diff["after"][k]]
    assert len(swapped) == 1, diff
    old_claim = diff["before"][swapped[0]]
    assert "claim %s" % old_claim in diff["before"] and "claim %s" % old_claim not in diff["after"], diff
    assert diff["after"][REVISION] == NEW and diff["before"]["runStrategy"] == diff["after"]["runStrategy"]
    # The same repave again, alone, so the audit log holds only its requests.
    lab.clear_audit()
    second = run_playbook(
        play(task("again", state="repaved", opt_in="immediate", **common), task("after", **common)),
        env=lab.env(),
    )
    assert second.ok, second.log
    assert lab.mutating_requests() == []
    assert run["swap"]["changed"] is True and run["swap"]["instances"][0]["result"] == "repaved"
    steps = {p["step"] for p in run["swap"]["progress"]}
    assert {"StoppingVM", "SwappingOSDisk", "StartingVM"} <= steps, run["swap"]["progress"]
    assert second["again"]["changed"] is False and second["again"]["instances"][0]["result"] == "current"
    assert second["after"]["instances"][0]["verdict"] == "Current"
    assert_repaved(lab, kube_namespace, "db", data)


def test_a_run_killed_after_each_step_resumes(lab, kube_client, kube_namespace, catalog):
    names = ["k1", "k2", "k3", "k4", "k5"]
    data = {n: create_instance(lab, kube_client, kube_namespace, n, catalog) for n in names}
    seen = {}
    for writes, name in enumerate(names, start=1):
        seen[name] = steps_by_hand(lab, kube_namespace, name, catalog, writes)
    # What each kill left: stopped; swapped; started on the new disk; old disk undeclared; old disk deleted.
    vm = get(lab, "virtualmachines", kube_namespace, "k1")
    assert vm["spec"]["runStrategy"] == "Halted" and vm["metadata"]["annotations"][TARGET] == NEW
    vm = get(lab, "virtualmachines", kube_namespace, "k2")
    assert (
        vm["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == f"k2-os-{NEW}"
    )
    assert vm["metadata"]["annotations"][PREVIOUS] == f"k2-os-{OLD}"
    assert get(lab, "virtualmachines", kube_namespace, "k3")["spec"]["runStrategy"] == "Always"
    assert pvc(lab, kube_namespace, f"k3-os-{OLD}") is not None
    notes = get(lab, "virtualmachines", kube_namespace, "k4")["metadata"]["annotations"]
    assert f"k4-os-{OLD}" not in notes[TEMPLATES] and notes[PREVIOUS] == f"k4-os-{OLD}"
    assert pvc(lab, kube_namespace, f"k4-os-{OLD}") is not None
    wait("k5's old disk to go", lambda: pvc(lab, kube_namespace, f"k5-os-{OLD}") is None)
    assert get(lab, "virtualmachines", kube_namespace, "k5")["metadata"]["annotations"][REVISION] == OLD
    assert [s["step"] for s in seen["k5"] if s["changed"]] == [
        "StoppingVM",
        "SwappingOSDisk",
        "StartingVM",
        "DeletingOldDisk",
        "DeletingOldDisk",
    ]

    common = {"namespace": kube_namespace, "names": names, "catalog": {"path": catalog["path"]}, **FAST}
    run = run_playbook(
        play(
            task("report", **common),
            task("resume", state="repaved", opt_in="immediate", max_unavailable=1, **common),
        ),
        env=lab.env(),
    )
    assert run.ok, run.log
    report = {e["name"]: e for e in run["report"]["instances"]}
    assert {e["phase"] for e in report.values()} == {"Repaving"}
    assert all(e["revision"] is None for e in report.values())  # in flight: nothing applied
    results = {e["name"]: e["result"] for e in run["resume"]["instances"]}
    assert results == dict.fromkeys(names, "repaved")
    for name in names:
        assert_repaved(lab, kube_namespace, name, data[name])


@pytest.mark.slow  # minutes of waiting by design: the slow tier
def test_a_new_disk_that_does_not_boot_stops_on_it_and_rolls_back(lab, kube_client, kube_namespace, catalog):
    data = create_instance(lab, kube_client, kube_namespace, "nb", catalog, NEW)
    original = pvc(lab, kube_namespace, f"nb-os-{NEW}")
    common = {"namespace": kube_namespace, "names": ["nb"], "catalog": {"path": catalog["path"]}}
    run = run_playbook(
        play(
            task(
                "broken",
                state="repaved",
                opt_in="immediate",
                revision=BROKEN,
                wait_timeout=45,
                wait_sleep=0.3,
                **common,
            )
        ),
        env=lab.env(),
    )
    result = failed(run, "broken")
    assert f"waiting for the guest agent on nb-os-{BROKEN}" in result["msg"], result["msg"]
    assert "VMI Running; Ready=True" in result["msg"], result["msg"]  # QEMU runs; no agent ever reports
    advice = (
        f"the VM runs on nb-os-{BROKEN}; nb-os-{NEW} is kept; "
        f"roll back with state=repaved strategy=direct revision={NEW}"
    )
    assert advice in result["msg"]
    vm = get(lab, "virtualmachines", kube_namespace, "nb")
    assert (
        vm["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]
        == f"nb-os-{BROKEN}"
    )
    assert pvc(lab, kube_namespace, f"nb-os-{NEW}")["metadata"]["uid"] == original["metadata"]["uid"]

    back = run_playbook(
        play(
            task("rollback", state="repaved", opt_in="immediate", revision=NEW, **common, **FAST),
            task("report", **common),
        ),
        env=lab.env(),
    )
    assert back.ok, back.log
    assert back["rollback"]["instances"][0]["result"] == "repaved"
    assert back["report"]["instances"][0]["verdict"] == "Current"
    assert_repaved(lab, kube_namespace, "nb", data, NEW, BROKEN)
    # The rollback went back onto the very disk that was kept.
    assert pvc(lab, kube_namespace, f"nb-os-{NEW}")["metadata"]["uid"] == original["metadata"]["uid"]


@pytest.mark.suite("data-loss")
def test_teardown_refuses_data_without_purge_and_leaves_nothing_with_it(
    lab, kube_client, kube_namespace, catalog
):
    first = create_instance(lab, kube_client, kube_namespace, "td", catalog)
    common = {"namespace": kube_namespace, "names": ["td"], "state": "absent", **FAST}
    lab.clear_audit()
    run = run_playbook(
        play(
            task("refused", ignore_errors=True, **common),
            task("check", check=True, purge_data=True, **common),
        ),
        env=lab.env(),
    )
    refused = failed(run, "refused")
    assert "td-pgdata" in refused["msg"] and "purge_data" in refused["msg"], refused["msg"]
    assert "nothing was deleted" in refused["msg"]
    assert run["check"]["changed"] is True and run["check"]["instances"][0]["pvcs"] == [
        f"td-os-{OLD}",
        "td-pgdata",
    ]
    assert [r for r in lab.mutating_requests() if r["namespace"] == kube_namespace] == []
    assert get(lab, "virtualmachines", kube_namespace, "td") and pvc(lab, kube_namespace, "td-pgdata")

    run = run_playbook(
        play(task("purge", purge_data=True, **common), task("again", purge_data=True, **common)),
        env=lab.env(),
    )
    assert run.ok, run.log
    assert run["purge"]["changed"] is True and run["again"]["changed"] is False
    assert get(lab, "virtualmachines", kube_namespace, "td") is None
    assert get(lab, "virtualmachineinstances", kube_namespace, "td") is None
    assert pvc(lab, kube_namespace, "td-pgdata") is None and pvc(lab, kube_namespace, f"td-os-{OLD}") is None

    # The same name again gets a fresh, empty pgdata: nobody's old data back.
    custom_api(kube_client).create_namespaced_custom_object(
        *KV, kube_namespace, "virtualmachines", vm_body("td", catalog)
    )
    wait("td to boot again", lambda: agent_up(get(lab, "virtualmachineinstances", kube_namespace, "td")))
    again = wait("td-pgdata", lambda: bound(pvc(lab, kube_namespace, "td-pgdata")))
    assert again["metadata"]["uid"] != first["metadata"]["uid"] and marker(lab, again) is None


@pytest.mark.suite("data-loss")
def test_teardown_never_deletes_a_claim_another_vm_declares_or_mounts(
    lab, kube_client, kube_namespace, catalog
):
    """A halted VM that mounts another VM's pgdata (to inspect it): tearing it down with purge_data would
    delete that pgdata, and Harvester would make it again, empty, for its owner. Refused, nothing deleted."""
    data = create_instance(lab, kube_client, kube_namespace, "scratch", catalog)
    body = vm_body("inspect", catalog)
    notes = body["metadata"]["annotations"]
    templates = [t for t in json.loads(notes[TEMPLATES]) if t["metadata"]["name"] != "inspect-pgdata"]
    templates.append({"metadata": {"name": "scratch-pgdata"}, "spec": {"resources": {"requests": {}}}})
    notes[TEMPLATES] = json.dumps(templates)
    body["spec"]["runStrategy"] = "Halted"
    for volume in body["spec"]["template"]["spec"]["volumes"]:
        if volume["name"] == "pgdata":
            volume["persistentVolumeClaim"]["claimName"] = "scratch-pgdata"
    custom_api(kube_client).create_namespaced_custom_object(*KV, kube_namespace, "virtualmachines", body)
    common = {
        "namespace": kube_namespace,
        "names": ["inspect"],
        "state": "absent",
        "purge_data": True,
        **FAST,
    }
    lab.clear_audit()
    run = run_playbook(
        play(
            task("check", check=True, ignore_errors=True, **common),
            task("purge", ignore_errors=True, **common),
        ),
        env=lab.env(),
    )
    for name in ("check", "purge"):
        refused = failed(run, name)
        assert "scratch-pgdata" in refused["msg"] and "nothing was deleted" in refused["msg"], refused["msg"]
        assert "VirtualMachine %s/scratch" % kube_namespace in refused["msg"], refused["msg"]
    assert [r for r in lab.mutating_requests() if r["verb"] == "delete"] == []
    kept = pvc(lab, kube_namespace, "scratch-pgdata")
    assert kept["metadata"]["uid"] == data["metadata"]["uid"] and marker(lab, kept) == "16 scratch\n"


def test_teardown_finds_the_disks_a_deleted_vm_left(lab, kube_client, kube_namespace, catalog):
    create_instance(lab, kube_client, kube_namespace, "gone", catalog)
    custom_api(kube_client).delete_namespaced_custom_object(*KV, kube_namespace, "virtualmachines", "gone")
    wait("the VM to go", lambda: get(lab, "virtualmachines", kube_namespace, "gone") is None)
    assert pvc(lab, kube_namespace, "gone-pgdata") is not None  # Harvester does not cascade
    # An OS disk of a same-day rebuild (revision -r02) the VM had been repaved to before, left behind.
    from kubernetes import client

    rebuilt = f"gone-os-{NEW}-r02"
    body = {
        "metadata": {"name": rebuilt},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}},
    }
    client.CoreV1Api(kube_client).create_namespaced_persistent_volume_claim(kube_namespace, body)
    common = {"namespace": kube_namespace, "names": ["gone"], "state": "absent", **FAST}
    run = run_playbook(
        play(task("refused", ignore_errors=True, **common), task("purge", purge_data=True, **common)),
        env=lab.env(),
    )
    assert "gone-pgdata" in failed(run, "refused")["msg"]
    assert run["purge"]["changed"] is True, run.log
    assert run["purge"]["instances"][0]["pvcs"] == [f"gone-os-{OLD}", rebuilt, "gone-pgdata"]
    assert (
        pvc(lab, kube_namespace, "gone-pgdata") is None and pvc(lab, kube_namespace, f"gone-os-{OLD}") is None
    )
    assert pvc(lab, kube_namespace, rebuilt) is None


@pytest.mark.slow  # minutes of waiting by design: the slow tier
def test_a_stop_that_hangs_and_a_swap_that_conflicts_time_out_naming_the_step(
    lab, kube_client, kube_namespace, catalog
):
    data = {n: create_instance(lab, kube_client, kube_namespace, n, catalog) for n in ("hang", "clash")}
    faults = {
        f"VirtualMachine/{kube_namespace}/hang": "stop-hangs",
        f"VirtualMachine/{kube_namespace}/clash": "swap-conflict",
    }
    common = {"namespace": kube_namespace, "names": ["hang", "clash"], "catalog": {"path": catalog["path"]}}
    lab.faults.update({"objects": faults})
    try:
        run = run_playbook(
            play(
                task(
                    "stuck",
                    state="repaved",
                    opt_in="immediate",
                    max_unavailable=2,
                    wait_timeout=5,
                    wait_sleep=0.3,
                    **common,
                )
            ),
            env=lab.env(),
        )
    finally:
        lab.faults.update({"objects": {}})
    msg = failed(run, "stuck")["msg"]
    assert "hang (target %s): phase waiting for the VM to stop" % NEW in msg, msg
    assert "stopping hangs" in msg and "the VM keeps its OS disk hang-os-%s" % OLD in msg
    assert "clash (target %s): phase swapping the OS disk to clash-os-%s" % (NEW, NEW) in msg
    assert "409" in msg or "Conflict" in msg or "swap-conflict" in msg
    vm = get(lab, "virtualmachines", kube_namespace, "clash")
    assert (
        vm["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]
        == f"clash-os-{OLD}"
    )

    run = run_playbook(
        play(task("resumed", state="repaved", opt_in="immediate", max_unavailable=2, **common, **FAST)),
        env=lab.env(),
    )
    assert run.ok, run.log
    for name in ("hang", "clash"):
        assert_repaved(lab, kube_namespace, name, data[name])


def test_driver_lists_with_three_lists_records_opt_in_and_refuses_a_leftover_disk(
    lab, kube_client, kube_namespace, catalog
):
    from kubernetes import client

    for name in ("a", "b", "c"):
        body = vm_body(name, catalog)
        body["spec"]["runStrategy"] = "Halted"
        custom_api(kube_client).create_namespaced_custom_object(*KV, kube_namespace, "virtualmachines", body)
    # A disk of the target's name that the VM does not declare: an earlier VM's, never reattached.
    leftover = {
        "metadata": {"name": f"c-os-{NEW}"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "16Mi"}}},
    }
    client.CoreV1Api(kube_client).create_namespaced_persistent_volume_claim(kube_namespace, leftover)
    with driver(lab, kube_namespace) as direct:
        lab.clear_audit()
        found = direct.list(None, "app=pg")
        calls = [(r["verb"], r["resource"]) for r in lab.audit() if r["namespace"] == kube_namespace]
        assert sorted(calls) == [
            ("list", "persistentvolumeclaims"),
            ("list", "virtualmachineinstances"),
            ("list", "virtualmachines"),
        ]
        assert [i["name"] for i in found] == ["a", "b", "c"]
        assert {(i["phase"], i["revision"], i["available"]) for i in found} == {("Stopped", OLD, False)}
        assert direct.set_opt_in(found[0], "next-maintenance") is True
        assert direct.set_opt_in(found[0], "next-maintenance") is False
        again = direct.list(["a"], None)[0]
        assert again["opt_in"] == "next-maintenance"
        assert direct.set_opt_in(again, None) is True
        assert direct.list(["a"], None)[0]["opt_in"] is None

        target = target_of(catalog, NEW)
        lab.clear_audit()
        refused = direct.advance(found[2], target)
        assert refused["state"] == "failed" and "does not declare it" in refused["message"], refused
        # Refused before the stop: nothing was written, the VM was not touched.
        assert "nothing was stopped or swapped" in refused["message"] and refused["changed"] is False
        assert [r for r in lab.mutating_requests() if r["namespace"] == kube_namespace] == []
    vm = get(lab, "virtualmachines", kube_namespace, "c")
    assert vm["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == f"c-os-{OLD}"


# ----------------------------------------------------------------------------------- data loss
#
# Every destructive request the direct paths can send, with the volume options swapped or mistyped:
# the data claims are counted out of the lab's audit log (a delete request, whatever its answer, counts).


def deletes(lab, namespace, names=None):
    """Audit records of DELETE requests on claims of `namespace` (only `names` when given)."""
    return [
        r
        for r in lab.audit()
        if r["verb"] in ("delete", "deletecollection")
        and r["resource"] == "persistentvolumeclaims"
        and r["namespace"] == namespace
        and (names is None or r["name"] in names)
    ]


def writes(lab, namespace):
    return [r for r in lab.mutating_requests() if r["namespace"] == namespace]


def volumes_of(lab, namespace, name):
    vm = get(lab, "virtualmachines", namespace, name)
    return {
        v["name"]: v["persistentVolumeClaim"]["claimName"] for v in vm["spec"]["template"]["spec"]["volumes"]
    }


@pytest.mark.parametrize(
    "options",
    [
        {"os_volume": "pgdata"},  # the seed: a swapped name
        {"os_volume": "pgdata", "data_volume": "rootdisk"},  # both swapped
        {"os_volume": "rootdsk"},  # a typo
        {"data_volume": "pgdta"},  # a typo on the other one
    ],
    ids=["os-volume-pgdata", "both-swapped", "os-volume-typo", "data-volume-typo"],
)
@pytest.mark.suite("data-loss")
def test_teardown_without_purge_never_deletes_data_whatever_the_volume_options(
    lab, kube_client, kube_namespace, catalog, options
):
    data = create_instance(lab, kube_client, kube_namespace, "tv", catalog)
    common = {"namespace": kube_namespace, "names": ["tv"], "state": "absent", **FAST, **options}
    lab.clear_audit()
    run = run_playbook(play(task("teardown", ignore_errors=True, **common)), env=lab.env())
    result = failed(run, "teardown")
    assert "tv-pgdata (data: it carries no harvesterhci.io/imageId" in result["msg"], result["msg"]
    assert "nothing was deleted" in result["msg"] and "purge_data" in result["msg"]
    assert result["data_pvcs"] == ["tv-pgdata"]
    assert result["disk_roles"][f"tv-os-{OLD}"]["role"] == "os"
    assert writes(lab, kube_namespace) == []
    assert deletes(lab, kube_namespace) == []
    kept = pvc(lab, kube_namespace, "tv-pgdata")
    assert kept["metadata"]["uid"] == data["metadata"]["uid"] and marker(lab, kept) == "16 tv\n"
    assert get(lab, "virtualmachines", kube_namespace, "tv") is not None


@pytest.mark.parametrize(
    "options, why",
    [
        ({"os_volume": "pgdata"}, "os_volume pgdata is backed by claim rp-pgdata, which is data"),
        ({"os_volume": "pgdata", "data_volume": "rootdisk"}, "backed by claim rp-pgdata, which is data"),
        ({"os_volume": "rootdsk"}, "has no volume rootdsk backed by a claim"),
    ],
    ids=["os-volume-pgdata", "both-swapped", "os-volume-typo"],
)
@pytest.mark.suite("data-loss")
@pytest.mark.suite("bad-input")
def test_repave_naming_a_data_volume_is_refused_before_the_first_write(
    lab, kube_client, kube_namespace, catalog, options, why
):
    data = create_instance(lab, kube_client, kube_namespace, "rp", catalog)
    common = {"namespace": kube_namespace, "names": ["rp"], "catalog": {"path": catalog["path"]}, **FAST}
    lab.clear_audit()
    run = run_playbook(
        play(
            task("refused", ignore_errors=True, state="repaved", opt_in="immediate", **common, **options),
            task(
                "check",
                check=True,
                ignore_errors=True,
                state="repaved",
                opt_in="immediate",
                **common,
                **options,
            ),
        ),
        env=lab.env(),
    )
    for title in ("refused", "check"):
        result = failed(run, title)
        assert "rp cannot be repaved (NotAnOSDisk)" in result["msg"] and why in result["msg"], result["msg"]
        assert "nothing was written" in result["msg"]
        assert f"set os_volume to the VM's OS volume: rootdisk (claim rp-os-{OLD})" in result["msg"]
        assert result["instances"][0]["result"] == "refused"
    assert writes(lab, kube_namespace) == []
    assert volumes_of(lab, kube_namespace, "rp") == {"rootdisk": f"rp-os-{OLD}", "pgdata": "rp-pgdata"}
    assert agent_up(get(lab, "virtualmachineinstances", kube_namespace, "rp"))
    assert pvc(lab, kube_namespace, "rp-pgdata")["metadata"]["uid"] == data["metadata"]["uid"]


def break_like_the_seed(lab, kube_client, namespace, name, catalog):
    """What a run given `os_volume: pgdata` left: the VM stopped, the new OS disk in the pgdata slot, the
    data claim recorded as the previous OS disk."""
    api = custom_api(kube_client)
    api.patch_namespaced_custom_object(
        *KV,
        namespace,
        "virtualmachines",
        name,
        {"metadata": {"annotations": {TARGET: NEW}}, "spec": {"runStrategy": "Halted"}},
    )
    wait(f"{name} to stop", lambda: get(lab, "virtualmachineinstances", namespace, name) is None)
    vm = get(lab, "virtualmachines", namespace, name)
    entry = catalog["doc"]["images"][NEW]
    templates = json.loads(vm["metadata"]["annotations"][TEMPLATES])
    templates.append(
        {
            "metadata": {
                "name": f"{name}-os-{NEW}",
                "annotations": {IMAGE_ID: "%s/%s" % (entry["image"]["namespace"], entry["image"]["name"])},
            },
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "resources": {"requests": {"storage": "64Mi"}},
                "volumeMode": "Block",
                "storageClassName": entry["storage_class"],
            },
        }
    )
    volumes = [
        {"name": "rootdisk", "persistentVolumeClaim": {"claimName": f"{name}-os-{OLD}"}},
        {"name": "pgdata", "persistentVolumeClaim": {"claimName": f"{name}-os-{NEW}"}},
    ]
    patch = {
        "metadata": {"annotations": {TEMPLATES: json.dumps(templates), PREVIOUS: f"{name}-pgdata"}},
        "spec": {"template": {"spec": {"volumes": volumes}}},
    }
    api.patch_namespaced_custom_object(*KV, namespace, "virtualmachines", name, patch)
    wait(f"{name}-os-{NEW}", lambda: pvc(lab, namespace, f"{name}-os-{NEW}"))


@pytest.mark.suite("data-loss")
def test_a_vm_left_with_its_data_swapped_out_gets_it_back_and_is_repaved(
    lab, kube_client, kube_namespace, catalog
):
    data = create_instance(lab, kube_client, kube_namespace, "sw", catalog)
    break_like_the_seed(lab, kube_client, kube_namespace, "sw", catalog)
    common = {"namespace": kube_namespace, "names": ["sw"], "catalog": {"path": catalog["path"]}, **FAST}
    lab.clear_audit()
    run = run_playbook(
        play(
            task("teardown", ignore_errors=True, state="absent", **common),
            # The same mistake again: the data is put back, then the wrong volume is refused.
            task(
                "again wrong",
                ignore_errors=True,
                state="repaved",
                opt_in="immediate",
                os_volume="pgdata",
                **common,
            ),
            task("repave", state="repaved", opt_in="immediate", **common),
            task("report", **common),
        ),
        env=lab.env(),
    )
    teardown = failed(run, "teardown")
    assert "sw-pgdata (data:" in teardown["msg"] and "nothing was deleted" in teardown["msg"]
    wrong = failed(run, "again wrong")
    assert (
        "os_volume pgdata of VirtualMachine %s/sw is backed by claim sw-pgdata, which is data"
        % kube_namespace
        in (wrong["msg"])
    ), wrong["msg"]
    steps = [p["step"] for p in wrong["progress"]]
    assert steps[0] == "RestoringDataDisk", wrong["progress"]
    assert run["repave"]["instances"][0]["result"] == "repaved", run.log
    assert run["report"]["instances"][0]["verdict"] == "Current"
    assert_repaved(lab, kube_namespace, "sw", data)
    assert deletes(lab, kube_namespace, {"sw-pgdata"}) == []
    # Only the old OS disk was ever deleted.
    assert {r["name"] for r in deletes(lab, kube_namespace)} == {f"sw-os-{OLD}"}


@pytest.mark.suite("data-loss")
def test_a_data_disk_carrying_an_image_annotation_is_still_data(lab, kube_client, kube_namespace, catalog):
    """An imageId alone proves nothing: a data claim with one (copied from an OS template) is on a class
    that is not the image's, and attached as the second disk."""
    from tests.lab.controllers.volumes import volume_path

    body = vm_body("fg", catalog)
    templates = json.loads(body["metadata"]["annotations"][TEMPLATES])
    templates[1]["metadata"]["annotations"] = dict(templates[0]["metadata"]["annotations"])
    body["metadata"]["annotations"][TEMPLATES] = json.dumps(templates)
    custom_api(kube_client).create_namespaced_custom_object(*KV, kube_namespace, "virtualmachines", body)
    wait("fg to boot", lambda: agent_up(get(lab, "virtualmachineinstances", kube_namespace, "fg")))
    data = wait("fg-pgdata bound", lambda: bound(pvc(lab, kube_namespace, "fg-pgdata")))
    (volume_path(lab.controller_manager.lab, data) / "PG_VERSION").write_text("16 fg\n")
    assert IMAGE_ID in data["metadata"]["annotations"]
    common = {"namespace": kube_namespace, "names": ["fg"], **FAST}
    lab.clear_audit()
    run = run_playbook(
        play(
            task("teardown", ignore_errors=True, state="absent", **common),
            task(
                "repave",
                ignore_errors=True,
                state="repaved",
                opt_in="immediate",
                os_volume="pgdata",
                catalog={"path": catalog["path"]},
                **common,
            ),
        ),
        env=lab.env(),
    )
    teardown = failed(run, "teardown")
    assert "fg-pgdata (data: its StorageClass lab-fs is not the class of image" in teardown["msg"], teardown[
        "msg"
    ]
    repave = failed(run, "repave")
    assert "backed by claim fg-pgdata, which is data: its StorageClass lab-fs" in repave["msg"], repave["msg"]
    assert writes(lab, kube_namespace) == [] and deletes(lab, kube_namespace) == []
    assert marker(lab, pvc(lab, kube_namespace, "fg-pgdata")) == "16 fg\n"


def test_a_vm_whose_major_was_never_recorded_is_neither_end_of_life_nor_repaved(
    lab, kube_client, kube_namespace, catalog
):
    """Without goldenimage.pipeline/engine-version the VM runs a major nobody recorded: the report says
    so (not PGVersionEOL, no pg_dump advice) and a repave is refused naming the annotation, before any
    write."""
    data = create_instance(lab, kube_client, kube_namespace, "nv", catalog)
    custom_api(kube_client).patch_namespaced_custom_object(
        *KV,
        kube_namespace,
        "virtualmachines",
        "nv",
        {"metadata": {"annotations": {"goldenimage.pipeline/engine-version": None}}},
    )
    common = {"namespace": kube_namespace, "names": ["nv"], "catalog": {"path": catalog["path"]}, **FAST}
    lab.clear_audit()
    run = run_playbook(
        play(
            task("report", state="report", **common),
            task("refused", ignore_errors=True, state="repaved", opt_in="immediate", **common),
        ),
        env=lab.env(),
    )
    entry = run["report"]["instances"][0]
    assert (entry["verdict"], entry["action"]) == ("EngineVersionUnknown", None), run.log
    assert "annotation goldenimage.pipeline/engine-version is not set" in entry["description"]
    result = failed(run, "refused")
    assert "nv cannot be repaved (EngineVersionUnknown)" in result["msg"], result["msg"]
    assert "set annotation goldenimage.pipeline/engine-version to the major it runs" in result["msg"]
    assert "pg_dump" not in result["msg"]
    assert writes(lab, kube_namespace) == []
    assert pvc(lab, kube_namespace, "nv-pgdata")["metadata"]["uid"] == data["metadata"]["uid"]
