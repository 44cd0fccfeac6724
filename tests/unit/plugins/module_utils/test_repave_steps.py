"""The next step of a direct repave, from one observation of the VM (no cluster: the step is pure)."""

import copy
import json

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.repave import repave, repave_steps

OLD, NEW = "v20260615", "v20260815"
IMAGES = {
    "images/old": {"status": {"storageClassName": "lh-old"}},
    "images/new": {"status": {"storageClassName": "lh-new"}},
}
TARGET = {
    "revision": NEW,
    "os_stream": "22.04",
    "image": {"namespace": "images", "name": "new"},
    "storage_class": "lh-new",
}


def template(name, image=None, storage_class="lab-fs"):
    meta = {"name": name}
    if image:
        meta["annotations"] = {repave.IMAGE_ID: image}
    spec = {"storageClassName": storage_class, "resources": {"requests": {"storage": "64Mi"}}}
    return {"metadata": meta, "spec": spec}


OS_OLD = template("db-os-%s" % OLD, "images/old", "lh-old")
OS_NEW = template("db-os-%s" % NEW, "images/new", "lh-new")
DATA = template("db-pgdata")


def machine(templates=(OS_OLD, DATA), rootdisk="db-os-%s" % OLD, pgdata="db-pgdata"):
    annotations = {repave.TEMPLATES: json.dumps(list(templates)), repave_steps.REVISION: OLD}
    return {
        "metadata": {"name": "db", "namespace": "t", "resourceVersion": "7", "annotations": annotations},
        "spec": {
            "runStrategy": "Always",
            "template": {
                "spec": {
                    "domain": {
                        "devices": {"disks": [{"name": "rootdisk", "bootOrder": 1}, {"name": "pgdata"}]}
                    },
                    "volumes": [
                        {"name": "rootdisk", "persistentVolumeClaim": {"claimName": rootdisk}},
                        {"name": "pgdata", "persistentVolumeClaim": {"claimName": pgdata}},
                    ],
                }
            },
        },
    }


def claims(*templates):
    return {t["metadata"]["name"]: copy.deepcopy(t) for t in templates}


def vmi(disk="db-os-%s" % OLD, agent=True):
    return {
        "metadata": {"name": "db"},
        "spec": {"volumes": [{"name": "rootdisk", "persistentVolumeClaim": {"claimName": disk}}]},
        "status": {"phase": "Running", "conditions": [{"type": "AgentConnected", "status": str(agent)}]},
    }


def observed(vm, running=None, disks=None):
    return {
        "name": "db",
        "namespace": "t",
        "vm": vm,
        "vmi": running,
        "claims": disks if disks is not None else claims(OS_OLD, DATA),
        "images": IMAGES,
    }


def annotate(vm, **notes):
    vm["metadata"]["annotations"].update(notes)
    return vm


def halted(vm):
    vm["spec"]["runStrategy"] = "Halted"
    return annotate(vm, **{repave_steps.TARGET: NEW})


def step(obs, os_volume="rootdisk"):
    return repave_steps.next_step(obs, TARGET, os_volume)


# ------------------------------------------------------------------------------------ the walk


def test_stop_first_with_the_target_recorded():
    found = step(observed(machine(), vmi()))
    assert (found["state"], found["step"]) == ("working", "StoppingVM")
    assert found["write"]["patch"] == {
        "metadata": {"annotations": {repave_steps.TARGET: NEW}},
        "spec": {"runStrategy": "Halted"},
    }


def test_wait_for_the_vmi_to_go_then_swap_onto_a_new_disk_with_the_image_and_class():
    assert step(observed(halted(machine()), vmi()))["phase"] == "waiting for the VM to stop"
    found = step(observed(halted(machine())))
    assert (
        found["step"] == "SwappingOSDisk"
        and found["write"]["conflict"] == "swapping the OS disk to db-os-%s" % NEW
    )
    patch = found["write"]["patch"]
    assert patch["metadata"]["resourceVersion"] == "7"
    assert patch["metadata"]["annotations"][repave.PREVIOUS] == "db-os-%s" % OLD
    declared = {
        t["metadata"]["name"]: t for t in json.loads(patch["metadata"]["annotations"][repave.TEMPLATES])
    }
    new = declared["db-os-%s" % NEW]
    assert new["metadata"]["annotations"][repave.IMAGE_ID] == "images/new"
    assert new["spec"]["storageClassName"] == "lh-new" and new["spec"]["volumeMode"] == "Block"
    volumes = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in patch["spec"]["template"]["spec"]["volumes"]
    }
    assert volumes == {"rootdisk": "db-os-%s" % NEW, "pgdata": "db-pgdata"}


def swapped():
    vm = halted(machine(templates=(OS_OLD, DATA, OS_NEW), rootdisk="db-os-%s" % NEW))
    return annotate(vm, **{repave.PREVIOUS: "db-os-%s" % OLD})


def test_start_wait_for_the_agent_on_the_new_disk_release_delete_record():
    disks = claims(OS_OLD, DATA, OS_NEW)
    assert step(observed(swapped(), None, disks))["write"]["patch"] == {"spec": {"runStrategy": "Always"}}
    started = swapped()
    started["spec"]["runStrategy"] = "Always"
    # A VMI still on the old disk, or without its agent, is not proof the new disk boots.
    for running in (vmi(), vmi("db-os-%s" % NEW, agent=False)):
        assert (
            step(observed(started, running, disks))["phase"]
            == "waiting for the guest agent on db-os-%s" % NEW
        )
    booted = vmi("db-os-%s" % NEW)
    release = step(observed(started, booted, disks))
    declared = json.loads(release["write"]["patch"]["metadata"]["annotations"][repave.TEMPLATES])
    assert sorted(t["metadata"]["name"] for t in declared) == ["db-os-%s" % NEW, "db-pgdata"]
    started["metadata"]["annotations"][repave.TEMPLATES] = json.dumps(declared)
    delete = step(observed(started, booted, disks))
    assert delete["write"] == {"delete": ["db-os-%s" % OLD]}
    del disks["db-os-%s" % OLD]
    record = step(observed(started, booted, disks))
    assert record["state"] == "done" and record["write"]["patch"]["metadata"]["annotations"] == {
        repave_steps.REVISION: NEW,
        repave_steps.TARGET: None,
        repave.PREVIOUS: None,
        repave_steps.STREAM: "22.04",
    }


def test_current_is_done_without_a_write():
    vm = machine(templates=(OS_NEW, DATA), rootdisk="db-os-%s" % NEW)
    annotate(vm, **{repave_steps.REVISION: NEW, repave_steps.STREAM: "22.04"})
    found = step(observed(vm, vmi("db-os-%s" % NEW), claims(OS_NEW, DATA)))
    assert (found["state"], found["write"]) == ("done", None)


# ------------------------------------------------------------------------------- the guards


@pytest.mark.parametrize("vm_state", ["running", "halted"])
def test_a_data_claim_is_never_swapped_out(vm_state):
    vm = machine() if vm_state == "running" else halted(machine())
    found = step(observed(vm, vmi() if vm_state == "running" else None), os_volume="pgdata")
    assert found["state"] == "failed" and found["write"] is None
    assert "backed by claim db-pgdata, which is data: it carries no" in found["message"]


def test_a_missing_volume_and_an_unreadable_annotation_fail_without_writes():
    assert "has no volume rootdsk" in step(observed(machine()), os_volume="rootdsk")["message"]
    vm = machine()
    vm["metadata"]["annotations"][repave.TEMPLATES] = "{not json"
    assert step(observed(vm))["state"] == "failed" and step(observed(vm))["write"] is None
    assert step(observed(None))["phase"] == "deleted"


def test_a_leftover_claim_of_the_new_name_is_refused_before_the_vm_is_stopped():
    found = step(observed(halted(machine()), None, claims(OS_OLD, DATA, OS_NEW)))
    assert found["state"] == "failed" and "does not declare it" in found["message"]
    # A running VM is not stopped first: the database stays up.
    running = step(observed(machine(), vmi(), claims(OS_OLD, DATA, OS_NEW)))
    assert running["state"] == "failed" and running["write"] is None
    assert "nothing was stopped or swapped" in running["message"]


def test_an_unproven_previous_disk_is_kept():
    started = swapped()
    started["spec"]["runStrategy"] = "Always"
    images = {"images/new": IMAGES["images/new"]}  # the old image is gone: its disk is unproven
    obs = dict(observed(started, vmi("db-os-%s" % NEW), claims(OS_OLD, DATA, OS_NEW)), images=images)
    found = step(obs)
    assert found["state"] == "failed" and "nothing was deleted" in found["message"] and found["write"] is None


# ------------------------------------------------------------------------- the seed's VM, repaired


def broken():
    """What `os_volume: pgdata` left: stopped, the new OS disk in the pgdata slot, pgdata as previous."""
    vm = halted(machine(templates=(OS_OLD, DATA, OS_NEW), pgdata="db-os-%s" % NEW))
    return annotate(vm, **{repave.PREVIOUS: "db-pgdata"})


@pytest.mark.parametrize("os_volume", ["rootdisk", "pgdata"])
def test_the_data_claim_is_put_back_first_whatever_os_volume_says(os_volume):
    found = step(observed(broken(), None, claims(OS_OLD, DATA, OS_NEW)), os_volume=os_volume)
    assert (found["state"], found["step"]) == ("working", "RestoringDataDisk")
    patch = found["write"]["patch"]
    volumes = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in patch["spec"]["template"]["spec"]["volumes"]
    }
    assert volumes == {"rootdisk": "db-os-%s" % OLD, "pgdata": "db-pgdata"}
    assert patch["metadata"]["annotations"][repave.PREVIOUS] == "db-os-%s" % NEW
    assert patch["metadata"]["resourceVersion"] == "7"


def test_a_swapped_out_claim_that_is_gone_or_ambiguous_is_not_guessed():
    found = step(observed(broken(), None, claims(OS_OLD, OS_NEW)))  # pgdata declared, but the claim is gone
    assert found["state"] == "failed" and "no longer exists" in found["message"] and found["write"] is None


def test_failure_hint_names_the_kept_disk_and_the_rollback():
    started = swapped()
    hint = repave_steps.failure_hint("db", started, TARGET, "rootdisk")
    assert hint == (
        "the VM runs on db-os-%s; db-os-%s is kept; roll back with state=repaved strategy=direct revision=%s"
        % (NEW, OLD, OLD)
    )
    assert "keeps its OS disk" in repave_steps.failure_hint("db", machine(), TARGET, "rootdisk")


# -------------------------------------------------------------------------------- the view


def test_instance_view_reads_phase_revision_and_the_repave_in_flight():
    claims_found = {"db-os-%s" % OLD: {"status": {"phase": "Bound"}}}
    view = repave_steps.instance_view(machine(), vmi(), claims_found, "rootdisk", "pgdata")
    assert (view["phase"], view["revision"], view["available"], view["in_flight"]) == (
        "Available",
        OLD,
        True,
        False,
    )
    assert view["disks"] == {"db-os-%s" % OLD: "Bound", "db-pgdata": "Missing"}
    moving = repave_steps.instance_view(swapped(), None, {}, "rootdisk", "pgdata")
    assert (moving["phase"], moving["revision"], moving["in_flight"]) == ("Repaving", None, True)
    assert moving["repave"] == {"targetRevision": NEW, "step": "StartingVM", "from": OLD}
    stopped = machine()
    stopped["spec"]["runStrategy"] = "Halted"
    assert repave_steps.instance_view(stopped, None, {}, "rootdisk", "pgdata")["phase"] == "Stopped"


# ---------------------------------------------------------------------- the operator's repave


def operated(phase="Available", revision=OLD, trigger=None, **extra):
    view = {
        "phase": phase,
        "revision": revision,
        "trigger": trigger,
        "operator": {"Ready": {"status": "True", "reason": "Available", "message": None}},
        "repave": {},
        "reason": None,
        "message": None,
        "resource_version": "9",
    }
    view.update(extra)
    return view


def operator_step(view, before=False, settled=0):
    return repave_steps.operator_step(view, NEW, "repave-trigger", before, settled)


def test_operator_step_triggers_only_an_available_instance_on_the_version_seen():
    found = operator_step(operated())
    assert found["state"] == "working" and found["write"] == {
        "metadata": {"annotations": {"repave-trigger": "now"}, "resourceVersion": "9"}
    }
    refused = operator_step(operated(phase="Failed", reason="X", message="broken"))
    assert refused["state"] == "failed" and refused["write"] is None
    assert "not triggered" in operator_step(operated(phase="Provisioning"))["message"]


def test_operator_step_waits_retries_and_finishes():
    assert operator_step(operated(trigger="now"))["message"].startswith("waiting for the operator")
    repaving = operated(phase="Repaving", repave={"step": "SwappingOSDisk", "targetRevision": NEW})
    assert operator_step(repaving)["step"] == "SwappingOSDisk"
    retry = operator_step(operated(phase="Failed", trigger="now", reason="StopFailed", message="x"))
    assert (retry["state"], retry["write"]) == ("working", None) and "retrying after StopFailed" in retry[
        "message"
    ]
    assert operator_step(operated(revision=NEW))["state"] == "done"


def test_operator_step_believes_another_revision_only_after_two_sightings():
    first = operator_step(operated(), before=True)
    assert (first["state"], first["settled"], first["write"]) == ("working", True, None)
    second = operator_step(operated(), before=True, settled=1)
    assert second["state"] == "failed" and "cleared repave-trigger but runs %s" % OLD in second["message"]


def test_the_claims_a_deleted_vm_left_are_recognised_for_every_revision_form():
    pattern = repave_steps.own_claim_pattern("db")
    for claim in (
        repave_steps.os_disk_name("db", OLD),
        repave_steps.os_disk_name("db", "v20260815-r02"),  # a same-day rebuild
        repave_steps.os_disk_name("db", "v20261201-2404"),
        repave_steps.os_disk_name("db", "v20261201-2404-r03"),
        "db-pgdata",
    ):
        assert pattern.match(claim), claim
    for claim in ("db2-os-%s" % OLD, "db-os-latest", "db-os-v2026081", "other-pgdata", "db-pgdata-old"):
        assert not pattern.match(claim), claim


def test_the_diff_view_of_each_write_shows_the_stop_the_swap_and_the_delete():
    running = observed(machine(), vmi())
    assert repave_steps.write_view(running, step(running)["write"]) == {"runStrategy": ("Always", "Halted")}
    stopped = observed(halted(machine()))
    assert repave_steps.write_view(stopped, step(stopped)["write"]) == {
        "volume rootdisk claim": ("db-os-%s" % OLD, "db-os-%s" % NEW)
    }
    disks = claims(OS_OLD, DATA, OS_NEW)
    disks["db-os-%s" % OLD]["status"] = {"phase": "Bound"}
    assert repave_steps.write_view(observed(swapped(), None, disks), {"delete": ["db-os-%s" % OLD]}) == {
        "claim db-os-%s" % OLD: ("Bound", None)
    }
