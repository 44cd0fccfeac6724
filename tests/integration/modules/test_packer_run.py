"""packer_run with the real Packer on a template of Packer's null builder: what a second run does.

``version`` and ``validate`` change nothing however often they run. ``build`` is not idempotent by nature
and says so: each call runs Packer again and reports a change (the packer_build role asks for a build only
when the revision has no manifest yet), so the second build is a full, honest second build.
"""

from __future__ import annotations

import pytest

from tests.integration.support.runner import module_task, play, run_playbook

MODULE = "goldenimage.pipeline.packer_run"
TEMPLATE = """\
source "null" "probe" {
  communicator = "none"
}

build {
  sources = ["source.null.probe"]

  provisioner "shell-local" {
    inline = ["echo built >> builds.txt"]
  }
}
"""


@pytest.mark.suite("idempotence")
def test_reads_change_nothing_and_a_second_build_says_it_built(tmp_path):
    (tmp_path / "probe.pkr.hcl").write_text(TEMPLATE)
    common = {"chdir": str(tmp_path), "environment": {"CHECKPOINT_DISABLE": "1"}}

    def tasks(round_):
        return [
            module_task(MODULE, "version %d" % round_, command="version"),
            module_task(MODULE, "validate %d" % round_, command="validate", **common),
            module_task(MODULE, "build %d" % round_, command="build", wait_timeout=300, **common),
        ]

    run = run_playbook(play(*tasks(1), *tasks(2)))
    assert run.ok, run.log
    for round_ in (1, 2):
        assert run["version %d" % round_]["changed"] is False
        assert run["validate %d" % round_]["changed"] is False
        build = run["build %d" % round_]
        assert build["changed"] is True and build["done"] is True and build["rc"] == 0, build
    # The second build ran Packer again, as the module's docs say; nothing else was touched.
    assert (tmp_path / "builds.txt").read_text() == "built\nbuilt\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "builds.txt",
        "packer-build.log",
        "packer-build.rc",
        "probe.pkr.hcl",
    ]
