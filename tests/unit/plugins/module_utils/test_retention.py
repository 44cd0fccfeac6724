import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import retention

FS = "golden-images"
FAMILY = "debian-12"
DIGEST12 = "0123456789ab"


def name(date):
    return "golden-%s-%s-%s" % (FAMILY, date, DIGEST12)


def snap(date, namespace=FS, active=False, annotations=None, family=FAMILY, mode="Filesystem"):
    labels = {"kube-dc.com/golden-os": family, "kube-dc.com/golden-mode": mode}
    if active:
        labels["kube-dc.com/golden-active"] = "true"
    ident = name(date) if family == FAMILY else "golden-%s-%s-%s" % (family, date, DIGEST12)
    return {
        "metadata": {
            "name": ident,
            "namespace": namespace,
            "labels": labels,
            "annotations": dict(
                {
                    "kube-dc.com/os-family-id": family,
                    "kube-dc.com/os-name": "Debian 12",
                    "kube-dc.com/golden-mode": mode,
                },
                **(annotations or {}),
            ),
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "status": {"readyToUse": True, "boundVolumeSnapshotContentName": "c-" + ident},
    }


def pvc(namespace, ident, source, kind="VolumeSnapshot"):
    return {
        "metadata": {"name": ident, "namespace": namespace},
        "spec": {"dataSource": {"apiGroup": "snapshot.storage.k8s.io", "kind": kind, "name": source}},
    }


def selection(snapshot, previous=None):
    notes = {"goldenimage.pipeline/previous-snapshot": previous} if previous else {}
    return {
        "metadata": {"name": "sel", "namespace": FS, "annotations": notes},
        "spec": {"family": FAMILY, "mode": "Filesystem", "snapshotName": snapshot},
    }


def observed(**kinds):
    base = {"snapshots": [], "contents": [], "pvcs": [], "projects": [], "selections": [], "datavolumes": []}
    base.update(kinds)
    return base


DATES = ["20260101", "20260201", "20260301", "20260401", "20260501", "20260601"]


def goldens(*dates, **kw):
    return [snap(d, **kw) for d in dates]


def names(entries):
    return [e["name"] for e in entries]


def reasons(plan, date):
    return next(e["reasons"] for e in plan["kept"] if e["name"] == name(date))


# (case, observed, keep, kept dates newest first, deleted dates, a reason the case must show)
CASES = [
    (
        "newest served, keep 3 of 6",
        lambda: observed(snapshots=goldens(*DATES), selections=[selection(name("20260601"))]),
        3,
        ["20260601", "20260501", "20260401"],
        ["20260301", "20260201", "20260101"],
        ("20260601", "served"),
    ),
    (
        "served is older than the N newest: it and every newer one stay",
        lambda: observed(snapshots=goldens(*DATES), selections=[selection(name("20260201"))]),
        2,
        ["20260601", "20260501", "20260401", "20260301", "20260201"],
        ["20260101"],
        ("20260301", "staged"),
    ),
    (
        "a clone in flight keeps an old one",
        lambda: observed(
            snapshots=goldens(*DATES),
            selections=[selection(name("20260601"))],
            pvcs=[pvc(FS, "vm-1-root", name("20260101"))],
        ),
        2,
        ["20260601", "20260501", "20260101"],
        ["20260401", "20260301", "20260201"],
        ("20260101", "PersistentVolumeClaim golden-images/vm-1-root restores from it directly"),
    ),
    (
        "a selection recording an old one as its rollback target keeps it",
        lambda: observed(
            snapshots=goldens(*DATES), selections=[selection(name("20260601"), name("20260201"))]
        ),
        1,
        ["20260601", "20260201"],
        ["20260501", "20260401", "20260301", "20260101"],
        ("20260201", "rollback target"),
    ),
    (
        "a selection naming an old one: it is served, everything newer stays",
        lambda: observed(snapshots=goldens(*DATES), selections=[selection(name("20260101"))]),
        1,
        DATES[::-1],
        [],
        ("20260101", "GoldenImageSelection golden-images/sel names it in spec.snapshotName"),
    ),
    (
        "label path: the active one is served, newer candidates stay",
        lambda: observed(
            snapshots=goldens("20260101", "20260201") + [snap("20260301", active=True)] + goldens("20260401")
        ),
        1,
        ["20260401", "20260301"],
        ["20260201", "20260101"],
        ("20260401", "staged"),
    ),
    (
        "fewer goldens than keep: nothing to delete",
        lambda: observed(snapshots=goldens("20260101", "20260201"), selections=[selection(name("20260201"))]),
        3,
        ["20260201", "20260101"],
        [],
        ("20260101", "within keep (3 most recent)"),
    ),
]


@pytest.mark.parametrize("case,make,keep,kept,deleted,reason", CASES, ids=[c[0] for c in CASES])
def test_retention_keeps_what_is_used_and_the_newest(case, make, keep, kept, deleted, reason):
    planned = retention.plan(make(), FAMILY, "Filesystem", keep)
    assert names(planned["kept"]) == [name(d) for d in kept], case
    assert names(planned["delete"]) == [name(d) for d in deleted], case
    assert reason[1] in reasons(planned, reason[0]), reasons(planned, reason[0])
    assert all(e["reasons"] == [] for e in planned["delete"])


def test_a_held_pair_deletes_nothing():
    two = [
        selection(name("20260601")),
        dict(selection(name("20260501")), metadata={"name": "b", "namespace": FS}),
    ]
    planned = retention.plan(observed(snapshots=goldens(*DATES), selections=two), FAMILY, "Filesystem", 1)
    assert planned["held"] is True and planned["served"] is None
    assert planned["delete"] == []
    assert any("is held" in r for r in reasons(planned, "20260101"))


def test_other_families_and_modes_are_not_counted():
    other = goldens(*DATES, family="ubuntu-24-04")
    block = goldens(*DATES, namespace="golden-images-block", mode="Block")
    planned = retention.plan(
        observed(snapshots=goldens(*DATES[:2]) + other + block, selections=[selection(name("20260201"))]),
        FAMILY,
        "filesystem",
        1,
    )
    assert names(planned["kept"]) == [name("20260201")]
    assert names(planned["delete"]) == [name("20260101")]


def test_a_clone_that_starts_after_the_plan_stops_the_delete():
    before = observed(snapshots=goldens(*DATES[:3]), selections=[selection(name("20260301"))])
    planned = retention.plan(before, FAMILY, "Filesystem", 1)
    assert names(planned["delete"]) == [name("20260201"), name("20260101")]
    after = dict(before, pvcs=[pvc(FS, "new-vm", name("20260101"))])
    fresh = retention.plan(after, FAMILY, "Filesystem", 1)
    assert retention.still_deletable(fresh, name("20260101")) is None
    assert retention.fresh_entry(fresh, name("20260101"))["consumers"][0]["name"] == "new-vm"
    assert retention.still_deletable(fresh, name("20260201"))["name"] == name("20260201")


@pytest.mark.parametrize("keep", [0, -1, True, 1.5, None])
def test_keep_must_be_a_positive_integer(keep):
    with pytest.raises(Refusal) as exc:
        retention.validate_keep(keep)
    assert exc.value.msg.startswith("option keep: ")
    assert "positive integer" in exc.value.msg


def test_a_positive_keep_passes():
    assert retention.validate_keep(3) == 3
