"""docs/collection/ is antsibull-docs' output for the collection as it is (tools/docs.sh), it has a page for
every module, role and filter, and galaxy.yml's documentation link points at its index."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "collection"


def test_docs_are_generated_from_the_collection_as_it_is(tmp_path):
    proc = subprocess.run(
        [str(ROOT / "tools" / "docs.sh"), str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fresh = {p.name: p.read_text() for p in tmp_path.glob("*.rst")}
    committed = {p.name: p.read_text() for p in DOCS.glob("*.rst")}
    assert sorted(fresh) == sorted(committed), "run tools/docs.sh"
    stale = sorted(name for name in fresh if fresh[name] != committed[name])
    assert stale == [], "out of date (run tools/docs.sh): %s" % stale


def test_every_module_role_and_filter_has_a_page_in_the_index():
    index = (DOCS / "index.rst").read_text()
    wanted = [
        p.stem + "_module.rst" for p in (ROOT / "plugins" / "modules").glob("*.py") if p.stem != "__init__"
    ]
    wanted += [
        p.name + "_role.rst"
        for p in (ROOT / "roles").iterdir()
        if (p / "meta" / "argument_specs.yml").is_file()
    ]
    wanted += [p.stem + "_filter.rst" for p in (ROOT / "plugins" / "filter").glob("*.yml")]
    assert len(wanted) > 60
    missing = [page for page in wanted if not (DOCS / page).is_file() or "<%s>" % page not in index]
    assert missing == []


def test_galaxy_documentation_points_at_the_index():
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    prefix = galaxy["repository"] + "/blob/main/"
    assert galaxy["documentation"].startswith(prefix)
    assert (ROOT / galaxy["documentation"][len(prefix) :]) == DOCS / "index.rst"
