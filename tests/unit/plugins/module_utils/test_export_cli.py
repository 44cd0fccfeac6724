"""The export Job's program without a cluster, against the lab's S3: its result line is read back, its
files import without Ansible, and its uploads go through the collection's one S3 client (botocore's
retries) and one multipart upload."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import textwrap

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket import _mirror_transfer as transfer
from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import jobs
from ansible_collections.goldenimage.pipeline.plugins.module_utils.s3 import _s3
from ansible_collections.goldenimage.pipeline.plugins.module_utils.windows import _export_cli as cli
from ansible_collections.goldenimage.pipeline.plugins.modules import golden_export_job

from tests.lab.s3 import Fault, s3_client


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
    raw.write_bytes(os.urandom(17 * MIB))
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
                "--part-size", str(8 * MIB)]  # fmt: skip
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
    assert size > 16 * MIB and result["action"] == "upload" and result["parts"] == 3
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
    monkeypatch.setattr(transfer, "COPY_PART_LIMIT", 5 * MIB)
    code, result, qcow2, _log = run("w/11/big.qcow2")
    assert code == 0, result
    size = qcow2.stat().st_size
    assert (
        result["copy_parts"] == -(-size // (5 * MIB)) and result["read_bytes"] == size == Counting.read_bytes
    )
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


def copies(method, path, names, headers):
    return "x-amz-copy-source" in headers


def parts(method, path, names, headers):
    return method == "PUT" and "partNumber" in names and "x-amz-copy-source" not in headers


@pytest.mark.parametrize("limit", [transfer.COPY_PART_LIMIT, 5 * MIB], ids=["CopyObject", "UploadPartCopy"])
def test_a_failed_copy_leaves_neither_the_staging_nor_the_final_object(run, lab_s3, monkeypatch, limit):
    monkeypatch.setattr(transfer, "COPY_PART_LIMIT", limit)
    # The CopyObject, or the second UploadPartCopy, is refused.
    refused = Fault(copies, 403, "AccessDenied", after=0 if limit == transfer.COPY_PART_LIMIT else 1)
    monkeypatch.setattr(lab_s3.front, "faults", [refused])
    code, result, _q, _log = run("w/11/c.qcow2")
    assert code == 1 and result["code"] == "s3" and "AccessDenied" in result["error"], result
    assert refused.hits == 1
    assert "staging object" in result["error"] and "was deleted" in result["error"]
    if limit != transfer.COPY_PART_LIMIT:
        assert "abort the upload to s3://%s/w/11/c.qcow2" % run.bucket in result["error"]
    assert keys_and_uploads(run) == ([], [])


def test_a_part_answered_5xx_is_sent_again_by_botocore(run, lab_s3, monkeypatch):
    # Two answers 500 to the parts: botocore's standard retries send them again, within MAX_ATTEMPTS.
    tries = []

    def part_tries(method, path, names, headers):
        if parts(method, path, names, headers):
            tries.append(headers.get("amz-sdk-request", ""))
            return True
        return False

    unwell = Fault(part_tries, 500, "InternalError", times=2)
    monkeypatch.setattr(lab_s3.front, "faults", [unwell])
    code, result, qcow2, _log = run("w/11/d.qcow2")
    assert code == 0 and result["parts"] == 3, result
    assert unwell.hits == 2 and unwell.seen == 5  # three parts, five sends
    # botocore's retry loop sent them again, with the policy's attempt limit (amz-sdk-request).
    fields = [dict(f.strip().split("=", 1) for f in t.split(";")) for t in tries]
    # Two parts failed once each, or one part twice when its retry overtook the next part's first try.
    assert sorted(f["attempt"] for f in fields) in (["1", "1", "1", "2", "2"], ["1", "1", "1", "2", "3"])
    assert {f["max"] for f in fields} == {str(_s3.MAX_ATTEMPTS)}
    # Read back by a client of its own (the lab's), with the checksums the server keeps.
    reader = s3_client(lab_s3.env())
    got = reader.get_object(Bucket=run.bucket, Key="w/11/d.qcow2", ChecksumMode="ENABLED")
    body = got["Body"].read()
    assert body == qcow2.read_bytes() and len(body) > 2 * result["part_size"]
    assert hashlib.sha256(body).hexdigest() == result["sha256"] == got["Metadata"]["sha256"]
    assert keys_and_uploads(run) == (["w/11/d.qcow2"], [])


def test_a_part_answered_5xx_at_every_attempt_fails_and_leaves_nothing(run, lab_s3, monkeypatch):
    down = Fault(parts, 503, "SlowDown", times=10**6)
    monkeypatch.setattr(lab_s3.front, "faults", [down])
    code, result, _q, _log = run("w/11/e.qcow2")
    assert code == 1 and result["code"] == "s3" and "SlowDown" in result["error"], result
    assert "abort the upload to" in result["error"]
    # The policy is botocore's: each part sent MAX_ATTEMPTS times at most, and no loop around it.
    assert down.hits % _s3.MAX_ATTEMPTS == 0 and down.hits <= run_concurrency() * _s3.MAX_ATTEMPTS
    assert keys_and_uploads(run) == ([], [])


def run_concurrency():
    return cli.parser().get_default("concurrency")


def test_the_program_files_import_without_ansible(tmp_path):
    """The Job's image has python3, boto3 and dissect, not Ansible: the files shipped in the ConfigMap
    import with ``ansible`` out of reach."""
    files = golden_export_job.program_files()
    # Laid out as the Job's volume lays them out: each key at the path its item names.
    for item in jobs.code_items(files):
        (tmp_path / item["path"]).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / item["path"]).write_text(files[item["key"]])
    probe = textwrap.dedent(
        """
        import sys

        class NoAnsible:
            def find_spec(self, name, path=None, target=None):
                if name == "ansible" or name.startswith("ansible."):
                    raise ImportError("no Ansible in the Job's image: " + name)

        sys.meta_path.insert(0, NoAnsible())
        from ansible_collections.goldenimage.pipeline.plugins.module_utils.windows import _export_cli
        _export_cli.clients  # noqa: B018
        print(_export_cli.__file__)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(tmp_path)),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(tmp_path / jobs.CODE_PACKAGE / "windows" / "_export_cli.py")
