"""S3 adapter against the lab's S3 (versitygw behind the lab's relay, tests/lab/s3.py) on loopback; the lab's
faults play a store that lags behind a create."""

import json

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.s3 import _s3, _s3_module
from ansible_collections.goldenimage.pipeline.plugins.module_utils.s3._s3 import s3_client
from ansible_collections.goldenimage.pipeline.plugins.module_utils.s3._s3_module import S3_ARG_SPEC

from tests.lab.s3 import Fault


@pytest.fixture
def endpoint(lab_s3):
    return lab_s3.endpoint_url


@pytest.fixture
def s3(lab_s3):
    return s3_client(
        endpoint_url=lab_s3.endpoint_url,
        access_key=lab_s3.access_key,
        secret_key=lab_s3.secret_key,
        max_attempts=1,
    )


def test_client_talks_path_style_to_the_endpoint(s3, endpoint):
    s3.create_bucket(Bucket="goldens")
    s3.put_object(Bucket="goldens", Key="debian/12/disk.qcow2", Body=b"qcow")
    assert s3.get_object(Bucket="goldens", Key="debian/12/disk.qcow2")["Body"].read() == b"qcow"
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "goldens", "Key": "k"})
    assert url.startswith(endpoint + "/goldens/k")
    assert s3.meta.config.retries == {"mode": "standard", "total_max_attempts": 1}
    assert s3.meta.region_name == "us-east-1"


def listings(bucket):
    """Fault selector: the ListObjectsV2 requests of ``bucket``; their ``amz-sdk-request`` headers in
    ``tries``."""
    tries = []

    def when(method, path, names, headers):
        if method == "GET" and "list-type" in names and path.strip("/") == bucket:
            tries.append(headers.get("amz-sdk-request", ""))
            return True
        return False

    when.tries = tries
    return when


def test_a_bucket_not_visible_yet_is_retried_within_botocores_attempts(lab_s3, monkeypatch):
    # The bucket's listing answers NoSuchBucket twice, as a store that lags behind a create.
    s3 = s3_client(
        endpoint_url=lab_s3.endpoint_url, access_key=lab_s3.access_key, secret_key=lab_s3.secret_key
    )
    s3.create_bucket(Bucket="late")
    selector = listings("late")
    lag = Fault(selector, 404, "NoSuchBucket", times=2)
    monkeypatch.setattr(lab_s3.front, "faults", [lag])
    assert s3.list_objects_v2(Bucket="late")["KeyCount"] == 0
    assert lag.hits == 2
    # One loop, botocore's: the third attempt of the same call, under the policy's limit.
    tries = [dict(f.strip().split("=", 1) for f in t.split(";")) for t in selector.tries]
    assert [t["attempt"] for t in tries] == ["1", "2", "3"] and {t["max"] for t in tries} == {"5"}
    assert s3.meta.config.retries == _s3.retry_config() == {"mode": "standard", "total_max_attempts": 5}


def test_a_missing_bucket_is_an_answer_after_the_attempts_and_other_codes_are_not_retried(
    lab_s3, monkeypatch
):
    s3 = s3_client(
        endpoint_url=lab_s3.endpoint_url,
        access_key=lab_s3.access_key,
        secret_key=lab_s3.secret_key,
        max_attempts=3,
    )
    selector = listings("never")
    gone = Fault(selector, 404, "NoSuchBucket", times=100)
    monkeypatch.setattr(lab_s3.front, "faults", [gone])
    with pytest.raises(Exception) as err:
        s3.list_objects_v2(Bucket="never")
    assert _s3.error_code(err.value) == "NoSuchBucket" and gone.hits == 3
    # A missing key, or a missing bucket on any other call, is an answer at once.
    s3.create_bucket(Bucket="present")
    with pytest.raises(Exception) as err:
        s3.get_object(Bucket="present", Key="absent")
    assert _s3.error_code(err.value) == "NoSuchKey"
    with pytest.raises(Exception) as err:
        s3.head_bucket(Bucket="never")
    assert _s3.error_code(err.value) == "404"


def test_profile_and_aws_config_as_amazon_aws_takes_them(endpoint, tmp_path, monkeypatch):
    config = tmp_path / "config"
    config.write_text("[profile lab]\naws_access_key_id = from-profile\naws_secret_access_key = s\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    client = _s3_module.s3_client_from_params(
        {
            "endpoint_url": endpoint,
            "profile": "lab",
            "aws_config": {"connect_timeout": 3, "user_agent_extra": "x"},
        }
    )
    assert client._request_signer._credentials.access_key == "from-profile"
    assert client.meta.config.connect_timeout == 3 and client.meta.config.user_agent_extra == "x"
    assert client.meta.config.retries == _s3.retry_config()
    with pytest.raises(_s3.S3Error) as both:
        s3_client(endpoint_url=endpoint, profile="lab", access_key="a", secret_key="b")
    assert "profile lab" in both.value.msg and "one or the other" in both.value.msg
    with pytest.raises(_s3.S3Error) as bad:
        s3_client(endpoint_url=endpoint, aws_config={"no_such_setting": 1})
    assert bad.value.msg.startswith("aws_config: ") and "no_such_setting" in bad.value.msg
    with pytest.raises(_s3.S3Error) as unknown:
        s3_client(endpoint_url=endpoint, profile="absent")
    assert "profile absent" in unknown.value.msg


def test_arg_spec_keeps_secrets_out_of_logs():
    assert S3_ARG_SPEC["secret_key"]["no_log"] is True
    assert S3_ARG_SPEC["session_token"]["no_log"] is True
    assert S3_ARG_SPEC["access_key"]["no_log"] is False
    assert set(S3_ARG_SPEC["endpoint_url"]["aliases"]) == {"s3_url", "aws_endpoint_url"}
    assert S3_ARG_SPEC["access_key"]["fallback"][1] == ["AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY"]
    # amazon.aws's names, so a module_defaults entry written for it fits.
    assert S3_ARG_SPEC["profile"]["aliases"] == ["aws_profile"]
    assert S3_ARG_SPEC["profile"]["fallback"][1] == ["AWS_PROFILE", "AWS_DEFAULT_PROFILE"]
    assert S3_ARG_SPEC["aws_config"] == {"type": "dict"}


def test_client_from_params_and_certificate_options(endpoint):
    client = _s3_module.s3_client_from_params(
        {
            "endpoint_url": endpoint,
            "access_key": "a",
            "secret_key": "b",
            "region": "eu-west-1",
            "validate_certs": None,
        }
    )
    assert client.meta.region_name == "eu-west-1"
    assert client.meta.endpoint_url == endpoint
    insecure = s3_client(endpoint_url="https://127.0.0.1:1", validate_certs=False)
    assert insecure._endpoint.http_session._verify is False
    pinned = s3_client(endpoint_url="https://127.0.0.1:1", ca_bundle="/etc/ssl/certs/ca-certificates.crt")
    assert pinned._endpoint.http_session._verify == "/etc/ssl/certs/ca-certificates.crt"


def test_endpoint_with_user_info_is_refused_by_every_factory():
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal

    for build in (
        lambda: s3_client(endpoint_url="http://key:s3cr3t@127.0.0.1:1"),
        lambda: _s3.anonymous_client("http://key:s3cr3t@127.0.0.1:1"),
        lambda: _s3_module.s3_client_from_params({"endpoint_url": "http://key:s3cr3t@127.0.0.1:1"}),
    ):
        with pytest.raises(Refusal) as caught:
            build()
        assert "s3cr3t" not in caught.value.msg and "access_key/secret_key" in caught.value.msg


def test_anonymous_client_signs_nothing(endpoint, s3):
    from botocore import UNSIGNED

    s3.create_bucket(Bucket="open")
    s3.put_object(Bucket="open", Key="k", Body=b"x")
    anyone = {
        "Effect": "Allow",
        "Principal": "*",
        "Action": "s3:GetObject",
        "Resource": "arn:aws:s3:::open/*",
    }
    s3.put_bucket_policy(Bucket="open", Policy=json.dumps({"Version": "2012-10-17", "Statement": [anyone]}))
    anonymous = _s3.anonymous_client(endpoint, timeout=3)
    assert anonymous.meta.config.signature_version is UNSIGNED
    assert anonymous.meta.config.retries == _s3.retry_config(_s3.PROBE_ATTEMPTS)
    assert anonymous.get_object(Bucket="open", Key="k")["Body"].read() == b"x"


def test_errors_are_pipeline_errors_with_urls_redacted(s3):
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError

    assert issubclass(_s3.S3Error, PipelineError) and issubclass(_s3.MissingBoto3, PipelineError)
    with pytest.raises(Exception) as caught:
        s3.list_objects_v2(Bucket="never-made")
    missing = _s3.call_failed("list s3://never-made", caught.value, bucket="never-made")
    assert missing.msg == "list s3://never-made: bucket never-made does not exist; create it first"
    assert missing.result["error_code"] == "NoSuchBucket"
