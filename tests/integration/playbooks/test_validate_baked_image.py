"""playbooks/validate_baked_image.yml against the lab: a smoke test on a test DBInstance the lab operator
provisions from the held revision, recorded in the catalog, the test instance deleted afterwards; a
smoke_test naming a database that is not the collection's is refused with nothing written or deleted;
a misspelt variable is refused before anything runs."""

from __future__ import annotations

import pytest
import yaml

from tests.integration.modules.test_baked_image_stream import DATA_KEY, seed_catalog
from tests.integration.support.runner import ROOT, run_playbook
from tests.integration.support.smoke import INITIAL_REVISION, dbinstance_api, running_database

pytestmark = pytest.mark.lab_only

PLAYBOOK = ROOT / "playbooks" / "validate_baked_image.yml"
REVISION = "v20260615"


@pytest.fixture()
def catalog(lab, kube_client, kube_namespace, monkeypatch):
    from kubernetes import client

    client.CoreV1Api(kube_client).create_namespaced_config_map(
        kube_namespace,
        {"metadata": {"name": "catalog"}, "data": {DATA_KEY: seed_catalog(kube_namespace, "live")}},
    )
    monkeypatch.setenv("LAB_DBINSTANCE_CATALOG", kube_namespace + "/catalog")
    return {"namespace": kube_namespace, "name": "catalog"}


def validate(lab, catalog, name, **more):
    group, version = dbinstance_api(lab)
    extra = {
        "validate_revision": REVISION,
        "validate_catalog": catalog,
        "validate_smoke_test": {"namespace": catalog["namespace"], "name": name},
        "validate_smoke_manifest": {
            "apiVersion": "%s/%s" % (group, version),
            "kind": "DBInstance",
            "metadata": {"annotations": {INITIAL_REVISION: REVISION}},
            "spec": {"engineVersion": "17"},
        },
        "validate_timeout": 60,
        **more,
    }
    return run_playbook(PLAYBOOK, env=lab.env(), extra_vars=extra, timeout=300)


def read_catalog(kube_client, catalog):
    from kubernetes import client

    config = client.CoreV1Api(kube_client).read_namespaced_config_map(catalog["name"], catalog["namespace"])
    return yaml.safe_load(config.data[DATA_KEY])


def test_a_smoke_test_validates_the_revision_and_its_test_instance_is_deleted(lab, kube_client, catalog):
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    run = validate(lab, catalog, "smoke-" + REVISION)
    assert run.ok, run.log
    doc = read_catalog(kube_client, catalog)
    assert doc["streams"]["22.04"] == {"tip": REVISION, "validated": True}
    test = doc["images"][REVISION]["smoke_tests"][-1]
    assert test["result"] == "passed" and test["dbinstance"].endswith("/smoke-" + REVISION), test
    group, version = dbinstance_api(lab)
    with pytest.raises(ApiException) as gone:
        client.CustomObjectsApi(kube_client).get_namespaced_custom_object(
            group, version, catalog["namespace"], "dbinstances", "smoke-" + REVISION
        )
    assert gone.value.status == 404


@pytest.mark.suite("data-loss")
def test_a_smoke_test_naming_someone_elses_database_writes_and_deletes_nothing(lab, kube_client, catalog):
    from kubernetes import client

    group, version = dbinstance_api(lab)
    namespace = catalog["namespace"]
    before = running_database(lab, kube_client, namespace, "orders", REVISION, engine="16")
    lab.clear_audit()
    run = validate(lab, catalog, "orders")
    assert not run.ok
    assert "exists and was not made by this collection" in run.log, run.log
    after = client.CustomObjectsApi(kube_client).get_namespaced_custom_object(
        group, version, namespace, "dbinstances", "orders"
    )
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert "app.kubernetes.io/managed-by" not in (after["metadata"].get("labels") or {})
    touched = [r for r in lab.mutating_requests() if r.get("resource") == "dbinstances"]
    assert touched == [], touched
    assert read_catalog(kube_client, catalog)["streams"] == {}


@pytest.mark.suite("bad-input")
def test_a_misspelt_variable_is_refused_before_anything_runs(lab, catalog):
    lab.clear_audit()
    run = validate(lab, catalog, "smoke-typo", validate_timout=5)
    assert not run.ok and "validate_timout" in run.log, run.log
    assert [r for r in lab.mutating_requests() if r.get("namespace") == catalog["namespace"]] == []
