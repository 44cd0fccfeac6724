"""NOTICE names every copyleft Python library the collection's environments install, with the licence the
library's own metadata declares: the controller's and the EE's (meta/ee-requirements.txt) and the Job
images' (images/*/requirements.txt), with everything they pull in."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COPYLEFT = re.compile(r"\b(A|L)?GPL|\bMPL|\bEPL|\bCDDL|\bEUPL|\bOSL", re.I)


def _name(requirement):
    return re.split(r"[<>=!~\[ ;(]", requirement.strip(), maxsplit=1)[0]


def declared(name):
    """The licence a distribution's metadata declares: its SPDX expression, else a short License field,
    else its classifiers."""
    meta = importlib.metadata.metadata(name)
    classifiers = [
        c.split("::")[-1].strip() for c in meta.get_all("Classifier") or [] if c.startswith("License")
    ]
    short = meta.get("License") if len(meta.get("License") or "") <= 40 else None  # not a whole licence text
    return meta.get("License-Expression") or short or " ".join(classifiers)


def installed_closure():
    """Every installed distribution the requirement files reach, by name -> declared licence."""
    files = [ROOT / "meta" / "ee-requirements.txt", *sorted((ROOT / "images").glob("*/requirements.txt"))]
    todo = [
        _name(line)
        for path in files
        for line in path.read_text().splitlines()
        if line.strip() and line[0] != "#"
    ]
    found = {}
    while todo:
        name = todo.pop()
        key = name.lower().replace("_", "-")
        if key in found:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # a platform-only dependency (sspilib is Windows-only)
        found[key] = declared(name)
        todo += [_name(r) for r in dist.requires or [] if "extra ==" not in r]
    return found


def notice_lines():
    """NOTICE's table lines: name -> licence."""
    rows = {}
    for line in (ROOT / "NOTICE").read_text().splitlines():
        match = re.match(r"^  ([A-Za-z0-9_.-]+) +([A-Za-z0-9.+-]+(?:-only|-or-later)?|MPL-2\.0) +", line)
        if match:
            rows[match.group(1).lower()] = match.group(2)
    return rows


def test_notice_lists_every_copyleft_library_with_its_declared_licence():
    closure = installed_closure()
    assert "dissect.ntfs" in closure and "kubernetes" in closure
    copyleft = {name: licence for name, licence in closure.items() if COPYLEFT.search(licence)}
    assert {"dissect.ntfs", "pycdlib", "certifi"} <= set(copyleft)
    rows = notice_lines()
    missing = sorted(set(copyleft) - set(rows))
    assert missing == [], "copyleft libraries not in NOTICE: %s" % {n: copyleft[n] for n in missing}
    differ = {n: (rows[n], copyleft[n]) for n in copyleft if rows[n] != copyleft[n]}
    assert differ == {}, "NOTICE vs the installed metadata: %s" % differ


def test_notice_ships_in_the_tarball():
    import yaml

    ignored = yaml.safe_load((ROOT / "galaxy.yml").read_text())["build_ignore"]
    assert "NOTICE" not in ignored
