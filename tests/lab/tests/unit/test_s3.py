"""The lab's S3 answers as S3 does: Signature Version 4 (header and presigned), anonymous requests by
bucket policy, ACL and public access block, and S3's refusals for everything else.

The signature checker is held to the examples AWS publishes for S3 (same keys, same expected
signatures), then the running server (``lab_s3``) to what S3 answers over HTTP.
"""

from __future__ import annotations

import base64
import datetime
import json
import time
import urllib.error
import urllib.request
import uuid

import pytest
from botocore.exceptions import ClientError

from tests.lab import s3access
from tests.lab.s3 import S3Endpoint
from tests.lab.sigv4 import Refused, SignedRequest, check_header, check_presigned

# AWS's worked examples for S3 ("Signature Calculations for the Authorization Header: Transferring
# Payload in a Single Chunk" and "Authenticating Requests: Using Query Parameters").
EXAMPLE_KEYS = {"AKIAIOSFODNN7EXAMPLE": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}
EXAMPLE_NOW = datetime.datetime(2013, 5, 24, 0, 0, 30, tzinfo=datetime.UTC)
EXAMPLE_HOST = ("host", "examplebucket.s3.amazonaws.com")
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
EXAMPLE_SCOPE = "AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request"


def example_header_request(path, query, extra, signed, signature):
    authorization = "AWS4-HMAC-SHA256 Credential=%s,SignedHeaders=%s,Signature=%s" % (
        EXAMPLE_SCOPE,
        signed,
        signature,
    )
    headers = [EXAMPLE_HOST, *extra, ("x-amz-content-sha256", EMPTY_SHA256)]
    headers += [("x-amz-date", "20130524T000000Z"), ("Authorization", authorization)]
    return SignedRequest("GET", path, query, headers)


def test_header_signatures_of_the_published_examples_verify():
    get_object = example_header_request(
        "/test.txt",
        "",
        [("Range", "bytes=0-9")],
        "host;range;x-amz-content-sha256;x-amz-date",
        "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
    )
    listing = example_header_request(
        "/",
        "max-keys=2&prefix=J",
        [],
        "host;x-amz-content-sha256;x-amz-date",
        "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7",
    )
    for request in (get_object, listing):
        verified = check_header(request, EXAMPLE_KEYS, now=EXAMPLE_NOW)
        assert verified.access_key == "AKIAIOSFODNN7EXAMPLE" and verified.payload_sha256 == EMPTY_SHA256

    # One byte of the range changed, the clock an hour on, an unknown key, an unsigned x-amz header.
    changed = SignedRequest(
        "GET", "/test.txt", "", [(k, "bytes=0-8" if k == "Range" else v) for k, v in get_object.headers]
    )
    cases = [
        (changed, EXAMPLE_KEYS, EXAMPLE_NOW, "SignatureDoesNotMatch"),
        (get_object, EXAMPLE_KEYS, EXAMPLE_NOW + datetime.timedelta(hours=1), "RequestTimeTooSkewed"),
        (get_object, {"AKIAOTHER": "x"}, EXAMPLE_NOW, "InvalidAccessKeyId"),
        (
            SignedRequest("GET", "/test.txt", "", [*get_object.headers, ("x-amz-meta-note", "added")]),
            EXAMPLE_KEYS,
            EXAMPLE_NOW,
            "AccessDenied",
        ),
    ]
    for request, secrets, now, code in cases:
        with pytest.raises(Refused) as refused:
            check_header(request, secrets, now=now)
        assert refused.value.code == code and refused.value.status == 403


def test_the_presigned_example_verifies_until_it_expires():
    query = (
        "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1"
        "%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host"
        "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
    )
    request = SignedRequest("GET", "/test.txt", query, [EXAMPLE_HOST])
    assert check_presigned(request, EXAMPLE_KEYS, now=EXAMPLE_NOW).access_key == "AKIAIOSFODNN7EXAMPLE"
    with pytest.raises(Refused, match="Request has expired"):
        check_presigned(request, EXAMPLE_KEYS, now=EXAMPLE_NOW + datetime.timedelta(days=1))
    with pytest.raises(Refused, match="SignatureDoesNotMatch"):
        check_presigned(
            SignedRequest("GET", "/test2.txt", query, [EXAMPLE_HOST]), EXAMPLE_KEYS, now=EXAMPLE_NOW
        )
    week = query.replace("X-Amz-Expires=86400", "X-Amz-Expires=604801")
    with pytest.raises(Refused, match="less than a week") as refused:
        check_presigned(
            SignedRequest("GET", "/test.txt", week, [EXAMPLE_HOST]), EXAMPLE_KEYS, now=EXAMPLE_NOW
        )
    assert refused.value.status == 400


def test_policy_rules():
    policy = json.dumps(
        {
            "Statement": [
                {"Effect": "Allow", "Principal": "*", "Action": "s3:Get*", "Resource": "arn:aws:s3:::b/*"},
                {
                    "Effect": "Deny",
                    "Principal": {"AWS": "*"},
                    "Action": "s3:GetObject",
                    "Resource": "arn:aws:s3:::b/secret/*",
                },
                {
                    "Effect": "Allow",
                    "Principal": "*",
                    "Action": "s3:ListBucket",
                    "Resource": "arn:aws:s3:::b",
                    "Condition": {"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}},
                },
            ]
        }
    )
    assert s3access.policy_effect(policy, "s3:GetObject", "arn:aws:s3:::b/k") == "Allow"
    assert s3access.policy_effect(policy, "S3:GETOBJECT", "arn:aws:s3:::b/k") == "Allow"  # actions fold case
    assert s3access.policy_effect(policy, "s3:GetObject", "arn:aws:s3:::B/k") is None  # resources do not
    assert s3access.policy_effect(policy, "s3:GetObject", "arn:aws:s3:::b/secret/k") == "Deny"
    assert s3access.policy_effect(policy, "s3:ListBucket", "arn:aws:s3:::b") is None  # conditioned
    assert s3access.public_policy(policy)
    assert s3access.action_of("GET", "", {"list-type", "prefix"}) == "s3:ListBucket"
    assert s3access.action_of("GET", "", {"notification"}) is None
    assert s3access.action_of("PUT", "k", {"acl"}) == "s3:PutObjectAcl"
    assert s3access.action_of("DELETE", "k", {"uploadId"}) == "s3:AbortMultipartUpload"


# ---------------------------------------------------------------------------------- the running server


def fetch(url, headers=None, method="GET", data=None):
    """(status, body) of one plain HTTP request, as curl or CDI's importer would send it."""
    request = urllib.request.Request(url, headers=headers or {}, method=method, data=data)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def code_of(body: bytes) -> str:
    return body.split(b"<Code>")[1].split(b"</Code>")[0].decode() if b"<Code>" in body else ""


@pytest.fixture
def bucket(lab_s3):
    client = lab_s3.client()
    name = "lab-s3-%s" % uuid.uuid4().hex[:8]
    client.create_bucket(Bucket=name)
    client.put_object(Bucket=name, Key="disk 1+2.qcow2", Body=b"QFI\xfb private")
    return client, name, "%s/%s" % (lab_s3.endpoint_url, name)


def public_read_policy(name, actions=("s3:GetObject",), resources=None):
    statement = {
        "Effect": "Allow",
        "Principal": "*",
        "Action": list(actions),
        "Resource": resources or ["arn:aws:s3:::%s/*" % name],
    }
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]})


def test_anonymous_requests_to_a_private_bucket_are_refused(lab_s3, bucket):
    client, name, base = bucket
    for method, url in (
        ("GET", base + "/disk%201%2B2.qcow2"),
        ("GET", base + "/absent.qcow2"),  # a missing key gives nothing away either
        ("GET", base + "?list-type=2"),
        ("PUT", base + "/planted"),
        ("DELETE", base + "/disk%201%2B2.qcow2"),
        ("GET", lab_s3.endpoint_url + "/"),  # ListBuckets
        ("PUT", base + "-planted"),  # CreateBucket
    ):
        status, body = fetch(url, method=method, data=b"x" if url.endswith("/planted") else None)
        assert (status, code_of(body)) == (403, "AccessDenied"), (method, url)
    assert fetch(base + "/disk%201%2B2.qcow2", method="HEAD")[0] == 403
    assert [o["Key"] for o in client.list_objects_v2(Bucket=name)["Contents"]] == ["disk 1+2.qcow2"]
    assert name + "-planted" not in [b["Name"] for b in client.list_buckets()["Buckets"]]


def test_a_public_read_policy_and_acls_answer_anonymous_reads(bucket):
    client, name, base = bucket
    client.put_object(Bucket=name, Key="acl.qcow2", Body=b"by acl", ACL="public-read")
    assert fetch(base + "/acl.qcow2") == (200, b"by acl")
    assert fetch(base + "/disk%201%2B2.qcow2")[0] == 403  # the ACL is the object's alone

    client.put_bucket_policy(Bucket=name, Policy=public_read_policy(name))
    assert fetch(base + "/disk%201%2B2.qcow2") == (200, b"QFI\xfb private")
    assert fetch(base + "/disk%201%2B2.qcow2", method="HEAD")[0] == 200
    # GetObject without ListBucket: a missing key is 403, the listing too.
    assert fetch(base + "/absent.qcow2")[0] == 403 and fetch(base + "?list-type=2")[0] == 403

    listing = public_read_policy(
        name, ("s3:GetObject", "s3:ListBucket"), ["arn:aws:s3:::%s" % name, "arn:aws:s3:::%s/*" % name]
    )
    client.put_bucket_policy(Bucket=name, Policy=listing)
    assert fetch(base + "?list-type=2")[0] == 200
    status, body = fetch(base + "/absent.qcow2")
    assert (status, code_of(body)) == (404, "NoSuchKey")


def test_the_public_access_block(bucket):
    client, name, base = bucket
    client.put_object(Bucket=name, Key="acl.qcow2", Body=b"by acl", ACL="public-read")
    client.put_bucket_policy(Bucket=name, Policy=public_read_policy(name))

    def block(**settings):
        names = ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets")
        config = {key: settings.get(key, False) for key in names}
        client.put_public_access_block(Bucket=name, PublicAccessBlockConfiguration=config)

    block(RestrictPublicBuckets=True)  # the public policy no longer opens anything, nor does the ACL
    assert fetch(base + "/disk%201%2B2.qcow2")[0] == 403 and fetch(base + "/acl.qcow2")[0] == 403
    client.delete_bucket_policy(Bucket=name)
    assert fetch(base + "/acl.qcow2")[0] == 200  # no public policy left: the ACL counts again
    block(IgnorePublicAcls=True)
    assert fetch(base + "/acl.qcow2")[0] == 403

    block(BlockPublicAcls=True, BlockPublicPolicy=True)
    for write in (
        lambda: client.put_object(Bucket=name, Key="more.qcow2", Body=b"x", ACL="public-read"),
        lambda: client.put_object_acl(Bucket=name, Key="disk 1+2.qcow2", ACL="public-read"),
        lambda: client.put_bucket_policy(Bucket=name, Policy=public_read_policy(name)),
    ):
        with pytest.raises(ClientError) as refused:
            write()
        assert refused.value.response["Error"]["Code"] == "AccessDenied"
    client.put_object(Bucket=name, Key="more.qcow2", Body=b"x")  # a private write goes on
    assert fetch(base + "/more.qcow2")[0] == 403


def test_signatures_are_checked(lab_s3, bucket):
    client, name, _base = bucket
    for endpoint, code in (
        (S3Endpoint(lab_s3.endpoint_url, lab_s3.access_key, "not-the-secret"), "SignatureDoesNotMatch"),
        (S3Endpoint(lab_s3.endpoint_url, "somebody", lab_s3.secret_key), "InvalidAccessKeyId"),
    ):
        with pytest.raises(ClientError) as refused:
            endpoint.client().get_object(Bucket=name, Key="disk 1+2.qcow2")
        assert refused.value.response["Error"]["Code"] == code

    url = client.generate_presigned_url(
        "get_object", Params={"Bucket": name, "Key": "disk 1+2.qcow2"}, ExpiresIn=600
    )
    assert fetch(url) == (200, b"QFI\xfb private")
    tampered = url[:-4] + ("0000" if not url.endswith("0000") else "1111")
    status, body = fetch(tampered)
    assert (status, code_of(body)) == (403, "SignatureDoesNotMatch")
    elsewhere = url.replace("/disk%201%2B2.qcow2?", "/acl.qcow2?")
    assert fetch(elsewhere)[0] == 403

    put = client.generate_presigned_url("put_object", Params={"Bucket": name, "Key": "by-url"}, ExpiresIn=600)
    binary = {"Content-Type": "application/octet-stream"}  # urllib's default would be a form
    assert fetch(put, binary, method="PUT", data=b"uploaded by URL")[0] == 200
    assert client.get_object(Bucket=name, Key="by-url")["Body"].read() == b"uploaded by URL"

    short = client.generate_presigned_url(
        "get_object", Params={"Bucket": name, "Key": "disk 1+2.qcow2"}, ExpiresIn=1
    )
    time.sleep(2.1)  # signed to the second: one second of validity is over after two
    status, body = fetch(short)
    assert (status, code_of(body)) == (403, "AccessDenied") and b"Request has expired" in body


def test_a_body_that_is_not_the_signed_one_is_refused(lab_s3, bucket):
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    base = bucket[2]
    request = AWSRequest(method="PUT", url=base + "/swapped", data=b"what was signed")
    S3SigV4Auth(Credentials(lab_s3.access_key, lab_s3.secret_key), "s3", "us-east-1").add_auth(request)
    headers = dict(request.headers.items())
    status, body = fetch(base + "/swapped", headers=headers, method="PUT", data=b"what was sent!!")
    assert (status, code_of(body)) == (400, "XAmzContentSHA256Mismatch")
    assert fetch(base + "/swapped", headers=headers, method="PUT", data=b"what was signed")[0] == 200


def test_other_authorization_schemes_get_s3s_400(lab_s3, bucket):
    client, name, base = bucket
    basic = "Basic " + base64.b64encode(("%s:%s" % (lab_s3.access_key, lab_s3.secret_key)).encode()).decode()
    status, body = fetch(base + "/disk%201%2B2.qcow2", {"Authorization": basic})
    assert (status, code_of(body)) == (400, "InvalidArgument") and b"Unsupported Authorization Type" in body
    v2 = (
        client.meta.endpoint_url
        + "/%s/disk%%201%%2B2.qcow2?AWSAccessKeyId=%s&Expires=9999999999&Signature=x"
        % (
            name,
            lab_s3.access_key,
        )
    )
    status, body = fetch(v2)
    assert (status, code_of(body)) == (400, "InvalidRequest") and b"AWS4-HMAC-SHA256" in body


def test_the_owner_reads_policy_status_acl_and_public_access_block_as_on_aws(bucket):
    client, name, base = bucket
    # Nothing configured: S3's 404s with their codes, and an ACL with the owner alone.
    for call, code in (
        (client.get_bucket_policy_status, "NoSuchBucketPolicy"),
        (client.get_public_access_block, "NoSuchPublicAccessBlockConfiguration"),
    ):
        with pytest.raises(Exception) as err:
            call(Bucket=name)
        assert err.value.response["Error"]["Code"] == code
        assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    grants = client.get_bucket_acl(Bucket=name)["Grants"]
    assert [g["Permission"] for g in grants] == ["FULL_CONTROL"] and "URI" not in grants[0]["Grantee"]

    client.put_bucket_policy(Bucket=name, Policy=public_read_policy(name))
    assert client.get_bucket_policy_status(Bucket=name)["PolicyStatus"]["IsPublic"] is True
    client.put_bucket_acl(Bucket=name, ACL="public-read")
    uris = [g["Grantee"].get("URI") for g in client.get_bucket_acl(Bucket=name)["Grants"]]
    assert "http://acs.amazonaws.com/groups/global/AllUsers" in uris
    block = {
        "BlockPublicAcls": False,
        "IgnorePublicAcls": True,
        "BlockPublicPolicy": False,
        "RestrictPublicBuckets": True,
    }
    client.put_public_access_block(Bucket=name, PublicAccessBlockConfiguration=block)
    assert client.get_public_access_block(Bucket=name)["PublicAccessBlockConfiguration"] == block
    # The anonymous side of the same: the policy and the ACL count for nothing now.
    assert fetch(base + "/disk%201%2B2.qcow2")[0] == 403 and fetch(base + "?list-type=2")[0] == 403


def test_a_store_can_leave_a_control_unanswered():
    """Some S3-compatible stores answer GetBucketPolicyStatus or GetPublicAccessBlock 501 NotImplemented."""
    from tests.lab.s3 import S3Server

    server = S3Server()
    endpoint = server.start()
    try:
        server.front.not_implemented = {"policyStatus"}
        client = endpoint.client()
        client.create_bucket(Bucket="unanswered")
        with pytest.raises(Exception) as err:
            client.get_bucket_policy_status(Bucket="unanswered")
        assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 501
        assert err.value.response["Error"]["Code"] == "NotImplemented"
        assert client.get_bucket_acl(Bucket="unanswered")["Grants"]
    finally:
        server.stop()
