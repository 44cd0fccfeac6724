"""Fixtures shared by the baked-image integration tests."""

from __future__ import annotations

import hashlib
import pathlib
import subprocess
import uuid

import pytest

from tests.integration.modules.test_dbinstance_operator_env import nodes
from tests.integration.modules.test_dbinstance_repave import operator_settings
from tests.lab.s3 import s3_client

# Fixtures the AWX template tests share with the repave tests, and the publish playbook's tests with the
# operator env tests (schedulable and unschedulable Nodes).
__all__ = ["nodes", "operator_settings"]

# The slow tier (`make slow`): whole roles and playbooks, run as a user runs them, and the module files
# whose tests each import, bake or boot for tens of seconds. Their tests in a suite (data loss, secrets,
# bad input, idempotence) stay in make test; a fault-suite test stays slow (make slow, or make faults
# for those marked faults). Module tests that stream GiB-sized data or wait by design carry the marker.
SLOW_DIRS = ("roles", "playbooks")
SLOW_FILES = ("test_baked_image.py", "test_worker_image.py", "test_console_screenshot.py")


def in_make_test(item):
    """Whether a test of a slow directory or file stays in make test: it is marked quick, or it is in a
    suite other than the faults one."""
    if item.get_closest_marker("faults") is not None:
        return False
    suites = {name for marker in item.iter_markers("suite") for name in marker.args}
    return item.get_closest_marker("quick") is not None or (bool(suites) and "faults" not in suites)


def pytest_collection_modifyitems(config, items):
    here = pathlib.Path(__file__).parent
    for item in items:
        path = pathlib.Path(str(item.path))
        slow = any(path.is_relative_to(here / name) for name in SLOW_DIRS) or path.name in SLOW_FILES
        if slow and not in_make_test(item):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="module")
def qcow2(tmp_path_factory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("baked") / "ubuntu-2404-postgres-v20261201-2404.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(path), "32M"], check=True)
    return path


@pytest.fixture(scope="module")
def mirror(lab, qcow2):
    """The image in a bucket of the lab's S3, readable by URL as a public mirror is: anyone lists the bucket
    (so a missing key answers 404, as S3 tells a caller who may list) and reads the image."""
    env = lab.env()
    s3 = s3_client(env)
    bucket = "mirror-" + uuid.uuid4().hex[:8]
    s3.create_bucket(Bucket=bucket, ACL="public-read")
    s3.put_object(Bucket=bucket, Key="baked/" + qcow2.name, Body=qcow2.read_bytes(), ACL="public-read")
    return {
        "url": "%s/%s/baked/%s" % (env["AWS_ENDPOINT_URL"], bucket, qcow2.name),
        "sha512": hashlib.sha512(qcow2.read_bytes()).hexdigest(),
        "base": "%s/%s/baked/" % (env["AWS_ENDPOINT_URL"], bucket),
    }
