"""The worker_image runner with parameters and observed state: no cluster, no SystemExit to catch.

``Observed`` stands in for the KubeModule's reads and writes over a dict of objects (it is not the
kubernetes client); it records every write so a test can say "nothing was written".
"""

import copy

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common._wait import WaitFailed, wait_for
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.workers import worker as w
from ansible_collections.goldenimage.pipeline.plugins.modules import worker_image

from tests.unit.plugins.modules.support import list_each, rejected

SCHEMATIC = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
NAME = "talos-worker-%s-v1.13.0" % SCHEMATIC
ENTRY = {
    "schematicID": SCHEMATIC,
    "version": "v1.13.0",
    "imageFactoryURL": "https://factory.talos.dev",
    "storage": "6Gi",
    "storageClass": "replicated",
    "certConfigMap": None,
    "sha256": None,
}


class _Answer:
    def __init__(self, body):
        self.body = body

    def to_dict(self):
        return self.body


class _Reviews:
    def __init__(self, allowed):
        self.allowed = allowed
        self.asked = []

    def create(self, body):
        self.asked.append(body)
        return _Answer(dict(body, status={"allowed": self.allowed}))


class _DataVolumes:
    """The server's dry-run answer to a DataVolume create: what its CDI schema keeps of the body."""

    def __init__(self, keeps_checksum):
        self.keeps_checksum = keeps_checksum
        self.dry_runs = []

    def create(self, body, namespace, dry_run):
        assert dry_run == "All"
        self.dry_runs.append(body["metadata"]["name"])
        answer = copy.deepcopy(body)
        if not self.keeps_checksum:
            answer["spec"]["source"]["http"].pop("checksum", None)
        return _Answer(answer)


class Observed:
    list_each = list_each

    def __init__(
        self, objects=(), check_mode=False, allowed=True, namespace_exists=True, keeps_checksum=True, **params
    ):
        self.objects = {}
        if namespace_exists:
            self.put({"kind": "Namespace", "metadata": {"name": params.get("namespace", "cozy-public")}})
        for obj in objects:
            self.put(obj)
        self.check_mode = check_mode
        self.writes = []
        self.reviews = _Reviews(allowed)
        self.datavolumes = _DataVolumes(keeps_checksum)
        self.params = {
            "state": "present",
            "images": None,
            "namespace": "cozy-public",
            "name": None,
            "pool": None,
            "pools": [],
            "allow_host_assisted": False,
            "url_validate_certs": True,
            "wait": False,
            "wait_timeout": 300,
            "wait_sleep": 2,
        }
        self.params.update(params)

    def put(self, obj):
        meta = obj["metadata"]
        self.objects[(obj["kind"], meta.get("namespace"), meta["name"])] = copy.deepcopy(obj)

    def get(self, api_version, kind, name, namespace=None):
        return copy.deepcopy(self.objects.get((kind, namespace, name)))

    def list(self, api_version, kind, namespace=None, **_):
        return [
            copy.deepcopy(o)
            for (k, ns, _n), o in sorted(self.objects.items())
            if k == kind and namespace in (None, ns)
        ]

    def served(self, api_version, kind):
        return True

    def resource(self, api_version, kind):
        if kind == "DataVolume":
            return self.datavolumes
        assert kind == "SubjectAccessReview"
        return self.reviews

    def create(self, body):
        if not self.check_mode:
            self.writes.append(("create", body["metadata"]["name"]))
            self.put(body)
        return copy.deepcopy(body)

    def delete(self, api_version, kind, name, namespace=None, before=None):
        if not self.check_mode:
            self.writes.append(("delete", name))
            self.objects.pop((kind, namespace, name))
        return True

    def wait(
        self, api_version, kind, name, namespace, predicate, describe, pending, timeout, sleep, progress=None
    ):
        return wait_for(
            lambda: self.get(api_version, kind, name, namespace),
            predicate,
            timeout,
            sleep,
            describe=describe,
            progress=progress,
            pending=pending,
            sleeper=lambda s: None,
        )

    def fail_from_exception(self, action, exc, **extra):
        raise exc


def no_digest(url, validate_certs):
    return None, None


def run(observed, digest_of=no_digest):
    return worker_image.Runner(observed, digest_of=digest_of).run()


def golden(entry=None, phase="Succeeded", **status):
    dv = w.render_golden(w.catalog([entry or ENTRY])[0])
    dv["status"] = dict(phase=phase, progress="100.0%", **status)
    return dv


def claim(name, namespace, cls, phase="Bound"):
    return {
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"storageClassName": cls},
        "status": {"phase": phase, "capacity": {"storage": "6Gi"}},
    }


def storage_class(name, default=False):
    notes = {w.DEFAULT_CLASS: "true"} if default else {}
    return {
        "kind": "StorageClass",
        "metadata": {"name": name, "annotations": notes, "creationTimestamp": "2026"},
    }


def test_present_creates_with_a_diff_and_check_mode_writes_nothing():
    checked = Observed(check_mode=True, images=[ENTRY])
    result = run(checked)
    assert result["changed"] is True and checked.writes == []
    assert result["diff"]["after"]["goldens"][0]["metadata"]["name"] == NAME
    real = Observed(images=[ENTRY])
    assert run(real)["changed"] is True
    assert real.writes == [("create", NAME)]
    again = Observed(objects=[golden()], images=[ENTRY])
    result = run(again)
    assert result["changed"] is False and again.writes == []
    assert result["goldens"][0]["phase"] == "Succeeded"


def test_an_edited_entry_stops_the_whole_catalog_before_any_write():
    new = dict(ENTRY, version="v1.14.0")
    edited = dict(ENTRY, storage="8Gi")
    observed = Observed(objects=[golden()], images=[new, edited])
    with pytest.raises(Refusal) as exc:
        run(observed)
    assert "storage 6Gi -> 8Gi" in exc.value.msg
    assert observed.writes == []


def test_mirror_digest_pins_the_golden_and_a_different_one_is_refused():
    observed = Observed(images=[ENTRY])
    run(observed, digest_of=lambda url, v: ("a" * 64, None))
    created = observed.get("", "DataVolume", NAME, "cozy-public")
    assert created["spec"]["source"]["http"]["checksum"] == "sha256:" + "a" * 64
    observed = Observed(images=[dict(ENTRY, sha256="b" * 64)])
    with pytest.raises(Refusal) as exc:
        run(observed, digest_of=lambda url, v: ("a" * 64, None))
    assert "has sha256 %s, not the sha256 %s the entry pins" % ("a" * 64, "b" * 64) in exc.value.msg
    assert observed.writes == []


def test_a_cdi_that_drops_the_checksum_refuses_the_pinned_golden_before_any_write():
    """CDI before v1.65.0 prunes spec.source.http.checksum: the dry run shows it, nothing is created."""
    pinned = dict(ENTRY, sha256="a" * 64)
    observed = Observed(images=[pinned], keeps_checksum=False)
    with pytest.raises(Refusal) as exc:
        run(observed)
    assert "drops spec.source.http.checksum" in exc.value.msg
    assert "upgrade CDI to v1.65.0 or later" in exc.value.msg
    assert observed.writes == []
    kept = Observed(images=[pinned])
    assert run(kept)["changed"] is True
    assert kept.datavolumes.dry_runs == [NAME]
    unpinned = Observed(images=[ENTRY], keeps_checksum=False)
    assert run(unpinned)["changed"] is True  # no pin: nothing to lose, no dry run
    assert unpinned.datavolumes.dry_runs == []


def test_a_failed_import_ends_the_wait_with_the_importer_reason():
    cond = {
        "type": "Running",
        "status": "False",
        "reason": "Error",
        "message": "x509: certificate signed by unknown authority",
    }
    observed = Observed(objects=[golden(phase="Failed", conditions=[cond])], images=[ENTRY], wait=True)
    with pytest.raises(WaitFailed) as exc:
        run(observed)
    assert "x509: certificate signed by unknown authority" in exc.value.msg
    assert exc.value.result["goldens"][0]["reason"] == "Error: x509: certificate signed by unknown authority"


def worker_disk(name, pool_name="md0", namespace="tenant-a"):
    dv = w.render_clone_disk(
        w.pool_request(
            {
                "name": pool_name,
                "namespace": namespace,
                "osImage": {"builtin": {"schematicID": SCHEMATIC, "version": "v1.13.0"}},
            }
        ),
        "cozy-public",
        "replicated",
    )
    dv["metadata"]["name"] = name
    return dv


def test_absent_refused_while_cloned_and_deletes_when_not():
    observed = Observed(objects=[golden(), worker_disk("md0-0-disk-system")], state="absent", name=NAME)
    with pytest.raises(Refusal) as exc:
        run(observed)
    assert (
        "refusing to delete it, 1 object(s) use it: DataVolume tenant-a/md0-0-disk-system clones from "
        "PersistentVolumeClaim cozy-public/%s" % NAME
    ) in exc.value.msg
    assert observed.writes == []
    observed = Observed(objects=[golden()], state="absent", name=NAME)
    assert run(observed)["changed"] is True and observed.writes == [("delete", NAME)]


def test_absent_refused_while_a_declared_pool_of_zero_workers_names_it():
    """No disk clones it yet (the pool is scaled to zero), but its next scale-up will."""
    pool = {
        "name": "md0",
        "namespace": "tenant-a",
        "osImage": {"builtin": {"schematicID": SCHEMATIC, "version": "v1.13.0"}},
    }
    other = dict(pool, name="md1", osImage=None, imageURL="https://factory.example/image.raw.xz")
    observed = Observed(objects=[golden()], state="absent", name=NAME, pools=[other, pool])
    with pytest.raises(Refusal) as exc:
        run(observed)
    assert "Pool tenant-a/md0 is declared in the catalog with it as its osImage" in exc.value.msg
    assert "md1" not in exc.value.msg and observed.writes == []


def test_info_lists_consumers():
    observed = Observed(objects=[golden(), worker_disk("a"), worker_disk("b", "md1")], state="info")
    assert run(observed)["goldens"][0]["consumers"] == {
        "disks": ["tenant-a/a", "tenant-a/b"],
        "pools": ["tenant-a/md0", "tenant-a/md1"],
    }


POOL = {
    "name": "md0",
    "namespace": "tenant-a",
    "osImage": {"builtin": {"schematicID": SCHEMATIC, "version": "v1.13.0"}},
    "storageClass": "",
    "diskSize": "20Gi",
    "imageURL": None,
}


def cluster(allowed=True, **params):
    objects = [golden(), claim(NAME, "cozy-public", "replicated"), storage_class("replicated", default=True)]
    return Observed(objects=objects, allowed=allowed, state="rendered", **params)


def test_rendered_clone_on_the_resolved_class():
    observed = cluster(pool=POOL)
    result = run(observed)
    assert result["data_volume"]["spec"]["storage"]["storageClassName"] == "replicated"
    assert result["clone_strategy"]["strategy"] == "snapshot"
    assert observed.reviews.asked[0]["spec"]["user"] == "system:serviceaccount:tenant-a:default"
    assert observed.writes == []


def test_rendered_refused_without_the_clone_binding():
    with pytest.raises(Refusal) as exc:
        run(cluster(allowed=False, pool=POOL))
    assert (
        "service accounts of namespace tenant-a may not create datavolumes/source in cozy-public"
        in exc.value.msg
    )


def test_http_render_reads_nothing_from_the_cluster():
    observed = Observed(state="rendered", pool=dict(POOL, osImage=None, imageURL="https://f/i.raw.xz"))
    result = run(observed)
    assert result["clone_strategy"] is None
    assert result["data_volume"]["spec"]["source"] == {"http": {"url": "https://f/i.raw.xz"}}
    assert observed.reviews.asked == []


def test_durations_must_be_positive():
    with pytest.raises(Refusal) as exc:
        run(Observed(images=[ENTRY], wait_timeout=0))
    assert exc.value.msg.startswith("option wait_timeout: 0 is not a duration")


def test_what_each_state_needs_is_an_argument_rule():
    spec, rules = worker_image.argument_spec(), worker_image.ARGUMENT_RULES
    assert rejected(spec, rules, {}) == ["state is present but all of the following are missing: images"]
    assert rejected(spec, rules, {"images": []}) == []
    assert rejected(spec, rules, {"state": "absent"}) == [
        "state is absent but all of the following are missing: name"
    ]
    assert rejected(spec, rules, {"state": "rendered"}) == [
        "state is rendered but all of the following are missing: pool"
    ]
    assert rejected(spec, rules, {"state": "info"}) == []


def test_check_mode_promises_no_golden_into_a_missing_namespace():
    for check_mode in (True, False):
        observed = Observed(check_mode=check_mode, namespace_exists=False, images=[ENTRY])
        with pytest.raises(Refusal, match="namespace cozy-public: it does not exist"):
            run(observed)
        assert observed.writes == []
    # Nothing to create: nothing is promised, so a missing namespace is no refusal.
    assert run(Observed(namespace_exists=False, images=[]))["changed"] is False


def test_info_reports_claim_only_disks_and_orphans():
    notes = {w.GOLDEN_ANNOTATION: NAME, w.POOL_ANNOTATION: "md0"}
    only = claim("only", "tenant-a", "replicated")
    only["metadata"]["annotations"] = notes
    stray = claim("stray", "tenant-a", "replicated")
    stray["metadata"]["annotations"] = dict(notes, **{w.GOLDEN_ANNOTATION: "talos-worker-gone-v1.0.0"})
    result = run(Observed(objects=[golden(), only, stray], state="info"))
    assert result["goldens"][0]["consumers"] == {"disks": ["tenant-a/only"], "pools": ["tenant-a/md0"]}
    assert result["orphans"] == [
        {
            "kind": "PersistentVolumeClaim",
            "namespace": "tenant-a",
            "name": "stray",
            "golden": "talos-worker-gone-v1.0.0",
            "pool": "tenant-a/md0",
        }
    ]
