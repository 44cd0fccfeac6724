"""microvm_image's parameter refusals, through the runner (they come before the disk is opened)."""

from __future__ import annotations

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.modules import microvm_image

from tests.unit.plugins.modules import support


class Module:
    check_mode = False
    _diff = False

    def __init__(self, **params):
        self.params = {name: spec.get("default") for name, spec in microvm_image.argument_spec().items()}
        self.params.update(src="/nonexistent/disk.raw")
        self.params.update(params)

    def log(self, line):
        pass


def refused(match, **params):
    with pytest.raises(Refusal, match=match) as info:
        microvm_image.Runner(Module(**params)).run()
    assert info.value.result["refused"] is True
    return info.value


def rejected(**params):
    return support.rejected(microvm_image.argument_spec(), microvm_image.ARGUMENT_RULES, params)


def test_where_the_images_go_and_the_credentials_are_argument_rules():
    src = "/nonexistent/disk.raw"
    assert rejected(src=src) == ["one of the following is required: dest, registry"]
    assert rejected(src=src, registry="r.example.com") == [
        "missing parameter(s) required by 'registry': repository"
    ]
    assert rejected(src=src, dest="/tmp/x", username="u") == [
        "parameters are required together: username, password"
    ]
    assert rejected(src=src, dest="/tmp/x") == []
    assert rejected(src=src, registry="r.example.com", repository="a/b", username="u", password="p") == []


def test_a_null_repository_is_refused_not_a_crash():
    refused("is not an OCI repository name", registry="r.example.com", repository=None)


def test_credentials_in_the_registry_option():
    error = refused(
        "carries credentials in its user-info", registry="u:hunter2@r.example.com", repository="a/b"
    )
    assert "hunter2" not in error.msg


def test_password_over_plain_http():
    refused("over plain HTTP", registry="http://r.example.com", repository="a/b", username="u", password="p")


def test_a_float_kernel_version_is_refused():
    refused("arrived as a YAML number", dest="/tmp/x", kernel_version=5.1)


def test_a_bad_compression_level():
    refused("is not a gzip level", dest="/tmp/x", compression_level=0)


def test_a_bad_timeout():
    refused("option timeout", dest="/tmp/x", timeout=0)


def test_a_bad_tag():
    refused(r"^tag 'v1 beta': is not a valid OCI tag", dest="/tmp/x", tag="v1 beta")


def test_bad_tags():
    refused("name two images the same", dest="/tmp/x", tags={"kernel": "a", "modules": "a"})


def test_bad_repository():
    refused("is not an OCI repository name", registry="r.example.com", repository="Upper/Case")


def test_source_date_epoch_from_the_environment(monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    refused("SOURCE_DATE_EPOCH 'yesterday': is not a number", dest="/tmp/x")
    assert (
        microvm_image.check_inputs(Module(dest="/tmp/x").params, {"SOURCE_DATE_EPOCH": "1700000000"})["epoch"]
        == 1700000000
    )


def test_a_non_layout_dest_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine\n")
    refused("is a non-empty directory that is not an OCI image layout", dest=str(tmp_path))
    assert (tmp_path / "notes.txt").read_text() == "mine\n"


def test_password_is_no_log():
    assert microvm_image.argument_spec()["password"]["no_log"] is True
