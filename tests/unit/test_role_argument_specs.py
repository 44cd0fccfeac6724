"""Every role documents exactly the variables it defaults, in meta/argument_specs.yml.

ansible-core validates role input against argument_specs before the role runs, so a default that
is missing there is rejected at run time, and a documented option without a default is a lie in
the docs. This keeps the two files in step.
"""

from pathlib import Path

import pytest
import yaml

ROLES_DIR = Path(__file__).resolve().parents[2] / "roles"
ROLES = sorted(path.name for path in ROLES_DIR.iterdir() if (path / "tasks").is_dir())


def _load(path: Path) -> dict:
    with path.open(encoding="utf-8") as stream:
        return yaml.safe_load(stream) or {}


def _defaults(role: str) -> dict:
    path = ROLES_DIR / role / "defaults" / "main.yml"
    return _load(path) if path.exists() else {}


def _options(role: str) -> dict:
    specs = _load(ROLES_DIR / role / "meta" / "argument_specs.yml")["argument_specs"]
    return specs["main"].get("options") or {}


def test_roles_are_found():
    assert ROLES, f"no role with a tasks/ directory under {ROLES_DIR}"


@pytest.mark.parametrize("role", ROLES)
def test_every_default_is_documented(role):
    undocumented = sorted(set(_defaults(role)) - set(_options(role)))
    assert not undocumented, (
        f"{role}: defaults/main.yml sets {undocumented}, absent from meta/argument_specs.yml"
    )


@pytest.mark.parametrize("role", ROLES)
def test_every_documented_option_has_a_default(role):
    without_default = sorted(set(_options(role)) - set(_defaults(role)))
    assert not without_default, (
        f"{role}: meta/argument_specs.yml documents {without_default}, absent from defaults/main.yml"
    )


@pytest.mark.parametrize("role", ROLES)
def test_every_option_has_a_type_and_a_description(role):
    for name, spec in _options(role).items():
        assert spec.get("type"), f"{role}: option {name} has no type"
        assert spec.get("description"), f"{role}: option {name} has no description"


@pytest.mark.parametrize("role", ROLES)
def test_documented_defaults_match_defaults_file(role):
    defaults = _defaults(role)
    for name, spec in _options(role).items():
        if "default" in spec and name in defaults:
            assert spec["default"] == defaults[name], (
                f"{role}: {name} defaults to {defaults[name]!r} but is documented as {spec['default']!r}"
            )


@pytest.mark.parametrize("role", ROLES)
def test_options_are_prefixed_with_the_role_name(role):
    unprefixed = sorted(name for name in _options(role) if not name.startswith(f"{role}_"))
    assert not unprefixed, f"{role}: options {unprefixed} do not start with {role}_"


# URL options a role hands to a module of this collection that refuses credentials itself.
URLS_CHECKED_BY_THE_MODULE = {"os_mirror_endpoint_url": "os_mirror_object (_s3_module.s3_module)"}


def _tasks_checking_credentials(role: str) -> str:
    """The text of every task of ``role`` that passes a value through url_without_credentials."""
    checked = []
    for path in sorted((ROLES_DIR / role / "tasks").glob("*.yml")):
        tasks = _load(path)
        for task in tasks if isinstance(tasks, list) else []:
            text = yaml.safe_dump(task)
            if "url_without_credentials" in text:
                checked.append(text)
    return "\n".join(checked)


@pytest.mark.parametrize("role", ROLES)
def test_every_url_option_is_checked_for_credentials(role):
    """A URL option is refused when it carries a password, before the role writes anything: none may be
    stored, rendered into an image or printed (a new URL option without that check fails here)."""
    checked = _tasks_checking_credentials(role)
    urls = [name for name in _options(role) if name.endswith("_url") or name.endswith("_url_base")]
    unchecked = [name for name in urls if name not in checked and name not in URLS_CHECKED_BY_THE_MODULE]
    assert not unchecked, (
        f"{role}: {unchecked} never pass through goldenimage.pipeline.url_without_credentials"
    )


def test_the_golden_namespaces_never_relax_pod_security():
    """The gate VM belongs in a project namespace; no option turns the golden namespaces privileged."""
    choices = _options("golden_namespaces")["golden_namespaces_pod_security"]["choices"]
    assert "privileged" not in choices and "baseline" in choices
