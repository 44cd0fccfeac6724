"""Running the collection from AWX / Automation Controller.

- The execution environment: `ansible-builder create` builds a context from awx/execution-environment.yml,
  and `ansible-builder introspect` of the installed collection finds every Python library its plugins
  import and every system package in bindep.txt.
- The configuration as code (awx/controller/goldenimage.yml) defines only variables infra.aap_configuration's
  dispatcher reads, validates against the argument specs of the awx.awx modules they feed (read from that
  collection's own DOCUMENTATION), and the README loads it with the connection variables those roles read.
- goldenimage.pipeline is not on Galaxy: the requirements files install it from git, as a project sync does.
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
# What infra.aap_configuration reads: the dispatcher's variables (each -> the awx.awx module it feeds), the
# connection variables of its roles, the configure_aap playbook's directory variable.
AAP = yaml.safe_load((pathlib.Path(__file__).parent / "aap_configuration.yml").read_text())
FEEDS = AAP["dispatch"]
# Standard library of a newer Python than the one running the tests, imported first with a fallback.
NEWER_STDLIB = {"compression"}  # 3.14: compression.zstd, else backports.zstd


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
        if (
            top in sys.stdlib_module_names
            or top in NEWER_STDLIB
            or top in ("ansible", "ansible_collections", "__future__")
        ):
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
    for package in ("qemu-utils", "qemu-img", "xorriso", "ntfs-3g", "e2fsprogs", "wimlib-utils"):
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
    assert {PROJECT["scm_url"], "kubernetes.core", "amazon.aws"} <= names
    containerfile = (context / "Containerfile").read_text()
    assert "introspect" in containerfile  # the collections' own dependencies are resolved in the build
    stages = dict(
        (chunk.split()[2], chunk) for chunk in ("\n" + containerfile).split("\nFROM ")[1:] if chunk.strip()
    )
    # EPEL (and CRB, which EPEL packages may need) in the base stage every other stage starts from, so the
    # final stage's install-from-bindep finds ntfs-3g, p7zip-plugins and wimlib-utils.
    assert "epel-release" in stages["base"] and "--set-enabled crb" in stages["base"]
    assert "install-from-bindep" in stages["final"]
    # git before the galaxy stage's install, which clones goldenimage.pipeline.
    galaxy_stage = stages["galaxy"]
    assert galaxy_stage.index("git-core") < galaxy_stage.index("ansible-galaxy collection install")


def test_bindep_takes_the_epel_packages_from_epel_on_centos():
    """ansible-builder installs bindep's default profile from the distribution's repositories and, on
    CentOS, the `epel` profile with EPEL enabled; skopeo is a test tool and stays out of the EE."""
    from bindep.depends import Depends

    rules = Depends((ROOT / "bindep.txt").read_text())
    centos = ["platform:rpm", "platform:redhat", "platform:centos", "platform:centos-9"]

    def names(profiles):
        return {rule[0] for rule in rules.active_rules(profiles)}

    default, epel = names(centos + ["default"]), names(centos + ["epel"])
    assert epel - default == {"ntfs-3g", "p7zip-plugins", "wimlib-utils"}
    assert {"qemu-img", "xorriso", "e2fsprogs", "gdisk", "openssh-clients"} <= default
    debian = names(["platform:dpkg", "platform:debian", "default"])
    assert {"ntfs-3g", "p7zip-full", "wimtools", "qemu-utils"} <= debian
    for run in (default, epel, debian):
        assert "skopeo" not in run
    assert "skopeo" in names(centos + ["test"]) and "skopeo" in names(["platform:dpkg", "test"])


# ------------------------------------------------------------------------------- collection from git

PROJECT = CONTROLLER["controller_projects"][0]


@pytest.mark.parametrize("requirements", ["awx/requirements.yml", "collections/requirements.yml"])
def test_requirements_take_the_collection_from_its_git_repository(requirements, tmp_path):
    """Not on Galaxy, so by git URL: the project's own repository and branch. The entry installs as
    ansible-galaxy does in a project sync or an EE build (here from a clone of this repository's HEAD)."""
    entries = yaml.safe_load((ROOT / requirements).read_text())["collections"]
    ours = [e for e in entries if e.get("type") == "git"]
    assert ours == [{"name": PROJECT["scm_url"], "type": "git", "version": PROJECT["scm_branch"]}]
    assert not [e for e in entries if e["name"] == "goldenimage.pipeline"], "it is not on Galaxy"

    clone = tmp_path / "pipeline.git"
    _run("git", "clone", "--quiet", "--bare", str(ROOT), str(clone))
    head = _run("git", "rev-parse", "HEAD", cwd=ROOT).stdout.strip()
    local = tmp_path / "requirements.yml"
    local.write_text(yaml.safe_dump({"collections": [dict(ours[0], name="file://%s" % clone, version=head)]}))
    _run(
        str(BIN / "ansible-galaxy"),
        "collection",
        "install",
        "--no-deps",
        "-r",
        str(local),
        "-p",
        str(tmp_path / "c"),
    )
    installed = tmp_path / "c" / "ansible_collections" / "goldenimage" / "pipeline"
    info = json.loads((installed / "MANIFEST.json").read_text())["collection_info"]
    assert (info["namespace"], info["name"]) == ("goldenimage", "pipeline")
    assert (installed / "plugins" / "modules" / "golden_info.py").is_file()
    assert not (installed / "tests").exists()  # built from galaxy.yml, its build_ignore applied


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


def test_controller_variables_are_the_ones_the_dispatcher_reads():
    """The dispatcher runs a role only for a variable it knows; any other name is silently ignored."""
    assert sorted(set(CONTROLLER) - set(FEEDS)) == []
    # Every organization the file's objects name is created by it (aap_organizations).
    named = {e["organization"] for v in FEEDS for e in CONTROLLER.get(v, []) if "organization" in e}
    assert named <= {o["name"] for o in CONTROLLER["aap_organizations"]}


def load_command():
    """The README's command that loads awx/controller/goldenimage.yml: (playbook, {variable: value})."""
    import re
    import shlex

    text = (ROOT / "README.md").read_text().replace("\\\n", " ")
    line = next(line for line in text.splitlines() if "ansible-playbook infra.aap_configuration." in line)
    words = shlex.split(line.strip())
    given = dict(words[i + 1].split("=", 1) for i, word in enumerate(words) if word == "-e")
    playbook = next(w for w in words if re.match(r"infra\.aap_configuration\.", w))
    return playbook, given


def test_readme_loads_the_configuration_with_the_variables_the_roles_read():
    playbook, given = load_command()
    assert playbook == "infra.aap_configuration.configure_aap"
    assert given[AAP["configs_dir"]].endswith("awx/controller")
    assert {"aap_hostname", "aap_token"} <= set(given)
    assert sorted(set(given) - set(AAP["connection"]) - {AAP["configs_dir"]}) == []


def installed_aap_configuration():
    """infra.aap_configuration on the collections path, or None."""
    paths = os.environ.get("ANSIBLE_COLLECTIONS_PATH", "").split(os.pathsep) + [str(ROOT / ".collections")]
    for path in filter(None, paths):
        found = pathlib.Path(path) / "ansible_collections" / "infra" / "aap_configuration"
        if (found / "roles" / "dispatch" / "defaults" / "main.yml").is_file():
            return found
    return None


def test_the_record_of_aap_configuration_matches_its_own_files():
    """aap_configuration.yml against the installed collection: the dispatcher's defaults name each
    variable, the role it runs feeds the recorded module and passes the recorded connection variables."""
    import re

    found = installed_aap_configuration()
    if found is None:
        pytest.skip("infra.aap_configuration is not installed (it is not on PyPI; Galaxy has it)")
    defaults = yaml.safe_load((found / "roles" / "dispatch" / "defaults" / "main.yml").read_text())
    roles = {r["var"]: r["role"] for r in defaults["controller_configuration_dispatcher_roles"]}
    assert set(FEEDS) <= set(roles), sorted(set(FEEDS) - set(roles))
    for variable, module in FEEDS.items():
        tasks = (found / "roles" / roles[variable] / "tasks" / "main.yml").read_text()
        first = yaml.safe_load(tasks)[0]
        assert module in {key.rsplit(".", 1)[-1] for key in first}, (variable, roles[variable], module)
        passed = set(re.findall(r"\{\{ *(aap_\w+) *\| *default\(omit", tasks))
        assert set(AAP["connection"]) <= passed, (roles[variable], sorted(set(AAP["connection"]) - passed))
    configure = (found / "playbooks" / "configure_aap.yml").read_text()
    assert AAP["configs_dir"] in configure and "infra.aap_configuration.dispatch" in configure


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
    for schedule in CONTROLLER["controller_schedules"]:
        chosen = templates[schedule["unified_job_template"]]
        assert chosen.get("ask_variables_on_launch"), "%s: its extra_data would be dropped" % schedule["name"]
        assert "FREQ=DAILY" in schedule["rrule"], schedule["rrule"]
        questions = {q["variable"]: q for q in chosen["survey_spec"]["spec"]}
        for variable, value in schedule["extra_data"].items():
            question = questions.get(variable)
            if question and question["type"] == "multiplechoice":
                assert value in question["choices"], (schedule["name"], variable, value)
        missing = [v for v, q in questions.items() if q.get("required") and v not in schedule["extra_data"]]
        assert missing == [] or set(missing) <= {q for q in questions if "default" in questions[q]}, missing
    # Nothing secret: a key that names a secret holds only a reference to a credential input.
    import re

    def secrets(value, where):
        if isinstance(value, dict):
            for key, item in value.items():
                named = re.search("password|secret|token", str(key), re.I)
                scalar = not isinstance(item, (dict, list, bool))
                if named and scalar and not re.fullmatch(r"\{\{ *\w+ *\}\}", str(item)):
                    yield "%s.%s=%r" % (where, key, item)
                yield from secrets(item, "%s.%s" % (where, key))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                yield from secrets(item, "%s[%d]" % (where, i))

    assert list(secrets(CONTROLLER, "controller")) == []


def role_options():
    """Every option of every role's argument spec in the collection, by variable name."""
    options = {}
    for path in sorted((ROOT / "roles").glob("*/meta/argument_specs.yml")):
        for entry in yaml.safe_load(path.read_text())["argument_specs"].values():
            options.update(entry.get("options") or {})
    return options


def wrapper_text(book):
    """A wrapper playbook and the collection playbooks it imports."""
    text = (ROOT / book).read_text()
    for play in yaml.safe_load(text):
        imported = play.get("ansible.builtin.import_playbook", "")
        if imported.startswith("goldenimage.pipeline."):
            text += (ROOT / "playbooks" / (imported.split(".")[-1] + ".yml")).read_text()
    return text


def survey_questions():
    """(where, question, playbooks) for every template and workflow survey question."""
    templates = {t["name"]: t for t in CONTROLLER["controller_templates"]}
    for template in templates.values():
        for question in (template.get("survey_spec") or {}).get("spec", []):
            yield template["name"], question, [template["playbook"]]
    for workflow in CONTROLLER["controller_workflows"]:
        books = [
            templates[n["unified_job_template"]["name"]]["playbook"]
            for n in workflow["workflow_nodes"]
            if n["unified_job_template"]["type"] == "job_template"
        ]
        for question in (workflow.get("survey_spec") or {}).get("spec", []):
            yield workflow["name"], question, books


def test_survey_questions_follow_the_role_argument_specs():
    """A survey asks only for what a role's argument spec or the wrapper itself reads, offers exactly the
    spec's choices, and defaults to the spec's default."""
    options = role_options()
    problems = []
    for where, question, books in survey_questions():
        variable = question["variable"]
        option = options.get(variable)
        if option is None:
            if not any(variable in wrapper_text(book) for book in books):
                problems.append(
                    "%s: %s is in no role's argument spec and no wrapper reads it" % (where, variable)
                )
            continue
        choices = option.get("choices") if question["type"] == "multiplechoice" else None
        if choices and sorted(map(str, question["choices"])) != sorted(map(str, choices)):
            problems.append("%s: %s offers %s, the spec %s" % (where, variable, question["choices"], choices))
        if (
            "default" in question
            and "default" in option
            and str(question["default"]) != str(option["default"])
        ):
            problems.append(
                "%s: %s defaults to %r, the spec to %r"
                % (where, variable, question["default"], option["default"])
            )
    assert problems == []


def test_every_wrapper_playbook_has_a_template():
    wrappers = {str(p.relative_to(ROOT)) for p in (ROOT / "awx" / "playbooks").glob("*.yml")}
    assert wrappers == {t["playbook"] for t in CONTROLLER["controller_templates"]}


def injected_env(credential_type, inputs, injector="env"):
    """What a credential of one of this file's credential types injects (its ``env`` or ``extra_vars``):
    its injector templates rendered with the credential's inputs (field defaults where none is given)."""
    import jinja2

    kind = next(c for c in CONTROLLER["controller_credential_types"] if c["name"] == credential_type)
    values = {f["id"]: f.get("default", "") for f in kind["inputs"]["fields"]}
    missing = [name for name in kind["inputs"].get("required", []) if name not in inputs]
    assert not missing, "credential of type %r needs %s" % (credential_type, missing)
    values.update(inputs)
    render = jinja2.Environment(undefined=jinja2.StrictUndefined)
    return {k: render.from_string(v).render(values) for k, v in kind["injectors"].get(injector, {}).items()}


def credential_env(lab, credentials):
    """What the template's credentials inject for the lab: AWX's own Kubernetes bearer-token type
    ("goldenimage cluster") and the S3 credential type of awx/controller/goldenimage.yml."""
    env = {}
    if "goldenimage cluster" in credentials:
        env.update(
            {
                "K8S_AUTH_HOST": lab.url,
                "K8S_AUTH_API_KEY": lab.admin_token,
                "K8S_AUTH_VERIFY_SSL": "False",
            }
        )
    if "goldenimage S3" in credentials:
        s3 = lab.s3
        env.update(
            injected_env(
                "goldenimage S3 bucket",
                {
                    "endpoint_url": s3.endpoint_url,
                    "region": s3.region,
                    "access_key_id": s3.access_key,
                    "secret_access_key": s3.secret_key,
                },
            )
        )
    return env


def template(name):
    return next(t for t in CONTROLLER["controller_templates"] if t["name"] == name)


def survey_answers(name, answers):
    """Extra vars as AWX builds them from a survey: every required question answered (its default when
    the test gives none), nothing outside the survey, then the launch-time extra vars on top."""
    spec = (template(name).get("survey_spec") or {}).get("spec", [])
    found = {}
    for question in spec:
        variable = question["variable"]
        if variable in answers:
            found[variable] = answers[variable]
        elif "default" in question:
            found[variable] = question["default"]
        else:
            assert not question.get("required"), "%s: survey question %s unanswered" % (name, variable)
        if question["type"] == "multiplechoice" and variable in found:
            assert found[variable] in question["choices"], (variable, found[variable])
    return found


class Job:
    """One job's outcome: status, stdout, the play recap and the artifacts set_stats recorded."""

    def __init__(self, result):
        self.result = result
        self.status = result.status
        self.stdout = result.stdout.read()
        self.stats = result.stats
        self.artifacts = {}
        for event in result.events:
            if event.get("event") == "playbook_on_stats":
                self.artifacts = event.get("event_data", {}).get("artifact_data") or {}
        self.results = {}
        for event in result.events:
            if event.get("event") in ("runner_on_ok", "runner_on_failed"):
                data = event["event_data"]
                self.results.setdefault(data.get("task"), []).append(data.get("res") or {})

    @property
    def ok(self):
        return self.status == "successful"


def run_template(name, extra_vars, lab, tmp_path, monkeypatch, survey=None, injected_vars=None):
    """The template's playbook under ansible-runner, as AWX runs a job: the survey's answers and the
    launch-time extra vars, and what the template's credentials inject."""
    import uuid

    import ansible_runner

    monkeypatch.setenv("PATH", "%s%s%s" % (BIN, os.pathsep, os.environ.get("PATH", "")))
    chosen = template(name)
    private = tmp_path / ("runner-%s" % uuid.uuid4().hex[:8])
    (private / "env").mkdir(parents=True)
    env = credential_env(lab, chosen.get("credentials") or [])
    env["ANSIBLE_COLLECTIONS_PATH"] = str(ROOT / ".collections")
    env["ANSIBLE_COLLECTIONS_SCAN_SYS_PATH"] = "false"
    extra = dict(survey_answers(name, survey or {}))
    extra.update(extra_vars)
    # Extra vars a credential injects (AWX writes them into the job's extra vars file).
    extra.update(injected_vars or {})
    result = ansible_runner.run(
        private_data_dir=str(private),
        project_dir=str(ROOT),
        playbook=str(ROOT / chosen["playbook"]),
        extravars=extra,
        envvars=env,
        quiet=True,
    )
    return Job(result)


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
    job = run_template(
        "goldenimage: drift report",
        {"repave_catalog": {"namespace": kube_namespace, "name": "catalog"}},
        lab,
        tmp_path,
        monkeypatch,
        survey={"repave_namespace": kube_namespace},
    )
    assert job.ok, job.stdout
    assert "instance | revision | target | verdict | action" in job.stdout  # the summary the CLI prints
    assert [r for r in lab.mutating_requests() if r["namespace"] == kube_namespace] == []
    assert json.dumps(job.stats)  # AWX reads the same stats
    assert os.environ.get("K8S_AUTH_API_KEY") is None  # the credential reached the job, not this process
