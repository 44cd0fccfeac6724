"""S3 adapter against the lab's S3 (moto behind a front that checks signatures) on loopback; the sleeper
is a fake clock."""

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils import _s3
from ansible_collections.goldenimage.pipeline.plugins.module_utils._s3 import (
    backoff_delay,
    jittered_backoff,
    s3_client,
)
from ansible_collections.goldenimage.pipeline.plugins.module_utils._s3_module import (
    S3_ARG_SPEC,
)


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


class Sleeps:
    def __init__(self, on_sleep=None):
        self.delays = []
        self.on_sleep = on_sleep

    def __call__(self, seconds):
        self.delays.append(seconds)
        if self.on_sleep:
            self.on_sleep(len(self.delays))


def test_client_talks_path_style_to_the_endpoint(s3, endpoint):
    s3.create_bucket(Bucket="goldens")
    s3.put_object(Bucket="goldens", Key="debian/12/disk.qcow2", Body=b"qcow")
    assert s3.get_object(Bucket="goldens", Key="debian/12/disk.qcow2")["Body"].read() == b"qcow"
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "goldens", "Key": "k"})
    assert url.startswith(endpoint + "/goldens/k")
    assert s3.meta.config.retries == {"mode": "standard", "total_max_attempts": 1}
    assert s3.meta.region_name == "us-east-1"


def test_eventual_consistency_is_ridden_out(s3):
    # The bucket appears only after the second back-off, as on a store that lags behind a create.
    def appear(n):
        if n == 2:
            s3.create_bucket(Bucket="late")

    sleeps = Sleeps(appear)
    put = jittered_backoff(retries=5, delay=1, max_delay=8, sleeper=sleeps, rng=lambda: 1.0)(s3.put_object)
    put(Bucket="late", Key="k", Body=b"x")
    assert sleeps.delays == [1, 2]
    assert s3.head_object(Bucket="late", Key="k")["ContentLength"] == 1


def test_gives_up_after_the_retries_with_the_real_error(s3):
    sleeps = Sleeps()

    @jittered_backoff(retries=4, delay=1, max_delay=3, sleeper=sleeps, rng=lambda: 1.0)
    def head():
        return s3.list_objects_v2(Bucket="never")

    with pytest.raises(Exception) as err:
        head()
    assert _s3.error_code(err.value) == "NoSuchBucket"
    assert sleeps.delays == [1, 2, 3, 3]


def test_codes_outside_the_list_fail_at_once(s3):
    sleeps = Sleeps()
    s3.create_bucket(Bucket="present")
    get = jittered_backoff(retries=5, sleeper=sleeps, extra_codes=())(s3.get_object)
    with pytest.raises(Exception) as err:
        get(Bucket="present", Key="absent")
    assert _s3.error_code(err.value) == "NoSuchKey"
    assert sleeps.delays == []
    # Without the eventual-consistency codes, a missing bucket is an answer, not a wait.
    with pytest.raises(Exception) as err:
        jittered_backoff(sleeper=sleeps, extra_codes=())(s3.list_objects_v2)(Bucket="never")
    assert _s3.error_code(err.value) == "NoSuchBucket"
    assert sleeps.delays == []


def test_full_jitter_spreads_below_the_cap():
    assert backoff_delay(0, 1, 30, rng=lambda: 0.5) == 0.5
    assert backoff_delay(3, 1, 30, rng=lambda: 0.5) == 4
    assert backoff_delay(10, 1, 30, rng=lambda: 0.999) == pytest.approx(29.97)
    assert backoff_delay(4, 1, 30, rng=lambda: 0.0) == 0


def test_non_client_errors_are_not_retried():
    sleeps = Sleeps()

    @jittered_backoff(sleeper=sleeps)
    def broken():
        raise ValueError("bad input")

    with pytest.raises(ValueError):
        broken()
    assert sleeps.delays == []


def test_arg_spec_keeps_secrets_out_of_logs():
    assert S3_ARG_SPEC["secret_key"]["no_log"] is True
    assert S3_ARG_SPEC["session_token"]["no_log"] is True
    assert S3_ARG_SPEC["access_key"]["no_log"] is False
    assert set(S3_ARG_SPEC["endpoint_url"]["aliases"]) == {"s3_url", "aws_endpoint_url"}
    assert S3_ARG_SPEC["access_key"]["fallback"][1] == ["AWS_ACCESS_KEY_ID"]


def test_client_from_params_and_certificate_options(endpoint):
    client = _s3.s3_client_from_params(
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
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.errors import Refusal

    for build in (
        lambda: s3_client(endpoint_url="http://key:s3cr3t@127.0.0.1:1"),
        lambda: _s3.anonymous_client("http://key:s3cr3t@127.0.0.1:1"),
        lambda: _s3.s3_client_from_params({"endpoint_url": "http://key:s3cr3t@127.0.0.1:1"}),
    ):
        with pytest.raises(Refusal) as caught:
            build()
        assert "s3cr3t" not in caught.value.msg and "access_key/secret_key" in caught.value.msg


def test_anonymous_client_signs_nothing(endpoint, s3):
    from botocore import UNSIGNED

    s3.create_bucket(Bucket="open")
    s3.put_object(Bucket="open", Key="k", Body=b"x", ACL="public-read")
    anonymous = _s3.anonymous_client(endpoint, timeout=3)
    assert anonymous.meta.config.signature_version is UNSIGNED
    assert anonymous.meta.config.retries == {"mode": "standard", "total_max_attempts": 2}
    assert anonymous.get_object(Bucket="open", Key="k")["Body"].read() == b"x"


def test_errors_are_pipeline_errors_with_urls_redacted(s3):
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.errors import PipelineError

    assert issubclass(_s3.S3Error, PipelineError) and issubclass(_s3.MissingBoto3, PipelineError)
    with pytest.raises(Exception) as caught:
        s3.list_objects_v2(Bucket="never-made")
    missing = _s3.call_failed("list s3://never-made", caught.value, bucket="never-made")
    assert missing.msg == "list s3://never-made: bucket never-made does not exist; create it first"
    assert missing.result["error_code"] == "NoSuchBucket"
