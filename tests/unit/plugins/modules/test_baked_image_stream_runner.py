"""The baked_image_stream runner called with parameters and a catalog file: a result, or a PipelineError."""

import pytest
import yaml
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import catalog
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import errors
from ansible_collections.goldenimage.pipeline.plugins.modules import baked_image_stream
from fake_kube import FakeKube, params_of


def read_facts(stream="22.04", majors=("16", "17"), keys=()):
    """A catalog entry's facts as baked_image records them from an artifact's bytes."""
    return {
        "os_release": {"id": "ubuntu", "version_id": stream, "version_codename": None},
        "pg_majors": list(majors),
        "initialized_clusters": [],
        "private_keys": list(keys),
        "machine_id": "empty",
    }


def catalog_file(tmp_path, imported=True, tested=False, facts=True):
    doc, _changed = catalog.register_image(
        catalog.empty(),
        "v20260615",
        "22.04",
        ["16", "17"],
        "a" * 128,
        "upload",
        imported=imported,
        facts=(read_facts() if facts is True else facts) or None,
    )
    if tested:  # a passing smoke test of the revision is on record
        instance = {
            "status": {
                "phase": "Available",
                "appliedSpec": {"imageRevision": "v20260615", "engineVersion": "17"},
            }
        }
        doc, _changes = catalog.record_smoke_test(
            doc, catalog.smoke_test(doc, "v20260615", "smoke/pg", instance, "t", "ops")
        )
    path = tmp_path / "catalog.yaml"
    path.write_text(catalog.dump(doc))
    return path


def run(path, check_mode=False, **given):
    p = params_of(baked_image_stream.argument_spec(), catalog={"path": str(path)}, **given)
    kube = FakeKube(p, check_mode=check_mode)
    return baked_image_stream.run(kube), kube


DBI = ("db.goldenimage.io/v1alpha1", "DBInstance")


def smoke_instance(revision="v20260615", phase="Available", engine="17"):
    return {
        "apiVersion": DBI[0],
        "kind": DBI[1],
        "metadata": {"namespace": "smoke", "name": "pg-smoke"},
        "status": {"phase": phase, "appliedSpec": {"imageRevision": revision, "engineVersion": engine}},
    }


def run_with(path, objects, **given):
    p = params_of(baked_image_stream.argument_spec(), catalog={"path": str(path)}, **given)
    kube = FakeKube(p, objects)
    return baked_image_stream.run(kube), kube


def test_moves_the_tip_signs_it_off_and_reruns_change_nothing(tmp_path):
    path = catalog_file(tmp_path)
    doc, _changes = catalog.record_smoke_test(
        catalog.load(path.read_text()),
        catalog.smoke_test(
            catalog.load(path.read_text()), "v20260615", "smoke/pg", smoke_instance(), "t", "ops"
        ),
    )
    path.write_text(catalog.dump(doc))
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
    recorded = "catalog file %s recorded imported: false for revision v20260615" % path
    # Check mode says what it would write, and writes nothing.
    with pytest.raises(errors.PipelineError, match=gone) as exc:
        run(path, check_mode=True, os_version="22.04", revision="v20260615")
    assert recorded.replace("recorded", "would record") in exc.value.msg
    assert exc.value.result["changed"] is True and exc.value.result["refused"] is True
    assert exc.value.result["catalog"]["images"]["v20260615"]["imported"] is False
    assert path.read_text() == catalog.dump(doc)
    # The real run records imported: false, then refuses the move.
    with pytest.raises(errors.PipelineError, match=gone) as exc:
        run(path, os_version="22.04", revision="v20260615")
    assert recorded in exc.value.msg and exc.value.result["changed"] is True
    stored = yaml.safe_load(path.read_text())
    assert stored["streams"] == {} and stored["images"]["v20260615"]["imported"] is False
    # Once recorded, a rerun is refused and changes nothing.
    with pytest.raises(errors.PipelineError, match=gone) as exc:
        run(path, os_version="22.04", revision="v20260615")
    assert "recorded" not in exc.value.msg and "changed" not in exc.value.result
    # A stream already on it: no sign-off and no default lands on the gone image either.
    doc, _changed = catalog.set_stream(doc, "22.04", tip="v20260615")
    path.write_text(catalog.dump(doc))
    for change in (dict(validated=True), dict(validated=True, default=True)):
        with pytest.raises(errors.PipelineError, match=gone):
            run(path, os_version="22.04", **change)
    stored = yaml.safe_load(path.read_text())
    assert stored["streams"]["22.04"] == {"tip": "v20260615", "validated": False}
    assert stored["images"]["v20260615"]["imported"] is False


def test_a_signed_entry_of_another_revision_is_written_back_without_its_signature(tmp_path):
    path = catalog_file(tmp_path, tested=True)
    signed = "https://s3.example/b/v20260301.qcow2?X-Amz-Credential=AKIDEXAMPLE&X-Amz-Signature=" + "f" * 64
    stored = yaml.safe_load(path.read_text())
    stored["images"]["v20260301"] = dict(stored["images"]["v20260615"], source=signed)
    path.write_text(yaml.safe_dump(stored))
    raw = path.read_text()
    asked = dict(os_version="22.04", revision="v20260615", validated=True, default=True)
    predicted, kube = run(path, check_mode=True, **asked)
    assert predicted["changed"] and path.read_text() == raw
    assert kube.warnings and "v20260301" in kube.warnings[0] and "would be written" in kube.warnings[0]
    result, kube = run(path, **asked)
    text = path.read_text()
    for secret in ("X-Amz-Signature", "X-Amz-Credential", "AKIDEXAMPLE", "f" * 64):
        assert secret not in text and secret not in repr(result) and secret not in repr(kube.warnings)
    assert yaml.safe_load(text)["images"]["v20260301"]["source"] == "https://s3.example/b/v20260301.qcow2"
    assert run(path, **asked)[0]["changed"] is False
    # A stream already as asked: the rewrite alone is a change, once.
    stored = yaml.safe_load(raw)
    stored.update(streams={"22.04": {"tip": "v20260615", "validated": True}}, default_stream="22.04")
    path.write_text(yaml.safe_dump(stored))
    again, kube = run(path, **asked)
    assert again["changed"] is True and "X-Amz" not in path.read_text() and len(kube.warnings) == 1
    assert run(path, **asked)[0]["changed"] is False


def test_validation_without_a_recorded_smoke_test_is_refused(tmp_path):
    path = catalog_file(tmp_path)
    with pytest.raises(errors.PipelineError) as exc:
        run(path, os_version="22.04", revision="v20260615", validated=True)
    assert "revision v20260615 cannot be validated, no smoke test of it is recorded" in exc.value.msg
    assert yaml.safe_load(path.read_text())["streams"] == {}


def test_a_passing_smoke_test_is_recorded_with_who_and_when_and_then_validates(tmp_path):
    path = catalog_file(tmp_path)
    result, _kube = run_with(
        path,
        [smoke_instance()],
        os_version="22.04",
        revision="v20260615",
        smoke_test={"namespace": "smoke", "name": "pg-smoke"},
        tested_by="ops",
        validated=True,
    )
    assert result["stream"] == {"tip": "v20260615", "validated": True}
    test = result["smoke_test"]
    assert (test["result"], test["by"], test["engine_version"], test["dbinstance"]) == (
        "passed",
        "ops",
        "17",
        "smoke/pg-smoke",
    )
    assert test["at"].endswith("Z")
    stored = yaml.safe_load(path.read_text())["images"]["v20260615"]["smoke_tests"]
    assert stored == [test]


@pytest.mark.parametrize(
    ("instance", "why"),
    [
        (None, "does not exist"),
        (smoke_instance(phase="Provisioning"), "is Provisioning, not Available"),
        (smoke_instance(revision="v20260101"), "runs v20260101, not v20260615"),
        (smoke_instance(engine=""), "answers with no engineVersion"),
        (smoke_instance(engine="15"), "answers engineVersion 15, which v20260615 does not carry"),
    ],
)
def test_a_failed_smoke_test_is_recorded_and_refuses_the_sign_off(tmp_path, instance, why):
    path = catalog_file(tmp_path)
    with pytest.raises(errors.PipelineError) as exc:
        run_with(
            path,
            [instance] if instance else [],
            os_version="22.04",
            revision="v20260615",
            smoke_test={"namespace": "smoke", "name": "pg-smoke"},
            validated=True,
        )
    assert "its last smoke test failed (smoke/pg-smoke at" in exc.value.msg and why in exc.value.msg
    doc = yaml.safe_load(path.read_text())
    assert doc["images"]["v20260615"]["smoke_tests"][-1]["result"] == "failed"
    assert doc["streams"] == {}


def test_a_revision_without_facts_read_from_its_bytes_never_reaches_a_tip(tmp_path):
    """Registered without artifact: its OS and majors are only declared, so it is not served, signed off
    or made the default; the refusal says to register it again with its artifact. Nothing is written."""
    path = catalog_file(tmp_path, facts=False, tested=True)
    before = path.read_text()
    for asked in (
        dict(revision="v20260615"),
        dict(revision="v20260615", validated=True, default=True),
    ):
        with pytest.raises(errors.PipelineError) as exc:
            run(path, os_version="22.04", **asked)
        msg = exc.value.msg
        assert "revision v20260615 cannot be at its tip, validated or the default" in msg, msg
        assert "no facts read from its bytes are recorded" in msg and "baked_image artifact:" in msg, msg
        assert path.read_text() == before


def test_recorded_facts_that_contradict_the_entry_are_refused_at_the_tip(tmp_path):
    facts = read_facts(stream="24.04", majors=("17",), keys=["/etc/ssl/private/ssl-cert-snakeoil.key"])
    path = catalog_file(tmp_path, facts=facts)
    with pytest.raises(errors.PipelineError) as exc:
        run(path, os_version="22.04", revision="v20260615")
    msg = exc.value.msg
    assert "os-release says VERSION_ID=24.04, it is declared 22.04" in msg, msg
    assert "it holds PostgreSQL 17, it is declared 16, 17" in msg, msg
    assert "ssl-cert-snakeoil.key every VM would share" in msg and "build a new revision" in msg, msg


def test_check_mode_predicts_a_sign_off_on_the_smoke_test_it_would_record(tmp_path):
    """Check mode records nothing, yet predicts the sign-off the recorded smoke test would allow."""
    path = catalog_file(tmp_path)
    before = path.read_text()
    asked = dict(
        os_version="22.04",
        revision="v20260615",
        validated=True,
        smoke_test={"namespace": "smoke", "name": "pg-smoke"},
    )
    p = params_of(baked_image_stream.argument_spec(), catalog={"path": str(path)}, **asked)
    result = baked_image_stream.run(FakeKube(p, [smoke_instance()], check_mode=True))
    assert result["changed"] and result["stream"] == {"tip": "v20260615", "validated": True}
    assert result["smoke_test"]["result"] == "passed" and path.read_text() == before
