"""What the wait modules' runner tests share: a clock that moves only when slept on, and validated params."""

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator


class Clock:
    def __init__(self, now=0.0):
        self.now = now

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def rejected(spec, rules, params):
    """What AnsibleModule would fail with for ``params`` under a module's spec and option rules."""
    return ArgumentSpecValidator(spec, **rules).validate(params).error_messages


def validated(spec, params):
    """``params`` with the module's defaults filled in, as AnsibleModule would hand them to the runner."""
    result = ArgumentSpecValidator(spec).validate(params)
    assert not result.error_messages, result.error_messages
    return result.validated_parameters


def list_each(kube, queries):
    """``KubeModule.list_each`` for a fake with a ``list``: the same answers, one list after the other."""
    return [kube.list(q["api"], q["kind"], q["namespace"], label_selector=q["selector"]) for q in queries]
