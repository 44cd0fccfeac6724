"""Fixtures shared by the baked-image integration tests."""

from __future__ import annotations

import hashlib
import os
import pathlib
import subprocess
import sys
import uuid

import pytest

from tests.integration.modules.test_dbinstance_operator_env import nodes
from tests.integration.modules.test_dbinstance_repave import operator_settings
from tests.lab.s3 import make_public, s3_client

# Fixtures the AWX template tests share with the repave tests, and the publish playbook's tests with the
# operator env tests (schedulable and unschedulable Nodes).
__all__ = ["nodes", "operator_settings"]

# make test holds 20 minutes on a 2-core machine by running, of the integration tests, the modules'
# cross-cutting suites (data loss, secrets, bad input, idempotence, faults) and the tests marked quick.
# Everything else here is the slow tier (`make slow`): the other module tests, and whole roles and
# playbooks run as a user runs them, their suite tests included (each plays a story of several
# playbooks). The playbook-level fault suite (marked faults) is `make faults`.
ROLE_DIRS = ("roles", "playbooks")


def in_make_test(item):
    """Whether an integration test runs in make test: marked quick, or a module test in a suite (the
    module-level fault suite included; the playbook-level one is marked faults)."""
    if item.get_closest_marker("faults") is not None:
        return False
    if item.get_closest_marker("quick") is not None:
        return True
    here = pathlib.Path(__file__).parent
    if any(pathlib.Path(str(item.path)).is_relative_to(here / name) for name in ROLE_DIRS):
        return False
    return item.get_closest_marker("suite") is not None


def pytest_collection_modifyitems(config, items):
    # The hook sees every item of the session (unit and lab tests too): only this directory's are tiered.
    here = pathlib.Path(__file__).parent
    for item in items:
        if pathlib.Path(str(item.path)).is_relative_to(here) and not in_make_test(item):
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
    return public_mirror(lab, qcow2, "mirror-")


def public_mirror(lab, path, prefix):
    """``path`` in a new public bucket of the lab's S3: its ``url``, ``sha512`` and the ``base`` URL."""
    env = lab.env()
    s3 = s3_client(env)
    bucket = prefix + uuid.uuid4().hex[:8]
    s3.create_bucket(Bucket=bucket)
    make_public(s3, bucket)
    s3.put_object(Bucket=bucket, Key="baked/" + path.name, Body=path.read_bytes())
    return {
        "url": "%s/%s/baked/%s" % (env["AWS_ENDPOINT_URL"], bucket, path.name),
        "sha512": hashlib.sha512(path.read_bytes()).hexdigest(),
        "base": "%s/%s/baked/" % (env["AWS_ENDPOINT_URL"], bucket),
    }


@pytest.fixture
def venv_python_first(monkeypatch):
    """The lab's Jobs run host executables from PATH: make python3 the one with dissect installed, as the
    project's verifier and export images have it."""
    monkeypatch.setenv("PATH", "%s:%s" % (pathlib.Path(sys.executable).parent, os.environ.get("PATH", "")))


JAMMY = 'PRETTY_NAME="Ubuntu 22.04.5 LTS"\nID=ubuntu\nVERSION_ID="22.04"\nVERSION_CODENAME=jammy\n'


@pytest.fixture(scope="module")
def baked_mirror(lab, tmp_path_factory):
    """A sealed Ubuntu 22.04 root with the servers of PostgreSQL 16 and 17 (GPT, ext4 by mkfs.ext4 -d,
    qcow2), in a public bucket like ``mirror``; ``path`` is the local file baked_image reads as
    ``artifact``, so the revision registered from it has its facts recorded."""
    from tests.integration.support import disks

    folder = tmp_path_factory.mktemp("baked-mirror")
    files = {"etc/os-release": JAMMY}
    files.update({"usr/lib/postgresql/%s/bin/postgres" % m: b"\x7fELF" for m in ("16", "17")})
    tree = disks.ext4_tree(folder / "root", files)
    raw = disks.linux_disk(folder / "disk.raw", tree, disk_size=32 * disks.MIB)["path"]
    path = disks.qcow2(raw, folder / "ubuntu-2204-postgres.qcow2")
    return dict(public_mirror(lab, path, "baked-mirror-"), path=str(path))


# cosign for the tests that check the collection's signatures with it (tools/build-cosign.sh).
COSIGN_VERSION = os.environ.get("LAB_COSIGN_VERSION", "v2.6.5")
COSIGN_CACHE = pathlib.Path(
    os.environ.get("LAB_BIN_CACHE")
    or pathlib.Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "goldenimage-lab"
)


@pytest.fixture
def cosign(tmp_path):
    """Runs the cosign built by tools/build-cosign.sh (or LAB_COSIGN_BIN), offline, asserting success."""
    folder = pathlib.Path(os.environ.get("LAB_COSIGN_BIN") or COSIGN_CACHE / ("cosign-" + COSIGN_VERSION))
    binary = folder / "cosign"
    if not os.access(binary, os.X_OK):
        pytest.fail(
            "cosign %s not found at %s: run tools/build-cosign.sh (or set LAB_COSIGN_BIN)"
            % (COSIGN_VERSION, binary)
        )
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, HOME=str(home), COSIGN_PASSWORD="", COSIGN_YES="true")

    def run(*args, cwd=tmp_path):
        proc = subprocess.run(
            [str(binary), *args],
            cwd=str(cwd),
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, "cosign %s failed:\n%s%s" % (" ".join(args), proc.stdout, proc.stderr)
        return proc

    return run
