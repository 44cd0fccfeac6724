"""The built tarball installs, carries no development files, and its modules render in ansible-doc."""

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _run(*args, env=None, cwd=ROOT):
    proc = subprocess.run(args, cwd=cwd, env=env, check=False, capture_output=True, text=True)
    assert proc.returncode == 0, "%s failed:\n%s%s" % (" ".join(args), proc.stdout, proc.stderr)
    return proc


def test_build_install_and_doc(tmp_path):
    _run(str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(tmp_path))
    tarball = tmp_path / "goldenimage-pipeline-0.1.0.tar.gz"
    with tarfile.open(tarball) as tar:
        names = tar.getnames()
    assert "MANIFEST.json" in names
    dev_files = (
        "tests/",
        "Makefile",
        ".ci/",
        "bench/",
        "tools/",
        ".venv/",
        ".collections/",
        "playbooks/demo.yml",
    )
    for dev_only in dev_files:
        assert not any(n == dev_only.rstrip("/") or n.startswith(dev_only) for n in names), dev_only

    dest = tmp_path / "installed"
    _run(
        str(BIN / "ansible-galaxy"),
        "collection",
        "install",
        "--no-deps",
        "--force",
        "-p",
        str(dest),
        str(tarball),
    )
    installed = dest / "ansible_collections" / "goldenimage" / "pipeline"
    manifest = json.loads((installed / "MANIFEST.json").read_text())
    deps = manifest["collection_info"]["dependencies"]
    assert set(deps) == {"kubernetes.core", "amazon.aws"}
    assert all("<" in bound for bound in deps.values()), "dependencies must be bounded"

    # Render every module from the INSTALLED copy (dependencies from .collections for the fragments).
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=f"{dest}:{ROOT / '.collections'}")
    env["ANSIBLE_COLLECTIONS_SCAN_SYS_PATH"] = "false"
    modules = sorted(p.stem for p in (installed / "plugins" / "modules").glob("*.py") if p.stem != "__init__")
    assert modules, "the collection ships no modules"
    for name in modules:
        out = _run(str(BIN / "ansible-doc"), "--json", f"goldenimage.pipeline.{name}", env=env).stdout
        doc = json.loads(out)[f"goldenimage.pipeline.{name}"]
        assert doc["doc"]["short_description"], name
        assert doc["examples"].strip(), name
        assert doc["return"], name


def action_groups():
    """Each action group of meta/runtime.yml: (its modules, its metadata entry or {})."""
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
    groups = {}
    for name, entries in runtime["action_groups"].items():
        metadata = [e["metadata"] for e in entries if isinstance(e, dict)]
        groups[name] = ([e for e in entries if isinstance(e, str)], metadata[0] if metadata else {})
    return groups


def test_action_group_lists_every_cluster_module():
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
    assert runtime["requires_ansible"] == ">=2.16.0"
    group, metadata = action_groups()["k8s"]
    # One module_defaults entry configures this collection's cluster modules and kubernetes.core's.
    assert metadata == {"extend_group": ["kubernetes.core.k8s"]}
    assert len(group) == len(set(group)), "duplicated action-group entry"
    for name in group:
        assert (ROOT / "plugins" / "modules" / f"{name}.py").is_file(), name
    # Every module that takes kubernetes.core's auth options must be in the group, and only those.
    for path in (ROOT / "plugins" / "modules").glob("*.py"):
        takes_auth = "kubernetes.core.k8s_auth_options" in path.read_text()
        assert takes_auth == (path.stem in group), path.stem


def test_every_module_documents_the_action_groups_it_is_in():
    """ansible-doc shows each module's attributes.action_group.membership: exactly the groups that list it."""
    groups = action_groups()
    modules = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py") if p.stem != "__init__")
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"),
        ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false",
    )
    out = _run(str(BIN / "ansible-doc"), "--json", *("goldenimage.pipeline.%s" % m for m in modules), env=env)
    docs = json.loads(out.stdout)
    wrong = {}
    for name in modules:
        listed = sorted(
            "goldenimage.pipeline.%s" % g for g, (members, _) in groups.items() if name in members
        )
        attribute = docs["goldenimage.pipeline.%s" % name]["doc"].get("attributes", {}).get("action_group")
        documented = sorted(attribute["membership"]) if attribute else []
        if documented != listed:
            wrong[name] = (documented, listed)
    assert wrong == {}, "documented vs meta/runtime.yml: %s" % wrong


def test_python_floor_is_declared_once_and_built_for():
    """tests/config.yml's floor is the interpreter the execution environment installs and ruff's target."""
    floor = yaml.safe_load((ROOT / "tests" / "config.yml").read_text())["modules"]["python_requires"]
    assert floor == ">=3.11"
    ee = yaml.safe_load((ROOT / "awx" / "execution-environment.yml").read_text())
    assert ee["dependencies"]["python_interpreter"]["package_system"] == "python3.11"
    assert 'target-version = "py311"' in (ROOT / "pyproject.toml").read_text()
    assert sys.version_info[:2] >= (3, 11)


def test_requires_ansible_floor_is_the_one_sanity_and_the_ee_use():
    """meta/runtime.yml's floor is tested (tools/sanity.sh runs ansible-test of that ansible-core) and is the
    lower bound the execution environment installs."""
    import re

    floor = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())["requires_ansible"]
    major_minor = re.fullmatch(r">=(\d+\.\d+)\.0", floor).group(1)
    sanity = (ROOT / "tools" / "sanity.sh").read_text()
    assert "floor_version=%s\n" % major_minor in sanity
    ee = yaml.safe_load((ROOT / "awx" / "execution-environment.yml").read_text())
    assert ee["dependencies"]["ansible_core"]["package_pip"].startswith("ansible-core>=%s," % major_minor)
