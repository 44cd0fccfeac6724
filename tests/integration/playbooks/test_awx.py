"""Running the collection from AWX / Automation Controller.

- The execution environment: `ansible-builder create` builds a context from awx/execution-environment.yml,
  and `ansible-builder introspect` of the installed collection finds every Python library its plugins
  import and every system package in bindep.txt.
- The configuration as code (awx/controller/goldenimage.yml) validates against the argument specs of the
  awx.awx modules it feeds, read from that collection's own DOCUMENTATION.
- The job templates' playbooks run under ansible-runner (AWX's execution engine) against the lab, with the
  template's survey answers as extra vars and the credentials' injected environment.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import pathlib
import subprocess
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[3]
BIN = pathlib.Path(sys.executable).parent
AWX_MODULES = ROOT / ".collections" / "ansible_collections" / "awx" / "awx" / "plugins" / "modules"
CONTROLLER = yaml.safe_load((ROOT / "awx" / "controller" / "goldenimage.yml").read_text())
# controller_<list> of infra.aap_configuration -> the awx.awx module each entry is passed to.
FEEDS = {
    "controller_credential_types": "credential_type",
    "controller_execution_environments": "execution_environment",
    "controller_projects": "project",
    "controller_templates": "job_template",
    "controller_workflows": "workflow_job_template",
}


def _run(*args, **kwargs):
    proc = subprocess.run(args, capture_output=True, text=True, check=False, **kwargs)
    assert proc.returncode == 0, "%s failed:\n%s%s" % (" ".join(map(str, args)), proc.stdout, proc.stderr)
    return proc


# ------------------------------------------------------------------------------ the execution environment


def third_party_imports():
    """Distributions the plugins import (namespace packages such as dissect by their two-part name)."""
    names = set()
    for path in (ROOT / "plugins").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module)
    dists = importlib.metadata.packages_distributions()
    # What ansible-core itself requires is in every execution environment (introspection drops it).
    core = _requirement_names(importlib.metadata.requires("ansible-core") or [])
    wanted = set()
    for name in names:
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top in ("ansible", "ansible_collections", "__future__"):
            continue
        found = dists.get(top) or []
        if len(found) > 1:  # a namespace package: the distribution named after the subpackage
            two = ".".join(name.split(".")[:2])
            found = [d for d in found if d.lower() == two.lower()]
        assert found, "no installed distribution provides %s" % name
        wanted |= {d.lower() for d in found}
    return wanted - core


def _requirement_names(lines):
    import re

    return {re.split(r"[<>=!~\[; ]", line.strip(), maxsplit=1)[0].lower() for line in lines if line.strip()}


@pytest.fixture(scope="module")
def installed_collection(tmp_path_factory):
    out = tmp_path_factory.mktemp("ee")
    _run(str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(out), cwd=ROOT)
    tarball = next(out.glob("goldenimage-pipeline-*.tar.gz"))
    _run(
        str(BIN / "ansible-galaxy"),
        "collection",
        "install",
        "--no-deps",
        "--force",
        "-p",
        str(out / "c"),
        str(tarball),
    )
    return out / "c"


def test_introspect_finds_every_import_and_system_package(installed_collection):
    proc = _run(str(BIN / "ansible-builder"), "introspect", "--sanitize", str(installed_collection))
    found = yaml.safe_load(proc.stdout)
    python = _requirement_names(found["python"])
    missing = third_party_imports() - python
    assert not missing, "imported by the plugins but not in meta/execution-environment.yml: %s" % missing
    system = " ".join(found["system"])
    for package in ("qemu-utils", "qemu-img", "xorriso", "ntfs-3g", "e2fsprogs", "skopeo"):
        assert package in system


def test_builder_create_writes_a_context_with_the_collections(tmp_path):
    context = tmp_path / "context"
    _run(
        str(BIN / "ansible-builder"),
        "create",
        "-f",
        str(ROOT / "awx" / "execution-environment.yml"),
        "-c",
        str(context),
        "--output-filename",
        "Containerfile",
    )
    assert (context / "Containerfile").is_file()
    galaxy = yaml.safe_load((context / "_build" / "requirements.yml").read_text())
    names = {c["name"] for c in galaxy["collections"]}
    assert {"goldenimage.pipeline", "kubernetes.core", "amazon.aws"} <= names
    containerfile = (context / "Containerfile").read_text()
    assert "introspect" in containerfile  # the collections' own dependencies are resolved in the build


# ------------------------------------------------------------------------------------------ controller


def module_options(name):
    source = (AWX_MODULES / ("%s.py" % name)).read_text()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "DOCUMENTATION":
            return yaml.safe_load(node.value.value)["options"]
    raise AssertionError("awx.awx.%s has no DOCUMENTATION" % name)


def check(value, options, where, problems):
    """Unknown keys, missing required ones and wrong shapes, recursively through suboptions."""
    names = dict(options)
    for option in options.values():
        for alias in option.get("aliases") or ():
            names[alias] = option
    for key in value:
        if key not in names:
            problems.append("%s: unknown key %r" % (where, key))
    for key, option in options.items():
        if option.get("required") and key not in value:
            problems.append("%s: missing required %r" % (where, key))
    for key, item in value.items():
        option = names.get(key)
        if not option or not option.get("suboptions"):
            continue
        if option.get("type") == "list":
            for i, element in enumerate(item):
                check(element, option["suboptions"], "%s.%s[%d]" % (where, key, i), problems)
        elif isinstance(item, dict):
            check(item, option["suboptions"], "%s.%s" % (where, key), problems)


def test_controller_configuration_validates_against_the_awx_modules():
    problems = []
    for variable, module in FEEDS.items():
        options = module_options(module)
        for entry in CONTROLLER[variable]:
            check(entry, options, "%s[%s]" % (variable, entry["name"]), problems)
    node_options = module_options("workflow_job_template_node")
    for workflow in CONTROLLER["controller_workflows"]:
        for node in workflow["workflow_nodes"]:
            # The node module takes the workflow's name; inside workflow_nodes the workflow is implied.
            as_node = dict(node, workflow_job_template=workflow["name"])
            as_node.pop("related", None)
            as_node.pop("unified_job_template", None)
            check(as_node, node_options, "%s/%s" % (workflow["name"], node["identifier"]), problems)
    assert problems == []


def test_controller_configuration_is_consistent():
    templates = {t["name"]: t for t in CONTROLLER["controller_templates"]}
    environments = {e["name"] for e in CONTROLLER["controller_execution_environments"]}
    for template in templates.values():
        assert (ROOT / template["playbook"]).is_file(), template["playbook"]
        assert template["execution_environment"] in environments
        assert template["project"] in {p["name"] for p in CONTROLLER["controller_projects"]}
    for workflow in CONTROLLER["controller_workflows"]:
        nodes = {n["identifier"]: n for n in workflow["workflow_nodes"]}
        for node in nodes.values():
            job = node["unified_job_template"]
            if job["type"] == "job_template":
                assert job["name"] in templates, job["name"]
            for targets in (node.get("related") or {}).values():
                assert {t["identifier"] for t in targets} <= set(nodes)
        approvals = [n for n in nodes.values() if n["unified_job_template"]["type"] == "workflow_approval"]
        assert len(approvals) == 1, "every workflow has one approval before it writes"
    text = (ROOT / "awx" / "controller" / "goldenimage.yml").read_text().lower()
    for word in ("password:", "secret_access_key:", "token:"):
        assert word not in text.replace('secret_access_key: "{{', "")


def test_every_wrapper_playbook_has_a_template():
    wrappers = {str(p.relative_to(ROOT)) for p in (ROOT / "awx" / "playbooks").glob("*.yml")}
    assert wrappers == {t["playbook"] for t in CONTROLLER["controller_templates"]}


def credential_env(lab):
    """What AWX's Kubernetes bearer-token credential injects, for the lab."""
    env = {
        "K8S_AUTH_HOST": lab.url,
        "K8S_AUTH_API_KEY": lab.admin_token,
        "K8S_AUTH_VERIFY_SSL": "False",
    }
    env.update({k: v for k, v in lab.env().items() if k.startswith("AWS_")})
    return env


def run_template(name, extra_vars, lab, tmp_path, monkeypatch):
    """The template's playbook under ansible-runner, as AWX runs a job."""
    import ansible_runner

    monkeypatch.setenv("PATH", "%s%s%s" % (BIN, os.pathsep, os.environ.get("PATH", "")))
    template = next(t for t in CONTROLLER["controller_templates"] if t["name"] == name)
    private = tmp_path / "runner"
    (private / "env").mkdir(parents=True)
    env = dict(credential_env(lab))
    env["ANSIBLE_COLLECTIONS_PATH"] = str(ROOT / ".collections")
    env["ANSIBLE_COLLECTIONS_SCAN_SYS_PATH"] = "false"
    result = ansible_runner.run(
        private_data_dir=str(private),
        project_dir=str(ROOT),
        playbook=str(ROOT / template["playbook"]),
        extravars=extra_vars,
        envvars=env,
        quiet=True,
    )
    stdout = result.stdout.read()
    return result, stdout


@pytest.mark.lab_only
def test_drift_report_template_runs_under_ansible_runner(
    lab, kube_client, kube_namespace, tmp_path, monkeypatch
):
    from kubernetes import client

    core = client.CoreV1Api(kube_client)
    catalog = {
        "default_stream": "22.04",
        "streams": {"22.04": {"tip": "v20260601", "validated": True}},
        "images": {
            "v20260601": {
                "os_version": "22.04",
                "pg_versions": ["16", "17"],
                "build_date": "2026-06-01",
                "imported": True,
            }
        },
    }
    core.create_namespaced_config_map(
        kube_namespace, {"metadata": {"name": "catalog"}, "data": {"catalog.yaml": yaml.safe_dump(catalog)}}
    )
    lab.clear_audit()
    result, stdout = run_template(
        "goldenimage: drift report",
        {
            "repave_namespace": kube_namespace,
            "repave_catalog": {"namespace": kube_namespace, "name": "catalog"},
        },
        lab,
        tmp_path,
        monkeypatch,
    )
    assert result.status == "successful", stdout
    assert "instance | revision | target | verdict | action" in stdout  # the summary the CLI prints
    assert [r for r in lab.mutating_requests() if r["namespace"] == kube_namespace] == []
    assert json.dumps(result.stats)  # AWX reads the same stats
    assert os.environ.get("K8S_AUTH_API_KEY") is None  # the credential reached the job, not this process
