"""console_screenshot against the lab's KubeVirt: each screen the lab draws is classified as such, a
reference screenshot matches, an unchanged screen is counted, a VM that does not run is a clear error,
and check mode reads without writing."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from tests.integration.support import SETTLE_SECONDS
from tests.integration.support.runner import kube_play, run_playbook
from tests.lab.controllers.console import CONSOLE

pytestmark = pytest.mark.lab_only

MODULE = "goldenimage.pipeline.console_screenshot"
KV = ("kubevirt.io", "v1")
SCREENS = {"blank": "blank", "text": "bootprompt", "stop-error": "stop-error", "graphical": "setup"}


def vm_body(name, screen=None, volumes=None):
    annotations = {CONSOLE: screen} if screen else {}
    spec = {"domain": {"devices": {"disks": []}, "resources": {"requests": {"memory": "64Mi"}}}}
    if volumes:
        spec["volumes"] = volumes
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"runStrategy": "Always", "template": {"spec": spec}},
    }


def wait_phase(custom, namespace, name, phase, timeout=SETTLE_SECONDS):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            vmi = custom.get_namespaced_custom_object(*KV, namespace, "virtualmachineinstances", name)
        except Exception:
            vmi = None
        if vmi and (vmi.get("status") or {}).get("phase") == phase:
            return vmi
        time.sleep(0.1)
    raise AssertionError("VMI %s/%s never reached %s" % (namespace, name, phase))


def shot(name, namespace, task_name=None, **args):
    task = {"name": task_name or name, MODULE: dict(name=name, namespace=namespace, **args)}
    task["ignore_errors"] = True
    return task


@pytest.fixture
def vms(kube_client, kube_namespace):
    """One running VM per lab screen, one without graphics, one whose claim is missing (Pending)."""
    from kubernetes import client

    custom = client.CustomObjectsApi(kube_client)
    for screen in SCREENS:
        custom.create_namespaced_custom_object(
            *KV, kube_namespace, "virtualmachines", vm_body("vm-" + screen, screen)
        )
    headless = vm_body("vm-headless")
    headless["spec"]["template"]["spec"]["domain"]["devices"]["autoattachGraphicsDevice"] = False
    custom.create_namespaced_custom_object(*KV, kube_namespace, "virtualmachines", headless)
    missing = [{"name": "rootdisk", "persistentVolumeClaim": {"claimName": "no-such-claim"}}]
    custom.create_namespaced_custom_object(
        *KV, kube_namespace, "virtualmachines", vm_body("vm-pending", volumes=missing)
    )
    for screen in [*SCREENS, "headless"]:
        wait_phase(custom, kube_namespace, "vm-" + screen, "Running")
    wait_phase(custom, kube_namespace, "vm-pending", "Pending")
    return custom


def test_each_lab_screen_is_classified(lab, vms, kube_namespace, tmp_path):
    saved = tmp_path / "shots" / "text.png"
    tasks = [shot("vm-" + screen, kube_namespace) for screen in SCREENS]
    tasks += [
        shot("vm-text", kube_namespace, "save", dest=str(saved)),
        shot("vm-text", kube_namespace, "as reference", references={"prompt": str(saved)}),
        shot("vm-graphical", kube_namespace, "other reference", references={"prompt": str(saved)}),
        shot(
            "vm-graphical",
            kube_namespace,
            "unchanged",
            previous_fingerprint="{{ _first.fingerprint }}",
            previous_time="{{ _first.since - 120 }}",
            stuck_after=60,
        ),
        shot(
            "vm-graphical",
            kube_namespace,
            "changed since",
            previous_fingerprint="{{ _text.fingerprint }}",
            previous_time="{{ _text.since - 120 }}",
            stuck_after=60,
        ),
    ]
    tasks[1]["register"] = "_text"
    tasks[3]["register"] = "_first"  # graphical
    run = run_playbook(kube_play(*tasks), env=lab.env())
    assert run.ok, run.log

    prints = set()
    for screen, expected in SCREENS.items():
        result = run["vm-" + screen]
        assert result["class"] == expected, (screen, result)
        assert result["base_class"] == expected and result["changed"] is False
        assert 0.5 <= result["confidence"] <= 1.0
        assert len(result["fingerprint"]) == 16 and int(result["fingerprint"], 16) >= 0
        assert (result["width"], result["height"]) == (1024, 768)
        assert result["vmi_phase"] == "Running"
        assert "unchanged_for" not in result and "dest" not in result
        prints.add(result["fingerprint"])
    assert len(prints) == len(SCREENS)  # four screens, four fingerprints

    assert run["save"]["dest"] == str(saved) and saved.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    matched = run["as reference"]
    assert matched["class"] == "match:prompt" and matched["base_class"] == "bootprompt"
    assert matched["distance"] == 0 and matched["confidence"] == 1.0 and matched["match"] == "prompt"
    other = run["other reference"]
    assert other["class"] == "setup" and other["match"] == "" and other["references"]["prompt"] > 6

    same = run["unchanged"]
    assert same["unchanged_for"] >= 120 and same["stuck"] is True
    assert abs(same["since"] - (run["vm-graphical"]["since"] - 120)) < 0.01
    moved = run["changed since"]
    assert moved["unchanged_for"] == 0 and moved["stuck"] is False


def test_a_vm_that_does_not_run_is_a_clear_error(lab, vms, kube_namespace, kube_client):
    from kubernetes import client

    # The lab answers like virt-api: 404 without an instance, 400 when it is not running or headless.
    path = "/apis/subresources.kubevirt.io/v1/namespaces/%s/virtualmachineinstances/%s/vnc/screenshot"
    for name, status, text in (
        ("nothing", 404, '"nothing" not found'),
        ("vm-pending", 400, "VMI is not running"),
        ("vm-headless", 400, "No graphics devices are present."),
    ):
        with pytest.raises(client.rest.ApiException) as caught:
            kube_client.call_api(
                path % (kube_namespace, name),
                "GET",
                auth_settings=["BearerToken"],
                _preload_content=False,
            )
        assert caught.value.status == status and text in json.loads(caught.value.body)["message"]

    run = run_playbook(
        kube_play(*[shot(name, kube_namespace) for name in ("nothing", "vm-pending", "vm-headless")]),
        env=lab.env(),
    )
    assert [entry["status"] for entry in run.tasks] == ["ignored"] * 3, run.log
    absent = run["nothing"]
    assert absent["vmi_phase"] == ""
    assert "VirtualMachineInstance %s/nothing: does not exist" % kube_namespace in absent["msg"]
    assert "no console to read" in absent["msg"] and absent["refused"] is True
    pending = run["vm-pending"]
    assert pending["vmi_phase"] == "Pending"
    assert "is Pending, not Running: there is no console to read" in pending["msg"]
    headless = run["vm-headless"]
    assert headless["vmi_phase"] == "Running"
    assert headless["msg"] == (
        "read the console of VirtualMachineInstance %s/vm-headless: No graphics devices are present. "
        "(BadRequest, 400)" % kube_namespace
    )


def test_check_mode_reads_but_writes_nothing(lab, vms, kube_namespace, tmp_path):
    dest = tmp_path / "never.png"
    run = run_playbook(
        kube_play(shot("vm-stop-error", kube_namespace, dest=str(dest)), check_mode=True), env=lab.env()
    )
    assert run.ok, run.log
    result = run["vm-stop-error"]
    assert result["class"] == "stop-error" and result["changed"] is False and "dest" not in result
    assert not dest.exists()


def test_screen_changes_are_seen_and_rbac_applies(lab, vms, kube_namespace, tmp_path):
    vms.patch_namespaced_custom_object(
        *KV,
        kube_namespace,
        "virtualmachines",
        "vm-graphical",
        {"metadata": {"annotations": {CONSOLE: "blank"}}},
    )
    # Allowed to read instances, not their screenshots.
    reader = lab.add_token(
        "reader-" + uuid.uuid4().hex[:6],
        [{"verbs": ["get", "list"], "groups": ["kubevirt.io"], "resources": ["virtualmachineinstances"]}],
    )
    denied = shot("vm-text", kube_namespace, "denied")
    denied[MODULE]["kubeconfig"] = str(lab.write_kubeconfig(tmp_path / "reader.kubeconfig", reader, "reader"))
    run = run_playbook(kube_play(shot("vm-graphical", kube_namespace), denied), env=lab.env())
    assert run["vm-graphical"]["class"] == "blank", run.log
    assert run.entry("denied")["status"] == "ignored", run.log
    result = run["denied"]
    assert result["vmi_phase"] == "Running"
    assert result["msg"].startswith("read the console of VirtualMachineInstance %s/vm-text:" % kube_namespace)
    assert "Forbidden" in result["msg"] and "403" in result["msg"]


def test_the_screenshot_rides_out_server_errors_and_lost_connections(lab, vms, kube_namespace, tmp_path):
    dest = tmp_path / "shot.png"
    lab.faults.update({"error_rate": 0.5, "drop_rate": 0.2, "seed": 7})
    try:
        run = run_playbook(
            kube_play(shot("vm-text", kube_namespace, dest=str(dest))), env=lab.env(faults=True)
        )
        injected = lab.faults.to_dict()["injected"]
    finally:
        lab.faults.reset()
    assert run.ok, run.log
    assert run["vm-text"]["class"] == "bootprompt"
    assert dest.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert injected["error"] + injected["drop"] >= 1
    assert [p.name for p in tmp_path.iterdir()] == ["shot.png"]  # no partial file left behind


def test_bad_options_are_refused_before_any_request(lab, kube_namespace):
    lab.clear_audit()
    run = run_playbook(
        kube_play(
            shot("vm-text", kube_namespace, "zero", timeout=0),
            shot("vm-text", kube_namespace, "neg", match_distance=-1),
        ),
        env=lab.env(),
    )
    assert run["zero"]["msg"].startswith("option timeout: 0 is not a duration") and run["zero"]["refused"]
    assert run["neg"]["msg"].startswith("option match_distance: -1 is not a Hamming distance")
    assert [r for r in lab.audit() if r["namespace"] == kube_namespace] == []
