"""baked_image's guards on the lab: nothing in use is deleted, the catalog's ``imported`` follows the cluster,
a half-done registration says what exists, secrets in URLs never land anywhere, and bad input is refused
before the first write (counted from the lab's audit log)."""

from __future__ import annotations

import json
import uuid

import pytest
import yaml
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import redact

from tests.integration.modules.test_baked_image import catalog_of, play, refused, task
from tests.integration.support.runner import run_playbook
from tests.integration.support.smoke import running_database

STREAM = "goldenimage.pipeline.baked_image_stream"
H, V, IMAGES = "harvesterhci.io", "v1beta1", "virtualmachineimages"


def registration(namespace, mirror, name, **more):
    body = dict(
        name=name,
        namespace=namespace,
        url=mirror["url"],
        checksum=mirror["sha512"],
        os_version="22.04",
        pg_versions=["16", "17"],
        catalog={"namespace": namespace, "name": "catalog"},
        wait_timeout=120,
        wait_sleep=1,
    )
    if mirror.get("artifact"):
        body["artifact"] = mirror["artifact"]
    body.update(more)
    return body


def writes(lab, namespace):
    return [r for r in lab.mutating_requests() if r["namespace"] == namespace]


@pytest.mark.lab_only
@pytest.mark.suite("data-loss")
def test_absent_asks_who_uses_the_image_and_keeps_imported_true_to_the_cluster(
    lab, kube_client, kube_namespace, baked_mirror, monkeypatch
):
    from kubernetes import client

    # The operator serves databases from this test's catalog.
    monkeypatch.setenv("LAB_DBINSTANCE_CATALOG", kube_namespace + "/catalog")

    used, spare = "v20260901", "v20260902"
    where = {"namespace": kube_namespace, "name": "catalog"}
    # Registered from its artifact (facts read from the bytes), put at the tip, smoke-tested on a test
    # DBInstance provisioned from it, then signed off and made the default in a run of its own.
    mirror = dict(baked_mirror, artifact=baked_mirror["path"])
    setup = run_playbook(
        play(
            task("used", **registration(kube_namespace, mirror, used)),
            task("spare", **registration(kube_namespace, mirror, spare)),
            task("tip", module=STREAM, os_version="22.04", revision=used, catalog=where),
        ),
        env=lab.env(),
    )
    assert setup.ok, setup.log
    running_database(lab, kube_client, kube_namespace, "smoke", used, engine="17")
    signed = run_playbook(
        play(
            task(
                "sign off",
                module=STREAM,
                os_version="22.04",
                smoke_test={"namespace": kube_namespace, "name": "smoke"},
                validated=True,
                default=True,
                catalog=where,
            )
        ),
        env=lab.env(),
    )
    assert signed.ok and signed["sign off"]["smoke_test"]["result"] == "passed", signed.log
    running_database(lab, kube_client, kube_namespace, "orders", used)
    # A revision the catalog says is imported, whose image is gone already.
    core = client.CoreV1Api(kube_client)
    doc = catalog_of(kube_client, kube_namespace)
    doc["images"]["v20260903"] = dict(
        doc["images"][spare], image={"namespace": kube_namespace, "name": "ubuntu-2204-postgres-v20260903"}
    )
    core.patch_namespaced_config_map(
        "catalog", kube_namespace, {"data": {"catalog.yaml": yaml.safe_dump(doc)}}
    )

    absent = dict(namespace=kube_namespace, state="absent", wait_timeout=60, wait_sleep=1)
    lab.clear_audit()
    run = run_playbook(
        play(
            task("with catalog", ignore_errors=True, name=used, catalog=where, **absent),
            # Without the catalog option the ConfigMap is found in the cluster all the same.
            task("without catalog", ignore_errors=True, name=used, **absent),
            task("check used", ignore_errors=True, check=True, name=used, **absent),
        ),
        env=lab.env(),
    )
    assert writes(lab, kube_namespace) == [], writes(lab, kube_namespace)
    image = "ubuntu-2204-postgres-" + used
    for title in ("with catalog", "without catalog", "check used"):
        result = refused(run, title)
        assert result["refused"] is True, result
        msg = result["msg"]
        assert msg.startswith(
            "VirtualMachineImage %s/%s (revision %s): refusing to delete it" % (kube_namespace, image, used)
        ), msg
        assert (
            "DBInstance %s/orders runs on it: its applied revision is %s" % (kube_namespace, used) in msg
        ), msg
        assert (
            "ConfigMap %s/catalog serves it as stream 22.04: its tip is %s" % (kube_namespace, used) in msg
        ), msg
        kinds = {(c["kind"], c["namespace"], c["name"]) for c in result["consumers"]}
        assert {("DBInstance", kube_namespace, "orders"), ("ConfigMap", kube_namespace, "catalog")} <= kinds
        assert result["pvcs"] == []
    custom = client.CustomObjectsApi(kube_client)
    assert custom.get_namespaced_custom_object(H, V, kube_namespace, IMAGES, image)

    gone = run_playbook(
        play(
            task("check spare", check=True, name=spare, catalog=where, **absent),
            task("spare", name=spare, catalog=where, **absent),
            task("spare again", name=spare, catalog=where, **absent),
            task("missing", name="v20260903", catalog=where, **absent),
            task("missing again", name="v20260903", catalog=where, **absent),
        ),
        env=lab.env(),
    )
    assert gone.ok, gone.log
    assert gone["check spare"]["changed"] is True and gone["spare"]["changed"] is True
    described = "catalog ConfigMap %s/catalog" % kube_namespace
    assert gone["spare"]["catalogs_updated"] == [described]
    assert gone["spare again"]["changed"] is False
    assert gone["missing"]["changed"] is True and gone["missing"]["catalogs_updated"] == [described]
    assert gone["missing again"]["changed"] is False
    doc = catalog_of(kube_client, kube_namespace)
    assert doc["images"][spare]["imported"] is False and doc["images"]["v20260903"]["imported"] is False
    assert doc["images"][used]["imported"] is True, "the refused delete must not touch the catalog"


@pytest.mark.lab_only
def test_a_token_that_cannot_write_the_catalog_leaves_a_reported_image(
    lab, kube_client, kube_namespace, mirror, tmp_path
):
    token = lab.add_token(
        "images-only-" + uuid.uuid4().hex[:6],
        [
            {"verbs": ["*"], "groups": [H], "resources": [IMAGES], "namespaces": [kube_namespace]},
            {"verbs": ["get", "list"], "groups": ["storage.k8s.io"], "resources": ["storageclasses"]},
            {"verbs": ["get", "list"], "groups": [""], "resources": ["configmaps"]},
        ],
    )
    kubeconfig = str(lab.write_kubeconfig(tmp_path / "images-only.kubeconfig", token, "images-only"))
    body = registration(kube_namespace, mirror, "v20260910")
    run = run_playbook(
        play(
            task("limited", ignore_errors=True, **dict(body, kubeconfig=kubeconfig)),
            task("admin", **body),
            task("again", **body),
        ),
        env=lab.env(),
    )
    result = refused(run, "limited")
    image = "VirtualMachineImage %s/ubuntu-2204-postgres-v20260910" % kube_namespace
    assert result["msg"].startswith(image + " is registered (Imported=True"), result["msg"]
    assert "not recorded in catalog ConfigMap %s/catalog" % kube_namespace in result["msg"]
    assert "403" in result["msg"] and "it finds the image and only records it" in result["msg"]
    assert result["registered"] is True and result["catalog_written"] is False
    assert result["missing_permission"] == (
        "get, create and update on configmaps in namespace %s" % kube_namespace
    )
    admin = run["admin"]
    assert admin["changed"] is True and admin["catalog_changed"] is True, run.log
    assert admin["revision"]["imported"] is True and run["again"]["changed"] is False
    assert catalog_of(kube_client, kube_namespace)["images"]["v20260910"]["imported"] is True


def _everything_left(kube_client, namespace, files=()):
    """Every object of the namespace a run could write (images, events, configmaps) and files, as text."""
    from kubernetes import client

    api = client.ApiClient.sanitize_for_serialization
    core = client.CoreV1Api(kube_client)
    custom = client.CustomObjectsApi(kube_client)
    parts = [json.dumps(custom.list_namespaced_custom_object(H, V, namespace, IMAGES))]
    parts.append(json.dumps(api(kube_client, core.list_namespaced_event(namespace))))
    parts.append(json.dumps(api(kube_client, core.list_namespaced_config_map(namespace))))
    parts.extend(path.read_text() for path in files if path.exists())
    return "\n".join(parts)


@pytest.mark.lab_only
@pytest.mark.suite("secrets")
def test_a_password_in_the_url_is_refused_and_never_lands_anywhere(
    lab, kube_client, kube_namespace, mirror, tmp_path
):
    secret = "Pa55-" + uuid.uuid4().hex[:12]
    scheme, rest = mirror["url"].split("://", 1)
    url = "%s://mirror:%s@%s" % (scheme, secret, rest)
    catalog_file = tmp_path / "catalog.yaml"
    body = registration(kube_namespace, mirror, "v20260920", url=url)
    lab.clear_audit()
    run = run_playbook(
        play(
            task("configmap", ignore_errors=True, **body),
            task("file", ignore_errors=True, **{**body, "catalog": {"path": str(catalog_file)}}),
            task("absent", ignore_errors=True, **dict(body, state="absent")),
        ),
        env=lab.env(),
        args=["-vvv"],
    )
    for title in ("configmap", "file", "absent"):
        msg = refused(run, title)["msg"]
        assert "option url (" in msg and "credentials in its user-info" in msg, msg
        assert "presigned URL" in msg and "src" in msg, msg
    assert writes(lab, kube_namespace) == [], writes(lab, kube_namespace)
    assert not catalog_file.exists()
    left = "\n".join(
        [run.stdout, run.stderr, json.dumps(run.tasks), _everything_left(kube_client, kube_namespace)]
    )
    for form in redact.secret_forms(secret):
        assert form not in left, "the password leaked as %r" % form


@pytest.mark.lab_only
@pytest.mark.suite("bad-input")
def test_bad_input_is_refused_before_the_first_write(lab, kube_namespace, mirror):
    body = registration(kube_namespace, mirror, "v20260930")
    where = {"namespace": kube_namespace, "name": "catalog"}
    lab.clear_audit()
    run = run_playbook(
        play(
            task(
                "float stream", ignore_errors=True, **{**body, "name": "v20261001-2410", "os_version": 24.10}
            ),
            task("float major", ignore_errors=True, **{**body, "pg_versions": [16.0, "17"]}),
            task("zero timeout", ignore_errors=True, **{**body, "wait_timeout": 0}),
            task("negative sleep", ignore_errors=True, **{**body, "wait_sleep": -1}),
            task("zero replicas", ignore_errors=True, **dict(body, replicas=0)),
            task("stream float", ignore_errors=True, module=STREAM, os_version=24.1, catalog=where),
        ),
        env=lab.env(),
    )
    assert writes(lab, kube_namespace) == [], writes(lab, kube_namespace)
    assert 'quote it: os_version: "24.1"' in refused(run, "float stream")["msg"]
    assert "option pg_versions" in refused(run, "float major")["msg"]
    assert "a major is a whole number, so write 16" in refused(run, "float major")["msg"]
    zero = refused(run, "zero timeout")["msg"]
    assert zero.startswith("option wait_timeout: 0 is not a duration"), zero
    assert refused(run, "negative sleep")["msg"].startswith("option wait_sleep: -1 is not a duration")
    assert "replicas is 0" in refused(run, "zero replicas")["msg"]
    assert "quote it" in refused(run, "stream float")["msg"]
