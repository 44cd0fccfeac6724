"""Every ``version_added`` in the collection (modules and their options, filters, doc fragments, role
argument specs) names a release of changelogs/changelog.yaml or the version galaxy.yml is heading for (what
is added after a release carries the next version, and galaxy.yml is raised to it), and galaxy.yml's version
is that changelog's latest release or a later one."""

from __future__ import annotations

import ast
from pathlib import Path

import yaml
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def _walk(value, where):
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "version_added":
                yield where, str(item)
            else:
                yield from _walk(item, "%s.%s" % (where, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _walk(item, "%s[%d]" % (where, i))


def _python_docs(path):
    for node in ast.parse(path.read_text()).body:
        targets = [getattr(t, "id", "") for t in getattr(node, "targets", [])]
        if isinstance(node, ast.Assign) and targets == ["DOCUMENTATION"]:
            yield yaml.safe_load(node.value.value)
        elif isinstance(node, ast.ClassDef):  # doc fragments: class attributes
            for item in node.body:
                if isinstance(item, ast.Assign) and isinstance(getattr(item.value, "value", None), str):
                    yield yaml.safe_load(item.value.value)


def every_version_added():
    for path in sorted((ROOT / "plugins").rglob("*.py")):
        if path.parent.name in ("modules", "doc_fragments", "filter", "action", "lookup", "inventory"):
            for doc in _python_docs(path):
                yield from _walk(doc, str(path.relative_to(ROOT)))
    for path in sorted((ROOT / "plugins" / "filter").glob("*.yml")):
        yield from _walk(yaml.safe_load(path.read_text()), str(path.relative_to(ROOT)))
    for path in sorted((ROOT / "roles").glob("*/meta/argument_specs.yml")):
        yield from _walk(yaml.safe_load(path.read_text()), str(path.relative_to(ROOT)))


def releases():
    return sorted(
        Version(v) for v in yaml.safe_load((ROOT / "changelogs" / "changelog.yaml").read_text())["releases"]
    )


def test_every_version_added_is_a_release_or_the_next():
    released = {str(v) for v in releases()}
    released.add(str(yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]))
    found = list(every_version_added())
    assert len(found) > 50
    wrong = sorted("%s: %s" % (where, version) for where, version in found if version not in released)
    assert wrong == [], "version_added that is neither a release nor galaxy.yml's version: %s" % wrong


def test_galaxy_version_is_the_latest_release_or_the_next():
    version = Version(yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"])
    latest = releases()[-1]
    assert version >= latest, (version, latest)
