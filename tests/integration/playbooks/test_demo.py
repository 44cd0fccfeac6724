"""`make demo` (tools/demo.sh, playbooks/demo.yml) on a lab of its own: every act runs and the summary
names what each made, so a change that breaks an act fails here instead of on a user's first try.

One run of the whole demo (one lab start) keeps this small. Before the lab is stopped, what the acts made
is read back from it through the API (and the lab's audit log of client requests), so the checks rest on
the cluster's state, not only on what the playbooks printed. `ACT=<name>` is checked for every act from
the play list `ansible-playbook --list-tasks` prints, without a lab, and the shortest act (workers) runs
alone through tools/demo.sh on a lab of its own.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import time

import pytest
import yaml

from tests.lab.s3 import s3_client

ROOT = pathlib.Path(__file__).resolve().parents[3]
SCHEMATIC = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
WORKER_GOLDEN = "cozy-public/talos-worker-%s-v1.13.0" % SCHEMATIC
FAMILY = "ubuntu-24-04"
BLOCK_NS = "golden-images-block"
PROJECTS = ("golden-gate", "shop-prod", "shop-staging")
FLEET = {"orders": "17", "orders-standby": "17", "billing": "16", "billing-standby": "16"}
OLD_REVISION, NEW_REVISION = "v20261031", "v20261128"
DB = ("db.goldenimage.io", "v1alpha1", "databases", "dbinstances")

pytestmark = pytest.mark.lab_only


def demo_env(state, **extra):
    env = dict(os.environ)
    for name in list(env):
        if name.startswith(("K8S_AUTH_", "AWS_")) or name == "KUBECONFIG":
            env.pop(name)
    env.update({"DEMO_STATE": str(state), "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"}, **extra)
    return env


def run_demo(state: pathlib.Path, **env) -> subprocess.CompletedProcess:
    """tools/demo.sh on a lab of its own in ``state`` (left running: stop_demo stops it)."""
    run = subprocess.run(
        [str(ROOT / "tools/demo.sh")],
        cwd=ROOT,
        env=demo_env(state, **env),
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert run.returncode == 0, "rc=%d\n%s\n%s" % (run.returncode, run.stdout[-20000:], run.stderr[-5000:])
    return run


def stop_demo(state: pathlib.Path) -> None:
    subprocess.run(
        [str(ROOT / "tools/demo.sh"), "stop"],
        cwd=ROOT,
        env=demo_env(state),
        capture_output=True,
        check=False,
    )


def lab_api(state: pathlib.Path):
    """The API client of the demo's lab, CoreV1Api, and a lister of custom objects (all namespaces)."""
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(state / "kubeconfig"))
    custom = client.CustomObjectsApi(api)

    def items(group, version, plural, namespace=None):
        if namespace:
            return custom.list_namespaced_custom_object(group, version, namespace, plural)["items"]
        return custom.list_cluster_custom_object(group, version, plural)["items"]

    return api, client.CoreV1Api(api), items


def read_lab(state: pathlib.Path) -> dict:
    """What the demo left in its lab, read through the API as any client would, and the audit log."""
    api, core, items = lab_api(state)
    lab = json.loads((state / "lab.json").read_text())
    answer = api.rest_client.pool_manager.request(
        "GET", lab["front_url"] + "/lab/audit", headers={"Authorization": "Bearer " + lab["token"]}
    )
    assert answer.status == 200, answer.data
    return {
        "goldens": items("snapshot.storage.k8s.io", "v1", "volumesnapshots", BLOCK_NS),
        "seeded": items("snapshot.storage.k8s.io", "v1", "volumesnapshots"),
        "selections": items("kube-dc.com", "v1", "goldenimageselections"),
        "pvcs": [
            api.sanitize_for_serialization(p)
            for p in core.list_persistent_volume_claim_for_all_namespaces().items
        ],
        "images": items("harvesterhci.io", "v1beta1", "virtualmachineimages"),
        "catalog": core.read_namespaced_config_map("baked-image-catalog", "dbinstance-system").data[
            "catalog.yaml"
        ],
        "dvs": items("cdi.kubevirt.io", "v1beta1", "datavolumes"),
        "dbs": items(*DB[:2], DB[3]),
        "events": [api.sanitize_for_serialization(e) for e in core.list_namespaced_event("databases").items],
        "audit": json.loads(answer.data)["items"],
        "mirror": mirror_keys(state),
    }


def lab_s3(state: pathlib.Path):
    env = dict(line.split("=", 1) for line in (state / "s3.env").read_text().split() if "=" in line)
    return s3_client(env)


def mirror_keys(state: pathlib.Path) -> list[str]:
    return [o["Key"] for o in lab_s3(state).list_objects_v2(Bucket="cdi-os-images").get("Contents", [])]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    state = tmp_path_factory.mktemp("demo") / "lab"
    started = time.monotonic()
    try:
        run = run_demo(state)
        seconds = time.monotonic() - started
        found = read_lab(state)
    finally:
        stop_demo(state)
    print("demo wall time: %.0f s" % seconds)
    return {"out": run.stdout, "state": state, "lab": found}


def summary(out):
    """The lines of the summary task's message."""
    start = out.index('"DEMO SUMMARY"')
    return out[start : out.index("]", start)]


def task_msg(out, task):
    """The message lines a task printed (the lines between its banner and the closing bracket)."""
    start = out.index("TASK [%s]" % task)
    return out[start : out.index("\n    ]", start)]


def test_golden_act_mirrors_by_digest_publishes_staged_gates_and_promotes(demo):
    out, lab = demo["out"], demo["lab"]
    # Mirrored under the digest of the upstream bytes, and the golden is named after that digest.
    (key,) = [k for k in lab["mirror"] if k.endswith("/noble-server-cloudimg-amd64.img")]
    assert key.startswith(FAMILY + "/20261128/sha256-"), key
    digest = key.split("/")[2][len("sha256-") :]
    assert "1 copied, 0 skipped" in out, out
    (golden,) = lab["goldens"]
    name = golden["metadata"]["name"]
    assert name == "golden-%s-20261128-%s" % (FAMILY, digest[:12]), name
    assert golden["status"]["readyToUse"] is True
    assert golden["metadata"]["labels"]["kube-dc.com/golden-os"] == FAMILY
    # Published staged, served through the selection only: never labelled active.
    assert golden["metadata"]["labels"].get("kube-dc.com/golden-active") != "true", golden["metadata"]
    assert "staged (not active): %s/%s restoreSize=64Mi" % (BLOCK_NS, name) in out
    assert "clone gate verdict passed for golden %s/%s" % (BLOCK_NS, name) in out
    (selection,) = lab["selections"]
    assert selection["spec"]["snapshotName"] == name and selection["spec"]["family"] == FAMILY, selection
    # Every project was seeded from the selected golden, and the tenant disk cloned the project's copy.
    seeded = {
        vs["metadata"]["namespace"]: vs
        for vs in lab["seeded"]
        if vs["metadata"]["name"] == "golden-%s-block" % FAMILY
    }
    assert sorted(seeded) == sorted(PROJECTS), sorted(seeded)
    for vs in seeded.values():
        assert vs["metadata"]["annotations"]["kube-dc.com/seeded-from"] == "%s/%s" % (BLOCK_NS, name), vs
    # The tenant's disk is a DataVolume cloning the project's copy, as a VM's dataVolumeTemplate is.
    (tenant,) = [d for d in lab["dvs"] if d["metadata"]["name"] == "web-1-root"]
    assert tenant["metadata"]["namespace"] == "shop-prod" and tenant["status"]["phase"] == "Succeeded"
    assert tenant["spec"]["source"]["snapshot"] == {
        "namespace": "shop-prod",
        "name": "golden-%s-block" % FAMILY,
    }
    claim = next(p for p in lab["pvcs"] if p["metadata"]["name"] == "web-1-root")
    assert claim["metadata"]["namespace"] == "shop-prod" and claim["status"]["phase"] == "Bound", claim
    # datavolume_wait printed its progress line.
    assert "DataVolume shop-prod/web-1-root (tenant disk of web-1): phase Succeeded" in out, out
    # golden_info's report as the act prints it.
    report = task_msg(out, "Show what each family serves, who signed it, and who clones what")
    assert "serves %s/Block: %s/%s (decided by selection" % (FAMILY, BLOCK_NS, name) in report, report
    # Signed where mirrored, verified where imported, and the served golden says so.
    record = json.loads(golden["metadata"]["annotations"]["goldenimage.pipeline/provenance"])
    assert (record["verdict"], record["signer"]) == ("verified", "demo-release-2026"), record
    assert digest in record["sha256"], record
    assert (
        "provenance of %s: verified by demo-release-2026 (key %s), made from" % (name, record["key"])
        in report
    ), report
    assert "verifies under the trust policy" in report, report
    assert "Verify each source's signature and provenance against the pinned trust policy" in out
    for project in PROJECTS:
        assert (
            "project %s: golden-%s-block resolved to %s/%s (match)" % (project, FAMILY, BLOCK_NS, name)
            in report
        )
    assert "clones of %s/%s: 1 (shop-prod/web-1-root)" % (BLOCK_NS, name) in report, report


def test_baked_act_publishes_revisions_and_moves_the_validated_tip(demo):
    out, lab = demo["out"], demo["lab"]
    images = {i["metadata"]["name"]: i for i in lab["images"]}
    assert sorted(images) == ["ubuntu-2204-postgres-" + r for r in (OLD_REVISION, NEW_REVISION)], sorted(
        images
    )
    for image in images.values():
        assert image["spec"]["storageClassParameters"]["numberOfReplicas"] == "3"
        assert {c["type"]: c["status"] for c in image["status"]["conditions"]}["Imported"] == "True"
    assert (
        "image: default/ubuntu-2204-postgres-%s registered, 3 replicas in force on lh-" % NEW_REVISION in out
    )
    doc = yaml.safe_load(lab["catalog"])
    assert doc["default_stream"] == "22.04"
    assert doc["streams"]["22.04"] == {"tip": NEW_REVISION, "validated": True}, doc["streams"]
    assert all(doc["images"][r]["imported"] for r in (OLD_REVISION, NEW_REVISION)), doc["images"]
    # Each revision was validated in a step of its own, on a smoke test recorded in its entry: a test
    # DBInstance provisioned from it, Available on it, deleted afterwards.
    for revision in (OLD_REVISION, NEW_REVISION):
        test = doc["images"][revision]["smoke_tests"][-1]
        assert test["result"] == "passed" and test["dbinstance"] == "dbinstance-smoke/smoke-" + revision, test
        assert test["engine_version"] == "17" and test["phase"] == "Available", test
        assert (
            "revision %s: smoke test passed on DBInstance dbinstance-smoke/smoke-%s" % (revision, revision)
            in out
        )
    assert "stream 22.04: tip held at %s" % OLD_REVISION in out
    assert "stream 22.04: tip %s, validated True, the default stream" % NEW_REVISION in out
    assert [d for d in lab["dbs"] if d["metadata"]["namespace"] == "dbinstance-smoke"] == []


def test_baked_act_reports_the_drift_as_pending_maintenance(demo):
    table = task_msg(demo["out"], "Show the pending maintenance").splitlines()
    for name in FLEET:
        rows = [r for r in table if r.strip().startswith('"%s |' % name)]
        assert len(rows) == 1, (name, table)
        for cell in (OLD_REVISION, NEW_REVISION, "OSUpdateAvailable"):
            assert cell in rows[0], (cell, rows[0])


def test_baked_act_repaves_the_fleet_in_the_window_under_max_unavailable(demo):
    out, lab = demo["out"], demo["lab"]
    assert "maintenance window: every day" in out and "open now" in out
    dbs = {d["metadata"]["name"]: d for d in lab["dbs"]}
    assert sorted(dbs) == sorted(FLEET)
    for name, engine in FLEET.items():
        status = dbs[name]["status"]
        assert status["phase"] == "Available", status
        assert status["appliedSpec"]["imageRevision"] == NEW_REVISION, status
        assert status["appliedSpec"]["engineVersion"] == engine, status  # a repave keeps the major
    # The operator's own Events: each instance repaved once, never more than 2 of 4 (50%) at once, and
    # both standbys done before a primary started.
    moments = sorted(
        (e["eventTime"], e["reason"], e["involvedObject"]["name"])
        for e in lab["events"]
        if e["reason"] in ("RepaveStarted", "RepaveCompleted")
    )
    started = [n for _time, reason, n in moments if reason == "RepaveStarted"]
    assert sorted(started) == sorted(FLEET), moments
    busy, most = set(), 0
    for _time, reason, name in moments:
        if reason == "RepaveStarted":
            busy.add(name)
            most = max(most, len(busy))
        else:
            busy.discard(name)
    assert most <= 2, moments
    done = [n for _time, reason, n in moments if reason == "RepaveCompleted"]
    first_primary = min(
        i
        for i, (_time, reason, n) in enumerate(moments)
        if reason == "RepaveStarted" and not n.endswith("-standby")
    )
    standbys_done = [
        i
        for i, (_time, reason, n) in enumerate(moments)
        if reason == "RepaveCompleted" and n.endswith("-standby")
    ]
    assert len(done) == 4 and max(standbys_done) < first_primary, moments


def test_baked_act_leaves_pgdata_untouched(demo):
    out, lab = demo["out"], demo["lab"]
    claims = {p["metadata"]["name"]: p for p in lab["pvcs"] if p["metadata"]["namespace"] == "databases"}
    roles = {
        n: (c["metadata"].get("labels") or {}).get("goldenimage.pipeline/disk-role")
        for n, c in claims.items()
    }
    pgdata = {n: c for n, c in claims.items() if roles[n] == "data"}
    assert sorted(pgdata) == sorted("%s-pgdata" % n for n in FLEET), sorted(pgdata)
    assert all(p["status"]["phase"] == "Bound" for p in pgdata.values())
    # The operator's OS disks: the new revision's, under a new name; the old revision's are deleted.
    assert sorted(n for n in claims if roles[n] == "os") == sorted(
        "%s-os-%s" % (n, NEW_REVISION) for n in FLEET
    )
    # No client wrote to a pgdata claim after creating it: no update, patch or delete in the audit log.
    writes = [
        (r["verb"], r["name"])
        for r in lab["audit"]
        if r["resource"] == "persistentvolumeclaims"
        and r["namespace"] == "databases"
        and r["verb"] in ("update", "patch", "delete", "deletecollection")
        and r["name"] in pgdata
    ]
    assert writes == [], writes
    assert "pgdata untouched: 4 volumes, the same uid and resourceVersion as before the repave" in out


def test_workers_act_imports_the_golden_renders_a_clone_and_shows_a_refusal(demo):
    out = demo["out"]
    lines = summary(out)
    assert "%s phase=Succeeded" % WORKER_GOLDEN in lines, lines
    # The pool renders a disk that clones the golden rather than importing over HTTP.
    assert "clones PVC %s into 1Gi of class replicated" % WORKER_GOLDEN in out, out
    # The refused render: the play went on and printed the refusal the way the module words it.
    assert "refused as expected: pool tenant-demo/tiny: diskSize 32Mi" in out, out
    assert "set diskSize to at least 64Mi" in out


def test_microvm_act_pushes_three_images_with_their_sizes(demo):
    out = demo["out"]
    lines = summary(out)
    assert '"micro-VM images in registry 127.0.0.1:' in lines and ": 3" in lines, lines
    for part in ("kernel", "modules", "rootfs"):
        assert "/demo/ubuntu-2204/%s:5.10.77" % part in lines, lines
    # The size report of publish_microvm_images: the architecture read from the disk, each image's digest
    # and bytes, and what slim removed.
    assert "kernel 5.10.77 for amd64 (read from /usr/bin/env)" in out, out
    assert "kernel: " in out and "bytes compressed" in out, out
    assert "removed per group: " in out


def test_summary_tells_how_to_look_stop_and_go_real(demo):
    lines = summary(demo["out"])
    kubeconfig = demo["state"] / "kubeconfig"
    for kind in (
        "volumesnapshots -n golden-images-block",
        "goldenimageselections -A",
        "pvc -A",
        "datavolumes -A",
        "virtualmachineimages -A",
        "configmap -n dbinstance-system baked-image-catalog",
        "dbinstances -A",
        "pvc -A -l goldenimage.pipeline/disk-role=data",
    ):
        assert "kubectl --kubeconfig %s get %s" % (kubeconfig, kind) in lines, lines
    assert '"golden VolumeSnapshots: 1"' in lines and '"GoldenImageSelections: 1"' in lines, lines
    assert '"Harvester VirtualMachineImages: 2"' in lines and '"DBInstances: 4"' in lines, lines
    assert "stream 22.04: tip %s validated=True, the default" % NEW_REVISION in lines, lines
    # The Kube-DC copies in every project, the tenant's clone, and the buckets the acts published to.
    assert '"project copies Kube-DC seeded: %d"' % len(PROJECTS) in lines, lines
    assert "kubectl --kubeconfig %s get volumesnapshots -A" % kubeconfig in lines, lines
    assert "DataVolume shop-prod/web-1-root from shop-prod/golden-%s-block phase=Succeeded" % FAMILY in lines
    for bucket in ("cdi-os-images", "baked-images"):
        assert "s3 ls --recursive s3://%s" % bucket in lines, lines
    assert "s3://cdi-os-images/%s/20261128/sha256-" % FAMILY in lines, lines
    assert "DEMO_STATE=%s tools/demo.sh stop" % demo["state"] in lines
    assert "K8S_AUTH_KUBECONFIG=<kubeconfig>" in lines
    for playbook in ("publish_linux_golden", "promote_golden", "publish_baked_image", "repave_dbinstances"):
        assert playbook in lines, lines
    # tools/demo.sh closes with every act's seconds, in the order they ran, and the wall time.
    acts = r"lab start \d+ s, golden \d+ s, baked \d+ s, workers \d+ s, microvm \d+ s, summary \d+ s"
    assert re.search(r"^  each act:   %s$" % acts, demo["out"], re.M), demo["out"][-2000:]
    assert re.search(r"^  wall time:  \d+ s for the whole demo", demo["out"], re.M), demo["out"][-2000:]


@pytest.mark.parametrize(
    ("act", "plays", "absent"),
    [
        (
            "workers",
            ["Act workers", "Publish the Cozystack worker images", "Summary"],
            "Clone a tenant VM disk",
        ),
        (
            "golden",
            ["Act golden", "Publish Linux goldens", "Promote a golden", "Summary"],
            "Render a pool",
        ),
        (
            "baked",
            [
                "Act baked",
                "Publish a baked image revision",
                "Validate a baked image revision on a smoke test",
                "Repave DBInstances to their stream's tip",
                "Summary",
            ],
            "Clone a tenant VM disk",
        ),
        ("microvm", ["Act microvm", "Publish flintlock micro-VM images", "Summary"], "Render a pool"),
    ],
)
def test_one_act_runs_alone(act, plays, absent):
    env = demo_env(ROOT / ".lab/none", ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"))
    run = subprocess.run(
        [
            str(ROOT / ".venv/bin/ansible-playbook"),
            "-i",
            "localhost,",
            "playbooks/demo.yml",
            "--list-tasks",
            "--tags",
            act,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    for play in plays:
        assert play in run.stdout, run.stdout
    tasks = [
        line for line in run.stdout.splitlines() if "TAGS:" in line and "Validating arguments" not in line
    ]
    assert tasks and absent not in "\n".join(tasks), run.stdout


def test_workers_act_runs_alone_on_its_own_lab(tmp_path):
    """`ACT=workers tools/demo.sh` runs that act and the summary only, on a lab of its own."""
    state = tmp_path / "lab"
    try:
        run = run_demo(state, ACT="workers")
        api, core, items = lab_api(state)
        found = {
            "dvs": items("cdi.kubevirt.io", "v1beta1", "datavolumes"),
            "pvcs": [
                api.sanitize_for_serialization(p)
                for p in core.list_persistent_volume_claim_for_all_namespaces().items
            ],
            "snapshots": items("snapshot.storage.k8s.io", "v1", "volumesnapshots"),
            "selections": items("kube-dc.com", "v1", "goldenimageselections"),
            "images": items("harvesterhci.io", "v1beta1", "virtualmachineimages"),
            "dbs": items(*DB[:2], DB[3]),
            "profile": items("cdi.kubevirt.io", "v1beta1", "storageprofiles"),
            "namespaces": sorted(n.metadata.name for n in core.list_namespace().items),
            "buckets": sorted(b["Name"] for b in lab_s3(state).list_buckets()["Buckets"]),
        }
    finally:
        stop_demo(state)
    out, lines = run.stdout, summary(run.stdout)
    print(out[out.index("The lab and the registry are still running.") :])

    # The act's own lines: the golden imported, the pool rendered to clone it, the refused render.
    assert "%s phase=Succeeded" % WORKER_GOLDEN in lines, lines
    assert "clones PVC %s into 1Gi of class replicated" % WORKER_GOLDEN in out, out
    assert "refused as expected: pool tenant-demo/tiny: diskSize 32Mi" in out, out
    assert '"DataVolumes: 1"' in lines, lines

    # What it reported is in the lab: the golden DataVolume and its claim, on the class that CSI-clones.
    namespace, name = WORKER_GOLDEN.split("/")
    (golden,) = found["dvs"]
    assert (golden["metadata"]["namespace"], golden["metadata"]["name"]) == (namespace, name), golden
    assert golden["status"]["phase"] == "Succeeded", golden["status"]
    (claim,) = found["pvcs"]
    assert (claim["metadata"]["namespace"], claim["metadata"]["name"]) == (namespace, name), claim
    assert claim["status"]["phase"] == "Bound" and claim["spec"]["storageClassName"] == "replicated", claim
    strategies = {p["metadata"]["name"]: (p.get("spec") or {}).get("cloneStrategy") for p in found["profile"]}
    assert strategies.get("replicated") == "csi-clone", strategies
    # Rendering writes nothing, the refused render least of all: the tenant namespace holds no disk.
    assert "tenant-demo" in found["namespaces"]
    assert [p for p in found["pvcs"] + found["dvs"] if p["metadata"]["namespace"] == "tenant-demo"] == []

    # No other act ran: none of their objects, namespaces or buckets, and none of their tasks printed.
    assert found["snapshots"] == [] and found["selections"] == [], (found["snapshots"], found["selections"])
    assert found["images"] == [] and found["dbs"] == [], (found["images"], found["dbs"])
    # (The golden namespaces are the platform's: the lab, as Kube-DC, has them from the start.)
    for other in PROJECTS + ("databases", "dbinstance-system"):
        assert other not in found["namespaces"], found["namespaces"]
    assert "demo-image-factory" in found["buckets"], found["buckets"]
    for other in ("demo-upstream", "cdi-os-images", "baked-images"):
        assert other not in found["buckets"], found["buckets"]
    for task in (
        "Make the upstream image",
        "Make each revision's qcow2",
        "Wait until the operator has provisioned all four",
        "Make a small merged-/usr root tree",
    ):
        assert "TASK [%s" % task not in out, task
    for count in (
        '"golden VolumeSnapshots: 0"',
        '"GoldenImageSelections: 0"',
        '"Harvester VirtualMachineImages: 0"',
        '"DBInstances: 0"',
        '"bucket cdi-os-images: 0 objects"',
    ):
        assert count in lines, (count, lines)
    assert re.search(r'"micro-VM images in registry 127\.0\.0\.1:\d+: 0"', lines), lines

    # tools/demo.sh closes with the lab's start, this act's and the summary's seconds, and the wall time.
    assert re.search(r"^  each act:   lab start \d+ s, workers \d+ s, summary \d+ s$", out, re.M), out[-2000:]
    assert re.search(r"^  wall time:  \d+ s for the whole demo", out, re.M), out[-2000:]
