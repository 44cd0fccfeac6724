import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import golden_inventory as inv

FS, BLOCK = "golden-images", "golden-images-block"
DIGEST = "sha256:f0dea74da9c54ba4728b2f4841316490cadd66b7ab1ed10de46549d457eb5018"
OLD = "golden-debian-12-20260101-0123456789ab"
NEW = "golden-debian-12-20260828-f0dea74da9c5"


def snap(name, namespace=FS, family="debian-12", mode="Filesystem", active=False, ready=True, content=None):
    labels = {"kube-dc.com/golden-os": family, "kube-dc.com/golden-mode": mode}
    if active:
        labels["kube-dc.com/golden-active"] = "true"
    return {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshot",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "creationTimestamp": "2026-09-01T10:00:00Z",
            "labels": labels,
            "annotations": {
                "kube-dc.com/os-family-id": family,
                "kube-dc.com/os-name": "Debian 12",
                "kube-dc.com/golden-mode": mode,
            },
        },
        "spec": {"source": {"persistentVolumeClaimName": "disk"}},
        "status": {
            "readyToUse": ready,
            "restoreSize": "4Mi",
            "boundVolumeSnapshotContentName": content or "snapcontent-%s" % name,
        },
    }


def content(name, handle, pre_provisioned=False):
    if pre_provisioned:
        return {"metadata": {"name": name}, "spec": {"source": {"snapshotHandle": handle}}, "status": {}}
    return {
        "metadata": {"name": name},
        "spec": {"source": {"volumeHandle": "pv"}},
        "status": {"snapshotHandle": handle},
    }


def copy(project, family="debian-12", mode="Filesystem", seeded_from=None, bound=True):
    name = "golden-%s%s" % (family, "-block" if mode == "Block" else "")
    obj = {
        "metadata": {
            "name": name,
            "namespace": project,
            "uid": "u-%s-%s" % (project, family),
            "labels": {"kube-dc.com/golden-os": family, "kube-dc.com/golden-mode": mode},
            "annotations": {"kube-dc.com/seeded-from": seeded_from or "%s/%s" % (FS, NEW)},
        },
        "spec": {"source": {"volumeSnapshotContentName": "kdc-%s-%s-fs" % (project, family)}},
        "status": {"readyToUse": True},
    }
    if bound:
        obj["status"]["boundVolumeSnapshotContentName"] = "kdc-%s-%s-fs" % (project, family)
    return obj


def copy_content(project, handle, family="debian-12"):
    """The content of ``copy(project)``, bound back to it (its volumeSnapshotRef carries the copy's uid)."""
    obj = content("kdc-%s-%s-fs" % (project, family), handle, pre_provisioned=True)
    obj["spec"]["volumeSnapshotRef"] = {"uid": "u-%s-%s" % (project, family)}
    return obj


def selection(name, snapshot, family="debian-12", mode="filesystem", namespace=FS, digest=DIGEST):
    spec = {"family": family, "mode": mode, "snapshotName": snapshot}
    if digest:
        spec["releaseDigest"] = digest
    return {
        "apiVersion": "kube-dc.com/v1",
        "kind": "GoldenImageSelection",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def pvc(namespace, name, source, ref=False, source_namespace=None):
    key = "dataSourceRef" if ref else "dataSource"
    data = {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": source}
    if source_namespace:
        data["namespace"] = source_namespace
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {key: data}}


@pytest.fixture
def world():
    """Two Filesystem goldens (NEW active), three projects: one current, one stale, one unseeded."""
    return {
        "snapshots": [
            snap(OLD),
            snap(NEW, active=True),
            copy("p-a"),
            copy("p-b", seeded_from="%s/%s" % (FS, OLD)),
        ],
        "contents": [
            content("snapcontent-%s" % OLD, "h-old"),
            content("snapcontent-%s" % NEW, "h-new"),
            copy_content("p-a", "h-new"),
            copy_content("p-b", "h-old"),
        ],
        "pvcs": [
            pvc("p-a", "vm-1", "golden-debian-12"),
            pvc("p-b", "vm-2", "golden-debian-12", ref=True),
            pvc(FS, "check", OLD),
            pvc("p-a", "plain", None),
        ],
        "projects": [{"metadata": {"name": n}} for n in ("p-c", "p-a", "p-b")],
        "selections": [],
    }


def run(world, **kw):
    return inv.report(
        world["snapshots"],
        world["contents"],
        world["pvcs"],
        world["projects"],
        world["selections"],
        world.get("datavolumes"),
        **kw,
    )


@pytest.mark.parametrize(
    "name,family,expected",
    [
        (NEW, "debian-12", {"date": "20260828", "digest_prefix": "f0dea74da9c5"}),
        (
            "golden-windows-11-golden-2026-08-09",
            "windows-11-golden",
            {"date": "20260809", "digest_prefix": None},
        ),
        ("golden-x-20260828-f0dea74da9c5", None, {"date": "20260828", "digest_prefix": "f0dea74da9c5"}),
        ("golden-debian-12-staging", "debian-12", {"date": None, "digest_prefix": None}),
        (
            "golden-debian-12-20261340-f0dea74da9c5",
            "debian-12",
            {"date": None, "digest_prefix": "f0dea74da9c5"},
        ),
    ],
)
def test_parse_version(name, family, expected):
    assert inv.parse_version(name, family) == expected


def test_selectors_and_namespaces():
    assert inv.snapshot_selector() == "kube-dc.com/golden-os"
    assert inv.snapshot_selector("debian-12") == "kube-dc.com/golden-os=debian-12"
    assert inv.golden_namespaces() == {"Filesystem": FS, "Block": BLOCK}
    assert inv.golden_namespaces(block="b") == {"Filesystem": FS, "Block": "b"}


def test_label_path_with_one_active_serves_it(world):
    result = run(world)
    (family,) = result["families"]
    assert family["family"] == "debian-12"
    assert family["os_name"] == "Debian 12"
    serving = family["serving"]["Filesystem"]
    assert (serving["snapshot"], serving["path"], serving["held"], serving["handle"]) == (
        NEW,
        "label",
        False,
        "h-new",
    )
    assert serving["order"] == [NEW, OLD]
    assert result["conflicts"] == []
    old, new = family["candidates"]
    assert (old["name"], old["date"], old["digest_prefix"], old["digest"]) == (
        OLD,
        "20260101",
        "0123456789ab",
        None,
    )
    assert (new["serving"], new["active"], new["selected"], new["size"], new["ready"]) == (
        True,
        True,
        False,
        "4Mi",
        True,
    )
    assert new["handle"] == "h-new" and new["problems"] == []
    assert old["serving"] is False


def test_zero_active_is_arbitrary_and_silent(world):
    world["snapshots"][1] = snap(NEW)
    result = run(world)
    serving = result["families"][0]["serving"]["Filesystem"]
    assert (serving["snapshot"], serving["path"]) == (OLD, "label")  # first in list order
    (conflict,) = result["conflicts"]
    assert conflict["type"] == "zero_active"
    assert "arbitrary and silent" in conflict["message"]
    assert serving["conflicts"] == ["zero_active"]


def test_two_active_still_serves_the_first(world):
    world["snapshots"][0] = snap(OLD, active=True)
    result = run(world)
    assert result["families"][0]["serving"]["Filesystem"]["snapshot"] == OLD
    assert [c["type"] for c in result["conflicts"]] == ["two_active"]
    assert result["conflicts"][0]["names"] == [OLD, NEW]


def test_selection_decides_and_gives_the_digest(world):
    world["selections"] = [selection("debian-12-filesystem", OLD)]
    result = run(world)
    family = result["families"][0]
    serving = family["serving"]["Filesystem"]
    assert (serving["snapshot"], serving["path"], serving["selection"]) == (
        OLD,
        "selection",
        "debian-12-filesystem",
    )
    old, new = family["candidates"]
    assert (old["selected"], old["serving"], old["digest"]) == (True, True, DIGEST)
    assert (new["selected"], new["serving"]) == (False, False)
    # p-b holds the old handle: now it matches; p-a holds the active one and does not.
    by_ns = {p["namespace"]: p for p in result["projects"]}
    assert by_ns["p-b"]["match"] is True
    assert by_ns["p-a"]["match"] is False
    assert by_ns["p-a"]["golden"] == "%s/%s" % (FS, NEW)


def test_two_selections_hold_the_family(world):
    world["selections"] = [selection("a", OLD), selection("b", NEW, mode="FILESYSTEM")]
    result = run(world)
    serving = result["families"][0]["serving"]["Filesystem"]
    assert (serving["snapshot"], serving["held"], serving["path"]) == (None, True, "selection")
    assert [c["type"] for c in result["conflicts"]] == ["two_selections"]
    assert not any(c["serving"] for c in result["families"][0]["candidates"])
    entry = next(p for p in result["projects"] if p["namespace"] == "p-a")
    assert entry["match"] is False and entry["held"] is True
    assert "held" in entry["reason"] and "%s/%s" % (FS, NEW) in entry["reason"]


def test_broken_and_idle_selections(world):
    world["snapshots"][1] = snap(NEW, active=True, ready=False)
    world["selections"] = [
        selection("broken", NEW),
        selection("idle", NEW, family="debian-13"),
        selection("elsewhere", NEW, family="debian-12", namespace="default"),
    ]
    result = run(world)
    assert result["families"][0]["serving"]["Filesystem"]["held"] is True
    types = [(c["type"], c["names"]) for c in result["conflicts"]]
    assert types == [("broken_selection", ["broken"]), ("governs_nothing", ["idle"])]
    assert "not Ready" in result["conflicts"][0]["message"]


def test_projects_resolution(world):
    result = run(world)
    entries = {p["namespace"]: p for p in result["projects"]}
    assert list(entries) == ["p-a", "p-b", "p-c"]
    a, b, c = entries["p-a"], entries["p-b"], entries["p-c"]
    assert (a["handle"], a["golden"], a["match"], a["expected"]) == (
        "h-new",
        "%s/%s" % (FS, NEW),
        True,
        "h-new",
    )
    assert a["serving"] == "%s/%s" % (FS, NEW)
    assert (b["handle"], b["golden"], b["match"]) == ("h-old", "%s/%s" % (FS, OLD), False)
    assert b["seeded_from"] == "%s/%s" % (FS, OLD)
    assert (c["snapshot"], c["match"]) == (None, False)
    assert "not seeded" in c["reason"]
    assert inv.summary(result) == {
        "families": 1,
        "conflicts": 0,
        "project_entries": 3,
        "matching": 1,
        "not_matching": 2,
        "clones": 3,
    }


def test_a_deleted_golden_still_held_by_projects_is_reported(world):
    world["snapshots"] = [copy("p-a", family="ubuntu"), copy("p-b", family="ubuntu", bound=False)]
    world["contents"] = [copy_content("p-a", "h-gone", family="ubuntu")]
    result = run(world)
    (family,) = result["families"]
    assert family["family"] == "ubuntu" and family["candidates"] == []
    assert family["serving"]["Filesystem"]["path"] == "none"
    entries = {p["namespace"]: p for p in result["projects"]}
    assert entries["p-a"]["handle"] == "h-gone" and entries["p-a"]["golden"] is None
    assert "no golden serves" in entries["p-a"]["reason"]
    assert "not bound" in entries["p-b"]["reason"]


def test_clones_direct_through_copies_and_datavolumes(world):
    world["datavolumes"] = [
        {
            "metadata": {"name": "dv", "namespace": "p-c"},
            "spec": {"source": {"snapshot": {"namespace": FS, "name": NEW}}},
        },
        {"metadata": {"name": "http", "namespace": "p-c"}, "spec": {"source": {"http": {"url": "x"}}}},
    ]
    world["pvcs"].append(pvc("p-c", "cross", "golden-debian-12", ref=True, source_namespace="p-a"))
    world["pvcs"].append(pvc("p-c", "other", "not-a-golden"))
    result = run(world)
    clones = {c["name"]: c for c in result["clones"]}
    assert set(clones) == {OLD, NEW}
    new, old = clones[NEW], clones[OLD]
    assert new["count"] == 3
    assert new["pvcs"] == [
        {"namespace": "p-a", "name": "vm-1", "via": "p-a/golden-debian-12"},
        {"namespace": "p-c", "name": "cross", "via": "p-a/golden-debian-12"},
    ]
    assert new["datavolumes"] == [{"namespace": "p-c", "name": "dv", "via": "golden"}]
    assert [p["via"] for p in old["pvcs"]] == ["p-b/golden-debian-12", "golden"]
    counts = {c["name"]: c["clones"] for c in result["families"][0]["candidates"]}
    assert counts == {OLD: 2, NEW: 3}


def test_an_unused_golden_reports_zero_and_orphans_are_listed(world):
    world["pvcs"] = [pvc("p-b", "vm", "golden-debian-12")]
    world["contents"][3] = copy_content("p-b", "h-deleted")
    result = run(world)
    by_golden = {c["golden"]: c for c in result["clones"]}
    assert by_golden["%s/%s" % (FS, NEW)]["count"] == 0
    assert by_golden["%s/%s" % (FS, OLD)]["count"] == 0
    orphan = by_golden[None]
    assert (orphan["handle"], orphan["count"], orphan["family"]) == ("h-deleted", 1, "debian-12")


def test_block_goldens_and_filters(world):
    block = snap("golden-debian-12-block-1", namespace=BLOCK, mode="Block", active=True)
    world["snapshots"].insert(0, block)
    world["snapshots"].append(snap("golden-alma-9-20260101-0123456789ab", family="alma-9"))
    world["contents"].append(content("snapcontent-golden-debian-12-block-1", "h-block"))
    result = run(world)
    assert [f["family"] for f in result["families"]] == ["alma-9", "debian-12"]
    debian = result["families"][1]
    assert list(debian["serving"]) == ["Filesystem", "Block"]
    assert debian["serving"]["Block"]["snapshot"] == "golden-debian-12-block-1"
    # Block projects are not seeded: every project is reported for it, unseeded.
    blocks = [p for p in result["projects"] if p["mode"] == "Block"]
    assert len(blocks) == 3 and all(p["snapshot"] is None for p in blocks)

    only = run(world, family="debian-12", mode="block")
    assert [f["family"] for f in only["families"]] == ["debian-12"]
    assert list(only["families"][0]["serving"]) == ["Block"]
    assert {p["mode"] for p in only["projects"]} == {"Block"}
    assert [c["name"] for c in only["clones"]] == ["golden-debian-12-block-1"]


def test_block_selections_where_the_guide_puts_them_and_where_older_ones_sit(world):
    """The guide's layout: every selection in golden-images, Block included. An older Block selection may
    still sit in golden-images-block: both are read, so one naming another snapshot holds the pair, and a
    family that only has the older one is served by it."""
    new_block, old_block = "golden-debian-12-20260828-block", "golden-debian-12-20260101-block"
    alma_block = "golden-alma-9-20260101-block"
    for name, family in ((old_block, "debian-12"), (new_block, "debian-12"), (alma_block, "alma-9")):
        world["snapshots"].append(snap(name, namespace=BLOCK, family=family, mode="Block"))
        world["contents"].append(content("snapcontent-%s" % name, "h-%s" % name))
    world["selections"] = [
        selection("debian-12-block", new_block, mode="Block"),
        selection("debian-12-block", old_block, mode="block", namespace=BLOCK, digest=None),
        selection("alma-9-block", alma_block, family="alma-9", mode="Block", namespace=BLOCK),
    ]
    result = run(world)
    families = {f["family"]: f for f in result["families"]}
    held = families["debian-12"]["serving"]["Block"]
    assert (held["snapshot"], held["held"], held["path"], held["conflicts"]) == (
        None,
        True,
        "selection",
        ["two_selections"],
    )
    (conflict,) = [c for c in result["conflicts"] if c["mode"] == "Block"]
    assert conflict["names"] == ["debian-12-block", "debian-12-block"]
    assert conflict["snapshots"] == sorted([new_block, old_block])
    assert "%s/debian-12-block names %s" % (FS, new_block) in conflict["message"]
    assert "%s/debian-12-block names %s" % (BLOCK, old_block) in conflict["message"]
    selected = {c["name"]: c["selected"] for c in families["debian-12"]["candidates"] if c["mode"] == "Block"}
    assert selected == {old_block: True, new_block: True}
    # The Filesystem pair is not governed by either: the label path still serves it.
    assert families["debian-12"]["serving"]["Filesystem"]["path"] == "label"
    alma = families["alma-9"]["serving"]["Block"]
    assert (alma["snapshot"], alma["path"], alma["selection"], alma["namespace"], alma["handle"]) == (
        alma_block,
        "selection",
        "alma-9-block",
        BLOCK,
        "h-%s" % alma_block,
    )
    assert [c["digest"] for c in families["alma-9"]["candidates"]] == [DIGEST]
    # Both selections of one pair naming the same snapshot agree: it serves.
    world["selections"][1] = selection("debian-12-block", new_block, mode="Block", namespace=BLOCK)
    agreed = {f["family"]: f for f in run(world)["families"]}["debian-12"]["serving"]["Block"]
    assert (agreed["snapshot"], agreed["held"], agreed["conflicts"]) == (new_block, False, [])


def test_overridden_namespaces(world):
    moved = [snap(OLD, namespace="os-goldens"), snap(NEW, namespace="os-goldens", active=True)]
    moved.append(snap("golden-debian-12-block-1", namespace="os-block", mode="Block"))
    world["snapshots"] = moved + world["snapshots"][2:]
    world["selections"] = [selection("pin", OLD, namespace="os-goldens")]
    result = run(world, namespaces=inv.golden_namespaces("os-goldens", "os-block"))
    serving = result["families"][0]["serving"]
    assert (serving["Filesystem"]["snapshot"], serving["Filesystem"]["namespace"]) == (OLD, "os-goldens")
    assert serving["Filesystem"]["path"] == "selection"
    assert serving["Block"]["snapshot"] == "golden-debian-12-block-1"
    fs_candidates = [c for c in result["families"][0]["candidates"] if c["mode"] == "Filesystem"]
    assert [c["namespace"] for c in fs_candidates] == ["os-goldens", "os-goldens"]
    assert all(c["problems"] == [] for c in fs_candidates)
    # With the defaults the moved goldens are not goldens at all.
    default = run(world)
    assert all(f["candidates"] == [] for f in default["families"])


def test_a_golden_without_a_bound_content_has_no_handle(world):
    world["contents"] = world["contents"][:1] + world["contents"][2:]
    result = run(world)
    serving = result["families"][0]["serving"]["Filesystem"]
    assert serving["snapshot"] == NEW and serving["handle"] is None
    entry = next(p for p in result["projects"] if p["namespace"] == "p-a")
    assert entry["match"] is False and "has no snapshot handle yet" in entry["reason"]


def test_project_names_may_be_given_as_strings(world):
    world["projects"] = ["p-a"]
    assert [p["namespace"] for p in run(world)["projects"]] == ["p-a"]


def test_previous_digest_recorded_on_a_selection(world):
    sel = selection("pin", NEW)
    sel["metadata"]["annotations"] = {
        "goldenimage.pipeline/previous-snapshot": OLD,
        "goldenimage.pipeline/previous-release-digest": "sha256:" + "0123456789abcdef" * 4,
    }
    world["selections"] = [sel]
    digests = {c["name"]: c["digest"] for c in run(world)["families"][0]["candidates"]}
    assert digests == {OLD: "sha256:" + "0123456789abcdef" * 4, NEW: DIGEST}


def _entry(i, match):
    return {"namespace": "p-%05d" % i, "match": match}


def test_a_condensed_report_keeps_what_needs_attention_and_counts_the_rest():
    clone = {
        "golden": "g/a",
        "count": 4,
        "pvcs": [{"name": "x"}],
        "datavolumes": [{"name": "y"}],
        "datasources": [{"name": "s"}],
        "vms": [{"name": "v"}],
    }
    result = {
        "families": [{"family": "debian-12"}],
        "conflicts": [{"type": "zero_active"}],
        "projects": [_entry(i, i % 3 != 0) for i in range(9)],
        "clones": [clone],
    }
    condensed = inv.condense(result, limit=2)
    assert [p["namespace"] for p in condensed["projects"]] == ["p-00000", "p-00003"]
    assert condensed["projects_omitted"] == 7
    assert condensed["clones"] == [dict(clone, pvcs=[], datavolumes=[], datasources=[], vms=[])]
    assert condensed["consumers_omitted"] == 4
    assert (condensed["families"], condensed["conflicts"]) == (result["families"], result["conflicts"])
    assert result["clones"][0]["pvcs"] == [{"name": "x"}]  # the full report is left as it was
