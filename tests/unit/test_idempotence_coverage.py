"""Every module that can write has a test in the idempotence suite.

The modules are the files of plugins/modules. A module is covered when a test marked
``@pytest.mark.suite("idempotence")`` names it (``goldenimage.pipeline.<module>``) in its own source or
in what it uses from its file: the module-level constants, helpers and fixtures it refers to, followed
transitively (``task = functools.partial(module_task, MODULE)`` and ``MODULE = "..."`` included), and
asserts that a run reported no change (``["changed"] is False``); naming a module alone covers nothing.

A module that never writes is listed in READ_ONLY with the reason; one that cannot be idempotent by
design is listed in NOT_IDEMPOTENT and must say so in its own documentation (``idempotent: support:
none``). Both lists hold only live modules, each with its reason.
"""

from __future__ import annotations

import ast
import pathlib
import re
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODULES = ROOT / "plugins" / "modules"
TESTS = ROOT / "tests"
PREFIX = "goldenimage.pipeline."
# An assertion that a run changed nothing: result["changed"] is False, changed == False, not r["changed"].
NO_CHANGE = re.compile(
    r"""changed['"]?\]?\)?\s*(is|==)\s*False|not\s+\w+(\[['"]\w+['"]\])*\[['"]changed['"]\]"""
)

READ_ONLY = {
    "artifact_verify": "reads the artifact, its signature and provenance and verifies them; writes nothing",
    "bake_wait": "waits for a bake VM to stop, reading the VM and its console; it writes nothing",
    "baked_image_copies": "gets and lists images, classes, backing images and nodes; always changed=false",
    "baked_image_rebuild_due": "reads APT metadata over HTTP and decides; always changed=false",
    "bucket_exposure": "sends three anonymous reads (GET, HEAD, list) and a signed list; no write",
    "bucket_object_url": "signs a URL locally, at most one HEAD; writes nothing",
    "console_screenshot": "GETs the VNC screenshot subresource; dest is a local copy of what it read "
    "and is never reported as a change",
    "datavolume_wait": "polls a DataVolume's status; writes nothing",
    "dbinstance_spec": "validates and defaults a spec against the catalog it reads; never writes",
    "eol_guard": "pure: compares versions with the end-of-life table; no I/O",
    "os_mirror_verify": "reads the signed catalog (or takes a pinned policy) and the object; writes nothing",
    "golden_info": "lists goldens, selections, claims and DataVolumes; read-only report",
    "known_vars": "compares the run's variables with the documented ones; writes nothing",
    "kube_object_info": "gets or lists objects; read-only",
}
NOT_IDEMPOTENT = {
    "clone_gate": "every run boots a new clone of the candidate, by design: the verdict is about this boot "
    "(its objects are swept by the next run of the same candidate)",
}


def modules():
    return sorted(p.stem for p in MODULES.glob("*.py") if p.stem != "__init__")


def _in_idempotence_suite(node):
    for decorator in node.decorator_list:
        if (
            isinstance(decorator, ast.Call)
            and ast.unparse(decorator.func).endswith("mark.suite")
            and [ast.literal_eval(a) for a in decorator.args] == ["idempotence"]
        ):
            return True
    return False


def _top_level(tree):
    """name -> node of the file's module-level functions, classes and assignments."""
    found = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            found[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        found[name.id] = node
    return found


def _reach(node, top, text):
    """The source of ``node`` and of every module-level definition it uses, transitively."""
    seen, todo, parts = set(), [node], []
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        parts.append(ast.get_source_segment(text, current) or "")
        names = {n.id for n in ast.walk(current) if isinstance(n, ast.Name)}
        if isinstance(current, ast.FunctionDef):
            names |= {a.arg for a in current.args.args}  # fixtures of the same file
        todo.extend(top[name] for name in names if name in top)
    return "\n".join(parts)


def covered():
    """module -> test ids of the idempotence-suite tests that name it."""
    names = modules()
    found = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        text = path.read_text()
        if "idempotence" not in text:
            continue
        tree = ast.parse(text)
        top = _top_level(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and _in_idempotence_suite(node):
                source = _reach(node, top, text)
                if not NO_CHANGE.search(source):
                    continue
                for name in names:
                    if PREFIX + name in source:
                        found.setdefault(name, []).append("%s::%s" % (path.relative_to(ROOT), node.name))
    return found


def _documented_idempotence(name):
    text = (MODULES / (name + ".py")).read_text()
    doc = yaml.safe_load(text.split('DOCUMENTATION = r"""', 1)[1].split('"""', 1)[0])
    return ((doc.get("attributes") or {}).get("idempotent") or {}).get("support")


def test_every_module_that_can_write_has_an_idempotence_suite_test():
    found = covered()
    missing = [
        name
        for name in modules()
        if name not in READ_ONLY and name not in NOT_IDEMPOTENT and name not in found
    ]
    assert not missing, (
        "modules that can write without a @pytest.mark.suite('idempotence') test naming them (a second run: "
        "changed false and no mutating request), or add them to READ_ONLY with the reason: %s" % missing
    )


def test_the_exemptions_name_live_modules_with_a_reason():
    live = set(modules())
    for listed in (READ_ONLY, NOT_IDEMPOTENT):
        assert set(listed) <= live, sorted(set(listed) - live)
        assert all(reason.strip() for reason in listed.values())
    assert not set(READ_ONLY) & set(NOT_IDEMPOTENT)
    # A module exempted as not idempotent says so in its documentation, and one that documents full
    # idempotence is not exempted from proving it.
    for name in NOT_IDEMPOTENT:
        assert _documented_idempotence(name) == "none", name


def test_the_scan_follows_constants_helpers_and_fixtures(tmp_path, monkeypatch):
    (tmp_path / "plugins" / "modules").mkdir(parents=True)
    for name in ("alpha", "beta", "gamma"):
        (tmp_path / "plugins" / "modules" / (name + ".py")).write_text("")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        "import functools\n"
        "import pytest\n"
        'MODULE = "goldenimage.pipeline.alpha"\n'
        "task = functools.partial(module_task, MODULE)\n"
        "@pytest.fixture\n"
        "def made():\n"
        '    return "goldenimage.pipeline.beta"\n'
        '@pytest.mark.suite("idempotence")\n'
        "def test_a(made):\n"
        '    assert task("again")["changed"] is False\n'
        '@pytest.mark.suite("idempotence")\n'
        "def test_c():\n"
        '    return "goldenimage.pipeline.gamma"  # names it, proves nothing\n'
        '@pytest.mark.suite("secrets")\n'
        "def test_b():\n"
        '    return "goldenimage.pipeline.gamma"\n'
    )
    here = sys.modules[__name__]
    monkeypatch.setattr(here, "ROOT", tmp_path)
    monkeypatch.setattr(here, "MODULES", tmp_path / "plugins" / "modules")
    monkeypatch.setattr(here, "TESTS", tmp_path / "tests")
    assert covered() == {"alpha": ["tests/test_x.py::test_a"], "beta": ["tests/test_x.py::test_a"]}
