"""The baked_image runner called with parameters and an observed state: it returns a result or raises a
PipelineError, and never exits."""

import json

import pytest
import yaml
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import errors
from ansible_collections.goldenimage.pipeline.plugins.modules import baked_image
from fake_kube import ApiError, FakeKube, params_of
from support import rejected

NS = "harvester-public"
IMAGE = "ubuntu-2204-postgres-v20260615"
SIGNED = "https://s3.example/b/k.qcow2?X-Amz-Expires=60&X-Amz-Signature=feedface"
VMI = ("harvesterhci.io/v1beta1", "VirtualMachineImage")


def params(**given):
    base = dict(
        name="v20260615",
        namespace=NS,
        url=SIGNED,
        checksum="a" * 128,
        os_version="22.04",
        pg_versions=["16", "17"],
        replicas=3,
    )
    base.update(given)
    return params_of(baked_image.argument_spec(), **base)


def harvester_imports(obj):
    """What Harvester's image controller does at once in this fake: imported, with its own class."""
    obj["status"] = {
        "progress": 100,
        "storageClassName": "lh-1",
        "conditions": [{"type": "Imported", "status": "True"}, {"type": "Initialized", "status": "True"}],
    }


def cluster(p, *objects, **kwargs):
    storage = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "lh-1"},
        "parameters": {"numberOfReplicas": "3"},
    }
    return FakeKube(p, [storage, *objects], on_create=harvester_imports, **kwargs)


def run(kube):
    return baked_image.BakedImage(kube).run()


def test_register_records_the_revision_without_the_signature_and_reruns_change_nothing(tmp_path):
    catalog_file = tmp_path / "catalog.yaml"
    kube = cluster(params(catalog={"path": str(catalog_file)}))
    result = run(kube)
    assert result["changed"] and result["catalog_changed"] and result["replicas_in_force"] == 3
    assert result["revision"]["imported"] is True and result["storage_class"] == "lh-1"
    assert kube.writes == [("create", "VirtualMachineImage", NS, IMAGE)]
    text = catalog_file.read_text()
    assert "feedface" not in text and "feedface" not in json.dumps(result)
    assert yaml.safe_load(text)["images"]["v20260615"]["source"] == "https://s3.example/b/k.qcow2"
    assert kube.get(*VMI, IMAGE, NS)["spec"]["url"] == SIGNED, "Harvester still needs the signed URL"
    again = run(kube)
    assert again["changed"] is False and len(kube.writes) == 1


def test_check_mode_writes_nothing(tmp_path):
    catalog_file = tmp_path / "catalog.yaml"
    kube = cluster(params(catalog={"path": str(catalog_file)}), check_mode=True)
    result = run(kube)
    assert result["changed"] is True and kube.writes == [] and not catalog_file.exists()


@pytest.mark.parametrize(
    ("given", "text"),
    [
        ({"os_version": 22.4}, "quote it"),
        ({"pg_versions": [16.0]}, "option pg_versions"),
        ({"wait_timeout": 0}, "option wait_timeout: 0 is not a duration"),
        ({"wait_sleep": -1}, "option wait_sleep: -1 is not a duration"),
        ({"replicas": 0}, "replicas is 0"),
        ({"retry": 11}, "retry is 11"),
        ({"url": "http://u:hunter2@mirror/k.qcow2"}, "credentials in its user-info"),
        ({"url": "http://u:hunter2@mirror/k.qcow2", "state": "absent"}, "credentials in its user-info"),
        ({"url": None, "src": "/x.qcow2", "harvester_url": "https://u:hunter2@hv"}, "option harvester_url ("),
    ],
)
def test_bad_input_is_refused_before_anything_is_read_or_written(given, text):
    kube = cluster(params(**given))
    with pytest.raises(errors.PipelineError) as exc:
        run(kube)
    assert text in exc.value.msg and "hunter2" not in exc.value.msg
    assert kube.writes == []


def test_a_forbidden_catalog_write_says_what_exists_and_a_rerun_completes():
    p = params(catalog={"namespace": "dbaas", "name": "catalog"})
    forbidden = ApiError(
        403, "Forbidden", 'configmaps is forbidden: User "x" cannot create resource "configmaps"'
    )
    kube = cluster(p, refuse={("v1", "ConfigMap"): forbidden})
    with pytest.raises(errors.PipelineError) as exc:
        run(kube)
    msg = exc.value.msg
    assert msg.startswith(
        "VirtualMachineImage %s/%s is registered (Imported=True, StorageClass lh-1)" % (NS, IMAGE)
    )
    assert "not recorded in catalog ConfigMap dbaas/catalog" in msg and "403" in msg
    result = exc.value.result
    assert result["registered"] is True and result["catalog_written"] is False
    assert result["missing_permission"] == "get, create and update on configmaps in namespace dbaas"
    assert kube.writes == [("create", "VirtualMachineImage", NS, IMAGE)]
    kube.refuse = {}
    done = run(kube)
    assert done["catalog_changed"] is True and kube.writes[-1] == ("create", "ConfigMap", "dbaas", "catalog")
    assert [w for w in kube.writes if w[1] == "VirtualMachineImage"] == [
        ("create", "VirtualMachineImage", NS, IMAGE)
    ]


def test_a_failed_import_says_the_image_exists_and_the_catalog_was_not_written(tmp_path):
    def fails(obj):
        obj["status"] = {
            "failed": 4,
            "conditions": [
                {"type": "RetryLimitExceeded", "status": "True", "message": "failed to download %s" % SIGNED}
            ],
        }

    kube = FakeKube(params(catalog={"path": str(tmp_path / "c.yaml")}), on_create=fails)
    with pytest.raises(errors.PipelineError) as exc:
        run(kube)
    assert "RetryLimitExceeded" in exc.value.msg and "feedface" not in exc.value.msg
    assert "exists (created by this run); the revision is not recorded in catalog file" in exc.value.msg
    assert exc.value.result["catalog_written"] is False and not (tmp_path / "c.yaml").exists()


def _registered(tmp_path, tip=True):
    catalog_file = tmp_path / "catalog.yaml"
    kube = cluster(params(catalog={"path": str(catalog_file)}))
    run(kube)
    if tip:
        doc = yaml.safe_load(catalog_file.read_text())
        doc["streams"] = {"22.04": {"tip": "v20260615", "validated": True}}
        doc["default_stream"] = "22.04"
        catalog_file.write_text(yaml.safe_dump(doc))
    kube.params = params(catalog={"path": str(catalog_file)}, state="absent", url=None)
    kube.writes = []
    return kube, catalog_file


def test_absent_refuses_an_image_a_database_runs_on_and_the_default_tip(tmp_path):
    kube, catalog_file = _registered(tmp_path)
    kube.serve("db.goldenimage.io", "v1alpha1", "DBInstance", "dbinstances")
    kube.add(
        {
            "apiVersion": "db.goldenimage.io/v1alpha1",
            "kind": "DBInstance",
            "metadata": {"namespace": "orders", "name": "pg-1"},
            "status": {"phase": "Available", "appliedSpec": {"imageRevision": "v20260615"}},
        }
    )
    with pytest.raises(errors.Refusal) as exc:
        run(kube)
    msg = exc.value.msg
    assert "DBInstance orders/pg-1 runs on it: its applied revision is v20260615" in msg
    assert "catalog file %s serves it as stream 22.04: its tip is v20260615" % catalog_file in msg
    assert kube.writes == [] and kube.get(*VMI, IMAGE, NS) is not None
    assert yaml.safe_load(catalog_file.read_text())["images"]["v20260615"]["imported"] is True


def test_absent_deletes_an_unused_image_and_the_catalog_follows(tmp_path):
    kube, catalog_file = _registered(tmp_path, tip=False)
    result = run(kube)
    assert result["changed"] and result["catalogs_updated"] == ["catalog file %s" % catalog_file]
    assert kube.writes == [("delete", "VirtualMachineImage", NS, IMAGE)]
    assert yaml.safe_load(catalog_file.read_text())["images"]["v20260615"]["imported"] is False
    assert run(kube)["changed"] is False


def test_absent_finds_catalog_configmaps_nobody_named(tmp_path):
    kube, _catalog_file = _registered(tmp_path)
    text = _catalog_file.read_text()
    kube.params = params(state="absent", url=None)
    kube.add(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"namespace": "ops", "name": "cat"},
            "data": {"catalog.yaml": text},
        }
    )
    kube.add(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"namespace": "ops", "name": "bad"},
            "data": {"catalog.yaml": "version: 9"},
        }
    )
    with pytest.raises(errors.Refusal, match=r"ConfigMap ops/cat serves it as stream 22.04"):
        run(kube)
    assert any("catalog ConfigMap ops/bad" in w for w in kube.warnings)


def test_absent_shows_the_image_and_the_catalog_in_the_diff(tmp_path):
    kube, catalog_file = _registered(tmp_path, tip=False)
    kube._diff = True
    result = run(kube)
    headers = [d["before_header"] for d in result["diff"]]
    assert headers == ["VirtualMachineImage %s/%s" % (NS, IMAGE), "catalog file %s" % catalog_file]
    assert "imported: true" in result["diff"][1]["before"] and "imported: false" in result["diff"][1]["after"]
    assert "feedface" not in json.dumps(result["diff"])


def test_a_registration_without_its_majors_or_stream_is_refused_by_the_argument_spec():
    spec, rules = baked_image.argument_spec(), baked_image.ARGUMENT_RULES
    given = {"name": "v20260615", "url": SIGNED}
    assert rejected(spec, rules, dict(given, os_version="22.04", pg_versions=["17"])) == []
    assert rejected(spec, rules, dict(given, os_version="22.04")) == [
        "state is present but all of the following are missing: pg_versions"
    ]
    assert rejected(spec, rules, {"name": "v20260615", "state": "absent"}) == []


def test_an_empty_list_of_majors_is_refused_before_anything_is_read():
    kube = FakeKube(params(pg_versions=[]))
    with pytest.raises(
        errors.Refusal, match="revision v20260615: pg_versions is required with state=present"
    ):
        baked_image.BakedImage(kube).run()
    assert kube.writes == []


def test_an_upload_of_a_file_that_is_not_there_is_refused(tmp_path):
    kube = FakeKube(params(url=None, src=str(tmp_path / "absent.qcow2"), checksum=None))
    with pytest.raises(errors.Refusal, match=r"absent\.qcow2: it does not exist or is not a file"):
        baked_image.BakedImage(kube).run()
