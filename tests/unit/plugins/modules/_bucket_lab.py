"""The lab's loopback S3 server (tests/lab/s3.py) and real AnsibleModule objects for the bucket modules'
runner tests.

No boto3 double: every runner talks S3 to a real protocol server on 127.0.0.1.
"""

from __future__ import annotations

import atexit
import uuid

import pytest
from ansible.module_utils.testing import patch_module_args

from tests.lab.s3 import S3Server

_SHARED = {}


@pytest.fixture(name="s3")
def s3_fixture():
    """``(endpoint, client)`` of the loopback S3 server, started once per test process.

    Every test makes its own bucket (``new_bucket``), so the modules' tests share one server. Test
    files import this fixture.
    """
    if "server" not in _SHARED:
        server = S3Server()
        endpoint = server.start()
        _SHARED.update(server=server, lab=(endpoint, endpoint.client()))
        atexit.register(server.stop)
    return _SHARED["lab"]


def new_bucket(client, prefix="unit"):
    name = "%s-%s" % (prefix, uuid.uuid4().hex[:10])
    client.create_bucket(Bucket=name)
    return name


def connection(endpoint):
    return {
        "endpoint_url": endpoint.endpoint_url,
        "access_key": endpoint.access_key,
        "secret_key": endpoint.secret_key,
        "region": endpoint.region,
    }


def build(module_file, check=False, diff=False, **args):
    """A real AnsibleModule built by ``module_file.build_module()`` from ``args`` (argument spec applied)."""
    if check:
        args["_ansible_check_mode"] = True
    if diff:
        args["_ansible_diff"] = True
    with patch_module_args(args):
        return module_file.build_module()


def keys(client, bucket):
    return sorted(obj["Key"] for obj in client.list_objects_v2(Bucket=bucket).get("Contents") or [])


def run_against(module_file, s3, check=False, **params):
    """``module_file.run(module)`` for a module built from ``params`` and the lab's S3 connection."""
    return module_file.run(build(module_file, check=check, **dict(connection(s3[0]), **params)))
