"""The layering rule of docs/DESIGN.md, checked by parsing the imports of every file in plugins/.

* pure files (plain names in ``plugins/module_utils/``, every ``plugins/filter/`` and
  ``plugins/doc_fragments/`` file) import no client library (``kubernetes``, ``kubernetes.core``,
  ``boto3``, ``botocore``, ``amazon.aws``, ``urllib3``), no ``subprocess``/``socket``, no
  ``ansible.module_utils.urls``, no ``_``-prefixed adapter;
* modules and action plugins import no ``boto3``/``botocore``/``socket``/``subprocess``: the I/O they need
  lives in an adapter;
* nothing sleeps but the wait runner (``module_utils/_wait.py``) and the retry layer
  (``module_utils/_retry.py``): no other file names ``time.sleep``, not even to pass it on; a wait hands
  its hooks to the runner, a pause that is not a poll goes through ``_wait.nap``.
"""

from __future__ import annotations

import ast
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
PLUGINS = ROOT / "plugins"

# Top-level names (or dotted prefixes) a pure file must not import.
PURE_FORBIDDEN = (
    "kubernetes",
    "boto3",
    "botocore",
    "urllib3",
    "subprocess",
    "socket",
    "ansible.module_utils.urls",
    "ansible_collections.kubernetes",
    "ansible_collections.amazon",
)
# What a module or an action plugin must not import.
MODULE_FORBIDDEN = ("boto3", "botocore", "socket", "subprocess")
OWN = "ansible_collections.goldenimage.pipeline.plugins."

# The only files that may sleep: the wait runner (every poll, every pause that is not a poll) and the
# retry layer (the pause between two attempts of one request).
SLEEPERS = ("plugins/module_utils/_wait.py", "plugins/module_utils/_retry.py")
SLEEPS = "sleeps outside the wait runner"

# Violations in the current tree, each with the change that removes it. The test fails when a listed
# violation is gone (shrink the list) and when a new one appears.
ALLOWED = {
    # Their request retries move to the retry layer (_retry.py).
    ("plugins/module_utils/_kube.py", SLEEPS),
    ("plugins/module_utils/_s3.py", SLEEPS),
    # The export Job's own program (run in its pod, with none of module_utils): its hand-written request
    # retries and upload pool go with its move to boto3.
    ("plugins/module_utils/_export_cli.py", SLEEPS),
}


def kind_of(rel):
    """pure, adapter, module, action or other for a path relative to the repository root."""
    parts = pathlib.PurePosixPath(rel).parts
    if len(parts) < 3 or parts[0] != "plugins" or not parts[-1].endswith(".py"):
        return "other"
    folder, name = parts[1], parts[-1]
    if name == "__init__.py":
        return "other"
    if folder == "module_utils":
        return "adapter" if name.startswith("_") else "pure"
    if folder in ("filter", "doc_fragments"):
        return "pure"
    if folder == "plugin_utils":
        return "adapter" if name.startswith("_") else "pure"
    if folder == "modules":
        return "module"
    if folder == "action":
        return "action"
    return "other"


def _imported(tree):
    """Every dotted name a file imports, with ``from x import y`` giving both ``x`` and ``x.y``."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names.extend("%s.%s" % (node.module, alias.name) for alias in node.names)
    return names


def _matches(name, prefix):
    return name == prefix or name.startswith(prefix + ".")


def _sleeps(tree):
    """Uses of time.sleep (a call, or the function handed on as ``sleeper=time.sleep``), whether spelled
    ``time.sleep``, ``t.sleep`` after ``import time as t`` or ``sleep`` after ``from time import sleep``."""
    time_aliases, sleep_aliases = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            time_aliases.update(a.asname or a.name for a in node.names if a.name == "time")
        elif isinstance(node, ast.ImportFrom) and node.module == "time":
            sleep_aliases.update(a.asname or a.name for a in node.names if a.name == "sleep")
    found = len(sleep_aliases)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "sleep":
            if isinstance(node.value, ast.Name) and node.value.id in time_aliases:
                found += 1
        elif isinstance(node, ast.Name) and node.id in sleep_aliases:
            found += 1
    return found


def violations(path, rel):
    """The layering rules ``path`` breaks, as short phrases ("imports subprocess", "calls time.sleep")."""
    kind = kind_of(rel)
    if kind not in ("pure", "module", "action", "adapter"):
        return []
    tree = ast.parse(pathlib.Path(path).read_text(), filename=str(path))
    sleeps = [SLEEPS] if _sleeps(tree) and rel not in SLEEPERS else []
    if kind == "adapter":
        return sleeps
    names = _imported(tree)
    found = []
    forbidden = PURE_FORBIDDEN if kind == "pure" else MODULE_FORBIDDEN
    for prefix in forbidden:
        if any(_matches(n, prefix) for n in names):
            found.append("imports %s" % prefix)
    if kind == "pure":
        for name in names:
            if name.startswith(OWN):
                last = name[len(OWN) :].split(".")
                if any(part.startswith("_") for part in last[1:]):
                    found.append("imports adapter %s" % name[len(OWN) :])
    return sorted(set(found + sleeps))


def tree_violations():
    found = set()
    for path in sorted(PLUGINS.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        found.update((rel, v) for v in violations(path, rel))
    return found


def test_plugins_keep_the_layering_rule():
    found = tree_violations()
    new = sorted(found - ALLOWED)
    assert not new, "layering rule broken (see docs/DESIGN.md): %s" % new


def test_allow_list_only_names_live_violations():
    gone = sorted(ALLOWED - tree_violations())
    assert not gone, "fixed, remove from ALLOWED: %s" % gone


def test_every_plugin_file_has_a_layer():
    unknown = [
        p.relative_to(ROOT).as_posix()
        for p in PLUGINS.rglob("*.py")
        if p.name != "__init__.py" and kind_of(p.relative_to(ROOT).as_posix()) == "other"
    ]
    assert unknown == []


# The checker itself, on files it is shown.


@pytest.mark.parametrize(
    "source, expected",
    [
        ("import subprocess\n", ["imports subprocess"]),
        ("from subprocess import run\n", ["imports subprocess"]),
        ("def f():\n    import socket\n", ["imports socket"]),
        ("import kubernetes.client\n", ["imports kubernetes"]),
        ("from botocore.config import Config\n", ["imports botocore"]),
        (
            "from ansible_collections.kubernetes.core.plugins.module_utils.k8s.core import requires\n",
            ["imports ansible_collections.kubernetes"],
        ),
        (
            "from ansible_collections.goldenimage.pipeline.plugins.module_utils import _kube\n",
            ["imports adapter module_utils._kube"],
        ),
        (
            "from ansible_collections.goldenimage.pipeline.plugins.module_utils._wait import wait_for\n",
            ["imports adapter module_utils._wait", "imports adapter module_utils._wait.wait_for"],
        ),
        ("import time\n\ndef f():\n    time.sleep(1)\n", ["sleeps outside the wait runner"]),
        ("import time as t\nt.sleep(1)\n", ["sleeps outside the wait runner"]),
        ("from time import sleep as nap\nnap(1)\n", ["sleeps outside the wait runner"]),
        ("import time\n\ndef f(sleeper=time.sleep):\n    sleeper(1)\n", ["sleeps outside the wait runner"]),
        ("import time\nstart = time.monotonic()\n", []),
        ("import re\nfrom ansible_collections.goldenimage.pipeline.plugins.module_utils import kinds\n", []),
        ("import subprocessing_helpers\n", []),
    ],
)
def test_checker_on_a_pure_file(tmp_path, source, expected):
    path = tmp_path / "pure.py"
    path.write_text(source)
    assert violations(path, "plugins/module_utils/pure.py") == expected


def test_checker_fails_the_tree_test_when_a_pure_file_imports_subprocess(tmp_path, monkeypatch):
    plugins = tmp_path / "plugins" / "module_utils"
    plugins.mkdir(parents=True)
    (plugins / "clean.py").write_text("import re\n")
    (plugins / "_adapter.py").write_text("import subprocess\n")  # adapters may
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PLUGINS", tmp_path / "plugins")
    monkeypatch.setattr(sys.modules[__name__], "ALLOWED", set())
    test_plugins_keep_the_layering_rule()
    (plugins / "clean.py").write_text("import re\nimport subprocess\n")
    with pytest.raises(AssertionError, match=r"plugins/module_utils/clean\.py.*imports subprocess"):
        test_plugins_keep_the_layering_rule()


def test_checker_on_modules(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("import boto3\nfrom ansible_collections.x import _kube\n")
    # Modules may use adapters; they may not hold a client library or a socket.
    assert violations(path, "plugins/modules/m.py") == ["imports boto3"]
    assert violations(path, "plugins/action/m.py") == ["imports boto3"]
    # Adapters are not checked by this rule.
    assert violations(path, "plugins/module_utils/_m.py") == []


@pytest.mark.parametrize(
    "source",
    [
        "import time\n\nwhile True:\n    time.sleep(1)\n",
        "import time\n\n\ndef poll(sleeper=time.sleep):\n    sleeper(1)\n",
        "from time import sleep\n",
    ],
)
def test_only_the_wait_runner_sleeps(tmp_path, source):
    path = tmp_path / "m.py"
    path.write_text(source)
    for rel in (
        "plugins/modules/m.py",
        "plugins/action/m.py",
        "plugins/module_utils/_m.py",
        "plugins/module_utils/_kube.py",  # an adapter's retry pause too: it belongs to the retry layer
        "plugins/plugin_utils/_progress.py",
    ):
        assert violations(path, rel) == [SLEEPS], rel
    # The runner itself, and the retry layer.
    for rel in SLEEPERS:
        assert violations(path, rel) == [], rel
