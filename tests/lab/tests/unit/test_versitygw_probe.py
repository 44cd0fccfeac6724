"""What versitygw v1.8.0 (tools/build-versitygw.sh) answers on its own, with its POSIX backend and no front:
the probe behind the lab's S3 (tests/lab/s3.py), kept executable so a new pin shows what changed.

Each S3 behaviour the collection depends on is asserted as versitygw answers it. Where that differs from
S3, the test says GAP and asserts versitygw's answer; the lab's RelayFront covers the gaps the collection
meets (the public access block, If-None-Match on CopyObject, the answers to other Authorization schemes
and to an unknown access key); the others are named here and in tests/lab/README.md ("Its S3").
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import time
import urllib.error
import urllib.request

import pytest
from botocore.exceptions import ClientError

from tests.lab.s3 import S3Endpoint, VersityGW

KEYS = ("probe-access-key", "probe-secret-key")
ALL_USERS = "http://acs.amazonaws.com/groups/global/AllUsers"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    gw = VersityGW(tmp_path_factory.mktemp("versitygw"), *KEYS)
    url = gw.start()
    try:
        yield S3Endpoint(url, *KEYS)
    finally:
        gw.stop()


@pytest.fixture
def bucket(gateway, request):
    client = gateway.client()
    name = "probe-%s" % request.node.name.replace("_", "-")[5:40].strip("-")
    client.create_bucket(Bucket=name)
    client.put_object(Bucket=name, Key="disk.qcow2", Body=b"QFI\xfb probe")
    return client, name


def fetch(url, headers=None, method="GET", data=None):
    request = urllib.request.Request(url, headers=headers or {}, method=method, data=data)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def code_of(body: bytes) -> str:
    return body.split(b"<Code>")[1].split(b"</Code>")[0].decode() if b"<Code>" in body else ""


def refused(call) -> tuple[int, str]:
    with pytest.raises(ClientError) as caught:
        call()
    return caught.value.response["ResponseMetadata"]["HTTPStatusCode"], caught.value.response["Error"]["Code"]


def policy(name, *statements):
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def allow(action, resource, effect="Allow"):
    return {"Effect": effect, "Principal": "*", "Action": action, "Resource": resource}


def test_signed_requests(gateway, bucket):
    client, name = bucket
    assert client.get_object(Bucket=name, Key="disk.qcow2")["Body"].read() == b"QFI\xfb probe"
    wrong_secret = S3Endpoint(gateway.endpoint_url, KEYS[0], "not-the-secret").client()
    assert refused(lambda: wrong_secret.get_object(Bucket=name, Key="disk.qcow2")) == (
        403,
        "SignatureDoesNotMatch",
    )
    # GAP: S3 answers an unknown access key 403 InvalidAccessKeyId.
    stranger = S3Endpoint(gateway.endpoint_url, "somebody", KEYS[1]).client()
    assert refused(lambda: stranger.get_object(Bucket=name, Key="disk.qcow2")) == (404, "XAdminUserNotFound")


def test_other_authorization_schemes(gateway, bucket):
    base = "%s/%s/disk.qcow2" % (gateway.endpoint_url, bucket[1])
    # GAP: S3 answers basic auth 400 InvalidArgument "Unsupported Authorization Type" and a version 2
    # header 400 InvalidRequest; versitygw 403 AccessDenied, asking for a date header.
    for authorization in ("Basic dXNlcjpwYXNz", "AWS %s:c2lnbmF0dXJl" % KEYS[0]):
        status, body = fetch(base, {"Authorization": authorization})
        assert (status, code_of(body)) == (403, "AccessDenied") and b"x-amz-date" in body
    status, body = fetch(base + "?AWSAccessKeyId=%s&Expires=9999999999&Signature=x" % KEYS[0])
    assert (status, code_of(body)) == (400, "InvalidRequest") and b"AWS4-HMAC-SHA256" in body


def test_a_body_that_is_not_the_signed_one(gateway, bucket):
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    url = "%s/%s/swapped" % (gateway.endpoint_url, bucket[1])
    request = AWSRequest(method="PUT", url=url, data=b"what was signed")
    S3SigV4Auth(Credentials(*KEYS), "s3", "us-east-1").add_auth(request)
    status, body = fetch(url, dict(request.headers.items()), "PUT", b"what was sent!!")
    assert (status, code_of(body)) == (400, "XAmzContentSHA256Mismatch")


def test_presigned_urls(gateway, bucket):
    client, name = bucket
    params = {"Bucket": name, "Key": "disk.qcow2"}
    url = client.generate_presigned_url("get_object", Params=params, ExpiresIn=600)
    assert fetch(url) == (200, b"QFI\xfb probe")
    status, body = fetch(url.replace("/disk.qcow2?", "/other.qcow2?"))
    assert (status, code_of(body)) == (403, "SignatureDoesNotMatch")
    week = client.generate_presigned_url("get_object", Params=params, ExpiresIn=604801)
    status, body = fetch(week)
    assert (status, code_of(body)) == (400, "AuthorizationQueryParametersError")
    put = client.generate_presigned_url("put_object", Params={**params, "Key": "by-url"}, ExpiresIn=600)
    assert fetch(put, {"Content-Type": "application/octet-stream"}, "PUT", b"by URL")[0] == 200
    short = client.generate_presigned_url("get_object", Params=params, ExpiresIn=1)
    time.sleep(2.1)
    status, body = fetch(short)
    assert (status, code_of(body)) == (403, "AccessDenied") and b"Request has expired" in body


def b64sha256(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def test_checksums_multipart_and_copies_as_the_collection_sends_them(bucket):
    from boto3.s3.transfer import TransferConfig

    client, name = bucket
    body = b"z" * 100
    put = client.put_object(
        Bucket=name, Key="small", Body=body, ChecksumAlgorithm="SHA256", ChecksumSHA256=b64sha256(body)
    )
    assert put["ChecksumSHA256"] == b64sha256(body)
    wrong = lambda: client.put_object(  # noqa: E731
        Bucket=name, Key="bad", Body=body, ChecksumAlgorithm="SHA256", ChecksumSHA256=b64sha256(b"other")
    )
    assert refused(wrong) == (400, "BadDigest")

    upload = client.create_multipart_upload(Bucket=name, Key="parts", ChecksumAlgorithm="SHA256")["UploadId"]
    parts = []
    for number, chunk in enumerate((b"a" * (5 << 20), b"b" * 1000), 1):
        answer = client.upload_part(
            Bucket=name,
            Key="parts",
            UploadId=upload,
            PartNumber=number,
            Body=chunk,
            ChecksumAlgorithm="SHA256",
            ChecksumSHA256=b64sha256(chunk),
        )
        assert answer["ChecksumSHA256"] == b64sha256(chunk)
        parts.append({"PartNumber": number, "ETag": answer["ETag"], "ChecksumSHA256": b64sha256(chunk)})
    done = client.complete_multipart_upload(
        Bucket=name, Key="parts", UploadId=upload, MultipartUpload={"Parts": parts}, IfNoneMatch="*"
    )
    assert done["ChecksumType"] == "COMPOSITE" and done["ChecksumSHA256"].endswith("-2")

    copied = client.copy_object(
        Bucket=name,
        Key="copied",
        CopySource={"Bucket": name, "Key": "small"},
        Metadata={"sensitive": "no"},
        MetadataDirective="REPLACE",
        ContentType="application/x-qcow2",
        IfNoneMatch="*",
        ChecksumAlgorithm="SHA256",
    )
    assert copied["CopyObjectResult"]["ChecksumSHA256"] == b64sha256(body)
    head = client.head_object(Bucket=name, Key="copied")
    assert head["Metadata"] == {"sensitive": "no"} and head["ContentType"] == "application/x-qcow2"

    upload = client.create_multipart_upload(Bucket=name, Key="part-copy", ChecksumAlgorithm="SHA256")
    part = client.upload_part_copy(
        Bucket=name,
        Key="part-copy",
        UploadId=upload["UploadId"],
        PartNumber=1,
        CopySource={"Bucket": name, "Key": "parts"},
        CopySourceRange="bytes=0-%d" % ((5 << 20) - 1),
    )
    assert part["CopyPartResult"]["ETag"]
    client.abort_multipart_upload(Bucket=name, Key="part-copy", UploadId=upload["UploadId"])

    data = os.urandom(11 << 20)
    config = TransferConfig(multipart_threshold=5 << 20, multipart_chunksize=5 << 20)
    client.upload_fileobj(io.BytesIO(data), name, "managed", Config=config)
    client.copy({"Bucket": name, "Key": "managed"}, name, "managed-copy", Config=config)
    assert client.get_object(Bucket=name, Key="managed-copy")["Body"].read() == data


def test_conditional_writes(bucket):
    client, name = bucket
    exists = lambda: client.put_object(Bucket=name, Key="disk.qcow2", Body=b"x", IfNoneMatch="*")  # noqa: E731
    assert refused(exists) == (412, "PreconditionFailed")
    etag = client.head_object(Bucket=name, Key="disk.qcow2")["ETag"]
    stale = lambda: client.put_object(Bucket=name, Key="disk.qcow2", Body=b"x", IfMatch='"0"')  # noqa: E731
    assert refused(stale) == (412, "PreconditionFailed")
    client.put_object(Bucket=name, Key="disk.qcow2", Body=b"QFI\xfb probe", IfMatch=etag)

    upload = client.create_multipart_upload(Bucket=name, Key="disk.qcow2")["UploadId"]
    part = client.upload_part(Bucket=name, Key="disk.qcow2", UploadId=upload, PartNumber=1, Body=b"q")
    complete = lambda: client.complete_multipart_upload(  # noqa: E731
        Bucket=name,
        Key="disk.qcow2",
        UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
        IfNoneMatch="*",
    )
    assert refused(complete) == (412, "PreconditionFailed")

    # GAP: CopyObject ignores If-None-Match and replaces the key (S3: 412 PreconditionFailed).
    client.put_object(Bucket=name, Key="other", Body=b"other")
    client.copy_object(
        Bucket=name, Key="disk.qcow2", CopySource={"Bucket": name, "Key": "other"}, IfNoneMatch="*"
    )
    assert client.get_object(Bucket=name, Key="disk.qcow2")["Body"].read() == b"other"


def test_anonymous_requests_by_bucket_policy(gateway, bucket):
    client, name = bucket
    base = "%s/%s" % (gateway.endpoint_url, name)
    for url in (base + "/disk.qcow2", base + "/absent", base):
        status, body = fetch(url)
        assert (status, code_of(body)) == (403, "AccessDenied"), url
    assert fetch(base + "/planted", method="PUT", data=b"x")[0] == 403
    assert fetch(gateway.endpoint_url + "/")[0] == 403  # ListBuckets

    assert refused(lambda: client.get_bucket_policy_status(Bucket=name)) == (404, "NoSuchBucketPolicy")
    client.put_bucket_policy(
        Bucket=name, Policy=policy(name, allow("s3:GetObject", "arn:aws:s3:::%s/*" % name))
    )
    assert client.get_bucket_policy_status(Bucket=name)["PolicyStatus"]["IsPublic"] is True
    assert fetch(base + "/disk.qcow2") == (200, b"QFI\xfb probe")
    assert fetch(base + "/disk.qcow2", {"Range": "bytes=0-2"}) == (206, b"QFI")
    assert fetch(base + "/disk.qcow2", method="HEAD")[0] == 200
    assert fetch(base + "?list-type=2")[0] == 403
    # GAP: S3 answers a missing key 403 to a caller not allowed s3:ListBucket; versitygw tells it 404.
    assert code_of(fetch(base + "/absent")[1]) == "NoSuchKey"

    secret = allow("s3:GetObject", "arn:aws:s3:::%s/secret/*" % name, effect="Deny")
    listing = allow("s3:ListBucket", "arn:aws:s3:::%s" % name)
    client.put_bucket_policy(
        Bucket=name, Policy=policy(name, allow("s3:GetObject", "arn:aws:s3:::%s/*" % name), listing, secret)
    )
    client.put_object(Bucket=name, Key="secret/key", Body=b"s")
    assert fetch(base + "?list-type=2")[0] == 200
    assert fetch(base + "/secret/key")[0] == 403  # an explicit Deny wins
    client.delete_bucket_policy(Bucket=name)
    assert fetch(base + "/disk.qcow2")[0] == 403


def test_acls(gateway, bucket):
    client, name = bucket
    base = "%s/%s" % (gateway.endpoint_url, name)
    grants = client.get_bucket_acl(Bucket=name)["Grants"]
    assert [g["Permission"] for g in grants] == ["FULL_CONTROL"]
    # As on S3 since 2023: a new bucket's ownership is BucketOwnerEnforced, ACLs are refused.
    assert refused(lambda: client.put_bucket_acl(Bucket=name, ACL="public-read")) == (
        400,
        "AccessControlListNotSupported",
    )
    rules = {"Rules": [{"ObjectOwnership": "BucketOwnerPreferred"}]}
    client.put_bucket_ownership_controls(Bucket=name, OwnershipControls=rules)
    client.put_bucket_acl(Bucket=name, ACL="public-read")
    grantees = [g["Grantee"] for g in client.get_bucket_acl(Bucket=name)["Grants"]]
    # GAP: S3 names the group by its URI (Type Group, URI .../global/AllUsers); versitygw by an ID.
    assert {"ID": "all-users", "Type": "Group"} in grantees
    assert all(g.get("URI") != ALL_USERS for g in grantees)
    assert fetch(base + "?list-type=2")[0] == 200
    # GAP: a bucket's READ grant lets anyone list it on S3, not read its objects; versitygw serves them.
    assert fetch(base + "/disk.qcow2")[0] == 200
    # GAP: no object ACLs. PutObjectAcl and GetObjectAcl answer 501; x-amz-acl on PutObject is ignored.
    assert refused(lambda: client.put_object_acl(Bucket=name, Key="disk.qcow2", ACL="public-read"))[0] == 501
    assert refused(lambda: client.get_object_acl(Bucket=name, Key="disk.qcow2"))[0] == 501
    client.put_bucket_acl(Bucket=name, ACL="private")
    client.put_object(Bucket=name, Key="by-acl", Body=b"x", ACL="public-read")
    assert fetch(base + "/by-acl")[0] == 403


def test_public_access_block(bucket):
    client, name = bucket
    # GAP: no public access block: Put, Get and DeletePublicAccessBlock answer 501 NotImplemented
    # (S3 keeps it and applies it; a bucket without one answers 404 NoSuchPublicAccessBlockConfiguration).
    settings = ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets")
    block = dict.fromkeys(settings, True)
    for call in (
        lambda: client.get_public_access_block(Bucket=name),
        lambda: client.put_public_access_block(Bucket=name, PublicAccessBlockConfiguration=block),
        lambda: client.delete_public_access_block(Bucket=name),
    ):
        assert refused(call) == (501, "NotImplemented")
