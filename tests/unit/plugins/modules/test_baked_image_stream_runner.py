"""The baked_image_stream runner called with parameters and a catalog file: a result, or a PipelineError."""

import pytest
import yaml
from ansible_collections.goldenimage.pipeline.plugins.module_utils import catalog, errors
from ansible_collections.goldenimage.pipeline.plugins.modules import baked_image_stream
from fake_kube import FakeKube, params_of


def catalog_file(tmp_path, imported=True):
    doc, _changed = catalog.register_image(
        catalog.empty(), "v20260615", "22.04", ["16", "17"], "a" * 128, "upload", imported=imported
    )
    path = tmp_path / "catalog.yaml"
    path.write_text(catalog.dump(doc))
    return path


def run(path, check_mode=False, **given):
    p = params_of(baked_image_stream.argument_spec(), catalog={"path": str(path)}, **given)
    kube = FakeKube(p, check_mode=check_mode)
    return baked_image_stream.run(kube), kube


def test_moves_the_tip_signs_it_off_and_reruns_change_nothing(tmp_path):
    path = catalog_file(tmp_path)
    asked = dict(os_version="22.04", revision="v20260615", validated=True, default=True)
    predicted, _diff = run(path, check_mode=True, **asked)
    assert predicted["changed"] and yaml.safe_load(path.read_text())["streams"] == {}
    result, kube = run(path, **asked)
    assert result["changed"] and result["stream"] == {"tip": "v20260615", "validated": True}
    assert result["default_stream"] == "22.04" and kube.writes == []
    assert run(path, **asked)[0]["changed"] is False


def test_refusals_name_the_catalog(tmp_path):
    path = catalog_file(tmp_path, imported=False)
    with pytest.raises(errors.PipelineError) as exc:
        run(path, os_version="22.04", revision="v20260615")
    assert exc.value.msg.startswith("catalog file %s: revision v20260615 is not imported yet" % path)
    assert exc.value.result["refused"] is True


@pytest.mark.parametrize("stream", [22.04, 24.1])
def test_a_float_stream_is_refused_with_quote_it(tmp_path, stream):
    with pytest.raises(errors.Refusal, match="quote it"):
        run(catalog_file(tmp_path), os_version=stream, revision="v20260615")


def test_a_stale_imported_true_does_not_move_the_tip(tmp_path):
    path = tmp_path / "catalog.yaml"
    doc, _changed = catalog.register_image(
        catalog.empty(),
        "v20260615",
        "22.04",
        ["16"],
        "a" * 128,
        "upload",
        image={"namespace": "hp", "name": "ubuntu-2204-postgres-v20260615"},
        imported=True,
    )
    path.write_text(catalog.dump(doc))
    gone = "revision v20260615: its VirtualMachineImage hp/ubuntu-2204-postgres-v20260615 does not exist"
    with pytest.raises(errors.PipelineError, match=gone):
        run(path, os_version="22.04", revision="v20260615")
    assert yaml.safe_load(path.read_text())["streams"] == {}
    # A stream already on it: no sign-off and no default lands on the gone image either.
    doc, _changed = catalog.set_stream(doc, "22.04", tip="v20260615")
    path.write_text(catalog.dump(doc))
    for change in (dict(validated=True), dict(validated=True, default=True)):
        with pytest.raises(errors.PipelineError, match=gone):
            run(path, os_version="22.04", **change)
    assert yaml.safe_load(path.read_text())["streams"]["22.04"] == {"tip": "v20260615", "validated": False}
