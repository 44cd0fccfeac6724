"""Secrets suite for the modules that take or print a URL outside the bucket modules: kube_object,
worker_image, baked_image_rebuild_due and microvm_image.

Each run is ``ansible-playbook -vvv --diff`` (the invocation, with every option, is printed at -vvv). A
password goes into a URL's user-info, as an operator would put it, through extra vars (a playbook's own
lines are quoted back by ansible-core on a failure). A URL with a password is refused before anything is
written, the mutating requests counted from the lab's audit log; a URL the module accepts (a signed or
tokenised one, an APT repository behind basic auth) is masked wherever it is printed. After the runs,
every output, task result and object the runs could leave in the namespace, Events included, is searched
for each secret in its raw, quoted, base64 and escaped forms.
"""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from tests.integration.support import microvm_parts
from tests.integration.support.apt_repo import Server, write_suite
from tests.integration.support.runner import kube_play, module_task, play, run_playbook
from tests.integration.support.secrets import cluster_traces, leaks, new_secret, run_traces, with_password

VERBOSE = ["-vvv", "--diff"]
SCHEMATIC = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"


def refusal(run, title):
    entry = run.entry(title)
    assert entry["status"] == "ignored", entry
    assert entry["result"].get("refused") is True, entry
    return entry["result"]["msg"]


@pytest.mark.lab_only
@pytest.mark.suite("secrets")
def test_kube_object_refuses_a_password_in_a_url_and_masks_a_signature(lab, kube_client, kube_namespace):
    password, signature = new_secret(), new_secret("sig")
    signed = "https://s3.example/b/disk.img?X-Amz-Expires=60&X-Amz-Signature=%s" % quote(signature, safe="")
    import_dv = {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": "import"},
        "spec": {
            "source": {"http": {"url": "{{ url_with_password }}"}},
            "storage": {"resources": {"requests": {"storage": "64Mi"}}},
        },
    }
    signed_cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "signed", "labels": {"app.kubernetes.io/managed-by": "goldenimage.pipeline"}},
        "data": {"url": "{{ signed_url }}"},
    }

    def apply(title, definition, **more):
        return module_task(
            "goldenimage.pipeline.kube_object",
            title,
            namespace=kube_namespace,
            definitions=[definition],
            **more,
        )

    lab.clear_audit()
    run = run_playbook(
        kube_play(
            apply("a password in a DataVolume's URL", import_dv, ignore_errors=True),
            apply("a signed URL", signed_cm),
            apply("the signed URL again", signed_cm),
        ),
        env=lab.env(),
        args=VERBOSE,
        extra_vars={
            "url_with_password": with_password("https://mirror.example/disk.img", password),
            "signed_url": signed,
        },
    )
    assert run.ok, run.log
    msg = refusal(run, "a password in a DataVolume's URL")
    assert msg.startswith(
        "definitions[0] (DataVolume %s/import) field spec.source.http.url (https://REDACTED@mirror.example/disk.img)"
        % kube_namespace
    ), msg
    assert "secretRef" in msg and "presigned URL" in msg
    written = [(r["verb"], r["resource"], r["name"]) for r in lab.mutating_requests()]
    assert written == [("create", "configmaps", "signed")], written
    shown = run["a signed URL"]["objects"][0]["object"]["data"]["url"]
    assert shown.startswith("https://s3.example/b/disk.img?") and "X-Amz-Signature=REDACTED" in shown, shown
    assert run["the signed URL again"]["changed"] is False
    from kubernetes import client

    stored = client.CoreV1Api(kube_client).read_namespaced_config_map("signed", kube_namespace)
    assert stored.data["url"] == signed, "the object holds what it was given"

    # The password is nowhere; the signature is nowhere but in the ConfigMap that was asked to hold it.
    outputs = run_traces(run)
    objects = cluster_traces(kube_client, [kube_namespace])
    assert len(objects) > 5, [where for where, _text in objects]
    assert leaks(outputs + objects, [password]) == []
    assert (
        leaks(outputs + [o for o in objects if o[0] != "configmaps in %s" % kube_namespace], [signature])
        == []
    )
    assert leaks(objects, [signature]), "the search finds the signature where it is stored"


@pytest.mark.lab_only
@pytest.mark.suite("secrets")
def test_worker_image_refuses_a_password_in_a_factory_or_image_url(lab, kube_client, kube_namespace):
    password = new_secret()
    entry = {
        "schematicID": SCHEMATIC,
        "version": "v1.13.0",
        "imageFactoryURL": "{{ factory_with_password }}",
        "storage": "64Mi",
    }
    pool = {"name": "md0", "namespace": kube_namespace, "imageURL": "{{ image_with_password }}"}
    task = module_task
    lab.clear_audit()
    run = run_playbook(
        kube_play(
            task(
                "goldenimage.pipeline.worker_image",
                "catalog",
                ignore_errors=True,
                namespace=kube_namespace,
                images=[entry],
            ),
            task(
                "goldenimage.pipeline.worker_image",
                "pool",
                ignore_errors=True,
                namespace=kube_namespace,
                state="rendered",
                pool=pool,
            ),
        ),
        env=lab.env(),
        args=VERBOSE,
        extra_vars={
            "factory_with_password": with_password("https://factory.example", password),
            "image_with_password": with_password("https://factory.example/talos.raw.xz", password),
        },
    )
    assert run.ok, run.log
    catalog = refusal(run, "catalog")
    assert "imageFactoryURL (https://REDACTED@factory.example): the URL carries credentials" in catalog, (
        catalog
    )
    pool_msg = refusal(run, "pool")
    assert "imageURL (https://REDACTED@factory.example/talos.raw.xz)" in pool_msg, pool_msg
    assert lab.mutating_requests() == []
    found = run_traces(run) + cluster_traces(kube_client, [kube_namespace])
    assert leaks(found, [password]) == []


@pytest.mark.suite("secrets")
def test_baked_image_rebuild_due_masks_a_repository_password_everywhere(tmp_path):
    password = new_secret()
    www = tmp_path / "www"
    write_suite(www / "ubuntu", "jammy", {"base-files": "12ubuntu4.7"}, None)
    server = Server(www)
    manifest = tmp_path / "manifest.json"
    manifest.write_text(
        json.dumps(
            {
                "revision": "v20261129",
                "os_version": "22.04",
                "pg_versions": [{"major": "16"}],
                "packages": ["base-files=12ubuntu4.6"],
            }
        )
    )

    def due(title, path, **more):
        repository = {"url": "{{ base }}/%s" % path, "suites": ["jammy"], "allow_unsigned": True}
        return module_task(
            "goldenimage.pipeline.baked_image_rebuild_due",
            title,
            repositories=[repository],
            manifest=str(manifest),
            **more,
        )

    try:
        run = run_playbook(
            play(
                due("read a repository behind basic auth", "ubuntu"),
                due("a missing one", "nothing", ignore_errors=True),
            ),
            args=VERBOSE,
            extra_vars={"base": with_password(server.url, password, user="apt")},
        )
    finally:
        server.close()
    assert run.ok, run.log
    read = run["read a repository behind basic auth"]
    assert read["rebuild_due"] is True, read
    assert read["indexes"][0]["repository"] == "http://REDACTED@%s/ubuntu" % server.url.split("://")[1]
    missing = run.entry("a missing one")
    assert missing["status"] == "ignored" and "REDACTED@" in missing["result"]["msg"], missing
    assert "invocation" in json.dumps(run.tasks), "the invocation was printed, so it was searched"
    assert leaks(run_traces(run), [password]) == []


@pytest.mark.suite("secrets")
def test_microvm_image_refuses_a_password_in_the_registry_and_pushes_nothing(tmp_path):
    password = new_secret()
    registry = microvm_parts.Registry(tmp_path / "registry")
    try:
        base = {"src": str(tmp_path / "disk.raw"), "repository": "lm/ubuntu"}
        run = run_playbook(
            play(
                module_task(
                    "goldenimage.pipeline.microvm_image",
                    "with a scheme",
                    ignore_errors=True,
                    registry="{{ with_scheme }}",
                    **base,
                ),
                module_task(
                    "goldenimage.pipeline.microvm_image",
                    "host and port",
                    ignore_errors=True,
                    registry="{{ bare }}",
                    **base,
                ),
            ),
            args=VERBOSE,
            extra_vars={
                "with_scheme": with_password("http://%s" % registry.host, password, user="pusher"),
                "bare": with_password("http://%s" % registry.host, password, user="pusher").split("://", 1)[
                    1
                ],
            },
        )
        stored = sorted(str(p) for p in (registry.workdir / "data").rglob("*") if p.is_file())
    finally:
        registry.stop()
    assert run.ok, run.log
    for title in ("with a scheme", "host and port"):
        msg = refusal(run, title)
        assert msg.startswith("option registry (") and "REDACTED@%s" % registry.host in msg, msg
        assert "set username and password" in msg
    assert stored == [], "nothing was pushed"
    assert leaks(run_traces(run), [password]) == []
