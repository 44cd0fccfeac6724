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
