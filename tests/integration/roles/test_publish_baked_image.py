"""playbooks/publish_baked_image.yml end to end on the lab.

A small real qcow2 goes through every step: the EOL guard, packer_build's output steps (given as
``packer_build_artifact``, as a Packer run would hand it over), the checksum check, the mirror bucket on
the loopback S3 server, the lab's Harvester image controller downloading it by presigned URL, the catalog
ConfigMap and the stream tip. A second run and every step run alone with its tag change nothing; an
EOL refusal, and an artifact that is not sealed, stop before anything reaches the bucket or the cluster.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json

import pytest
import yaml

from tests.integration.modules.test_baked_image_rebuild_due import streams_repos  # noqa: F401  pylint: disable=unused-import
from tests.integration.support import disks
from tests.integration.support.runner import ROOT, run_playbook
from tests.integration.support.smoke import catalog_configmap, running_database
from tests.lab.s3 import s3_client

PLAYBOOK = ROOT / "playbooks" / "publish_baked_image.yml"
REVISION = "v20261129"
IMAGE = "ubuntu-2204-postgres-" + REVISION
ARTIFACT = IMAGE + ".qcow2"
# One task that only its own step runs, per tag.
STEP_TASKS = {
    "eol": "EOL guard, before anything is built or uploaded",
    "build": "Look for a finished build of this revision",
    "checksums": "Hash the artifact",
    "seal": "Verify offline that the artifact is sealed, before anything is uploaded or registered",
    "upload": "Register the revision with Harvester and record it in the catalog",
    "stream": "Move the tip of the stream to the revision",
    "operator": "Point the DBInstance operator at the default stream and wait for its rollout",
    "summary": "Summarise what changed",
}
EOL_TASK = STEP_TASKS["eol"]


SEALED_TREE = {
    # What the revision is declared to be, read from the bytes: Ubuntu 22.04 with the servers of 15, 16, 17.
    "etc/os-release": 'PRETTY_NAME="Ubuntu 22.04.5 LTS"\nID=ubuntu\nVERSION_ID="22.04"\n',
    "usr/lib/postgresql/15/bin/postgres": b"\x7fELF",
    "usr/lib/postgresql/16/bin/postgres": b"\x7fELF",
    "usr/lib/postgresql/17/bin/postgres": b"\x7fELF",
    "etc/postgresql/16/main/start.conf": "manual\n",
    "etc/postgresql/17/main/start.conf": "manual\n",
    "etc/systemd/system/multi-user.target.wants/": b"",
    "etc/systemd/system/timers.target.wants/": b"",
    "usr/share/doc/postgresql-17/changelog": "postgresql-17 17.2-1.pgdg22.04+1 amd64\n" * 20000,
}


def qcow2(path, changes=None):
    """A real qcow2 of a sealed Linux root (GPT, ext4 made by mkfs.ext4 -d), like a baked system."""
    missing = [tool for tool in disks.missing_tools() if tool in ("sgdisk", "mkfs.ext4", "qemu-img", "dd")]
    assert not missing, "missing tools (make deps installs them): %s" % ", ".join(missing)
    tree = disks.ext4_tree(path.parent / (path.stem + "-root"), dict(SEALED_TREE, **(changes or {})))
    raw = disks.linux_disk(path.with_suffix(".raw"), tree, disk_size=32 * disks.MIB)["path"]
    disks.qcow2(raw, path)
    raw.unlink()
    return path


@pytest.fixture
def s3(lab):
    return s3_client(lab.env())


def empty_bucket(s3, bucket):
    if bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        return
    for obj in s3.list_objects_v2(Bucket=bucket).get("Contents", []):
        s3.delete_object(Bucket=bucket, Key=obj["Key"])
    s3.delete_bucket(Bucket=bucket)


def listing(s3, bucket):
    return [
        (o["Key"], o["ETag"], o["LastModified"])
        for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    ]


def publish(lab, extra, *args):
    return run_playbook(PLAYBOOK, env=lab.env(), extra_vars=extra, args=list(args))


def changed_tasks(run):
    return [entry["task"] for entry in run.tasks if entry["changed"]]


def line_of(summary, prefix):
    found = [line for line in summary if line.startswith(prefix)]
    assert len(found) == 1, (prefix, summary)
    return found[0]


def catalog_of(kube_client, namespace):
    from kubernetes import client

    cm = client.CoreV1Api(kube_client).read_namespaced_config_map("catalog", namespace)
    return yaml.safe_load(cm.data["catalog.yaml"])


def inputs(tmp_path, namespace, bucket, **more):
    return dict(
        {
            "publish_artifact": str(qcow2(tmp_path / "disk.qcow2")),
            "publish_build_date": "20261129",
            "publish_output_dir": str(tmp_path / "out"),
            "publish_bucket": bucket,
            "publish_namespace": namespace,
            "publish_replicas": 4,
            "publish_catalog": {"namespace": namespace, "name": "catalog"},
            "harvester_upload_wait_sleep": 1,
            "harvester_upload_wait_timeout": 60,
        },
        **more,
    )


def test_publish_end_to_end_then_nothing_changes(lab, kube_client, kube_namespace, s3, tmp_path, monkeypatch):
    from kubernetes import client

    bucket = "baked-" + kube_namespace
    # The bucket exists already (harvester_upload_create_bucket passes through the playbook).
    s3.create_bucket(Bucket=bucket)
    extra = inputs(tmp_path, kube_namespace, bucket, harvester_upload_create_bucket=False)
    try:
        first = publish(lab, extra)
        assert first.ok, first.log
        changed = changed_tasks(first)
        for task in (
            "Write the compressed artifact",
            "Write the manifest",
            "Copy the artifact into the bucket by digest",
            "Register the revision with Harvester and record it in the catalog",
            "Move the tip of the stream to the revision",
        ):
            assert task in changed, (task, changed)

        manifest = json.loads((tmp_path / "out" / (IMAGE + ".manifest.json")).read_text())
        sums = manifest["checksums"]
        key = f"ubuntu-22.04-postgres/{REVISION}/sha256-{sums['sha256']}/{ARTIFACT}"
        objects = listing(s3, bucket)
        assert [o[0] for o in objects if o[0].endswith(".qcow2")] == [key], objects
        assert [o[0] for o in objects if o[0].endswith(".manifest.json")] == [
            manifest_key(tmp_path, REVISION)
        ]
        assert s3.head_object(Bucket=bucket, Key=key)["Metadata"]["sha256"] == sums["sha256"]

        image = client.CustomObjectsApi(kube_client).get_namespaced_custom_object(
            "harvesterhci.io", "v1beta1", kube_namespace, "virtualmachineimages", IMAGE
        )
        url = image["spec"]["url"]
        assert (
            url.startswith(f"{lab.env()['AWS_ENDPOINT_URL']}/{bucket}/{key}?") and "X-Amz-Signature=" in url
        )
        assert image["spec"]["checksum"] == sums["sha512"]
        assert image["spec"]["storageClassParameters"]["numberOfReplicas"] == "4"
        assert {c["type"]: c["status"] for c in image["status"]["conditions"]}["Imported"] == "True"

        doc = catalog_of(kube_client, kube_namespace)
        entry = doc["images"][REVISION]
        # The catalog keeps the object's URL, never the signature (a presigned URL is a credential).
        assert entry["imported"] is True and entry["checksum"] == sums["sha512"]
        assert entry["source"] == url.split("?")[0] and "Signature" not in json.dumps(doc)
        assert entry["pg_versions"] == ["15", "16", "17"]
        assert doc["streams"] == {"22.04": {"tip": REVISION, "validated": False}}
        summary = first["Summarise what changed"]["msg"]
        assert any(line.startswith("bucket: s3://") and line.endswith(" bytes") for line in summary), summary
        assert line_of(summary, "stream 22.04: ").startswith(
            "stream 22.04: moved or updated, tip v20261129, validated False"
        ), summary
        assert line_of(summary, "operator: ") == "operator: not configured (publish_operator)", summary

        # The second run, a check-mode run and each step alone, at once: none may change anything.
        if lab.is_lab:
            lab.clear_audit()
        runs = {"again": (), "check": ("--check",)} | {tag: ("--tags", tag) for tag in STEP_TASKS}
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(runs)) as pool:
            futures = {name: pool.submit(publish, lab, extra, *args) for name, args in runs.items()}
            results = {name: future.result() for name, future in futures.items()}
        for name, run in results.items():
            assert run.ok, (name, run.log)
            assert changed_tasks(run) == [], (name, changed_tasks(run))
        again = results["again"]
        assert all(again.results(task) for task in STEP_TASKS.values()), again.task_names()
        assert "already there, skipped" in " ".join(again["Summarise what changed"]["msg"])
        for tag, task in STEP_TASKS.items():
            ran = results[tag].task_names()
            assert task in ran, (tag, ran)
            others = [t for other, t in STEP_TASKS.items() if other != tag and t in ran]
            # The upload step hashes the artifact when the play did not (here, with --tags upload alone),
            # and verifies the seal first. The operator follows a stream promotion: --tags stream runs it too.
            alone = {
                "upload": [STEP_TASKS["checksums"], STEP_TASKS["seal"]],
                "stream": [STEP_TASKS["operator"]],
            }
            alone = alone.get(tag, [])
            assert others in ([], alone), (tag, others)
        if lab.is_lab:
            writes = [r for r in lab.mutating_requests() if r["namespace"] == kube_namespace]
            assert writes == [], writes
        assert listing(s3, bucket) == objects
        assert catalog_of(kube_client, kube_namespace) == doc

        # Signing the revision off (and making its stream the default) is asked for explicitly, in a run of
        # its own, on a smoke test: a test DBInstance provisioned from the revision, Available on it.
        monkeypatch.setenv("LAB_DBINSTANCE_CATALOG", kube_namespace + "/catalog")
        running_database(lab, kube_client, kube_namespace, "smoke", REVISION, engine="17")
        smoke = {"namespace": kube_namespace, "name": "smoke"}
        signed = publish(
            lab,
            dict(extra, publish_validated=True, publish_default_stream=True, publish_smoke_test=smoke),
            "--tags",
            "stream",
        )
        assert signed.ok, signed.log
        assert changed_tasks(signed) == ["Move the tip of the stream to the revision"]
        doc = catalog_of(kube_client, kube_namespace)
        assert doc["default_stream"] == "22.04"
        assert doc["streams"]["22.04"] == {"tip": REVISION, "validated": True}

        # The next build is published, but the default stream's tip waits for its sign-off.
        later = publish(lab, dict(extra, publish_build_date="20261130"))
        assert later.ok, later.log
        assert later.entry("Move the tip of the stream to the revision")["status"] == "skipped"
        doc = catalog_of(kube_client, kube_namespace)
        assert doc["streams"]["22.04"] == {"tip": REVISION, "validated": True}
        assert doc["images"]["v20261130"]["imported"] is True
        held = line_of(later["Summarise what changed"]["msg"], "stream 22.04: ")
        assert held.startswith("stream 22.04: tip held at v20261129") and "publish_validated=true" in held, (
            held
        )
        assert len([o for o in listing(s3, bucket) if o[0].endswith(".qcow2")]) == 2
    finally:
        empty_bucket(s3, bucket)


@pytest.mark.lab_only
def manifest_key(tmp_path, revision, stream="22.04"):
    """The key of the build manifest beside the artifact: the revision's prefix, by its own digest."""
    stem = "ubuntu-%s-postgres-%s" % (stream.replace(".", ""), revision)
    path = tmp_path / "out" / (stem + ".manifest.json")
    return "ubuntu-%s-postgres/%s/sha256-%s/%s.manifest.json" % (
        stream,
        revision,
        hashlib.sha256(path.read_bytes()).hexdigest(),
        stem,
    )


def build_manifest(path, stream, packages):
    """The build manifest provision.sh leaves in the build VM (packer_build_artifact_build_manifest)."""
    pg = {
        m: {"minor": "%s.2" % m, "package_version": "%s.2-1.pgdg%s+1" % (m, stream)}
        for m in ("15", "16", "17")
    }
    path.write_text(
        json.dumps(
            {
                "os_version": stream,
                "kernel": "6.8.0-49-generic",
                "postgresql": pg,
                "packages": ["%s=%s" % kv for kv in sorted(packages.items())],
            }
        )
    )
    return str(path)


@pytest.mark.lab_only
def test_publish_records_the_package_manifest_and_the_daily_check_reads_every_stream(
    lab,
    kube_client,
    kube_namespace,
    s3,
    streams_repos,  # noqa: F811 (the imported fixture)
    tmp_path,
):
    """Two streams published with their build manifests: each manifest is an object beside its artifact
    in the bucket and a record in its catalog entry, so the rebuild check, from the catalog alone (no
    manifest file), reports per stream with the security updates each tip lacks."""
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import apt_release

    from tests.integration.modules.test_baked_image_rebuild_due import INSTALLED, NOBLE_INSTALLED

    bucket = "baked-" + kube_namespace
    jammy_dir, noble_dir = tmp_path / "jammy", tmp_path / "noble"
    jammy_dir.mkdir()
    noble_dir.mkdir()
    noble_release = (
        'PRETTY_NAME="Ubuntu 24.04.1 LTS"\nID=ubuntu\nVERSION_ID="24.04"\nVERSION_CODENAME=noble\n'
    )
    builds = {
        "22.04": inputs(
            jammy_dir,
            kube_namespace,
            bucket,
            publish_artifact_build_manifest=build_manifest(jammy_dir / "build.json", "22.04", INSTALLED),
        ),
        "24.04": dict(
            inputs(
                noble_dir,
                kube_namespace,
                bucket,
                publish_artifact=str(qcow2(noble_dir / "noble.qcow2", {"etc/os-release": noble_release})),
                publish_artifact_build_manifest=build_manifest(
                    noble_dir / "build.json", "24.04", NOBLE_INSTALLED
                ),
            ),
            publish_os_version="24.04",
            publish_build_date="20261201",
        ),
    }
    revisions = {"22.04": REVISION, "24.04": "v20261201-2404"}
    try:
        for stream, extra in builds.items():
            run = publish(lab, extra)
            assert run.ok, (stream, run.log)
        doc = catalog_of(kube_client, kube_namespace)
        keys = [o[0] for o in listing(s3, bucket)]
        for stream, folder in (("22.04", jammy_dir), ("24.04", noble_dir)):
            revision = revisions[stream]
            key = manifest_key(folder, revision, stream)
            written = (folder / "out" / key.rsplit("/", 1)[1]).read_bytes()
            # Beside the artifact: under the revision's prefix, the very bytes packer_build wrote.
            assert key in keys, (key, keys)
            artifact = [k for k in keys if k.startswith(key.split("/sha256-")[0]) and k.endswith(".qcow2")]
            assert len(artifact) == 1, keys
            assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == written
            record = doc["images"][revision]["manifest"]
            assert record["sha256"] == hashlib.sha256(written).hexdigest()
            assert record["object"] == "s3://%s/%s" % (bucket, key)
            assert record["postgresql"] == {"15": "15.2", "16": "16.2", "17": "17.2"}
            packages = apt_release.manifest_packages(record, revision)
            assert packages == (INSTALLED if stream == "22.04" else NOBLE_INSTALLED)
        assert doc["streams"] == {
            "22.04": {"tip": REVISION, "validated": False},
            "24.04": {"tip": "v20261201-2404", "validated": False},
        }

        # The daily check: the catalog alone, every stream.
        check = {
            "rebuild_due_catalog": {"namespace": kube_namespace, "name": "catalog"},
            "rebuild_due_apt_repositories": streams_repos,
        }
        lab.clear_audit()
        due = run_playbook(
            ROOT / "playbooks" / "baked_image_rebuild_due.yml", env=lab.env(), extra_vars=check
        )
        assert due.ok, due.log
        verdict = due["Compare every stream's tip with the repositories (changes nothing)"]
        assert verdict["streams"]["22.04"]["security_updates"] == [
            "curl 7.81.0-1ubuntu1.17",
            "openssl 3.0.2-0ubuntu1.16",
        ], verdict["streams"]["22.04"]
        assert verdict["streams"]["24.04"]["security_updates"] == [
            "libc6 2.39-0ubuntu8.4",
            "openssl 3.0.13-0ubuntu3.5",
        ], verdict["streams"]["24.04"]
        said = due["Say, per stream, whether a rebuild is due"]["msg"]
        assert any(line.startswith("22.04 v20261129: security: openssl ") for line in said), said
        assert any(line.startswith("24.04 v20261201-2404: security: libc6 ") for line in said), said
        assert [r for r in lab.mutating_requests() if r["namespace"] == kube_namespace] == []
    finally:
        empty_bucket(s3, bucket)


def test_eol_refusal_stops_before_anything_is_uploaded(lab, kube_namespace, s3, tmp_path):
    bucket = "baked-" + kube_namespace
    # A same-day rebuild: its revision is the day's second.
    extra = inputs(tmp_path, kube_namespace, bucket, publish_pg_versions=["13", "16", "17"], publish_build=2)
    lab.clear_audit()
    try:
        run = publish(lab, extra)
        assert not run.ok, run.log
        named = run["Name the revision and its files"]["ansible_facts"]
        assert named["publish_revision"] == "v20261129-r02", named
        assert named["publish_manifest_path"].endswith("/ubuntu-2204-postgres-v20261129-r02.manifest.json")
        failed = [entry for entry in run.tasks if entry["status"] == "failed"]
        assert [entry["task"] for entry in failed] == [EOL_TASK], run.log
        msg = failed[0]["result"]["msg"]
        assert "PostgreSQL 13" in msg and "2025-11-13" in msg, msg
        assert run.task_names()[-1] == EOL_TASK
        assert [r for r in lab.audit() if r["namespace"] == kube_namespace] == []
        assert bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
        assert not (tmp_path / "out").exists()
    finally:
        empty_bucket(s3, bucket)


@pytest.mark.lab_only
def test_the_presigned_url_is_never_printed_or_stored(lab, kube_client, kube_namespace, s3, tmp_path):
    """A -vvv publish: the signature Harvester downloads with appears only in the image's own spec."""
    from urllib.parse import parse_qs, urlsplit

    from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import redact
    from kubernetes import client

    bucket = "baked-" + kube_namespace
    try:
        run = publish(lab, inputs(tmp_path, kube_namespace, bucket), "-vvv")
        assert run.ok, run.log
        custom = client.CustomObjectsApi(kube_client)
        image = custom.get_namespaced_custom_object(
            "harvesterhci.io", "v1beta1", kube_namespace, "virtualmachineimages", IMAGE
        )
        signature = parse_qs(urlsplit(image["spec"]["url"]).query)["X-Amz-Signature"][0]
        # Valid only as long as the role waits for the import, not a day: the spec keeps the URL readable.
        assert parse_qs(urlsplit(image["spec"]["url"]).query)["X-Amz-Expires"] == ["1800"]
        core = client.CoreV1Api(kube_client)
        left = [run.stdout, run.stderr, json.dumps(run.tasks)]
        left.append(json.dumps(core.read_namespaced_config_map("catalog", kube_namespace).data))
        left.append(
            json.dumps(
                client.ApiClient().sanitize_for_serialization(core.list_namespaced_event(kube_namespace))
            )
        )
        left.extend(p.read_text(errors="replace") for p in (tmp_path / "out").glob("*.json"))
        text = "\n".join(left)
        for form in redact.secret_forms(signature):
            assert form not in text, "the signature leaked as %r" % form
    finally:
        empty_bucket(s3, bucket)


INPUTS_TASK = "Check every input the build and the upload need, before anything is built"


def test_missing_inputs_fail_before_the_eol_guard_and_the_build(lab, kube_namespace, s3, tmp_path):
    bucket = "baked-" + kube_namespace
    extra = inputs(tmp_path, kube_namespace, bucket, publish_replicas=0, publish_catalog={"name": "catalog"})
    extra.pop("publish_artifact")
    lab.clear_audit()
    run = publish(lab, extra)
    assert not run.ok, run.log
    failed = [entry for entry in run.tasks if entry["status"] == "failed"]
    assert [entry["task"] for entry in failed] == [INPUTS_TASK], run.log
    msg = failed[0]["result"]["msg"]
    assert "publish_replicas is not set" in msg, msg
    assert "publish_catalog must be {namespace, name} of the catalog ConfigMap or {path}" in msg, msg
    assert "nothing to build from: give publish_base_image" in msg, msg
    assert EOL_TASK not in run.task_names() and STEP_TASKS["build"] not in run.task_names()
    assert [r for r in lab.audit() if r["namespace"] == kube_namespace] == []
    assert not (tmp_path / "out").exists()


SEAL_TASK = STEP_TASKS["seal"]


@pytest.mark.parametrize(
    "changes, check, words",
    [
        (
            {"etc/systemd/system/timers.target.wants/apt-daily.timer": "[Unit]\n"},
            "background_apt_disabled",
            "timers.target.wants/apt-daily.timer",
        ),
        (
            {"etc/postgresql/17/main/start.conf": "auto\n"},
            "postgresql_clusters_at_boot",
            "17/main (/etc/postgresql/17/main/start.conf says auto)",
        ),
        (
            {"etc/ssh/ssh_host_ed25519_key": "-----BEGIN OPENSSH PRIVATE KEY-----\n"},
            "ssh_host_keys_absent",
            "ssh_host_ed25519_key",
        ),
    ],
)
def test_an_unsealed_artifact_is_refused_before_anything_is_written(
    lab, kube_client, kube_namespace, s3, tmp_path, changes, check, words
):
    from kubernetes import client

    bucket = "baked-" + kube_namespace
    extra = inputs(tmp_path, kube_namespace, bucket)
    extra["publish_artifact"] = str(qcow2(tmp_path / "unsealed.qcow2", changes))
    if lab.is_lab:
        lab.clear_audit()
    try:
        run = publish(lab, extra)
        assert not run.ok, run.log
        failed = [entry for entry in run.tasks if entry["status"] == "failed"]
        assert [entry["task"] for entry in failed] == [SEAL_TASK], run.log
        result = failed[0]["result"]
        assert result.get("failed_checks") == [check], result
        assert "is not sealed: %s: " % check in result["msg"] and words in result["msg"], result["msg"]
        assert run.task_names()[-1] == SEAL_TASK
        # The artifact was built and checked, and nothing left the controller.
        assert (tmp_path / "out" / (IMAGE + ".manifest.json")).is_file()
        if lab.is_lab:
            assert [r for r in lab.audit() if r["namespace"] == kube_namespace] == []
        assert bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
        core = client.CoreV1Api(kube_client)
        assert [
            c.metadata.name
            for c in core.list_namespaced_config_map(kube_namespace).items
            if c.metadata.name == "catalog"
        ] == []
        images = client.CustomObjectsApi(kube_client).list_namespaced_custom_object(
            "harvesterhci.io", "v1beta1", kube_namespace, "virtualmachineimages"
        )
        assert images["items"] == []
    finally:
        empty_bucket(s3, bucket)


OPERATOR_TASK = STEP_TASKS["operator"]


@pytest.mark.lab_only
@pytest.mark.suite("idempotence")
def test_stream_promotion_flips_the_operator_env_only_onto_a_validated_stream(
    lab, kube_client, kube_namespace, nodes, tmp_path, monkeypatch
):
    """The seed's flip: the 24.04 stream is published, refused as the default while not validated (the
    operator untouched), then signed off and made the default: BACKING_IMAGE_OS_VERSION follows, and
    BACKING_IMAGE_REPLICAS takes the schedulable node count, after the rollout. Again: nothing."""
    from kubernetes import client

    from tests.integration.modules.test_dbinstance_operator_env import imported_images, operator_deployment

    apps = client.AppsV1Api(kube_client)
    images = imported_images(("v20261129", "22.04"), ("v20261201-2404", "24.04"))
    catalog_configmap(kube_client, kube_namespace, images, "v20261129")
    env = [{"name": "BACKING_IMAGE_OS_VERSION", "value": "22.04"}]
    apps.create_namespaced_deployment(kube_namespace, operator_deployment("dbinstance-operator", env))
    extra = {
        "publish_os_version": "24.04",
        "publish_build_date": "20261201",
        "publish_catalog": {"namespace": kube_namespace, "name": "catalog"},
        "publish_operator": {"namespace": kube_namespace, "name": "dbinstance-operator"},
        "publish_operator_replicas_from_nodes": True,
        "publish_operator_timeout": 60,
    }

    def operator_env():
        obj = apps.read_namespaced_deployment("dbinstance-operator", kube_namespace)
        return {e.name: e.value for e in obj.spec.template.spec.containers[0].env}

    # The default on a stream not validated: the stream step refuses, the operator step never runs.
    lab.clear_audit()
    refused = publish(lab, dict(extra, publish_default_stream=True), "--tags", "stream")
    assert not refused.ok
    assert "24.04 (tip v20261201-2404) is not validated and cannot become the default" in refused.log
    assert operator_env() == {"BACKING_IMAGE_OS_VERSION": "22.04"}
    assert [r for r in lab.mutating_requests() if r["resource"] == "deployments"] == []

    # Published, not the default: the operator is only reported on (the replica count drifts).
    moved = publish(lab, extra, "--tags", "stream,summary")
    assert moved.ok, moved.log
    line = line_of(moved["Summarise what changed"]["msg"], "operator: ")
    assert "BACKING_IMAGE_OS_VERSION 22.04" in line and "BACKING_IMAGE_REPLICAS 3" in line, line
    assert line.endswith("no drift"), line

    # Smoke-tested on a test DBInstance provisioned from the revision, signed off and made the default:
    # the env follows after the rollout.
    monkeypatch.setenv("LAB_DBINSTANCE_CATALOG", kube_namespace + "/catalog")
    running_database(lab, kube_client, kube_namespace, "smoke", "v20261201-2404", engine="17")
    signed = dict(
        extra,
        publish_validated=True,
        publish_default_stream=True,
        publish_smoke_test={"namespace": kube_namespace, "name": "smoke"},
    )
    flipped = publish(lab, signed, "--tags", "stream,summary")
    assert flipped.ok, flipped.log
    assert OPERATOR_TASK in changed_tasks(flipped), changed_tasks(flipped)
    result = flipped[OPERATOR_TASK]
    assert result["done"] is True and result["drift"] == [], result
    assert operator_env() == {"BACKING_IMAGE_OS_VERSION": "24.04", "BACKING_IMAGE_REPLICAS": "3"}
    assert catalog_of(kube_client, kube_namespace)["default_stream"] == "24.04"
    line = line_of(flipped["Summarise what changed"]["msg"], "operator: ")
    assert "updated and rolled out, BACKING_IMAGE_OS_VERSION 24.04" in line and line.endswith("no drift"), (
        line
    )

    lab.clear_audit()
    # The same sign-off again, without a new smoke test to record (each one recorded is a change).
    again = publish(lab, dict(signed, publish_smoke_test={}), "--tags", "stream,operator,summary")
    assert again.ok, again.log
    assert changed_tasks(again) == [], changed_tasks(again)
    assert lab.mutating_requests() == []

    # The drift report of the repave playbook names the operator's env against the catalog.
    apps.patch_namespaced_deployment(
        "dbinstance-operator",
        kube_namespace,
        {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            operator_deployment("x", env)["spec"]["template"]["spec"]["containers"][0]
                        ]
                    }
                }
            }
        },
    )
    report = run_playbook(
        ROOT / "playbooks" / "repave_dbinstances.yml",
        env=lab.env(),
        extra_vars={
            "repave_namespace": kube_namespace,
            "repave_catalog": {"namespace": kube_namespace, "name": "catalog"},
            "repave_operator": {"namespace": kube_namespace, "name": "dbinstance-operator"},
            "repave_report_only": True,
        },
    )
    assert report.ok, report.log
    shown = report["Show the operator's drift"]["msg"]
    assert shown[0].startswith(
        "operator %s/dbinstance-operator: BACKING_IMAGE_OS_VERSION=22.04" % kube_namespace
    ), shown
    assert any(
        "BACKING_IMAGE_OS_VERSION is 22.04 but the catalog's default OS stream is 24.04" in s for s in shown
    ), shown
    assert len(shown) == 2, shown  # the replica count still matches the 3 schedulable nodes


TIMEOUTS_TASK = "Refuse zero or negative timeouts and intervals before anything is built or written"
PREDICT_TASK = "Predict the copies the revision's backing image gets, before anything is built or written"


@pytest.mark.lab_only
def test_what_is_known_at_the_start_is_refused_before_the_build_or_any_write(
    lab, kube_client, kube_namespace, s3, tmp_path
):
    """Timeouts of 0, a default flip in a run that builds, and a replica count the target class cannot hold
    (predicted in check mode too, with reads only) stop the run before the build, the bucket or the API."""
    from kubernetes import client

    from tests.integration.modules.test_baked_image import two_copies_class

    bucket = "baked-" + kube_namespace
    storage = client.StorageV1Api(kube_client)
    template = "tmpl-publish-" + kube_namespace
    two_copies_class(storage, template)
    cases = [
        ({"publish_operator_timeout": 0}, (), TIMEOUTS_TASK, "option publish_operator_timeout: 0 is not"),
        (
            {"harvester_upload_wait_sleep": 0},
            (),
            TIMEOUTS_TASK,
            "option harvester_upload_wait_sleep: 0 is not",
        ),
        ({"publish_default_stream": True}, (), INPUTS_TASK, "publish_default_stream=true are refused"),
        (
            {"harvester_upload_storage_class": template},
            (),
            PREDICT_TASK,
            "Harvester would use numberOfReplicas=2",
        ),
        ({"harvester_upload_storage_class": template}, ("--check",), PREDICT_TASK, "first remedy"),
    ]
    try:
        for more, args, task, words in cases:
            extra = inputs(tmp_path, kube_namespace, bucket, **more)
            lab.clear_audit()
            run = publish(lab, extra, *args)
            assert not run.ok, (more, run.log)
            failed = [entry for entry in run.tasks if entry["status"] == "failed"]
            assert [entry["task"] for entry in failed] == [task], (more, run.log)
            msg = json.dumps(failed[0]["result"])
            if words == "first remedy":  # check mode: the same refusal, from reads only
                words = "create a Longhorn StorageClass used only for baked images"
            assert words in msg, (more, msg)
            assert lab.mutating_requests() == [], (more, lab.mutating_requests())
            assert EOL_TASK not in run.task_names() and STEP_TASKS["build"] not in run.task_names()
            assert not (tmp_path / "out").exists()
            assert bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    finally:
        storage.delete_storage_class(template, _preload_content=False)
        empty_bucket(s3, bucket)
