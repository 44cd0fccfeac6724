"""CoreV1Api against the target: CRUD, conflicts, selectors, paging, finalizers, GC, logs."""

from __future__ import annotations

import base64

import pytest
from kubernetes.client.rest import ApiException

from .conftest import unique, wait_for


def _cm(name, labels=None, data=None, **meta):
    return {"metadata": dict(name=name, labels=labels or {}, **meta), "data": data or {"k": "v"}}


def _status(exc: ApiException) -> tuple[int, str]:
    import json

    body = json.loads(exc.body)
    assert body["kind"] == "Status"
    return body["code"], body["reason"]


def test_default_namespaces_exist(core):
    names = {ns.metadata.name for ns in core.list_namespace().items}
    assert {"default", "kube-system"} <= names


def test_configmap_crud(core, kube_namespace):
    created = core.create_namespaced_config_map(kube_namespace, _cm("one", {"app": "x"}))
    meta = created.metadata
    assert meta.uid and meta.resource_version and meta.creation_timestamp
    assert meta.managed_fields is None

    read = core.read_namespaced_config_map("one", kube_namespace)
    assert read.data == {"k": "v"} and read.metadata.resource_version == meta.resource_version

    read.data["k"] = "w"
    updated = core.replace_namespaced_config_map("one", kube_namespace, read)
    assert int(updated.metadata.resource_version) > int(meta.resource_version)

    patched = core.patch_namespaced_config_map("one", kube_namespace, {"data": {"extra": "1"}})
    assert patched.data == {"k": "w", "extra": "1"}

    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map(kube_namespace, _cm("one"))
    assert _status(err.value) == (409, "AlreadyExists")

    core.delete_namespaced_config_map("one", kube_namespace)
    with pytest.raises(ApiException) as err:
        core.read_namespaced_config_map("one", kube_namespace)
    assert _status(err.value) == (404, "NotFound")


def test_generate_name(core, kube_namespace):
    created = core.create_namespaced_config_map(kube_namespace, {"metadata": {"generateName": "gen-"}})
    assert created.metadata.name.startswith("gen-") and len(created.metadata.name) == len("gen-") + 5


def test_secret_string_data_becomes_data(core, kube_namespace):
    core.create_namespaced_secret(
        kube_namespace, {"metadata": {"name": "s"}, "stringData": {"password": "hunter2"}}
    )
    secret = core.read_namespaced_secret("s", kube_namespace)
    assert base64.b64decode(secret.data["password"]) == b"hunter2"
    assert secret.type == "Opaque"


def test_stale_update_conflicts(core, kube_namespace):
    first = core.create_namespaced_config_map(kube_namespace, _cm("c"))
    core.patch_namespaced_config_map("c", kube_namespace, {"data": {"k": "new"}})
    first.data = {"k": "stale"}
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_config_map("c", kube_namespace, first)
    assert _status(err.value) == (409, "Conflict")
    assert "the object has been modified; please apply your changes to the latest version" in err.value.body


def test_create_in_missing_namespace_is_not_found(core):
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map(unique("absent"), _cm("x"))
    assert _status(err.value) == (404, "NotFound")
    assert "namespaces" in err.value.body


def test_label_and_field_selectors(core, kube_namespace):
    specs = {
        "a": {"tier": "web", "env": "prod"},
        "b": {"tier": "db", "env": "prod"},
        "c": {"tier": "web", "env": "dev", "canary": "yes"},
        "d": {},
    }
    for name, labels in specs.items():
        core.create_namespaced_config_map(kube_namespace, _cm(name, labels))

    def names(**kw):
        return sorted(i.metadata.name for i in core.list_namespaced_config_map(kube_namespace, **kw).items)

    assert names(label_selector="tier=web") == ["a", "c"]
    assert names(label_selector="tier==web,env=prod") == ["a"]
    assert names(label_selector="tier!=web") == ["b", "d"]
    assert names(label_selector="env in (dev, prod)") == ["a", "b", "c"]
    assert names(label_selector="env notin (prod)") == ["c", "d"]
    assert names(label_selector="canary") == ["c"]
    assert names(label_selector="!canary,tier") == ["a", "b"]
    assert names(field_selector="metadata.name=b") == ["b"]
    assert names(field_selector="metadata.name!=b") == ["a", "c", "d"]
    assert names(field_selector=f"metadata.namespace={kube_namespace}", label_selector="env=dev") == ["c"]
    with pytest.raises(ApiException) as err:
        names(label_selector="tier in (web")
    assert err.value.status == 400


def test_limit_and_continue(core, kube_namespace):
    for i in range(7):
        core.create_namespaced_config_map(kube_namespace, _cm(f"page-{i}"))
    seen, token, pages = [], None, 0
    while True:
        page = core.list_namespaced_config_map(kube_namespace, limit=3, _continue=token)
        pages += 1
        assert len(page.items) <= 3
        seen += [i.metadata.name for i in page.items]
        token = page.metadata._continue
        if not token:
            break
    assert pages == 3
    assert seen == sorted(f"page-{i}" for i in range(7))
    full = core.list_namespaced_config_map(kube_namespace)
    assert full.kind == "ConfigMapList" and full.metadata.resource_version


def test_paged_selected_lists_match_the_whole_list(core, kube_namespace):
    """Pages of a label-selected list, in one namespace and across all, join to the unpaged list; a
    namespace whose name extends this one's stays out of this one's pages."""
    sibling = kube_namespace + "-b"
    core.create_namespace({"metadata": {"name": sibling}})
    try:
        mark = unique("paged")
        for ns in (kube_namespace, sibling):
            for i in range(5):
                labels = {"paged": mark, "half": "yes" if i % 2 else "no"}
                core.create_namespaced_config_map(ns, _cm(f"page-{i}", labels))

        def paged(selector, namespace=None):
            seen, token = [], None
            while True:
                if namespace:
                    page = core.list_namespaced_config_map(
                        namespace, label_selector=selector, limit=2, _continue=token
                    )
                else:
                    page = core.list_config_map_for_all_namespaces(
                        label_selector=selector, limit=2, _continue=token
                    )
                assert len(page.items) <= 2
                seen += [(i.metadata.namespace, i.metadata.name) for i in page.items]
                token = page.metadata._continue
                if not token:
                    return seen

        for selector in ("paged=%s" % mark, "paged=%s,half=yes" % mark, "paged,half=no"):
            whole = core.list_config_map_for_all_namespaces(label_selector=selector).items
            mine = [(i.metadata.namespace, i.metadata.name) for i in whole]
            assert sorted(paged(selector)) == sorted(mine)
            here = [k for k in mine if k[0] == kube_namespace]
            assert sorted(paged(selector, kube_namespace)) == sorted(here)
        assert len(paged("paged=%s" % mark, kube_namespace)) == 5
        assert len(paged("paged=%s,half=yes" % mark)) == 4
    finally:
        core.delete_namespace(sibling)


def test_dry_run_create_stores_nothing(core, kube_namespace):
    made = core.create_namespaced_config_map(kube_namespace, _cm("dry"), dry_run="All")
    assert made.metadata.name == "dry"
    with pytest.raises(ApiException) as err:
        core.read_namespaced_config_map("dry", kube_namespace)
    assert err.value.status == 404


@pytest.mark.lab_only
def test_dry_run_is_audited(lab, core, kube_namespace):
    lab.clear_audit()
    core.create_namespaced_config_map(kube_namespace, _cm("dry2"), dry_run="All")
    records = [r for r in lab.audit() if r["verb"] == "create" and r["name"] == ""]
    assert records and all(r["dry_run"] for r in records)
    assert lab.mutating_requests() == []


def test_finalizers_delay_deletion(core, kube_namespace):
    core.create_namespaced_config_map(kube_namespace, _cm("fin", finalizers=["lab.example/hold"]))
    core.delete_namespaced_config_map("fin", kube_namespace)
    held = core.read_namespaced_config_map("fin", kube_namespace)
    assert held.metadata.deletion_timestamp is not None
    core.patch_namespaced_config_map("fin", kube_namespace, {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as err:
        core.read_namespaced_config_map("fin", kube_namespace)
    assert err.value.status == 404


def _owned(core, namespace, owner_name, name):
    owner = core.read_namespaced_config_map(owner_name, namespace)
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": owner_name, "uid": owner.metadata.uid}
    return core.create_namespaced_config_map(namespace, _cm(name, ownerReferences=[ref]))


def _gone(core, namespace, name):
    def check():
        try:
            core.read_namespaced_config_map(name, namespace)
        except ApiException as exc:
            return exc.status == 404
        return False

    return check


@pytest.mark.parametrize("policy", ["Background", "Foreground"])
def test_garbage_collection_deletes_dependents(core, kube_namespace, policy):
    core.create_namespaced_config_map(kube_namespace, _cm("owner"))
    _owned(core, kube_namespace, "owner", "child")
    core.delete_namespaced_config_map("owner", kube_namespace, propagation_policy=policy)
    wait_for(_gone(core, kube_namespace, "child"))
    wait_for(_gone(core, kube_namespace, "owner"))


def test_orphan_keeps_dependents(core, kube_namespace):
    from kubernetes import client

    core.create_namespaced_config_map(kube_namespace, _cm("owner"))
    _owned(core, kube_namespace, "owner", "child")
    core.delete_namespaced_config_map(
        "owner", kube_namespace, body=client.V1DeleteOptions(propagation_policy="Orphan")
    )
    wait_for(_gone(core, kube_namespace, "owner"))
    child = wait_for(
        lambda: (
            (c := core.read_namespaced_config_map("child", kube_namespace)).metadata.owner_references is None
            and c
        )
    )
    assert child.metadata.name == "child"


def test_delete_collection(core, kube_namespace):
    for name in ("x1", "x2", "y1"):
        core.create_namespaced_config_map(kube_namespace, _cm(name, {"group": name[0]}))
    core.delete_collection_namespaced_config_map(kube_namespace, label_selector="group=x")
    left = [i.metadata.name for i in core.list_namespaced_config_map(kube_namespace).items]
    assert "y1" in left and "x1" not in left and "x2" not in left


def test_namespace_deletion_removes_contents(core):
    name = unique("gone")
    core.create_namespace({"metadata": {"name": name}})
    core.create_namespaced_config_map(name, _cm("inside"))
    core.delete_namespace(name)

    def ns_gone():
        try:
            core.read_namespace(name)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(ns_gone, timeout=60)
    with pytest.raises(ApiException):
        core.read_namespaced_config_map("inside", name)


def test_pod_status_subresource_and_log(lab, core, kube_namespace):
    pod = {
        "metadata": {"name": "p"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox", "command": ["true"]}],
        },
        "status": {"phase": "Succeeded"},
    }
    created = core.create_namespaced_pod(kube_namespace, pod)
    assert created.status.phase == "Pending"  # status on create is the server's, not the client's
    if not lab.is_lab:
        return
    created.status.phase = "Running"
    created.spec.active_deadline_seconds = 30
    after = core.replace_namespaced_pod_status("p", kube_namespace, created)
    assert after.status.phase == "Running" and after.spec.active_deadline_seconds is None
    lab.store.set_pod_log(kube_namespace, "p", "line one\nline two\n")
    assert core.read_namespaced_pod_log("p", kube_namespace) == "line one\nline two\n"
    assert core.read_namespaced_pod_log("p", kube_namespace, tail_lines=1) == "line two\n"


def test_generation_follows_spec_only(custom, widget_crd, kube_namespace):
    body = {
        "apiVersion": f"{widget_crd}/v1",
        "kind": "Widget",
        "metadata": {"name": "g"},
        "spec": {"size": 1},
    }
    args = (widget_crd, "v1", kube_namespace, "widgets")
    assert custom.create_namespaced_custom_object(*args, body)["metadata"]["generation"] == 1
    patched = custom.patch_namespaced_custom_object(*args, "g", {"metadata": {"labels": {"a": "b"}}})
    assert patched["metadata"]["generation"] == 1
    patched = custom.patch_namespaced_custom_object_status(*args, "g", {"status": {"phase": "Ready"}})
    assert patched["metadata"]["generation"] == 1
    patched = custom.patch_namespaced_custom_object(*args, "g", {"spec": {"size": 2}})
    assert patched["metadata"]["generation"] == 2
