"""The dbinstance_spec runner called with parameters and a catalog file: a result, or a PipelineError."""

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import catalog
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import errors
from ansible_collections.goldenimage.pipeline.plugins.modules import dbinstance_spec
from fake_kube import FakeKube, params_of

TODAY = "2026-12-01"


def catalog_file(tmp_path, validated=True):
    doc, _changed = catalog.register_image(
        catalog.empty(), "v20260615", "22.04", ["15", "16", "17"], "a" * 128, "upload", imported=True
    )
    doc, _changed = catalog.set_stream(doc, "22.04", tip="v20260615", validated=validated, default=True)
    path = tmp_path / "catalog.yaml"
    path.write_text(catalog.dump(doc))
    return path


def run(path, check_mode=False, **given):
    p = params_of(dbinstance_spec.argument_spec(), catalog={"path": str(path)}, today=TODAY, **given)
    kube = FakeKube(p, check_mode=check_mode)
    return dbinstance_spec.run(kube), kube


def test_an_absent_engine_version_takes_the_newest_major_of_the_default_tip(tmp_path):
    path = catalog_file(tmp_path)
    manifest = {
        "apiVersion": "dbaas.example.com/v1alpha1",
        "kind": "DBInstance",
        "metadata": {"name": "orders", "namespace": "shop"},
        "spec": {"storage": "20Gi"},
    }
    result, kube = run(path, definition=manifest)
    assert result["changed"] is False and result["defaulted"] is True and result["engine_version"] == "17"
    assert result["definition"]["spec"] == {"storage": "20Gi", "engineVersion": "17"}
    assert result["definition"]["metadata"] == manifest["metadata"]
    assert (result["default_stream"], result["tip"], result["supported"]) == (
        "22.04",
        "v20260615",
        ["15", "16", "17"],
    )
    assert kube.writes == [] and kube.mutations == 0
    assert run(path, check_mode=True, definition=manifest)[0] == result
    assert run(path, spec={"engineVersion": "16"})[0]["spec"] == {"engineVersion": "16"}


@pytest.mark.parametrize(
    "spec, match",
    [
        ({"engineVersion": "18"}, r"DBInstance shop/orders: engineVersion 18 is not in revision v20260615"),
        ({"engineVersion": "11"}, r"not in revision"),
        ({"engineVersion": "16.2"}, r"not a major version"),
    ],
)
def test_a_wrong_engine_version_is_refused_naming_the_instance_and_the_supported_majors(
    tmp_path, spec, match
):
    manifest = {"kind": "DBInstance", "metadata": {"name": "orders", "namespace": "shop"}, "spec": spec}
    with pytest.raises(errors.PipelineError, match=match) as exc:
        run(catalog_file(tmp_path), definition=manifest)
    assert "supported: 15, 16, 17" in exc.value.msg and "catalog file" in exc.value.msg


def test_past_eol_and_an_unvalidated_default_stream_are_refused(tmp_path):
    with pytest.raises(errors.PipelineError, match="15 reached end of life on 2027-11-11"):
        dbinstance_spec.run(
            FakeKube(
                params_of(
                    dbinstance_spec.argument_spec(),
                    catalog={"path": str(catalog_file(tmp_path))},
                    today="2027-11-12",
                    spec={"engineVersion": "15"},
                )
            )
        )
    with pytest.raises(errors.PipelineError, match="is not validated"):
        run(catalog_file(tmp_path, validated=False), spec={})
    with pytest.raises(errors.PipelineError, match="no spec mapping"):
        run(catalog_file(tmp_path), definition={"kind": "DBInstance"})


def test_a_misspelt_field_and_a_stream_the_catalog_lacks_are_refused_naming_the_instance(tmp_path):
    path = catalog_file(tmp_path)
    manifest = {"kind": "DBInstance", "metadata": {"name": "orders", "namespace": "shop"}}
    with pytest.raises(
        errors.PipelineError, match=r"DBInstance shop/orders: spec.engineVerison .* engineVersion"
    ):
        run(path, definition=dict(manifest, spec={"engineVerison": "13"}))
    with pytest.raises(
        errors.PipelineError, match=r"DBInstance shop/orders: OS stream 24.04 \(spec.osVersion\)"
    ):
        run(path, definition=dict(manifest, spec={"osVersion": "24.04"}))
    result = run(path, spec={"osVersion": "22.04"})[0]
    assert (result["stream"], result["tip"], result["engine_version"]) == ("22.04", "v20260615", "17")
