"""os_mirror_object, os_mirror_catalog, the os_mirror role and the upload itself against the lab's
loopback S3 (tests/lab/s3.py).

Images are real qcow2 files made by qemu-img from random data, so every digest is a real one. The
S3 server runs in this process; its request log tells which writes each playbook run made. A small
http.server serves images as an upstream would, and can drop the connection mid-stream.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import pathlib
import re
import subprocess
import threading
import uuid

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket import mirror
from ansible_collections.goldenimage.pipeline.plugins.module_utils.bucket._mirror_transfer import (
    KeyExists,
    Source,
    TransferError,
    Upload,
    open_source,
)

from tests.integration.support.runner import play, run_playbook
from tests.lab.s3 import S3Server

MIB = 1024 * 1024
OBJECT = "goldenimage.pipeline.os_mirror_object"
CATALOG = "goldenimage.pipeline.os_mirror_catalog"
FAMILY, VERSION = "debian-12", "20260801"
WRITES = ("PUT", "POST", "DELETE")


class RequestLog:
    """Every request the S3 server was sent, as (method, path): the lab's front keeps them."""

    def __init__(self, front):
        front.request_log = self.requests = []

    def mark(self):
        return len(self.requests)

    def since(self, mark, methods=WRITES):
        return self.between(mark, len(self.requests), methods)

    def between(self, first, last, methods=WRITES):
        return [(m, p) for m, p in self.requests[first:last] if m in methods]

    def find_all(self, text, start=0):
        """Indexes of the requests from ``start`` on whose path contains ``text``."""
        return [i for i, request in enumerate(self.requests) if i >= start and text in request[1]]


@pytest.fixture(scope="module")
def s3():
    server = S3Server()
    endpoint = server.start()
    log = RequestLog(endpoint.front)
    try:
        yield endpoint, endpoint.client(), log
    finally:
        server.stop()


def _qcow2(directory: pathlib.Path, name: str, mib: int) -> pathlib.Path:
    raw = directory / (name + ".raw")
    with raw.open("wb") as stream:
        stream.write(os.urandom(mib * MIB))
    image = directory / (name + ".qcow2")
    subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(raw), str(image)], check=True)
    raw.unlink()
    return image


def _sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(MIB), b""):
            digest.update(chunk)
    return digest.hexdigest()


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """Real qcow2 images of random data: the one mirrored, a changed one, one served by URL, a small one."""
    directory = tmp_path_factory.mktemp("images")
    return {
        "disk": _qcow2(directory, "disk", 40),
        "changed": _qcow2(directory, "changed", 12),
        "remote": _qcow2(directory, "remote", 20),
        "small": _qcow2(directory, "small", 2),
    }


class Upstream(http.server.BaseHTTPRequestHandler):
    """GET /full/<name> serves a file; GET /drop/<name> announces it all and hangs up after 12 MiB."""

    directory: pathlib.Path
    drop_after = 12 * MIB

    def do_GET(self):
        mode, name = self.path.split("/", 2)[1:]
        path = self.directory / name
        if mode not in ("full", "drop") or not path.is_file():
            self.send_error(404)
            return
        size = path.stat().st_size
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        limit = size if mode == "full" else self.drop_after
        with path.open("rb") as stream:
            self.wfile.write(stream.read(limit))
        self.close_connection = True

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def upstream(images):
    handler = type("Handler", (Upstream,), {"directory": images["remote"].parent})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield "http://127.0.0.1:%d" % server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def bucket(s3):
    client = s3[1]
    name = "mirror-" + uuid.uuid4().hex[:10]
    client.create_bucket(Bucket=name)
    return name


def _env(endpoint):
    # Pipelining spares a temporary file per task; these plays run many short module tasks.
    return dict(endpoint.env(), ANSIBLE_PIPELINING="true")


def mirror_task(title, bucket, **params):
    extra = {k: params.pop(k) for k in ("check_mode", "ignore_errors") if k in params}
    params.setdefault("family", FAMILY)
    params.setdefault("version", VERSION)
    return dict({"name": title, OBJECT: dict(params, bucket=bucket, part_size="8M")}, **extra)


def catalog_task(title, bucket):
    return {"name": title, CATALOG: {"bucket": bucket}}


def keys(client, bucket, prefix=""):
    answer = client.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(obj["Key"] for obj in answer.get("Contents") or [])


def key_of(path, digest, name=None):
    return "%s/%s/sha256-%s/%s" % (FAMILY, VERSION, digest, name or path.name)


@pytest.mark.suite("idempotence")
def test_mirror_check_then_real_then_skip(s3, bucket, images, upstream):
    """One play, three phases: check mode, the real copy, the same again.

    Each image task starts with one listing of its version prefix, so the third and fifth of those
    listings split the server's request log into the three phases.
    """
    endpoint, client, log = s3
    disk, remote = images["disk"], images["remote"]
    disk_sha, remote_sha = _sha256(disk), _sha256(remote)
    remote_url = "%s/full/%s" % (upstream, remote.name)

    def phase(name, **extra):
        return [
            dict(mirror_task(name + ": local image", bucket, path=str(disk)), **extra),
            dict(
                mirror_task(name + ": remote image", bucket, url=remote_url, sha256="sha256:" + remote_sha),
                **extra,
            ),
            dict(catalog_task(name + ": catalog", bucket), **extra),
        ]

    mark = log.mark()
    run = run_playbook(
        play(*phase("check", check_mode=True, diff=True), *phase("real", diff=True), *phase("again")),
        env=_env(endpoint),
    )
    assert run.ok, run.log
    listings = log.find_all("prefix=%s/%s/" % (FAMILY, VERSION), mark)
    assert len(listings) == 6, log.requests[mark:]
    bounds = [listings[0], listings[2], listings[4], len(log.requests)]
    check_writes, real_writes, again_writes = (log.between(bounds[i], bounds[i + 1]) for i in range(3))

    # Check mode predicts and writes nothing.
    assert run["check: local image"]["changed"] is True
    assert run["check: local image"]["parts"] == 6  # 40 MiB of data and the qcow2 header in 8 MiB parts
    assert run["check: local image"]["key"] == ""  # digest unknown and not needed: the file is not read
    assert run["check: remote image"]["key"] == key_of(remote, remote_sha)
    assert run["check: remote image"]["diff"]["after"]["sha256"] == remote_sha
    assert run["check: catalog"]["changed"] is True and run["check: catalog"]["entries"] == 0
    assert check_writes == []

    # The real run: multipart uploads straight to the digest keys, verified; the catalog lists both.
    local = run["real: local image"]
    assert local["changed"] is True and local["action"] == "upload"
    assert local["key"] == key_of(disk, disk_sha)
    size = disk.stat().st_size
    assert (local["sha256"], local["size"], local["bytes_moved"]) == (disk_sha, size, size)
    assert (local["method"], local["parts"], local["part_size"]) == ("multipart", 6, 8 * MIB)
    assert local["digest_from"] == "read first"  # the key needs the digest before the first part
    assert local["throughput_mib_s"] > 0 and local["seconds"] > 0
    assert set(local["verified_by"]) == {
        "sha256 of every body (ChecksumSHA256 signed, checked by the server)",
        "sha256 of the whole stream (computed while it was sent)",
        "composite sha256 of the stored object (ChecksumSHA256 of its parts)",
    }
    # Each transfer ran as an async job printing its phases as they went: the local file hashed first (the
    # key needs its digest), then uploaded; the remote one, its digest given, only uploaded.
    assert [line.split(" ", 1)[0] for line in local["lines"]] == sorted(
        [line.split(" ", 1)[0] for line in local["lines"]]
    ), local["lines"]
    assert {line.split(" ", 1)[0] for line in local["lines"]} == {"hash", "upload"}, local["lines"]
    assert re.fullmatch(
        r"upload %s: 100%% \(%d of %d bytes\) after [0-9.]+s" % (re.escape(str(disk)), size, size),
        local["lines"][-1],
    ), local["lines"]
    assert len([line for line in local["lines"] if line.startswith("upload ")]) >= 5  # every 10 percent
    remote_result = run["real: remote image"]
    assert {line.split(" ", 1)[0] for line in remote_result["lines"]} == {"upload"}, remote_result["lines"]
    assert remote_result["key"] == key_of(remote, remote_sha)
    assert (remote_result["method"], remote_result["digest_from"]) == ("multipart", "given")
    part_puts = [p for m, p in real_writes if m == "PUT" and "partNumber=" in p]
    assert len(part_puts) == 6 + remote_result["parts"]
    final_paths = ("/%s/%s?" % (bucket, local["key"]), "/%s/%s?" % (bucket, remote_result["key"]))
    assert all(p.startswith(final_paths) for p in part_puts)  # parts go straight to the final keys
    # One upload per image, each completed once; no copy, no temporary key, nothing deleted.
    assert len([p for m, p in real_writes if m == "POST" and p.endswith("?uploads")]) == 2
    assert len([p for m, p in real_writes if m == "POST" and "uploadId=" in p]) == 2
    assert [p for m, p in real_writes if m == "DELETE" or ".incoming" in p] == []
    assert keys(client, bucket) == sorted(
        [key_of(disk, disk_sha), key_of(remote, remote_sha), "catalog.json"]
    )
    for path, digest in ((disk, disk_sha), (remote, remote_sha)):
        stored = client.get_object(Bucket=bucket, Key=key_of(path, digest))
        assert hashlib.sha256(stored["Body"].read()).hexdigest() == digest
        assert stored["Metadata"]["sha256"] == digest
    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads") is None
    document = json.loads(client.get_object(Bucket=bucket, Key="catalog.json")["Body"].read())
    versions = document["families"][FAMILY]["versions"]
    assert [v["filename"] for v in versions] == sorted([disk.name, remote.name])
    assert {v["source_url"] for v in versions} == {str(disk), remote_url}
    assert run["real: catalog"]["diff"]["after"] == document

    # Again: everything skipped after a listing and a HEAD; not one write, not one object read.
    for title in ("local image", "remote image", "catalog"):
        assert run["again: " + title]["changed"] is False, title
    assert run["again: local image"]["action"] == "skip" and run["again: local image"]["bytes_moved"] == 0
    assert run["again: remote image"]["action"] == "skip"
    assert again_writes == []
    reads = log.between(bounds[2], bounds[3], ("GET",))
    assert reads and not [request for request in reads if "/sha256-" in request[1]]


@pytest.mark.suite("bad-input")
def test_refusals_and_failures_leave_nothing_behind(s3, bucket, images, upstream):
    """A changed image under a mirrored version, a dropped download and a wrong digest all fail clean."""
    endpoint, client, log = s3
    disk, changed, remote = images["disk"], images["changed"], images["remote"]
    disk_sha, changed_sha, remote_sha = _sha256(disk), _sha256(changed), _sha256(remote)
    # An image mirrored earlier: the layout and metadata are all the module relies on.
    client.put_object(
        Bucket=bucket, Key=key_of(disk, disk_sha), Body=disk.read_bytes(), Metadata={"sha256": disk_sha}
    )
    before = client.head_object(Bucket=bucket, Key=key_of(disk, disk_sha))
    objects_before = keys(client, bucket)

    mark = log.mark()
    run = run_playbook(
        play(
            mirror_task("changed image", bucket, path=str(changed), filename=disk.name, ignore_errors=True),
            mirror_task(
                "dropped download",
                bucket,
                url="%s/drop/%s" % (upstream, remote.name),
                version="20260901",
                ignore_errors=True,
            ),
            mirror_task(
                "interrupted upload",
                bucket,
                url="%s/drop/%s" % (upstream, remote.name),
                version="20260903",
                sha256=remote_sha,
                ignore_errors=True,
            ),
            mirror_task(
                "wrong digest",
                bucket,
                url="%s/full/%s" % (upstream, remote.name),
                version="20260902",
                sha256="0" * 64,
                ignore_errors=True,
            ),
        ),
        env=_env(endpoint),
    )
    titles = ("changed image", "dropped download", "interrupted upload", "wrong digest")
    assert [run.entry(t)["status"] for t in titles] == ["ignored"] * 4
    refused = run["changed image"]
    for text in (key_of(disk, disk_sha), disk_sha, changed_sha, "immutable", "new version"):
        assert text in refused["msg"], refused["msg"]
    short = "ended after %d of the %d bytes" % (12 * MIB, remote.stat().st_size)
    # Without a digest the download is copied to a temporary file first: it fails before any upload.
    dropped = run["dropped download"]
    assert short in dropped["msg"] and dropped["msg"].startswith("copy "), dropped["msg"]
    assert dropped["cleanup"] == []
    # With the digest given the parts go up as they arrive: the cut aborts the upload of the final key.
    interrupted = run["interrupted upload"]
    interrupted_key = "%s/20260903/sha256-%s/%s" % (FAMILY, remote_sha, remote.name)
    assert short in interrupted["msg"], interrupted["msg"]
    assert interrupted["cleanup"] == ["abort the upload to " + interrupted_key]
    wrong = run["wrong digest"]
    assert remote_sha in wrong["msg"] and "0" * 64 in wrong["msg"]
    assert "nothing was written under a final key" in wrong["msg"]
    assert wrong["cleanup"] == [
        "abort the upload to %s/20260902/sha256-%s/%s" % (FAMILY, "0" * 64, remote.name)
    ]

    # The mirrored object is untouched, nothing new is under any key, no upload is pending.
    after = client.head_object(Bucket=bucket, Key=key_of(disk, disk_sha))
    assert (after["ETag"], after["LastModified"], after["Metadata"]) == (
        before["ETag"],
        before["LastModified"],
        before["Metadata"],
    )
    assert keys(client, bucket) == objects_before
    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads") is None
    # The only writes: two uploads started, their parts, their aborts. No PutObject, no completion.
    writes = log.since(mark)
    starts = [p for m, p in writes if m == "POST" and p.endswith("?uploads")]
    parts = [p for m, p in writes if m == "PUT" and "partNumber=" in p]
    aborts = [p for m, p in writes if m == "DELETE" and "uploadId=" in p]
    assert len(starts) == 2 and len(aborts) == 2 and len(starts) + len(parts) + len(aborts) == len(writes), (
        writes
    )
    assert [p for p in parts if p.startswith("/%s/%s?" % (bucket, interrupted_key))]  # it did send parts


def test_role_mirrors_and_catalogs(s3, images, upstream):
    """The role creates the bucket, mirrors a file and a URL, rebuilds the catalog and sums it up.

    Its second run (nothing copied, catalog unchanged) is the Molecule scenario's idempotence step.
    """
    endpoint, client = s3[:2]
    disk, remote = images["disk"], images["remote"]
    bucket = "role-" + uuid.uuid4().hex[:10]
    role = {
        "name": "os_mirror role",
        "ansible.builtin.include_role": {"name": "goldenimage.pipeline.os_mirror"},
        "vars": {
            "os_mirror_bucket": bucket,
            "os_mirror_part_size": "8M",
            "os_mirror_concurrency": 3,
            "os_mirror_images": [
                {"family": "debian-12", "version": "20260801", "path": str(disk)},
                {
                    "family": "ubuntu-24.04",
                    "version": "20260715",
                    "url": "%s/full/%s" % (upstream, remote.name),
                    "filename": "noble.qcow2",
                },
            ],
        },
    }
    run = run_playbook(play(role), env=_env(endpoint))
    assert run.ok, run.log
    report = run["Record the totals of this run"]["ansible_facts"]["os_mirror_report"]
    assert report["copied"] == 2 and report["skipped"] == 0
    assert report["bytes_moved"] == disk.stat().st_size + remote.stat().st_size
    assert report["throughput_mib_s"] > 0
    assert report["catalog_changed"] is True and report["catalog_entries"] == 2
    summary = run["Summarise the mirror run"]["msg"]
    assert summary[0].startswith("2 copied, 0 skipped: %d bytes moved at " % report["bytes_moved"])
    assert summary[0].endswith("lists 2 images (rewritten)")
    assert len(summary) == 3 and all(" parts at " in line for line in summary[1:])
    document = json.loads(client.get_object(Bucket=bucket, Key="catalog.json")["Body"].read())
    assert sorted(document["families"]) == ["debian-12", "ubuntu-24.04"]
    assert document["families"]["ubuntu-24.04"]["versions"][0]["filename"] == "noble.qcow2"
    assert document["families"]["ubuntu-24.04"]["versions"][0]["sha256"] == _sha256(remote)
    assert endpoint.secret_key not in run.stdout


# The upload itself, without Ansible: what a playbook cannot stage.


class OtherWriter(Source):
    """A local file whose last read lets another writer store the same key, as a parallel run would."""

    def __init__(self, path, client, bucket):
        super().__init__(path.open("rb"), path.stat().st_size, str(path))
        self.client, self.bucket, self.key, self.stored = client, bucket, None, False

    def read(self, count):
        data = super().read(count)
        # The key is set once the digest is known, so the read that hashes the file first stores nothing.
        if self.key and self.read_bytes == self.size and not self.stored:
            self.client.put_object(Bucket=self.bucket, Key=self.key, Body=b"theirs")
            self.stored = True
        return data


class ChangedAfterHashing(Source):
    """A local file that is rewritten between the read that hashes it and the upload."""

    def __init__(self, path):
        super().__init__(path.open("rb"), path.stat().st_size, str(path))
        self.path, self.rewinds = path, 0

    def rewind(self):
        self.rewinds += 1
        if self.rewinds == 2:
            with self.path.open("r+b") as stream:
                stream.write(b"\0" * 4096)
        return super().rewind()


def _upload(client, bucket, source, **options):
    def destination(digest):
        key = mirror.object_key(FAMILY, VERSION, digest, pathlib.Path(source.name).name)
        if isinstance(source, OtherWriter):
            source.key = key
        return key, mirror.final_metadata(digest, source.name, "2026-08-01T00:00:00Z")

    return Upload(client, bucket, source, destination, 8 * MIB, 2, **options)


def test_small_image_is_one_verified_put(s3, bucket, images):
    client, log = s3[1:]
    small = images["small"]
    digest = _sha256(small)
    mark = log.mark()
    report = _upload(client, bucket, open_source(path=str(small)), expected_sha256=digest).run()
    assert (report["method"], report["parts"], report["digest_from"]) == ("put", 1, "given")
    assert report["key"] == key_of(small, digest) and report["size"] == small.stat().st_size
    assert "sha256 of the stored object (ChecksumSHA256)" in report["verified_by"]
    assert [m for m, p in log.since(mark)] == ["PUT"]
    stored = client.head_object(Bucket=bucket, Key=report["key"])
    assert stored["Metadata"]["sha256"] == digest and stored["ContentLength"] == report["size"]


@pytest.mark.parametrize("name", ["small", "disk"])
def test_a_key_stored_during_the_upload_is_never_replaced(s3, bucket, images, name):
    """If-None-Match: * on PutObject (small) and CompleteMultipartUpload (disk) refuses the write."""
    client = s3[1]
    path = images[name]
    source = OtherWriter(path, client, bucket)
    with pytest.raises(KeyExists) as caught:
        _upload(client, bucket, source).run()
    key = key_of(path, _sha256(path))
    assert caught.value.key == key and "If-None-Match" in str(caught.value)
    assert client.get_object(Bucket=bucket, Key=key)["Body"].read() == b"theirs"
    assert caught.value.cleanup == ([] if name == "small" else ["abort the upload to " + key])
    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads") is None


def test_an_existing_key_is_refused_before_any_upload(s3, bucket, images):
    client, log = s3[1:]
    small = images["small"]
    key = key_of(small, _sha256(small))
    client.put_object(Bucket=bucket, Key=key, Body=b"older")
    mark = log.mark()
    with pytest.raises(KeyExists, match="already exists"):
        _upload(client, bucket, open_source(path=str(small))).run()
    assert log.since(mark) == []


def test_a_file_changed_after_hashing_is_not_published(s3, bucket, tmp_path, images):
    client = s3[1]
    path = tmp_path / images["disk"].name
    path.write_bytes(images["disk"].read_bytes())
    with pytest.raises(TransferError, match="changed while it was uploaded") as caught:
        _upload(client, bucket, ChangedAfterHashing(path)).run()
    assert caught.value.cleanup and caught.value.cleanup[0].startswith("abort the upload to ")
    assert keys(client, bucket) == []
    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads") is None


class Sent:
    """Headers and bodies of the upload requests a client sends (observed on its own event hooks)."""

    OPERATIONS = ("PutObject", "UploadPart")

    def __init__(self, client, strip_checksum=False):
        self.client, self.strip_checksum, self.requests = client, strip_checksum, []

    def __enter__(self):
        events = self.client.meta.events
        for op in self.OPERATIONS:
            events.register("before-send.s3.%s" % op, self.seen, unique_id="test-sent-%s" % op)
            if self.strip_checksum:
                events.register("after-call.s3.%s" % op, self.strip, unique_id="test-strip-%s" % op)
        return self

    def __exit__(self, *exc):
        events = self.client.meta.events
        for op in self.OPERATIONS:
            events.unregister("before-send.s3.%s" % op, unique_id="test-sent-%s" % op)
            events.unregister("after-call.s3.%s" % op, unique_id="test-strip-%s" % op)

    def seen(self, request, **_kwargs):
        headers = {k.lower(): v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()}
        self.requests.append((headers, request.body))

    @staticmethod
    def strip(parsed, **_kwargs):
        # What a server without flexible checksums answers: no checksum, the md5 ETag only.
        parsed.pop("ChecksumSHA256", None)


def _body(body):
    return body if isinstance(body, bytes) else body.getvalue() if hasattr(body, "getvalue") else bytes(body)


@pytest.mark.parametrize("name", ["small", "disk"])
def test_each_body_is_hashed_once_for_checksum_and_signature(s3, bucket, images, name):
    """No md5 per part and no second sha256: the signed checksum header stands for the body."""
    client = s3[1]
    path = images[name]
    with Sent(client) as sent:
        report = _upload(client, bucket, open_source(path=str(path)), expected_sha256=_sha256(path)).run()
    assert sent.requests and len(sent.requests) == report["parts"]
    for headers, body in sent.requests:
        raw = hashlib.sha256(_body(body)).digest()
        assert "content-md5" not in headers
        assert headers["x-amz-checksum-sha256"] == mirror.b64(raw)
        # The signed checksum header stands for the body: botocore does not hash it a second time.
        assert headers["x-amz-content-sha256"] == "UNSIGNED-PAYLOAD"
        signed = re.search(r"SignedHeaders=([^,]+)", headers["authorization"]).group(1).split(";")
        assert "x-amz-checksum-sha256" in signed
    assert "sha256 of every body (ChecksumSHA256 signed, checked by the server)" in (report["verified_by"])


@pytest.mark.parametrize("name", ["small", "disk"])
def test_a_server_without_checksums_is_verified_by_md5_etags(s3, bucket, images, name):
    client = s3[1]
    path = images[name]
    with Sent(client, strip_checksum=True):
        report = _upload(client, bucket, open_source(path=str(path)), expected_sha256=_sha256(path)).run()
    assert "md5 of every body (no checksum answered; ETag compared)" in report["verified_by"]
    if name == "disk":
        assert "ETag of the stored object (md5 of its parts)" in report["verified_by"]
    stored = client.get_object(Bucket=bucket, Key=report["key"])["Body"].read()
    assert hashlib.sha256(stored).hexdigest() == _sha256(path)
