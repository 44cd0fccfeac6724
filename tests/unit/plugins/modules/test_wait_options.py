"""One spelling of waits: every module that waits takes ``wait_timeout`` (whole seconds) and ``wait_sleep``
(seconds, a fraction allowed) with the types of ``inputs.WAIT_ARG_SPEC``, and documents each option with
the type, default and aliases its argument spec has (the module's own words over the doc fragments', as
ansible-doc merges them)."""

import importlib
import pathlib

import pytest
import yaml
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import inputs

ROOT = pathlib.Path(__file__).resolve().parents[4]
OWN = "goldenimage.pipeline."
PACKAGE = "ansible_collections.goldenimage.pipeline.plugins"
WAIT_OPTIONS = ("wait", "wait_timeout", "wait_sleep")


def modules():
    return sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py") if p.stem != "__init__")


def waiting_modules():
    found = []
    for name in modules():
        module = importlib.import_module("%s.modules.%s" % (PACKAGE, name))
        spec = module.argument_spec()
        if "wait_timeout" in spec or "wait_sleep" in spec:
            found.append((name, module, spec))
    return found


def documented_options(module):
    """The module's options as ansible-doc shows them: its own fragments' options, overridden key by key by
    the module's own documentation of the same option."""
    doc = yaml.safe_load(module.DOCUMENTATION)
    options = {}
    for slug in doc.get("extends_documentation_fragment") or []:
        if not slug.startswith(OWN):
            continue
        name, _dot, var = slug[len(OWN) :].partition(".")
        fragment = importlib.import_module("%s.doc_fragments.%s" % (PACKAGE, name)).ModuleDocFragment
        text = getattr(fragment, var.upper() if var else "DOCUMENTATION")
        for option, entry in (yaml.safe_load(text).get("options") or {}).items():
            options[option] = dict(entry)
    for option, entry in (doc.get("options") or {}).items():
        options[option] = dict(options.get(option, {}), **entry)
    return options


def test_the_modules_that_wait_are_found():
    names = {name for name, _module, _spec in waiting_modules()}
    expected = {
        "kube_object",
        "seal_verify",
        "clone_gate",
        "golden_selection",
        "dbinstance_repave",
        "bake_wait",
    }
    assert expected <= names


@pytest.mark.parametrize(
    "name, module, spec", [pytest.param(*found, id=found[0]) for found in waiting_modules()]
)
def test_every_wait_has_the_one_spelling_and_type_and_its_documentation_says_so(name, module, spec):
    assert {"wait_timeout", "wait_sleep"} <= set(spec), name
    documented = documented_options(module)
    for option in WAIT_OPTIONS:
        if option not in spec:
            continue
        assert spec[option]["type"] == inputs.WAIT_ARG_SPEC[option]["type"], (name, option)
        entry = documented.get(option)
        assert entry is not None, "%s does not document %s" % (name, option)
        assert entry.get("type") == spec[option]["type"], (name, option)
        assert entry.get("default") == spec[option].get("default"), (name, option)
        assert sorted(entry.get("aliases") or []) == sorted(spec[option].get("aliases") or []), (name, option)


def test_the_old_names_roles_may_pass_are_kept_as_aliases():
    specs = {name: spec for name, _module, spec in waiting_modules()}
    assert specs["clone_gate"]["wait_timeout"]["aliases"] == ["provision_timeout"]
    assert specs["clone_gate"]["wait_sleep"]["aliases"] == ["poll_interval"]
    assert specs["golden_selection"]["wait_timeout"]["aliases"] == ["verify_timeout"]
    assert specs["golden_selection"]["wait_sleep"]["aliases"] == ["verify_interval"]


def test_wait_arg_spec_copies_the_shared_types_with_a_modules_defaults():
    spec = inputs.wait_arg_spec(600, 0.5, wait=None, sleep_aliases=["poll_interval"])
    assert spec == {
        "wait_timeout": {"type": "int", "default": 600},
        "wait_sleep": {"type": "float", "default": 0.5, "aliases": ["poll_interval"]},
    }
    spec["wait_timeout"]["default"] = 1
    assert inputs.WAIT_ARG_SPEC["wait_timeout"]["default"] == 300  # a copy, never the shared dict
    assert inputs.wait_arg_spec()["wait"] == {"type": "bool", "default": True}
