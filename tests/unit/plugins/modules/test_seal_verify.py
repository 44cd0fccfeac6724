"""seal_verify's runner called directly: it returns its result or raises, never exits."""

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import _kube
from ansible_collections.goldenimage.pipeline.plugins.modules import seal_verify


def runner(**params):
    with patch_module_args(params):
        module = _kube.KubeModule(
            argument_spec=seal_verify.argument_spec(),
            required_one_of=[("path", "pvc")],
            mutually_exclusive=[("path", "pvc")],
            required_by={"pvc": "namespace"},
            supports_check_mode=True,
        )
    return seal_verify.SealVerify(module)


def test_a_claim_in_check_mode_is_skipped_without_a_request():
    result = runner(
        pvc="golden", namespace="ns", verifier_image="seal-verifier:1", _ansible_check_mode=True
    ).run()
    assert result["skipped"] is True and result["changed"] is False
    assert "PersistentVolumeClaim ns/golden was not verified" in result["msg"]


@pytest.mark.parametrize("option", ["wait_timeout", "wait_sleep"])
def test_zero_waits_are_refused_before_anything(option):
    with pytest.raises(Refusal, match="option %s: 0 is not a duration" % option):
        runner(pvc="golden", namespace="ns", verifier_image="seal-verifier:1", **{option: 0}).run()


def test_a_claim_without_a_verifier_image_is_refused_even_in_check_mode():
    """No default image that would pip-install from the network: the image is named, or nothing runs."""
    with pytest.raises(Refusal, match=r"option verifier_image: .*images/seal-verifier/Containerfile"):
        runner(pvc="golden", namespace="ns", _ansible_check_mode=True).run()


def test_the_verifier_installs_nothing_unless_asked():
    assert "--install-missing" not in seal_verify.argument_spec()["verifier_command"]["default"]
    assert seal_verify.argument_spec()["install_missing"]["default"] is False


def test_a_file_that_is_no_disk_fails_naming_it(tmp_path):
    blank = tmp_path / "blank.raw"
    blank.write_bytes(b"\0" * 1024 * 1024)
    with pytest.raises(PipelineError, match="cannot verify %s: " % blank):
        runner(path=str(blank)).run()
