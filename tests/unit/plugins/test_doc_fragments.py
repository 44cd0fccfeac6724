"""Doc fragments as ansible-test reads them: each attribute one string literal (its yamllint check reads
the source, not the imported class, and fails on an expression such as a concatenation)."""

import ast
import pathlib

import yaml

FRAGMENTS = pathlib.Path(__file__).resolve().parents[3] / "plugins" / "doc_fragments"


def literal_problems(source):
    problems = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == "ModuleDocFragment":
            for statement in node.body:
                if isinstance(statement, ast.Assign):
                    name = statement.targets[0].id
                    value = statement.value
                    if not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
                        problems.append("%s is not a string literal" % name)
                    else:
                        yaml.safe_load(value.value)  # and it is YAML
    return problems


def test_every_fragment_attribute_is_one_yaml_string_literal():
    found = {p.name: literal_problems(p.read_text()) for p in sorted(FRAGMENTS.glob("*.py"))}
    assert {name: problems for name, problems in found.items() if problems} == {}


def test_the_checker_refuses_a_concatenation():
    source = 'class ModuleDocFragment(object):\n    A = "options: {}"\n    B = "x" + A\n'
    assert literal_problems(source) == ["B is not a string literal"]
