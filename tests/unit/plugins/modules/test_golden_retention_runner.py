"""The golden_retention runner called with parameters and an observed state: it returns the result or
raises a PipelineError, never exits; the plan is observed again right before each delete."""

from __future__ import annotations

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common.errors import Refusal
from ansible_collections.goldenimage.pipeline.plugins.module_utils.golden import golden_inventory
from ansible_collections.goldenimage.pipeline.plugins.modules import golden_retention

from tests.unit.plugins.modules.test_golden_runners import FS, FakeKube, claim, defaults, golden, sel

LISTS_PER_OBSERVATION = len(golden_inventory.observation_plan(golden_inventory.golden_namespaces()))


def name(date):
    return "golden-deb-%s-0123456789ab" % date


OLDEST, OLD, SERVED = name("20260101"), name("20260201"), name("20260301")


def params(**given):
    return defaults(golden_retention.argument_spec(), family="deb", **given)


def cluster():
    return [golden(OLDEST), golden(OLD), golden(SERVED), sel(SERVED)]


class CloneStartsAfterThePlan(FakeKube):
    """A tenant starts cloning ``source`` once the plan has been observed, before the first delete."""

    def __init__(self, *args, source, **kwargs):
        super().__init__(*args, **kwargs)
        self.source, self.lists = source, 0

    def list(self, *args, **kwargs):
        self.lists += 1
        if self.lists == LISTS_PER_OBSERVATION + 1:
            self.objects.append(claim(FS, "new-vm-root", self.source))
        return super().list(*args, **kwargs)


def deletes(kube):
    return [w[3] for w in kube.writes if w[0] == "delete"]


def test_unused_older_goldens_are_deleted_and_the_served_one_stays():
    kube = FakeKube(params(keep=1), cluster())
    result = golden_retention.Retention(kube).run()
    assert deletes(kube) == [OLD, OLDEST]
    assert result["changed"] is True and result["served"] == SERVED
    assert [k["name"] for k in result["kept"]] == [SERVED]


def test_check_mode_is_the_plan_and_writes_nothing():
    kube = FakeKube(params(keep=1), cluster(), check_mode=True)
    result = golden_retention.Retention(kube).run()
    assert kube.writes == []
    assert [d["name"] for d in result["deleted"]] == [OLD, OLDEST]


def test_a_clone_that_starts_between_the_plan_and_the_delete_stops_that_delete():
    kube = CloneStartsAfterThePlan(params(keep=1), cluster(), source=OLD)
    result = golden_retention.Retention(kube).run()
    assert deletes(kube) == [OLDEST]
    assert [r["name"] for r in result["refused"]] == [OLD]
    msg = result["refused"][0]["msg"]
    assert msg.startswith("VolumeSnapshot %s/%s: refusing to delete it" % (FS, OLD)), msg
    assert "PersistentVolumeClaim %s/new-vm-root restores from it directly" % FS in msg
    assert kube.warnings == [msg]


def test_a_rerun_deletes_nothing():
    kube = FakeKube(params(keep=1), [golden(SERVED), sel(SERVED)])
    result = golden_retention.Retention(kube).run()
    assert result["changed"] is False and kube.writes == [] and result["deleted"] == []


@pytest.mark.parametrize("keep", [0, -2])
def test_a_keep_below_one_is_refused_before_any_read(keep):
    kube = FakeKube(params(keep=keep), cluster())
    with pytest.raises(Refusal, match="option keep"):
        golden_retention.Retention(kube).run()
    assert kube.writes == []
