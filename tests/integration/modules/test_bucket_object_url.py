"""bucket_object_url against the lab's S3, which checks presigned URLs as S3 does.

The endpoint (tests/lab/s3.py) keeps the bucket private to anonymous readers,
verifies every presigned URL's Signature Version 4 and expiry with its own implementation of the
algorithm, and answers HTTP basic auth, which is what CDI sends for an http source's secretRef, with
S3's "Unsupported Authorization Type". Every module case is one task of a single playbook.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import time
import urllib.error
import urllib.request
import uuid

import pytest

from tests.integration.support.runner import module_task, run_playbook

MODULE = "goldenimage.pipeline.bucket_object_url"
KEY = "windows/11/20260828/windows 11+x64 golden.qcow2"  # a space and a plus: the path is encoded
BODY = b"QFI\xfb licensed bytes"

task = functools.partial(module_task, MODULE)


@pytest.fixture(scope="module")
def s3(lab_s3):
    client = lab_s3.client()
    bucket = "licensed-%s" % uuid.uuid4().hex[:8]
    client.create_bucket(Bucket=bucket)
    client.put_object(
        Bucket=bucket, Key=KEY, Body=BODY, Metadata={"sha256": hashlib.sha256(BODY).hexdigest()}
    )
    return lab_s3.endpoint_url, bucket, lab_s3.env(), lab_s3


def fetch(url, headers=None):
    """(status, body) of a GET."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def object_url(endpoint, bucket, key):
    return "%s/%s/%s" % (endpoint, bucket, urllib.request.quote(key))


def signing(title, **params):
    """A signing task that registers its result, and a debug task that shows it to the test.

    The module's own result is censored in every output (it holds a bearer credential); only the
    registered variable has the URL, so the test reads it through a debug task of its own.
    """
    entry = task(title, **params)
    entry["register"] = "signed_" + title.replace(" ", "_")
    return [entry, {"name": "show " + title, "ansible.builtin.debug": {"var": entry["register"]}}]


def shown(run, title):
    return run["show " + title]["signed_" + title.replace(" ", "_")]


def test_signed_url_reads_a_private_object_and_nothing_else(s3):
    endpoint, bucket, env, keys = s3
    url = object_url(endpoint, bucket, KEY)
    missing = object_url(endpoint, bucket, "windows/11/20260901/absent.qcow2")
    run = run_playbook(
        [
            {
                "hosts": "localhost",
                "gather_facts": False,
                "tasks": [
                    *signing("sign", url=url, expiry=600),
                    *signing("checked", url=url, check_object=True),
                    *signing("check mode", url=url, check=True),
                    *signing("short", url=url, expiry=1),
                    task("missing", url=missing, check_object=True, ignore_errors=True),
                    task("signed already", url=url + "?X-Amz-Signature=0", ignore_errors=True),
                    task("not an object", url="%s/%s/" % (endpoint, bucket), ignore_errors=True),
                    task("too long", url=url, expiry=8 * 24 * 3600, ignore_errors=True),
                    task("no credentials", url=url, access_key="", secret_key="", ignore_errors=True),
                ],
            }
        ],
        env=env,
        timeout=120,
    )
    assert run.ok, run.log
    # The signing tasks' own output is hidden: the URL reaches no log, callback or -v line.
    for name in ("sign", "checked", "check mode", "short"):
        assert "censored" in run[name] and "url" not in run[name], run[name]
    signed = shown(run, "sign")
    assert signed["changed"] is False
    assert (
        "X-Amz-Signature=REDACTED" in signed["url_redacted"]
        and "X-Amz-Credential=REDACTED" in signed["url_redacted"]
    )
    assert (signed["bucket"], signed["key"], signed["endpoint"]) == (bucket, KEY, endpoint)
    assert signed["url"].startswith(url + "?") and "X-Amz-Algorithm=AWS4-HMAC-SHA256" in signed["url"]
    assert "X-Amz-Expires=600" in signed["url"] and keys.secret_key not in signed["url"]
    assert fetch(signed["url"]) == (200, BODY)

    checked = shown(run, "checked")
    assert checked["size"] == len(BODY) and checked["sha256"] == hashlib.sha256(BODY).hexdigest()
    assert fetch(checked["url"]) == (200, BODY)
    check_mode = shown(run, "check mode")
    assert check_mode["changed"] is False and fetch(check_mode["url"]) == (200, BODY)

    # What the endpoint refuses: no signature, a changed signature, the signature moved to another key,
    # basic auth (a secretRef on CDI's http source), and a URL past its expiry.
    assert fetch(url)[0] == 403
    tampered = signed["url"][:-4] + ("0000" if not signed["url"].endswith("0000") else "1111")
    assert fetch(tampered)[0] == 403 and b"SignatureDoesNotMatch" in fetch(tampered)[1]
    moved = signed["url"].replace(urllib.request.quote(KEY), "windows/11/20260828/other.qcow2")
    assert fetch(moved)[0] == 403
    basic = base64.b64encode(("%s:%s" % (keys.access_key, keys.secret_key)).encode()).decode()
    status, body = fetch(url, {"Authorization": "Basic " + basic})
    assert status == 400 and b"Unsupported Authorization Type" in body
    time.sleep(2.1)
    status, body = fetch(shown(run, "short")["url"])
    assert status == 403 and b"Request has expired" in body

    failures = {
        "missing": "does not exist",
        "signed already": "already has a query string",
        "not an object": "does not name an object",
        "too long": "out of range",
        "no credentials": "needs access_key and secret_key",
    }
    for name, words in failures.items():
        entry = run.entry(name)
        assert entry["status"] == "ignored" and words in entry["result"]["msg"], (name, entry)
        assert "url" not in entry["result"], name
