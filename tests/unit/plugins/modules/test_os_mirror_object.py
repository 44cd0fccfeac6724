"""os_mirror_object's runner, called directly against the lab's loopback S3: no SystemExit to catch."""

import hashlib

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.modules import os_mirror_object as module_file

from tests.unit.plugins.modules._bucket_lab import (
    build,
    connection,
    keys,
    new_bucket,
)


@pytest.fixture
def image(tmp_path):
    path = tmp_path / "disk.qcow2"
    path.write_bytes(b"QFI\xfb" + bytes(range(256)) * 64)
    return path


def runner(s3, bucket, check=False, **params):
    args = dict(connection(s3[0]), bucket=bucket, family="debian-12", version="20260801")
    args.update(params)
    return module_file.MirrorObject(build(module_file, check=check, diff=True, **args))


def test_mirror_then_skip_then_check_mode(s3, image):
    client = s3[1]
    bucket = new_bucket(client)
    digest = hashlib.sha256(image.read_bytes()).hexdigest()
    result = runner(s3, bucket, path=str(image)).run()
    assert result["changed"] is True and result["method"] == "put"
    assert result["key"] == "debian-12/20260801/sha256-%s/disk.qcow2" % digest
    assert keys(client, bucket) == [result["key"]]
    again = runner(s3, bucket, path=str(image)).run()
    assert (again["changed"], again["action"], again["bytes_moved"]) == (False, "skip", 0)
    other = new_bucket(client)
    predicted = runner(s3, other, check=True, path=str(image)).run()
    assert predicted["changed"] is True and keys(client, other) == []


@pytest.mark.parametrize(
    "params, words",
    [
        ({"url": "http://mirror:s3cr3t@upstream.example/disk.qcow2"}, "carries credentials"),
        ({"version": 1.1}, "quote it"),
        ({"url_timeout": 0}, "greater than zero"),
        ({"url_timeout": -5}, "greater than zero"),
        ({"part_size": "0"}, "positive number of bytes"),
        ({"part_size": "-8M"}, "positive number of bytes"),
        ({"concurrency": 0}, "give 1 or more"),
        ({"url": "ftp://upstream.example/disk.qcow2"}, "not an http(s) URL"),
    ],
)
def test_refused_before_any_request(s3, image, params, words):
    client = s3[1]
    bucket = new_bucket(client)
    source = {} if "url" in params else {"path": str(image)}
    with pytest.raises(Refusal) as caught:
        runner(s3, bucket, **dict(source, **params)).run()
    assert words in caught.value.msg
    assert "s3cr3t" not in str(caught.value.result)
    assert keys(client, bucket) == []
