"""baked_image on the lab: a real small qcow2 in the loopback S3 bucket, imported by the lab's Harvester
image controller. Each test works under a random prefix (its own namespace and catalog)."""

from __future__ import annotations

import functools

import pytest
import yaml

from tests.integration.support.runner import play as runner_play
from tests.integration.support.runner import run_playbook
from tests.lab.s3 import s3_client

MODULE = "goldenimage.pipeline.baked_image"
H, V, IMAGES = "harvesterhci.io", "v1beta1", "virtualmachineimages"


STREAM_MODULE = "goldenimage.pipeline.baked_image_stream"
_AUTH = {"kubeconfig": "{{ lookup('env', 'KUBECONFIG') }}"}
play = functools.partial(
    runner_play,
    module_defaults={
        module: _AUTH for module in (MODULE, STREAM_MODULE, "kubernetes.core.k8s_info", "kubernetes.core.k8s")
    },
)


def task(title, /, *, check=None, ignore_errors=False, module=MODULE, register=None, **params):
    entry = {"name": title, module: params}
    if check is not None:
        entry["check_mode"] = check
    if ignore_errors:
        entry["ignore_errors"] = True
    if register:
        entry["register"] = register
    return entry


def refused(run, title):
    """The result of a task that failed (with ignore_errors), or an assertion naming what it did."""
    entry = run.entry(title)
    assert entry["status"] == "ignored", (title, entry["result"])
    return entry["result"]


def two_copies_class(storage, name):
    """A Longhorn template StorageClass keeping 2 copies, whatever an image asks for."""
    storage.create_storage_class(
        {
            "metadata": {"name": name},
            "provisioner": "driver.longhorn.io",
            "parameters": {"numberOfReplicas": "2", "staleReplicaTimeout": "30"},
        }
    )


def catalog_of(kube_client, namespace):
    from kubernetes import client

    cm = client.CoreV1Api(kube_client).read_namespaced_config_map("catalog", namespace)
    return yaml.safe_load(cm.data["catalog.yaml"])


@pytest.mark.suite("idempotence")
def test_register_check_real_idempotent_and_immutable(lab, kube_client, kube_namespace, mirror):
    base = dict(
        name="v20261201-2404",
        namespace=kube_namespace,
        url=mirror["url"],
        checksum=mirror["sha512"],
        os_version="24.04",
        pg_versions=["15", "16", "17"],
        replicas=4,
        catalog={"namespace": kube_namespace, "name": "catalog"},
        wait_timeout=120,
        wait_sleep=1,
    )
    image_name = "ubuntu-2404-postgres-v20261201-2404"
    run = run_playbook(
        play(
            task("check", check=True, **base),
            task(
                "look",
                module="kubernetes.core.k8s_info",
                api_version=f"{H}/{V}",
                kind="VirtualMachineImage",
                namespace=kube_namespace,
            ),
            task("real", **base),
        ),
        env=lab.env(),
        diff=True,
    )
    # The same registration again, alone, so the audit log holds only its requests.
    lab.clear_audit()
    again = run_playbook(play(task("again", **base)), env=lab.env(), diff=True)
    again_writes = lab.mutating_requests()
    rest = run_playbook(
        play(
            task("changed source", ignore_errors=True, **{**base, "checksum": "c" * 128}),
            task("bad revision", ignore_errors=True, **{**base, "name": "v20261201"}),
        ),
        env=lab.env(),
    )
    assert run["check"]["changed"] is True, run.log
    headers = [d.get("before_header") for d in run["check"]["diff"]]
    assert headers == [
        f"VirtualMachineImage {kube_namespace}/{image_name}",
        f"catalog ConfigMap {kube_namespace}/catalog",
    ]
    assert "v20261201-2404:" in run["check"]["diff"][1]["after"]
    assert run["look"]["resources"] == []
    real = run["real"]
    assert real["changed"] is True and not real.get("failed"), run.log
    assert real["progress"] == 100 and real["replicas_in_force"] == 4
    uid = real["image"]["metadata"]["uid"]
    assert real["storage_class"] == f"lh-{uid}"
    labels = real["image"]["metadata"]["labels"]
    assert (
        labels["goldenimage.io/revision"] == "v20261201-2404"
        and labels["goldenimage.io/pg-majors"] == "15-16-17"
    )
    assert real["image"]["spec"]["displayName"] == image_name
    assert real["revision"]["imported"] is True and real["revision"]["storage_class"] == f"lh-{uid}"
    assert again.ok, again.log
    assert again["again"]["changed"] is False, again["again"]
    assert again_writes == [], again_writes
    assert "build a new revision" in refused(rest, "changed source")["msg"]
    assert "24.04" in refused(rest, "bad revision")["msg"]
    doc = catalog_of(kube_client, kube_namespace)
    entry = doc["images"]["v20261201-2404"]
    assert entry["checksum"] == mirror["sha512"] and entry["image"] == {
        "namespace": kube_namespace,
        "name": image_name,
    }


@pytest.mark.lab_only
def test_replica_trap_failed_and_stuck_imports_upload_and_absent(
    lab, kube_client, kube_namespace, mirror, qcow2
):
    from kubernetes import client

    storage = client.StorageV1Api(kube_client)
    template = "tmpl-" + kube_namespace
    two_copies_class(storage, template)
    lab.faults.update(
        {"objects": {f"VirtualMachineImage/{kube_namespace}/ubuntu-2204-postgres-v20260703": "stuck"}}
    )
    common = dict(namespace=kube_namespace, os_version="22.04", pg_versions=["16", "17"], wait_sleep=1)
    absent = dict(name="v20260704", namespace=kube_namespace, state="absent", wait_timeout=120, wait_sleep=1)
    try:
        run = run_playbook(
            play(
                task(
                    "trap",
                    ignore_errors=True,
                    name="v20260701",
                    url=mirror["url"],
                    checksum=mirror["sha512"],
                    replicas=4,
                    storage_class=template,
                    **common,
                ),
                task(
                    "failed",
                    ignore_errors=True,
                    name="v20260702",
                    url=mirror["base"] + "missing.qcow2",
                    retry=0,
                    **common,
                ),
                task(
                    "stuck", ignore_errors=True, name="v20260703", url=mirror["url"], wait_timeout=3, **common
                ),
                task(
                    "upload",
                    name="v20260704",
                    src=str(qcow2),
                    harvester_url=lab.harvester_url,
                    replicas=3,
                    wait_timeout=120,
                    register="up",
                    **common,
                ),
                task(
                    "disk",
                    module="kubernetes.core.k8s",
                    definition={
                        "apiVersion": "v1",
                        "kind": "PersistentVolumeClaim",
                        "metadata": {"name": "pg-1-os", "namespace": kube_namespace},
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "storageClassName": "{{ up.storage_class }}",
                            "resources": {"requests": {"storage": "32Mi"}},
                        },
                    },
                ),
                task("refused", ignore_errors=True, **absent),
                task(
                    "no disk",
                    module="kubernetes.core.k8s",
                    state="absent",
                    kind="PersistentVolumeClaim",
                    namespace=kube_namespace,
                    name="pg-1-os",
                    wait=True,
                ),
                task("check absent", check=True, **absent),
                task("gone", **absent),
                task("gone again", **absent),
            ),
            env=lab.env(),
        )
    finally:
        lab.faults.update({"objects": {}})
        storage.delete_storage_class(template, _preload_content=False)
    trap = refused(run, "trap")
    assert "asked for 4 copies" in trap["msg"] and template in trap["msg"], run.log
    assert "harvesterhci.io/storageClassName" in trap["msg"] and trap["prediction"]["in_force"] == 2
    failed = refused(run, "failed")
    assert "RetryLimitExceeded" in failed["msg"] and "404" in failed["msg"]
    stuck = refused(run, "stuck")
    assert stuck["stuck"] is True and "timed out" in stuck["msg"]
    assert "no conditions yet" in stuck["msg"]
    upload = run["upload"]
    assert upload["changed"] and upload["progress"] == 100 and upload["replicas_in_force"] == 3, run.log
    assert upload["image"]["spec"]["sourceType"] == "upload"
    assert refused(run, "refused")["pvcs"] == [f"{kube_namespace}/pg-1-os"]
    assert run["check absent"]["changed"] and run["gone"]["changed"], run.log
    assert not run["gone again"]["changed"]


def test_concurrent_catalog_writers(lab, kube_client, kube_namespace, mirror):
    """Two registrations at once into one catalog ConfigMap: both land (resourceVersion + retry)."""
    import threading

    results = {}

    def register(revision):
        body = dict(
            name=revision,
            namespace=kube_namespace,
            url=mirror["url"],
            checksum=mirror["sha512"],
            os_version="22.04",
            pg_versions=["16", "17"],
            catalog={"namespace": kube_namespace, "name": "catalog"},
            wait_timeout=120,
            wait_sleep=1,
        )
        results[revision] = run_playbook(play(task("register", **body)), env=lab.env())

    threads = [threading.Thread(target=register, args=(r,)) for r in ("v20260801", "v20260802")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for revision, run in results.items():
        assert run.ok and run["register"]["catalog_changed"], (revision, run.log)
    doc = catalog_of(kube_client, kube_namespace)
    assert {"v20260801", "v20260802"} <= set(doc["images"])


SECRETS = ("X-Amz-Signature", "X-Amz-Credential")


@pytest.mark.suite("secrets")
def test_no_entry_of_the_catalog_keeps_a_presigned_url(lab, kube_client, kube_namespace, mirror):
    """A catalog whose entry of another revision holds a presigned URL (written by an older release): a
    presigned registration stores no signature in any entry, returns none, and the next run changes
    nothing; check mode writes nothing and says the catalog would be rewritten."""
    import json

    from kubernetes import client

    s3 = s3_client(lab.env())
    bucket, key = mirror["url"].split("/")[-3], "baked/" + mirror["url"].rsplit("/", 1)[1]
    presigned = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=900)
    assert all(word in presigned for word in SECRETS)
    signature = presigned.rsplit("X-Amz-Signature=", 1)[1].split("&")[0]
    old = {
        "os_version": "22.04",
        "pg_versions": ["16", "17"],
        "build_date": "2026-06-15",
        "checksum": mirror["sha512"],
        "source": presigned,
        "imported": True,
    }
    seeded = {"version": 1, "default_stream": None, "streams": {}, "images": {"v20260615": old}}
    core = client.CoreV1Api(kube_client)
    core.create_namespaced_config_map(
        kube_namespace, {"metadata": {"name": "catalog"}, "data": {"catalog.yaml": yaml.safe_dump(seeded)}}
    )
    base = dict(
        name="v20261201-2404",
        namespace=kube_namespace,
        url=presigned,
        checksum=mirror["sha512"],
        os_version="24.04",
        pg_versions=["16", "17"],
        catalog={"namespace": kube_namespace, "name": "catalog"},
        wait_timeout=120,
        wait_sleep=1,
    )
    check = run_playbook(play(task("check", check=True, **base)), env=lab.env(), diff=True)
    assert check.ok and check["check"]["changed"] is True, check.log
    assert catalog_of(kube_client, kube_namespace) == seeded
    run = run_playbook(play(task("register", **base)), env=lab.env(), diff=True)
    assert run.ok and run["register"]["catalog_changed"] is True, run.log
    lab.clear_audit()
    again = run_playbook(play(task("again", **base)), env=lab.env(), diff=True)
    assert again.ok and again["again"]["changed"] is False, again.log
    assert lab.mutating_requests() == []
    stored = core.read_namespaced_config_map("catalog", kube_namespace).data["catalog.yaml"]
    for word in (*SECRETS, signature):
        for where, text in (
            ("stored catalog", stored),
            ("check result", json.dumps(check["check"])),
            ("result", json.dumps(run["register"])),
            ("rerun result", json.dumps(again["again"])),
            ("output", check.stdout + run.stdout + again.stdout),
        ):
            assert word not in text, (word, where)
    assert any("v20260615" in w and "signed URL" in w for w in run["register"]["warnings"]), run.log
    assert any("would be written" in w for w in check["check"]["warnings"]), check.log
    doc = yaml.safe_load(stored)
    unsigned = presigned.split("?", 1)[0]
    assert doc["images"]["v20260615"]["source"] == unsigned
    assert doc["images"]["v20261201-2404"]["source"] == unsigned
    assert doc["images"]["v20260615"]["checksum"] == doc["images"]["v20261201-2404"]["checksum"]
    assert doc["images"]["v20261201-2404"]["imported"] is True


UPLOAD_GIB = 2
RSS_LIMIT_MIB = 400


@pytest.mark.slow
@pytest.mark.lab_only
def test_upload_streams_a_multi_gib_file_with_a_small_footprint(lab, kube_namespace, tmp_path):
    """A 2 GiB image is uploaded with the module's peak RSS far below the file's size, with progress."""
    import pathlib
    import sys

    image = tmp_path / "ubuntu-2204-postgres-v20260705.img"
    with open(image, "wb") as handle:  # sparse: no disk used, but every byte is read and sent
        handle.truncate(UPLOAD_GIB * 1024**3)
    rss = tmp_path / "rss.txt"
    wrapper = tmp_path / "measured-python"
    wrapper.write_text(
        "#!%s\n"
        "import resource, subprocess, sys\n"
        "rc = subprocess.call([%r] + sys.argv[1:])\n"
        "with open(%r, 'a') as out:\n"
        "    out.write('%%d\\n' %% resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
        "sys.exit(rc)\n" % (sys.executable, sys.executable, str(rss))
    )
    wrapper.chmod(0o755)
    upload = task(
        "upload",
        name="v20260705",
        namespace=kube_namespace,
        src=str(image),
        harvester_url=lab.harvester_url,
        os_version="22.04",
        pg_versions=["16"],
        replicas=3,
        wait_timeout=600,
        wait_sleep=1,
    )
    measured = ["-e", "ansible_python_interpreter=%s" % wrapper]  # the module's process, measured
    run = run_playbook(play(upload), env=lab.env(), timeout=900, args=measured)
    assert rss.exists(), run.log
    peak_mib = max(int(line) for line in pathlib.Path(rss).read_text().split()) / 1024
    print("module peak RSS %.0f MiB for a %d GiB upload" % (peak_mib, UPLOAD_GIB))
    assert peak_mib < RSS_LIMIT_MIB, "module peak RSS %.0f MiB for a %d GiB upload" % (peak_mib, UPLOAD_GIB)
    assert run.ok, run.log
    result = run["upload"]
    assert result["changed"] and result["progress"] == 100, run.log
    sent = result["upload"]
    assert sent["bytes_sent"] == sent["size"] == UPLOAD_GIB * 1024**3 and sent["percent"] == 100
    assert [pair[0] for pair in sent["reported"]][-1] == 100 and len(sent["reported"]) >= 10, sent
    # The upload talked while it ran: the action plugin printed each of its lines, in order.
    printed = [line for line in result["lines"] if line.startswith("upload %s: " % image)]
    print("\n".join(printed))
    assert len(printed) == len(sent["reported"]) and printed[-1].endswith(
        "after %.1fs" % sent["reported"][-1][1]
    )
    assert "100%% (%d of %d bytes)" % (sent["size"], sent["size"]) in printed[-1], printed


@pytest.mark.lab_only
def test_replica_count_the_class_cannot_hold_is_refused_before_the_image_is_created(
    lab, kube_client, kube_namespace, mirror
):
    """A wrong replica count is predicted from the template class before anything is written: no image is
    created (so none is left to delete), and the first remedy is a class used only for baked images."""
    from kubernetes import client

    storage = client.StorageV1Api(kube_client)
    template = "tmpl2-" + kube_namespace
    two_copies_class(storage, template)
    lab.clear_audit()
    try:
        run = run_playbook(
            play(
                task(
                    "trap",
                    ignore_errors=True,
                    name="v20260706",
                    namespace=kube_namespace,
                    url=mirror["url"],
                    checksum=mirror["sha512"],
                    os_version="22.04",
                    pg_versions=["16"],
                    replicas=4,
                    storage_class=template,
                    wait_timeout=90,
                    wait_sleep=1,
                )
            ),
            env=lab.env(),
        )
        writes = lab.mutating_requests()
    finally:
        storage.delete_storage_class(template, _preload_content=False)
    trap = refused(run, "trap")
    assert "asked for 4 copies" in trap["msg"] and template in trap["msg"], run.log
    assert "To fix it: create a Longhorn StorageClass used only for baked images" in trap["msg"]
    assert trap["refused"] is True and "cleaned_up" not in trap, trap
    assert writes == [], writes
    left = client.CustomObjectsApi(kube_client).list_namespaced_custom_object(H, V, kube_namespace, IMAGES)
    assert left["items"] == []
