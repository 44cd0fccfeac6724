"""Reads without the kubernetes client: a TLS lab, a kubeconfig with its CA and a bearer token.

The adapter's reads (discovery, get, list) go over urllib3 with the credentials kubernetes.core would
use; these tests prove the client is never built for them, that the answers are the client's, and that
an RBAC refusal reads exactly as it does through the client.
"""

from __future__ import annotations

import contextlib
import sys
import time
import uuid
from types import SimpleNamespace

import pytest
from ansible.module_utils.testing import patch_module_args

from tests.integration.support.runner import COLLECTIONS, module_task, play, run_playbook
from tests.lab import Lab

pytestmark = pytest.mark.lab_only

# Only the client's discovery asks for these; the raw path reads the group version it needs.
CLIENT_DISCOVERY = ("/apis", "/version", "/api")


@pytest.fixture(scope="module")
def tls_lab(tmp_path_factory):
    if str(COLLECTIONS) not in sys.path:
        sys.path.insert(0, str(COLLECTIONS))
    with Lab(tmp_path_factory.mktemp("tls-lab"), with_s3=False, controllers=[]) as lab:
        yield lab


@contextlib.contextmanager
def module(kubeconfig, raw=True):
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube._kube import KubeModule

    with patch_module_args({"kubeconfig": str(kubeconfig)}):
        m = KubeModule(argument_spec={})
    if not raw:
        m._raw = False  # the client path, for comparison
    yield m


def config_map(namespace, name, data):
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    }


def test_the_lab_kubeconfig_carries_a_ca_and_a_token(tls_lab):
    import yaml

    config = yaml.safe_load(tls_lab.kubeconfig.read_text())
    assert tls_lab.url.startswith("https://")
    assert config["clusters"][0]["cluster"]["certificate-authority-data"]
    assert config["users"][0]["user"]["token"]


def test_reads_go_raw_and_match_the_client(tls_lab):
    namespace = "raw-" + uuid.uuid4().hex[:8]
    with module(tls_lab.kubeconfig, raw=False) as client_side:
        client_side.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        for i in range(5):
            client_side.create(config_map(namespace, "cm-%d" % i, {"i": str(i)}))
        # kube-controller-manager publishes the cluster CA into every new namespace in its own time: both
        # sides must list after it did, or they compare different moments of the namespace.
        deadline = time.monotonic() + 60
        while client_side.get("v1", "ConfigMap", "kube-root-ca.crt", namespace) is None:
            assert time.monotonic() < deadline, "kube-root-ca.crt never appeared in %s" % namespace
            time.sleep(0.2)
        want_list = client_side.list("v1", "ConfigMap", namespace, page=2)
        want_get = client_side.get("v1", "ConfigMap", "cm-3", namespace)
        want_namespaces = client_side.list("v1", "Namespace")
    tls_lab.clear_audit()
    with module(tls_lab.kubeconfig) as m:
        assert m.raw_connection() is not None
        assert m.list("v1", "ConfigMap", namespace, page=2) == want_list
        assert m.get("v1", "ConfigMap", "cm-3", namespace) == want_get
        assert m.get("v1", "ConfigMap", "absent", namespace) is None
        assert m.list("v1", "ConfigMap", "no-such-namespace") == []
        assert [n["metadata"]["name"] for n in m.list("v1", "Namespace")] == [
            n["metadata"]["name"] for n in want_namespaces
        ]
        assert m.served("snapshot.storage.k8s.io/v1", "VolumeSnapshot") is True
        assert m.served("example.com/v1", "Nothing") is False
        assert m._kube_client is None  # no kubernetes client was built for any of it
    paths = [r["path"].split("?")[0] for r in tls_lab.audit()]
    assert not [p for p in paths if p in CLIENT_DISCOVERY], paths
    assert paths.count("/api/v1") == 1  # each group version discovered once


def test_lists_leave_out_managed_fields_unless_asked_and_kube_object_info_asks(tls_lab, monkeypatch):
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.kube import _listpage

    namespace = "managed-" + uuid.uuid4().hex[:8]
    with module(tls_lab.kubeconfig) as m:
        m.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        m.create(config_map(namespace, "cm", {"a": "1"}))
        got = m.get("v1", "ConfigMap", "cm", namespace)
        got_namespace = m.get("v1", "Namespace", namespace)
        json_pages = []
        # Only _listpage's json is replaced: the lab's own threads parse JSON through the module itself.
        parse = _listpage.json.loads
        monkeypatch.setattr(
            _listpage, "json", SimpleNamespace(loads=lambda raw: json_pages.append(1) or parse(raw))
        )
        # Namespaces fit the msgspec schema (managedFields never built); ConfigMaps carry "data" and
        # are parsed by json.
        [listed_namespace] = [n for n in m.list("v1", "Namespace") if n["metadata"]["name"] == namespace]
        assert json_pages == []
        [listed] = [c for c in m.list("v1", "ConfigMap", namespace) if c["metadata"]["name"] == "cm"]
        assert json_pages == [1]
        monkeypatch.undo()
        [kept] = [
            c
            for c in m.list("v1", "ConfigMap", namespace, managed_fields=True)
            if c["metadata"]["name"] == "cm"
        ]
    assert got["metadata"]["managedFields"]  # the server keeps them: this is what a list drops
    assert "managedFields" not in listed["metadata"]
    assert listed["metadata"] == {k: v for k, v in got["metadata"].items() if k != "managedFields"}
    assert got_namespace["metadata"]["managedFields"]
    assert listed_namespace == dict(
        got_namespace,
        metadata={k: v for k, v in got_namespace["metadata"].items() if k != "managedFields"},
    )
    assert kept == got
    run = run_playbook(
        play(
            module_task(
                "goldenimage.pipeline.kube_object_info",
                "read",
                kubeconfig=str(tls_lab.kubeconfig),
                api_version="v1",
                kind="ConfigMap",
                namespace=namespace,
            )
        ),
        env={"KUBECONFIG": str(tls_lab.kubeconfig)},
    )
    assert run.ok, run.log
    [returned] = [r for r in run["read"]["resources"] if r["metadata"]["name"] == "cm"]
    assert returned["metadata"]["managedFields"] == got["metadata"]["managedFields"]


def test_an_rbac_refusal_reads_as_through_the_client(tls_lab, tmp_path):
    token = tls_lab.add_token(
        "reader-" + uuid.uuid4().hex[:6],
        [{"verbs": ["get", "list"], "groups": [""], "resources": ["configmaps"], "namespaces": ["default"]}],
    )
    limited = tls_lab.write_kubeconfig(tmp_path / "limited", token=token, user="limited")
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError

    failures = []
    for raw in (True, False):
        with module(limited, raw=raw) as m:
            assert m.list("v1", "ConfigMap", "default") is not None
            with pytest.raises(PipelineError) as caught:
                m.list("v1", "Secret", "default")
            result = caught.value.result
            failures.append((result["msg"], result["reason"], result["status"], result["body"]))
            assert (m._kube_client is None) is raw
    assert failures[0] == failures[1]
    msg, reason, status, _body = failures[0]
    assert (reason, status) == ("Forbidden", 403)
    assert msg.startswith("list Secret in default: ") and msg.endswith(" (Forbidden, 403)")
    assert "secrets" in msg


def test_golden_info_reads_the_tls_lab_without_the_client(tls_lab):
    tls_lab.clear_audit()
    run = run_playbook(
        play(
            module_task(
                "goldenimage.pipeline.golden_info",
                "report",
                kubeconfig=str(tls_lab.kubeconfig),
                project_selector="kube-dc.com/project=raw-" + uuid.uuid4().hex[:6],
            )
        ),
        env={"KUBECONFIG": str(tls_lab.kubeconfig)},
    )
    assert run.ok, run.log
    assert run["report"]["summary"]["project_entries"] == 0
    paths = [r["path"].split("?")[0] for r in tls_lab.audit()]
    assert not [p for p in paths if p in CLIENT_DISCOVERY], paths
    assert [r for r in tls_lab.audit() if r["verb"] == "list"]


def test_lists_of_several_kinds_are_in_flight_together_and_answer_in_order(tls_lab, tmp_path):
    import threading

    namespace = "each-" + uuid.uuid4().hex[:8]
    with module(tls_lab.kubeconfig) as m:
        m.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        for i in range(3):
            m.create(config_map(namespace, "cm-%d" % i, {"i": str(i)}))
        queries = [
            {"api": "v1", "kind": kind, "namespace": ns, "selector": None}
            for kind, ns in (("ConfigMap", namespace), ("Namespace", None), ("Secret", namespace))
        ]
        want = [m.list(q["api"], q["kind"], q["namespace"]) for q in queries]
        # Every list waits at the barrier until the others are in flight: one after the other, the first
        # would wait alone and break it.
        together = threading.Barrier(len(queries), timeout=30)
        read = m._get_page

        def meeting(path, query, keep):
            together.wait()
            return read(path, query, keep)

        m._get_page = meeting
        assert m.list_each(queries) == want
        del m._get_page
    # The first list that fails raises its own error (the others have ended by then).
    token = tls_lab.add_token(
        "each-" + uuid.uuid4().hex[:6],
        [{"verbs": ["list"], "groups": [""], "resources": ["configmaps", "namespaces"]}],
    )
    limited = tls_lab.write_kubeconfig(tmp_path / "limited", token=token, user="limited")
    from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import PipelineError

    with module(limited) as m, pytest.raises(PipelineError) as caught:
        m.list_each(queries)
    assert caught.value.result["msg"].startswith("list Secret in %s: " % namespace)
    assert caught.value.result["status"] == 403
