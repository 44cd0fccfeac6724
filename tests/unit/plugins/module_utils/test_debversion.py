import subprocess

import pytest
from ansible_collections.goldenimage.pipeline.plugins.module_utils.baked import debversion

# (a, b, expected compare(a, b)); checked against dpkg --compare-versions when dpkg is installed.
TABLE = [
    ("1.0", "1.0", 0),
    ("1.0", "1.1", -1),
    ("1.10", "1.9", 1),
    ("1.0-1", "1.0-2", -1),
    ("1.0", "1.0-0", 0),
    ("1:1.0", "2.0", 1),
    ("0:1.0", "1.0", 0),
    ("1.0~rc1", "1.0", -1),
    ("1.0~~", "1.0~", -1),
    ("1.0~", "1.0", -1),
    ("1.0", "1.0a", -1),
    ("1.0a", "1.0+", -1),
    ("1.0+dfsg", "1.0", 1),
    ("1.0.0", "1.0", 1),
    ("2.36-0ubuntu4", "2.36-0ubuntu4.1", -1),
    ("16.4-1.pgdg22.04+1", "16.4-1.pgdg22.04+2", -1),
    ("16.10-1.pgdg22.04+1", "16.9-1.pgdg22.04+1", 1),
    ("16.4-0ubuntu0.22.04.1", "16.4-1.pgdg22.04+1", -1),
    ("12ubuntu4.6", "12ubuntu4.7", -1),
    ("3.0.2-0ubuntu1.15", "3.0.2-0ubuntu1.10", 1),
    ("1:9.2p1-2ubuntu0.1", "1:8.9p1-3ubuntu0.10", 1),
    ("2:1.0", "1:9.9", 1),
    ("1.2.3-a.b-c", "1.2.3-a.b-d", -1),
    ("5.15.0-91.101", "5.15.0-101.111", -1),
    ("1.0-1~bpo1", "1.0-1", -1),
]


@pytest.mark.parametrize("a, b, expected", [row for row in TABLE if row[1] is not None])
def test_compare(a, b, expected):
    assert debversion.compare(a, b) == expected
    assert debversion.compare(b, a) == -expected  # pylint: disable=arguments-out-of-order
    assert debversion.newer(a, b) is (expected > 0)


@pytest.mark.parametrize("a, b, expected", [row for row in TABLE if row[1] is not None])
def test_the_table_agrees_with_dpkg(a, b, expected):
    op = {-1: "lt", 0: "eq", 1: "gt"}[expected]
    assert subprocess.run(["dpkg", "--compare-versions", a, op, b], check=False).returncode == 0, (a, op, b)


@pytest.mark.parametrize("bad", ["", "a1.0", "1.0-", "x:1.0", "1.0 2", "1_0", "-1"])
def test_invalid_versions_are_refused(bad):
    with pytest.raises(debversion.VersionError):
        debversion.parse(bad)


def test_parse():
    assert debversion.parse("1:2.3-4ubuntu0.1") == (1, "2.3", "4ubuntu0.1")
    assert debversion.parse("2.3-4-5") == (0, "2.3-4", "5")
    assert debversion.parse("2.3") == (0, "2.3", "")
