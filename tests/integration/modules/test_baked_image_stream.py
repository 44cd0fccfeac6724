"""baked_image_stream and the engine_version filter on the lab, with the catalog in a ConfigMap (and a
file), every refusal, and writes that have to ride out injected 409 conflicts."""

from __future__ import annotations

import time

import pytest
import yaml

from tests.integration.modules.test_baked_image import play, refused, task
from tests.integration.support.runner import run_playbook
from tests.integration.support.smoke import catalog_configmap, running_database

MODULE = "goldenimage.pipeline.baked_image_stream"
H, V, IMAGES = "harvesterhci.io", "v1beta1", "virtualmachineimages"


DATA_KEY = "catalog.yaml"


def seed_catalog(namespace, live_image):
    """The catalog as the operator's YAML: two images of 24.04 not yet known to be imported."""
    images = {}
    for name, os_version, majors, imported, ref in (
        ("v20260615", "22.04", ["15", "16", "17"], True, None),
        ("v20261201-2404", "24.04", ["15", "16", "17"], True, None),
        ("v20270301-2404", "24.04", ["16", "17", "18"], False, {"namespace": namespace, "name": "absent"}),
        ("v20270401-2404", "24.04", ["16", "17", "18"], False, {"namespace": namespace, "name": live_image}),
    ):
        entry = {
            "os_version": os_version,
            "pg_versions": majors,
            "build_date": "%s-%s-%s" % (name[1:5], name[5:7], name[7:9]),
            "checksum": "a" * 128,
            "source": "s3://mirror/" + name,
            "imported": imported,
            # What baked_image read from each artifact's bytes when it registered it.
            "facts": {
                "os_release": {"id": "ubuntu", "version_id": os_version, "version_codename": None},
                "pg_majors": majors,
                "initialized_clusters": [],
                "private_keys": [],
                "machine_id": "empty",
            },
        }
        if ref:
            entry["image"] = ref
        images[name] = entry
    return yaml.safe_dump({"version": 1, "default_stream": None, "streams": {}, "images": images})


def live_imported_image(kube_client, namespace, mirror, name="live"):
    """A VirtualMachineImage the catalog does not know is imported yet."""
    from kubernetes import client

    custom = client.CustomObjectsApi(kube_client)
    body = {
        "apiVersion": f"{H}/{V}",
        "kind": "VirtualMachineImage",
        "metadata": {"name": name},
        "spec": {"displayName": name, "sourceType": "download", "url": mirror["url"]},
    }
    custom.create_namespaced_custom_object(H, V, namespace, IMAGES, body)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        obj = custom.get_namespaced_custom_object(H, V, namespace, IMAGES, name)
        conditions = (obj.get("status") or {}).get("conditions") or []
        if any(c["type"] == "Imported" and c["status"] == "True" for c in conditions):
            return name
        time.sleep(0.1)
    raise AssertionError("the live image did not import: %s" % obj.get("status"))


def smoke_test_run(lab, namespace, revision, where, faults=False, **more):
    """baked_image_stream recording the smoke test of ``revision`` on the test DBInstance ``smoke`` (with
    ``faults``, through the lab's fault proxy)."""
    smoke = {"namespace": namespace, "name": "smoke"}
    body = dict(module=MODULE, os_version="22.04", revision=revision, smoke_test=smoke, catalog=where, **more)
    return run_playbook(play(task("smoke test", **body)), env=lab.env(faults=faults))


@pytest.mark.lab_only
@pytest.mark.suite("idempotence")
def test_stream_moves_refusals_filter_and_conflicts(
    lab, kube_client, kube_namespace, mirror, tmp_path, monkeypatch
):
    from kubernetes import client

    live = live_imported_image(kube_client, kube_namespace, mirror)
    core = client.CoreV1Api(kube_client)
    text = seed_catalog(kube_namespace, live)
    core.create_namespaced_config_map(
        kube_namespace, {"metadata": {"name": "catalog"}, "data": {DATA_KEY: text}}
    )
    file_catalog = tmp_path / "catalog.yaml"
    file_catalog.write_text(text)
    where = {"namespace": kube_namespace, "name": "catalog"}
    # The sign-off rests on a smoke test: a test DBInstance provisioned from v20260615 (the operator reads
    # this test's catalog), recorded before the stream is validated.
    monkeypatch.setenv("LAB_DBINSTANCE_CATALOG", kube_namespace + "/catalog")
    running_database(lab, kube_client, kube_namespace, "smoke", "v20260615", engine="17")
    tested = smoke_test_run(lab, kube_namespace, "v20260615", where)
    assert tested.ok and tested["smoke test"]["smoke_test"]["result"] == "passed", tested.log
    first = dict(os_version="22.04", revision="v20260615", validated=True, default=True, catalog=where)
    lab.faults.update({"conflict_rate": 0.5, "seed": 11})
    lab.clear_audit()
    try:
        run = run_playbook(
            play(task("check", check=True, module=MODULE, **first), task("real", module=MODULE, **first)),
            env=lab.env(faults=True),
            diff=True,
        )
        conflicts = [
            r
            for r in lab.audit()
            if r["resource"] == "configmaps" and r["code"] == 409 and r["verb"] == "update"
        ]
        # The same move again, alone, so the audit log holds only its requests.
        lab.clear_audit()
        again = run_playbook(play(task("again", module=MODULE, **first)), env=lab.env(faults=True), diff=True)
        again_writes = lab.mutating_requests()
        lab.clear_audit()
        rest = run_playbook(
            play(
                task("missing", ignore_errors=True, module=MODULE, **{**first, "revision": "v20990101"}),
                task(
                    "wrong os", ignore_errors=True, module=MODULE, **{**first, "revision": "v20261201-2404"}
                ),
                task(
                    "not imported",
                    ignore_errors=True,
                    module=MODULE,
                    os_version="24.04",
                    revision="v20270301-2404",
                    catalog=where,
                ),
                task(
                    "unvalidated default",
                    ignore_errors=True,
                    module=MODULE,
                    os_version="24.04",
                    revision="v20261201-2404",
                    default=True,
                    catalog=where,
                ),
                task(
                    "live import",
                    module=MODULE,
                    os_version="24.04",
                    revision="v20270401-2404",
                    catalog=where,
                    register="moved",
                ),
                {
                    "name": "engine default",
                    "ansible.builtin.set_fact": {
                        "engine": "{{ moved.catalog | goldenimage.pipeline.engine_version('') }}",
                        "engine16": "{{ moved.catalog | goldenimage.pipeline.engine_version('16') }}",
                    },
                },
                {
                    "name": "engine refused",
                    "ignore_errors": True,
                    "ansible.builtin.debug": {
                        "msg": "{{ moved.catalog | goldenimage.pipeline.engine_version('18') }}"
                    },
                },
                task(
                    "file",
                    module=MODULE,
                    os_version="24.04",
                    revision="v20261201-2404",
                    catalog={"path": str(file_catalog)},
                ),
            ),
            env=lab.env(faults=True),
            diff=True,
        )
        conflicts += [
            r
            for r in lab.audit()
            if r["resource"] == "configmaps" and r["code"] == 409 and r["verb"] == "update"
        ]
    finally:
        lab.faults.update({"conflict_rate": 0.0})
    assert run.ok and again.ok, run.log + again.log
    # The second run of the same move changes nothing and writes nothing.
    assert again["again"]["changed"] is False, again.log
    assert again_writes == [], again_writes
    assert run["check"]["changed"] is True, run.log
    diff = run["check"].get("diff") or {}
    assert "default_stream: '22.04'" in diff.get("after", "") and "default_stream: null" in diff.get(
        "before", ""
    )
    assert run["real"]["changed"] is True, "check mode must not have written the catalog"
    assert run["real"]["stream"] == {"tip": "v20260615", "validated": True}
    assert "not in the catalog" in refused(rest, "missing")["msg"]
    assert "cannot be the tip of stream 22.04" in refused(rest, "wrong os")["msg"]
    assert (
        "v20270301-2404: its VirtualMachineImage %s/absent does not exist" % kube_namespace
        in (refused(rest, "not imported")["msg"])
    )
    assert "not validated and cannot become the default" in refused(rest, "unvalidated default")["msg"]
    moved = rest["live import"]
    assert moved["changed"] and moved["stream"] == {"tip": "v20270401-2404", "validated": False}
    assert moved["catalog"]["images"]["v20270401-2404"]["imported"] is True
    assert moved["default_stream"] == "22.04"
    facts = rest["engine default"]["ansible_facts"]
    assert facts == {"engine": "17", "engine16": "16"}
    assert "18 is not in revision v20260615" in refused(rest, "engine refused")["msg"]
    assert conflicts, "no write met an injected conflict; the retry path went untested"
    doc = yaml.safe_load(core.read_namespaced_config_map("catalog", kube_namespace).data[DATA_KEY])
    assert doc["default_stream"] == "22.04" and doc["streams"]["24.04"]["tip"] == "v20270401-2404"
    from_file = yaml.safe_load(file_catalog.read_text())
    assert from_file["streams"]["24.04"] == {"tip": "v20261201-2404", "validated": False}


@pytest.mark.lab_only
def test_an_image_deleted_behind_the_catalogs_back_holds_no_tip(lab, kube_client, kube_namespace, mirror):
    """The catalog says imported: true, the VirtualMachineImage is gone: baked_image_stream records
    imported: false (check mode: says it would, writes nothing), then refuses to put the revision at a
    tip, or to sign off / default a stream whose tip it is, naming the revision; baked_image state=absent
    finds it missing and records imported: false too."""
    from kubernetes import client

    rev, image = "v20270401-2404", "ubuntu-2404-postgres-v20270401-2404"
    live_imported_image(kube_client, kube_namespace, mirror, name=image)
    doc = yaml.safe_load(seed_catalog(kube_namespace, image))
    doc["images"][rev]["imported"] = True
    doc["streams"] = {"22.04": {"tip": "v20260615", "validated": True}}
    doc["default_stream"] = "22.04"
    core = client.CoreV1Api(kube_client)
    core.create_namespaced_config_map(
        kube_namespace, {"metadata": {"name": "catalog"}, "data": {DATA_KEY: yaml.safe_dump(doc)}}
    )
    where = {"namespace": kube_namespace, "name": "catalog"}
    stream = dict(module=MODULE, os_version="24.04", catalog=where)
    setup = run_playbook(play(task("tip", revision=rev, **stream)), env=lab.env())
    assert setup.ok and setup["tip"]["stream"] == {"tip": rev, "validated": False}, setup.log

    custom = client.CustomObjectsApi(kube_client)
    custom.delete_namespaced_custom_object(H, V, kube_namespace, IMAGES, image)
    deadline = time.monotonic() + 20
    while any(
        i["metadata"]["name"] == image
        for i in custom.list_namespaced_custom_object(H, V, kube_namespace, IMAGES)["items"]
    ):
        assert time.monotonic() < deadline, "the image was not deleted"
        time.sleep(0.1)
    missing = "revision %s: its VirtualMachineImage %s/%s does not exist" % (rev, kube_namespace, image)
    recorded = "catalog ConfigMap %s/catalog recorded imported: false for revision %s" % (kube_namespace, rev)

    def stored():
        return yaml.safe_load(core.read_namespaced_config_map("catalog", kube_namespace).data[DATA_KEY])

    lab.clear_audit()
    check = run_playbook(
        play(task("check", ignore_errors=True, check=True, revision=rev, validated=True, **stream)),
        env=lab.env(),
        diff=True,
    )
    assert [r for r in lab.mutating_requests() if r["namespace"] == kube_namespace] == []
    predicted = refused(check, "check")
    assert missing in predicted["msg"] and recorded.replace("recorded", "would record") in predicted["msg"]
    assert predicted["changed"] is True and predicted["catalog"]["images"][rev]["imported"] is False
    assert "imported: false" in predicted["diff"]["after"] and stored()["images"][rev]["imported"] is True

    lab.clear_audit()
    run = run_playbook(
        play(
            task("sign off", ignore_errors=True, validated=True, **stream),
            task("default", ignore_errors=True, validated=True, default=True, **stream),
            task("same tip", ignore_errors=True, revision=rev, validated=True, **stream),
        ),
        env=lab.env(),
    )
    mutating = [r for r in lab.mutating_requests() if r["namespace"] == kube_namespace]
    # One write: the first refusal records imported: false; the others find it recorded.
    assert [(r["verb"], r["resource"]) for r in mutating] == [("update", "configmaps")], mutating
    for title in ("sign off", "default", "same tip"):
        assert missing in refused(run, title)["msg"]
    assert recorded in refused(run, "sign off")["msg"] and refused(run, "sign off")["changed"] is True
    assert "recorded" not in refused(run, "default")["msg"]
    after = stored()
    assert after["streams"]["24.04"] == {"tip": rev, "validated": False}
    assert after["default_stream"] == "22.04" and after["images"][rev]["imported"] is False

    # A catalog stale again (an older release wrote it): baked_image state=absent finds the image missing
    # and corrects the entry in the same run.
    after["images"][rev]["imported"] = True
    core.patch_namespaced_config_map("catalog", kube_namespace, {"data": {DATA_KEY: yaml.safe_dump(after)}})
    gone = run_playbook(
        play(
            task(
                "absent",
                module="goldenimage.pipeline.baked_image",
                name=rev,
                namespace=kube_namespace,
                state="absent",
                catalog=where,
            ),
            task("move back", ignore_errors=True, revision=rev, **stream),
        ),
        env=lab.env(),
    )
    assert gone["absent"]["changed"] is True, gone.log
    assert gone["absent"]["catalogs_updated"] == ["catalog ConfigMap %s/catalog" % kube_namespace]
    assert stored()["images"][rev]["imported"] is False
    assert "revision %s: its VirtualMachineImage" % rev in refused(gone, "move back")["msg"]


@pytest.mark.lab_only
@pytest.mark.suite("data-loss")
def test_a_tip_that_drops_a_supported_major_is_refused_while_databases_run_it(
    lab, kube_client, kube_namespace, monkeypatch
):
    """PostgreSQL 15 (supported until 2027-11-11) runs in two namespaces, neither the catalog's: a tip
    without 15 is refused naming both, with dates from 15's end of life and the catalog's grace; named in
    drops_majors it goes ahead, and the operator marks both PGVersionEOL."""
    from kubernetes import client

    core, custom = client.CoreV1Api(kube_client), client.CustomObjectsApi(kube_client)
    doc = yaml.safe_load(seed_catalog(kube_namespace, "none"))
    images = {name: doc["images"][name] for name in ("v20260615",)}
    images["v20260615"]["pg_versions"] = images["v20260615"]["facts"]["pg_majors"] = ["15", "16", "17"]
    images["v20261201"] = dict(
        images["v20260615"],
        pg_versions=["16", "17"],
        build_date="2026-12-01",
        facts=dict(images["v20260615"]["facts"], pg_majors=["16", "17"]),
    )
    catalog_configmap(kube_client, kube_namespace, images, "v20260615")
    monkeypatch.setenv("LAB_DBINSTANCE_CATALOG", kube_namespace + "/catalog")
    other = "%s-b" % kube_namespace
    core.create_namespace({"metadata": {"name": other}})
    try:
        apps = kube_namespace + "-apps"
        core.create_namespace({"metadata": {"name": apps}})
        running_database(lab, kube_client, apps, "orders", "v20260615", engine="15")
        running_database(lab, kube_client, other, "billing", "v20260615", engine="15")
        running_database(lab, kube_client, kube_namespace, "smoke", "v20261201", engine="17")
        where = {"namespace": kube_namespace, "name": "catalog"}
        move = dict(module=MODULE, os_version="22.04", revision="v20261201", validated=True, catalog=where)
        setup = smoke_test_run(lab, kube_namespace, "v20261201", where, ignore_errors=True)
        # The test is recorded whatever the rest of the task says (the default stream's tip moves only
        # validated, so this move alone is refused).
        recorded = yaml.safe_load(core.read_namespaced_config_map("catalog", kube_namespace).data[DATA_KEY])
        assert recorded["images"]["v20261201"]["smoke_tests"][-1]["result"] == "passed", setup.log
        before = core.read_namespaced_config_map("catalog", kube_namespace).data[DATA_KEY]
        lab.clear_audit()
        run = run_playbook(
            play(
                task("refused", ignore_errors=True, **move),
                task("check", check=True, drops_majors=[15], **move),
            ),
            env=lab.env(),
        )
        assert lab.mutating_requests() == []
        assert core.read_namespaced_config_map("catalog", kube_namespace).data[DATA_KEY] == before
        msg = refused(run, "refused")["msg"]
        assert (
            "the tip would drop PostgreSQL 15, which is not past end of life, while 2 database(s) run it"
            in msg
        )
        for ref in ("%s/orders" % apps, "%s/billing" % other):
            assert (
                "%s (PostgreSQL 15 on stream 22.04, supported until 2027-11-11: migrate by 2027-11-11, "
                "deleted after 2028-02-11)" % ref in msg
            ), msg
        assert [(e["namespace"], e["name"]) for e in refused(run, "refused")["stranded"]] == [
            (apps, "orders"),
            (other, "billing"),
        ]
        assert run["check"]["changed"] is True and len(run["check"]["stranded"]) == 2

        done = run_playbook(play(task("dropped", drops_majors=[15], **move)), env=lab.env())
        assert done.ok and done["dropped"]["stream"] == {"tip": "v20261201", "validated": True}, done.log
        assert {e["deleted_after"] for e in done["dropped"]["stranded"]} == {"2028-02-11"}
        deadline = time.monotonic() + 20
        while True:
            obj = custom.get_namespaced_custom_object(
                "db.goldenimage.io", "v1alpha1", apps, "dbinstances", "orders"
            )
            conditions = {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or []}
            if conditions.get("PGVersionEOL") == "True":
                break
            assert time.monotonic() < deadline, obj.get("status")
            time.sleep(0.2)
    finally:
        core.delete_namespace(other)
        core.delete_namespace(kube_namespace + "-apps")


@pytest.mark.lab_only
@pytest.mark.suite("faults")
def test_a_smoke_test_whose_reply_was_lost_is_recorded_once(lab, kube_client, kube_namespace, monkeypatch):
    """Every write's reply is dropped after the server committed it: the task still ends ok (the catalog
    read back holds what was sent), and the rerun an operator makes after a lost reply records nothing new:
    the same DBInstance, unchanged since, is the same test."""
    from kubernetes import client

    core = client.CoreV1Api(kube_client)
    doc = yaml.safe_load(seed_catalog(kube_namespace, "none"))
    catalog_configmap(kube_client, kube_namespace, {"v20260615": doc["images"]["v20260615"]}, "v20260615")
    monkeypatch.setenv("LAB_DBINSTANCE_CATALOG", kube_namespace + "/catalog")
    running_database(lab, kube_client, kube_namespace, "smoke", "v20260615", engine="17")
    where = {"namespace": kube_namespace, "name": "catalog"}

    def tests():
        text = core.read_namespaced_config_map("catalog", kube_namespace).data[DATA_KEY]
        return yaml.safe_load(text)["images"]["v20260615"].get("smoke_tests") or []

    lab.faults.update({"commit_drop_rate": 1.0, "seed": 3})
    try:
        lost = smoke_test_run(lab, kube_namespace, "v20260615", where, faults=True)
    finally:
        lab.faults.update({"commit_drop_rate": 0.0})
    assert lost.ok and lost["smoke test"]["changed"] is True, lost.log
    assert [t["result"] for t in tests()] == ["passed"]
    lab.clear_audit()
    again = smoke_test_run(lab, kube_namespace, "v20260615", where)
    assert again.ok and again["smoke test"]["changed"] is False, again.log
    assert lab.mutating_requests() == []
    assert [t["result"] for t in tests()] == ["passed"]


@pytest.mark.lab_only
@pytest.mark.suite("bad-input")
def test_a_catalog_too_large_for_its_configmap_is_refused_before_the_write(
    lab, kube_client, kube_namespace, monkeypatch
):
    """A ConfigMap catalog already near the 1 MiB limit (package lists that do not compress): a change is
    refused naming the size and the largest revisions, and nothing is written."""
    import base64
    import os

    from kubernetes import client

    core = client.CoreV1Api(kube_client)
    doc = yaml.safe_load(seed_catalog(kube_namespace, "none"))
    images = {"v20260615": doc["images"]["v20260615"]}
    for day in range(1, 19):
        entry = yaml.safe_load(yaml.safe_dump(doc["images"]["v20260615"]))
        entry["build_date"] = "2027-01-%02d" % day
        entry["manifest"] = {
            "sha256": "0" * 64,
            "package_count": 700,
            "encoding": "zlib+base64",
            "package_list": base64.b64encode(os.urandom(42 * 1024)).decode(),
        }
        images["v202701%02d" % day] = entry
    catalog_configmap(kube_client, kube_namespace, images, "v20260615")
    monkeypatch.setenv("LAB_DBINSTANCE_CATALOG", kube_namespace + "/catalog")
    running_database(lab, kube_client, kube_namespace, "smoke", "v20260615", engine="17")
    before = core.read_namespaced_config_map("catalog", kube_namespace).data[DATA_KEY]
    assert len(before) > 1000 * 1024
    lab.clear_audit()
    run = smoke_test_run(
        lab, kube_namespace, "v20260615", {"namespace": kube_namespace, "name": "catalog"}, ignore_errors=True
    )
    msg = refused(run, "smoke test")["msg"]
    assert "catalog ConfigMap %s/catalog would hold" % kube_namespace in msg, msg
    assert "largest revisions: v202701" in msg and "catalog.path" in msg
    assert lab.mutating_requests() == []
    assert core.read_namespaced_config_map("catalog", kube_namespace).data[DATA_KEY] == before
