"""Secrets suite for the bucket side: marker secrets through every bucket module and the os_mirror role.

Each run is ``ansible-playbook -vvv``. The markers are a password inside URLs (refused everywhere it is
an input), a token in a URL's query (accepted as a source, redacted wherever it is stored or printed),
the S3 secret key (a ``no_log`` option) and the signature of a URL that bucket_object_url presigns (a
bearer credential: its result is hidden from every output). After the runs every place they leave
traces is searched for every marker in its raw, URL-quoted, base64 and escaped forms
(``redact.secret_forms``): stdout and stderr, each task result, every object in every bucket (body and
metadata) and every file the runs left in their temporary and spool directories.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
import uuid

import pytest

from tests.integration.support.runner import play, run_playbook
from tests.integration.support.secrets import leaks, run_traces
from tests.lab.s3 import S3Server

TAG = uuid.uuid4().hex[:12]
PASSWORD = "pw-%s-x/y+z" % TAG  # '/' and '+' so the quoted and escaped forms differ from the raw one
TOKEN = "tok-%s" % TAG
ACCESS, SECRET = "secrets-key", "sk-%s" % TAG
IMAGE = b"QFI\xfb" + bytes(range(256)) * 256


class Upstream(http.server.BaseHTTPRequestHandler):
    """Serves IMAGE at any path, whatever the query (a tokenised upstream URL)."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(IMAGE)))
        self.end_headers()
        self.wfile.write(IMAGE)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    s3 = S3Server(access_key=ACCESS, secret_key=SECRET)  # the lab's S3, with the marker keys
    keys = s3.start()
    endpoint = keys.endpoint_url
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    work = tmp_path_factory.mktemp("secrets")
    (work / "tmp").mkdir()
    (work / "remote").mkdir()
    env = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": ACCESS,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_DEFAULT_REGION": "us-east-1",
        "TMPDIR": str(work / "tmp"),
        "ANSIBLE_REMOTE_TEMP": str(work / "remote"),
    }
    try:
        yield {
            "endpoint": endpoint,
            "client": keys.client(),
            "upstream": "http://127.0.0.1:%d" % upstream.server_address[1],
            "work": work,
            "env": env,
        }
    finally:
        upstream.shutdown()
        upstream.server_close()
        s3.stop()


def task(title, module, ignore_errors=False, **params):
    entry = {"name": title, "goldenimage.pipeline." + module: params}
    if ignore_errors:
        entry["ignore_errors"] = True
    return entry


def with_password(url):
    return url.replace("://", "://mirror:%s@" % PASSWORD.replace("/", "%2F").replace("+", "%2B"), 1)


class Secrets:
    """URLs with a password reach the play as extra vars, as they would from a vault or an inventory.

    Written literally into a playbook, a value is quoted back by ansible-core itself: a failed task's
    error shows the lines of the playbook around it. That is the playbook's text, not a module output.
    """

    def __init__(self):
        self.values = {}

    def __call__(self, url):
        name = "url%d" % len(self.values)
        self.values[name] = with_password(url)
        return "{{ secret_urls.%s }}" % name


def traces(world, runs, exclude=()):
    """Every text a run left: outputs, results, bucket objects and metadata, files left behind."""
    found = run_traces(*runs)
    client = world["client"]
    for bucket in client.list_buckets()["Buckets"]:
        for obj in client.list_objects_v2(Bucket=bucket["Name"]).get("Contents") or []:
            where = "s3://%s/%s" % (bucket["Name"], obj["Key"])
            stored = client.get_object(Bucket=bucket["Name"], Key=obj["Key"])
            found.append((where, stored["Body"].read().decode("utf-8", "replace")))
            found.append((where + " metadata", json.dumps(stored["Metadata"])))
    for path in world["work"].rglob("*"):
        if path.is_file() and path not in exclude:
            found.append((str(path), path.read_bytes().decode("utf-8", "replace")))
    return found


@pytest.mark.suite("secrets")
def test_no_secret_reaches_any_output_object_or_file(world):
    endpoint, upstream, client = world["endpoint"], world["upstream"], world["client"]
    bucket = "secrets-%s" % TAG
    client.create_bucket(Bucket=bucket)
    digest = hashlib.sha256(IMAGE).hexdigest()
    image = world["work"] / "golden.qcow2"
    image.write_bytes(IMAGE)
    tokenised = "%s/images/noble.qcow2?token=%s&X-Amz-Signature=%s" % (upstream, TOKEN, TOKEN)
    signed_file = world["work"] / "signed.json"
    with_password = Secrets()
    refused = [
        task(
            "mirror from a URL with a password",
            "os_mirror_object",
            True,
            bucket=bucket,
            family="debian-12",
            version="1",
            url=with_password(upstream + "/images/d.qcow2"),
        ),
        task(
            "mirror through an endpoint with a password",
            "os_mirror_object",
            True,
            bucket=bucket,
            family="debian-12",
            version="1",
            path=str(image),
            endpoint_url=with_password(endpoint),
        ),
        task(
            "catalog through an endpoint with a password",
            "os_mirror_catalog",
            True,
            bucket=bucket,
            endpoint_url=with_password(endpoint),
        ),
        task(
            "export with a password in its source",
            "golden_export_object",
            True,
            bucket=bucket,
            key="windows/11/x.qcow2",
            path=str(image),
            source=with_password("https://build.example/win11"),
        ),
        task(
            "probe a URL with a password",
            "bucket_exposure",
            True,
            url=with_password("%s/%s/windows/11/x.qcow2" % (endpoint, bucket)),
        ),
        task(
            "sign a URL with a password",
            "bucket_object_url",
            True,
            url=with_password("%s/%s/windows/11/x.qcow2" % (endpoint, bucket)),
        ),
        task(
            "wrong digest from a tokenised URL",
            "os_mirror_object",
            True,
            bucket=bucket,
            family="debian-12",
            version="2",
            url=tokenised,
            sha256="0" * 64,
        ),
    ]
    accepted = [
        task(
            "mirror from a tokenised URL",
            "os_mirror_object",
            bucket=bucket,
            family="debian-12",
            version="1",
            url=tokenised,
            sha256=digest,
            secret_key=SECRET,
        ),
        task(
            "mirror it again",
            "os_mirror_object",
            bucket=bucket,
            family="debian-12",
            version="1",
            url=tokenised,
        ),
        task("catalog", "os_mirror_catalog", bucket=bucket),
        task(
            "export",
            "golden_export_object",
            bucket=bucket,
            key="windows/11/golden.qcow2",
            path=str(image),
            source="https://build.example/win11?token=%s" % TOKEN,
        ),
        task("probe", "bucket_exposure", bucket=bucket, key="windows/11/golden.qcow2"),
        dict(
            task(
                "sign",
                "bucket_object_url",
                url="%s/%s/windows/11/golden.qcow2" % (endpoint, bucket),
                check_object=True,
            ),
            register="signed",
        ),
        {"name": "show what was signed", "ansible.builtin.debug": {"msg": "{{ signed.url_redacted }}"}},
        # The test's own copy of the URL, to learn the signature to search for; excluded from the search.
        {
            "name": "keep the URL for the test",
            "no_log": True,
            "ansible.builtin.copy": {"content": "{{ signed | to_json }}", "dest": str(signed_file)},
        },
    ]
    role = {
        "name": "os_mirror role with a password in an image URL",
        "ansible.builtin.include_role": {"name": "goldenimage.pipeline.os_mirror"},
        "vars": {
            "os_mirror_bucket": bucket,
            "os_mirror_images": [
                {"family": "debian-12", "version": "3", "url": tokenised, "sha256": digest},
                {"family": "ubuntu-24.04", "version": "1", "url": with_password(upstream + "/u.qcow2")},
            ],
        },
    }
    args = ["-vvv", "--diff"]
    extra = {"secret_urls": with_password.values}
    first = run_playbook(
        play(*refused, *accepted), env=world["env"], args=args, timeout=300, extra_vars=extra
    )
    assert first.ok, first.log
    second = run_playbook(play(role), env=world["env"], args=args, timeout=300, extra_vars=extra)
    assert not second.ok, second.log
    # The role with the tokenised URL alone mirrors it; its loop label shows the URL without the query.
    role["vars"] = dict(role["vars"], os_mirror_images=role["vars"]["os_mirror_images"][:1])
    third = run_playbook(play(role), env=world["env"], args=args, timeout=300)
    assert third.ok, third.log
    assert "debian-12/3 %s/images/noble.qcow2" % upstream in third.stdout

    # Every URL with a password was refused, naming the supported move, before anything was written.
    for title, move in (
        ("mirror from a URL with a password", "presigned URL"),
        ("mirror through an endpoint with a password", "access_key/secret_key"),
        ("catalog through an endpoint with a password", "access_key/secret_key"),
        ("export with a password in its source", "pvc://"),
        ("probe a URL with a password", "access_key/secret_key"),
        ("sign a URL with a password", "access_key/secret_key"),
    ):
        entry = first.entry(title)
        assert entry["status"] == "ignored" and "carries credentials" in entry["result"]["msg"], entry
        assert move in entry["result"]["msg"], entry
    role_failure = second.entry("Refuse image URLs that carry credentials")["result"]["msg"]
    assert "ubuntu-24.04/1" in role_failure and "debian-12/3" not in role_failure
    assert not [name for name in second.task_names() if name.startswith("Mirror each image")]
    # The tokenised URL was mirrored, with its token redacted where it is recorded.
    stored = client.head_object(Bucket=bucket, Key=first["mirror from a tokenised URL"]["key"])["Metadata"]
    assert stored["source-url"].startswith(upstream + "/images/noble.qcow2?token=REDACTED")
    assert first["mirror it again"]["action"] == "skip"
    assert "censored" in first["sign"] and "url" not in first["sign"]
    assert "X-Amz-Signature=REDACTED" in first["show what was signed"]["msg"]

    signed_url = json.loads(signed_file.read_text())["url"]
    signature = signed_url.rsplit("X-Amz-Signature=", 1)[1]
    secrets = [PASSWORD, TOKEN, SECRET, signature]
    found = traces(world, [first, second, third], exclude=(signed_file,))
    assert len(found) > 20, [pair[0] for pair in found]
    assert leaks(found, secrets) == []
    # The search itself finds a leak: the test's own copy of the URL holds the signature.
    assert leaks([("signed.json", signed_file.read_text())], [signature])
