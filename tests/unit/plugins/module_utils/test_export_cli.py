"""The export Job's program without a cluster: its SigV4 signatures equal botocore's, its result line is
read back, and the part size grows to stay within S3's 10,000 parts."""

from __future__ import annotations

import datetime
import hashlib
import io
import os
from urllib.parse import quote

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils import _export_cli as cli


@pytest.mark.parametrize(
    "method, path, query, headers, body",
    [
        (
            "PUT",
            "/bkt/windows/11/2026-08-09/a b+c.qcow2",
            {"partNumber": "3", "uploadId": "abc/def=="},
            {"Content-MD5": "xyz=="},
            b"hello",
        ),
        (
            "POST",
            "/bkt/k",
            {"uploads": ""},
            {"x-amz-meta-sha256": "ab", "Content-Type": "application/x"},
            b"",
        ),
        ("HEAD", "/bkt/k", {}, {}, b""),
        ("POST", "/bkt/k", {"uploadId": "u1"}, {"If-None-Match": "*"}, b"<CompleteMultipartUpload/>"),
    ],
)
def test_signatures_equal_botocores(method, path, query, headers, body):
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    payload = hashlib.sha256(body).hexdigest()
    url = "http://127.0.0.1:9000" + quote(path, safe="/-_.~")
    if query:
        url += "?" + cli.canonical_query(query)
    request = AWSRequest(
        method=method, url=url, data=body, headers=dict(headers, **{"x-amz-content-sha256": payload})
    )
    S3SigV4Auth(Credentials("AKID", "SECRET/key+x"), "s3", "eu-west-1").add_auth(request)
    moment = datetime.datetime.strptime(request.headers["X-Amz-Date"], "%Y%m%dT%H%M%SZ")
    mine = cli.sign(
        method, "127.0.0.1:9000", path, query, headers, payload, "AKID", "SECRET/key+x", "eu-west-1", moment
    )
    assert mine["Authorization"] == request.headers["Authorization"]


def test_the_result_is_the_last_marker_line():
    log = "phase convert: qemu-img\n    (50.00/100%)\n" + cli.MARKER + '{"action": "upload"}\n'
    assert cli.parse_log(log) == {"action": "upload"}
    assert cli.parse_log("no result\n") is None
    assert cli.parse_log(cli.MARKER + "{not json\n") is None


def test_missing_credentials_are_named_and_nothing_is_converted(tmp_path):
    out = io.StringIO()
    argv = ["--source", str(tmp_path / "absent"), "--scratch", str(tmp_path), "--filename", "x.qcow2",
            "--endpoint", "http://127.0.0.1:1", "--bucket", "b", "--key", "k", "--source-url", "pvc://n/p",
            "--exported-at", "2026-12-02T00:00:00Z"]  # fmt: skip
    assert cli.main(argv, environ={}, out=out) == 1
    result = cli.parse_log(out.getvalue())
    assert result["code"] == "input" and "EXPORT_ACCESS_KEY_ID" in result["error"]
    assert not (tmp_path / "x.qcow2").exists()


# ---------------------------------------------------------------- against the lab's S3 (tests/lab/s3.py)
MIB = 1024 * 1024


class Counting(io.FileIO):
    """The qcow2 as the program opens it, counting the bytes read."""

    read_bytes = 0

    def read(self, size=-1):
        chunk = super().read(size)
        Counting.read_bytes += len(chunk)
        return chunk


@pytest.fixture
def run(lab_s3, tmp_path, monkeypatch):
    """``run(key, size)``: the program exports a raw disk of random bytes (uncompressed, so the qcow2 is
    larger than the part size) to ``key``; returns ``(exit code, result, qcow2 path, log)``."""
    client = lab_s3.client()
    bucket = "export-cli-" + os.urandom(4).hex()
    client.create_bucket(Bucket=bucket)
    raw = tmp_path / "disk.raw"
    raw.write_bytes(os.urandom(11 * MIB))
    real_open = open

    def counting_open(path, mode="r", *args, **kwargs):
        if str(path).endswith(".qcow2") and mode == "rb":
            return Counting(path, "r")
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr(cli, "open", counting_open, raising=False)
    env = {"EXPORT_ACCESS_KEY_ID": lab_s3.access_key, "EXPORT_SECRET_ACCESS_KEY": lab_s3.secret_key}

    def go(key, uid="uid-1"):
        Counting.read_bytes = 0
        out = io.StringIO()
        argv = ["--source", str(raw), "--scratch", str(tmp_path), "--filename", "x.qcow2", "--no-compress",
                "--endpoint", lab_s3.endpoint_url, "--bucket", bucket, "--key", key, "--source-url",
                "pvc://ns/" + uid, "--source-uid", uid, "--exported-at", "2026-12-02T00:00:00Z",
                "--part-size", str(5 * MIB)]  # fmt: skip
        code = cli.main(argv, environ=env, out=out)
        return code, cli.parse_log(out.getvalue()), tmp_path / "x.qcow2", out.getvalue()

    go.client, go.bucket = client, bucket
    return go


def keys_and_uploads(run):
    keys = [o["Key"] for o in run.client.list_objects_v2(Bucket=run.bucket).get("Contents", [])]
    return keys, run.client.list_multipart_uploads(Bucket=run.bucket).get("Uploads", [])


def stored(run, key):
    got = run.client.get_object(Bucket=run.bucket, Key=key)
    return got, got["Body"].read()


def test_a_first_export_reads_the_qcow2_once_and_stores_it_with_its_sha256(run):
    code, result, qcow2, log = run("w/11/a.qcow2")
    assert code == 0, result
    size = qcow2.stat().st_size
    assert size > 10 * MIB and result["action"] == "upload" and result["parts"] == 3
    assert result["read_bytes"] == size == Counting.read_bytes  # one pass, not two
    assert result["copy_parts"] == 1  # CopyObject
    got, body = stored(run, "w/11/a.qcow2")
    digest = hashlib.sha256(body).hexdigest()
    assert body == qcow2.read_bytes() and result["sha256"] == digest
    assert got["Metadata"] == {
        "sha256": digest,
        "source-url": "pvc://ns/uid-1",
        "source-uid": "uid-1",
        "mirrored-at": "2026-12-02T00:00:00Z",
        "sensitive": "yes",  # random bytes: no OS to read facts from, so unproven
    }
    assert got["ContentType"] == "application/x-qemu-disk"
    assert keys_and_uploads(run) == (["w/11/a.qcow2"], [])
    # The facts are read from the disk first (random bytes: no OS, so unproven and sensitive), then the
    # destination is proven before the conversion (a canary read anonymously, then deleted).
    assert result["image_facts"]["unreadable"] and "unproven" in result["sensitive_reasons"][0]
    assert result["exposure"]["verdict"] == "private" and result["exposure"]["canary_deleted"] is True
    assert [line.split(":")[0] for line in log.splitlines() if line.startswith("phase ")] == [
        "phase facts",
        "phase prove",
        "phase convert",
        "phase upload",
        "phase copy",
    ]

    # The rerun hashes the qcow2 once and leaves the object alone.
    before = run.client.head_object(Bucket=run.bucket, Key="w/11/a.qcow2")
    code, again, _q, _log = run("w/11/a.qcow2")
    assert code == 0 and again["action"] == "skip" and again["sha256"] == digest, again
    assert again["read_bytes"] == size == Counting.read_bytes and again["bytes_moved"] == 0
    after = run.client.head_object(Bucket=run.bucket, Key="w/11/a.qcow2")
    assert (after["ETag"], after["LastModified"]) == (before["ETag"], before["LastModified"])
    assert keys_and_uploads(run) == (["w/11/a.qcow2"], [])


def test_a_large_export_is_copied_in_parts(run, monkeypatch):
    monkeypatch.setattr(cli, "COPY_PART_LIMIT", 5 * MIB)
    code, result, qcow2, _log = run("w/11/big.qcow2")
    assert code == 0, result
    assert result["copy_parts"] == 3 and result["read_bytes"] == qcow2.stat().st_size == Counting.read_bytes
    got, body = stored(run, "w/11/big.qcow2")
    assert body == qcow2.read_bytes()
    assert got["Metadata"]["sha256"] == hashlib.sha256(body).hexdigest() == result["sha256"]
    assert got["ContentType"] == "application/x-qemu-disk"
    assert keys_and_uploads(run) == (["w/11/big.qcow2"], [])


def test_a_key_holding_another_object_is_refused_and_nothing_is_left(run):
    run.client.put_object(
        Bucket=run.bucket, Key="w/11/b.qcow2", Body=b"other", Metadata={"sha256": "ab" * 32}
    )
    code, result, _q, _log = run("w/11/b.qcow2")
    assert code == 1 and result["code"] == "key_exists", result
    assert "s3://%s/w/11/b.qcow2" % run.bucket in result["error"] and "new key" in result["error"]
    assert stored(run, "w/11/b.qcow2")[1] == b"other"
    assert keys_and_uploads(run) == (["w/11/b.qcow2"], [])


@pytest.mark.parametrize("limit", [cli.COPY_PART_LIMIT, 5 * MIB], ids=["CopyObject", "UploadPartCopy"])
def test_a_failed_copy_leaves_neither_the_staging_nor_the_final_object(run, monkeypatch, limit):
    monkeypatch.setattr(cli, "COPY_PART_LIMIT", limit)
    real = cli.S3.request
    copies = []

    def refuse_copies(self, method, bucket, key, query=None, headers=None, body=b"", what=None, **options):
        if "x-amz-copy-source" in (headers or {}):
            copies.append(key)
            if len(copies) == 2 or limit == cli.COPY_PART_LIMIT:  # the second part, or the CopyObject
                return cli.Answer(403, {}, b"<Error><Code>AccessDenied</Code></Error>")
        return real(self, method, bucket, key, query, headers, body, what, **options)

    monkeypatch.setattr(cli.S3, "request", refuse_copies)
    code, result, _q, _log = run("w/11/c.qcow2")
    assert code == 1 and result["code"] == "s3" and "AccessDenied" in result["error"], result
    assert copies and set(copies) == {"w/11/c.qcow2"}
    assert "staging object" in result["error"] and "was deleted" in result["error"]
    if limit != cli.COPY_PART_LIMIT:
        assert "multipart upload to s3://%s/w/11/c.qcow2 was aborted" % run.bucket in result["error"]
    assert keys_and_uploads(run) == ([], [])
