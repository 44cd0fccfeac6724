"""Every role has a Molecule scenario on the shared base config that converges and proves idempotence, and
`make molecule` (tools/molecule.sh) runs every scenario there is, found on disk rather than listed.

A role added without a scenario fails here; so does a scenario that redefines what the base config
owns (the controller as the one host, the lab as the target), drops converge or idempotence, names a
step it ships no playbook for, or ships a prepare/cleanup playbook its sequence never runs.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
BASE = ROOT / ".config/molecule/config.yml"
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if p.is_dir())
# Steps that run a playbook of the scenario's own (idempotence reruns converge.yml).
PLAYBOOK_STEPS = ("prepare", "converge", "verify", "cleanup")


def base_config() -> dict:
    return yaml.safe_load(BASE.read_text())


def scenarios(role: str) -> list[pathlib.Path]:
    return sorted(p.parent for p in (ROOT / "roles" / role).glob("molecule/*/molecule.yml"))


def list_scenarios(tools_dir: pathlib.Path) -> list[str]:
    run = subprocess.run(
        [str(tools_dir / "molecule.sh"), "--list"], capture_output=True, text=True, timeout=60, check=False
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout.split()


def test_the_base_config_has_no_instance_to_create_and_converges_then_proves_idempotence():
    base = base_config()
    assert base["driver"] == {"name": "default", "options": {"managed": False}}, base["driver"]
    assert [p["name"] for p in base["platforms"]] == ["localhost"], base["platforms"]
    sequence = base["scenario"]["test_sequence"]
    assert sequence.index("converge") < sequence.index("idempotence"), sequence


@pytest.mark.parametrize("role", ROLES)
def test_role_has_a_scenario_on_the_base_config_that_converges_and_proves_idempotence(role):
    found = scenarios(role)
    assert found, "role %s has no Molecule scenario (roles/%s/molecule/<name>/molecule.yml)" % (role, role)
    base = base_config()
    owned = set(base) - {"scenario"}
    for scenario in found:
        where = scenario.relative_to(ROOT)
        own = yaml.safe_load((scenario / "molecule.yml").read_text()) or {}
        # What the base config owns is inherited, never redefined per scenario.
        assert not owned & set(own), "%s redefines %s of %s" % (where, sorted(owned & set(own)), BASE.name)
        assert own.get("scenario", {}).get("name") == scenario.name, (where, own)
        sequence = own["scenario"].get("test_sequence") or base["scenario"]["test_sequence"]
        assert "converge" in sequence and "idempotence" in sequence, (where, sequence)
        assert sequence.index("converge") < sequence.index("idempotence"), (where, sequence)
        for step in PLAYBOOK_STEPS:
            ships = (scenario / ("%s.yml" % step)).is_file()
            assert ships == (step in sequence), "%s: %s.yml %s, test_sequence %s" % (
                where,
                step,
                "shipped" if ships else "missing",
                sequence,
            )


def test_molecule_sh_runs_every_scenario_on_the_base_config():
    listed = list_scenarios(ROOT / "tools")
    on_disk = [str(s.relative_to(ROOT)) for role in ROLES for s in scenarios(role)]
    assert listed == sorted(on_disk), (listed, on_disk)
    assert {pathlib.Path(s).parts[1] for s in listed} == set(ROLES)
    script = (ROOT / "tools/molecule.sh").read_text()
    assert 'base_config="$repo/.config/molecule/config.yml"' in script
    assert 'molecule --base-config "$base_config" test --scenario-name "$name"' in script


def test_molecule_sh_finds_a_new_roles_scenario_without_being_edited(tmp_path):
    (tmp_path / "tools").mkdir()
    shutil.copy2(ROOT / "tools/molecule.sh", tmp_path / "tools/molecule.sh")
    for role, name in (("zeta_new", "default"), ("alpha_new", "default"), ("alpha_new", "restore")):
        scenario = tmp_path / "roles" / role / "molecule" / name
        scenario.mkdir(parents=True)
        (scenario / "molecule.yml").write_text("scenario:\n  name: %s\n" % name)
    (tmp_path / "roles/no_scenario/tasks").mkdir(parents=True)
    assert list_scenarios(tmp_path / "tools") == [
        "roles/alpha_new/molecule/default",
        "roles/alpha_new/molecule/restore",
        "roles/zeta_new/molecule/default",
    ]


def test_make_molecule_runs_the_script_and_ci_runs_make_molecule():
    makefile = (ROOT / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(makefile) if line.startswith("molecule:"))
    recipe = []
    for line in makefile[start + 1 :]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    assert recipe == ["tools/molecule.sh"], recipe
    assert "make molecule" in (ROOT / ".ci/run").read_text().splitlines()
