"""kube_object and kube_object_info against the lab: create, update only what differs, delete, read; check
mode sends nothing, --diff shows the change, a rerun sends no mutating request, and a run converges in one
go under conflicts, 5xx answers, dropped connections and replies lost after the commit."""

from __future__ import annotations

import base64

import pytest

from tests.integration.support.runner import kube_play, module_task, run_playbook

pytestmark = pytest.mark.lab_only

# What the collection makes carries this label; kube_object deletes nothing else.
OURS = {"app.kubernetes.io/managed-by": "goldenimage.pipeline"}
RATES = {"conflict_rate": 0.2, "error_rate": 0.1, "drop_rate": 0.05, "commit_drop_rate": 0.05}


def config_map(namespace, name, data, labels=None):
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels or {"suite": "kube-object", **OURS},
        },
        "data": data,
    }


def claim(name, size="8388608"):
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "labels": dict(OURS)},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}},
    }


def apply(title, definitions, **params):
    return module_task("goldenimage.pipeline.kube_object", title, definitions=definitions, **params)


def mutating(lab):
    return [(r["verb"], r["resource"], r["name"]) for r in lab.mutating_requests()]


@pytest.mark.suite("idempotence")
def test_create_update_only_what_differs_then_delete(lab, kube_client, kube_namespace):
    from kubernetes import client

    core = client.CoreV1Api(kube_client)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": "creds", "labels": dict(OURS)},
        "stringData": {"secretKey": "s3cr3t-value"},
    }
    objects = [config_map(kube_namespace, "one", {"a": "1"}), claim("disk"), secret]

    lab.clear_audit()
    checked = run_playbook(
        kube_play(apply("predict", objects, namespace=kube_namespace)), env=lab.env(), check=True, diff=True
    )
    assert checked.ok, checked.log
    assert checked["predict"]["changed"] is True
    assert [o["action"] for o in checked["predict"]["objects"]] == ["created"] * 3
    assert mutating(lab) == []

    first = run_playbook(kube_play(apply("apply", objects, namespace=kube_namespace)), env=lab.env())
    assert first.ok, first.log
    assert [o["action"] for o in first["apply"]["objects"]] == ["created"] * 3
    assert base64.b64decode(core.read_namespaced_secret("creds", kube_namespace).data["secretKey"]) == (
        b"s3cr3t-value"
    )
    assert "s3cr3t-value" not in first.stdout + str(first.tasks)

    # A rerun: every object holds what is asked (the claim's size in canonical form, the Secret's
    # stringData as data), so nothing is written.
    lab.clear_audit()
    again = run_playbook(
        kube_play(apply("apply", objects, namespace=kube_namespace)), env=lab.env(), diff=True
    )
    assert again.ok, again.log
    assert again["apply"]["changed"] is False, again["apply"]
    assert mutating(lab) == []

    # Another writer's label stays; only the changed field is sent, and --diff shows it.
    core.patch_namespaced_config_map("one", kube_namespace, {"metadata": {"labels": {"other": "x"}}})
    lab.clear_audit()
    changed = [config_map(kube_namespace, "one", {"a": "2"})]
    predicted = run_playbook(kube_play(apply("update", changed)), env=lab.env(), check=True, diff=True)
    assert predicted.ok and predicted["update"]["changed"] is True, predicted.log
    assert mutating(lab) == []
    assert predicted["update"]["diff"]["before"]["data"] == {"a": "1"}
    assert predicted["update"]["diff"]["after"]["data"] == {"a": "2"}
    updated = run_playbook(kube_play(apply("update", changed)), env=lab.env(), diff=True)
    assert updated.ok, updated.log
    assert [o["action"] for o in updated["update"]["objects"]] == ["patched"]
    assert mutating(lab) == [("patch", "configmaps", "one")]
    cm = core.read_namespaced_config_map("one", kube_namespace)
    assert cm.data == {"a": "2"} and cm.metadata.labels == {"suite": "kube-object", "other": "x", **OURS}

    # A changed Secret value shows as changed in the diff, never as its value.
    secret["stringData"]["secretKey"] = "another-value"
    rotated = run_playbook(
        kube_play(apply("rotate", [secret], namespace=kube_namespace)), env=lab.env(), diff=True
    )
    assert rotated.ok and rotated["rotate"]["changed"] is True, rotated.log
    assert rotated["rotate"]["diff"]["after"]["data"] == {"secretKey": "<hidden: changed>"}
    assert "another-value" not in rotated.stdout + str(rotated.tasks)

    # Read back, then delete (a second delete finds them gone and sends nothing).
    read = run_playbook(
        kube_play(
            module_task(
                "goldenimage.pipeline.kube_object_info",
                "read",
                kind="ConfigMap",
                namespace=kube_namespace,
                label_selectors=["suite=kube-object", "other=x"],
            ),
            module_task(
                "goldenimage.pipeline.kube_object_info",
                "secret",
                kind="Secret",
                namespace=kube_namespace,
                name="creds",
            ),
            module_task(
                "goldenimage.pipeline.kube_object_info",
                "unserved",
                api_version="nowhere.example/v1",
                kind="Thing",
            ),
        ),
        env=lab.env(),
    )
    assert read.ok, read.log
    assert [r["metadata"]["name"] for r in read["read"]["resources"]] == ["one"]
    assert read["secret"]["resources"][0]["data"] == {"secretKey": "<hidden>"}
    assert read["unserved"]["api_found"] is False and read["unserved"]["resources"] == []
    gone = [
        {"apiVersion": o["apiVersion"], "kind": o["kind"], "metadata": {"name": o["metadata"]["name"]}}
        for o in objects
    ]
    lab.clear_audit()
    deleted = run_playbook(
        kube_play(
            apply(
                "delete",
                gone,
                namespace=kube_namespace,
                state="absent",
                propagation="Foreground",
                wait=True,
                wait_timeout=60,
                wait_sleep=1,
            )
        ),
        env=lab.env(),
    )
    assert deleted.ok, deleted.log
    assert [o["action"] for o in deleted["delete"]["objects"]] == ["deleted"] * 3
    assert sorted(v for v, _r, _n in mutating(lab)) == ["delete"] * 3
    lab.clear_audit()
    twice = run_playbook(
        kube_play(apply("delete", gone, namespace=kube_namespace, state="absent")), env=lab.env()
    )
    assert twice.ok and twice["delete"]["changed"] is False, twice.log
    assert mutating(lab) == []


def test_bad_definitions_are_refused_before_any_request(lab, kube_namespace):
    lab.clear_audit()
    nameless = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "x-"}}
    run = run_playbook(
        kube_play(
            apply("refused", [config_map(kube_namespace, "fine", {}), nameless], ignore_errors=True),
            apply(
                "twice",
                [config_map(kube_namespace, "a", {}), config_map(kube_namespace, "a", {})],
                ignore_errors=True,
            ),
        ),
        env=lab.env(),
    )
    assert "definitions[1] (ConfigMap None): it has no metadata.name" in run["refused"]["msg"]
    assert "the same object is listed twice" in run["twice"]["msg"]
    assert lab.mutating_requests() == []


@pytest.mark.suite("data-loss")
def test_a_delete_of_what_the_collection_did_not_make_or_of_a_golden_is_refused(
    lab, kube_client, kube_namespace
):
    from kubernetes import client

    core = client.CoreV1Api(kube_client)
    # A database's data volume (made by its operator) and a golden carrying the collection's own label.
    pgdata = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "pgdata", "namespace": kube_namespace, "labels": {"app": "orders"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "8Mi"}}},
    }
    golden = {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshot",
        "metadata": {
            "name": "ubuntu-golden",
            "namespace": kube_namespace,
            "labels": {**OURS, "kube-dc.com/golden-os": "ubuntu"},
        },
        "spec": {"source": {"persistentVolumeClaimName": "pgdata"}},
    }
    created = run_playbook(kube_play(apply("make", [pgdata, golden])), env=lab.env())
    assert created.ok, created.log
    lab.clear_audit()
    for title, target, says in (
        ("pgdata", pgdata, "not made by this collection"),
        ("golden", golden, "golden_snapshot with state=absent"),
    ):
        for check in (True, False):
            refused = run_playbook(
                kube_play(apply(title, [target], state="absent", propagation="Foreground")),
                env=lab.env(),
                check=check,
            )
            assert not refused.ok and says in refused.log, refused.log
    assert [r for r in lab.mutating_requests() if r["verb"] in ("delete", "deletecollection")] == []
    assert (
        core.read_namespaced_persistent_volume_claim("pgdata", kube_namespace).metadata.deletion_timestamp
        is None
    )
    kept = client.CustomObjectsApi(kube_client).get_namespaced_custom_object(
        "snapshot.storage.k8s.io", "v1", kube_namespace, "volumesnapshots", "ubuntu-golden"
    )
    assert not kept["metadata"].get("deletionTimestamp")


@pytest.mark.suite("data-loss")
def test_a_delete_of_a_claim_something_uses_is_refused_naming_each_user(lab, kube_client, kube_namespace):
    """The collection's own claim, mounted by a pod, cloned by a claim through dataSourceRef and by a
    DataVolume of another namespace: the delete asks who uses it first and names each; nothing at all is
    deleted, not even the unused claim listed before it in the same task."""
    from kubernetes import client

    core = client.CoreV1Api(kube_client)
    other = kube_namespace + "-b"
    core.create_namespace({"metadata": {"name": other}})
    try:
        scratch = dict(
            claim("scratch"), metadata={"name": "scratch", "namespace": kube_namespace, "labels": OURS}
        )
        unused = dict(
            claim("unused"), metadata={"name": "unused", "namespace": kube_namespace, "labels": OURS}
        )
        made = run_playbook(kube_play(apply("make", [scratch, unused])), env=lab.env())
        assert made.ok, made.log
        core.create_namespaced_pod(
            kube_namespace,
            {
                "metadata": {"name": "reader"},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "sh", "image": "busybox:1", "command": ["sleep", "300"]}],
                    "volumes": [{"name": "s", "persistentVolumeClaim": {"claimName": "scratch"}}],
                },
            },
        )
        copy = claim("copy")
        copy["spec"]["dataSourceRef"] = {"kind": "PersistentVolumeClaim", "name": "scratch"}
        core.create_namespaced_persistent_volume_claim(kube_namespace, copy)
        client.CustomObjectsApi(kube_client).create_namespaced_custom_object(
            "cdi.kubevirt.io",
            "v1beta1",
            other,
            "datavolumes",
            {
                "apiVersion": "cdi.kubevirt.io/v1beta1",
                "kind": "DataVolume",
                "metadata": {"name": "elsewhere"},
                "spec": {
                    "source": {"pvc": {"namespace": kube_namespace, "name": "scratch"}},
                    "storage": {"resources": {"requests": {"storage": "8Mi"}}},
                },
            },
        )
        lab.clear_audit()
        for check in (True, False):
            refused = run_playbook(
                kube_play(
                    apply(
                        "delete",
                        [unused, scratch],
                        state="absent",
                        propagation="Foreground",
                        ignore_errors=True,
                    )
                ),
                env=lab.env(),
                check=check,
            )
            out = refused["delete"]
            assert out["refused"] is True, out
            where = "PersistentVolumeClaim %s/scratch" % kube_namespace
            assert out["msg"].startswith("%s: refusing to delete it, 3 object(s) use it: " % where), out[
                "msg"
            ]
            for user in (
                "Pod %s/reader mounts %s" % (kube_namespace, where),
                "PersistentVolumeClaim %s/copy clones from %s" % (kube_namespace, where),
                "DataVolume %s/elsewhere clones from %s" % (other, where),
            ):
                assert user in out["msg"], out["msg"]
            assert {(c["kind"], c["namespace"], c["name"]) for c in out["consumers"]} == {
                ("Pod", kube_namespace, "reader"),
                ("PersistentVolumeClaim", kube_namespace, "copy"),
                ("DataVolume", other, "elsewhere"),
            }
        assert [r for r in lab.mutating_requests() if r["verb"] in ("delete", "deletecollection")] == []
        for name in ("scratch", "unused"):
            kept = core.read_namespaced_persistent_volume_claim(name, kube_namespace)
            assert kept.metadata.deletion_timestamp is None
    finally:
        core.delete_namespace(other)


@pytest.mark.suite("faults")
def test_a_run_converges_under_faults_and_a_rerun_writes_nothing(lab, kube_namespace):
    names = ["cm-%02d" % i for i in range(12)]
    first = [config_map(kube_namespace, n, {"v": "1"}) for n in names]
    second = [config_map(kube_namespace, n, {"v": "2"}) for n in names]
    lab.clear_audit()
    lab.faults.update(dict(RATES, seed=909))
    try:
        run = run_playbook(
            kube_play(apply("create", first), apply("update", second)), env=lab.env(faults=True)
        )
        injected = lab.faults.to_dict()["injected"]
    finally:
        lab.faults.reset()
    assert run.ok, run.log
    assert injected["conflict"] and injected["error"] and (injected["drop"] or injected["commit_drop"]), (
        injected
    )
    # A create is a POST to the collection: the audit names no object, so count them.
    creates = [
        r
        for r in lab.audit()
        if r["namespace"] == kube_namespace and r["verb"] == "create" and 200 <= r["code"] < 300
    ]
    assert len(creates) == len(names), creates  # each object created once: no duplicate
    assert [o["action"] for o in run["update"]["objects"]] == ["patched"] * len(names)
    lab.clear_audit()
    again = run_playbook(kube_play(apply("update", second)), env=lab.env())
    assert again.ok and again["update"]["changed"] is False, again.log
    assert lab.mutating_requests() == []


def test_a_permission_missing_half_way_says_what_the_run_wrote(lab, kube_namespace, tmp_path):
    """A token that may create ConfigMaps but not Secrets: the run stops at the Secret with the 403 and
    says what it wrote first (``written``, and in the message), so nothing half-done goes unreported."""
    user = "configmaps-only-" + kube_namespace[-6:]
    token = lab.add_token(
        user, [{"verbs": ["get", "list", "create"], "groups": [""], "resources": ["configmaps"]}]
    )
    kubeconfig = str(lab.write_kubeconfig(tmp_path / "limited.kubeconfig", token, user))
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "creds", "namespace": kube_namespace, "labels": dict(OURS)},
        "stringData": {"key": "value"},
    }
    definitions = [config_map(kube_namespace, "first", {"a": "1"}), secret]
    run = run_playbook(
        kube_play(apply("limited", definitions, kubeconfig=kubeconfig, ignore_errors=True)),
        env=lab.env(),
    )
    assert run.entry("limited")["status"] == "ignored", run.log
    result = run["limited"]
    assert result["status"] == 403, result
    assert result["written"] == ["created ConfigMap %s/first" % kube_namespace], result
    assert result["msg"].endswith(
        "Written by this run before the refusal: created ConfigMap %s/first" % kube_namespace
    ), result["msg"]
