"""Test DBInstances on the lab: one the operator reports Available on a given revision, as a smoke test of
a revision held back from the default stream provisions it (the lab operator's
``lab.goldenimage.io/initial-revision`` annotation, tests/lab/controllers/dbinstance.py), or as an old
database still running a revision."""

from __future__ import annotations

import time

INITIAL_REVISION = "lab.goldenimage.io/initial-revision"


def dbinstance_api(lab):
    return (getattr(lab, "dbinstance_group", None) or "db.goldenimage.io"), (
        getattr(lab, "dbinstance_version", None) or "v1alpha1"
    )


def running_database(lab, kube_client, namespace, name, revision, engine="16", timeout=30):
    """A DBInstance the lab operator reports Available on ``revision`` with PostgreSQL ``engine``.

    The operator reads its catalog from ``LAB_DBINSTANCE_CATALOG``: point it at the test's catalog first
    (it stays Provisioning while it has no catalog to read)."""
    from kubernetes import client

    group, version = dbinstance_api(lab)
    custom = client.CustomObjectsApi(kube_client)
    body = {
        "apiVersion": "%s/%s" % (group, version),
        "kind": "DBInstance",
        "metadata": {"name": name, "annotations": {INITIAL_REVISION: revision}},
        "spec": {"engineVersion": engine},
    }
    custom.create_namespaced_custom_object(group, version, namespace, "dbinstances", body)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        obj = custom.get_namespaced_custom_object(group, version, namespace, "dbinstances", name)
        status = obj.get("status") or {}
        if (
            status.get("phase") == "Available"
            and (status.get("appliedSpec") or {}).get("imageRevision") == revision
        ):
            return obj
        time.sleep(0.1)
    raise AssertionError("the DBInstance never ran on %s: %s" % (revision, obj.get("status")))


def smoke_test_of(namespace, name):
    """The ``smoke_test`` option of baked_image_stream naming that test DBInstance."""
    return {"namespace": namespace, "name": name}


def catalog_configmap(kube_client, namespace, images, tip, default_stream="22.04"):
    """The ConfigMap ``catalog`` in ``namespace``: ``images``, ``default_stream`` validated at ``tip``."""
    import yaml
    from kubernetes import client

    text = yaml.safe_dump(
        {
            "version": 1,
            "default_stream": default_stream,
            "streams": {default_stream: {"tip": tip, "validated": True}},
            "images": images,
        }
    )
    client.CoreV1Api(kube_client).create_namespaced_config_map(
        namespace, {"metadata": {"name": "catalog"}, "data": {"catalog.yaml": text}}
    )
