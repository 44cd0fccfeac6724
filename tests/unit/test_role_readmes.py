"""A role's README keeps one option table, and it is the one tools/role_options.py renders from
meta/argument_specs.yml: an option added, renamed or re-documented in the specs shows up as a failure here
until the README is regenerated (tools/role_options.py --write <role>)."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("role_options", ROOT / "tools" / "role_options.py")
role_options = importlib.util.module_from_spec(spec)
spec.loader.exec_module(role_options)

# Every role has meta/argument_specs.yml, and its README carries the table rendered from it.
REQUIRED = sorted(path.parent.parent.name for path in (ROOT / "roles").glob("*/meta/argument_specs.yml"))
ROLES = sorted(
    path.parent.parent.name
    for path in (ROOT / "roles").glob("*/meta/argument_specs.yml")
    if role_options.BEGIN in (path.parent.parent / "README.md").read_text()
)


@pytest.mark.parametrize("role", REQUIRED)
def test_the_role_has_the_generated_option_table(role):
    assert role in ROLES, "%s: README.md has no option table; run tools/role_options.py --write %s" % (
        role,
        role,
    )


@pytest.mark.parametrize("role", ROLES)
def test_the_readme_table_is_the_one_rendered_from_the_specs(role):
    readme = (ROOT / "roles" / role / "README.md").read_text()
    assert readme.count(role_options.BEGIN) == 1, "%s: README.md needs exactly one option table" % role
    assert role_options.current(role) == role_options.render(role), (
        "%s: README.md's option table differs from meta/argument_specs.yml; "
        "run tools/role_options.py --write %s" % (role, role)
    )


@pytest.mark.parametrize("role", ROLES)
def test_no_second_hand_written_option_table(role):
    readme = (ROOT / "roles" / role / "README.md").read_text()
    outside = readme.replace(role_options.current(role), "")
    rows = [line for line in outside.splitlines() if line.startswith("| `%s_" % role)]
    assert not rows, "%s: option rows outside the generated table: %s" % (role, rows)


def _yaml_blocks(text):
    import re

    import yaml

    for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
        try:
            yield yaml.safe_load(block)
        except yaml.YAMLError:
            continue  # an excerpt, indented as part of a larger file


def _http_sources(node):
    if isinstance(node, dict):
        if isinstance(node.get("http"), dict):
            yield node["http"]
        for value in node.values():
            yield from _http_sources(value)
    elif isinstance(node, list):
        for value in node:
            yield from _http_sources(value)


def test_no_example_reads_an_s3_or_rgw_bucket_with_a_secret_ref():
    """CDI sends a secretRef as basic auth, which S3 and RGW refuse: the examples a reader copies presign."""
    found = []
    for readme in sorted((ROOT / "roles").glob("*/README.md")):
        for block in _yaml_blocks(readme.read_text()):
            for http in _http_sources(block):
                if "rgw" in str(http.get("url", "")) or "s3" in str(http.get("url", "")):
                    found.append((readme.parent.name, http.get("url"), sorted(http)))
    assert found, "the examples of the private-bucket import are gone"
    assert [f for f in found if "secret_ref" in f[2]] == []
    assert all("presign" in f[2] for f in found), found
