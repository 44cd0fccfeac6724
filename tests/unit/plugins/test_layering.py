"""The layering rule of docs/DESIGN.md, checked by parsing the imports of every file in plugins/.

* every file of ``plugins/module_utils/`` lives in one of the packages of ``PACKAGES`` (a domain, or a
  backend that adapters of several domains share), each described in docs/DESIGN.md;
* pure files (plain names in ``plugins/module_utils/<package>/``, every ``plugins/filter/`` and
  ``plugins/doc_fragments/`` file) import no client library (``kubernetes``, ``kubernetes.core``,
  ``boto3``, ``botocore``, ``amazon.aws``, ``urllib3``), no ``subprocess``/``socket``, no
  ``ansible.module_utils.urls``, no ``_``-prefixed adapter;
* modules and action plugins import no ``boto3``/``botocore``/``socket``/``subprocess``: the I/O they need
  lives in an adapter;
* nothing sleeps but the wait runner (``module_utils/common/_wait.py``) and the retry layer
  (``module_utils/common/_retry.py``): no pure file, module or action plugin names ``time.sleep`` (not even to
  pass it on), and any other adapter only with a reason in ``SLEEPS``;
* no adapter loops over attempts but the retry layer (and the wait runner, whose rounds ride out a
  transient read): a ``while True`` (or a ``while`` on an attempt count) whose ``except`` goes round
  again, or a ``for`` over ``range(...)`` or named for attempts that goes round on an error or stops
  early on success, is a hand-written retry loop, allowed only with a reason in ``RETRY_LOOPS``.
"""

from __future__ import annotations

import ast
import pathlib
import re
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
# The packages of plugins/module_utils (docs/DESIGN.md, "Where a file goes"): the domains named after the
# seeds' jobs, and the backends their adapters share.
PACKAGES = {
    "common": "backend",
    "kube": "backend",
    "s3": "backend",
    "disk": "backend",
    "golden": "domain",
    "windows": "domain",
    "bucket": "domain",
    "baked": "domain",
    "repave": "domain",
    "workers": "domain",
    "microvm": "domain",
    "provenance": "domain",
}

# The adapters that sleep outside the wait runner, each with why its sleep is not a wait.
WAIT_RUNNER = "plugins/module_utils/common/_wait.py"
RETRY_LAYER = "plugins/module_utils/common/_retry.py"
SLEEPS = {
    RETRY_LAYER: "the pause between two attempts of one request (the one retry layer)",
}
# The adapters that loop over attempts outside the retry layer, each with why.
RETRY_LOOPS = {}
ATTEMPT_NAME = re.compile(r"(^|_)(attempts?|retry|retries|tries|tried)($|_)")

# Violations in the current tree, each with the change that removes it. The test fails when a listed
# violation is gone (shrink the list) and when a new one appears.
# Known violations, each with the follow-up that removes it (none today: the list only shrinks).
ALLOWED: set = set()


def kind_of(rel):
    """pure, adapter, module, action or other for a path relative to the repository root."""
    parts = pathlib.PurePosixPath(rel).parts
    if len(parts) < 3 or parts[0] != "plugins" or not parts[-1].endswith(".py"):
        return "other"
    folder, name = parts[1], parts[-1]
    if name == "__init__.py":
        return "other"
    if folder == "module_utils":
        if len(parts) != 4 or parts[2] not in PACKAGES:
            return "other"
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


def _names_an_attempt(node):
    return any(isinstance(n, ast.Name) and ATTEMPT_NAME.search(n.id) for n in ast.walk(node))


def _counted(loop):
    """Whether a ``for`` goes over a count: ``range(...)``, or a loop variable named for attempts."""
    if _names_an_attempt(loop.target):
        return True
    it = loop.iter
    return isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"


def _endless(loop):
    """Whether a ``while`` runs until something inside ends it, or counts attempts."""
    test = loop.test
    return (isinstance(test, ast.Constant) and test.value is True) or _names_an_attempt(test)


def _own(loop):
    """The nodes of a loop's body, without those of a loop or function inside it."""
    stack, out = list(loop.body), []
    while stack:
        node = stack.pop()
        out.append(node)
        if not isinstance(node, (ast.For, ast.While, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))
    return out


def _goes_round_on_error(loop):
    """Whether an ``except`` of this loop continues it: with ``continue``, or by ending without leaving."""
    for node in _own(loop):
        if isinstance(node, ast.ExceptHandler):
            leaves = isinstance(node.body[-1], (ast.Raise, ast.Return, ast.Break))
            if not leaves or any(isinstance(n, ast.Continue) for n in ast.walk(node)):
                return True
    return False


def _retry_loops(tree):
    """The line of each hand-written retry loop (see the module docstring): a ``while`` that goes round
    on an error, a ``for`` over a count that goes round on an error or ends early on success."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.While):
            retrying = _endless(node) and _goes_round_on_error(node)
        elif isinstance(node, ast.For) and _counted(node):
            early = any(isinstance(n, (ast.Return, ast.Break)) for n in _own(node))
            retrying = early or _goes_round_on_error(node)
        else:
            retrying = False
        if retrying:
            found.append(node.lineno)
    return found


def violations(path, rel):
    """The layering rules ``path`` breaks, as short phrases ("imports subprocess", "calls time.sleep")."""
    kind = kind_of(rel)
    if kind not in ("pure", "module", "action", "adapter"):
        return []
    tree = ast.parse(pathlib.Path(path).read_text(), filename=str(path))
    if kind == "adapter":
        found = []
        if _sleeps(tree) and rel != WAIT_RUNNER and rel not in SLEEPS:
            found.append("sleeps outside the wait runner")
        if _retry_loops(tree) and rel not in (RETRY_LAYER, WAIT_RUNNER) and rel not in RETRY_LOOPS:
            found.append("retries outside the retry layer")
        return found
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
    if _sleeps(tree):
        found.append("sleeps outside the wait runner")
    return sorted(set(found))


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


def test_module_utils_holds_the_declared_packages_each_described_in_the_design():
    folder = PLUGINS / "module_utils"
    found = sorted(p.name for p in folder.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert found == sorted(PACKAGES)
    loose = sorted(p.name for p in folder.glob("*.py"))
    assert loose == [], "a file of module_utils belongs in one of its packages: %s" % loose
    # Namespace packages, as kubernetes.core's module_utils/k8s/: ansible-test requires an __init__.py
    # under module_utils to be empty, so what a package holds is said in docs/DESIGN.md alone.
    design = (ROOT / "docs" / "DESIGN.md").read_text()
    for name in PACKAGES:
        assert "`module_utils/%s/`" % name in design, "docs/DESIGN.md describes module_utils/%s/" % name


@pytest.mark.parametrize(
    "rel, kind",
    [
        ("plugins/module_utils/repave/rollout.py", "pure"),
        ("plugins/module_utils/kube/_kube.py", "adapter"),
        ("plugins/module_utils/rollout.py", "other"),  # outside every package
        ("plugins/module_utils/elsewhere/rollout.py", "other"),  # a package nobody declared
        ("plugins/module_utils/repave/deeper/rollout.py", "other"),
    ],
)
def test_the_layer_of_a_module_utils_file_comes_from_its_package_and_name(rel, kind):
    assert kind_of(rel) == kind


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
            "from ansible_collections.goldenimage.pipeline.plugins.module_utils.common._wait"
            " import wait_for\n",
            [
                "imports adapter module_utils.common._wait",
                "imports adapter module_utils.common._wait.wait_for",
            ],
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
    assert violations(path, "plugins/module_utils/golden/pure.py") == expected


def test_checker_fails_the_tree_test_when_a_pure_file_imports_subprocess(tmp_path, monkeypatch):
    plugins = tmp_path / "plugins" / "module_utils" / "golden"
    plugins.mkdir(parents=True)
    (plugins / "clean.py").write_text("import re\n")
    (plugins / "_adapter.py").write_text("import subprocess\n")  # adapters may
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PLUGINS", tmp_path / "plugins")
    monkeypatch.setattr(sys.modules[__name__], "ALLOWED", set())
    test_plugins_keep_the_layering_rule()
    (plugins / "clean.py").write_text("import re\nimport subprocess\n")
    with pytest.raises(AssertionError, match=r"plugins/module_utils/golden/clean\.py.*imports subprocess"):
        test_plugins_keep_the_layering_rule()


def test_checker_on_modules(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("import boto3\nfrom ansible_collections.x import _kube\n")
    # Modules may use adapters; they may not hold a client library or a socket.
    assert violations(path, "plugins/modules/m.py") == ["imports boto3"]
    assert violations(path, "plugins/action/m.py") == ["imports boto3"]
    # Adapters are not checked by this rule.
    assert violations(path, "plugins/module_utils/golden/_m.py") == []


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
        "plugins/module_utils/golden/_m.py",
        "plugins/module_utils/kube/_kube.py",
        "plugins/plugin_utils/_progress.py",
    ):
        assert violations(path, rel) == ["sleeps outside the wait runner"], rel
    # The runner itself, and the retry layer, whose sleep is the pause between two attempts.
    assert violations(path, WAIT_RUNNER) == []
    assert violations(path, RETRY_LAYER) == []


def test_each_adapter_that_sleeps_outside_the_runner_still_does():
    idle = [rel for rel in SLEEPS if not _sleeps(ast.parse((ROOT / rel).read_text()))]
    assert idle == [], "no longer sleeps, remove from SLEEPS: %s" % idle


def test_each_adapter_allowed_a_retry_loop_still_has_one():
    idle = [rel for rel in RETRY_LOOPS if not _retry_loops(ast.parse((ROOT / rel).read_text()))]
    assert idle == [], "no longer loops over attempts, remove from RETRY_LOOPS: %s" % idle


@pytest.mark.parametrize(
    "source",
    [
        # the registry's old retry-once-on-401
        "def f(send):\n    for attempt in (1, 2):\n        try:\n            return send()\n"
        "        except OSError:\n            continue\n",
        # a counted loop around a call that already retries
        "def f(create):\n    for _ in range(24):\n        try:\n            return create()\n"
        "        except ValueError:\n            pass\n",
        # a while loop whose except goes round again (the retry stacked on a client's own)
        "def f(write):\n    while True:\n        try:\n            return write()\n"
        "        except KeyError:\n            continue\n",
        # a loop counting conflicts
        "def f(write):\n    for attempt in range(20):\n        if write():\n            return\n",
    ],
)
def test_an_adapter_may_not_loop_over_attempts(tmp_path, source):
    path = tmp_path / "m.py"
    path.write_text(source)
    assert violations(path, "plugins/module_utils/golden/_m.py") == ["retries outside the retry layer"]
    assert violations(path, RETRY_LAYER) == []


@pytest.mark.parametrize(
    "source",
    [
        # skipping the items that fail is not a retry
        "def f(items, use):\n    for item in items:\n        try:\n            use(item)\n"
        "        except ValueError:\n            continue\n",
        # trying each of a few places in turn
        "def f(read):\n    for sector in (512, 4096):\n        found = read(sector)\n"
        "        if found:\n            return found\n",
        # draining a list, whatever each item does
        "def f(paths, unlink):\n    while paths:\n        try:\n            unlink(paths.pop())\n"
        "        except OSError:\n            pass\n",
        # a loop over pages that follows a token
        "def f(page):\n    token = None\n    while True:\n        token = page(token)\n"
        "        if not token:\n            return\n",
    ],
)
def test_loops_that_are_not_retries_pass(tmp_path, source):
    path = tmp_path / "m.py"
    path.write_text(source)
    assert violations(path, "plugins/module_utils/golden/_m.py") == []
