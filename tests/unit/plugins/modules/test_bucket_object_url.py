"""bucket_object_url's runner against the lab's loopback S3: what it signs, what it refuses."""

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError, Refusal
from ansible_collections.goldenimage.pipeline.plugins.modules import bucket_object_url as module_file

from tests.unit.plugins.modules._bucket_lab import (
    new_bucket,
    run_against,
)


def run(s3, **params):
    return run_against(module_file, s3, **params)


def test_signs_and_returns_a_redacted_form_for_display(s3):
    endpoint, client = s3
    bucket = new_bucket(client)
    client.put_object(Bucket=bucket, Key="w/golden.qcow2", Body=b"QFI\xfb", Metadata={"sha256": "a" * 64})
    url = "%s/%s/w/golden.qcow2" % (endpoint.endpoint_url, bucket)
    result = run(s3, url=url, expiry=60, check_object=True)
    assert result["url"].startswith(url + "?") and "X-Amz-Signature=" in result["url"]
    signature = result["url"].rsplit("X-Amz-Signature=", 1)[1]
    assert signature not in result["url_redacted"] and "X-Amz-Signature=REDACTED" in result["url_redacted"]
    assert (result["size"], result["sha256"], result["changed"]) == (4, "a" * 64, False)


@pytest.mark.parametrize(
    "params, words",
    [
        ({"url": "http://key:s3cr3t@rgw.example/b/k.qcow2"}, "carries credentials"),
        ({"expiry": 0}, "greater than zero"),
        ({"expiry": -60}, "greater than zero"),
        ({"expiry": 8 * 24 * 3600}, "out of range"),
        ({"url": "http://rgw.example/b/k.qcow2?X-Amz-Signature=0"}, "already has a query string"),
        ({"access_key": "", "secret_key": ""}, "needs access_key and secret_key"),
    ],
)
def test_refusals(s3, params, words):
    args = dict(url="http://rgw.example/b/k.qcow2", **params) if "url" not in params else params
    with pytest.raises(Refusal) as caught:
        run(s3, **args)
    assert words in caught.value.msg and "s3cr3t" not in caught.value.msg
    assert "url" not in caught.value.result


def test_a_missing_object_is_not_signed(s3):
    endpoint, client = s3
    bucket = new_bucket(client)
    with pytest.raises(PipelineError, match="does not exist: nothing to import; no URL was signed"):
        run(s3, url="%s/%s/absent.qcow2" % (endpoint.endpoint_url, bucket), check_object=True)
