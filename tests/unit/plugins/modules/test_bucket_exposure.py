"""bucket_exposure's runner against the lab's loopback S3, which answers anonymous reads as S3 does."""

import json

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal
from ansible_collections.goldenimage.pipeline.plugins.modules import bucket_exposure as module_file

from tests.unit.plugins.modules._bucket_lab import (
    new_bucket,
    run_against,
)


def run(s3, **params):
    return run_against(module_file, s3, **params)


def test_a_public_read_object_is_exposed_and_a_licensed_upload_refused(s3):
    client = s3[1]
    bucket = new_bucket(client)
    client.put_object(Bucket=bucket, Key="private/w.qcow2", Body=b"QFI\xfb")
    # Public by the bucket's policy: the lab's S3 (versitygw) keeps no object ACLs.
    anyone = {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject"}
    anyone["Resource"] = "arn:aws:s3:::%s/private/w.qcow2" % bucket
    client.put_bucket_policy(
        Bucket=bucket, Policy=json.dumps({"Version": "2012-10-17", "Statement": [anyone]})
    )
    result = run(s3, bucket=bucket, key="private/w.qcow2")
    assert result["exposed"] is True and "get" in result["allowed"] and result["changed"] is False
    with pytest.raises(PipelineError) as caught:
        run(s3, bucket=bucket, key="private/w.qcow2", license="kms")
    assert "refusing to upload a KMS-configured image" in caught.value.msg
    assert caught.value.result["exposed"] is True and caught.value.result["refused"] is True


@pytest.mark.parametrize(
    "params, words",
    [
        ({"url": "https://key:s3cr3t@s3.example/b/k.qcow2"}, "carries credentials"),
        ({"bucket": "b", "key": "k", "timeout": 0}, "greater than zero"),
    ],
)
def test_refusals(s3, params, words):
    with pytest.raises(Refusal) as caught:
        run(s3, **params)
    assert words in caught.value.msg and "s3cr3t" not in caught.value.msg


def test_endpoint_with_user_info_is_refused_before_any_probe(s3):
    with pytest.raises(Refusal, match="option endpoint_url"):
        run(s3, bucket="b", key="k", endpoint_url="http://key:s3cr3t@127.0.0.1:9")
