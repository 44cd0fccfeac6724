"""The harvester_upload summary line, formerly whitespace-squeezed Jinja in the role."""

from __future__ import annotations

from ansible_collections.goldenimage.pipeline.plugins.filter.upload_report import FilterModule


def summary(result):
    return FilterModule().filters()["upload_summary"](result)


def test_a_bucket_upload_line():
    result = {
        "revision": "rev-1",
        "source": "bucket",
        "bucket": "mirror",
        "key": "k/x.qcow2",
        "uploaded": True,
        "bytes_moved": 42,
        "url_mode": "presigned",
        "image": {"namespace": "hp", "name": "rev-1"},
        "registered": False,
        "progress": 100,
        "storage_class": "",
        "replicas_in_force": 3,
        "catalog_changed": "True",
    }
    assert summary(result) == (
        "rev-1: s3://mirror/k/x.qcow2 uploaded (42 bytes), read by presigned URL; "
        "VirtualMachineImage hp/rev-1 unchanged, progress 100%, StorageClass - with 3 replicas; "
        "catalog updated"
    )


def test_a_straight_upload_line():
    result = {
        "revision": "rev-2",
        "source": "upload",
        "image": {"namespace": "hp", "name": "rev-2"},
        "registered": True,
        "progress": 40,
        "storage_class": "longhorn",
        "replicas_in_force": None,
        "catalog_changed": False,
    }
    assert summary(result) == (
        "rev-2: uploaded straight to Harvester; VirtualMachineImage hp/rev-2 registered or updated, "
        "progress 40%, StorageClass longhorn with ? replicas; catalog unchanged"
    )
