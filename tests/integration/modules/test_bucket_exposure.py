"""bucket_exposure against the lab's S3, which answers anonymous requests as S3 does.

The server is tests/lab/s3.py: versitygw, which decides unsigned requests from the bucket's policy and
ACL itself. bucket_exposure judges by anonymous probes, never by reading an object's ACL, so one object
made public (an object ACL's exposure; versitygw has none) is made so by a policy on that one key.
Every case is one task of a single playbook, so the whole file costs one
ansible-playbook run (and one more for the BYOL refusals).
"""

from __future__ import annotations

import json
import uuid

import pytest

from tests.integration.support.runner import run_playbook
from tests.lab.s3 import make_public

MODULE = "goldenimage.pipeline.bucket_exposure"
KEY = "windows/11/2026-08-27/windows11-x64-golden.qcow2"


@pytest.fixture(scope="module")
def s3(lab_s3):
    return lab_s3.endpoint_url, lab_s3.client(), lab_s3.env()


def _policy(bucket, actions, resources):
    statement = {"Effect": "Allow", "Principal": "*", "Action": actions, "Resource": resources}
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]})


@pytest.fixture(scope="module")
def buckets(s3):
    """private, one object public (a GetObject policy on that key alone, the exposure a public-read object
    ACL gives), a GetObject policy, and a bucket public throughout."""
    client = s3[1]
    tag = uuid.uuid4().hex[:8]
    names = {kind: "%s-%s" % (kind, tag) for kind in ("private", "objacl", "getpolicy", "public")}
    for name in names.values():
        client.create_bucket(Bucket=name)
    client.put_object(Bucket=names["private"], Key=KEY, Body=b"QFI\xfb licensed bytes")
    client.put_object(Bucket=names["objacl"], Key=KEY, Body=b"QFI\xfb")
    make_public(client, names["objacl"], [KEY])
    client.put_object(Bucket=names["getpolicy"], Key="windows/11/2026-08-01/old.qcow2", Body=b"QFI\xfb old")
    client.put_object(Bucket=names["getpolicy"], Key=KEY, Body=b"QFI\xfb")
    client.put_bucket_policy(
        Bucket=names["getpolicy"],
        Policy=_policy(names["getpolicy"], "s3:GetObject", "arn:aws:s3:::%s/*" % names["getpolicy"]),
    )
    client.put_object(Bucket=names["public"], Key="private/" + KEY, Body=b"QFI\xfb under private/")
    client.put_bucket_policy(
        Bucket=names["public"],
        Policy=_policy(
            names["public"],
            ["s3:GetObject", "s3:ListBucket"],
            ["arn:aws:s3:::%s/*" % names["public"], "arn:aws:s3:::%s" % names["public"]],
        ),
    )
    return names


def _snapshot(client, names):
    return {
        name: sorted((o["Key"], o["ETag"]) for o in client.list_objects_v2(Bucket=name).get("Contents", []))
        for name in names.values()
    }


def _task(title, **params):
    return {"name": title, MODULE: params}


def test_exposure_verdicts(s3, buckets):
    endpoint, client, env = s3
    before = _snapshot(client, buckets)
    new_key = "windows/11/2026-09-01/windows11-x64-golden.qcow2"
    tasks = [
        _task("private", bucket=buckets["private"], key=KEY),
        _task("private in check mode", bucket=buckets["private"], key=KEY),
        _task("object acl", bucket=buckets["objacl"], key=KEY),
        _task("get policy", bucket=buckets["getpolicy"], key=KEY),
        _task("get policy, new key, sampled", bucket=buckets["getpolicy"], key=new_key),
        _task("private prefix, new key", bucket=buckets["public"], key="private/" + new_key),
        _task("private prefix, by url", url="%s/%s/private/%s" % (endpoint, buckets["public"], KEY)),
        _task("licensed into private", bucket=buckets["private"], key=new_key, license="kms"),
    ]
    tasks[1]["check_mode"] = True
    run = run_playbook([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}], env=env, timeout=120)
    assert run.ok, run.log

    for name in ("private", "private in check mode", "licensed into private"):
        result = run[name]
        assert result["exposed"] is False, (name, result)
        assert result["verdict"] == "private"
        assert (result["get_status"], result["head_status"], result["list_status"]) == (403, 403, 403)
        assert result["errors"]["list"] == "AccessDenied"
        assert result["changed"] is False
    assert run["licensed into private"]["licensed"] is True

    acl = run["object acl"]
    assert acl["exposed"] is True
    assert (acl["get_status"], acl["head_status"], acl["list_status"]) == (206, 200, 403)
    assert acl["allowed"] == ["get", "head"]

    policy = run["get policy"]
    assert policy["exposed"] is True
    assert (policy["get_status"], policy["head_status"], policy["list_status"]) == (206, 200, 403)

    # GetObject without ListBucket: a missing key answers 403 like a private bucket; an existing one
    # under the prefix, found with the credentials, gives the bucket away.
    sampled = run["get policy, new key, sampled"]
    assert (sampled["get_status"], sampled["head_status"], sampled["list_status"]) == (403, 403, 403)
    assert sampled["sample_key"] == "windows/11/2026-08-01/old.qcow2"
    assert sampled["sample_status"] == 206
    assert sampled["exposed"] is True
    assert sampled["allowed"] == ["sample_get", "sample_head"]

    # private/ is a name: under a public bucket the object, and a key not written yet, are readable.
    prefixed = run["private prefix, by url"]
    assert prefixed["bucket"] == buckets["public"] and prefixed["key"] == "private/" + KEY
    assert prefixed["exposed"] is True
    assert (prefixed["get_status"], prefixed["head_status"], prefixed["list_status"]) == (206, 200, 200)
    assert prefixed["prefix"] == "private/windows/11/2026-08-27/"
    fresh = run["private prefix, new key"]
    assert fresh["exposed"] is True
    assert (fresh["get_status"], fresh["list_status"]) == (404, 200)
    assert fresh["errors"]["get"] == "NoSuchKey"

    assert _snapshot(client, buckets) == before, "bucket_exposure wrote to a bucket"


def test_byol_guard_refuses_and_names_the_remedy(s3, buckets):
    env = s3[2]
    tasks = [
        _task("volume under private/", bucket=buckets["public"], key="private/" + KEY, license="volume"),
        _task("key-bearing, acl", bucket=buckets["objacl"], key=KEY, license="key"),
        _task("kms, nowhere to ask", bucket=buckets["private"], key=KEY, license="kms", timeout=2),
    ]
    for task in tasks:
        task["ignore_errors"] = True
    tasks[2][MODULE]["endpoint_url"] = "http://127.0.0.1:9"  # nothing listens: no answer proves nothing
    run = run_playbook([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}], env=env, timeout=120)

    assert [entry["status"] for entry in run.tasks] == ["ignored"] * 3, run.log
    volume = run["volume under private/"]
    assert "volume-licensed" in volume["msg"]
    assert "Block public access on bucket %s" % buckets["public"] in volume["msg"]
    assert "s3:ListBucket on arn:aws:s3:::%s" % buckets["public"] in volume["msg"]
    assert "private/ is a name, not protection" in volume["msg"]
    assert volume["exposed"] is True

    acl = run["key-bearing, acl"]
    assert "key-bearing" in acl["msg"]
    assert "s3:GetObject on arn:aws:s3:::%s/windows/11/2026-08-27/*" % buckets["objacl"] in acl["msg"]

    nowhere = run["kms, nowhere to ask"]
    assert nowhere["get_status"] == 0 and nowhere["verdict"] == "unknown"
    assert "did not prove" in nowhere["msg"]
