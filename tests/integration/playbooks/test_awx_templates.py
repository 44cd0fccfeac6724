"""Every job template's playbook under ansible-runner (AWX's execution engine), against the lab.

Each job gets what AWX would give it: the template's survey answers and launch-time extra vars, and
the environment its credentials inject (AWX's Kubernetes bearer-token type; the S3 type of
awx/controller/goldenimage.yml rendered from its injectors). Each test asserts the summary the CLI
prints and what the run changed. The workflow "publish, gate, approve, promote" is followed node by
node: the publish job's artifacts (set_stats) are the gate's and the promotion's extra vars, and a
rejected gate fails its job, so the promotion never runs and the incumbent keeps serving.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import uuid

import pytest

from tests.integration.modules.test_baked_image_rebuild_due import streams_repos  # noqa: F401  pylint: disable=unused-import
from tests.integration.modules.test_dbinstance_repave import OLD, TIP, Fleet, open_window
from tests.integration.modules.test_worker_image import SCHEMATIC, World
from tests.integration.modules.test_worker_image import pool as worker_pool
from tests.integration.playbooks.test_awx import CONTROLLER, injected_env, run_template
from tests.integration.playbooks.test_promote_playbooks import Stage
from tests.integration.roles.test_publish_baked_image import REVISION
from tests.integration.roles.test_publish_baked_image import inputs as baked_inputs
from tests.integration.roles.test_windows_chain import DATE as WINDOWS_DATE
from tests.integration.roles.test_windows_chain import EXPORT_IMAGE, Chain
from tests.integration.roles.test_windows_chain import key_of as windows_key
from tests.integration.support import disks
from tests.integration.support import microvm_parts as parts
from tests.lab.controllers.kubevirt import probe_template
from tests.lab.s3 import make_public

pytestmark = pytest.mark.lab_only

WINDOW = "goldenimage.pipeline/maintenance-window"

BLOCK_NS = "golden-images-block"
DATE = "2026-08-28"


def gate_answers(project):
    """The gate's optional inputs tuned for the lab (short timeouts, the lab's port forward)."""
    return {
        "golden_gate_agent_timeout": 10,
        "golden_gate_port_timeout": 5,
        "golden_gate_wait_timeout": 30,
        "golden_gate_poll_interval": 1,
        "golden_gate_port_probe": probe_template(22),
        "golden_promote_gate_project_namespace": project,
    }


def promote_answers(stage):
    return {
        "golden_promote_gate_agent_timeout": 10,
        "golden_promote_gate_port_timeout": 5,
        "golden_promote_gate_provision_timeout": 30,
        "golden_promote_gate_poll_interval": 1,
        "golden_promote_gate_port_probe": probe_template(22),
        "golden_promote_project_selector": stage.selector,
        "golden_promote_verify_timeout": 30,
        "golden_promote_verify_interval": 1,
    }


def promote_survey(stage, role):
    """The promote template's survey answered for one of the stage's goldens."""
    return {
        "golden_promote_family": stage.family,
        "golden_promote_snapshot": stage.goldens[role],
        "golden_promote_mode": "Filesystem",
        "golden_promote_gate_project_namespace": stage.gate_project,
    }


def undo_vars(stage, candidate):
    """What the failure node gets: the publish node's artifacts and the workflow's answers."""
    return {
        "golden_promote_family": stage.family,
        "golden_promote_mode": "Filesystem",
        "golden_promote_snapshot": candidate,
        "golden_promote_project_selector": stage.selector,
        "golden_promote_verify_timeout": 30,
        "golden_promote_verify_interval": 1,
    }


@pytest.fixture(scope="module")
def stage(lab, kube_client, tmp_path_factory):
    """Goldens of one family imported through CDI (incumbent served, a candidate, a disk that does not
    boot) and the project namespaces, as the promotion tests arrange them."""
    arranged = Stage(lab, kube_client, tmp_path_factory.mktemp("awx-promote"))
    try:
        arranged.ensure_golden_namespace()
        arranged.make_projects()
        arranged.make_goldens()
        yield arranged
    finally:
        arranged.cleanup()


def test_publish_linux_golden_hands_its_golden_to_the_gate(lab, kube_client, tmp_path, monkeypatch):
    """publish -> gate as the workflow runs them: the publish job's artifacts name the gate's candidate."""
    from kubernetes import client

    core = client.CoreV1Api(kube_client)
    prefix = "t%s" % uuid.uuid4().hex[:8]
    family = "%s-deb" % prefix
    gate_project = "%s-gate" % prefix
    # A Kube-DC project namespace: the only kind of namespace the gate runs in.
    core.create_namespace({"metadata": {"name": gate_project, "labels": {"kube-dc.com/project": prefix}}})
    tree = disks.ext4_tree(tmp_path / "tree", {"etc/golden-release": prefix + "\n"})
    qcow2 = disks.qcow2(disks.linux_disk(tmp_path / "disk.raw", tree)["path"], tmp_path / "disk.qcow2")
    digest = hashlib.sha256(qcow2.read_bytes()).hexdigest()
    s3 = lab.s3.client()
    bucket = "%s-mirror" % prefix
    s3.create_bucket(Bucket=bucket)
    key = "%s/1/sha256-%s/disk.qcow2" % (family, digest)
    s3.upload_file(str(qcow2), bucket, key)
    make_public(s3, bucket, [key])
    url = "%s/%s/%s" % (lab.s3.endpoint_url, bucket, key)
    images = [
        {
            "family": family,
            "os_name": "Debian 12",
            "source": {"http": {"url": url, "checksum": "sha256:" + digest}},
            "size": str(64 * 1024 * 1024),
        }
    ]
    name = "golden-%s-%s-%s" % (family, DATE.replace("-", ""), digest[:12])
    try:
        published = run_template(
            "goldenimage: publish Linux golden",
            {"linux_golden_images": images, "linux_golden_poll_interval": 1},
            lab,
            tmp_path,
            monkeypatch,
            survey={"linux_golden_date": DATE},
        )
        assert published.ok, published.stdout
        assert "staged (not active): %s/%s restoreSize=" % (BLOCK_NS, name) in published.stdout
        assert published.artifacts == {
            "golden_published": [name],
            "golden_gate_snapshot": name,
            "golden_gate_snapshot_namespace": BLOCK_NS,
            "golden_promote_snapshot": name,
            "golden_promote_family": family,
            "golden_promote_mode": "Block",
        }
        # The next node: the workflow's answers and the artifacts, no name typed by a person.
        lab.clear_audit()
        gated = run_template(
            "goldenimage: gate",
            dict(gate_answers(gate_project), **published.artifacts),
            lab,
            tmp_path,
            monkeypatch,
        )
        assert gated.ok, gated.stdout
        assert "passed: " in gated.stdout
        verdict = gated.results["Boot a tenant-style clone of the candidate"][0]
        assert verdict["verdict"] == "passed" and verdict["probe"]
        # The gate wrote only in its project namespace (and the content it published there), and its verdict
        # on the golden it gated.
        outside = [
            (r["verb"], r["resource"], r["name"])
            for r in lab.mutating_requests()
            if r["namespace"] not in (gate_project, None) and r["resource"] != "volumesnapshotcontents"
        ]
        assert outside == [("patch", "volumesnapshots", name)], outside
    finally:
        custom = client.CustomObjectsApi(kube_client)
        for plural, group, version in (
            ("volumesnapshots", "snapshot.storage.k8s.io", "v1"),
            ("datavolumes", "cdi.kubevirt.io", "v1beta1"),
        ):
            for item in custom.list_namespaced_custom_object(group, version, BLOCK_NS, plural)["items"]:
                if prefix in item["metadata"]["name"]:
                    custom.delete_namespaced_custom_object(
                        group, version, BLOCK_NS, plural, item["metadata"]["name"]
                    )
        for claim in core.list_namespaced_persistent_volume_claim(BLOCK_NS).items:
            if prefix in claim.metadata.name:
                core.delete_namespaced_persistent_volume_claim(claim.metadata.name, BLOCK_NS)
        core.delete_namespace(gate_project)


def test_a_rejected_gate_fails_its_job_and_writes_no_selection(lab, stage, tmp_path, monkeypatch):
    """The workflow's failure path: a candidate that does not boot fails the gate job, so the approval
    and the promotion never run; nothing outside the gate's project namespace was written."""
    lab.clear_audit()
    gated = run_template(
        "goldenimage: gate",
        dict(gate_answers(stage.gate_project), golden_gate_agent_timeout=3),
        lab,
        tmp_path,
        monkeypatch,
        survey={
            "golden_gate_snapshot": stage.goldens["broken"],
            "golden_gate_project_namespace": stage.gate_project,
        },
    )
    assert gated.status == "failed", gated.stdout
    verdict = gated.results["Boot a tenant-style clone of the candidate"][0]
    assert verdict["verdict"] != "passed", verdict
    assert stage.selection() is None
    writes = [r for r in lab.mutating_requests() if r["resource"] == "goldenimageselections"]
    assert writes == []


def test_promote_then_rollback_templates(lab, stage, tmp_path, monkeypatch):
    """The promotion node after an approval, then the rollback node: summaries and the selections written."""
    promoted = run_template(
        "goldenimage: promote",
        dict(promote_answers(stage), golden_promote_release_digest=stage.digests["candidate"]),
        lab,
        tmp_path,
        monkeypatch,
        survey=promote_survey(stage, "candidate"),
    )
    assert promoted.ok, promoted.stdout
    assert "golden_promote_summary" in promoted.stdout  # the table the CLI shows
    for project in stage.projects:
        assert project in promoted.stdout
    assert stage.selection()["spec"]["snapshotName"] == stage.goldens["candidate"]
    assert (
        "%s/Filesystem serves %s (selection path" % (stage.family, stage.goldens["candidate"])
        in promoted.stdout
    )

    rolled = run_template(
        "goldenimage: rollback",
        {
            "golden_promote_project_selector": stage.selector,
            "golden_promote_verify_timeout": 30,
            "golden_promote_verify_interval": 1,
        },
        lab,
        tmp_path,
        monkeypatch,
        survey={"golden_promote_family": stage.family, "golden_promote_mode": "Filesystem"},
    )
    assert rolled.ok, rolled.stdout
    assert stage.selection()["spec"]["snapshotName"] == stage.goldens["incumbent"]

    # The workflow's failure path after a promotion that failed before its write: nothing to undo.
    lab.clear_audit()
    untouched = run_template(
        "goldenimage: undo a failed promotion",
        undo_vars(stage, stage.goldens["broken"]),
        lab,
        tmp_path,
        monkeypatch,
    )
    assert untouched.ok, untouched.stdout
    assert (
        "the failed promotion wrote nothing; %s keeps serving" % stage.goldens["incumbent"]
        in untouched.stdout
    )
    assert [r for r in lab.mutating_requests() if r["resource"] == "goldenimageselections"] == []
    assert stage.selection()["spec"]["snapshotName"] == stage.goldens["incumbent"]

    # After a promotion that wrote its candidate (and then failed, say on its projects): the undo restores
    # what that promotion replaced.
    again = run_template(
        "goldenimage: promote",
        dict(
            promote_answers(stage),
            golden_promote_gate=False,
            golden_promote_allow_ungated=True,
            golden_promote_ungated_reason="lab goldens are blank disks",
        ),
        lab,
        tmp_path,
        monkeypatch,
        survey=promote_survey(stage, "candidate"),
    )
    assert again.ok, again.stdout
    assert stage.selection()["spec"]["snapshotName"] == stage.goldens["candidate"]
    # The rollback template, fed the same workflow variables, does not undo it: its golden_promote_snapshot
    # names the rollback's target, and that target already serves. This is why it is not the failure path.
    plain = run_template(
        "goldenimage: rollback",
        undo_vars(stage, stage.goldens["candidate"]),
        lab,
        tmp_path,
        monkeypatch,
        survey={"golden_promote_family": stage.family, "golden_promote_mode": "Filesystem"},
    )
    assert plain.ok, plain.stdout
    assert stage.selection()["spec"]["snapshotName"] == stage.goldens["candidate"]
    undone = run_template(
        "goldenimage: undo a failed promotion",
        undo_vars(stage, stage.goldens["candidate"]),
        lab,
        tmp_path,
        monkeypatch,
    )
    assert undone.ok, undone.stdout
    assert (
        "restored %s in place of the failed candidate %s"
        % (
            stage.goldens["incumbent"],
            stage.goldens["candidate"],
        )
        in undone.stdout
    )
    assert stage.selection()["spec"]["snapshotName"] == stage.goldens["incumbent"]
    assert "%s/Filesystem serves %s" % (stage.family, stage.goldens["incumbent"]) in rolled.stdout


def test_repave_fleet_template(lab, kube_client, kube_namespace, operator_settings, tmp_path, monkeypatch):
    """The maintenance workflow's last node: the roll-out with the survey's max_unavailable, in the
    maintenance window the launch gives (the survey's Apply left at next-maintenance); the same launch
    without a window repaves nothing and says why."""
    fleet = Fleet(lab, kube_client, kube_namespace, operator_settings)
    names = ["db-%d" % i for i in range(4)]
    for name in names:
        fleet.create(name)
    fleet.settle(names)
    launch = {
        "repave_catalog": fleet.catalog,
        "repave_batch_pause": 0,
        "repave_wait_timeout": 60,
        "repave_api_version": "%s/%s" % (fleet.group, fleet.version),
    }
    survey = {"repave_namespace": fleet.namespace, "repave_max_unavailable": "50%"}
    job = run_template("goldenimage: repave fleet", launch, lab, tmp_path, monkeypatch, survey=survey)
    assert job.ok, job.stdout
    assert "nothing repaved" in job.stdout and "no maintenance window" in job.stdout
    assert {n: fleet.revision(n) for n in names} == {n: OLD for n in names}

    launch["repave_window"] = open_window(60)
    job = run_template("goldenimage: repave fleet", launch, lab, tmp_path, monkeypatch, survey=survey)
    assert job.ok, job.stdout
    assert "instance | revision | target | verdict | action" in job.stdout
    assert {n: fleet.revision(n) for n in names} == {n: TIP for n in names}
    assert fleet.operator.repaving_at_once(fleet.namespace) <= 2
    rollout = job.results["Repave the fleet"][-1]
    assert rollout["intent"]["applied_by"] == {n: "next-maintenance" for n in names}  # recorded


def test_the_daily_schedule_applies_what_is_due_in_each_instances_window(
    lab, kube_client, kube_namespace, operator_settings, tmp_path, monkeypatch
):
    """The schedule of awx/controller/goldenimage.yml launches the repave template with its extra_data
    (repave_opt_in: scheduled and a maintenance policy): an instance whose own window is open and whose
    auto-apply date has passed is repaved, one without a window waits, until its forced-apply date."""
    schedule = next(
        s for s in CONTROLLER["controller_schedules"] if s["extra_data"].get("repave_opt_in") == "scheduled"
    )
    assert schedule["unified_job_template"] == "goldenimage: repave fleet"
    fleet = Fleet(lab, kube_client, kube_namespace, operator_settings)
    for name in ("in-window", "no-window"):
        fleet.create(name)
    fleet.settle(["in-window", "no-window"])
    window = open_window(60)
    fleet.custom.patch_namespaced_custom_object(
        fleet.group,
        fleet.version,
        fleet.namespace,
        "dbinstances",
        "in-window",
        {"metadata": {"annotations": {WINDOW: "%(start)s-%(end)s UTC" % window}}},
    )
    # The schedule's answers: the survey's (its namespace, here this lab's, and when to apply) and the rest as
    # extra vars, on this lab's catalog and CRD version, with no operator Deployment.
    data = dict(schedule["extra_data"])
    survey = {"repave_namespace": fleet.namespace, "repave_opt_in": data.pop("repave_opt_in")}
    data.pop("repave_namespace")
    data.pop("repave_operator", None)
    data.update(
        repave_catalog=fleet.catalog,
        repave_api_version="%s/%s" % (fleet.group, fleet.version),
        repave_batch_pause=0,
        repave_wait_timeout=60,
    )
    policy = schedule["extra_data"]["repave_maintenance_policy"]
    # Forced-apply far away first: only the window applies (the tip was built months ago).
    early = dict(data, repave_maintenance_policy=dict(policy, forced_apply_after_days=3650))
    job = run_template("goldenimage: repave fleet", early, lab, tmp_path, monkeypatch, survey=survey)
    assert job.ok, job.stdout
    rollout = job.results["Repave the fleet"][-1]
    assert rollout["intent"]["applied_by"] == {"in-window": "auto-apply"}, rollout["intent"]
    assert fleet.revision("in-window") == TIP and fleet.revision("no-window") == OLD
    # The schedule's own policy: past the forced-apply date, applied whatever the window.
    job = run_template("goldenimage: repave fleet", data, lab, tmp_path, monkeypatch, survey=survey)
    assert job.ok, job.stdout
    rollout = job.results["Repave the fleet"][-1]
    assert rollout["intent"]["applied_by"] == {"no-window": "forced-apply"}, rollout["intent"]
    assert fleet.revision("no-window") == TIP and fleet.repaves("in-window") == 1


def test_the_daily_rebuild_check_schedule_fails_on_a_security_update(
    lab,
    kube_client,
    kube_namespace,
    streams_repos,  # noqa: F811 (the imported fixture)
    tmp_path,
    monkeypatch,
):
    """The rebuild-due schedule launches its template with rebuild_due_fail_on: security: every stream's
    tip is compared from the catalog alone (no manifest file), and a tip that lacks a security update fails
    the job, whose lines name it per stream."""
    from tests.integration.modules.test_baked_image_rebuild_due import catalog_map, two_streams

    schedule = next(s for s in CONTROLLER["controller_schedules"] if "rebuild_due_fail_on" in s["extra_data"])
    assert schedule["unified_job_template"] == "goldenimage: baked image rebuild due"
    assert schedule["rrule"].endswith("RRULE:FREQ=DAILY;INTERVAL=1")
    data = dict(schedule["extra_data"])
    survey = {"rebuild_due_fail_on": data.pop("rebuild_due_fail_on")}
    assert survey == {"rebuild_due_fail_on": "security"}
    # Every stream's suites from one list, as the schedule gives them; this lab's catalog and repositories.
    assert all("{codename}" in " ".join(r["suites"]) for r in data["rebuild_due_apt_repositories"])
    data.update(
        rebuild_due_catalog=catalog_map(kube_client, kube_namespace, "catalog", two_streams()),
        rebuild_due_apt_repositories=streams_repos,
    )
    job = run_template(
        "goldenimage: baked image rebuild due", data, lab, tmp_path, monkeypatch, survey=survey
    )
    assert not job.ok, job.stdout
    assert (
        "22.04 v20261129 (default stream): security: openssl 3.0.2-0ubuntu1.15 -> 3.0.2-0ubuntu1.16"
        in job.stdout
    )
    assert "24.04 v20261201-2404: security: libc6 " in job.stdout
    # Report only: the same schedule's run with never succeeds and says the same.
    never = {"rebuild_due_fail_on": "never"}
    job = run_template(schedule["unified_job_template"], data, lab, tmp_path, monkeypatch, survey=never)
    assert job.ok, job.stdout
    assert "24.04 v20261201-2404: security: openssl " in job.stdout


def test_mirror_template_with_the_s3_credential(lab, tmp_path, monkeypatch):
    """The S3 credential type's injectors are the only source of the bucket's endpoint and keys."""
    disk = tmp_path / "debian.qcow2"
    raw = tmp_path / "debian.raw"
    disks.run("truncate", "-s", "4M", raw)
    disks.run("qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, disk)
    bucket = "awx-%s" % uuid.uuid4().hex[:8]
    job = run_template(
        "goldenimage: mirror",
        {"os_mirror_images": [{"family": "debian-12", "version": "20260801", "path": str(disk)}]},
        lab,
        tmp_path,
        monkeypatch,
        survey={"os_mirror_bucket": bucket},
    )
    assert job.ok, job.stdout
    assert "1 copied, 0 skipped: %d bytes moved at " % disk.stat().st_size in job.stdout
    assert "catalog s3://%s/catalog.json lists 1 images (rewritten)" % bucket in job.stdout
    assert lab.s3.secret_key not in job.stdout
    document = json.loads(lab.s3.client().get_object(Bucket=bucket, Key="catalog.json")["Body"].read())
    assert list(document["families"]) == ["debian-12"]


def test_publish_baked_image_template(lab, kube_client, kube_namespace, tmp_path, monkeypatch):
    """EOL guard, checksums, the bucket by digest, the Harvester image and the stream tip of a build."""
    bucket = "awx-baked-%s" % uuid.uuid4().hex[:6]
    extra = baked_inputs(tmp_path, kube_namespace, bucket)
    job = run_template(
        "goldenimage: publish baked image",
        extra,
        lab,
        tmp_path,
        monkeypatch,
        survey={"publish_os_version": "22.04"},
    )
    assert job.ok, job.stdout
    assert "revision %s (Ubuntu 22.04, PostgreSQL " % REVISION in job.stdout
    assert "s3://%s/" % bucket in job.stdout and " uploaded, " in job.stdout
    assert lab.s3.secret_key not in job.stdout and "X-Amz-Signature" not in job.stdout


def test_publish_worker_image_template(lab, kube_client, tmp_path, monkeypatch):
    world = World(lab, kube_client, tmp_path)
    try:
        version = "v1.13.0"
        world.publish(SCHEMATIC, version)
        job = run_template(
            "goldenimage: publish worker images",
            {
                "worker_image_images": [world.entry(version)],
                "worker_image_pools": [worker_pool(world, version)],
                "worker_image_poll_seconds": 1,
            },
            lab,
            tmp_path,
            monkeypatch,
            survey={"worker_image_namespace": world.ns},
        )
        assert job.ok, job.stdout
        name = "talos-worker-%s-%s" % (SCHEMATIC, version)
        assert name in job.stdout and "Succeeded" in job.stdout
        assert world.golden(name)["status"]["phase"] == "Succeeded"
    finally:
        world.close()


def test_publish_microvm_images_template_with_the_registry_credential(tmp_path, lab, monkeypatch):
    """The registry credential type's extra vars carry the push credentials; they never reach the output."""
    made = tmp_path / "made"
    tree = parts.root_tree(made / "tree")
    disk = parts.gpt_disk(made / "disk.raw", parts.ext4_root(tree, made / "root.ext4"))["path"]
    reg = parts.Registry(tmp_path / "registry", tls=True, users={"pusher": "awx-r3g-pw"})
    try:
        assert "goldenimage registry" in next(
            t["credentials"]
            for t in CONTROLLER["controller_templates"]
            if t["name"] == "goldenimage: publish micro-VM images"
        )
        secret = injected_env(
            "goldenimage OCI registry", {"username": "pusher", "password": "awx-r3g-pw"}, "extra_vars"
        )
        job = run_template(
            "goldenimage: publish micro-VM images",
            {"microvm_images_ca_bundle": str(reg.ca)},
            lab,
            tmp_path,
            monkeypatch,
            survey={
                "microvm_images_src": str(disk),
                "microvm_images_registry": reg.host,
                "microvm_images_repository": "awx/ubuntu",
            },
            injected_vars=secret,
        )
        assert job.ok, job.stdout
        assert "without slim: " in job.stdout  # the size report
        assert reg.manifest("awx/ubuntu/rootfs", parts.VERSION, auth=("pusher", "awx-r3g-pw")) == 200
        assert "awx-r3g-pw" not in job.stdout
        assert "awx-r3g-pw" not in json.dumps([e.get("event_data", {}).get("res") for e in job.result.events])
    finally:
        reg.stop()


def test_publish_windows_golden_template(lab, kube_client, tmp_path, monkeypatch):
    """Seal check, export through the BYOL guard (a volume-licensed image to a private bucket), import,
    contract snapshot and clone gate; the bucket's endpoint and keys come from the S3 credential."""
    from kubernetes import client

    arranged = Chain(lab, kube_client, tmp_path)
    family = "win11-awx-%s" % arranged.tag
    try:
        job = run_template(
            "goldenimage: publish Windows golden",
            {
                "windows_export_namespace": arranged.build,
                "windows_export_date": WINDOWS_DATE,
                "windows_export_scratch_size": "64Mi",
                "windows_export_poll_interval": 1,
                "windows_export_import_url_base": lab.s3.endpoint_url,
                "windows_export_import_presign": True,
                "windows_export_import_access_key_id": lab.s3.access_key,
                "windows_export_import_secret_key": lab.s3.secret_key,
                "windows_export_family": family,
                "windows_export_os_name": "Windows 11 (AWX)",
                "windows_export_import_size": "64Mi",
                "publish_project_namespace": arranged.project,
                "publish_gate_agent_timeout": 30,
                "publish_gate_port_timeout": 3,
                "publish_gate_provision_timeout": 60,
                "publish_gate_poll_interval": 1,
                "publish_gate_port_probe": probe_template(3389),
            },
            lab,
            tmp_path,
            monkeypatch,
            survey={
                "windows_export_pvc": "win11-sealed",
                "windows_export_bucket": arranged.private,
                "windows_export_license": "volume",
                "windows_export_image": EXPORT_IMAGE,
            },
        )
        assert job.ok, job.stdout
        assert "golden-%s-" % family in job.stdout
        assert arranged.keys(arranged.private) == [windows_key(WINDOWS_DATE)]
        assert lab.s3.secret_key not in job.stdout
    finally:
        custom = client.CustomObjectsApi(kube_client)
        for plural, group, version in (
            ("volumesnapshots", "snapshot.storage.k8s.io", "v1"),
            ("datavolumes", "cdi.kubevirt.io", "v1beta1"),
        ):
            for item in custom.list_namespaced_custom_object(group, version, "golden-images", plural)[
                "items"
            ]:
                if item["metadata"]["name"].startswith("golden-%s-" % family):
                    custom.delete_namespaced_custom_object(
                        group, version, "golden-images", plural, item["metadata"]["name"]
                    )


def test_every_template_has_a_runner_test():
    """Each template's playbook runs in a test of this file (the drift report's runs in test_awx.py)."""
    here = pathlib.Path(__file__)
    source = here.read_text() + (here.parent / "test_awx.py").read_text()
    untested = sorted(
        t["name"] for t in CONTROLLER["controller_templates"] if '"%s"' % t["name"] not in source
    )
    assert untested == []
