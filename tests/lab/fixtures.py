"""pytest fixtures: one lab per test session, or a real cluster when K8S_AUTH_KUBECONFIG is set.

Tests marked `lab_only` need the lab's own knobs (audit log, faults, the store); they are deselected,
not skipped, when the target is a real cluster.
"""

from __future__ import annotations

import logging
import os
import pathlib
import uuid
from dataclasses import dataclass, field

import pytest

from . import RUNNING, Lab
from .s3 import S3Server


@dataclass
class RealCluster:
    """A cluster the user pointed the tests at; it has no lab knobs."""

    kubeconfig: pathlib.Path
    is_lab: bool = False
    s3_env: dict[str, str] = field(default_factory=dict)
    # Harvester's API when it is not the kubeconfig's server (HARVESTER_URL); None: the kubeconfig's.
    harvester_url: str | None = field(default_factory=lambda: os.environ.get("HARVESTER_URL") or None)
    s3 = None  # the loopback S3 server exists only in the lab; use s3_env on a real cluster

    def env(self) -> dict[str, str]:
        env = {"K8S_AUTH_KUBECONFIG": str(self.kubeconfig), "KUBECONFIG": str(self.kubeconfig)}
        env.update(self.s3_env)
        return env


def _real_cluster() -> RealCluster | None:
    kubeconfig = os.environ.get("K8S_AUTH_KUBECONFIG")
    if not kubeconfig:
        return None
    names = (
        "AWS_ENDPOINT_URL",
        "S3_ENDPOINT_URL",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_DEFAULT_REGION",
    )
    return RealCluster(pathlib.Path(kubeconfig), s3_env={k: os.environ[k] for k in names if k in os.environ})


class _Tracebacks(logging.Handler):
    """The tracebacks the lab's controllers and servers log (an unexpected exception in a reconcile or a
    handler): each one is a defect of the lab or of what the test sent, never noise."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.records.append(logging.Formatter().format(record))


TRACEBACKS = _Tracebacks()
logging.getLogger("tests.lab").addHandler(TRACEBACKS)


def pytest_configure(config):
    config.addinivalue_line("markers", "lab_only: needs the embedded lab; deselected on a real cluster")
    config.addinivalue_line(
        "markers", "fault_knobs_only: sets fault knobs without sending requests (the knobs' own tests)"
    )


@pytest.fixture(autouse=True)
def _armed_faults_meet_requests(request):
    """A test that arms a request fault knob (a rate, the latency) while no request of it went through
    the fault proxy fails: its clients used kube-apiserver's own address (``lab.kubeconfig``), where no
    fault applies, and it would pass without testing what it says. Give them ``lab.fault_kubeconfig``
    (``lab.env(faults=True)``, ``lab.write_kubeconfig(..., faults=True)``)."""
    before = {id(lab): lab.fault_use() for lab in list(RUNNING)}
    yield
    if request.node.get_closest_marker("fault_knobs_only"):
        return
    for lab in list(RUNNING):
        armed, forwarded = lab.fault_use()
        armed_before, forwarded_before = before.get(id(lab), (0, 0))
        if armed > armed_before and forwarded == forwarded_before:
            pytest.fail(
                "this test armed a fault knob of the lab in %s, but no request went through the fault "
                "proxy (%s): its clients bypassed the faults; give them lab.fault_kubeconfig "
                "(lab.env(faults=True))" % (lab.state_dir, lab.front_url),
                pytrace=False,
            )


@pytest.fixture(autouse=True)
def _lab_tracebacks():
    """A traceback the lab logs while a test runs fails that test, with the traceback."""
    start = len(TRACEBACKS.records)
    yield
    logged = TRACEBACKS.records[start:]
    if logged:
        pytest.fail(
            "the lab logged %d traceback(s) while this test ran:\n%s" % (len(logged), "\n".join(logged)),
            pytrace=False,
        )


def pytest_collection_modifyitems(config, items):
    if _real_cluster() is None:
        return
    keep = [item for item in items if item.get_closest_marker("lab_only") is None]
    dropped = [item for item in items if item.get_closest_marker("lab_only") is not None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    real = _real_cluster()
    if real is not None:
        yield real
        return
    instance = Lab(tmp_path_factory.mktemp("lab")).start()
    try:
        yield instance
    finally:
        instance.stop()


@pytest.fixture(scope="session")
def lab_s3():
    """The lab's S3 on its own, without the API server: an S3Endpoint (its keys are the only identity).

    It checks signatures and answers anonymous requests as S3 does (tests/lab/s3.py), also when the
    tests target a real cluster."""
    server = S3Server()
    endpoint = server.start()
    try:
        yield endpoint
    finally:
        server.stop()


@pytest.fixture(scope="session")
def kube_client(lab):
    from kubernetes import config

    api = config.new_client_from_config(str(lab.kubeconfig))
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def kube_namespace(kube_client):
    """A fresh namespace for one test, deleted afterwards."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    core = client.CoreV1Api(kube_client)
    name = "t-" + uuid.uuid4().hex[:10]
    core.create_namespace({"metadata": {"name": name}})
    yield name
    try:
        core.delete_namespace(name)
    except ApiException as exc:
        if exc.status != 404:
            raise
