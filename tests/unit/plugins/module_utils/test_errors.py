import builtins
import json

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args
from ansible_collections.goldenimage.pipeline.plugins.module_utils.common import errors


def test_refusal_names_object_rule_and_move():
    exc = errors.Refusal("DataVolume cozy-public/x", "its class differs", "create a new entry", old="a")
    assert exc.msg == "DataVolume cozy-public/x: its class differs; create a new entry"
    assert exc.result == {"msg": exc.msg, "refused": True, "old": "a"}
    assert isinstance(exc, errors.PipelineError)


def _run(runner, capsys):
    with patch_module_args({}), pytest.raises(SystemExit):
        errors.run_module(AnsibleModule(argument_spec={}), runner)
    return json.loads(capsys.readouterr().out)


def test_run_module_exits_once_with_the_result(capsys):
    assert _run(lambda: {"changed": True, "name": "x"}, capsys)["name"] == "x"


def test_run_module_turns_the_error_into_fail_json(capsys):
    def runner():
        raise errors.PipelineError("create x: boom", left_behind=["pvc/a"])

    result = _run(runner, capsys)
    assert result["failed"] is True
    assert result["msg"] == "create x: boom"
    assert result["left_behind"] == ["pvc/a"]


# Exceptions that are no error but a signal between two functions: a round that is over, credentials
# that need the kubernetes client, a conflict the next attempt resolves, a call asking the retry layer
# for another attempt. Nothing else may stand outside the one base.
SIGNALS = {
    "plugins/module_utils/common/rounds.py": {"RoundOver"},
    "plugins/module_utils/kube/_kube_auth.py": {"NotRaw"},
    "plugins/module_utils/common/_retry.py": {"Again"},
    "plugins/module_utils/repave/_repave_direct.py": {"_Conflict"},
    "plugins/module_utils/microvm/_kernel.py": {"NotCompressed", "Truncated"},  # caught by ERRORS
}


def _exception_classes():
    """``(file, class)`` of every exception class defined in a plugin file, imported from its module."""
    import importlib
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[4]
    for path in sorted((root / "plugins").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if path.name == "__init__.py" or "class " not in path.read_text():
            continue
        name = "ansible_collections.goldenimage.pipeline." + rel[: -len(".py")].replace("/", ".")
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
            ):
                yield rel, value


def test_every_error_of_the_collection_derives_from_the_one_base():
    found = list(_exception_classes())
    outside = sorted(
        "%s:%s" % (rel, cls.__name__)
        for rel, cls in found
        if not issubclass(cls, errors.PipelineError) and cls.__name__ not in SIGNALS.get(rel, ())
    )
    assert outside == []
    # The scan sees the classes this rule was written for.
    names = {cls.__name__ for _rel, cls in found}
    assert {"SealError", "DiskError", "Ext4Error", "PartitionTableError", "VersionError"} <= names
    assert {"ExportError", "ApiError", "ResourceNotFoundError", "EOLViolation", "NotAnImage"} <= names


def test_every_signal_listed_still_exists():
    found = {(rel, cls.__name__) for rel, cls in _exception_classes()}
    assert {(rel, name) for rel, names in SIGNALS.items() for name in names} <= found


BUILTIN_ERRORS = {
    name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, Exception)
}


def _builtin_raises(source):
    """``raise ValueError(...)`` and the like: an error outside the base, which a module's one exit
    would report as a traceback instead of the rule it breaks."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Raise) and node.exc is not None:
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(target, ast.Name) and target.id in BUILTIN_ERRORS:
                found.append("line %d raises %s" % (node.lineno, target.id))
    return found


def test_no_plugin_raises_a_builtin_error():
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[4]
    found = {
        path.relative_to(root).as_posix(): _builtin_raises(path.read_text())
        for path in sorted((root / "plugins").rglob("*.py"))
    }
    assert {rel: raises for rel, raises in found.items() if raises} == {}


@pytest.mark.parametrize(
    "source, expected",
    [
        ("raise ValueError('x')\n", ["line 1 raises ValueError"]),
        ("def f():\n    raise KeyError\n", ["line 2 raises KeyError"]),
        ("raise errors.InvalidValue('x')\n", []),
        ("try:\n    pass\nexcept ValueError:\n    raise\n", []),
    ],
)
def test_the_raise_checker(source, expected):
    assert _builtin_raises(source) == expected


def test_invalid_value_is_in_the_base():
    exc = errors.InvalidValue("window.start '25:00': expected HH:MM")
    assert isinstance(exc, errors.PipelineError)
    assert exc.result == {"msg": "window.start '25:00': expected HH:MM"}


def test_no_error_of_the_collection_is_also_a_builtin_error():
    """One base: an error that is also a ``ValueError`` (or any builtin error) invites callers to catch the
    builtin, which also swallows the bugs it stands for; callers catch ``PipelineError`` or the class."""
    doubled = sorted(
        "%s:%s(%s)" % (rel, cls.__name__, ", ".join(b.__name__ for b in cls.__mro__ if b in BUILTIN_BASES))
        for rel, cls in _exception_classes()
        if issubclass(cls, errors.PipelineError) and any(b in BUILTIN_BASES for b in cls.__mro__)
    )
    assert doubled == []


BUILTIN_BASES = {
    value
    for value in vars(builtins).values()
    if isinstance(value, type)
    and issubclass(value, BaseException)
    and value not in (Exception, BaseException)
}
