"""The export Job's program without a cluster: its SigV4 signatures equal botocore's, its result line is
read back, and the part size grows to stay within S3's 10,000 parts."""

from __future__ import annotations

import datetime
import hashlib
import io
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
