"""Sensitive bytes never reach a bucket anyone can read: every path that moves licensed or key-bearing
bytes proves its destination private first (exposure.prove_private), while an anonymous poller reads the
destination key and lists its prefix the whole time.

Four buckets on the lab's S3 (tests/lab/s3.py): private; a policy granting anonymous s3:GetObject but not
s3:ListBucket (the bucket that fooled the old probe: a missing key answers 403 there); a public-read ACL
(after PutBucketOwnershipControls, which a bucket needs for ACLs on S3 since 2023 and on versitygw); a
policy public for reads and listing. The poller must count 0 anonymous reads of the licensed bytes on
all four; the three public ones are refused before anything is uploaded, naming the bucket, the probe
that answered 2xx and the supported move (CDI's source.s3 with a secretRef).

Paths: golden_export_object (a playbook) and the export Job's program (``_export_cli``, as the Job runs it).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import threading
import urllib.error
import urllib.request
import uuid

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.windows import _export_cli as cli

from tests.integration.support.runner import module_task, play, run_playbook

KEY = "licensed/windows/11/2026-09-01/windows11-x64-golden.qcow2"
PREFIX = "licensed/windows/11/2026-09-01/"
MARK = b"QFI\xfb LICENSED-KMS-BYTES "
KINDS = ("private", "getonly", "aclpublic", "policypublic", "qcow2only")


def _policy(bucket, actions, resources):
    statement = {"Effect": "Allow", "Principal": "*", "Action": actions, "Resource": resources}
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]})


def make_buckets(client, tag):
    names = {kind: "%s-%s" % (kind, tag) for kind in KINDS}
    for name in names.values():
        client.create_bucket(Bucket=name)
    client.put_bucket_policy(
        Bucket=names["getonly"],
        Policy=_policy(names["getonly"], "s3:GetObject", "arn:aws:s3:::%s/*" % names["getonly"]),
    )
    # A new bucket is BucketOwnerEnforced and refuses ACLs (AccessControlListNotSupported), as on S3.
    client.put_bucket_ownership_controls(
        Bucket=names["aclpublic"],
        OwnershipControls={"Rules": [{"ObjectOwnership": "BucketOwnerPreferred"}]},
    )
    client.put_bucket_acl(Bucket=names["aclpublic"], ACL="public-read")
    # Anonymous reads of *.qcow2 only: a canary not named like the image would be refused here.
    client.put_bucket_policy(
        Bucket=names["qcow2only"],
        Policy=_policy(names["qcow2only"], "s3:GetObject", "arn:aws:s3:::%s/*.qcow2" % names["qcow2only"]),
    )
    client.put_bucket_policy(
        Bucket=names["policypublic"],
        Policy=_policy(
            names["policypublic"],
            ["s3:GetObject", "s3:ListBucket"],
            ["arn:aws:s3:::%s/*" % names["policypublic"], "arn:aws:s3:::%s" % names["policypublic"]],
        ),
    )
    return names


class Poller:
    """Anonymous GET and HEAD of the key and a listing of its prefix, in a loop, in a background thread.
    ``reads`` counts 2xx answers that gave the licensed object away (its bytes, its HEAD, or its key in a
    listing)."""

    def __init__(self, endpoint, bucket, key, prefix):
        self.urls = {
            "get": ("GET", "%s/%s/%s" % (endpoint, bucket, key)),
            "head": ("HEAD", "%s/%s/%s" % (endpoint, bucket, key)),
            "list": ("GET", "%s/%s?list-type=2&prefix=%s" % (endpoint, bucket, prefix)),
        }
        self.key = key
        self.reads = 0
        self.rounds = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self):
        while not self.stop.is_set():
            for name, (method, url) in self.urls.items():
                try:
                    with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=5) as got:
                        body = got.read()
                        if name == "list":
                            self.reads += self.key.encode() in body
                        else:
                            self.reads += 1
                except (urllib.error.HTTPError, OSError):
                    pass
            self.rounds += 1
            self.stop.wait(0.02)  # about 40 reads a second per bucket, leaving the machine to the run

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    path = tmp_path_factory.mktemp("licensed") / "windows11-x64-golden.qcow2"
    path.write_bytes(MARK + os.urandom(1024 * 1024))
    return path


def export_object(lab_s3, bucket, key, path, **options):
    """golden_export_object of ``path`` to ``key`` in a playbook, its failure kept as the result."""
    task = module_task(
        "goldenimage.pipeline.golden_export_object",
        "export",
        ignore_errors=True,
        bucket=bucket,
        key=key,
        path=str(path),
        **options,
    )
    return run_playbook(play(task), env=lab_s3.env(), timeout=180)


def _assert_refused(msg, bucket, probe):
    assert "bucket %s is public" % bucket in msg, msg
    assert probe in msg, msg
    assert "source.s3" in msg and "secretRef" in msg, msg
    assert "Nothing of the image was written" in msg, msg


def _keys(client, bucket):
    return [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]


EXPECTED_PROBE = {
    "getonly": "anonymous get of the canary HTTP 200",
    "aclpublic": "anonymous list of the prefix HTTP 200",
    "policypublic": "anonymous range get of the canary HTTP 206",
    "qcow2only": "anonymous head of the canary HTTP 200",
}


def test_golden_export_object_never_lets_an_anonymous_reader_see_licensed_bytes(lab_s3, image):
    """One playbook exports to every bucket kind in turn while a poller per bucket reads all the time."""
    client = lab_s3.client()
    names = make_buckets(client, uuid.uuid4().hex[:8])
    tasks = [
        module_task(
            "goldenimage.pipeline.golden_export_object",
            kind,
            ignore_errors=True,
            bucket=names[kind],
            key=KEY,
            path=str(image),
            license="kms",
        )
        for kind in KINDS
    ]
    pollers = dict((kind, Poller(lab_s3.endpoint_url, names[kind], KEY, PREFIX)) for kind in KINDS)
    with contextlib.ExitStack() as running:
        for poller in pollers.values():
            running.enter_context(poller)
        run = run_playbook(play(*tasks), env=lab_s3.env(), timeout=300)
    for kind in KINDS:
        bucket = names[kind]
        entry = run.entry(kind)
        result = entry["result"]
        assert pollers[kind].rounds > 0
        assert pollers[kind].reads == 0, (kind, pollers[kind].reads)
        if kind == "private":
            assert entry["status"] in ("ok", "changed"), (entry["status"], result.get("msg"))
            assert result["exposure"]["verdict"] == "private" and result["exposure"]["allowed"]
            assert result["exposure"]["canary_deleted"] is True
            assert _keys(client, bucket) == [KEY]
            continue
        assert entry["status"] == "ignored", (kind, entry["status"], result)
        _assert_refused(result["msg"], bucket, EXPECTED_PROBE[kind])
        assert result["exposure"]["verdict"] == "public"
        if kind == "aclpublic":
            # versitygw names AllUsers by an ID, not S3's URI: the ACL still reads as public.
            assert "GetBucketAcl grants all-users:READ" in result["exposure"]["public_by"], result["exposure"]
        assert _keys(client, bucket) == [], "nothing is written, and the canary is deleted"
        assert client.list_multipart_uploads(Bucket=bucket).get("Uploads") is None


def test_the_export_jobs_program_never_lets_an_anonymous_reader_see_licensed_bytes(lab_s3, tmp_path):
    client = lab_s3.client()
    names = make_buckets(client, uuid.uuid4().hex[:8])
    raw = tmp_path / "disk.raw"
    raw.write_bytes(MARK + os.urandom(2 * 1024 * 1024))
    env = {"EXPORT_ACCESS_KEY_ID": lab_s3.access_key, "EXPORT_SECRET_ACCESS_KEY": lab_s3.secret_key}
    for kind in KINDS:
        bucket = names[kind]
        scratch = tmp_path / kind
        scratch.mkdir()
        out = io.StringIO()
        argv = ["--source", str(raw), "--scratch", str(scratch), "--filename", "x.qcow2", "--no-compress",
                "--endpoint", lab_s3.endpoint_url, "--bucket", bucket, "--key", KEY, "--source-url",
                "pvc://ns/sealed", "--source-uid", "uid-1", "--exported-at", "2026-12-02T00:00:00Z",
                "--sensitive-reason", "KMS client setup key in the SOFTWARE hive"]  # fmt: skip
        with Poller(lab_s3.endpoint_url, bucket, KEY, PREFIX) as poller:
            code = cli.main(argv, environ=env, out=out)
        result = cli.parse_log(out.getvalue())
        assert poller.rounds > 0
        assert poller.reads == 0, (kind, poller.reads)
        if kind == "private":
            assert code == 0, result
            assert result["exposure"]["verdict"] == "private"
            assert _keys(client, bucket) == [KEY]
            continue
        assert code == 1 and result["code"] == "exposed", (kind, result)
        _assert_refused(result["error"], bucket, EXPECTED_PROBE[kind])
        assert "KMS client setup key in the SOFTWARE hive" in result["error"]
        assert not (scratch / "x.qcow2").exists(), "refused before the conversion"
        assert _keys(client, bucket) == []


def test_a_server_that_does_not_answer_the_controls_is_judged_by_the_canary(tmp_path):
    """A store that answers GetBucketPolicyStatus and GetPublicAccessBlock with 501 NotImplemented: those
    are recorded as not answered, never as private, and the canary (named like the image, so a policy
    that opens only ``*.qcow2`` opens it too) proves the bucket public."""
    from tests.lab.s3 import S3Server

    server = S3Server()
    endpoint = server.start()
    server.front.not_implemented = {"policyStatus", "publicAccessBlock"}
    try:
        client = endpoint.client()
        bucket = "qcow2only-" + uuid.uuid4().hex[:8]
        client.create_bucket(Bucket=bucket)
        client.put_bucket_policy(
            Bucket=bucket, Policy=_policy(bucket, "s3:GetObject", "arn:aws:s3:::%s/*.qcow2" % bucket)
        )
        raw = tmp_path / "disk.raw"
        raw.write_bytes(MARK + os.urandom(1024 * 1024))
        env = {"EXPORT_ACCESS_KEY_ID": endpoint.access_key, "EXPORT_SECRET_ACCESS_KEY": endpoint.secret_key}
        out = io.StringIO()
        argv = ["--source", str(raw), "--scratch", str(tmp_path), "--filename", "x.qcow2", "--no-compress",
                "--endpoint", endpoint.endpoint_url, "--bucket", bucket, "--key", KEY, "--source-url",
                "pvc://ns/sealed", "--exported-at", "2026-12-02T00:00:00Z",
                "--sensitive-reason", "kms"]  # fmt: skip
        with Poller(endpoint.endpoint_url, bucket, KEY, PREFIX) as poller:
            code = cli.main(argv, environ=env, out=out)
        result = cli.parse_log(out.getvalue())
        assert poller.rounds > 0 and poller.reads == 0
        assert code == 1 and result["code"] == "exposed", result
        assert "controls not answered: policy_status, public_access_block" in result["error"]
        assert "anonymous get of the canary HTTP 200" in result["error"]
        assert _keys(client, bucket) == []
    finally:
        server.stop()
