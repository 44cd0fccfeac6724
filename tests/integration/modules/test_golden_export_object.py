"""golden_export_object against a loopback S3 server: the second upload of the same file to the same key
finds the object and writes nothing, in check mode and for real (the server's request log counts the
writes)."""

from __future__ import annotations

import hashlib
import os
import uuid

import pytest

from tests.integration.modules.test_os_mirror import s3  # noqa: F401  # pylint: disable=unused-import
from tests.integration.support.runner import module_task, play, run_playbook

MODULE = "goldenimage.pipeline.golden_export_object"
KEY = "windows/11/2026-08-09/windows11-x64-golden.qcow2"


@pytest.mark.suite("idempotence")
def test_a_second_upload_of_the_same_file_changes_nothing_and_writes_nothing(s3, tmp_path):  # noqa: F811
    endpoint, client, log = s3
    bucket = "export-" + uuid.uuid4().hex[:10]
    client.create_bucket(Bucket=bucket)
    image = tmp_path / "windows11-x64-golden.qcow2"
    image.write_bytes(b"QFI\xfb" + os.urandom(3 * 1024 * 1024))
    params = dict(bucket=bucket, key=KEY, path=str(image), source="pvc://golden-images-build/win11-sealed")

    start = log.mark()
    first = run_playbook(play(module_task(MODULE, "upload", **params)), env=endpoint.env())
    assert first.ok, first.log
    assert first["upload"]["changed"] is True
    # Run as an async job that printed its progress: the file hashed (the digest is not given), then sent.
    size = image.stat().st_size
    assert first["upload"]["lines"][-1].startswith(
        "upload %s: 100%% (%d of %d bytes) after " % (image, size, size)
    ), first["upload"]["lines"]
    assert any(line.startswith("hash %s: " % image) for line in first["upload"]["lines"])
    assert log.since(start), "the request log sees the first upload's writes"
    stored = client.head_object(Bucket=bucket, Key=KEY)
    assert stored["Metadata"]["sha256"] == hashlib.sha256(image.read_bytes()).hexdigest()

    mark = log.mark()
    second = run_playbook(
        play(
            module_task(MODULE, "check again", check=True, **params), module_task(MODULE, "again", **params)
        ),
        env=endpoint.env(),
    )
    assert second.ok, second.log
    assert second["check again"]["changed"] is False and second["again"]["changed"] is False
    assert log.since(mark) == []
    after = client.head_object(Bucket=bucket, Key=KEY)
    assert (after["ETag"], after["LastModified"], after["Metadata"]) == (
        stored["ETag"],
        stored["LastModified"],
        stored["Metadata"],
    )
    assert [o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]] == [KEY]
    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads") is None
