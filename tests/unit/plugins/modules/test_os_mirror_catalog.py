"""os_mirror_catalog's runner against the lab's loopback S3."""

import json

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.modules import os_mirror_catalog as module_file

from tests.unit.plugins.modules._bucket_lab import (
    keys,
    new_bucket,
    run_against,
)

HEX = "a" * 64


def run(s3, **params):
    return run_against(module_file, s3, **params)


def test_catalog_is_written_once_with_source_urls_redacted(s3):
    client = s3[1]
    bucket = new_bucket(client)
    key = "debian-12/20260801/sha256-%s/disk.qcow2" % HEX
    # An object stored before URLs with credentials were refused: the catalog must not repeat them.
    client.put_object(
        Bucket=bucket,
        Key=key,
        Body=b"x",
        Metadata={"sha256": HEX, "source-url": "https://mirror:hunter2@up.example/d.qcow2?token=t0k3n"},
    )
    assert run(s3, check=True, bucket=bucket)["changed"] is True and keys(client, bucket) == [key]
    result = run(s3, bucket=bucket)
    assert result["changed"] is True and result["entries"] == 1
    body = client.get_object(Bucket=bucket, Key="catalog.json")["Body"].read().decode()
    assert "hunter2" not in body and "t0k3n" not in body
    entry = json.loads(body)["families"]["debian-12"]["versions"][0]
    assert entry["source_url"] == "https://REDACTED@up.example/d.qcow2?token=REDACTED"
    assert run(s3, bucket=bucket)["changed"] is False


@pytest.mark.parametrize(
    "catalog_key", ["../catalog.json", "ui/../../catalog.json", "/catalog.json", "c" * 1100 + ".json"]
)
def test_catalog_key_follows_the_one_key_rule(s3, catalog_key):
    client = s3[1]
    bucket = new_bucket(client)
    with pytest.raises(Refusal, match="option catalog_key"):
        run(s3, bucket=bucket, catalog_key=catalog_key)
    assert keys(client, bucket) == []


def test_endpoint_with_user_info_is_refused(s3):
    endpoint = s3[0].endpoint_url.replace("http://", "http://key:s3cr3t@")
    with pytest.raises(Refusal) as caught:
        run(s3, bucket="any", **{"endpoint_url": endpoint})
    assert "s3cr3t" not in caught.value.msg and "access_key/secret_key" in caught.value.msg
