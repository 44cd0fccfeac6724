import json

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args
from ansible_collections.goldenimage.pipeline.plugins.module_utils import errors


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


# Exceptions that are no error but a signal between two functions of one file: a round that is over,
# credentials that need the kubernetes client, a conflict the next attempt resolves. Nothing else may
# stand outside the one base.
SIGNALS = {
    "plugins/modules/baked_image.py": {"RoundOver"},
    "plugins/module_utils/_repave_rollout.py": {"RoundOver"},
    "plugins/module_utils/_kube.py": {"NotRaw"},
    "plugins/module_utils/_repave_direct.py": {"_Conflict"},
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
