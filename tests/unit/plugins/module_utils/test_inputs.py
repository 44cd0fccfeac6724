import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import errors, inputs


@pytest.mark.parametrize("value", [0, -1, -0.5, "10", True, None])
def test_positive_refuses_what_is_not_a_duration(value):
    with pytest.raises(errors.Refusal) as exc:
        inputs.positive(value, "wait_timeout")
    assert "option wait_timeout" in exc.value.msg


def test_positive_accepts_and_allows_none_when_asked():
    assert inputs.positive(0.25, "wait_sleep") == 0.25
    assert inputs.positive(None, "wait_sleep", allow_none=True) is None


def test_positive_all_names_the_option():
    with pytest.raises(errors.Refusal) as exc:
        inputs.positive_all(
            {"wait_timeout": 10, "poll_interval": -3, "other": None},
            ["wait_timeout", "poll_interval", "other"],
        )
    assert exc.value.msg.startswith("option poll_interval: -3")


def test_version_string_refuses_a_yaml_float():
    with pytest.raises(errors.Refusal) as exc:
        inputs.version_string(1.1, "version")
    assert "quote it" in exc.value.msg and 'version: "1.1"' in exc.value.msg


@pytest.mark.parametrize("value, expected", [("1.10", "1.10"), (16, "16"), (None, None)])
def test_version_string_accepts(value, expected):
    assert inputs.version_string(value, "version") == expected


@pytest.mark.parametrize(
    "key",
    [
        "",
        "/abs/k",
        "../escape.qcow2",
        "windows/../../b.qcow2",
        "a//b",
        "a/./b",
        "a/",
        "x" * 1025,
        "a\\b",
        "a\nb",
        None,
    ],
)
def test_object_key_refuses(key):
    with pytest.raises(errors.Refusal):
        inputs.object_key(key)


def test_object_key_counts_bytes_not_characters():
    inputs.object_key("k" * 1024)
    with pytest.raises(errors.Refusal) as exc:
        inputs.object_key("é" * 513)
    assert "1026 bytes" in exc.value.msg


def test_object_key_accepts_a_plain_path():
    assert inputs.object_key("windows-11/2026-08-28/disk.qcow2") == "windows-11/2026-08-28/disk.qcow2"


def test_a_kubeconfig_that_is_not_there_is_refused_naming_its_path():
    assert inputs.kubeconfig_file("/etc/kube/config", True) == "/etc/kube/config"
    with pytest.raises(errors.Refusal) as error:
        inputs.kubeconfig_file("~/clusters/prod.yaml", False)
    assert error.value.msg.startswith(
        "kubeconfig ~/clusters/prod.yaml (option kubeconfig or K8S_AUTH_KUBECONFIG): the file does not exist"
    )


def test_a_file_to_read_must_be_there():
    assert (
        inputs.require_file("/tmp/disk.raw", True, "image /tmp/disk.raw", "build it first") == "/tmp/disk.raw"
    )
    with pytest.raises(errors.Refusal) as error:
        inputs.require_file("/tmp/disk.raw", False, "image /tmp/disk.raw", "build it first")
    assert error.value.msg == "image /tmp/disk.raw: it does not exist or is not a file; build it first"
    assert error.value.result["refused"] is True


def test_a_float_duration_is_shown_as_given():
    with pytest.raises(errors.Refusal, match=r"^option wait_sleep: 0 is not a duration"):
        inputs.positive(0.0, "wait_sleep")
    with pytest.raises(errors.Refusal, match=r"^option wait_sleep: -0\.5 is not a duration"):
        inputs.positive(-0.5, "wait_sleep")
