"""baked_image's wait for the import talks: a slow import on the lab prints a line every round, with the
phase, the percent and the time since the task began, and ends with the same result as a quick one."""

from __future__ import annotations

import re

import pytest

from tests.integration.modules.test_baked_image import catalog_of, play, task
from tests.integration.support.runner import run_playbook

LINE = re.compile(r"VirtualMachineImage (\S+): phase (\w+), progress (\d+)% after ([\d.]+)s")


@pytest.mark.slow
@pytest.mark.lab_only
def test_a_slow_import_prints_progress_every_round_and_ends_with_the_whole_result(
    lab, kube_client, kube_namespace, mirror, qcow2, monkeypatch
):
    from tests.lab.controllers.harvester import RATE_ENV

    # The lab runs in this process: the download takes about 20 s, rounds of 2 s (plus a module start-up
    # each, which a loaded machine stretches: the test counts lines per round, never seconds).
    monkeypatch.setenv(RATE_ENV, str(max(1, qcow2.stat().st_size // 20)))
    base = dict(
        name="v20261202-2404",
        namespace=kube_namespace,
        url=mirror["url"],
        checksum=mirror["sha512"],
        os_version="24.04",
        pg_versions=["16", "17"],
        replicas=3,
        catalog={"namespace": kube_namespace, "name": "catalog"},
        wait_timeout=120,
        wait_sleep=1,
        report_every=2,
    )
    image = "ubuntu-2404-postgres-v20261202-2404"
    run = run_playbook(play(task("slow", **base)), env=lab.env(), diff=True)
    assert run.ok, run.log
    slow = run["slow"]
    found = [LINE.search(line) for line in slow["lines"]]
    assert all(found), slow["lines"]
    seen = [(m.group(2), int(m.group(3)), float(m.group(4))) for m in found]
    assert {m.group(1) for m in found} == {f"{kube_namespace}/{image}"}
    importing = [s for s in seen if s[0] == "importing"]
    assert len(importing) >= 2, seen
    assert any(0 < percent < 100 for _phase, percent, _elapsed in importing), seen
    assert seen[-1][:2] == ("imported", 100), seen
    elapsed = [s[2] for s in seen]
    assert elapsed == sorted(elapsed) and elapsed[-1] >= 4, seen
    for line in slow["lines"]:
        assert line in run.stdout, run.stdout
    assert slow["rounds"] == len(slow["lines"]) >= 3
    # The result of a slow import is that of a quick one.
    assert slow["changed"] is True and slow["done"] is True and "resume" not in slow
    assert slow["progress"] == 100 and slow["replicas_in_force"] == 3
    uid = slow["image"]["metadata"]["uid"]
    assert slow["storage_class"] == f"lh-{uid}"
    assert slow["catalog_changed"] is True
    assert slow["revision"]["imported"] is True and slow["revision"]["storage_class"] == f"lh-{uid}"
    assert [d.get("before_header") for d in slow["diff"]] == [
        f"VirtualMachineImage {kube_namespace}/{image}",
        f"catalog ConfigMap {kube_namespace}/catalog",
    ]
    assert slow["progress_seen"][0] == 0 and slow["progress_seen"][-1] == 100
    assert len(slow["progress_seen"]) > 2, slow["progress_seen"]
    assert catalog_of(kube_client, kube_namespace)["images"]["v20261202-2404"]["imported"] is True

    # Once imported, the task again is one round that writes nothing.
    lab.clear_audit()
    again = run_playbook(play(task("again", **base)), env=lab.env(), diff=True)
    assert again.ok, again.log
    assert again["again"]["changed"] is False and again["again"]["rounds"] == 1
    assert lab.mutating_requests() == []


@pytest.mark.lab_only
def test_later_rounds_write_nothing_and_the_time_out_counts_every_round(
    lab, kube_client, kube_namespace, mirror, qcow2, monkeypatch
):
    """A frozen import: the rounds after the first only read, the catalog is not written, and the time-out
    names what was pending and the whole wait, not the last round."""
    from tests.lab.controllers.harvester import RATE_ENV

    monkeypatch.setenv(RATE_ENV, "1")  # a byte a second: the import will not finish in the test
    base = dict(
        name="v20261203-2404",
        namespace=kube_namespace,
        url=mirror["url"],
        checksum=mirror["sha512"],
        os_version="24.04",
        pg_versions=["16"],
        catalog={"namespace": kube_namespace, "name": "catalog"},
        wait_timeout=12,
        wait_sleep=1,
        report_every=2,
    )
    lab.clear_audit()
    run = run_playbook(play(task("frozen", ignore_errors=True, **base)), env=lab.env())
    entry = run.entry("frozen")
    assert entry["status"] == "ignored", run.log
    frozen = entry["result"]
    assert (
        "waiting for VirtualMachineImage %s/ubuntu-2404-postgres-v20261203-2404 to be Imported=True"
        % (kube_namespace)
        in frozen["msg"]
    ), frozen["msg"]
    total = float(re.search(r"timed out after ([\d.]+)s", frozen["msg"]).group(1))
    assert total >= 11, frozen["msg"]
    # Each round is one module run, seconds apiece under load: at least one round after the first.
    assert frozen["rounds"] >= 2 and len(frozen["lines"]) == frozen["rounds"] - 1, frozen
    writes = [(r["verb"], r["resource"]) for r in lab.mutating_requests() if r["namespace"] == kube_namespace]
    assert writes == [("create", "virtualmachineimages")], writes
