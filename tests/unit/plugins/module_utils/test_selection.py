import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import golden as g
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import selection as s

DIGEST = "sha256:f0dea74da9c54ba4728b2f4841316490cadd66b7ab1ed10de46549d457eb5018"
OLD_DIGEST = "sha256:" + "0123456789abcdef" * 4


def golden(name, family="deb", mode="Filesystem", ready=True, active=False, namespace=None, content=None):
    labels = {g.FAMILY_LABEL: family, g.MODE_KEY: mode}
    if active:
        labels[g.ACTIVE_LABEL] = "true"
    return {
        "apiVersion": g.SNAPSHOT_API_VERSION,
        "kind": g.SNAPSHOT_KIND,
        "metadata": {
            "name": name,
            "namespace": namespace or g.NAMESPACES[g.normalize_mode(mode)],
            "labels": labels,
            "annotations": {g.FAMILY_ANNOTATION: family, g.OS_NAME_ANNOTATION: "Debian", g.MODE_KEY: mode},
        },
        "status": {"readyToUse": ready, "boundVolumeSnapshotContentName": content or "c-" + name},
    }


def selection(name, snapshot, family="deb", mode="Filesystem", namespace="golden-images", **annotations):
    return {
        "apiVersion": s.SELECTION_API_VERSION,
        "kind": s.SELECTION_KIND,
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {"family": family, "mode": mode, "snapshotName": snapshot},
    }


def content(name, handle, pre_provisioned=True, ref_uid=None):
    if pre_provisioned:
        spec = {"source": {"snapshotHandle": handle}, "volumeSnapshotRef": {"uid": ref_uid}}
        return {"metadata": {"name": name}, "spec": spec}
    return {"metadata": {"name": name}, "spec": {"source": {}}, "status": {"snapshotHandle": handle}}


# Modes and names ---------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["Filesystem", "filesystem", "FILESYSTEM", " FileSystem "])
def test_mode_casing_is_normalized(raw):
    assert s.normalize_mode(raw) == "Filesystem"
    assert s.selection_mode(selection("x", "a", mode=raw)) == "Filesystem"


def test_a_mode_that_is_no_mode():
    assert s.selection_mode(selection("x", "a", mode="fs")) is None
    with pytest.raises(g.GoldenError):
        s.normalize_mode("fs")


@pytest.mark.parametrize(
    "family,mode,name",
    [
        ("deb", "block", "deb-block"),
        ("windows-11-golden", "Filesystem", "windows-11-golden-filesystem"),
        ("Ubuntu_24.04", "Block", "ubuntu-24.04-block"),
    ],
)
def test_selection_name(family, mode, name):
    assert s.selection_name(family, mode) == name


def test_project_snapshot_name_per_mode():
    assert s.project_snapshot_name("deb", "filesystem") == "golden-deb"
    assert s.project_snapshot_name("deb", "BLOCK") == "golden-deb-block"


# Finding selections and goldens ------------------------------------------------------------------


def test_selections_for_compares_mode_case_insensitively_and_family_exactly():
    sels = [
        selection("a", "x", mode="filesystem"),
        selection("b", "x", mode="Block"),
        selection("c", "x", family="Deb"),
        selection("d", "x", mode="fs"),
    ]
    assert [x["metadata"]["name"] for x in s.selections_for(sels, "deb", "Filesystem")] == ["a"]
    assert [x["metadata"]["name"] for x in s.selections_for(sels, "deb", "block")] == ["b"]


def test_goldens_for_keeps_list_order_and_uses_the_namespace_mode():
    items = [
        golden("b", mode="Filesystem"),
        golden("other", family="arch"),
        golden("a"),
        golden("blk", mode="Block"),
        # Labelled Block but in the Filesystem namespace: the consumer lists it as Filesystem.
        golden("odd", mode="Block", namespace="golden-images"),
    ]
    assert [x["metadata"]["name"] for x in s.goldens_for(items, "deb", "Filesystem")] == ["b", "a", "odd"]
    assert [x["metadata"]["name"] for x in s.goldens_for(items, "deb", "Block")] == ["blk"]


def test_find_golden_is_limited_to_the_mode_namespace():
    items = [golden("a", mode="Block")]
    assert s.find_golden(items, "a", "Filesystem") is None
    assert s.find_golden(items, "a", "block") is items[0]


# Preconditions -------------------------------------------------------------------------------------


def test_a_valid_candidate_has_no_problems():
    assert s.candidate_problems(golden("a"), "deb", "filesystem") == []
    s.refuse_candidate(golden("a"), "a", "golden-images", "deb", "Filesystem")


@pytest.mark.parametrize(
    "obj,needle",
    [
        (None, "VolumeSnapshot golden-images/a not found"),
        (golden("a", ready=False), "not Ready"),
        (golden("a", family="arch"), "family is arch, expected deb"),
        (golden("a", mode="Block", namespace="golden-images"), "mode is Block, expected Filesystem"),
    ],
)
def test_every_refusal_names_the_reason(obj, needle):
    with pytest.raises(s.SelectionError) as err:
        s.refuse_candidate(obj, "a", "golden-images", "deb", "Filesystem")
    assert needle in str(err.value)
    assert "writing nothing" in str(err.value)
    assert "no sibling is picked" in str(err.value)


def test_serving_problems_are_the_consumer_checks_only():
    broken = golden("a")
    del broken["metadata"]["annotations"][g.OS_NAME_ANNOTATION]
    assert s.serving_problems(broken, "deb", "Filesystem") == []
    assert s.candidate_problems(broken, "deb", "Filesystem")  # promotion is stricter
    assert s.serving_problems(None, "deb", "Filesystem") == ["snapshot not found"]
    assert s.serving_problems(golden("a", ready=False, family="x"), "deb", "Block") == [
        "not Ready: status.readyToUse is False",
        "family is x, not deb",
        "mode is Filesystem, not Block",
    ]


# Conflicts and idle selections ---------------------------------------------------------------------


def test_two_selections_naming_different_snapshots_conflict_and_are_named():
    sels = [selection("one", "a"), selection("two", "b", mode="filesystem")]
    conflict = s.selection_conflict(sels, "deb", "Filesystem")
    assert conflict["type"] == s.TWO_SELECTIONS
    assert conflict["names"] == ["one", "two"]
    assert "golden-images/one names a" in conflict["message"]
    assert "golden-images/two names b" in conflict["message"]
    with pytest.raises(s.SelectionError) as err:
        s.governing_selection(sels, "deb", "Filesystem")
    assert str(err.value).startswith("refusing to write: 2 GoldenImageSelections govern deb/Filesystem")


def test_two_selections_naming_the_same_snapshot_agree():
    sels = [selection("one", "a"), selection("two", "a")]
    assert s.selection_conflict(sels, "deb", "Filesystem") is None
    assert s.governing_selection(sels, "deb", "Filesystem")["metadata"]["name"] == "one"
    assert s.governing_selection([], "deb", "Filesystem") is None


def test_a_selection_matching_no_golden_governs_nothing():
    goldens = [golden("a")]
    typo = selection("typo", "a", family="debian")
    bad_mode = selection("bad", "a", mode="fs")
    block = selection("blk", "a", mode="block")
    fine = selection("fine", "a", mode="FILESYSTEM")
    assert s.governs_nothing(typo, goldens)
    assert s.governs_nothing(bad_mode, goldens)
    assert s.governs_nothing(block, goldens)
    assert not s.governs_nothing(fine, goldens)
    idle = s.idle_selections([typo, bad_mode, block, fine], goldens)
    assert [i["name"] for i in idle] == ["typo", "bad", "blk"]
    assert "mode 'fs' is neither Filesystem nor Block" in idle[1]["message"]
    assert "no golden of family debian in mode Filesystem" in idle[0]["message"]
    assert all("governs nothing" in i["message"] for i in idle)


# Resolution ----------------------------------------------------------------------------------------


def test_selection_path_serves_the_selected_snapshot():
    goldens = [golden("a", active=True), golden("b")]
    got = s.resolve_serving(
        goldens, [selection("deb-filesystem", "b", mode="filesystem")], "deb", "Filesystem"
    )
    assert (got["snapshot"], got["path"], got["held"], got["conflicts"]) == ("b", "selection", False, [])
    assert got["selection"] == "deb-filesystem"
    assert "selects b" in got["reason"]


@pytest.mark.parametrize(
    "goldens,needle",
    [
        ([golden("a")], "snapshot not found"),
        ([golden("a"), golden("b", ready=False)], "not Ready"),
    ],
)
def test_a_broken_selection_skips_the_family_and_never_falls_back(goldens, needle):
    got = s.resolve_serving(goldens, [selection("sel", "b")], "deb", "Filesystem")
    assert got["snapshot"] is None
    assert got["path"] == "selection"
    assert got["held"] is True
    assert got["conflicts"][0]["type"] == s.BROKEN_SELECTION
    assert needle in got["reason"]
    assert "projects keep the copy they have" in got["reason"]


def test_a_selected_snapshot_of_another_family_is_not_served():
    goldens = [golden("a"), golden("b", family="arch")]
    got = s.resolve_serving(goldens, [selection("sel", "b")], "deb", "Filesystem")
    assert got["snapshot"] is None and got["held"] is True
    assert "family is arch, not deb" in got["reason"]


def test_conflicting_selections_hold_the_family():
    goldens = [golden("a"), golden("b")]
    got = s.resolve_serving(goldens, [selection("one", "a"), selection("two", "b")], "deb", "Filesystem")
    assert got["snapshot"] is None and got["held"] is True and got["path"] == "selection"
    assert got["conflicts"][0]["type"] == s.TWO_SELECTIONS


def test_an_idle_selection_leaves_the_label_path_in_charge():
    goldens = [golden("a"), golden("b", active=True)]
    got = s.resolve_serving(goldens, [selection("typo", "a", mode="fs")], "deb", "Filesystem")
    assert (got["snapshot"], got["path"], got["conflicts"]) == ("b", "label", [])
    assert "labelled kube-dc.com/golden-active=true" in got["reason"]


def test_label_path_with_zero_active_takes_list_order_and_says_it_is_arbitrary():
    goldens = [golden("b"), golden("a")]
    got = s.resolve_serving(goldens, [], "deb", "Filesystem")
    assert (got["snapshot"], got["path"], got["held"]) == ("b", "label", False)
    assert [c["type"] for c in got["conflicts"]] == [s.ZERO_ACTIVE]
    assert "arbitrary and silent" in got["reason"]
    assert got["candidates"] == ["b", "a"]


def test_label_path_with_two_active_serves_the_first_anyway_and_reports_it():
    goldens = [golden("c"), golden("b", active=True), golden("a", active=True)]
    got = s.resolve_serving(goldens, [], "deb", "Filesystem")
    assert got["snapshot"] == "b"
    assert got["conflicts"][0]["type"] == s.TWO_ACTIVE
    assert got["conflicts"][0]["names"] == ["b", "a"]
    assert got["candidates"] == ["b", "a", "c"]


def test_label_path_with_one_golden_and_none_active_is_not_a_conflict():
    got = s.resolve_serving([golden("a")], [], "deb", "Filesystem")
    assert (got["snapshot"], got["conflicts"]) == ("a", [])
    assert "the only golden" in got["reason"]


def test_nothing_to_serve():
    got = s.resolve_serving([golden("a", family="arch")], [], "deb", "block")
    assert (got["snapshot"], got["path"], got["held"]) == (None, "none", False)
    assert "no golden of family deb in mode Block" in got["reason"]


# Writing a selection --------------------------------------------------------------------------------


def test_new_selection_definition_normalizes_and_records_previous():
    body = s.selection_definition(
        "deb-block", "golden-images-block", "deb", "BLOCK", "b", DIGEST[7:], ("a", None)
    )
    assert body["spec"] == {"family": "deb", "mode": "Block", "snapshotName": "b", "releaseDigest": DIGEST}
    assert body["metadata"]["annotations"] == {s.PREVIOUS_SNAPSHOT: "a"}
    plain = s.selection_definition("deb-filesystem", "golden-images", "deb", None, "b")
    assert "annotations" not in plain["metadata"] and "releaseDigest" not in plain["spec"]


def test_promotion_patch_records_what_it_replaces():
    existing = selection("sel", "a")
    existing["spec"]["releaseDigest"] = OLD_DIGEST
    patch = s.plan_selection(existing, "deb", "Filesystem", "b", DIGEST)
    assert patch == {
        "spec": {"snapshotName": "b", "releaseDigest": DIGEST},
        "metadata": {"annotations": {s.PREVIOUS_SNAPSHOT: "a", s.PREVIOUS_DIGEST: OLD_DIGEST}},
    }


def test_promotion_without_a_digest_drops_the_old_one():
    existing = selection("sel", "a")
    existing["spec"]["releaseDigest"] = OLD_DIGEST
    patch = s.plan_selection(existing, "deb", "Filesystem", "b")
    assert patch["spec"] == {"snapshotName": "b", "releaseDigest": None}
    assert patch["metadata"]["annotations"][s.PREVIOUS_DIGEST] == OLD_DIGEST


def test_selecting_the_same_snapshot_again_changes_nothing():
    existing = selection("sel", "a")
    existing["spec"]["releaseDigest"] = DIGEST
    assert s.plan_selection(existing, "deb", "filesystem", "a", DIGEST) is None
    assert s.plan_selection(existing, "deb", "Filesystem", "a") is None


def test_mode_casing_is_normalized_on_write():
    existing = selection("sel", "a", mode="filesystem")
    assert s.plan_selection(existing, "deb", "Filesystem", "a") == {"spec": {"mode": "Filesystem"}}


def test_rollback_needs_a_recorded_previous():
    with pytest.raises(s.SelectionError) as err:
        s.rollback_target(selection("sel", "a"), "GoldenImageSelection golden-images/sel")
    assert "records no previous snapshot" in str(err.value)
    assert s.PREVIOUS_SNAPSHOT in str(err.value)
    recorded = selection("sel", "b", **{s.PREVIOUS_SNAPSHOT: "a", s.PREVIOUS_DIGEST: OLD_DIGEST})
    assert s.rollback_target(recorded, "x") == ("a", OLD_DIGEST)


def test_rollback_swaps_selected_and_previous():
    recorded = selection("sel", "b", **{s.PREVIOUS_SNAPSHOT: "a"})
    recorded["spec"]["releaseDigest"] = DIGEST
    target, digest = s.rollback_target(recorded, "x")
    patch = s.plan_selection(recorded, "deb", "Filesystem", target, digest)
    assert patch["spec"] == {"snapshotName": "a", "releaseDigest": None}
    assert patch["metadata"]["annotations"] == {s.PREVIOUS_SNAPSHOT: "b", s.PREVIOUS_DIGEST: DIGEST}


# The label path --------------------------------------------------------------------------------------


def test_label_plan_removes_every_other_active_then_adds():
    goldens = [
        golden("old", active=True),
        golden("older", active=True),
        golden("new"),
        golden("x", family="y"),
    ]
    assert s.label_plan(goldens, "deb", "Filesystem", "new") == {"remove": ["old", "older"], "add": "new"}


def test_label_plan_is_empty_when_done():
    goldens = [golden("old"), golden("new", active=True)]
    assert s.label_plan(goldens, "deb", "Filesystem", "new") == {"remove": [], "add": None}


def test_label_plan_keeps_an_active_candidate_and_removes_the_other():
    goldens = [golden("old", active=True), golden("new", active=True)]
    assert s.label_plan(goldens, "deb", "Filesystem", "new") == {"remove": ["old"], "add": None}


@pytest.mark.parametrize(
    "actives,expected",
    [
        (["new"], []),
        ([], ["no golden of deb/Filesystem is active, expected new"]),
        (["old", "new"], ["2 goldens of deb/Filesystem are active (old, new), expected only new"]),
        (["old"], ["old is active in deb/Filesystem, expected new"]),
    ],
)
def test_exactly_one_active_per_family(actives, expected):
    goldens = [golden(n, active=n in actives) for n in ("old", "new")]
    assert s.active_problems(goldens, "deb", "Filesystem", "new") == expected


def test_active_golden_is_the_single_one_only():
    assert (
        s.active_golden([golden("a", active=True), golden("b")], "deb", "Filesystem")["metadata"]["name"]
        == "a"
    )
    assert s.active_golden([golden("a", active=True), golden("b", active=True)], "deb", "Filesystem") is None
    assert s.active_golden([golden("a")], "deb", "Filesystem") is None


def test_the_explanation_says_neither_state_is_safe_and_recommends_selections():
    assert "neither intermediate state is safe" in s.UNSAFE_LABEL_PATH
    assert "Prefer method: selection" in s.UNSAFE_LABEL_PATH


# Projects ----------------------------------------------------------------------------------------------


def project_snapshot(namespace, bound, seeded_from="golden-images/a", name="golden-deb", uid=None):
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or "u-" + namespace,
            "annotations": {"kube-dc.com/seeded-from": seeded_from},
        },
        "status": {"boundVolumeSnapshotContentName": bound, "readyToUse": bound is not None},
    }


def test_handles_come_from_the_content_spec_or_status():
    assert s.content_handle(content("c", "h1")) == "h1"
    assert s.content_handle(content("c", "h2", pre_provisioned=False)) == "h2"
    assert s.content_handle(None) is None
    assert s.golden_handle(golden("a", content="c-a"), [content("c-a", "h", False)]) == "h"
    assert s.golden_handle({"status": {}}, []) is None


def test_project_resolutions_compare_handles_per_namespace():
    snaps = [
        project_snapshot("p-ok", "kdc-ok"),
        project_snapshot("p-wrong", "kdc-wrong", seeded_from="golden-images/b"),
        project_snapshot("p-unbound", None),
        project_snapshot("p-nohandle", "kdc-gone"),
        project_snapshot("p-block", "kdc-ok", name="golden-deb-block"),
        project_snapshot("elsewhere", "kdc-ok"),
    ]
    contents = [content("kdc-ok", "H-a", ref_uid="u-p-ok"), content("kdc-wrong", "H-b", ref_uid="u-p-wrong")]
    projects = ["p-wrong", "p-ok", "p-unbound", "p-nohandle", "p-block", "p-empty"]
    found = s.project_resolutions(projects, snaps, contents, "deb", "Filesystem", "H-a")
    by_ns = {e["namespace"]: e for e in found}
    assert [e["namespace"] for e in found] == sorted(projects)
    assert by_ns["p-ok"]["match"] is True and by_ns["p-ok"]["handle"] == "H-a"
    assert by_ns["p-wrong"]["match"] is False
    assert by_ns["p-wrong"]["reason"] == "resolved to H-b, not the intended H-a (seeded from golden-images/b)"
    assert "not bound" in by_ns["p-unbound"]["reason"]
    assert by_ns["p-nohandle"]["reason"] == "content kdc-gone has no snapshot handle"
    assert by_ns["p-block"]["reason"].startswith("not seeded")
    assert by_ns["p-empty"]["snapshot"] is None
    assert s.unresolved(found) == ["p-block", "p-empty", "p-nohandle", "p-unbound", "p-wrong"]


def test_a_project_read_across_its_reseed_does_not_resolve():
    # The seeder re-points a copy by deleting its snapshot and content and creating both again under the
    # same names. The snapshot listed before that (uid u-old, bound) read with the content fetched after
    # it (the new handle, not bound to any snapshot yet) is no resolution: the project holds no bound copy.
    listed = project_snapshot("p", "kdc-p", uid="u-old")
    recreated = content("kdc-p", "H-new")
    found = s.project_resolution("p", listed, [recreated], "H-new")
    assert (found["match"], found["handle"], found["content"]) == (False, None, "kdc-p")
    assert found["reason"] == (
        "content kdc-p is not bound back to snapshot golden-deb (uid u-old; the content refers to no uid yet)"
    )
    # Bound to the new snapshot: only that one resolves through it.
    recreated["spec"]["volumeSnapshotRef"]["uid"] = "u-new"
    assert s.project_resolution("p", listed, [recreated], "H-new")["reason"].endswith("refers to u-new)")
    fresh = project_snapshot("p", "kdc-p", uid="u-new")
    assert s.project_resolution("p", fresh, [recreated], "H-new")["match"] is True


def test_label_path_never_serves_a_golden_that_is_not_ready():
    goldens = [golden("pending", ready=False, active=True), golden("a")]
    got = s.resolve_serving(goldens, [], "deb", "Filesystem")
    assert (got["snapshot"], got["conflicts"], got["candidates"]) == ("a", [], ["a"])


# Refusals and the rollback plan -------------------------------------------------------------------------


def test_a_promotion_names_its_snapshot():
    with pytest.raises(
        s.Refusal, match=r"^option snapshot: a promotion names the golden to serve; give snapshot"
    ):
        s.refuse_promotion_inputs(None, rollback=False)
    assert s.refuse_promotion_inputs(None, rollback=True) is None


def test_selection_method_needs_the_kind_and_label_method_needs_no_selection():
    with pytest.raises(s.Refusal, match=r"does not serve the kind .*; install it, or use method: label"):
        s.refuse_without_selection_kind("selection", served=False)
    assert s.refuse_without_selection_kind("label", served=False) is None
    with pytest.raises(s.Refusal, match="the label has no effect; use method: selection"):
        s.refuse_label_path([selection("sel", "a")], "deb", "filesystem")
    assert s.refuse_label_path([], "deb", "Filesystem") is None


def test_rollback_plan_restores_the_record_once():
    promoted = selection("sel", "b", **{s.PREVIOUS_SNAPSHOT: "a", s.PREVIOUS_DIGEST: OLD_DIGEST})
    plan = s.rollback_plan(promoted, "sel", "b")
    assert plan == {"target": "a", "digest": OLD_DIGEST, "noop": False, "reason": ""}
    patch = s.mark_change(s.plan_selection(promoted, "deb", "Filesystem", "a", OLD_DIGEST), promoted, True)
    assert patch["metadata"]["annotations"][s.ROLLED_BACK] == "true"
    # After the rollback: the record now names b, the mark says a rollback put a there.
    rolled = selection("sel", "a", **{s.PREVIOUS_SNAPSHOT: "b", s.ROLLED_BACK: "true"})
    again = s.rollback_plan(rolled, "sel", "a")
    assert again["noop"] is True and again["target"] == "a" and "already rolled back to a" in again["reason"]
    # Naming the target moves on purpose; naming what serves is a no-op; naming anything else is refused.
    assert s.rollback_plan(rolled, "sel", "a", named="b")["target"] == "b"
    assert s.rollback_plan(rolled, "sel", "a", named="a")["noop"] is True
    with pytest.raises(s.Refusal, match="the recorded previous snapshot is b, not c as given"):
        s.rollback_plan(rolled, "sel", "a", named="c")
    with pytest.raises(s.Refusal, match=r"^sel: refusing to roll back: nothing governs"):
        s.rollback_plan(None, "sel", None, missing="nothing governs")
    # The next promotion removes the mark, so the rollback after it restores again.
    promote = s.mark_change(s.plan_selection(rolled, "deb", "Filesystem", "c"), rolled, False)
    assert promote["metadata"]["annotations"][s.ROLLED_BACK] is None
    assert s.mark_change(None, rolled, False) is None


def test_a_promotion_records_what_the_projects_hold_as_the_rollback_target():
    """The selection names b, which never served (say it was broken); the projects still hold a: the
    record must name a, or a rollback would restore what no project ever ran."""
    sel = selection("sel", "b")
    patch = s.plan_selection(sel, "deb", "Filesystem", "c", previous=("a", None))
    assert patch["metadata"]["annotations"][s.PREVIOUS_SNAPSHOT] == "a"
    assert (
        s.plan_selection(sel, "deb", "Filesystem", "c")["metadata"]["annotations"][s.PREVIOUS_SNAPSHOT] == "b"
    )


def test_the_release_digest_served_is_the_one_published_with_the_golden():
    g = golden("g1")
    g["metadata"]["annotations"][s.RELEASE_DIGEST] = DIGEST
    assert s.served_digest(g, None, "g1") == DIGEST
    assert s.served_digest(g, DIGEST.upper(), "g1") == DIGEST
    with pytest.raises(
        s.Refusal, match=r"^option release_digest: it is sha256:.*published with release digest"
    ):
        s.served_digest(g, OLD_DIGEST, "g1")
    assert s.served_digest(golden("g2"), OLD_DIGEST, "g2") == OLD_DIGEST


def test_verification_line_state_and_timeout_name_what_is_pending():
    found = [
        {"namespace": "a", "match": True, "reason": "resolved to the intended handle"},
        {"namespace": "b", "match": False, "reason": "not seeded: no VolumeSnapshot for this family"},
    ]
    assert s.verification_line(found, "H", "g2", 31.04) == (
        "Projects: 1 of 2 resolved to H (snapshot g2); waiting for b after 31.0s"
    )
    assert (
        s.verification_line(found[:1], "H", "g2", 2)
        == "Projects: 1 of 1 resolved to H (snapshot g2) after 2.0s"
    )
    assert s.verification_state(found) == "b: not seeded: no VolumeSnapshot for this family"
    assert s.verification_state(found[:1]) == "all 1 resolved"
    assert s.verification_timeout(found, "H", "g2", 60, "stuck: the state did not change in 60s") == (
        "1 project(s) did not resolve to H (snapshot g2) within 60s "
        "(stuck: the state did not change in 60s): b: not seeded: no VolumeSnapshot for this family"
    )
    assert s.verification_timeout([], "H", "g2", 60, "stuck").endswith("no project namespace could be read")


def test_projects_are_verified_only_against_a_bound_handle():
    assert s.verifiable_handle("snap-123", "golden-images", "ubuntu-22-04-20260601") == "snap-123"
    with pytest.raises(s.PipelineError) as caught:
        s.verifiable_handle(None, "golden-images", "ubuntu-22-04-20260601")
    assert caught.value.msg == (
        "cannot verify projects: VolumeSnapshot golden-images/ubuntu-22-04-20260601 has no bound content "
        "with a snapshot handle"
    )


def test_a_problem_left_after_moving_the_active_label_fails():
    assert s.active_after_move([]) is None
    with pytest.raises(s.PipelineError, match=r"after moving kube-dc\.com/golden-active: two goldens active"):
        s.active_after_move(["two goldens active"])


def test_a_project_copy_bound_to_the_handle_but_not_ready_does_not_resolve():
    # The snapshot controller binds the copy whatever the driver does; until the driver confirms the
    # handle (readyToUse) no clone can be served from it.
    copy = project_snapshot("p", "kdc-p")
    copy["status"]["readyToUse"] = False
    bound = content("kdc-p", "H-a", ref_uid="u-p")
    found = s.project_resolution("p", copy, [bound], "H-a")
    assert (found["match"], found["handle"]) == (False, "H-a")
    assert found["reason"] == "bound to the intended handle, but snapshot golden-deb is not readyToUse"
    copy["status"]["error"] = {"message": "snapshot H-a not found"}
    assert s.project_resolution("p", copy, [bound], "H-a")["reason"].endswith("(snapshot H-a not found)")
    copy["status"] = {"boundVolumeSnapshotContentName": "kdc-p", "readyToUse": True}
    assert s.project_resolution("p", copy, [bound], "H-a")["match"] is True
