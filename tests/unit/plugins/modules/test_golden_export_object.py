"""golden_export_object's runner against the lab's loopback S3: keys, refusals, skip, upload."""

import hashlib

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.modules import golden_export_object as module_file

from tests.unit.plugins.modules._bucket_lab import (
    build,
    connection,
    keys,
    new_bucket,
)

KEY = "windows/11/2026-08-09/windows11-x64-golden.qcow2"


@pytest.fixture
def image(tmp_path):
    path = tmp_path / "golden.qcow2"
    path.write_bytes(b"QFI\xfb sealed golden")
    return path


def runner(s3, bucket, image, check=False, **params):
    args = dict(connection(s3[0]), bucket=bucket, path=str(image))
    args.update(params)
    args.setdefault("key", KEY)
    return module_file.ExportObject(build(module_file, check=check, **args))


@pytest.mark.parametrize(
    "key",
    [
        "../escape.qcow2",
        "windows/../../b.qcow2",
        "windows/./b.qcow2",
        "/windows/b.qcow2",
        "windows//b.qcow2",
        "windows/11/",
        "k" * 1102,
        "windows\\b.qcow2",
    ],
)
def test_keys_outside_the_rule_are_refused_before_any_upload(s3, image, key):
    client = s3[1]
    bucket = new_bucket(client)
    with pytest.raises(Refusal, match="option key"):
        runner(s3, bucket, image, key=key).run()
    assert keys(client, bucket) == []


@pytest.mark.parametrize(
    "params, words",
    [
        ({"source": "https://user:s3cr3t@build.example/win11"}, "carries credentials"),
        ({"part_size": 0}, "positive number of bytes"),
        ({"concurrency": -1}, "give 1 or more"),
    ],
)
def test_bad_inputs_are_refused_before_any_upload(s3, image, params, words):
    client = s3[1]
    bucket = new_bucket(client)
    with pytest.raises(Refusal) as caught:
        runner(s3, bucket, image, **params).run()
    assert words in caught.value.msg and "s3cr3t" not in caught.value.msg
    assert keys(client, bucket) == []


def test_upload_skip_and_the_overwrite_refusal(s3, image, tmp_path):
    client = s3[1]
    bucket = new_bucket(client)
    source = "https://build.example/win11?token=t0k3n"
    assert runner(s3, bucket, image, check=True, source=source).run()["changed"] is True
    assert keys(client, bucket) == []
    result = runner(s3, bucket, image, source=source).run()
    assert (result["changed"], result["action"], result["key"]) == (True, "upload", KEY)
    stored = client.head_object(Bucket=bucket, Key=KEY)["Metadata"]
    assert stored["sha256"] == hashlib.sha256(image.read_bytes()).hexdigest()
    assert stored["source-url"] == "https://build.example/win11?token=REDACTED"
    again = runner(s3, bucket, image).run()
    assert (again["changed"], again["action"]) == (False, "skip")
    changed = tmp_path / "changed.qcow2"
    changed.write_bytes(b"QFI\xfb another golden")
    with pytest.raises(Refusal, match="refusing to overwrite it") as caught:
        runner(s3, bucket, changed).run()
    assert "new key (a new date)" in caught.value.msg and caught.value.result["changed"] is False
