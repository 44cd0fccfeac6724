"""What the bytes hold decides where they may go, not what the run declares: a disk that carries a product
key and an administrator password in C:\\Windows\\Panther\\unattend.xml (NTFS by mkntfs, hive by hivexsh),
or the ssl-cert snakeoil key (ext4 by ``mkfs.ext4 -d``), is exported with the default ``license: none``
to a bucket whose policy grants anonymous s3:GetObject. Both export paths read the facts from the disk,
find the key and the credential, and refuse before the first byte, while an anonymous poller counts 0
reads; a clean disk goes to the same bucket. The facts travel with the result, so the golden made from
the export records them."""

from __future__ import annotations

import io
import uuid

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.windows import _export_cli as cli

from tests.integration.modules.test_exposure_before_upload import (
    Poller,
    _policy,
    export_object,
)
from tests.integration.support import disks
from tests.lab.s3 import make_public

PRODUCT_KEY = "VK7JG-NPHTM-C97JM-9MPGT-3V66T"
ADMIN_PASSWORD = "Adm1n-Pa55-77e1"
PANTHER = f"""<?xml version="1.0" encoding="utf-8"?>
<unattend xmlns="urn:schemas-microsoft-com:unattend">
  <settings pass="specialize">
    <component name="Microsoft-Windows-Shell-Setup"><ProductKey>{PRODUCT_KEY}</ProductKey></component>
  </settings>
  <settings pass="oobeSystem">
    <component name="Microsoft-Windows-Shell-Setup"><UserAccounts><AdministratorPassword>
      <Value>{ADMIN_PASSWORD}</Value><PlainText>true</PlainText></AdministratorPassword></UserAccounts>
    </component>
  </settings>
</unattend>
"""
SNAKEOIL = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n"
PREFIX = "exports/2026-12-06/"
KEY = PREFIX + "golden.qcow2"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    folder = tmp_path_factory.mktemp("export-facts")
    windows = disks.windows_disk(
        folder / "panther.raw", disks.sealed_windows_files({"Windows/Panther/unattend.xml": PANTHER})
    )["path"]
    snakeoil = disks.linux_disk(
        folder / "snakeoil.raw",
        disks.ext4_tree(folder / "snakeoil.tree", {"etc/ssl/private/ssl-cert-snakeoil.key": SNAKEOIL}),
    )["path"]
    clean = disks.linux_disk(folder / "clean.raw", disks.ext4_tree(folder / "clean.tree"))["path"]
    return {"windows": windows, "snakeoil": snakeoil, "clean": clean}


@pytest.fixture
def getonly(lab_s3):
    """A bucket anyone may GetObject from (but not list): the one a 403 on an empty prefix fooled."""
    client = lab_s3.client()
    bucket = "getonly-" + uuid.uuid4().hex[:8]
    client.create_bucket(Bucket=bucket)
    client.put_bucket_policy(
        Bucket=bucket, Policy=_policy(bucket, "s3:GetObject", "arn:aws:s3:::%s/*" % bucket)
    )
    return client, bucket


def _keys(client, bucket):
    return [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]


EXPECTED = {
    "windows": ["unattend.xml holds a product key", "unattend.xml holds passwords"],
    "snakeoil": ["/etc/ssl/private/ssl-cert-snakeoil.key is left in the image"],
}


def _job_program(lab_s3, bucket, source, scratch):
    scratch.mkdir(exist_ok=True)
    out = io.StringIO()
    argv = ["--source", str(source), "--scratch", str(scratch), "--filename", "golden.qcow2",
            "--endpoint", lab_s3.endpoint_url, "--bucket", bucket, "--key", KEY, "--source-url",
            "pvc://golden-images-build/sealed", "--exported-at", "2026-12-06T00:00:00Z"]  # fmt: skip
    env = {"EXPORT_ACCESS_KEY_ID": lab_s3.access_key, "EXPORT_SECRET_ACCESS_KEY": lab_s3.secret_key}
    with Poller(lab_s3.endpoint_url, bucket, KEY, PREFIX) as poller:
        code = cli.main(argv, environ=env, out=out)
    return code, cli.parse_log(out.getvalue()), poller, out.getvalue()


@pytest.mark.parametrize("case", ["windows", "snakeoil"])
def test_the_export_job_reads_keys_and_credentials_from_the_disk_whatever_the_licence(
    lab_s3, made, getonly, tmp_path, case
):
    client, bucket = getonly
    code, result, poller, log = _job_program(lab_s3, bucket, made[case], tmp_path)
    assert poller.rounds > 0 and poller.reads == 0, poller.reads
    assert code == 1 and result["code"] == "exposed", result
    for words in EXPECTED[case]:
        assert words in result["error"], result["error"]
        assert any(words in reason for reason in result["sensitive_reasons"]), result["sensitive_reasons"]
    assert "bucket %s is public" % bucket in result["error"]
    assert result["image_facts"]["os_family"] == ("windows" if case == "windows" else "linux")
    assert result["exposure"]["verdict"] == "public"
    assert not (tmp_path / "golden.qcow2").exists(), "refused before the conversion"
    assert _keys(client, bucket) == []
    for secret in (PRODUCT_KEY, ADMIN_PASSWORD, "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"):
        assert secret not in log, "no secret value reaches the log"
    assert log.index("phase facts") < log.index("phase prove")


def test_a_clean_disk_goes_where_its_licence_allows(lab_s3, made, getonly, tmp_path):
    client, bucket = getonly
    code, result, _poller, _log = _job_program(lab_s3, bucket, made["clean"], tmp_path)
    assert code == 0, result
    assert result["sensitive_reasons"] == [] and result["image_facts"]["private_keys"] == []
    assert result["exposure"]["verdict"] == "public" and result["exposure"]["allowed"] is True
    assert _keys(client, bucket) == [KEY]


def test_a_disk_whose_os_cannot_be_told_is_unproven(lab_s3, getonly, tmp_path):
    client, bucket = getonly
    raw = tmp_path / "noise.raw"
    raw.write_bytes(b"\0" * (4 * 1024 * 1024))
    code, result, poller, _log = _job_program(lab_s3, bucket, raw, tmp_path)
    assert poller.reads == 0
    assert code == 1 and result["code"] == "exposed", result
    assert (
        "unproven" in result["sensitive_reasons"][0] and "could not be read" in result["sensitive_reasons"][0]
    )
    assert _keys(client, bucket) == []


def test_golden_export_object_reads_the_file_it_uploads(lab_s3, made, getonly, tmp_path):
    client, bucket = getonly
    image = disks.qcow2(made["windows"], tmp_path / "golden.qcow2", compressed=True)
    with Poller(lab_s3.endpoint_url, bucket, KEY, PREFIX) as poller:
        run = export_object(lab_s3, bucket, KEY, image)
    result = run["export"]
    assert poller.rounds > 0 and poller.reads == 0, poller.reads
    assert [entry["status"] for entry in run.tasks] == ["ignored"], result
    for words in EXPECTED["windows"]:
        assert words in result["msg"], result["msg"]
    assert result["image_facts"]["os_family"] == "windows"
    assert _keys(client, bucket) == []


@pytest.fixture
def private(lab_s3):
    client = lab_s3.client()
    bucket = "private-" + uuid.uuid4().hex[:8]
    client.create_bucket(Bucket=bucket)
    return client, bucket


def test_a_rerun_proves_the_sensitive_object_it_finds_still_private(lab_s3, made, private, tmp_path):
    """The key already holds the same bytes: nothing is written, but sensitive bytes (the mark the export
    recorded) that someone made public since are refused, and the object is left for its owner."""
    client, bucket = private
    code, first, _poller, _log = _job_program(lab_s3, bucket, made["snakeoil"], tmp_path / "a")
    assert code == 0, first
    assert client.head_object(Bucket=bucket, Key=KEY)["Metadata"]["sensitive"] == "yes"
    make_public(client, bucket, [KEY])
    code, again, _poller, _log = _job_program(lab_s3, bucket, made["snakeoil"], tmp_path / "b")
    assert code == 1 and again["code"] == "exposed", again
    assert "already holds these bytes, but anonymous reads of it are not refused" in again["error"]
    assert "nothing was written or deleted" in again["error"]
    assert _keys(client, bucket) == [KEY]


def test_golden_export_object_proves_a_held_object_by_its_mark(lab_s3, made, private, tmp_path):
    client, bucket = private
    clean = disks.qcow2(made["clean"], tmp_path / "clean.qcow2")
    keyed = disks.qcow2(made["snakeoil"], tmp_path / "keyed.qcow2")
    other = PREFIX + "keyed.qcow2"
    for key, path in ((KEY, clean), (other, keyed)):
        run = export_object(lab_s3, bucket, key, path)
        assert run.ok, run.log
    marks = {key: client.head_object(Bucket=bucket, Key=key)["Metadata"]["sensitive"] for key in (KEY, other)}
    assert marks == {KEY: "no", other: "yes"}
    make_public(client, bucket, [KEY, other])
    clean_again = export_object(lab_s3, bucket, KEY, clean)
    keyed_again = export_object(lab_s3, bucket, other, keyed)
    assert clean_again["export"]["action"] == "skip" and [t["status"] for t in clean_again.tasks] == ["ok"]
    assert [t["status"] for t in keyed_again.tasks] == ["ignored"], keyed_again["export"]
    assert "anonymous reads of it are not refused" in keyed_again["export"]["msg"]
    assert sorted(_keys(client, bucket)) == sorted([KEY, other])
