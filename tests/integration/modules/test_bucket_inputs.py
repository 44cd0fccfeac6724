"""Bad-input table for the bucket modules, through ansible-playbook against the lab's loopback S3.

Every row is refused with a message naming the option, the rule and the supported move, and the
bucket is still empty afterwards (no object, no pending multipart upload): refusals come before the
first write. The YAML number rows are real YAML numbers in the playbook (``version: 1.1``).
"""

from __future__ import annotations

import uuid

import pytest

from tests.integration.support.runner import run_playbook
from tests.lab.s3 import S3Server

KEY = "windows/11/2026-08-09/windows11-x64-golden.qcow2"


@pytest.fixture(scope="module")
def s3():
    server = S3Server()
    endpoint = server.start()
    try:
        yield endpoint
    finally:
        server.stop()


def row(title, module, **params):
    return {"name": title, "goldenimage.pipeline." + module: params, "ignore_errors": True}


@pytest.mark.suite("bad-input")
def test_bad_inputs_are_refused_before_any_write(s3, tmp_path):
    client = s3.client()
    bucket = "inputs-" + uuid.uuid4().hex[:10]
    client.create_bucket(Bucket=bucket)
    image = tmp_path / "golden.qcow2"
    image.write_bytes(b"QFI\xfb exported golden")
    export = {"bucket": bucket, "path": str(image)}
    mirror = {"bucket": bucket, "family": "debian-12", "version": "20260801", "path": str(image)}
    table = {
        "export ../escape.qcow2": (
            row("", "golden_export_object", key="../escape.qcow2", **export),
            "option key",
        ),
        "export windows/../../b.qcow2": (
            row("", "golden_export_object", key="windows/../../b.qcow2", **export),
            "'.' or '..' segment",
        ),
        "export a 1,102-character key": (
            row("", "golden_export_object", key="k" * 1098 + ".img", **export),
            "S3 allows at most 1024",
        ),
        "export part_size 0": (row("", "golden_export_object", key=KEY, part_size=0, **export), "part_size"),
        "export concurrency 0": (
            row("", "golden_export_object", key=KEY, concurrency=0, **export),
            "concurrency",
        ),
        "mirror version 1.10 as a number": (
            row("", "os_mirror_object", **{**mirror, "version": 1.1}),
            "quote it",
        ),
        "mirror url_timeout 0": (row("", "os_mirror_object", url_timeout=0, **mirror), "url_timeout"),
        "mirror url_timeout -1": (row("", "os_mirror_object", url_timeout=-1, **mirror), "url_timeout"),
        "mirror part_size -8M": (row("", "os_mirror_object", part_size="-8M", **mirror), "part_size"),
        "catalog key ../catalog.json": (
            row("", "os_mirror_catalog", bucket=bucket, catalog_key="../catalog.json"),
            "option catalog_key",
        ),
        "catalog key too long": (
            row("", "os_mirror_catalog", bucket=bucket, catalog_key="c" * 1030),
            "S3 allows at most 1024",
        ),
        "exposure timeout 0": (
            row("", "bucket_exposure", bucket=bucket, key=KEY, timeout=0),
            "option timeout",
        ),
        "presign expiry 0": (
            row("", "bucket_object_url", url="%s/%s/%s" % (s3.endpoint_url, bucket, KEY), expiry=0),
            "option expiry",
        ),
        "presign expiry -60": (
            row("", "bucket_object_url", url="%s/%s/%s" % (s3.endpoint_url, bucket, KEY), expiry=-60),
            "option expiry",
        ),
    }
    tasks = []
    for title, (task, _words) in table.items():
        task["name"] = title
        tasks.append(task)
    run = run_playbook(
        [{"hosts": "localhost", "gather_facts": False, "tasks": tasks}], env=s3.env(), timeout=300
    )
    assert run.ok, run.log
    for title, (_task, words) in table.items():
        entry = run.entry(title)
        assert entry["status"] == "ignored", (title, entry)
        assert words in entry["result"]["msg"] and entry["result"].get("refused") is True, (title, entry)
        assert ";" in entry["result"]["msg"], (title, entry["result"]["msg"])  # the supported move follows
    assert client.list_objects_v2(Bucket=bucket).get("Contents") is None
    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads") is None
